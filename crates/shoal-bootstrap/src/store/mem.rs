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

impl MemStore {
    /// A store whose `get` waits at most `timeout` for a key.
    pub fn with_timeout(timeout: Duration) -> MemStore {
        MemStore {
            map: Mutex::new(HashMap::new()),
            written: Condvar::new(),
            timeout,
        }
    }
}

impl KvStore for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        lock(&self.map).insert(key.to_string(), value.to_vec());
        self.written.notify_all();
        Ok(())
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        let deadline = deadline_after(self.timeout);
        let mut map = lock(&self.map);
        loop {
            if let Some(v) = map.get(key) {
                return Ok(v.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(key_timeout("memory store", key, self.timeout));
            }
            map = self
                .written
                .wait_timeout(map, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
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
