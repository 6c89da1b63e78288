//! Payloads sent apart from their header (the rendezvous path) between
//! two UCX transports on threads: odd sizes, receives into memory and into
//! a sink (a reduction), a payload that arrives before its receive is
//! posted, and a length mismatch and a call mismatch of such a payload.
//! Each runs with the peers on this host (UCX's first protocol layer) and
//! with each declared on another host (its second layer).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use shoal_transport::*;

/// Payloads from this size on go apart from their header (odd, so that
/// sizes around it do not line up with the sink's 64-byte pieces).
const RNDV: usize = 1000;

/// Runs `body(rank, transport)` for ranks 0 and 1, once with the peers on
/// this host and once with each declared on another; nothing where UCX is
/// not installed (the test then has nothing to run on).
fn pair(body: impl Fn(usize, &dyn Transport) + Send + Sync + 'static) {
    if let Some(e) = ucx_missing() {
        eprintln!("skipped: {e}");
        return;
    }
    let body = Arc::new(body);
    for remote in [false, true] {
        let store = Arc::new(MemStore::default());
        let job = job_id("rndv");
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let (store, job, body) = (store.clone(), job.clone(), body.clone());
                std::thread::spawn(move || {
                    let mut c = UcxConfig::new(r, 2, vec![0, 1], &job);
                    c.local_ranks = if remote { vec![r] } else { vec![0, 1] };
                    c.rndv_bytes = RNDV;
                    let t = UcxTransport::connect(&c, &*store).unwrap();
                    body(r, &t);
                })
            })
            .collect();
        for h in ranks {
            h.join().unwrap();
        }
    }
}

/// A sink that copies what it is handed into a buffer, checking that the
/// pieces come in order and only the last is not a multiple of 64 bytes.
fn sink_into(out: Arc<Mutex<(Vec<u8>, usize)>>) -> Sink {
    Box::new(move |at, bytes| {
        let mut g = out.lock().unwrap();
        assert_eq!(at, g.1, "pieces are handed on in order");
        assert_eq!(
            g.1 % 64,
            0,
            "a piece followed one of a length not a multiple of 64"
        );
        g.0[at..at + bytes.len()].copy_from_slice(bytes);
        g.1 += bytes.len();
    })
}

/// Receives message `step` of `len` bytes from rank 0 through a sink.
fn recv_sunk(t: &dyn Transport, step: u32, len: usize) -> Vec<u8> {
    let sunk = Arc::new(Mutex::new((vec![0u8; len], 0)));
    let into = RecvInto::Sink {
        len,
        sink: sink_into(sunk.clone()),
    };
    // SAFETY: a sink owns what it writes to.
    let req = unsafe { t.irecv(0, tag(step), sig(), into) }.unwrap();
    wait_all(t, &[req]).unwrap();
    let g = sunk.lock().unwrap();
    assert_eq!(g.1, len, "message {step}: the sink got every byte");
    g.0.clone()
}

#[test]
fn payloads_arrive_whole_into_memory_and_sinks() {
    let sizes = [64, RNDV - 1, RNDV, RNDV + 1, 10_007, 3 * 64 * RNDV + 13];
    pair(move |r, t| {
        let data: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| pattern(n, i))
            .collect();
        if r == 0 {
            send_all(t, 1, 0, &data);
            return;
        }
        for (i, want) in data.iter().enumerate() {
            let len = want.len();
            if i == sizes.len() - 1 {
                // Arrives before its receive (and its sender may have
                // closed by then): left in UCX until the receive is posted.
                std::thread::sleep(Duration::from_millis(100));
                t.progress().unwrap();
            }
            let got = if i % 2 == 1 {
                recv_sunk(t, i as u32, len)
            } else {
                recv(t, 0, i as u32, len)
            };
            assert!(got == *want, "message {i} of {len} bytes arrived changed");
        }
    });
}

#[test]
fn a_length_mismatch_discards_the_payload_and_the_channel_goes_on() {
    pair(|r, t| {
        let (big, next) = (pattern(10_007, 1), pattern(3001, 2));
        if r == 0 {
            send_all(t, 1, 0, &[big, next]);
            return;
        }
        let mut short = vec![0u8; 5000];
        let e = wait_all(t, &[irecv(t, 0, 0, &mut short)]).unwrap_err();
        assert!(
            matches!(
                e,
                TransportError::LengthMismatch {
                    expected: 5000,
                    got: 10_007,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            recv(t, 0, 1, next.len()) == next,
            "the message after the discarded one arrived changed"
        );
    });
}

#[test]
fn a_call_mismatch_of_a_rendezvous_message_is_reported() {
    pair(|r, t| {
        if r == 0 {
            let big = pattern(10_007, 3);
            let req = isend(t, 1, 0, &big);
            // The receiver fails the call; the payload goes either way.
            let _ = wait_all(t, &[req]);
            return;
        }
        let mut buf = vec![0u8; 10_007];
        let into = RecvInto::Buffer {
            dst: buf.as_mut_ptr(),
            len: buf.len(),
        };
        let other = CallSig {
            count: sig().count + 1,
            ..sig()
        };
        // SAFETY: `buf` outlives the request.
        let req = unsafe { t.irecv(0, tag(0), other, into) }.unwrap();
        let e = wait_all(t, &[req]).unwrap_err();
        assert!(matches!(e, TransportError::Mismatch { .. }), "{e:?}");
    });
}
