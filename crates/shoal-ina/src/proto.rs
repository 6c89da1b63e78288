//! The UDP data-plane header: one fixed 36-byte layout shared by workers,
//! switches and parent switches, encoded and decoded only here.
//!
//! Header fields are big-endian (network order) so a P4/FPGA parser can read
//! them directly; payload elements are little-endian because that is the
//! memory order of every host we run on and it spares a conversion pass.
//! The last 8 bytes are the tag ([`crate::mac`]) over the 28 before them.
//! `docs/ina-protocol.md` is the byte-by-byte specification.

use std::fmt;

use crate::mac::PacketKey;

/// "SH" in ASCII.
pub const MAGIC: u16 = 0x5348;
/// Unknown versions are rejected, never guessed at. Version 2 replaced the
/// job token of version 1 by the tag.
pub const VERSION: u8 = 2;
pub const HEADER_LEN: usize = 36;
/// The tag covers the header bytes before it.
pub const TAGGED_LEN: usize = 28;
/// Default UDP payload budget: a 1500-byte Ethernet MTU minus IPv4 and UDP headers.
pub const DEFAULT_PAYLOAD_BUDGET: usize = 1472;
/// The `member` value of result packets: they are addressed to every member.
pub const ALL_MEMBERS: u16 = 0xFFFF;
/// The slot field keeps its top bit for the shadow copy.
pub const MAX_SLOTS: u16 = 0x7FFF;
const SHADOW_BIT: u16 = 0x8000;

/// Packet flags (byte 4).
pub mod flags {
    /// Congestion experienced: set by a switch (or the network), OR-ed into results.
    pub const ECN: u8 = 0x01;
    /// The sender has sent this sequence number before.
    pub const RETX: u8 = 0x02;
    /// Last packet of one collective call on this tree (informational).
    pub const LAST: u8 = 0x04;
    /// The member detaches: the switch forgets its address.
    pub const FIN: u8 = 0x08;
    /// An int32 sum saturated: the result is clamped, the client must not trust it.
    pub const OVERFLOW: u8 = 0x10;
    pub const ALL: u8 = ECN | RETX | LAST | FIN | OVERFLOW;
}

/// Whether a packet goes up (a contribution) or down (an aggregated result).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Data = 0,
    Result = 1,
}

/// Element encoding of the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireType {
    F32 = 0,
    /// int32 scaled by 2^exponent (SwitchML's block floating point); plain
    /// int32 buffers use exponent 0.
    I32 = 1,
    F16 = 2,
    Bf16 = 3,
}

/// The combining operation the switch applies (Avg is Sum plus a division on
/// the client, so it never appears on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireOp {
    Sum = 0,
    Min = 1,
    Max = 2,
}

impl WireType {
    pub fn size(self) -> usize {
        match self {
            WireType::F32 | WireType::I32 => 4,
            WireType::F16 | WireType::Bf16 => 2,
        }
    }

    /// Bit of this type in the ADMIT request's dtype-mode mask.
    pub fn mask_bit(self) -> u8 {
        1 << (self as u8)
    }

    fn from_u8(v: u8) -> Option<Self> {
        [WireType::F32, WireType::I32, WireType::F16, WireType::Bf16]
            .get(v as usize)
            .copied()
    }
}

impl WireOp {
    fn from_u8(v: u8) -> Option<Self> {
        [WireOp::Sum, WireOp::Min, WireOp::Max]
            .get(v as usize)
            .copied()
    }
}

/// Why a datagram is not a well-formed packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtoError {
    Short,
    Magic,
    Version(u8),
    Kind(u8),
    WireType(u8),
    Op(u8),
    Flags(u8),
    /// The datagram length does not match `HEADER_LEN + count * size`.
    Length,
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Short => write!(f, "datagram shorter than the header"),
            ProtoError::Magic => write!(f, "bad magic"),
            ProtoError::Version(v) => write!(f, "unsupported version {v}"),
            ProtoError::Kind(v) => write!(f, "unknown packet kind {v}"),
            ProtoError::WireType(v) => write!(f, "unknown element type {v}"),
            ProtoError::Op(v) => write!(f, "unknown op {v}"),
            ProtoError::Flags(v) => write!(f, "unknown flags {v:#x}"),
            ProtoError::Length => write!(f, "length does not match the element count"),
        }
    }
}

