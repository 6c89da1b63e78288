//! The verifier's memory does not grow with the count: every built-in
//! algorithm verifies a call of 8M elements per rank within a small budget.
//! The allocator of this test binary counts the bytes in use, and refuses
//! past a hard cap, so a regression fails here rather than taking the machine.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shoal_plan::verify::verify;
use shoal_plan::{registry, CallShape, Collective};

struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
const HARD_CAP: usize = 1 << 30;

// SAFETY: defers to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        if now > HARD_CAP {
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
            return std::ptr::null_mut();
        }
        PEAK.fetch_max(now, Ordering::Relaxed);
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn every_builtin_verifies_a_large_call_in_little_memory() {
    const BUDGET: usize = 64 << 20;
    for alg in registry() {
        let shape = CallShape {
            root: 1,
            ranks_per_host: 2,
            ..CallShape::new(alg.collective, 4, 8 << 20, 1 << 18)
        };
        let shape = match alg.collective {
            Collective::Barrier => CallShape { count: 0, ..shape },
            _ => shape,
        };
        if alg.refuses(&shape).is_some() {
            continue;
        }
        let plans: Vec<_> = (0..4).map(|r| (alg.generate)(&shape, r)).collect();
        let before = IN_USE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let result = shoal_plan::verify_plans(&shape, &plans);
        let used = PEAK.load(Ordering::Relaxed) - before;
        assert_eq!(result, Ok(()), "{}/{}", alg.collective, alg.name);
        assert!(
            used < BUDGET,
            "{}/{} took {used} bytes to verify",
            alg.collective,
            alg.name
        );
    }
    // `verify` generates and verifies in one go, as `algo.verify` does.
    let ring = shoal_plan::find(Collective::Allgather, "ring").unwrap();
    verify(
        ring,
        &CallShape::new(Collective::Allgather, 3, 5 << 20, 1 << 18),
    )
    .unwrap();
}
