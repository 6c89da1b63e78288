//! Flow control on every transport, with a small window so a few messages
//! exhaust it: messages beyond the credit go by rendezvous and still arrive
//! whole, in any receive order, into buffers and sinks; a sender beyond the
//! window waits for its receiver; a length mismatch on a rendezvous
//! message fails only that receive.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use shoal_transport::*;

const WINDOW: usize = 64 << 10;
const MSG: usize = 16 << 10;

#[derive(Clone, Copy)]
enum Via {
    /// shm, the receiver reading rendezvous payloads from the sender.
    ShmRead,
    /// shm without `process_vm_readv`: the receiver asks for payloads.
    ShmAsk,
    Tcp,
    Ucx,
}

impl Via {
    fn kind(self) -> Kind {
        match self {
            Via::ShmRead | Via::ShmAsk => Kind::Shm,
            Via::Tcp => Kind::Tcp,
            Via::Ucx => Kind::Ucx,
        }
    }

    /// The small window, and for `ShmAsk` no reading of the sender's memory.
    fn configure(self, config: &mut Config) {
        match config {
            Config::Shm(c) => {
                c.unexpected_bytes = WINDOW;
                match self {
                    Via::ShmAsk => c.cma_threshold = 0,
                    // (read in place in calls of any size)
                    _ => c.cma_min_call = 0,
                }
            }
            Config::Tcp(c) => c.unexpected_bytes = WINDOW,
            Config::Ucx(c) => c.unexpected_bytes = WINDOW,
        }
    }
}

/// Runs `body(rank, transport)` on two threads.
fn pair<F>(via: Via, body: F)
where
    F: Fn(usize, &dyn Transport) + Send + Sync + 'static,
{
    if matches!(via, Via::Ucx) {
        if let Some(why) = ucx_missing() {
            eprintln!("skipped: {why}");
            return;
        }
    }
    run_with(via.kind(), 2, move |c| via.configure(c), body);
}

macro_rules! every_transport {
    ($name:ident) => {
        mod $name {
            #[test]
            fn shm_read() {
                super::$name(super::Via::ShmRead);
            }
            #[test]
            fn shm_ask() {
                super::$name(super::Via::ShmAsk);
            }
            #[test]
            fn tcp() {
                super::$name(super::Via::Tcp);
            }
            #[test]
            fn ucx() {
                super::$name(super::Via::Ucx);
            }
        }
    };
}

/// Point-to-point messages (they are eager below the window on shm too).
fn p2p_sig() -> CallSig {
    CallSig {
        kind: CallSig::P2P_KIND,
        ..sig()
    }
}

fn isend(t: &dyn Transport, step: u32, data: &[u8]) -> ReqId {
    unsafe {
        t.isend(
            1,
            tag(step),
            p2p_sig(),
            data.as_ptr(),
            data.len(),
            data.len(),
        )
    }
    .unwrap()
}

/// Twenty messages of a quarter window each: the sender is done with the
/// first few only (their credit), the rest wait for receives, which come
/// late and in reverse order, half into sinks.
fn beyond_the_window_senders_wait_and_every_message_arrives(via: Via) {
    pair(via, |r, t| {
        let n = 20;
        if r == 0 {
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| pattern(MSG + i, i)).collect();
            let reqs: Vec<ReqId> = (0..n).map(|i| isend(t, i as u32, &msgs[i])).collect();
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                t.wait(Duration::from_millis(10)).unwrap();
            }
            // (`test` forgets a finished request: wait on the others)
            let pending: Vec<ReqId> = reqs.into_iter().filter(|&q| !t.test(q).unwrap()).collect();
            let done = n - pending.len();
            assert!(
                done < n / 2,
                "{done} of {n} sends finished before any receive"
            );
            wait_all(t, &pending).unwrap();
        } else {
            std::thread::sleep(Duration::from_millis(400));
            for i in (0..n).rev() {
                let want = pattern(MSG + i, i);
                let got = if i % 2 == 0 {
                    recv_p2p(t, i as u32, want.len())
                } else {
                    sink_recv(t, i as u32, want.len())
                };
                assert!(got == want, "message {i} differs");
            }
        }
    });
}
every_transport!(beyond_the_window_senders_wait_and_every_message_arrives);

