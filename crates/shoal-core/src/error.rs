//! The error type every public operation of the core returns.

use shoal_plan::Collective;
use shoal_transport::{CallSig, TransportError};

use crate::dtype::{DType, ReduceOp};
use std::fmt;

/// What went wrong, so the binding can raise the matching Python exception.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad arguments, rejected before anything was sent.
    InvalidArgument,
    /// A peer process died.
    PeerDied,
    /// Ranks called different collectives (or the same with different arguments).
    Mismatch,
    /// A peer gave up and told us why.
    Aborted,
    /// Nothing moved for `SHOAL_TIMEOUT` seconds.
    Timeout,
    /// Rendezvous or transport setup, or another runtime failure.
    Runtime,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
        }
    }
    pub fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }
    pub fn runtime(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Runtime, message)
    }

    /// Wraps a transport failure with the context of the call it broke.
    pub fn from_transport(e: &TransportError, context: &str) -> Error {
        let kind = match e {
            TransportError::PeerDied { .. } => ErrorKind::PeerDied,
            TransportError::Mismatch { .. } | TransportError::LengthMismatch { .. } => {
                ErrorKind::Mismatch
            }
            TransportError::Aborted { .. } => ErrorKind::Aborted,
            TransportError::Io(_) => ErrorKind::Runtime,
        };
        let detail = match e {
            TransportError::Mismatch { peer, ours, theirs } => format!(
                "mismatched collective: rank {peer} called {} while this rank called {}",
                describe_sig(theirs),
                describe_sig(ours)
            ),
            other => other.to_string(),
        };
        Error::new(kind, format!("{context}: {detail}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;

/// A call signature in words, e.g. `allreduce(count=1000, dtype=float32, op=sum, root=0, algorithm=ring)`.
pub fn describe_sig(sig: &CallSig) -> String {
    let dtype = DType::ALL.get(sig.dtype as usize).map_or("?", |d| d.name());
    let Some(coll) = Collective::ALL.get(sig.kind as usize) else {
        return format!("send/recv(count={}, dtype={dtype})", sig.count);
    };
    let op = ReduceOp::ALL.get(sig.op as usize).map_or("?", |o| o.name());
    let algo = shoal_plan::registry()
        .get(sig.algo as usize)
        .map_or("?", |a| a.name);
    format!(
        "{coll}(count={}, dtype={dtype}, op={op}, root={}, algorithm={algo})",
        sig.count, sig.root
    )
}
