//! The wire header shared by the shm rings and tcp streams.
//!
//! Every frame is a 64-byte header followed by `len` payload bytes. 64 bytes
//! keeps the payload cache-line aligned in shm rings, which is what lets sink
//! pieces be multiples of 64 without staging.

use crate::{CallSig, Tag, TransportError};

/// Size of an encoded header.
pub const HEADER_LEN: usize = 64;
const MAGIC: u32 = 0x4c4f_4853; // "SHOL"

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A tagged message; the payload is the message.
    Data = 1,
    /// The sender gave up; the payload is the reason (UTF-8).
    Abort = 2,
    /// The sender closed cleanly; no more frames follow.
    Bye = 3,
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub tag: Tag,
    pub sig: CallSig,
    pub len: u64,
}

impl Header {
    pub fn data(tag: Tag, sig: CallSig, len: usize) -> Header {
        Header {
            kind: Kind::Data,
            tag,
            sig,
            len: len as u64,
        }
    }

    /// A header for a control frame (`Abort`, `Bye`) with `len` payload bytes.
    pub fn control(kind: Kind, len: usize) -> Header {
        let tag = Tag {
            comm: 0,
            seq: 0,
            step: 0,
        };
        Header {
            kind,
            tag,
            sig: CallSig::default(),
            len: len as u64,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..8].copy_from_slice(&(self.kind as u32).to_le_bytes());
        b[8..12].copy_from_slice(&self.tag.comm.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.tag.step.to_le_bytes());
        b[20] = self.sig.kind;
        b[21] = self.sig.dtype;
        b[22] = self.sig.op;
        b[23] = self.sig.algo;
        b[24..28].copy_from_slice(&self.sig.root.to_le_bytes());
        b[32..40].copy_from_slice(&self.sig.count.to_le_bytes());
        b[40..48].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Header, TransportError> {
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
        if b.len() < HEADER_LEN || u32_at(0) != MAGIC {
            return Err(TransportError::Io("corrupt frame header".into()));
        }
        let kind = match u32_at(4) {
            1 => Kind::Data,
            2 => Kind::Abort,
            3 => Kind::Bye,
            k => return Err(TransportError::Io(format!("unknown frame kind {k}"))),
        };
        Ok(Header {
            kind,
            tag: Tag {
                comm: u32_at(8),
                seq: u32_at(12),
                step: u32_at(16),
            },
            sig: CallSig {
                kind: b[20],
                dtype: b[21],
                op: b[22],
                algo: b[23],
                root: u32_at(24),
                count: u64_at(32),
            },
            len: u64_at(40),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip() {
        let h = Header::data(
            Tag {
                comm: 1,
                seq: 2,
                step: 3,
            },
            CallSig {
                kind: 4,
                dtype: 5,
                op: 6,
                algo: 7,
                root: 8,
                count: 9,
            },
            10,
        );
        assert_eq!(Header::decode(&h.encode()).unwrap(), h);
        assert!(Header::decode(&[0u8; 64]).is_err());
    }
}
