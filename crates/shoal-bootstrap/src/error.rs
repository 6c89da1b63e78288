//! What can stop a job's processes from meeting, each case with what a
//! user needs to fix it.

use std::fmt;
use std::io;

use crate::secret::SecretError;

/// Why this process could not find out who it is, open the store or meet
/// the other ranks.
#[derive(Debug)]
pub enum Error {
    /// A variable (or an explicit argument) holds a value that cannot be
    /// used: shown as `name="value" why`.
    BadVariable {
        name: String,
        value: String,
        why: String,
    },
    /// A launcher's convention is half present: `set` without any of
    /// `missing` (the names one value may go by).
    MissingVariable {
        set: &'static str,
        missing: Vec<&'static str>,
    },
    /// Explicit `rank` and `world_size` must be given together.
    HalfExplicit {
        rank: Option<usize>,
        world_size: Option<usize>,
    },
    /// Several processes and nowhere to meet. `launcher` is where rank and
    /// world came from ([`ProcessInfo::source`](crate::rendezvous::ProcessInfo)).
    NoStore {
        rank: usize,
        world: usize,
        launcher: &'static str,
    },
    /// No usable job secret.
    Secret(SecretError),
    /// A host id that cannot be published (empty, or several lines).
    BadHostId(String),
    /// The directory of `SHOAL_STORE_PATH` cannot serve as a store.
    StorePath(io::Error),
    /// Connecting to a TCP store failed; `of` names whose store it is.
    StoreConnect { of: &'static str, source: io::Error },
    /// Rank 0 could not start the store server.
    StoreServer(io::Error),
    /// A failure serving or reaching the store at the master address, with
    /// that address named.
    AtMaster {
        host: String,
        port: u16,
        source: Box<Error>,
    },
    /// The store failed, or a rank did not come, while the ranks met.
    Meeting {
        rank: usize,
        world: usize,
        source: io::Error,
    },
    /// The host list has not one id per rank.
    HostList {
        rank: usize,
        listed: usize,
        world: usize,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// `name="value" why`.
    pub(crate) fn bad(name: &str, value: impl ToString, why: impl Into<String>) -> Error {
        Error::BadVariable {
            name: name.to_string(),
            value: value.to_string(),
            why: why.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadVariable { name, value, why } => write!(f, "{name}={value:?} {why}"),
            Error::MissingVariable { set, missing } => match missing.as_slice() {
                [one] => write!(f, "{set} is set but {one} is not"),
                names => write!(f, "{set} is set but neither {} is", names.join(" nor ")),
            },
            Error::HalfExplicit { rank, world_size } => write!(
                f,
                "explicit rank and world_size must be given together (got rank={rank:?}, \
                 world_size={world_size:?})"
            ),
            Error::NoStore {
                rank,
                world,
                launcher,
            } => write!(
                f,
                "rank {rank} of {world} ({launcher}) has no store to meet the other ranks at: set \
                 MASTER_ADDR and MASTER_PORT (rank 0 serves the store), SHOAL_STORE_ADDR, or \
                 SHOAL_STORE_PATH"
            ),
            Error::Secret(e) => e.fmt(f),
            Error::BadHostId(id) => write!(f, "host id {id:?} must be non-empty and on one line"),
            Error::StorePath(e) => write!(f, "SHOAL_STORE_PATH: {e}"),
            Error::StoreConnect { of, source } => write!(f, "store of {of}: {source}"),
            Error::StoreServer(e) => {
                let hint = match e.kind() {
                    io::ErrorKind::AddrInUse => "; is another job using this port?",
                    _ => "",
                };
                write!(f, "rank 0 could not start the store server: {e}{hint}")
            }
            Error::AtMaster { host, port, source } => {
                write!(f, "{source} (MASTER_ADDR={host:?}, MASTER_PORT={port})")
            }
            Error::Meeting {
                rank,
                world,
                source,
            } => write!(f, "rendezvous of rank {rank} of {world}: {source}"),
            Error::HostList {
                rank,
                listed,
                world,
            } => write!(
                f,
                "rendezvous of rank {rank}: the store lists {listed} hosts for a world of \
                 {world}; did ranks start with different world sizes?"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Secret(e) => Some(e),
            Error::StorePath(e)
            | Error::StoreConnect { source: e, .. }
            | Error::StoreServer(e)
            | Error::Meeting { source: e, .. } => Some(e),
            Error::AtMaster { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

impl From<SecretError> for Error {
    fn from(e: SecretError) -> Error {
        Error::Secret(e)
    }
}

/// For callers that report the error as text.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.to_string()
    }
}
