//! The verifier's checks of the shared-memory steps (Expose, PeerRead,
//! PeerReadReduce, Release): each broken variant of a correct two-rank
//! shared-memory allreduce is rejected with its own error.

use shoal_plan::verify::{verify_plans, ErrorKind};
use shoal_plan::{json, CallShape, Collective, Op, Plan, Region};

fn one_host(world: usize, count: usize) -> CallShape {
    CallShape {
        ranks_per_host: world,
        ..CallShape::new(Collective::Allreduce, world, count, 1 << 20)
    }
}

/// Rank `me` of a correct 2-rank allreduce of 4 elements: expose Input,
/// reduce both in rank order into scratch, release, copy out.
fn plan(me: usize) -> Plan {
    let mut p = Plan::new(me);
    p.scratch_len = 4;
    let (input, acc) = (Region::input(0, 4), Region::scratch(0, 4));
    let e = p.expose(0, input, vec![]);
    let first = if me == 0 {
        p.copy(input, acc, vec![])
    } else {
        p.peer_read(0, 0, 0, acc, false, vec![])
    };
    let second = if me == 1 {
        p.reduce(input, acc, vec![first])
    } else {
        p.peer_read(1, 0, 0, acc, true, vec![first])
    };
    let rel = p.release(0, 1, vec![e]);
    p.copy(acc, Region::output(0, 4), vec![second, rel]);
    p
}

fn plans() -> Vec<Plan> {
    vec![plan(0), plan(1)]
}

fn kind_of(shape: &CallShape, plans: &[Plan]) -> ErrorKind {
    let err = verify_plans(shape, plans).expect_err("the verifier must reject this");
    assert!(!err.to_string().is_empty());
    err.kind
}

#[test]
fn accepts_the_correct_plan_and_round_trips_it_through_json() {
    let shape = one_host(2, 4);
    verify_plans(&shape, &plans()).unwrap();
    let call = json::CallPlans {
        shape: shape.clone(),
        algorithm: None,
        plans: plans(),
    };
    let back = json::CallPlans::from_json(&call.to_json()).unwrap();
    assert_eq!(back.plans, plans());
}

#[test]
fn rejects_reading_a_rank_on_another_host() {
    let shape = CallShape {
        ranks_per_host: 1,
        ..one_host(2, 4)
    };
    assert!(matches!(
        kind_of(&shape, &plans()),
        ErrorKind::OtherHost { .. }
    ));
}

#[test]
fn rejects_reading_a_flag_never_exposed() {
    let mut p = plans();
    p[1].steps[1].op = Op::PeerRead {
        peer: 0,
        flag: 7,
        offset: 0,
        dst: Region::scratch(0, 4),
    };
    assert!(matches!(
        kind_of(&one_host(2, 4), &p),
        ErrorKind::NotExposed { peer: 0, flag: 7 }
    ));
}

#[test]
fn rejects_reading_past_the_exposed_region() {
    let mut p = plans();
    p[1].steps[1].op = Op::PeerRead {
        peer: 0,
        flag: 0,
        offset: 2,
        dst: Region::scratch(0, 4),
    };
    assert!(matches!(
        kind_of(&one_host(2, 4), &p),
        ErrorKind::ExposedBounds { .. }
    ));
}

#[test]
fn rejects_a_release_with_the_wrong_read_count() {
    let mut p = plans();
    p[0].steps[3].op = Op::Release { flag: 0, reads: 2 };
    assert!(matches!(
        kind_of(&one_host(2, 4), &p),
        ErrorKind::ReleaseCount {
            declared: 2,
            actual: 1,
            ..
        }
    ));
}

#[test]
fn rejects_an_expose_without_release() {
    let mut p = plans();
    p[0].steps[3].op = Op::Copy {
        src: Region::input(0, 1),
        dst: Region::scratch(0, 1),
    };
    // The copy races too; what must be named is the missing Release.
    let kind = kind_of(&one_host(2, 4), &p);
    assert!(matches!(kind, ErrorKind::Unreleased { flag: 0 }), "{kind}");
}

#[test]
fn rejects_a_release_that_does_not_wait_for_its_expose() {
    let mut p = plans();
    p[0].steps[3].deps.clear();
    let kind = kind_of(&one_host(2, 4), &p);
    assert!(matches!(kind, ErrorKind::Unreleased { flag: 0 }), "{kind}");
}

#[test]
fn rejects_writing_the_exposed_region_before_the_release() {
    // The final copy to Output (one buffer with Input in place) no longer
    // waits for the Release: the peer may still be reading.
    let mut p = plans();
    p[0].steps[4].deps = vec![2].into();
    let kind = kind_of(&one_host(2, 4), &p);
    assert!(
        matches!(kind, ErrorKind::WritesExposed { expose: 0, .. }),
        "{kind}"
    );
}

#[test]
fn rejects_exposing_a_flag_twice() {
    let mut p = plans();
    p[0].expose(0, Region::input(0, 1), vec![]);
    assert!(matches!(
        kind_of(&one_host(2, 4), &p),
        ErrorKind::DuplicateFlag { flag: 0, first: 0 }
    ));
}

#[test]
fn rejects_unknown_json_ops_with_the_valid_list() {
    let call = json::CallPlans {
        shape: one_host(2, 4),
        algorithm: None,
        plans: plans(),
    };
    let text = call.to_json().replace("\"peer_read\"", "\"peer_peek\"");
    let err = json::CallPlans::from_json(&text).unwrap_err().to_string();
    assert!(
        err.contains("peer_read_reduce") && err.contains("peer_peek"),
        "{err}"
    );
}

/// `plans()` with every rank's Input exposed through its shared slot.
fn slot_plans() -> Vec<Plan> {
    let mut p = plans();
    for plan in &mut p {
        let Op::Expose { ref mut slot, .. } = plan.steps[0].op else {
            unreachable!("step 0 exposes")
        };
        *slot = true;
    }
    p
}

#[test]
fn accepts_a_slot_exposure_and_round_trips_it_through_json() {
    let shape = one_host(2, 4);
    verify_plans(&shape, &slot_plans()).unwrap();
    let call = json::CallPlans {
        shape,
        algorithm: None,
        plans: slot_plans(),
    };
    let text = call.to_json();
    assert!(text.contains("\"expose_slot\""), "{text}");
    assert_eq!(
        json::CallPlans::from_json(&text).unwrap().plans,
        slot_plans()
    );
}

#[test]
fn rejects_a_second_slot_exposure() {
    let mut p = slot_plans();
    let e = p[0].expose_slot(1, Region::input(0, 1), vec![]);
    p[0].release(1, 0, vec![e]);
    let kind = kind_of(&one_host(2, 4), &p);
    assert!(matches!(kind, ErrorKind::SecondSlot { first: 0 }), "{kind}");
}

#[test]
fn checks_a_slot_exposure_as_if_in_place() {
    // A region too large for the slot is exposed in place, so writing it
    // before the Release stays an error with `slot` set.
    let mut p = slot_plans();
    p[0].steps[4].deps = vec![2].into();
    let kind = kind_of(&one_host(2, 4), &p);
    assert!(
        matches!(kind, ErrorKind::WritesExposed { expose: 0, .. }),
        "{kind}"
    );
}
