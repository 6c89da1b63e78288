//! Key scoping: a view of a store in which every key carries a prefix.

use std::io;
use std::sync::Arc;

use crate::KvStore;

/// A view of a shared store in which every key is prefixed with
/// `prefix/`. Hand one to each transport so that jobs, and successive
/// initialisations of one job, never read each other's keys.
#[derive(Clone)]
pub struct ScopedStore {
    store: Arc<dyn KvStore>,
    prefix: String,
}

impl ScopedStore {
    pub fn new(store: Arc<dyn KvStore>, prefix: impl Into<String>) -> ScopedStore {
        ScopedStore {
            store,
            prefix: prefix.into(),
        }
    }

    /// The prefix, without the trailing '/'.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// A narrower scope inside this one: `prefix/sub`.
    pub fn scope(&self, sub: &str) -> ScopedStore {
        ScopedStore::new(self.store.clone(), format!("{}/{sub}", self.prefix))
    }

    fn key(&self, key: &str) -> String {
        format!("{}/{key}", self.prefix)
    }
}

impl KvStore for ScopedStore {
    fn set(&self, key: &str, value: &[u8]) -> io::Result<()> {
        self.store.set(&self.key(key), value)
    }

    fn get(&self, key: &str) -> io::Result<Vec<u8>> {
        self.store.get(&self.key(key))
    }

    fn add(&self, key: &str, delta: i64) -> io::Result<i64> {
        self.store.add(&self.key(key), delta)
    }

    fn check(&self, keys: &[&str]) -> io::Result<bool> {
        let full: Vec<String> = keys.iter().map(|k| self.key(k)).collect();
        self.store
            .check(&full.iter().map(String::as_str).collect::<Vec<_>>())
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        self.store.delete(&self.key(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::{client, server};
    use crate::store::{MemStore, Store};

    #[test]
    fn scoped_stores_do_not_collide() {
        let s = server();
        let store = Arc::new(Store::Tcp(client(&s, 300)));
        let (j1, j2) = (
            ScopedStore::new(store.clone(), "job1"),
            ScopedStore::new(store, "job2"),
        );
        j1.set("k", b"1").unwrap();
        j2.set("k", b"2").unwrap();
        assert_eq!(j1.get("k").unwrap(), b"1");
        assert_eq!(j2.scope("x").prefix(), "job2/x");
        assert_eq!(j2.get("k").unwrap(), b"2");
        assert_eq!(j1.add("n", 1).unwrap(), 1);
        assert!(j1.check(&["k", "n"]).unwrap() && !j2.check(&["n"]).unwrap());
        assert!(j2.get("n").unwrap_err().to_string().contains("'job2/n'"));
    }

    #[test]
    fn every_operation_carries_the_prefix_over_any_store() {
        let mem = Arc::new(MemStore::default());
        let scoped = ScopedStore::new(mem.clone(), "job").scope("7");
        scoped.set("k", b"v").unwrap();
        assert_eq!(mem.get("job/7/k").unwrap(), b"v");
        assert_eq!(scoped.add("n", 2).unwrap(), 2);
        assert_eq!(mem.get("job/7/n").unwrap(), b"2");
        assert!(scoped.check(&["k", "n"]).unwrap() && !mem.check(&["k"]).unwrap());
        assert!(scoped.delete("k").unwrap() && !mem.check(&["job/7/k"]).unwrap());
    }
}
