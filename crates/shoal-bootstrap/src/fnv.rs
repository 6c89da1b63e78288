//! FNV-1a: a hash that is the same in every build and on every rank (std's
//! `DefaultHasher` may change between builds), for values ranks compare:
//! algorithm ids and call histories in message signatures (32-bit), call
//! signatures and tuning tables (64-bit). Changing it changes what ranks
//! of different builds agree on, so the values are pinned by tests.

/// The 32-bit hash of no bytes, where a fold starts.
pub const OFFSET_32: u32 = 0x811c_9dc5;
const PRIME_32: u32 = 0x0100_0193;
const OFFSET_64: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME_64: u64 = 0x0100_0000_01b3;

/// Folds `bytes` into the 32-bit hash `h` (start from [`OFFSET_32`]); a
/// `const fn`, so ids can be computed at compile time.
pub const fn fold_32(mut h: u32, bytes: &[u8]) -> u32 {
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u32).wrapping_mul(PRIME_32);
        i += 1;
    }
    h
}

/// The 64-bit hash, written to piece by piece.
pub struct Fnv64(u64);

impl Fnv64 {
    pub fn new() -> Fnv64 {
        Fnv64(OFFSET_64)
    }

    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(PRIME_64);
        }
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv64 {
    fn default() -> Fnv64 {
        Fnv64::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_published_fnv1a_ones() {
        // The reference vectors of the FNV authors (draft-eastlake-fnv).
        assert_eq!(fold_32(OFFSET_32, b""), 0x811c_9dc5);
        assert_eq!(fold_32(OFFSET_32, b"a"), 0xe40c_292c);
        assert_eq!(fold_32(OFFSET_32, b"foobar"), 0xbf9c_f968);
        let h64 = |b: &[u8]| {
            let mut h = Fnv64::new();
            h.write(b);
            h.finish()
        };
        assert_eq!(h64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(h64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(h64(b"foobar"), 0x8594_4171_f739_67e8);
        // Folding piece by piece is hashing the whole.
        assert_eq!(fold_32(fold_32(OFFSET_32, b"foo"), b"bar"), 0xbf9c_f968);
        let mut h = Fnv64::new();
        h.write(b"foo");
        h.write(b"bar");
        assert_eq!(h.finish(), h64(b"foobar"));
    }
}
