//! Calibrating the cost model at init: two ranks measure the latency and
//! bandwidth of the transport in use with a ping-pong, every rank measures its
//! reduction speed, and rank 0's figures are broadcast so that all ranks
//! price algorithms alike (otherwise they could pick different ones).

use std::time::Instant;

use shoal_plan::{Collective, CostParams};
use tracing::info;

use crate::comm::{CollArgs, Communicator};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::exec::CallBuffers;
use crate::reduce::reduce_into;

/// `SHOAL_COST`'s syntax lives with the cost model it sets.
pub use crate::select::parse_cost;

const PING_BYTES: usize = 8;
const PINGS: usize = 30;
const BULK_BYTES: usize = 1 << 20;
const BULKS: usize = 4;
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
    ];
    let r = world.rank();
    if let Some(local) = partners.local {
        if r == 0 {
            (f[3], f[4]) = ping_pong(world, local, true)?;
            (f[0], f[1]) = (f[3], f[4]);
        } else if r == local {
            ping_pong(world, 0, false)?;
        }
    }
    if let Some(remote) = partners.remote {
        if r == 0 {
            (f[0], f[1]) = ping_pong(world, remote, true)?;
        } else if r == remote {
            ping_pong(world, 0, false)?;
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
        "{between}on this host {:.1} us + {:.2} GB/s, float32 sum {:.2} GB/s",
        us(cost.alpha_local),
        gbs(cost.beta_local),
        gbs(cost.gamma)
    )
}

/// Round trips of a tiny message give the latency; one-way bulk transfers
/// answered by a tiny acknowledgement give the bandwidth.
fn ping_pong(world: &Communicator, peer: usize, leader: bool) -> Result<(f64, f64)> {
    let mut small = vec![0u8; PING_BYTES];
    let mut bulk = vec![0u8; BULK_BYTES];
    let mut exchange = |buf: &mut Vec<u8>, reply: usize| -> Result<()> {
        if leader {
            world.send(peer, TAG, DType::U8, buf.as_ptr(), buf.len())?;
            world.recv(peer, TAG, DType::U8, small.as_mut_ptr(), reply)
        } else {
            world.recv(peer, TAG, DType::U8, buf.as_mut_ptr(), buf.len())?;
            world.send(peer, TAG, DType::U8, small.as_ptr(), reply)
        }
    };
    let mut ping = vec![0u8; PING_BYTES];
    exchange(&mut ping, PING_BYTES)?; // warm-up: connections, page faults
    let t = Instant::now();
    for _ in 0..PINGS {
        exchange(&mut ping, PING_BYTES)?;
    }
    let alpha = t.elapsed().as_secs_f64() / (2 * PINGS) as f64;
    exchange(&mut bulk, PING_BYTES)?;
    let t = Instant::now();
    for _ in 0..BULKS {
        exchange(&mut bulk, PING_BYTES)?;
    }
    let per_transfer = t.elapsed().as_secs_f64() / BULKS as f64 - 2.0 * alpha;
    let beta = (per_transfer / BULK_BYTES as f64).max(1e-12);
    Ok((alpha, beta))
}

/// Seconds per byte of a float32 sum, the most common reduction.
fn reduction_seconds_per_byte() -> f64 {
    let mut dst = vec![1u8; BULK_BYTES];
    let src = vec![2u8; BULK_BYTES];
    reduce_into(DType::F32, ReduceOp::Sum, &mut dst, &src);
    let t = Instant::now();
    for _ in 0..4 {
        reduce_into(DType::F32, ReduceOp::Sum, &mut dst, &src);
    }
    (t.elapsed().as_secs_f64() / (4 * BULK_BYTES) as f64).max(1e-12)
}

fn broadcast_f64(world: &Communicator, values: &mut [f64]) -> Result<()> {
    let args = CollArgs {
        collective: Collective::Broadcast,
        count: values.len(),
        counts: None,
        dtype: DType::F64,
        op: ReduceOp::Sum,
        root: 0,
        algorithm: Some("binomial".into()),
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
