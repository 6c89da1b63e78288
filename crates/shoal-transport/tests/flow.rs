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

fn build(via: Via, rank: usize, job: &str, store: &dyn KvStore) -> Box<dyn Transport> {
    match via {
        Via::ShmRead | Via::ShmAsk => {
            let mut c = ShmConfig::new(rank, 2, vec![0, 1], job);
            c.unexpected_bytes = WINDOW;
            if matches!(via, Via::ShmAsk) {
                c.cma_threshold = 0;
            }
            Box::new(ShmTransport::connect(&c, store).unwrap())
        }
        Via::Tcp => {
            let mut c = TcpConfig::new(rank, 2, vec![0, 1], job, test_key());
            c.unexpected_bytes = WINDOW;
            Box::new(TcpTransport::connect(&c, store).unwrap())
        }
        Via::Ucx => {
            let mut c = UcxConfig::new(rank, 2, vec![0, 1], job);
            c.local_ranks = vec![0, 1];
            c.unexpected_bytes = WINDOW;
            Box::new(UcxTransport::connect(&c, store).unwrap())
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
    let store = Arc::new(MemStore::default());
    let job = job_id("flow");
    let body = Arc::new(body);
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let (store, job, body) = (store.clone(), job.clone(), body.clone());
            std::thread::spawn(move || body(r, &*build(via, r, &job, &*store)))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
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
    unsafe { t.isend(1, tag(step), p2p_sig(), data.as_ptr(), data.len()) }.unwrap()
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
                    let mut buf = vec![0u8; want.len()];
                    let q = unsafe {
                        t.irecv(
                            0,
                            tag(i as u32),
                            p2p_sig(),
                            RecvInto::Buffer {
                                dst: buf.as_mut_ptr(),
                                len: buf.len(),
                            },
                        )
                    }
                    .unwrap();
                    wait_all(t, &[q]).unwrap();
                    buf
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
            let q = unsafe {
                t.irecv(
                    0,
                    tag(0),
                    p2p_sig(),
                    RecvInto::Buffer {
                        dst: small.as_mut_ptr(),
                        len: small.len(),
                    },
                )
            }
            .unwrap();
            match wait_all(t, &[q]) {
                Err(TransportError::LengthMismatch { expected, got, .. }) => {
                    assert_eq!((expected, got), (100, 2 * WINDOW))
                }
                other => panic!("expected a length mismatch, got {other:?}"),
            }
            let mut buf = vec![0u8; big.len()];
            let q = unsafe {
                t.irecv(
                    0,
                    tag(1),
                    p2p_sig(),
                    RecvInto::Buffer {
                        dst: buf.as_mut_ptr(),
                        len: buf.len(),
                    },
                )
            }
            .unwrap();
            wait_all(t, &[q]).unwrap();
            assert!(buf == big);
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

fn recv_p2p(t: &dyn Transport, step: u32, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let q = unsafe {
        t.irecv(
            0,
            tag(step),
            p2p_sig(),
            RecvInto::Buffer {
                dst: buf.as_mut_ptr(),
                len,
            },
        )
    }
    .unwrap();
    wait_all(t, &[q]).unwrap();
    buf
}
