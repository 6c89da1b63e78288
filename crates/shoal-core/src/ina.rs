//! In-network aggregation in the runtime: joining the switch job at init,
//! deciding when allreduce goes through the switch, and the ATP-style
//! fallback to host algorithms when the switch is unreachable, full,
//! refusing, or dies mid-collective.
//!
//! The switch job's members are the world's ranks, so only the world
//! communicator uses it. After any failure every rank stops using the
//! switch for the rest of the job (a rank that lost packets and one that got
//! its result would otherwise disagree about where the job's slots stand).

use std::sync::Mutex;

use shoal_ina::{InaClient, InaConfig, InaDType, InaOp};
use shoal_plan::CostParams;
use shoal_transport::KvStore;

use crate::dtype::{DType, ReduceOp};

/// The name users give to force it: `algorithm="ina"`, `SHOAL_ALGO=allreduce:ina`.
pub const INA: &str = "ina";
/// Its "algorithm index" in message signatures (plan algorithms use their registry index).
pub const INA_SIG_INDEX: u8 = 254;

/// This rank's membership in the switch job.
pub struct Ina {
    client: Mutex<InaClient>,
    /// Why the switch is no longer used, once it failed.
    disabled: Mutex<Option<String>>,
}

impl Ina {
    /// Joins the job when `SHOAL_SWITCH` is set; otherwise, or when joining
    /// fails, the reason allreduce cannot use a switch. Collective: every rank
    /// calls it. A failure is a warning, not an error: allreduce then uses hosts.
    pub fn join_from_env(rank: usize, world: usize, store: &dyn KvStore) -> Result<Ina, String> {
        let Some(cfg) = InaConfig::from_env(rank, world) else {
            return Err("no aggregation switch configured (set SHOAL_SWITCH)".into());
        };
        let joined = cfg.and_then(|cfg| InaClient::join(&cfg, store));
        match joined {
            Ok(client) => Ok(Ina {
                client: Mutex::new(client),
                disabled: Mutex::new(None),
            }),
            Err(e) => {
                warn(&format!(
                    "in-network aggregation unavailable: {e}; allreduce uses host algorithms"
                ));
                Err(e.to_string())
            }
        }
    }

    /// Why the switch may not be used now (`None`: it may).
    pub fn unusable(&self) -> Option<String> {
        self.disabled.lock().unwrap().clone()
    }

    pub fn disable(&self, reason: &str) {
        self.disabled
            .lock()
            .unwrap()
            .get_or_insert_with(|| reason.to_string());
    }

    /// Sums (or min/max/avg) `buf` with every rank's through the switch.
    pub fn allreduce(&self, buf: &mut [u8], dtype: DType, op: ReduceOp) -> Result<(), String> {
        let (dt, op) = wire_types(dtype, op).ok_or_else(|| unsupported(dtype, op))?;
        self.client
            .lock()
            .unwrap()
            .allreduce(buf, dt, op)
            .map_err(|e| e.to_string())
    }
}

/// The switch's element type and op for a call, if it can aggregate them.
pub fn wire_types(dtype: DType, op: ReduceOp) -> Option<(InaDType, InaOp)> {
    let dt = match dtype {
        DType::F32 => InaDType::F32,
        DType::F16 => InaDType::F16,
        DType::BF16 => InaDType::Bf16,
        DType::I32 => InaDType::I32,
        _ => return None,
    };
    let op = match op {
        ReduceOp::Sum => InaOp::Sum,
        ReduceOp::Avg => InaOp::Avg,
        ReduceOp::Min => InaOp::Min,
        ReduceOp::Max => InaOp::Max,
        _ => return None,
    };
    Some((dt, op))
}

pub fn unsupported(dtype: DType, op: ReduceOp) -> String {
    format!("the switch cannot aggregate {dtype} with op {op} (float32/float16/bfloat16/int32 with sum/avg/min/max)")
}

/// Each worker sends its data once and receives the result once, both
/// directions at once: about one message's latency each way and the bytes
/// once over its link (against ring's `2 (p-1)/p` of them). Workers that
/// share a host share its link: `per_link` of them send through the busiest.
pub fn cost(bytes: usize, per_link: usize, params: &CostParams) -> f64 {
    2.0 * params.alpha + (bytes * per_link.max(1)) as f64 * params.beta
}

/// Runtime warnings go to stderr, prefixed so they stand out among the
/// rank-prefixed output of `shoal run`.
pub fn warn(message: &str) {
    eprintln!("shoal: warning: {message}");
}
