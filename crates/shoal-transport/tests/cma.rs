//! The shm transport's single-copy rendezvous path (`process_vm_readv`):
//! threads of one process (each rank its own transport), and two processes.

mod common;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use common::*;
use shoal_transport::*;

const MIB: usize = 1 << 20;
const THRESHOLD: usize = 256 << 10;

/// Runs `body(rank, transport)` on `world` threads over shm transports with
/// the given ring size and rendezvous threshold (per rank), in calls of any
/// size.
fn run_shm<F>(world: usize, ring: usize, threshold: impl Fn(usize) -> usize, body: F)
where
    F: Fn(usize, &ShmTransport) + Send + Sync + 'static,
{
    let configure = |r: usize, c: &mut ShmConfig| {
        c.ring_size = ring;
        c.cma_threshold = threshold(r);
        c.cma_min_call = 0;
    };
    run_configured(world, configure, body)
}

/// Runs `body(rank, transport)` on `world` threads over shm transports,
/// each configured by `configure`.
fn run_configured<F>(world: usize, configure: impl Fn(usize, &mut ShmConfig), body: F)
where
    F: Fn(usize, &ShmTransport) + Send + Sync + 'static,
{
    let store = Arc::new(MemStore::default());
    let job = job_id("cma");
    let body = Arc::new(body);
    let handles: Vec<_> = (0..world)
        .map(|r| {
            let (store, job, body) = (store.clone(), job.clone(), body.clone());
            let mut c = ShmConfig::new(r, world, (0..world).collect(), &job);
            configure(r, &mut c);
            std::thread::spawn(move || {
                let t = ShmTransport::connect(&c, &*store).unwrap();
                body(r, &t);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Posts a receive of `len` bytes through a sink that checks that pieces
/// arrive in order, every one but the last a multiple of 64.
fn post_sink(t: &dyn Transport, peer: usize, step: u32, len: usize) -> (ReqId, SinkOut) {
    let out: SinkOut = Arc::new(Mutex::new((vec![0u8; len], 0, false, 0)));
    let o = out.clone();
    let sink: Sink = Box::new(move |off, bytes| {
        let mut g = o.lock().unwrap();
        assert_eq!(off, g.1, "pieces arrive in order");
        assert!(!g.2, "a piece followed one that was not a multiple of 64");
        g.2 = bytes.len() % 64 != 0;
        g.0[off..off + bytes.len()].copy_from_slice(bytes);
        g.1 += bytes.len();
        g.3 += 1;
    });
    let req = unsafe {
        t.irecv(peer, tag(step), sig(), RecvInto::Sink { len, sink })
            .unwrap()
    };
    (req, out)
}

/// (bytes, bytes received so far, last piece was ragged, pieces).
type SinkOut = Arc<Mutex<(Vec<u8>, usize, bool, usize)>>;

fn sink_bytes(out: &SinkOut) -> Vec<u8> {
    let g = out.lock().unwrap();
    assert_eq!(g.1, g.0.len(), "every byte arrived");
    g.0.clone()
}

#[test]
fn into_buffer() {
    run_shm(
        2,
        64 << 10,
        |_| THRESHOLD,
        |r, t| {
            assert!(t.uses_cma(1 - r));
            let sizes = [THRESHOLD, MIB + 13, 16 * MIB + 7, THRESHOLD - 1];
            for (i, &len) in sizes.iter().enumerate() {
                if r == 0 {
                    send(t, 1, i as u32, &pattern(len, i));
                } else {
                    assert_eq!(recv(t, 0, i as u32, len), pattern(len, i), "size {len}");
                }
            }
        },
    );
}

#[test]
fn into_sink() {
    run_shm(
        2,
        64 << 10,
        |_| THRESHOLD,
        |r, t| {
            let sizes = [THRESHOLD, THRESHOLD + 1, MIB + 100, 5 * MIB + 3];
            for (i, &len) in sizes.iter().enumerate() {
                if r == 0 {
                    send(t, 1, i as u32, &pattern(len, i));
                } else {
                    let (req, out) = post_sink(t, 0, i as u32, len);
                    wait_all(t, &[req]).unwrap();
                    assert_eq!(sink_bytes(&out), pattern(len, i), "size {len}");
                    // Fed in several cache-sized pieces, not one.
                    assert!(out.lock().unwrap().3 >= len / (256 << 10), "size {len}");
                }
            }
        },
    );
}

/// The send stays pending until the receiver has read the bytes, even when
/// they would fit the ring; the descriptor waits in the unexpected queue.
/// A large message read in place is split: the receiver reads its first
/// half while the sender writes the second into the receive's buffer.
/// Messages below the split size, and every message with splitting off, are
/// read whole. With both ranks sending at once, a rank busy reading leaves
/// the whole message to its receiver; the bytes arrive whole either way.
#[test]
fn large_messages_are_split_between_sender_and_receiver() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for split in [THRESHOLD + 4096, 0] {
        let configure = move |_: usize, c: &mut ShmConfig| {
            c.cma_threshold = THRESHOLD;
            c.cma_min_call = 0;
            c.split_bytes = split;
        };
        run_configured(2, configure, move |r, t| {
            // read whole: below the split size; split: the others
            let sizes = [THRESHOLD + 64, 3 * MIB + 4160, THRESHOLD + 8192];
            let exchange = |first: u32, senders: &[usize]| {
                let peer = 1 - r;
                let msgs: Vec<Vec<u8>> = (0..3).map(|i| pattern(sizes[i], i + 10 * r)).collect();
                let mut reqs = Vec::new();
                if senders.contains(&r) {
                    reqs.extend((0..3).map(|i| isend(t, peer, first + i as u32, &msgs[i])));
                }
                let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
                if senders.contains(&peer) {
                    let into = bufs.iter_mut().enumerate();
                    reqs.extend(into.map(|(i, b)| irecv(t, peer, first + i as u32, b)));
                }
                wait_all(t, &reqs).unwrap();
                for (i, b) in bufs.iter().enumerate().filter(|_| senders.contains(&peer)) {
                    assert!(
                        *b == pattern(sizes[i], i + 10 * peer),
                        "message {i} differs"
                    );
                }
            };
            exchange(0, &[0]);
            // (oversubscribed, nothing is split)
            let halves = if r == 0 && split > 0 && cpus >= 2 {
                2
            } else {
                0
            };
            assert_eq!(t.split_halves_written(), halves, "split at {split}");
            exchange(10, &[0, 1]);
        });
    }
}

#[test]
fn receive_posted_after_arrival() {
    let barrier = Arc::new(Barrier::new(2));
    run_shm(
        2,
        4 << 20,
        |_| THRESHOLD,
        move |r, t| {
            let len = MIB;
            if r == 0 {
                let a = pattern(len, 1);
                let b = pattern(len, 2);
                let sa = isend(t, 1, 0, &a);
                let sb = isend(t, 1, 1, &b);
                std::thread::sleep(Duration::from_millis(100));
                for _ in 0..10 {
                    t.progress().unwrap();
                }
                assert!(
                    !t.test(sa).unwrap(),
                    "completed before the receiver read it"
                );
                assert!(!t.test(sb).unwrap());
                barrier.wait();
                wait_all(t, &[sa, sb]).unwrap();
            } else {
                // Let both descriptors arrive unexpected.
                std::thread::sleep(Duration::from_millis(50));
                t.progress().unwrap();
                barrier.wait();
                // Out of order, one into a sink and one into a buffer.
                let (qb, out) = post_sink(t, 0, 1, len);
                let mut a = vec![0u8; len];
                let qa = irecv(t, 0, 0, &mut a);
                wait_all(t, &[qa, qb]).unwrap();
                assert_eq!(a, pattern(len, 1));
                assert_eq!(sink_bytes(&out), pattern(len, 2));
            }
        },
    );
}

/// A large message of a call small enough to be in cache goes through the
/// ring (its send completes before any receive is posted), one of a larger
/// call is read in place (its send waits for the receiver's read). Where
/// the two ranks outnumber the CPUs, every large message is read in place.
#[test]
fn only_large_calls_read_large_messages_in_place() {
    let fits = std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2;
    for (call_bytes, through_ring) in [(4 * MIB, fits), (8 * MIB, false)] {
        let barrier = Arc::new(Barrier::new(2));
        let configure = |_: usize, c: &mut ShmConfig| {
            c.ring_size = 4 * MIB;
            c.cma_threshold = MIB;
            c.cma_min_call = 8 * MIB;
        };
        run_configured(2, configure, move |r, t| {
            assert!(t.uses_cma(1 - r));
            let sent = pattern(MIB, 3);
            if r == 0 {
                // SAFETY: `sent` outlives the request (waited for below).
                let s = unsafe { t.isend(1, tag(0), sig(), sent.as_ptr(), MIB, call_bytes) };
                let s = s.unwrap();
                let until = Instant::now() + Duration::from_secs(2);
                let mut done = false;
                while !done && Instant::now() < until {
                    done = t.test(s).unwrap();
                }
                assert_eq!(done, through_ring, "a call of {call_bytes} bytes");
                barrier.wait();
                if !done {
                    wait_all(t, &[s]).unwrap();
                }
            } else {
                barrier.wait();
                let mut got = vec![0u8; MIB];
                let q = irecv(t, 0, 0, &mut got);
                wait_all(t, &[q]).unwrap();
                assert_eq!(got, sent);
            }
        });
    }
}

/// The sender's buffer is unmapped while its message waits to be read (what
/// freeing a buffer in flight does): the receive fails naming a bad address,
/// not a dead rank, and the sender learns its message was not read.
#[test]
fn unmapped_sender_buffer_is_a_bad_address() {
    let barrier = Arc::new(Barrier::new(2));
    run_shm(
        2,
        64 << 10,
        |_| THRESHOLD,
        move |r, t| {
            let len = 2 * MIB;
            if r == 0 {
                // SAFETY: a fresh private anonymous mapping of `len` bytes.
                let mem = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                assert_ne!(mem, libc::MAP_FAILED);
                // SAFETY: the request is failed by the receiver, never read by us.
                let s = unsafe { t.isend(1, tag(0), sig(), mem.cast(), len, len) }.unwrap();
                t.progress().unwrap();
                // SAFETY: our mapping; breaking isend's contract is the point.
                unsafe { libc::munmap(mem, len) };
                barrier.wait();
                let e = wait_error(t, s, Duration::from_secs(10));
                assert!(e.to_string().contains("could not read"), "{e}");
            } else {
                barrier.wait();
                let mut got = vec![0u8; len];
                let q = irecv(t, 0, 0, &mut got);
                let e = wait_error(t, q, Duration::from_secs(10));
                let TransportError::Io(msg) = &e else {
                    panic!("a bad address taken for something else: {e:?}");
                };
                assert!(
                    msg.contains("bad address") && msg.contains("freed or is not mapped"),
                    "{msg}"
                );
            }
        },
    );
}

/// Every rank sends many large messages (and some small ones, through a
/// tiny ring that acks share) to every other before receiving any.
#[test]
fn many_both_directions() {
    let world = 3;
    run_shm(
        world,
        4096,
        |_| THRESHOLD,
        move |r, t| {
            let n = 12;
            let len = |i: usize| {
                if i % 3 == 2 {
                    10_000 + i
                } else {
                    MIB + i * 4099
                }
            };
            let msg =
                |from: usize, to: usize, i: usize| pattern(len(i), from * 1000 + to * 100 + i);
            let peers: Vec<usize> = (0..world).filter(|&p| p != r).collect();
            let outs: Vec<Vec<Vec<u8>>> = peers
                .iter()
                .map(|&p| (0..n).map(|i| msg(r, p, i)).collect())
                .collect();
            let mut reqs = Vec::new();
            for (k, &p) in peers.iter().enumerate() {
                for (i, m) in outs[k].iter().enumerate() {
                    reqs.push(isend(t, p, i as u32, m));
                }
            }
            let mut ins: Vec<Vec<Vec<u8>>> = peers
                .iter()
                .map(|_| (0..n).map(|i| vec![0u8; len(i)]).collect())
                .collect();
            let mut sinks = Vec::new();
            for (k, &p) in peers.iter().enumerate() {
                for (i, b) in ins[k].iter_mut().enumerate().rev() {
                    if i % 4 == 1 {
                        let (q, out) = post_sink(t, p, i as u32, len(i));
                        reqs.push(q);
                        sinks.push((msg(p, r, i), out));
                    } else {
                        reqs.push(irecv(t, p, i as u32, b));
                    }
                }
            }
            wait_all(t, &reqs).unwrap();
            for (k, &p) in peers.iter().enumerate() {
                for i in (0..n).filter(|i| i % 4 != 1) {
                    assert_eq!(ins[k][i], msg(p, r, i), "from {p} message {i}");
                }
            }
            for (want, out) in sinks {
                assert_eq!(sink_bytes(&out), want);
            }
        },
    );
}

#[test]
fn length_and_signature_mismatch() {
    let barrier = Arc::new(Barrier::new(2));
    run_shm(
        2,
        64 << 10,
        |_| THRESHOLD,
        move |r, t| {
            let len = MIB;
            if r == 0 {
                // The sender completes although nobody reads its bytes.
                send(t, 1, 0, &pattern(len, 0));
                let s1 = isend(t, 1, 1, &pattern(len, 1));
                barrier.wait();
                wait_all(t, &[s1]).unwrap();
                send(t, 1, 2, &pattern(len, 2));
                // Never read: the receiver aborts over the signature mismatch.
                let data = pattern(len, 3);
                let s3 = isend(t, 1, 3, &data);
                let e = wait_error(t, s3, TIMEOUT);
                assert!(
                    matches!(e, TransportError::Aborted { peer: 1, .. }),
                    "{e:?}"
                );
            } else {
                let mut small = vec![0u8; len - 64];
                let q = irecv(t, 0, 0, &mut small);
                let e = wait_error(t, q, TIMEOUT);
                assert!(matches!(e, TransportError::LengthMismatch { got, .. } if got == len));
                // Unexpected first, then a receive of the wrong length.
                barrier.wait();
                std::thread::sleep(Duration::from_millis(20));
                t.progress().unwrap();
                let q = irecv(t, 0, 1, &mut small);
                assert!(matches!(
                    wait_error(t, q, TIMEOUT),
                    TransportError::LengthMismatch { .. }
                ));
                // The channel still works.
                assert_eq!(recv(t, 0, 2, len), pattern(len, 2));
                // A descriptor of another call signature fails the receive.
                let mut buf = vec![0u8; len];
                let into = RecvInto::Buffer {
                    dst: buf.as_mut_ptr(),
                    len,
                };
                let other = CallSig { count: 1, ..sig() };
                let q = unsafe { t.irecv(0, tag(3), other, into).unwrap() };
                let e = wait_error(t, q, TIMEOUT);
                assert!(matches!(e, TransportError::Mismatch { .. }), "{e:?}");
                t.abort("mismatch");
            }
        },
    );
}

/// A rendezvous send whose receiver aborts fails instead of waiting forever.
#[test]
fn abort_while_awaiting_ack() {
    run_shm(
        2,
        64 << 10,
        |_| THRESHOLD,
        |r, t| {
            let data = pattern(MIB, 0);
            if r == 0 {
                let s = isend(t, 1, 0, &data);
                let e = wait_error(t, s, TIMEOUT);
                assert!(
                    matches!(e, TransportError::Aborted { peer: 1, .. }),
                    "{e:?}"
                );
            } else {
                std::thread::sleep(Duration::from_millis(50));
                t.abort("gave up");
            }
        },
    );
}

/// Threshold 0 on either side: everything goes through the rings (a send
/// that fits the ring completes before any receive is posted).
#[test]
fn disabled_falls_back_to_rings() {
    for off in [0, 1, 2] {
        let barrier = Arc::new(Barrier::new(2));
        let threshold = move |r: usize| if off == 2 || r == off { 0 } else { THRESHOLD };
        run_shm(2, 4 << 20, threshold, move |r, t| {
            assert!(!t.uses_cma(1 - r), "rank {off} turned it off");
            let len = MIB;
            if r == 0 {
                let s = isend(t, 1, 0, &pattern(len, 0));
                wait_all(t, &[s]).unwrap();
                barrier.wait();
                send(t, 1, 1, &pattern(16 * MIB, 1));
            } else {
                barrier.wait();
                assert_eq!(recv(t, 0, 0, len), pattern(len, 0));
                let (q, out) = post_sink(t, 0, 1, 16 * MIB);
                wait_all(t, &[q]).unwrap();
                assert_eq!(sink_bytes(&out), pattern(16 * MIB, 1));
            }
        });
    }
}

const CHILD_ENV: &str = "SHOAL_CMA_TEST_CHILD";

/// Child side of the two-process tests; a no-op when run as a normal test.
#[test]
fn cma_child_entry() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = file_store(dir);
    let job = std::env::var("SHOAL_CMA_TEST_JOB").unwrap();
    let mode = std::env::var("SHOAL_CMA_TEST_MODE").unwrap();
    let c = ShmConfig::new(1, 2, vec![0, 1], &job);
    let t = ShmTransport::connect(&c, &store).unwrap();
    match mode.as_str() {
        "exchange" => {
            assert!(t.uses_cma(0));
            // Send before receiving, as the parent does.
            let mine = pattern(24 * MIB + 5, 1);
            let s = isend(&t, 0, 0, &mine);
            let mut theirs = vec![0u8; 24 * MIB + 5];
            let q = irecv(&t, 0, 0, &mut theirs);
            let (qs, out) = post_sink(&t, 0, 1, 3 * MIB);
            wait_all(&t, &[s, q, qs]).unwrap();
            // Echo both back so the parent checks them.
            send(&t, 0, 2, &theirs);
            send(&t, 0, 3, &sink_bytes(&out));
        }
        "die" => {
            let data = pattern(64 * MIB, 9);
            let s = isend(&t, 0, 0, &data);
            // Killed by the parent while it reads.
            let _ = wait_all(&t, &[s]);
            std::thread::sleep(Duration::from_secs(30));
        }
        m => panic!("unknown mode {m}"),
    }
    unsafe { libc::_exit(0) };
}

fn spawn_child(mode: &str) -> (std::process::Child, ShmTransport, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(job_id("cma-store"));
    std::fs::create_dir_all(&dir).unwrap();
    let job = job_id("cma-proc");
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "cma_child_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &dir)
        .env("SHOAL_CMA_TEST_JOB", &job)
        .env("SHOAL_CMA_TEST_MODE", mode)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let store = file_store(&dir);
    let c = ShmConfig::new(0, 2, vec![0, 1], &job);
    let t = ShmTransport::connect(&c, &store).unwrap();
    (child, t, dir)
}

#[test]
fn two_processes_exchange() {
    let (mut child, t, dir) = spawn_child("exchange");
    assert!(t.uses_cma(1), "this process may read the child's memory");
    let big = pattern(24 * MIB + 5, 0);
    let small = pattern(3 * MIB, 7);
    let s = isend(&t, 1, 0, &big);
    let s2 = isend(&t, 1, 1, &small);
    let mut got = vec![0u8; 24 * MIB + 5];
    let q = irecv(&t, 1, 0, &mut got);
    wait_all(&t, &[s, s2, q]).unwrap();
    assert_eq!(got, pattern(24 * MIB + 5, 1));
    assert_eq!(recv(&t, 1, 2, big.len()), big);
    assert_eq!(recv(&t, 1, 3, small.len()), small);
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir_all(dir);
}

/// The sender dies while the receiver reads its memory: the receive fails
/// with `PeerDied`, found by the failing read itself.
#[test]
fn sender_dies_during_pull() {
    let (mut child, t, dir) = spawn_child("die");
    let pid = Arc::new(AtomicI32::new(child.id() as i32));
    let p = pid.clone();
    let len = 64 * MIB;
    let pieces = Arc::new(Mutex::new(0usize));
    let n = pieces.clone();
    let sink: Sink = Box::new(move |_, _| {
        *n.lock().unwrap() += 1;
        let pid = p.swap(0, Ordering::SeqCst);
        if pid != 0 {
            // SAFETY: our child; reaped right away so its pid is gone.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
    });
    let q = unsafe {
        t.irecv(1, tag(0), sig(), RecvInto::Sink { len, sink })
            .unwrap()
    };
    let t0 = Instant::now();
    let e = wait_error(&t, q, Duration::from_secs(10));
    match &e {
        TransportError::PeerDied { peer: 1, detail } => {
            assert!(detail.contains("process_vm_readv"), "{detail}")
        }
        e => panic!("{e:?}"),
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(*pieces.lock().unwrap() < len / (64 << 10), "stopped early");
    assert_eq!(pid.load(Ordering::SeqCst), 0, "the child was killed");
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(dir);
}
