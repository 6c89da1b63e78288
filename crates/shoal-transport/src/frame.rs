//! The wire header shared by the shm rings and tcp streams.
//!
//! Every frame is a 64-byte header followed by `len` payload bytes. 64 bytes
//! keeps the payload cache-line aligned in shm rings, which is what lets sink
//! pieces be multiples of 64 without staging.
//!
//! Bytes 48..64 belong to the frame's kind. A rendezvous message travels as
//! a header-only descriptor (`Rndv`: the payload stays with the sender) and
//! its acknowledgement (`Ack`), with the fields of [`RndvInfo`] there. On shm
//! the receiver reads the payload from the sender's memory with
//! `process_vm_readv`, then acks; on tcp the `Ack` asks for the payload,
//! which follows as a `Payload` frame. A receiver gives flow-control credit
//! back ([`crate::flow`]) in `Credit` frames. Every transport sends two
//! header-only frames about blocked calls: `Waiting` (this rank is blocked
//! in the call of the header's tag and signature, waiting on the ranks
//! listed there) and `Query` (tell me what you wait for).

use crate::{Answer, Blocked, CallSig, Tag, TransportError};

/// Size of an encoded header.
pub const HEADER_LEN: usize = 64;
const MAGIC: u32 = 0x4c4f_4853; // "SHOL"
/// A free slot of the rank list of a `Waiting` frame.
const NO_RANK: u32 = u32::MAX;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A tagged message; the payload is the message.
    Data = 1,
    /// The sender gave up; the payload is the reason (UTF-8).
    Abort = 2,
    /// The sender closed cleanly; no more frames follow.
    Bye = 3,
    /// A rendezvous descriptor: `len` bytes wait with the sender (shm: at
    /// the [`RndvInfo`] address in its memory); no payload follows.
    Rndv = 4,
    /// The receiver of a rendezvous message is done with it (shm: read it
    /// from the sender's memory) or, on tcp, asks for its payload; the
    /// [`RndvInfo`] names the message. No payload follows.
    Ack = 5,
    /// The sender is blocked in the call of the header's tag and signature,
    /// waiting on the ranks in bytes 48..64 (four little-endian u32, unused
    /// ones `u32::MAX`); none: it is not blocked. No payload follows.
    Waiting = 6,
    /// The sender asks what the receiver is waiting for (answered with a
    /// `Waiting` frame). No payload follows.
    Query = 7,
    /// The sender gives back flow-control credit: bytes 48..56 (little
    /// endian) say how much. No payload follows.
    Credit = 8,
    /// The payload of a rendezvous message whose `Ack` asked for it (tcp);
    /// bytes 56..64 are the descriptor's cookie.
    Payload = 9,
    /// shm: the receiver of a rendezvous message read in place asks its
    /// sender to write the message's second half ([`split_at`] onwards)
    /// into the receive's buffer, at the [`RndvInfo`] address plus that
    /// offset, while it reads the first half. No payload follows.
    Split = 10,
    /// shm: the sender answers a `Split`: the [`RndvInfo`] status is 0 when
    /// it wrote the second half, 1 when it could not (the receiver then
    /// reads it). No payload follows.
    Wrote = 11,
}

/// Where a split rendezvous message's second half starts: half its bytes,
/// rounded down to a page so that the two copies never touch one page.
/// 0: too short to split.
pub fn split_at(len: usize) -> usize {
    len / 2 / 4096 * 4096
}

/// The extra fields of `Rndv`, `Ack`, `Payload`, `Credit`, `Split` and
/// `Wrote` frames (header bytes 48..64).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RndvInfo {
    /// `Rndv`: the message's address in the sender's memory (shm; 0 on
    /// tcp). `Ack`: a status, 0 when the bytes were read (shm) or are
    /// wanted (tcp). `Credit`: the bytes given back. `Split`: the receive
    /// buffer's address in the receiver's memory. `Wrote`: a status.
    pub word: u64,
    /// Names the send request; echoed by the `Ack`.
    pub cookie: u64,
}

impl RndvInfo {
    /// The fields of an encoded `Rndv` or `Ack` header.
    pub fn decode(b: &[u8]) -> RndvInfo {
        RndvInfo {
            word: u64::from_le_bytes(b[48..56].try_into().unwrap()),
            cookie: u64::from_le_bytes(b[56..64].try_into().unwrap()),
        }
    }

    /// Encodes `h` with these fields in its spare bytes.
    pub fn encode(&self, h: &Header) -> [u8; HEADER_LEN] {
        let mut b = h.encode();
        b[48..56].copy_from_slice(&self.word.to_le_bytes());
        b[56..64].copy_from_slice(&self.cookie.to_le_bytes());
        b
    }
}

/// `Ack` status: shm read the payload; tcp (and shm without
/// `process_vm_readv`) asks for it.
pub const ACK_OK: u64 = 0;
/// `Ack` status: shm could not read the payload from the sender's memory.
pub const ACK_FAILED: u64 = 1;
/// `Ack` status: the receive that matched wants no payload (the lengths
/// differ, and it failed); the send is over.
pub const ACK_UNWANTED: u64 = 2;

