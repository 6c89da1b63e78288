//! Calibrating the cost model at init: two ranks measure the latency and
//! bandwidth of the transport in use with a ping-pong, rank 0 measures its
//! reduction speed and, with a peer on its host, the speed of reading memory
//! in place, and rank 0's figures are broadcast so that all ranks price
//! algorithms alike (otherwise they could pick different ones).

use std::time::Instant;

use shoal_plan::algorithms::broadcast::binomial::ALGORITHM as BINOMIAL;
use shoal_plan::{Collective, CostParams};
use tracing::info;

use crate::comm::{CollArgs, Communicator};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::exec::CallBuffers;
use crate::provider::Named;
use crate::reduce::reduce_into;
use crate::registry::Choice;

const PING_BYTES: usize = 8;
const PINGS: usize = 30;
const BULK_BYTES: usize = 1 << 20;
const BULKS: usize = 5;
/// Bulk transfers on one host: enough to go round the default 4 MiB ring
/// three times. The first lap touches the ring's pages for the first time,
/// and with five transfers calibration put the rings at 3-11 GB/s where
/// 1 MiB messages crossed at 25 GB/s (AMD dev host, issue 27).
const LOCAL_BULKS: usize = 12;
const TAG: u32 = (1 << 31) - 1;

/// Who rank 0 measures against: `remote` on another host (the links between
/// hosts), `local` on its own host (shared memory). Either may be absent.
pub struct Partners {
    pub remote: Option<usize>,
    pub local: Option<usize>,
}

/// Measures the cost parameters from rank 0 and makes every rank adopt
/// rank 0's figures. Collective: every rank must call it. On one host the
/// local figures are also the only ones.
pub fn calibrate(
    world: &Communicator,
    partners: &Partners,
    base: CostParams,
) -> Result<CostParams> {
    let mut f = [
        base.alpha,
        base.beta,
        base.gamma,
        base.alpha_local,
        base.beta_local,
        base.beta_read,
    ];
    let r = world.rank();
    if let Some(local) = partners.local {
        if r == 0 {
            (f[3], f[4]) = ping_pong(world, local, true, LOCAL_BULKS)?;
            (f[0], f[1]) = (f[3], f[4]);
            f[5] = in_place_read_seconds_per_byte().unwrap_or(f[5]);
        } else if r == local {
            ping_pong(world, 0, false, LOCAL_BULKS)?;
        }
    }
    if let Some(remote) = partners.remote {
        if r == 0 {
            (f[0], f[1]) = ping_pong(world, remote, true, BULKS)?;
        } else if r == remote {
            ping_pong(world, 0, false, BULKS)?;
        }
    }
    if r == 0 {
        f[2] = reduction_seconds_per_byte();
    }
    broadcast_f64(world, &mut f)?;
    let cost = CostParams {
        alpha: f[0],
        beta: f[1],
        gamma: f[2],
        alpha_local: f[3],
        beta_local: f[4],
        beta_read: f[5],
    };
    if r == 0 {
        let against = |p: Option<usize>| p.map_or_else(|| "nobody".into(), |p| format!("rank {p}"));
        info!(
            "calibrated against {} on this host and {} on other hosts: {}",
            against(partners.local),
            against(partners.remote),
            describe(&cost, partners.remote.is_some())
        );
    }
    Ok(cost)
}

/// The cost figures in the units people think in; those between hosts
/// only when there are other hosts.
pub fn describe(cost: &CostParams, multi_host: bool) -> String {
    let us = |s: f64| s * 1e6;
    let gbs = |s_per_byte: f64| 1e-9 / s_per_byte;
    let between = if multi_host {
        format!(
            "between hosts {:.1} us + {:.2} GB/s, ",
            us(cost.alpha),
            gbs(cost.beta)
        )
    } else {
        String::new()
    };
    format!(
        "{between}on this host {:.1} us + {:.2} GB/s, read in place {:.2} GB/s, float32 sum {:.2} GB/s",
        us(cost.alpha_local),
        gbs(cost.beta_local),
        gbs(cost.beta_read),
        gbs(cost.gamma)
    )
}

