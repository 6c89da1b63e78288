//! Payloads sent apart from their header (the rendezvous path) between
//! two UCX transports on threads: odd sizes, receives into memory and into
//! a sink (a reduction), a payload that arrives before its receive is
//! posted, and a length mismatch and a call mismatch of such a payload.
//! Each runs with the peers on this host (UCX's first protocol layer) and
//! with each declared on another host (its second layer).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shoal_bootstrap::store::MemStore;

use super::*;
use crate::Sink;

/// Payloads from this size on go apart from their header (odd, so that
/// sizes around it do not line up with the sink's 64-byte pieces).
const RNDV: usize = 1000;
const LIMIT: Duration = Duration::from_secs(20);

/// Runs `body(rank, transport)` for ranks 0 and 1, once with the peers on
/// this host and once with each declared on another; false where UCX is
/// not installed (the test then has nothing to run on).
fn pair(body: impl Fn(usize, &UcxTransport) + Send + Sync + 'static) -> bool {
    if let Err(e) = probe_library(DEFAULT_LIB) {
        eprintln!("skipped: {e}");
        return false;
    }
    static N: AtomicUsize = AtomicUsize::new(0);
    let body = Arc::new(body);
    for remote in [false, true] {
        let store = Arc::new(MemStore::default());
        let job = format!(
            "rndv-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
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
    true
}

fn tag(step: u32) -> Tag {
    Tag {
        comm: 1,
        seq: 1,
        step,
    }
}

fn sig(count: u64) -> CallSig {
    CallSig {
        kind: 1,
        dtype: 2,
        op: 0,
        algo: 0,
        root: 0,
        count,
        history: 0,
    }
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 31 + seed * 7) % 251) as u8)
        .collect()
}

/// Waits for `req`: its result.
fn wait(t: &UcxTransport, req: ReqId) -> Result<()> {
    let deadline = Instant::now() + LIMIT;
    while !t.test(req)? {
        assert!(Instant::now() < deadline, "request {req} timed out");
        t.wait(Duration::from_millis(5))?;
    }
    Ok(())
}

fn send(t: &UcxTransport, step: u32, data: &[u8], count: u64) -> ReqId {
    // SAFETY: every caller waits for the request before `data` goes.
    unsafe { t.isend(1, tag(step), sig(count), data.as_ptr(), data.len()) }.unwrap()
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
            let reqs: Vec<ReqId> = (0..sizes.len())
                .map(|i| send(t, i as u32, &data[i], 7))
                .collect();
            for req in reqs {
                wait(t, req).unwrap();
            }
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
            let into_sink = i % 2 == 1;
            let sunk = Arc::new(Mutex::new((vec![0u8; len], 0)));
            let mut buf = vec![0u8; len];
            let into = if into_sink {
                RecvInto::Sink {
                    len,
                    sink: sink_into(sunk.clone()),
                }
            } else {
                RecvInto::Buffer {
                    dst: buf.as_mut_ptr(),
                    len,
                }
            };
            // SAFETY: `buf` outlives the request, waited for below.
            let req = unsafe { t.irecv(0, tag(i as u32), sig(7), into) }.unwrap();
            wait(t, req).unwrap();
            let got = if into_sink {
                let g = sunk.lock().unwrap();
                assert_eq!(g.1, len, "message {i}: the sink got every byte");
                g.0.clone()
            } else {
                buf
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
            let a = send(t, 0, &big, 7);
            let b = send(t, 1, &next, 7);
            wait(t, a).unwrap();
            wait(t, b).unwrap();
            return;
        }
        let mut short = vec![0u8; 5000];
        let into = RecvInto::Buffer {
            dst: short.as_mut_ptr(),
            len: short.len(),
        };
        // SAFETY: `short` outlives the request.
        let req = unsafe { t.irecv(0, tag(0), sig(7), into) }.unwrap();
        let e = wait(t, req).unwrap_err();
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
        let mut buf = vec![0u8; next.len()];
        let into = RecvInto::Buffer {
            dst: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: `buf` outlives the request.
        let req = unsafe { t.irecv(0, tag(1), sig(7), into) }.unwrap();
        wait(t, req).unwrap();
        assert!(
            buf == next,
            "the message after the discarded one arrived changed"
        );
    });
}

#[test]
fn a_call_mismatch_of_a_rendezvous_message_is_reported() {
    pair(|r, t| {
        if r == 0 {
            let big = pattern(10_007, 3);
            let req = send(t, 0, &big, 7);
            // The receiver fails the call; the payload goes either way.
            let _ = wait(t, req);
            return;
        }
        let mut buf = vec![0u8; 10_007];
        let into = RecvInto::Buffer {
            dst: buf.as_mut_ptr(),
            len: buf.len(),
        };
        // SAFETY: `buf` outlives the request.
        let req = unsafe { t.irecv(0, tag(0), sig(8), into) }.unwrap();
        let e = wait(t, req).unwrap_err();
        assert!(matches!(e, TransportError::Mismatch { .. }), "{e:?}");
    });
}