/// A decoded header. `slot`/`shadow` name the switch memory cell; `seq` is
/// PANAMA's VID and lets a software switch tell a stale packet from a new use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub wire: WireType,
    pub op: WireOp,
    pub exponent: i8,
    pub job: u32,
    pub tree: u16,
    pub member: u16,
    pub seq: u32,
    pub slot: u16,
    pub shadow: bool,
    pub count: u16,
    pub contributors: u16,
    pub cwnd_cap: u16,
}

impl Header {
    /// Payload length in bytes that this header announces.
    pub fn payload_len(&self) -> usize {
        self.count as usize * self.wire.size()
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// Writes the header, tagged with `key`, into the first `HEADER_LEN`
    /// bytes of `out`.
    pub fn encode(&self, out: &mut [u8], key: &PacketKey) {
        let o = &mut out[..HEADER_LEN];
        o[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        o[2] = VERSION;
        o[3] = self.kind as u8;
        o[4] = self.flags;
        o[5] = self.wire as u8;
        o[6] = self.op as u8;
        o[7] = self.exponent as u8;
        o[8..12].copy_from_slice(&self.job.to_be_bytes());
        o[12..14].copy_from_slice(&self.tree.to_be_bytes());
        o[14..16].copy_from_slice(&self.member.to_be_bytes());
        o[16..20].copy_from_slice(&self.seq.to_be_bytes());
        let slot = (self.slot & MAX_SLOTS) | if self.shadow { SHADOW_BIT } else { 0 };
        o[20..22].copy_from_slice(&slot.to_be_bytes());
        o[22..24].copy_from_slice(&self.count.to_be_bytes());
        o[24..26].copy_from_slice(&self.contributors.to_be_bytes());
        o[26..28].copy_from_slice(&self.cwnd_cap.to_be_bytes());
        seal(o, key);
    }

    /// Parses and validates a whole datagram; returns the header and payload.
    /// The tag is not checked here: the job named in the header says which
    /// key to check it with ([`tag_ok`]).
    pub fn decode(pkt: &[u8]) -> Result<(Header, &[u8]), ProtoError> {
        if pkt.len() < HEADER_LEN {
            return Err(ProtoError::Short);
        }
        if be16(pkt, 0) != MAGIC {
            return Err(ProtoError::Magic);
        }
        if pkt[2] != VERSION {
            return Err(ProtoError::Version(pkt[2]));
        }
        let kind = match pkt[3] {
            0 => Kind::Data,
            1 => Kind::Result,
            k => return Err(ProtoError::Kind(k)),
        };
        if pkt[4] & !flags::ALL != 0 {
            return Err(ProtoError::Flags(pkt[4]));
        }
        let wire = WireType::from_u8(pkt[5]).ok_or(ProtoError::WireType(pkt[5]))?;
        let op = WireOp::from_u8(pkt[6]).ok_or(ProtoError::Op(pkt[6]))?;
        let slot = be16(pkt, 20);
        let h = Header {
            kind,
            flags: pkt[4],
            wire,
            op,
            exponent: pkt[7] as i8,
            job: be32(pkt, 8),
            tree: be16(pkt, 12),
            member: be16(pkt, 14),
            seq: be32(pkt, 16),
            slot: slot & MAX_SLOTS,
            shadow: slot & SHADOW_BIT != 0,
            count: be16(pkt, 22),
            contributors: be16(pkt, 24),
            cwnd_cap: be16(pkt, 26),
        };
        if pkt.len() != HEADER_LEN + h.payload_len() {
            return Err(ProtoError::Length);
        }
        Ok((h, &pkt[HEADER_LEN..]))
    }
}

/// Whether an encoded packet carries the tag of `key`. The comparison need
/// not be constant-time: a forger learns nothing from timing that it could
/// not learn from whether its packet was dropped, which it cannot observe.
pub fn tag_ok(pkt: &[u8], key: &PacketKey) -> bool {
    pkt.len() >= HEADER_LEN
        && pkt[TAGGED_LEN..HEADER_LEN] == key.tag(&pkt[..TAGGED_LEN]).to_le_bytes()
}

/// Writes the tag of `key` into an encoded header (after any change to it).
pub fn seal(pkt: &mut [u8], key: &PacketKey) {
    let tag = key.tag(&pkt[..TAGGED_LEN]);
    pkt[TAGGED_LEN..HEADER_LEN].copy_from_slice(&tag.to_le_bytes());
}

/// ORs flags into an encoded packet and tags it again.
pub fn patch_flags(pkt: &mut [u8], add: u8, key: &PacketKey) {
    pkt[4] |= add;
    seal(pkt, key);
}

/// The slot and shadow copy that sequence number `seq` uses in a pool of
/// `slots` slots: consecutive uses of a slot alternate between its two copies.
pub fn slot_of(seq: u32, slots: u16) -> (u16, bool) {
    let s = slots.max(1) as u32;
    ((seq % s) as u16, (seq / s) & 1 == 1)
}

/// Largest element count that fits a payload budget (UDP payload bytes).
pub fn max_count(budget: usize, wire: WireType) -> usize {
    (budget.saturating_sub(HEADER_LEN) / wire.size()).min(u16::MAX as usize)
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Header {
        Header {
            kind: Kind::Data,
            flags: flags::RETX | flags::LAST,
            wire: WireType::I32,
            op: WireOp::Sum,
            exponent: -7,
            job: 0xDEADBEEF,
            tree: 3,
            member: 5,
            seq: 1_000_001,
            slot: 17,
            shadow: true,
            count: 4,
            contributors: 1,
            cwnd_cap: 0xFFFF,
        }
    }

    const KEY: PacketKey = PacketKey::from_bytes(*b"8 bytes!");

    #[test]
    fn roundtrip() {
        let h = sample();
        let mut pkt = vec![0u8; HEADER_LEN + 16];
        h.encode(&mut pkt, &KEY);
        let (d, payload) = Header::decode(&pkt).unwrap();
        assert_eq!(d, h);
        assert_eq!(payload.len(), 16);
        assert!(tag_ok(&pkt, &KEY));
    }

    #[test]
    fn the_tag_covers_every_header_field_and_needs_the_key() {
        let mut pkt = vec![0u8; HEADER_LEN + 16];
        sample().encode(&mut pkt, &KEY);
        assert!(!tag_ok(&pkt, &PacketKey::from_bytes(*b"8 bytez!")));
        for i in 0..HEADER_LEN {
            let mut p = pkt.clone();
            p[i] ^= 0x01;
            assert!(!tag_ok(&p, &KEY), "byte {i} is not covered");
        }
        patch_flags(&mut pkt, flags::ECN, &KEY);
        assert!(tag_ok(&pkt, &KEY));
    }

    #[test]
    fn rejects_unknown_version_and_bad_length() {
        let mut pkt = vec![0u8; HEADER_LEN + 16];
        sample().encode(&mut pkt, &KEY);
        pkt[2] = 1;
        assert_eq!(Header::decode(&pkt), Err(ProtoError::Version(1)));
        pkt[2] = VERSION;
        assert_eq!(Header::decode(&pkt[..40]), Err(ProtoError::Length));
    }

    /// docs/ina-protocol.md is the specification other implementations
    /// follow: its header length, datagram length, tagged bytes and field
    /// table must be this code's.
    #[test]
    fn the_documented_header_is_the_codes() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/ina-protocol.md");
        let doc = std::fs::read_to_string(path).unwrap();
        for stated in [
            format!("### Header ({HEADER_LEN} bytes)"),
            format!("`{HEADER_LEN} + count × size(wire)`"),
            format!("of bytes 0–{}", TAGGED_LEN - 1),
        ] {
            assert!(
                doc.contains(&stated),
                "the document does not say {stated:?}"
            );
        }
        // The table's rows (`| offset | size | field | meaning |`) follow one
        // another without gaps up to the header's end.
        let table = doc.split("### Header").nth(1).unwrap().lines();
        let rows = table
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2);
        let mut end = 0;
        for row in rows {
            let cell = |i: usize| row.split('|').nth(i).unwrap().trim().parse::<usize>();
            assert_eq!(cell(1), Ok(end), "{row}");
            end += cell(2).unwrap();
        }
        assert_eq!(end, HEADER_LEN);
    }

    #[test]
    fn slots_alternate_copies() {
        assert_eq!(slot_of(3, 8), (3, false));
        assert_eq!(slot_of(11, 8), (3, true));
        assert_eq!(slot_of(19, 8), (3, false));
    }
}
