//! The shm slot buffers behind `Expose { slot: true }`: an owner copies a
//! small region into the next of its slots, peers find and read it with
//! plain loads, and a slot is refilled only after its reads are counted.

mod common;

use std::sync::{Arc, Barrier};

use common::{run, sig, Kind};
use shoal_transport::shm::{DEFAULT_SLOT_SIZE, SLOT_BUFFERS};
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
fn slots_are_taken_in_turn_and_wait_for_their_readers() {
    let barrier = Arc::new(Barrier::new(2));
    let last = SLOT_BUFFERS as u64; // the call that fills the last slot
    run(Kind::Shm, 2, 1 << 16, move |rank, t| {
        let w = t.shared().expect("shm has a shared window");
        let s = sig();
        if rank == 0 {
            for call in 1..=last {
                let data = format!("call {call}");
                let placed = w.expose_slot(0, call, &s, data.as_bytes()).unwrap();
                assert_eq!(placed, SlotExpose::Placed(call as usize - 1));
                w.slot_release(call as usize - 1, 1).unwrap();
            }
            // Slot 0 still holds call 1, which rank 1 has not read yet.
            assert!(w.slot_busy());
            let next = w.expose_slot(0, last + 1, &s, b"next").unwrap();
            assert_eq!(next, SlotExpose::Busy);
            barrier.wait();
            barrier.wait();
            assert!(!w.slot_busy());
            let next = w.expose_slot(0, last + 1, &s, b"next").unwrap();
            assert_eq!(next, SlotExpose::Placed(0));
            let big = vec![0u8; DEFAULT_SLOT_SIZE + 1];
            let too_big = w.expose_slot(1, last + 2, &s, &big).unwrap();
            assert_eq!(too_big, SlotExpose::TooBig);
        } else {
            barrier.wait();
            for call in 1..=last {
                let found = w.exposed(0, 0, call, &s).unwrap().expect("exposed");
                let want = format!("call {call}").into_bytes();
                assert_eq!(slot_bytes(found), (want, call as usize - 1));
            }
            assert_eq!(w.exposed(0, 0, last + 1, &s).unwrap(), None);
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

/// Calls whose readers keep up reuse the same buffers (warm in both ranks'
/// caches): an owner fills the first buffer whose reads are counted, not the
/// next in turn.
#[test]
fn the_first_buffer_read_out_is_filled_again() {
    let barrier = Arc::new(Barrier::new(2));
    run(Kind::Shm, 2, 1 << 16, move |rank, t| {
        let w = t.shared().expect("shm has a shared window");
        let s = sig();
        // Call 1 in buffer 0; call 2, while buffer 0 is unread, in buffer 1;
        // once rank 1 has read call 1, call 3 in buffer 0 again.
        if rank == 0 {
            for (call, want) in [(1u64, 0usize), (2, 1)] {
                let placed = w.expose_slot(0, call, &s, b"data").unwrap();
                assert_eq!(placed, SlotExpose::Placed(want), "call {call}");
                w.slot_release(want, 1).unwrap();
            }
            barrier.wait();
            barrier.wait();
            let placed = w.expose_slot(0, 3, &s, b"data").unwrap();
            assert_eq!(placed, SlotExpose::Placed(0), "call 3");
        } else {
            barrier.wait();
            let (data, index) = slot_bytes(w.exposed(0, 0, 1, &s).unwrap().expect("exposed"));
            assert_eq!((&data[..], index), (&b"data"[..], 0));
            w.read_done(0, 0, Some(0)).unwrap();
            barrier.wait();
        }
    });
}
