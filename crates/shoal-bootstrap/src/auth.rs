//! The job secret and the keys derived from it.
//!
//! Every job has a secret that only its ranks hold (docs/security.md). Nothing
//! sends it: each use derives its own key with HMAC-SHA256 (`derive("store")`,
//! `derive("transport")`, ...), and peers prove they hold a key by answering a
//! random challenge (`prove`), so a listener on the wire learns neither the
//! secret nor a key.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of a key, a challenge and a proof.
pub const KEY_BYTES: usize = 32;

/// A 256-bit key: the job secret or one derived from it.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_BYTES]);

impl fmt::Debug for Key {
    // Keys never reach logs or error messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Key {
        Key(bytes)
    }

    /// A key of any length of secret material (a passphrase, a hex string).
    pub fn from_material(material: &[u8]) -> Key {
        Key(mac(b"shoal secret", &[material]))
    }

    /// A fresh random key from the kernel's generator.
    pub fn random() -> std::io::Result<Key> {
        Ok(Key(random_bytes()?))
    }

    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }

    /// The key for one use, named by `label` (`"store"`, `"transport"`, `"ina/<scope>"`).
    pub fn derive(&self, label: &str) -> Key {
        Key(mac(&self.0, &[b"shoal derive\0", label.as_bytes()]))
    }

    /// HMAC-SHA256 of the concatenated `parts` under this key.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; KEY_BYTES] {
        mac(&self.0, parts)
    }

    /// The answer to `challenge` that proves holding this key. `role`
    /// separates the two directions of a mutual handshake, so a proof cannot
    /// be reflected back to its sender.
    pub fn prove(&self, role: &str, challenge: &[u8; KEY_BYTES]) -> [u8; KEY_BYTES] {
        self.mac(&[b"shoal prove\0", role.as_bytes(), b"\0", challenge])
    }

    /// Whether `proof` answers `challenge` (compared in constant time).
    pub fn verify(&self, role: &str, challenge: &[u8; KEY_BYTES], proof: &[u8]) -> bool {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes any key length");
        for p in [
            b"shoal prove\0".as_slice(),
            role.as_bytes(),
            b"\0",
            challenge,
        ] {
            m.update(p);
        }
        m.verify_slice(proof).is_ok()
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; KEY_BYTES] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// `N` bytes from the kernel's random generator (`getrandom(2)`).
pub fn random_bytes<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut buf = [0u8; N];
    let mut filled = 0;
    while filled < N {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let rc = unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), N - filled, 0) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += rc as usize;
    }
    Ok(buf)
}

/// Lower-case hex of `bytes`.
pub fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc4231_case_2() {
        let k = mac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            to_hex(&k),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn derived_keys_differ_by_label_and_secret() {
        let a = Key::from_material(b"secret a");
        let b = Key::from_material(b"secret b");
        assert_ne!(a.derive("store"), a.derive("transport"));
        assert_ne!(a.derive("store"), b.derive("store"));
        assert_eq!(
            a.derive("store"),
            Key::from_material(b"secret a").derive("store")
        );
    }

    #[test]
    fn proofs_verify_only_with_the_key_role_and_challenge() {
        let k = Key::random().unwrap();
        let c: [u8; KEY_BYTES] = random_bytes().unwrap();
        let p = k.prove("client", &c);
        assert!(k.verify("client", &c, &p));
        assert!(!k.verify("server", &c, &p));
        assert!(!Key::random().unwrap().verify("client", &c, &p));
        let other: [u8; KEY_BYTES] = random_bytes().unwrap();
        assert!(!k.verify("client", &other, &p));
        assert!(!k.verify("client", &c, &p[..16]));
    }

    #[test]
    fn debug_hides_the_key() {
        assert_eq!(format!("{:?}", Key::random().unwrap()), "Key(..)");
    }
}
