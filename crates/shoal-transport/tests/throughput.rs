//! Prints (does not assert) throughput and small-message latency between two
//! threads, for shm and tcp. Run with `--nocapture --test-threads=1`.

mod common;

use std::sync::Arc;
use std::time::Instant;

use common::*;
use shoal_transport::*;

/// One-way streaming: rank 0 sends `iters` messages of `len` bytes, rank 1
/// receives them into one buffer; returns MB/s measured on the receiver.
fn stream(kind: Kind, len: usize, iters: usize) -> f64 {
    let result = Arc::new(std::sync::Mutex::new(0.0));
    let res = result.clone();
    run(kind, 2, shm::DEFAULT_RING_SIZE, move |r, t| {
        let mut buf = vec![1u8; len];
        // Warm up (and synchronize the two sides).
        if r == 0 {
            send(t, 1, 0, &buf);
        } else {
            recv(t, 0, 0, len);
        }
        let window = 8;
        let t0 = Instant::now();
        let mut i = 0;
        while i < iters {
            let n = window.min(iters - i);
            if r == 0 {
                let reqs: Vec<ReqId> = (0..n)
                    .map(|k| isend(t, 1, (1 + i + k) as u32, &buf))
                    .collect();
                wait_all(t, &reqs).unwrap();
            } else {
                let ptr = buf.as_mut_ptr();
                let reqs: Vec<ReqId> = (0..n)
                    .map(|k| {
                        let into = RecvInto::Buffer { dst: ptr, len };
                        unsafe { t.irecv(0, tag((1 + i + k) as u32), sig(), into).unwrap() }
                    })
                    .collect();
                wait_all(t, &reqs).unwrap();
            }
            i += n;
        }
        if r == 1 {
            *res.lock().unwrap() = (len * iters) as f64 / t0.elapsed().as_secs_f64() / 1e6;
        }
    });
    let v = *result.lock().unwrap();
    v
}

/// Round-trip half time of `len`-byte ping-pongs, in microseconds.
fn latency(kind: Kind, len: usize, iters: usize) -> f64 {
    let result = Arc::new(std::sync::Mutex::new(0.0));
    let res = result.clone();
    run(kind, 2, shm::DEFAULT_RING_SIZE, move |r, t| {
        let data = vec![3u8; len];
        let mut buf = vec![0u8; len];
        let mut t0 = Instant::now();
        for i in 0..iters + 100 {
            if i == 100 {
                t0 = Instant::now();
            }
            let step = i as u32;
            if r == 0 {
                let s = isend(t, 1, step, &data);
                let q = irecv(t, 1, step, &mut buf);
                wait_all(t, &[s, q]).unwrap();
            } else {
                let q = irecv(t, 0, step, &mut buf);
                wait_all(t, &[q]).unwrap();
                send(t, 0, step, &data);
            }
        }
        if r == 0 {
            *res.lock().unwrap() = t0.elapsed().as_secs_f64() / iters as f64 / 2.0 * 1e6;
        }
    });
    let v = *result.lock().unwrap();
    v
}

#[test]
fn print_throughput() {
    for kind in [Kind::Shm, Kind::Tcp] {
        let small = stream(kind, 64 << 10, 2000);
        let big = stream(kind, 16 << 20, 40);
        let lat = latency(kind, 8, 2000);
        println!("{kind:?}: 64 KiB {small:.0} MB/s, 16 MiB {big:.0} MB/s, 8 B latency {lat:.1} us");
    }
}

/// Microseconds per exchange of `len` bytes between two ranks that send to
/// each other and reduce (f32 sum) what arrives into a buffer through a sink,
/// as a ring allreduce step does; median of batches. `cma_threshold` 0 is
/// the ring path, 1 the rendezvous path for every message.
fn exchange_reduce(len: usize, cma_threshold: usize, iters: usize) -> (f64, f64) {
    let cpu0 = process_cpu();
    let wall = exchange_reduce_wall(len, cma_threshold, iters);
    let cpu = (process_cpu() - cpu0) / ((iters / 5 + 2) * 5) as f64 * 1e6;
    (wall, cpu)
}

/// CPU seconds this process used so far (all threads).
fn process_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: plain clock read into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn exchange_reduce_wall(len: usize, cma_threshold: usize, iters: usize) -> f64 {
    let store = Arc::new(MemStore::default());
    let job = job_id("xchg");
    let result = Arc::new(std::sync::Mutex::new(0.0));
    let handles: Vec<_> = (0..2)
        .map(|r| {
            let (store, job, res) = (store.clone(), job.clone(), result.clone());
            std::thread::spawn(move || {
                let mut c = ShmConfig::new(r, 2, vec![0, 1], &job);
                c.cma_threshold = cma_threshold;
                c.cma_min_call = 0;
                let t = ShmTransport::connect(&c, &*store).unwrap();
                let src = vec![1.0f32; len / 4];
                let dst = Arc::new(std::sync::Mutex::new(vec![0.0f32; len / 4]));
                let mut batches = Vec::new();
                for b in 0..(iters / 5 + 1) * 5 + 5 {
                    if b % 5 == 0 {
                        batches.push((Instant::now(), 0usize));
                    }
                    let d = dst.clone();
                    let sink: Sink = Box::new(move |off, bytes: &[u8]| {
                        let mut d = d.lock().unwrap();
                        let d = &mut d[off / 4..(off + bytes.len()) / 4];
                        for (x, c) in d.iter_mut().zip(bytes.chunks_exact(4)) {
                            *x += f32::from_ne_bytes(c.try_into().unwrap());
                        }
                    });
                    let step = b as u32;
                    let s = unsafe {
                        t.isend(1 - r, tag(step), sig(), src.as_ptr().cast(), len, len)
                            .unwrap()
                    };
                    let q = unsafe {
                        t.irecv(1 - r, tag(step), sig(), RecvInto::Sink { len, sink })
                            .unwrap()
                    };
                    wait_all(&t, &[s, q]).unwrap();
                    batches.last_mut().unwrap().1 += 1;
                }
                if r == 0 {
                    // Skip the first batch (warm-up).
                    let mut per: Vec<f64> = batches
                        .windows(2)
                        .skip(1)
                        .map(|w| (w[1].0 - w[0].0).as_secs_f64() / w[0].1 as f64 * 1e6)
                        .collect();
                    per.sort_by(f64::total_cmp);
                    *res.lock().unwrap() = per[per.len() / 2];
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let v = *result.lock().unwrap();
    v
}

/// Ring vs rendezvous (single copy) per message size, to pick
/// `ShmConfig::cma_threshold`. Run with `--ignored --nocapture`. The same
/// buffers every time: cache-resident data, the rendezvous path's worst case
/// (it saves a copy but pins pages); collectives over large buffers fare
/// better (benches/allreduce_timing.py with `SHOAL_SHM_CMA_BYTES`).
#[test]
#[ignore]
fn print_cma_threshold() {
    for len in [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20] {
        let iters = (256 << 20) / len;
        let iters = iters.clamp(20, 2000);
        let (ring, ring_cpu) = exchange_reduce(len, 0, iters);
        let (cma, cma_cpu) = exchange_reduce(len, 1, iters);
        println!(
            "{:>6} KiB: ring {ring:9.1} us (cpu {ring_cpu:9.1})  cma {cma:9.1} us (cpu {cma_cpu:9.1})  wall {:+.0}%",
            len >> 10,
            (cma / ring - 1.0) * 100.0
        );
    }
}
