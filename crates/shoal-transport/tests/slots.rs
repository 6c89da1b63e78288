//! The shm slot buffers behind `Expose { slot: true }`: an owner copies a
//! small region into one of its two slots, peers find and read it with
//! plain loads, and a slot is refilled only after its reads are counted.

mod common;

use std::sync::{Arc, Barrier};

use common::{run, sig, Kind};
use shoal_transport::shm::DEFAULT_SLOT_SIZE;
use shoal_transport::{Exposed, SlotExpose, TransportError};

/// The `len` bytes a peer's slot exposure holds.
fn slot_bytes(e: Exposed) -> (Vec<u8>, usize) {
    let Exposed::Slot { data, len, index } = e else {
        panic!("expected a slot exposure, got {e:?}")
    };
    // SAFETY: the owner keeps the slot until this test counts its read.
    (
        unsafe { std::slice::from_raw_parts(data, len) }.to_vec(),
        index,
    )
}

#[test]
fn slots_alternate_and_wait_for_their_readers() {
    let barrier = Arc::new(Barrier::new(2));
    run(Kind::Shm, 2, 1 << 16, move |rank, t| {
        let w = t.shared().expect("shm has a shared window");
        let s = sig();
        if rank == 0 {
            assert_eq!(
                w.expose_slot(0, 1, &s, b"first").unwrap(),
                SlotExpose::Placed(0)
            );
            w.slot_release(0, 1).unwrap();
            assert_eq!(
                w.expose_slot(0, 2, &s, b"second").unwrap(),
                SlotExpose::Placed(1)
            );
            w.slot_release(1, 1).unwrap();
            // Slot 0 still holds call 1, which rank 1 has not read yet.
            assert!(w.slot_busy());
            assert_eq!(w.expose_slot(0, 3, &s, b"third").unwrap(), SlotExpose::Busy);
            barrier.wait();
            barrier.wait();
            assert!(!w.slot_busy());
            assert_eq!(
                w.expose_slot(0, 3, &s, b"third").unwrap(),
                SlotExpose::Placed(0)
            );
            let big = vec![0u8; DEFAULT_SLOT_SIZE + 1];
            assert_eq!(w.expose_slot(1, 4, &s, &big).unwrap(), SlotExpose::TooBig);
        } else {
            barrier.wait();
            let first = w.exposed(0, 0, 1, &s).unwrap().expect("call 1 exposed");
            assert_eq!(slot_bytes(first), (b"first".to_vec(), 0));
            let second = w.exposed(0, 0, 2, &s).unwrap().expect("call 2 exposed");
            assert_eq!(slot_bytes(second), (b"second".to_vec(), 1));
            assert_eq!(w.exposed(0, 0, 3, &s).unwrap(), None);
            assert_eq!(w.exposed(0, 1, 1, &s).unwrap(), None, "another flag");
            let mut other = s;
            other.count += 1;
            let err = w.exposed(0, 0, 1, &other).unwrap_err();
            assert!(matches!(err, TransportError::Mismatch { .. }), "{err}");
            w.read_done(0, 0, Some(0)).unwrap();
            barrier.wait();
        }
    });
}