fn sink_recv(t: &dyn Transport, step: u32, len: usize) -> Vec<u8> {
    let out = Arc::new(std::sync::Mutex::new(vec![0u8; len]));
    let o = out.clone();
    let sink: Sink = Box::new(move |off, bytes| {
        o.lock().unwrap()[off..off + bytes.len()].copy_from_slice(bytes)
    });
    let q = unsafe { t.irecv(0, tag(step), p2p_sig(), RecvInto::Sink { len, sink }) }.unwrap();
    wait_all(t, &[q]).unwrap();
    let v = out.lock().unwrap().clone();
    v
}

/// A message larger than the whole window goes by rendezvous at once; a
/// receive of another length fails, and the pair goes on working.
fn a_rendezvous_length_mismatch_fails_only_that_receive(via: Via) {
    pair(via, |r, t| {
        let big = pattern(2 * WINDOW, 3);
        if r == 0 {
            let a = isend(t, 0, &big);
            let b = isend(t, 1, &big);
            // The mismatched one may complete or fail, as the job would.
            let _ = wait_all(t, &[a]);
            wait_all(t, &[b]).unwrap();
        } else {
            let mut small = vec![0u8; 100];
            let q = post_recv_p2p(t, 0, &mut small);
            match wait_all(t, &[q]) {
                Err(TransportError::LengthMismatch { expected, got, .. }) => {
                    assert_eq!((expected, got), (100, 2 * WINDOW))
                }
                other => panic!("expected a length mismatch, got {other:?}"),
            }
            assert!(recv_p2p(t, 1, big.len()) == big);
        }
    });
}
every_transport!(a_rendezvous_length_mismatch_fails_only_that_receive);

/// A steady stream far beyond the window, received as it comes: credit
/// comes back, so most messages go eagerly and nothing is lost.
fn a_long_stream_keeps_flowing(via: Via) {
    pair(via, |r, t| {
        let n = 400;
        if r == 0 {
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| pattern(4096 + i, i)).collect();
            for (i, m) in msgs.iter().enumerate() {
                let q = isend(t, i as u32, m);
                wait_all(t, &[q]).unwrap();
            }
        } else {
            for i in 0..n {
                assert_eq!(recv_p2p(t, i as u32, 4096 + i), pattern(4096 + i, i));
            }
        }
    });
}
every_transport!(a_long_stream_keeps_flowing);

/// Collective messages to a peer on the host take at most the run-ahead
/// budget of its credit: the sender is done with the first few, the rest
/// wait for their receives, and a point-to-point message still goes
/// eagerly beside them. Every message arrives, in any receive order.
fn collective_messages_run_ahead_by_at_most_the_budget(via: Via) {
    const AHEAD: usize = 2 * (MSG + 64);
    let configure = move |c: &mut Config| {
        via.configure(c);
        if let Config::Shm(c) = c {
            c.run_ahead = AHEAD;
        }
    };
    run_with(via.kind(), 2, configure, |r, t| {
        let n = 10;
        let p2p_step = 100;
        if r == 0 {
            let msgs: Vec<Vec<u8>> = (0..n).map(|i| pattern(MSG, i)).collect();
            let mut reqs: Vec<ReqId> = msgs
                .iter()
                .enumerate()
                .map(|(i, m)| unsafe {
                    t.isend(1, tag(i as u32), sig(), m.as_ptr(), m.len(), m.len())
                })
                .collect::<Result<_>>()
                .unwrap();
            let p2p = pattern(MSG, p2p_step as usize);
            let p2p_req = isend(t, p2p_step, &p2p);
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                t.wait(Duration::from_millis(10)).unwrap();
            }
            assert!(t.test(p2p_req).unwrap(), "the point-to-point send waited");
            reqs.retain(|&q| !t.test(q).unwrap());
            let done = n - reqs.len();
            assert_eq!(done, 2, "{done} of {n} sends finished before any receive");
            wait_all(t, &reqs).unwrap();
        } else {
            std::thread::sleep(Duration::from_millis(400));
            assert!(recv_p2p(t, p2p_step, MSG) == pattern(MSG, p2p_step as usize));
            for i in (0..n).rev() {
                let mut got = vec![0u8; MSG];
                let into = RecvInto::Buffer {
                    dst: got.as_mut_ptr(),
                    len: MSG,
                };
                let q = unsafe { t.irecv(0, tag(i as u32), sig(), into) }.unwrap();
                wait_all(t, &[q]).unwrap();
                assert!(got == pattern(MSG, i), "message {i} differs");
            }
        }
    });
}