/// A `Credit` frame giving `bytes` of flow-control credit back.
pub fn credit(bytes: u64) -> [u8; HEADER_LEN] {
    let info = RndvInfo {
        word: bytes,
        cookie: 0,
    };
    info.encode(&Header::control(Kind::Credit, 0))
}

/// A `Waiting` frame saying `b`, or that the sender is not blocked (`None`).
pub fn waiting(b: Option<&Blocked>) -> [u8; HEADER_LEN] {
    let Some(b) = b else {
        let mut f = Header::control(Kind::Waiting, 0).encode();
        f[48..64].fill(0xff);
        return f;
    };
    let h = Header {
        kind: Kind::Waiting,
        tag: b.tag,
        sig: b.sig,
        len: 0,
    };
    let mut f = h.encode();
    for i in 0..Blocked::MAX_ON {
        let rank = b.on.get(i).map_or(NO_RANK, |&r| r as u32);
        f[48 + 4 * i..52 + 4 * i].copy_from_slice(&rank.to_le_bytes());
    }
    f
}

/// What a decoded `Waiting` frame (`h`, encoded as `b`) says.
pub fn decode_waiting(h: &Header, b: &[u8]) -> Answer {
    let on: Vec<usize> = (0..Blocked::MAX_ON)
        .map(|i| u32::from_le_bytes(b[48 + 4 * i..52 + 4 * i].try_into().unwrap()))
        .filter(|&r| r != NO_RANK)
        .map(|r| r as usize)
        .collect();
    if on.is_empty() {
        return Answer::Busy;
    }
    Answer::Blocked(Blocked {
        tag: h.tag,
        sig: h.sig,
        on,
    })
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

    /// The header of the payload of rendezvous message `cookie` (tcp).
    pub fn payload(tag: Tag, sig: CallSig, len: usize, cookie: u64) -> [u8; HEADER_LEN] {
        let h = Header {
            kind: Kind::Payload,
            ..Header::data(tag, sig, len)
        };
        RndvInfo { word: 0, cookie }.encode(&h)
    }

    /// A header for a control frame (`Abort`, `Bye`, `Ack`, `Query`,
    /// `Credit`) with `len` payload bytes.
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
        b[4] = self.kind as u8;
        b[5] = self.sig.kind;
        b[6] = self.sig.dtype;
        b[7] = self.sig.op;
        b[8..12].copy_from_slice(&self.tag.comm.to_le_bytes());
        b[12..16].copy_from_slice(&self.tag.seq.to_le_bytes());
        b[16..20].copy_from_slice(&self.tag.step.to_le_bytes());
        b[20..24].copy_from_slice(&self.sig.algo.to_le_bytes());
        b[24..28].copy_from_slice(&self.sig.root.to_le_bytes());
        b[28..32].copy_from_slice(&self.sig.history.to_le_bytes());
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
        let kind = match b[4] {
            1 => Kind::Data,
            2 => Kind::Abort,
            3 => Kind::Bye,
            4 => Kind::Rndv,
            5 => Kind::Ack,
            6 => Kind::Waiting,
            7 => Kind::Query,
            8 => Kind::Credit,
            9 => Kind::Payload,
            10 => Kind::Split,
            11 => Kind::Wrote,
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
                kind: b[5],
                dtype: b[6],
                op: b[7],
                algo: u32_at(20),
                root: u32_at(24),
                count: u64_at(32),
                history: u32_at(28),
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
                algo: 0x0708_090a,
                root: 8,
                count: 9,
                history: 11,
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
            word: 0x7fff_0000_1234,
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

    #[test]
    fn credit_and_payload_roundtrip() {
        let c = credit(1 << 33);
        assert_eq!(Header::decode(&c).unwrap().kind, Kind::Credit);
        assert_eq!(RndvInfo::decode(&c).word, 1 << 33);
        let tag = Tag {
            comm: 4,
            seq: 5,
            step: 6,
        };
        let p = Header::payload(tag, CallSig::default(), 77, 12);
        let h = Header::decode(&p).unwrap();
        assert_eq!((h.kind, h.tag, h.len), (Kind::Payload, tag, 77));
        assert_eq!(RndvInfo::decode(&p).cookie, 12);
    }

    #[test]
    fn waiting_roundtrip() {
        let b = Blocked {
            tag: Tag {
                comm: 7,
                seq: 8,
                step: 9,
            },
            sig: CallSig {
                kind: 2,
                count: 1000,
                history: 0xdead_beef,
                ..CallSig::default()
            },
            on: vec![3, 0],
        };
        let f = waiting(Some(&b));
        let h = Header::decode(&f).unwrap();
        assert_eq!(h.kind, Kind::Waiting);
        assert_eq!(decode_waiting(&h, &f), Answer::Blocked(b));
        let f = waiting(None);
        assert_eq!(
            decode_waiting(&Header::decode(&f).unwrap(), &f),
            Answer::Busy
        );
    }
}
