//! The verifier must catch each class of bug, and say where.

use shoal_plan::verify::{verify_plans, ErrorKind, Problem, VerifyError};
use shoal_plan::{CallShape, Collective, Op, Plan, Region};

fn allreduce(world: usize, count: usize) -> CallShape {
    CallShape::new(Collective::Allreduce, world, count, 1 << 20)
}

/// A correct two-rank allreduce of one element: exchange, then reduce.
fn exchange(rank: usize) -> Plan {
    let mut p = Plan::new(rank);
    p.scratch_len = 1;
    let out = Region::output(0, 1);
    let c = p.copy(Region::input(0, 1), out, vec![]);
    let s = p.send(1 - rank, 0, out, vec![c]);
    let r = p.recv(1 - rank, 0, Region::scratch(0, 1), vec![]);
    p.reduce(Region::scratch(0, 1), out, vec![s, r]);
    p
}

fn exchange_plans() -> Vec<Plan> {
    vec![exchange(0), exchange(1)]
}

fn fails(shape: CallShape, plans: &[Plan]) -> VerifyError {
    let err = verify_plans(&shape, plans).expect_err("the verifier must reject this");
    // Every message must render and name something useful.
    assert!(!err.to_string().is_empty());
    err
}

#[test]
fn accepts_the_correct_exchange() {
    verify_plans(&allreduce(2, 1), &exchange_plans()).unwrap();
}

#[test]
fn catches_a_missing_recv() {
    let mut plans = exchange_plans();
    // Rank 1 forgets to receive: replace its Recv with a local copy.
    plans[1].steps[2].op = Op::Copy {
        src: Region::input(0, 1),
        dst: Region::scratch(0, 1),
    };
    let err = fails(allreduce(2, 1), &plans);
    assert!(
        matches!(err.kind, ErrorKind::Unmatched { peer: 1, tag: 0 }),
        "{err}"
    );
    assert_eq!((err.rank, err.step), (Some(0), Some(1)));
    assert!(
        err.to_string()
            .contains("rank 0 step 1 (Send to 1 tag 0 Output[0..1])"),
        "{err}"
    );
}

