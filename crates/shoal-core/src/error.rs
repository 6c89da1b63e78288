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
    /// Memory the call needs (a plan's scratch) could not be allocated.
    OutOfMemory,
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
            TransportError::Mismatch {
                rank,
                peer,
                seq,
                ours,
                theirs,
            } => describe_mismatch(*rank, *peer, *seq, ours.as_ref(), theirs),
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

/// A failure to meet the other ranks (bad launcher variables, no secret, no
/// store) is a runtime error, with the bootstrap's message.
impl From<shoal_bootstrap::Error> for Error {
    fn from(e: shoal_bootstrap::Error) -> Error {
        Error::runtime(e.to_string())
    }
}

/// A bad dtype or op is a bad argument.
impl From<crate::dtype::DTypeError> for Error {
    fn from(e: crate::dtype::DTypeError) -> Error {
        Error::invalid(e.to_string())
    }
}

/// An unknown name or a refused registration is a bad argument.
impl From<crate::registry::RegistryError> for Error {
    fn from(e: crate::registry::RegistryError) -> Error {
        Error::invalid(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Two ranks' different calls number `seq` in words, naming both calls.
fn describe_mismatch(
    rank: usize,
    peer: usize,
    seq: u32,
    ours: Option<&CallSig>,
    theirs: &CallSig,
) -> String {
    let head = format!("mismatched collectives (call {seq} of the communicator)");
    let theirs_words = describe_sig(theirs);
    match ours {
        None => format!(
            "{head}: rank {peer} called {theirs_words}, which rank {rank} finished long ago as another call"
        ),
        Some(ours) if ours == theirs => format!(
            "{head}: rank {peer} sent a message of {theirs_words} that rank {rank}'s same call does not receive (do the ranks' settings differ, e.g. SHOAL_CHUNK_BYTES?)"
        ),
        Some(ours) if ours.same_call(theirs) => format!(
            "{head}: ranks {rank} and {peer} both called {theirs_words}, but their earlier calls on this communicator differ (an earlier call did not match)"
        ),
        Some(ours) => format!(
            "{head}: rank {rank} called {} but rank {peer} called {theirs_words}",
            describe_sig(ours)
        ),
    }
}

/// A call signature in words, e.g. `allreduce(count=1000, dtype=float32,
/// op=sum, algorithm=ring)` or `broadcast(root=1, count=10, dtype=int32,
/// algorithm=pipelined_chain)`: the op only where the collective reduces, the root only
/// where it has one.
pub fn describe_sig(sig: &CallSig) -> String {
    describe_args(sig, true)
}

/// A call signature in words without its algorithm, e.g.
/// `allreduce(count=1000, dtype=float32, op=sum)`.
pub fn describe_call(sig: &CallSig) -> String {
    describe_args(sig, false)
}

fn describe_args(sig: &CallSig, algorithm: bool) -> String {
    let dtype = sig_dtype(sig);
    let Some(coll) = Collective::ALL.get(sig.kind as usize) else {
        return format!("send/recv(count={}, dtype={dtype})", sig.count);
    };
    let mut args = Vec::new();
    if coll.rooted() {
        args.push(format!("root={}", sig.root));
    }
    args.push(format!("count={}", sig.count));
    args.push(format!("dtype={dtype}"));
    if coll.reduces() {
        let op = ReduceOp::ALL.get(sig.op as usize).map_or("?", |o| o.name());
        args.push(format!("op={op}"));
    }
    if algorithm {
        args.push(format!("algorithm={}", sig_names(sig).1));
    }
    format!("{coll}({})", args.join(", "))
}

/// The collective and algorithm a signature names, e.g. `("allreduce",
/// "ring")`; point-to-point messages are `("send/recv", "p2p")`.
pub fn sig_names(sig: &CallSig) -> (&'static str, &'static str) {
    let Some(&coll) = Collective::ALL.get(sig.kind as usize) else {
        return ("send/recv", "p2p");
    };
    (coll.name(), crate::registry::name_of(coll, sig.algo))
}

/// The name of a signature's element type.
pub fn sig_dtype(sig: &CallSig) -> &'static str {
    DType::ALL.get(sig.dtype as usize).map_or("?", |d| d.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_bootstrap::rendezvous::{detect, Explicit};

    #[test]
    fn a_failed_rendezvous_is_a_runtime_error_with_its_message() {
        let env = |k: &str| (k == "RANK").then(|| "1".to_string());
        let e = detect(&Explicit::default(), &env).unwrap_err();
        let text = e.to_string();
        let e = Error::from(e);
        assert_eq!(e.kind, ErrorKind::Runtime);
        assert_eq!(e.message, text);
        assert_eq!(e.message, "RANK is set but WORLD_SIZE is not");
    }
}
