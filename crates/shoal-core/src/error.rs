//! The error type every public operation of the core returns.

use shoal_transport::TransportError;
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
        Error::new(kind, format!("{context}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

pub type Result<T> = std::result::Result<T, Error>;
