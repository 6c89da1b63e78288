//! The core's share of a small call: N in-place 8-byte float32 allreduces
//! from Rust, no Python above them. Prints the best of 5 rounds in ns per
//! call. One rank (`cargo run --release -p shoal-core --example call_cost`)
//! is the software path alone; under `shoal run -n 2` it is the core's
//! whole call with a peer (docs/benchmarks.md, "The call path's cost").

use std::time::Instant;

use shoal_core::comm::CollArgs;
use shoal_core::exec::CallBuffers;
use shoal_core::init::{init_world, InitArgs};
use shoal_core::DType;
use shoal_plan::Collective;

fn main() {
    let n: usize = match std::env::args().nth(1) {
        Some(s) => s.parse().expect("the argument is a number of calls"),
        None => 1_000_000,
    };
    let world = init_world(&InitArgs {
        rank: None,
        world_size: None,
        addr: None,
    })
    .expect("init");
    let mut data = [1.0f32, 2.0];
    let args = CollArgs::new(Collective::Allreduce, data.len(), DType::F32);
    let mut call = || {
        world
            .collective(&args, CallBuffers::in_place(&mut data))
            .expect("allreduce")
    };
    (0..1000).for_each(|_| call()); // decided, planned, warm
    let best = (0..5)
        .map(|_| {
            let start = Instant::now();
            (0..n).for_each(|_| call());
            start.elapsed().as_secs_f64() / n as f64 * 1e9
        })
        .fold(f64::MAX, f64::min);
    println!(
        "rank {} of {}: {best:.0} ns per call",
        world.rank(),
        world.size()
    );
}