/// Round trips of a tiny message give the latency; one-way bulk transfers
/// answered by a tiny acknowledgement give the bandwidth.
///
/// Each exchange is timed alone and the fastest decides: on a loaded host
/// one rank descheduled for a time slice (milliseconds) during a mean of 30
/// pings made alpha 380 to 880 us, different in every job (2-vCPU VM at load
/// 10, issue 27), so two jobs of one program priced algorithms differently;
/// the median still did in one job of four there, where more than half of
/// the pings were stretched. The fastest exchange is one the scheduler did
/// not stretch: the transport's own cost, which is what the model compares
/// algorithms by.
fn ping_pong(
    world: &Communicator,
    peer: usize,
    leader: bool,
    bulk_transfers: usize,
) -> Result<(f64, f64)> {
    let mut small = vec![0u8; PING_BYTES];
    let mut bulk = vec![0u8; BULK_BYTES];
    let mut exchange = |buf: &mut Vec<u8>, reply: usize| -> Result<f64> {
        let t = Instant::now();
        if leader {
            world.send(peer, TAG, DType::U8, buf.as_ptr(), buf.len())?;
            world.recv(peer, TAG, DType::U8, small.as_mut_ptr(), reply)?;
        } else {
            world.recv(peer, TAG, DType::U8, buf.as_mut_ptr(), buf.len())?;
            world.send(peer, TAG, DType::U8, small.as_ptr(), reply)?;
        }
        Ok(t.elapsed().as_secs_f64())
    };
    let mut ping = vec![0u8; PING_BYTES];
    exchange(&mut ping, PING_BYTES)?; // warm-up: connections, page faults
    let pings = (0..PINGS)
        .map(|_| exchange(&mut ping, PING_BYTES))
        .collect::<Result<Vec<f64>>>()?;
    let alpha = fastest(&pings) / 2.0;
    exchange(&mut bulk, PING_BYTES)?;
    let bulks = (0..bulk_transfers)
        .map(|_| exchange(&mut bulk, PING_BYTES))
        .collect::<Result<Vec<f64>>>()?;
    let per_transfer = fastest(&bulks) - 2.0 * alpha;
    let beta = (per_transfer / BULK_BYTES as f64).max(1e-12);
    Ok((alpha, beta))
}

/// Seconds per byte of a float32 sum, the most common reduction (the
/// fastest of a few passes, for the same reason as in [`ping_pong`]).
fn reduction_seconds_per_byte() -> f64 {
    let mut dst = vec![1u8; BULK_BYTES];
    let src = vec![2u8; BULK_BYTES];
    let sum = |dst: &mut [u8]| -> std::io::Result<()> {
        reduce_into(DType::F32, ReduceOp::Sum, dst, &src);
        Ok(())
    };
    fastest_pass_per_byte(&mut dst, sum).expect("a sum cannot fail")
}

/// Seconds per byte of the fastest of [`BULKS`] timed passes of `pass` over
/// `BULK_BYTES`, after one untimed pass (page faults, caches).
fn fastest_pass_per_byte(
    dst: &mut [u8],
    mut pass: impl FnMut(&mut [u8]) -> std::io::Result<()>,
) -> std::io::Result<f64> {
    pass(dst)?;
    let passes = (0..BULKS)
        .map(|_| {
            let t = Instant::now();
            pass(dst).map(|()| t.elapsed().as_secs_f64())
        })
        .collect::<std::io::Result<Vec<f64>>>()?;
    Ok((fastest(&passes) / BULK_BYTES as f64).max(1e-12))
}

/// Seconds per byte of `process_vm_readv`, the way the `shm_*` algorithms
/// read a peer's memory in place, timed on this process's own memory (the
/// fastest of a few reads of a buffer in cache, as a peer's just-written
/// region is): a read pins the pages it copies, so on the AMD dev host it
/// went at 12 GB/s where the rings carried 25 and a float32 sum ran at 46
/// (issue 27). `None` where the kernel refuses it (a seccomp filter); where
/// it refuses only reads of other processes, the selector prices reads as
/// messages instead (`Selector::pricing`).
fn in_place_read_seconds_per_byte() -> Option<f64> {
    let src = vec![1u8; BULK_BYTES];
    let mut dst = vec![0u8; BULK_BYTES];
    let read = |dst: &mut [u8]| shoal_transport::cma::read_own(&src, dst);
    fastest_pass_per_byte(&mut dst, read).ok()
}

/// The shortest of `samples`: a time the scheduler did not stretch, unless
/// it stretched them all.
fn fastest(samples: &[f64]) -> f64 {
    samples.iter().copied().fold(f64::INFINITY, f64::min)
}

fn broadcast_f64(world: &Communicator, values: &mut [f64]) -> Result<()> {
    let args = CollArgs {
        algorithm: Some(Named::Plan(Choice::Builtin(&BINOMIAL))),
        ..CollArgs::new(Collective::Broadcast, values.len(), DType::F64)
    };
    let bytes = std::mem::size_of_val(values);
    let ptr = values.as_mut_ptr() as *mut u8;
    let is_root = world.rank() == 0;
    let bufs = CallBuffers {
        input: if is_root { ptr } else { std::ptr::null() },
        input_bytes: if is_root { bytes } else { 0 },
        output: ptr,
        output_bytes: bytes,
    };
    world.collective(&args, bufs)
}

#[cfg(test)]
mod tests {
    use super::fastest;

    #[test]
    fn descheduled_exchanges_do_not_move_the_figure() {
        // 30 round trips of about 6 us, 20 of them stretched by 4 ms time
        // slices: their mean was 2.7 ms and so was their median; the
        // fastest is the round trip.
        let mut pings: Vec<f64> = (0..10).map(|i| 6e-6 + i as f64 * 1e-8).collect();
        pings.extend((0..20).map(|i| 4e-3 + i as f64 * 1e-6));
        let mean = pings.iter().sum::<f64>() / pings.len() as f64;
        assert!(mean > 2e-3);
        assert_eq!(fastest(&pings), 6e-6);
        assert_eq!(fastest(&[3.0, 1.0, 2.0]), 1.0);
    }
}
