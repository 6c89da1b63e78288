//! An in-process store: the threads of one process meeting without a
//! network or a file system (tests, and tools that run ranks as threads).

use std::collections::HashMap;
use std::io;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{deadline_after, key_timeout, lock, parse_counter};
use crate::KvStore;

/// How long `get` waits for a key unless told otherwise.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A store in this process's memory; share it between threads in an `Arc`.
pub struct MemStore {
    map: Mutex<HashMap<String, Vec<u8>>>,
    /// Notified whenever a key is written.
    written: Condvar,
    timeout: Duration,
}

impl Default for MemStore {
    fn default() -> MemStore {
        MemStore::with_timeout(DEFAULT_TIMEOUT)
    }
}

/// How a blocking wait for a key ended.
pub(crate) enum Waited {
    Found(Vec<u8>),
    TimedOut,
    /// `stopped` held (see [`MemStore::wait_for`]).
    Stopped,
}

impl MemStore {
    /// A store whose `get` waits at most `timeout` for a key.
    pub fn with_timeout(timeout: Duration) -> MemStore {
        MemStore {
            map: Mutex::new(HashMap::new()),
            written: Condvar::new(),
            timeout,
        }
    }

    /// Blocks until `key` exists, `timeout` passes, or `stopped()` holds
    /// (looked at whenever the wait wakes: see [`MemStore::wake_all`]). The
    /// TCP store server keeps its keys in a `MemStore` and stops its waiters
    /// this way when it shuts down.
    pub(crate) fn wait_for(
        &self,
        key: &str,
        timeout: Duration,
        stopped: &dyn Fn() -> bool,
    ) -> Waited {
        let deadline = deadline_after(timeout);
        let mut map = lock(&self.map);
        loop {
            if stopped() {
                return Waited::Stopped;
            }
            if let Some(v) = map.get(key) {
                return Waited::Found(v.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::TimedOut;
            }
            map = self
                .written
                .wait_timeout(map, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Wakes every waiter so it looks at its `stopped` again. Taking the
    /// lock orders a stop flag set before this call ahead of their next look.
    pub(crate) fn wake_all(&self) {
        let _map = lock(&self.map);
        self.written.notify_all();
    }
}

impl KvStore for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        lock(&self.map).insert(key.to_string(), value.to_vec());
        self.written.notify_all();
        Ok(())
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        match self.wait_for(key, self.timeout, &|| false) {
            Waited::Found(v) => Ok(v),
            Waited::TimedOut | Waited::Stopped => {
                Err(key_timeout("memory store", key, self.timeout))
            }
        }
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        let mut map = lock(&self.map);
        let new = parse_counter(key, map.get(key).map(Vec::as_slice))?.wrapping_add(delta);
        map.insert(key.to_string(), new.to_string().into_bytes());
        self.written.notify_all();
        Ok(new)
    }

    fn check(&self, keys: &[&str]) -> io::Result<bool> {
        let map = lock(&self.map);
        Ok(keys.iter().all(|k| map.contains_key(*k)))
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        Ok(lock(&self.map).remove(key).is_some())
    }
}
