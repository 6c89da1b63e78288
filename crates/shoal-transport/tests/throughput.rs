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