#[test]
fn collective_messages_run_ahead_by_at_most_the_budget_shm_read() {
    collective_messages_run_ahead_by_at_most_the_budget(Via::ShmRead);
}

#[test]
fn collective_messages_run_ahead_by_at_most_the_budget_shm_ask() {
    collective_messages_run_ahead_by_at_most_the_budget(Via::ShmAsk);
}

/// An empty collective message sent once the run-ahead budget is spent
/// goes by rendezvous too, and still arrives. A barrier's message (no
/// buffer: a null address) after back-to-back broadcasts went as a read in
/// place from address 0, which the receiver took for "ask for the payload":
/// the sender's request completed on the ack and the receiver waited for a
/// payload that never came (4-rank chain broadcasts between barriers,
/// tests/test_flow_control.py).
fn an_empty_message_over_the_budget_arrives(via: Via) {
    let configure = move |c: &mut Config| {
        via.configure(c);
        if let Config::Shm(c) = c {
            c.run_ahead = MSG + 64;
        }
    };
    run_with(via.kind(), 2, configure, |r, t| {
        let full = tag(0);
        let empty = tag(1);
        if r == 0 {
            let msg = pattern(MSG, 0);
            let sent = unsafe { t.isend(1, full, sig(), msg.as_ptr(), MSG, MSG) }.unwrap();
            let none = unsafe { t.isend(1, empty, sig(), std::ptr::null(), 0, MSG) }.unwrap();
            wait_all(t, &[sent, none]).unwrap();
        } else {
            // (both sends are out before either receive is posted)
            std::thread::sleep(Duration::from_millis(200));
            let into = RecvInto::Buffer {
                dst: std::ptr::null_mut(),
                len: 0,
            };
            let none = unsafe { t.irecv(0, empty, sig(), into) }.unwrap();
            wait_all(t, &[none]).unwrap();
            let mut got = vec![0u8; MSG];
            let into = RecvInto::Buffer {
                dst: got.as_mut_ptr(),
                len: MSG,
            };
            let q = unsafe { t.irecv(0, full, sig(), into) }.unwrap();
            wait_all(t, &[q]).unwrap();
            assert!(got == pattern(MSG, 0));
        }
    });
}

#[test]
fn an_empty_message_over_the_budget_arrives_shm_read() {
    an_empty_message_over_the_budget_arrives(Via::ShmRead);
}

#[test]
fn an_empty_message_over_the_budget_arrives_shm_ask() {
    an_empty_message_over_the_budget_arrives(Via::ShmAsk);
}

/// Receives point-to-point message `step` of `len` bytes from rank 0.
fn recv_p2p(t: &dyn Transport, step: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let q = post_recv_p2p(t, step, &mut buf);
    wait_all(t, &[q]).unwrap();
    buf
}

/// Posts the receive of point-to-point message `step` from rank 0 into
/// `buf`, which must outlive the request (the caller waits on it).
fn post_recv_p2p(t: &dyn Transport, step: u32, buf: &mut [u8]) -> ReqId {
    let into = RecvInto::Buffer {
        dst: buf.as_mut_ptr(),
        len: buf.len(),
    };
    unsafe { t.irecv(0, tag(step), p2p_sig(), into) }.unwrap()
}
