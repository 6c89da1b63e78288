//! A bounded map that forgets its least recently used entry when full: the
//! caches of plans and algorithm choices, whose keys (call shapes) are as
//! many as the distinct counts a program uses.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// A multiply-rotate hash (rustc's FxHash) for the caches' keys: a lookup
/// happens on every call, and SipHash, std's default, costs several times
/// more on a call shape's few words. Its defence against chosen keys is
/// not needed here: keys are the program's own call shapes.
#[derive(Default, Clone, Copy)]
pub struct FastHasher(u64);

impl FastHasher {
    const K: u64 = 0x517c_c1b7_2722_0a95;

    #[inline]
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::K);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().unwrap()));
        }
        let mut tail = [0u8; 8];
        let rest = chunks.remainder();
        tail[..rest.len()].copy_from_slice(rest);
        self.mix(u64::from_le_bytes(tail) ^ ((rest.len() as u64) << 56));
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.mix(i as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` keyed through [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

pub struct Lru<K, V> {
    /// Each value with the tick of its last use.
    map: FastMap<K, (V, u64)>,
    capacity: usize,
    tick: u64,
}

impl<K: Hash + Eq, V: Clone> Lru<K, V> {
    /// A cache of at most `capacity` entries (at least one).
    pub fn new(capacity: usize) -> Lru<K, V> {
        Lru {
            map: FastMap::default(),
            capacity: capacity.max(1),
            tick: 0,
        }
    }

    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|(v, used)| {
            *used = tick;
            v.clone()
        })
    }

    /// The entry of `key`, without counting it as a use.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|(v, _)| v)
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key).map(|(v, _)| v)
    }

    /// Adds (or replaces) an entry, first evicting the least recently used
    /// one if the cache is full. Eviction scans every entry: it happens only
    /// on a miss, whose plan generation costs far more.
    pub fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            self.evict_oldest();
        }
        self.map.insert(key, (value, self.tick));
    }

    fn evict_oldest(&mut self) {
        // Ticks are unique, so this removes exactly one entry.
        if let Some(oldest) = self.map.values().map(|&(_, used)| used).min() {
            self.map.retain(|_, &mut (_, used)| used != oldest);
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn clear(&mut self) {
        self.map.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_recently_used_within_capacity() {
        let mut c = Lru::new(3);
        for k in 0..3 {
            c.insert(k, k * 10);
        }
        assert_eq!(c.get(&0), Some(0)); // 0 is now the most recent
        c.insert(3, 30); // evicts 1, the least recently used
        assert_eq!((c.len(), c.get(&1)), (3, None));
        assert_eq!(
            (c.get(&0), c.get(&2), c.get(&3)),
            (Some(0), Some(20), Some(30))
        );
        c.insert(3, 31); // replacing evicts nothing
        assert_eq!((c.len(), c.get(&3)), (3, Some(31)));
        assert_eq!(c.peek(&3), Some(&31));
        assert_eq!((c.remove(&3), c.remove(&3)), (Some(31), None));
        c.insert(3, 31);
        for k in 100..10_000 {
            c.insert(k, k);
        }
        assert_eq!(c.len(), 3);
        assert_eq!(c.get(&9_999), Some(9_999));
    }

    #[test]
    fn capacity_is_at_least_one() {
        let mut c = Lru::new(0);
        c.insert("a", 1);
        c.insert("b", 2);
        assert_eq!((c.len(), c.capacity(), c.get(&"b")), (1, 1, Some(2)));
    }
}
