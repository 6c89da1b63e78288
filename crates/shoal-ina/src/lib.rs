//! In-network aggregation (INA) for shoal: the wire protocol, a software
//! aggregation switch, and the client that runs allreduce through it.
//!
//! Workers stream packets carrying job id, tree id, sequence number (PANAMA's
//! VID), slot and payload; the switch sums each slot once every member's
//! packet is in and sends the result to all members. Results are the implicit
//! acknowledgements of a DCTCP-like window capped by the switch's memory share
//! (`cwnd_cap`); loss is repaired by timeouts, and SwitchML-style shadow
//! copies make a retransmission return the stored result instead of being
//! summed twice. Every packet carries a tag keyed per job, and control
//! connections authenticate with the switch secret, so strangers can neither
//! add to a job's sums nor release it. `docs/ina-protocol.md` specifies the
//! bytes.

pub mod client;
pub mod codec;
pub mod control;
pub mod mac;
mod net;
pub mod proto;
pub mod rng;
pub mod switch;

use std::fmt;

pub use client::{
    CallStats, InaClient, InaConfig, InaKeys, LeafSpec, Partial, PeerCheck, TreeSpec,
};

/// Element type of the user's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InaDType {
    F32,
    F16,
    Bf16,
    I32,
}

impl InaDType {
    pub fn size(self) -> usize {
        match self {
            InaDType::F32 | InaDType::I32 => 4,
            InaDType::F16 | InaDType::Bf16 => 2,
        }
    }
}

/// Reduction operation. `Avg` sums on the switch and divides by the result's
/// contributor count on the client (exact under partial aggregation too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InaOp {
    Sum,
    Avg,
    Min,
    Max,
}

/// Why INA could not be used. Every variant is a reason for the caller to
/// fall back to host algorithms (ATP); nothing here is printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InaError {
    /// No switch answered on its control or data address.
    Unreachable(String),
    /// The switch has no memory or job slots left.
    Full(String),
    /// The switch will not serve this job, with its reason.
    Refused(String),
    /// No result arrived for the configured time while packets were outstanding.
    SwitchDied(String),
    /// Malformed messages, mismatched parameters or misuse of the API.
    Protocol(String),
    /// The switch and this job do not hold the same switch secret.
    Unauthenticated(String),
    /// Another rank of the job failed while this one waited for results.
    PeerFailed(String),
    /// A configuration value is invalid (an error, not a reason to fall back).
    Config(String),
}

impl fmt::Display for InaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InaError::Unreachable(r) => write!(f, "aggregation switch unreachable: {r}"),
            InaError::Full(r) => write!(f, "aggregation switch full: {r}"),
            InaError::Refused(r) => write!(f, "aggregation switch refused the job: {r}"),
            InaError::SwitchDied(r) => write!(f, "aggregation switch stopped answering: {r}"),
            InaError::Protocol(r) => write!(f, "aggregation protocol error: {r}"),
            InaError::Unauthenticated(r) => {
                write!(f, "aggregation switch authentication failed: {r}")
            }
            InaError::PeerFailed(r) => write!(f, "a rank of the job failed: {r}"),
            InaError::Config(r) => write!(f, "{r}"),
        }
    }
}

impl std::error::Error for InaError {}
