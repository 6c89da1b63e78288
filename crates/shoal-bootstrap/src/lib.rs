//! How the processes of a job meet, before any transport exists.
//!
//! * [`auth`]: keys and the challenge-response proofs every connection
//!   between a job's processes starts with;
//! * [`fnv`]: the hash ranks compare (algorithm ids, call signatures);
//! * [`secret`]: where a rank finds its job secret;
//! * [`small_file`]: reading the small files a user names, bounded;
//! * [`store`]: the key-value stores ranks meet at (TCP, a shared
//!   directory, scoped views of either);
//! * [`rendezvous`]: who this process is (launcher detection), which store
//!   it meets the others at, which generation of the job it joins and which
//!   ranks share its host.
//!
//! The transports, the in-network aggregation client and the runtime build
//! on this crate: they exchange addresses through a [`KvStore`] and derive
//! their keys from the job secret.

use std::io;

pub mod auth;
mod error;
pub mod fnv;
pub mod rendezvous;
pub mod secret;
pub mod small_file;
pub mod store;

pub use error::{Error, Result};
pub use secret::SecretError;

/// A blocking key-value store shared by all ranks of a job, used to
/// exchange addresses, segment names and host ids while the job sets up.
///
/// Counters written by [`KvStore::add`] are stored as decimal ASCII, so
/// `get` on a counter key returns e.g. `b"3"` (the convention of torch's
/// TCPStore).
pub trait KvStore: Send + Sync {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()>;

    /// Waits until `key` exists (or the store's timeout passes).
    fn get(&self, key: &str) -> io::Result<Vec<u8>>;

    /// Atomically adds `delta` to the counter at `key` (a missing key
    /// counts as 0) and returns the new value.
    fn add(&self, key: &str, delta: i64) -> io::Result<i64>;

    /// Whether all `keys` exist, without waiting.
    fn check(&self, keys: &[&str]) -> io::Result<bool>;

    /// Removes `key`; returns whether it existed.
    fn delete(&self, key: &str) -> io::Result<bool>;
}
