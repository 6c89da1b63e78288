//! A call is decided once per call shape: later calls of the shape, and
//! `choose_algorithm` and `plan_steps` for it, read the decision the first
//! one made (one rank: the software path alone, nothing to wait for).

use shoal_core::comm::{CollArgs, Communicator};
use shoal_core::exec::CallBuffers;
use shoal_core::init::{init_world, InitArgs};
use shoal_core::provider::Named;
use shoal_core::DType;
use shoal_plan::Collective;

fn allreduce(world: &Communicator, data: &mut [f32], algorithm: Option<Named>) {
    let args = CollArgs {
        algorithm,
        ..CollArgs::new(Collective::Allreduce, data.len(), DType::F32)
    };
    world
        .collective(&args, CallBuffers::in_place(data))
        .unwrap();
}

/// A world of one rank: the software path alone, nothing to wait for.
fn one_rank() -> Communicator {
    init_world(&InitArgs {
        rank: Some(0),
        world_size: Some(1),
        addr: None,
    })
    .unwrap()
}

#[test]
fn calls_inspection_and_plans_read_one_decision_per_call_shape() {
    let world = one_rank();
    // init's own calls (the agreements, calibration) decided theirs.
    let at_start = world.decisions_cached();
    let mut data = [1.0f32, 2.0];
    for _ in 0..3 {
        allreduce(&world, &mut data, None);
    }
    assert_eq!(data, [1.0, 2.0], "one rank sums itself");
    assert_eq!(
        world.decisions_cached(),
        at_start + 1,
        "three calls, one decision"
    );

    // Inspection decides a shape the way its calls will, and they read it.
    let (f32_, sum) = (DType::F32, Collective::Allreduce);
    let chosen = world.choose_algorithm(sum, 3, f32_, 0, None, None).unwrap();
    let steps = world.plan_steps(sum, 3, f32_, 0, None, None).unwrap();
    assert_eq!(world.decisions_cached(), at_start + 2);
    let mut three = [1.0f32; 3];
    allreduce(&world, &mut three, None);
    assert_eq!(
        world.decisions_cached(),
        at_start + 2,
        "the call read the inspected decision"
    );
    assert!(steps > 0, "{chosen} has no steps");

    // A named algorithm is its own decision, resolved before the call.
    let ring = Named::resolve(sum, "ring").unwrap();
    assert_eq!(ring.name(), "ring");
    allreduce(&world, &mut three, Some(ring));
    allreduce(&world, &mut three, Some(ring));
    assert_eq!(world.decisions_cached(), at_start + 3);
    assert_eq!(
        world
            .choose_algorithm(sum, 3, f32_, 0, Some("ring"), None)
            .unwrap(),
        "ring"
    );
    assert_eq!(world.decisions_cached(), at_start + 3);
    // Names of the switch resolve to its providers, whatever the collective:
    // another collective refuses them when called, as before.
    assert_eq!(Named::resolve(sum, "ina").unwrap().name(), "ina");
    let err = world
        .choose_algorithm(Collective::Broadcast, 3, f32_, 0, Some("ina"), None)
        .unwrap_err();
    assert!(
        err.message.contains("is for allreduce only, not broadcast"),
        "{}",
        err.message
    );
    assert!(Named::resolve(sum, "nope").is_err());

    // A new cost makes every decision again.
    let cost = world.engine().selector.cost();
    world.engine().selector.set_cost(cost);
    allreduce(&world, &mut three, Some(ring));
    assert_eq!(
        world.decisions_cached(),
        at_start + 3,
        "made again in place"
    );
}

#[test]
fn a_repeated_call_reads_a_new_decision_once_the_selector_changes() {
    use shoal_core::tune::{self, Machine, Tables, Transport};
    let world = one_rank();
    let (f32_, sum) = (DType::F32, Collective::Allreduce);
    let mut data = [1.0f32; 5];
    // The same call twice: the second reads the decision the first made.
    allreduce(&world, &mut data, None);
    allreduce(&world, &mut data, None);
    let before = world.choose_algorithm(sum, 5, f32_, 0, None, None).unwrap();
    let other = if before == "binomial" {
        "ring"
    } else {
        "binomial"
    };
    let table = tune::parse(&format!("allreduce world=1 0-inf:{other}"), "test").unwrap();
    world.engine().selector.set_tables(Tables {
        tables: vec![table],
        machine: Machine {
            transport: Transport::Shm,
            cpus: 2,
            vendor: tune::CpuVendor::Intel,
        },
    });
    // The call repeated after the change decides again, under the table.
    allreduce(&world, &mut data, None);
    assert_eq!(data, [1.0; 5], "one rank sums itself");
    assert_eq!(
        world.choose_algorithm(sum, 5, f32_, 0, None, None).unwrap(),
        other,
        "the decision made before the table arrived was read again"
    );
}
