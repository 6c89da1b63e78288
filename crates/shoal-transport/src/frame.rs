//! The wire header shared by the shm rings and tcp streams.
//!
//! Every frame is a 64-byte header followed by `len` payload bytes. 64 bytes
//! keeps the payload cache-line aligned in shm rings, which is what lets sink
//! pieces be multiples of 64 without staging.
//!
//! The shm transport also sends two kinds of header-only frames for its
//! single-copy path: a rendezvous descriptor (`Rndv`: the message stays in the
//! sender's memory, the receiver reads it with `process_vm_readv`) and its
//! acknowledgement (`Ack`). Their extra fields ([`RndvInfo`]) use header bytes
//! that data frames leave zero.

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
    /// A rendezvous descriptor (shm only): `len` bytes wait at the
    /// [`RndvInfo`] address in the sender's memory; no payload follows.
    Rndv = 4,
    /// The receiver of a rendezvous message is done with the sender's
    /// memory (shm only); no payload follows.
    Ack = 5,
}

/// The extra fields of `Rndv` and `Ack` frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RndvInfo {
    /// `Rndv`: the sender's pid. `Ack`: a status, 0 when the bytes were read.
    pub word: u32,
    /// `Rndv`: the message's address in the sender's memory.
    pub addr: u64,
    /// Names the send request; echoed by the `Ack`.
    pub cookie: u64,
}

impl RndvInfo {
    /// The fields of an encoded `Rndv` or `Ack` header.
    pub fn decode(b: &[u8]) -> RndvInfo {
        RndvInfo {
            word: u32::from_le_bytes(b[28..32].try_into().unwrap()),
            addr: u64::from_le_bytes(b[48..56].try_into().unwrap()),
            cookie: u64::from_le_bytes(b[56..64].try_into().unwrap()),
        }
    }

    /// Encodes `h` with these fields in its spare bytes.
    pub fn encode(&self, h: &Header) -> [u8; HEADER_LEN] {
        let mut b = h.encode();
        b[28..32].copy_from_slice(&self.word.to_le_bytes());
        b[48..56].copy_from_slice(&self.addr.to_le_bytes());
        b[56..64].copy_from_slice(&self.cookie.to_le_bytes());
        b
    }
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

    /// The header of a rendezvous descriptor for a `len`-byte message.
    pub fn rndv(tag: Tag, sig: CallSig, len: usize) -> Header {
        Header {
            kind: Kind::Rndv,
            ..Header::data(tag, sig, len)
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
            4 => Kind::Rndv,
            5 => Kind::Ack,
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

    #[test]
    fn rndv_roundtrip() {
        let h = Header::rndv(
            Tag {
                comm: 1,
                seq: 2,
                step: 3,
            },
            CallSig::default(),
            1 << 30,
        );
        let info = RndvInfo {
            word: 4242,
            addr: 0x7fff_0000_1234,
            cookie: 99,
        };
        let b = info.encode(&h);
        assert_eq!(Header::decode(&b).unwrap(), h);
        assert_eq!(RndvInfo::decode(&b), info);
        // Data headers leave the spare bytes zero.
        assert_eq!(
            RndvInfo::decode(&Header::data(h.tag, h.sig, 5).encode()),
            RndvInfo::default()
        );
    }
}