#[test]
fn catches_a_double_counted_contribution() {
    let mut plans = exchange_plans();
    let last = plans[0].steps.len() - 1;
    plans[0].reduce(Region::scratch(0, 1), Region::output(0, 1), vec![last]);
    let err = fails(allreduce(2, 1), &plans);
    assert_eq!(err.rank, Some(0));
    assert!(
        matches!(
            err.kind,
            ErrorKind::WrongResult {
                index: 0,
                problem: Problem::CountedTwice { rank: 1 },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("counted twice"), "{err}");
}

#[test]
fn catches_a_missing_contribution() {
    let mut plans = exchange_plans();
    plans[1].steps.pop();
    let err = fails(allreduce(2, 1), &plans);
    assert_eq!(err.rank, Some(1));
    assert!(
        matches!(
            err.kind,
            ErrorKind::WrongResult {
                problem: Problem::Missing { rank: 0 },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn catches_a_deadlock_when_both_receive_first() {
    let plans: Vec<Plan> = (0..2)
        .map(|rank| {
            let mut p = Plan::new(rank);
            p.scratch_len = 1;
            let out = Region::output(0, 1);
            let c = p.copy(Region::input(0, 1), out, vec![]);
            let r = p.recv(1 - rank, 0, Region::scratch(0, 1), vec![]);
            let s = p.send(1 - rank, 0, out, vec![c, r]);
            p.reduce(Region::scratch(0, 1), out, vec![s]);
            p
        })
        .collect();
    let err = fails(allreduce(2, 1), &plans);
    let ErrorKind::Deadlock { stuck } = &err.kind else {
        panic!("expected a deadlock, got {err}")
    };
    assert_eq!(stuck.len(), 2);
    assert_eq!(
        (stuck[0].rank, stuck[0].step, stuck[0].partner),
        (0, 1, (1, 2))
    );
    assert_eq!(stuck[0].partner_waits_on, vec![1]);
    assert!(err.to_string().contains("deadlock"), "{err}");
}

#[test]
fn catches_a_race() {
    let mut plans = exchange_plans();
    // The reduce no longer waits for the send that reads the same output.
    plans[0].steps[3].deps = vec![2].into();
    let err = fails(allreduce(2, 1), &plans);
    // Step 3 races with the send (step 1) and, as Output may be Input, with
    // the copy (step 0) too; the first one found is reported.
    assert!(
        matches!(err.kind, ErrorKind::Race { other: 0 | 1, .. }),
        "{err}"
    );
    assert_eq!((err.rank, err.step), (Some(0), Some(3)));
}

#[test]
fn catches_an_out_of_bounds_region() {
    let mut plans = exchange_plans();
    plans[1].steps[3].op = Op::Reduce {
        src: Region::scratch(0, 1),
        dst: Region::output(1, 1),
    };
    let err = fails(allreduce(2, 1), &plans);
    assert!(
        matches!(err.kind, ErrorKind::OutOfBounds { buf_len: 1, .. }),
        "{err}"
    );
    assert_eq!((err.rank, err.step), (Some(1), Some(3)));
}

#[test]
fn catches_a_write_to_input() {
    let mut plans = exchange_plans();
    plans[1].steps[2].op = Op::Recv {
        peer: 0,
        tag: 0,
        dst: Region::input(0, 1),
    };
    let err = fails(allreduce(2, 1), &plans);
    assert!(matches!(err.kind, ErrorKind::WritesInput), "{err}");
}

#[test]
fn catches_a_reused_tag_and_bad_lengths() {
    let mut plans = exchange_plans();
    plans[0].send(1, 0, Region::output(0, 1), vec![3]);
    let err = fails(allreduce(2, 1), &plans);
    assert!(
        matches!(
            err.kind,
            ErrorKind::DuplicateTag {
                peer: 1,
                tag: 0,
                first: 1
            }
        ),
        "{err}"
    );

    let shape = allreduce(2, 2);
    let mut plans: Vec<Plan> = (0..2).map(exchange).collect();
    plans[0].steps[1].op = Op::Send {
        peer: 1,
        tag: 0,
        src: Region::output(0, 2),
    };
    let err = fails(shape, &plans);
    assert!(
        matches!(
            err.kind,
            ErrorKind::MessageLength {
                sent: 2,
                received: 1
            }
        ),
        "{err}"
    );
}

#[test]
fn catches_reading_input_after_writing_output_in_place() {
    // Correct out of place, wrong in place: Output is written before the send reads Input.
    let plans: Vec<Plan> = (0..2)
        .map(|rank| {
            let mut p = Plan::new(rank);
            p.scratch_len = 1;
            let out = Region::output(0, 1);
            let r = p.recv(1 - rank, 0, Region::scratch(0, 1), vec![]);
            let c = p.copy(Region::scratch(0, 1), out, vec![r]);
            p.send(1 - rank, 0, Region::input(0, 1), vec![c]);
            p
        })
        .collect();
    let err = fails(allreduce(2, 1), &plans);
    assert!(
        matches!(err.kind, ErrorKind::InPlaceHazard { writer: 1, .. }),
        "{err}"
    );
    assert_eq!(err.step, Some(2));
}

#[test]
fn catches_reducing_input_into_itself_in_place() {
    let mut plans = exchange_plans();
    plans[0].steps[3].op = Op::Reduce {
        src: Region::input(0, 1),
        dst: Region::output(0, 1),
    };
    let err = fails(allreduce(2, 1), &plans);
    assert!(matches!(err.kind, ErrorKind::AliasedOverlap), "{err}");
}

#[test]
fn catches_uninitialised_output() {
    let plans: Vec<Plan> = (0..1).map(Plan::new).collect();
    let err = fails(allreduce(1, 3), &plans);
    assert!(
        matches!(
            err.kind,
            ErrorKind::WrongResult {
                problem: Problem::Uninitialized,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn catches_a_barrier_that_lets_ranks_leave_early() {
    // One ring round: rank r hears only from r - 1.
    let shape = CallShape {
        collective: Collective::Barrier,
        world: 3,
        count: 0,
        root: 0,
        chunk: 1,
        ranks_per_host: 1,
        counts: None,
    };
    let empty = Region::output(0, 0);
    let plans: Vec<Plan> = (0..3)
        .map(|rank| {
            let mut p = Plan::new(rank);
            p.send((rank + 1) % 3, 0, empty, vec![]);
            p.recv((rank + 2) % 3, 0, empty, vec![]);
            p
        })
        .collect();
    let err = fails(shape, &plans);
    assert!(matches!(err.kind, ErrorKind::BarrierLeak { .. }), "{err}");
}

#[test]
fn catches_wrong_plan_count_and_rank() {
    let err = fails(allreduce(3, 1), &exchange_plans());
    assert!(
        matches!(
            err.kind,
            ErrorKind::PlanCount {
                expected: 3,
                got: 2
            }
        ),
        "{err}"
    );
    let mut plans = exchange_plans();
    plans.swap(0, 1);
    let err = fails(allreduce(2, 1), &plans);
    assert!(matches!(err.kind, ErrorKind::RankField { got: 1 }), "{err}");
}

#[test]
fn catches_rank_dependent_reduction_order() {
    // Each rank starts from its own input, then adds the others in rank
    // order: rank 2 computes (x2 + x0) + x1 but rank 0 (x0 + x1) + x2.
    let world = 3;
    let plans: Vec<Plan> = (0..world)
        .map(|rank| {
            let mut p = Plan::new(rank);
            p.scratch_len = world;
            let out = Region::output(0, 1);
            let mut last = p.copy(Region::input(0, 1), out, vec![]);
            let mut sends = Vec::new();
            for q in (0..world).filter(|&q| q != rank) {
                sends.push(p.send(q, 0, Region::input(0, 1), vec![]));
            }
            for q in (0..world).filter(|&q| q != rank) {
                let r = p.recv(q, 0, Region::scratch(q, 1), vec![]);
                let mut deps = vec![r, last];
                deps.extend(&sends);
                last = p.reduce(Region::scratch(q, 1), out, deps);
            }
            p
        })
        .collect();
    let err = fails(allreduce(world, 1), &plans);
    assert!(
        matches!(err.kind, ErrorKind::NotReproducible { index: 0 }),
        "{err}"
    );
    assert_eq!(err.rank, Some(2));
}

#[test]
fn location_blames_a_step_even_when_the_error_is_not_at_one() {
    // A wrong result: the step of that rank that last wrote the element.
    let mut plans = exchange_plans();
    plans[1].reduce(Region::scratch(0, 1), Region::output(0, 1), vec![3]);
    let err = fails(allreduce(2, 1), &plans);
    assert!(matches!(
        err.kind,
        ErrorKind::WrongResult {
            problem: Problem::CountedTwice { rank: 0 },
            ..
        }
    ));
    assert_eq!((err.rank, err.step), (Some(1), None));
    assert_eq!(err.location(&plans), Some((1, 4)));

    // A deadlock: the first stuck step.
    let recv_first = |rank: usize| {
        let mut p = Plan::new(rank);
        p.scratch_len = 1;
        let r = p.recv(1 - rank, 0, Region::scratch(0, 1), vec![]);
        p.send(1 - rank, 0, Region::input(0, 1), vec![r]);
        p
    };
    let plans = vec![recv_first(0), recv_first(1)];
    let err = verify_plans(&allreduce(2, 1), &plans).unwrap_err();
    let ErrorKind::Deadlock { stuck } = &err.kind else {
        panic!("expected a deadlock, got {err}");
    };
    assert_eq!(err.location(&plans), Some((stuck[0].rank, stuck[0].step)));

    // An error at a step: that step.
    let mut plans = exchange_plans();
    plans[0].steps[1].op = Op::Send {
        peer: 1,
        tag: 9,
        src: Region::output(0, 1),
    };
    let err = fails(allreduce(2, 1), &plans);
    assert_eq!(err.location(&plans), Some((0, 1)));
}

#[test]
fn refuses_scratch_past_the_limit_before_modelling_it() {
    // 2^40 elements aborted the process in the allocator, 2^62 panicked on
    // the capacity; the limit for one element on two ranks is 4·2 + 2^20.
    for scratch in [1usize << 40, 1 << 62] {
        let mut plans = exchange_plans();
        plans[1].scratch_len = scratch;
        let err = fails(allreduce(2, 1), &plans);
        assert_eq!(
            err.to_string(),
            format!("rank 1: scratch of {scratch} elements is more than the limit of 1048584 for this call (4 × its 2 elements + 1048576)")
        );
    }
}

#[test]
fn verifies_a_large_count_in_the_memory_of_a_small_one() {
    // 10M elements per rank were 60M symbolic values (2.7 GB); the ring
    // moves a few dozen runs, each of which the verifier models as one.
    let shape = CallShape::new(Collective::Allreduce, 2, 10_000_000, 1 << 18);
    let ring = shoal_plan::find(Collective::Allreduce, "ring").unwrap();
    let mut plans: Vec<Plan> = (0..2).map(|r| (ring.generate)(&shape, r)).collect();
    verify_plans(&shape, &plans).unwrap();
    // A bug is still found, and named by the call's element: rank 1
    // overwrites its last piece of the reduce-scatter instead of reducing
    // into it, so rank 0 gets that piece without rank 1's contribution.
    let last = plans[1]
        .steps
        .iter()
        .rposition(|s| matches!(s.op, Op::RecvReduce { .. }))
        .unwrap();
    let Op::RecvReduce { peer, tag, dst } = plans[1].steps[last].op else {
        unreachable!()
    };
    assert!(dst.offset > 0);
    plans[1].steps[last].op = Op::Recv { peer, tag, dst };
    let err = fails(shape, &plans);
    assert_eq!(
        err.to_string(),
        format!(
            "rank 0: Output[{}]: missing the contribution of rank 1",
            dst.offset
        )
    );
}

#[test]
fn refuses_plans_cut_finer_than_it_models() {
    // Shifting by one cuts between every two elements: nothing merges.
    let count = 2 * shoal_plan::verify::MAX_MODELED;
    let mut plan = Plan::new(0);
    plan.copy(
        Region::input(0, count - 1),
        Region::output(1, count - 1),
        vec![],
    );
    let shape = CallShape::new(Collective::Allgather, 1, count, count);
    let err = fails(shape, &[plan]);
    assert!(
        matches!(err.kind, ErrorKind::TooManySegments { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("more segments than the verifier models"),
        "{err}"
    );
}

#[test]
fn refuses_plans_of_more_steps_than_it_checks() {
    // A ring at a small chunk: steps grow with the count, and the race
    // check's memory with their square.
    let shape = CallShape::new(Collective::Allreduce, 2, 1 << 16, 1);
    let ring = shoal_plan::find(Collective::Allreduce, "ring").unwrap();
    let plans: Vec<Plan> = (0..2).map(|r| (ring.generate)(&shape, r)).collect();
    assert!(plans[0].steps.len() > shoal_plan::verify::MAX_STEPS);
    let err = fails(shape, &plans);
    assert!(matches!(err.kind, ErrorKind::TooManySteps { .. }), "{err}");
    assert_eq!((err.rank, err.step), (Some(0), None));
}

#[test]
fn a_plan_that_keeps_doubling_its_values_is_caught_not_modelled_to_exhaustion() {
    // Reducing two buffers into each other in turn doubles what each holds:
    // 2^80 contributions after 80 rounds, had the verifier kept them all.
    let mut p = Plan::new(0);
    p.scratch_len = 1;
    let (out, scratch) = (Region::output(0, 1), Region::scratch(0, 1));
    let mut last = p.copy(Region::input(0, 1), out, vec![]);
    last = p.copy(Region::input(0, 1), scratch, vec![last]);
    for _ in 0..80 {
        last = p.reduce(out, scratch, vec![last]);
        last = p.reduce(scratch, out, vec![last]);
    }
    let err = fails(allreduce(1, 1), &[p]);
    assert_eq!(
        err.to_string(),
        "rank 0: Output[0]: contribution of rank 0 counted twice"
    );
}
