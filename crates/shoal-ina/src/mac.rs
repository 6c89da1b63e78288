//! The per-packet tag: HalfSipHash-2-4 with a 64-bit output over the data
//! header, keyed with the job's packet key.
//!
//! HalfSipHash works on 32-bit words with additions, rotations and XORs
//! only, which is what a switch ASIC's ALUs do: Yoo and Chen ("Secure Keyed
//! Hashing on Programmable Switches", SPIN 2021) run it on a Tofino at 67
//! million 32-byte inputs per second and pipe. Our input is the 28 header
//! bytes before the tag. The payload is not covered (docs/ina-protocol.md,
//! "Authentication" says why and what that costs).

use shoal_bootstrap::auth::Key;

/// Bytes of a packet key (HalfSipHash takes 64 bits).
pub const PACKET_KEY_BYTES: usize = 8;

/// The key that tags one admitted job's packets on one switch.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PacketKey([u8; PACKET_KEY_BYTES]);

impl std::fmt::Debug for PacketKey {
    // Keys never reach logs or error messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PacketKey(..)")
    }
}

impl PacketKey {
    pub const fn from_bytes(bytes: [u8; PACKET_KEY_BYTES]) -> PacketKey {
        PacketKey(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; PACKET_KEY_BYTES] {
        &self.0
    }

    /// The packet key of one admission: every rank computes it from the
    /// job's INA key and the admission's public nonce, so no key travels
    /// between ranks and a new admission never reuses an old key.
    pub fn derive(job_key: &Key, nonce: &[u8]) -> PacketKey {
        let m = job_key.mac(&[b"shoal ina packet key\0", nonce]);
        let mut k = [0u8; PACKET_KEY_BYTES];
        k.copy_from_slice(&m[..PACKET_KEY_BYTES]);
        PacketKey(k)
    }

    /// The tag of `data` (the header bytes before the tag field).
    pub fn tag(&self, data: &[u8]) -> u64 {
        halfsiphash_2_4_64(&self.0, data)
    }
}

#[inline(always)]
fn sipround(v: &mut [u32; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(5) ^ v[0];
    v[0] = v[0].rotate_left(16);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(8) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(7) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[2];
    v[2] = v[2].rotate_left(16);
}

/// HalfSipHash-2-4 with 64-bit output, as the reference implementation
/// (github.com/veorq/SipHash, `halfsiphash.c` with `outlen = 8`); the two
/// output words little-endian, read as one little-endian u64.
pub fn halfsiphash_2_4_64(key: &[u8; 8], data: &[u8]) -> u64 {
    let k0 = u32::from_le_bytes([key[0], key[1], key[2], key[3]]);
    let k1 = u32::from_le_bytes([key[4], key[5], key[6], key[7]]);
    let mut v = [k0, k1 ^ 0xee, 0x6c79_6765 ^ k0, 0x7465_6462 ^ k1];
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    for w in words {
        let m = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        v[3] ^= m;
        sipround(&mut v);
        sipround(&mut v);
        v[0] ^= m;
    }
    let mut b = (data.len() as u32) << 24;
    for (i, &byte) in tail.iter().enumerate() {
        b |= (byte as u32) << (8 * i);
    }
    v[3] ^= b;
    sipround(&mut v);
    sipround(&mut v);
    v[0] ^= b;
    v[2] ^= 0xee;
    for _ in 0..4 {
        sipround(&mut v);
    }
    let lo = v[1] ^ v[3];
    v[1] ^= 0xdd;
    for _ in 0..4 {
        sipround(&mut v);
    }
    let hi = v[1] ^ v[3];
    (lo as u64) | ((hi as u64) << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `vectors_hsip64` of the reference implementation: key 00..07, input
    /// 00..(n-1), for n = 0, 1, 28 (our header) and 63.
    #[test]
    fn matches_the_reference_vectors() {
        let key: [u8; 8] = std::array::from_fn(|i| i as u8);
        let input: Vec<u8> = (0..64).collect();
        for (n, want) in [
            (0, [0x21, 0x8d, 0x1f, 0x59, 0xb9, 0xb8, 0x3c, 0xc8]),
            (1, [0xbe, 0x55, 0x24, 0x12, 0xf8, 0x38, 0x73, 0x15]),
            (28, [0x2d, 0x92, 0x5f, 0xfb, 0x1e, 0x00, 0x16, 0xb5]),
            (63, [0x2e, 0xa6, 0x3c, 0x71, 0xbf, 0x32, 0x60, 0x87]),
        ] {
            let got = halfsiphash_2_4_64(&key, &input[..n]);
            assert_eq!(got.to_le_bytes(), want, "{n} bytes");
        }
    }

    #[test]
    fn packet_keys_differ_by_nonce_and_job_key() {
        let a = Key::from_material(b"job a secret material");
        let b = Key::from_material(b"job b secret material");
        assert_ne!(PacketKey::derive(&a, b"n1"), PacketKey::derive(&a, b"n2"));
        assert_ne!(PacketKey::derive(&a, b"n1"), PacketKey::derive(&b, b"n1"));
        assert_eq!(PacketKey::derive(&a, b"n1"), PacketKey::derive(&a, b"n1"));
        assert_eq!(
            format!("{:?}", PacketKey::derive(&a, b"n1")),
            "PacketKey(..)"
        );
    }
}
