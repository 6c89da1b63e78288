//! Slot copies: the switch memory cells where one sequence number is summed.
//!
//! Each slot of a job's pool has two copies (SwitchML's shadow copies):
//! consecutive uses of a slot alternate, so while copy A aggregates sequence
//! `s`, copy B still holds the result of `s - slots` for members whose result
//! was lost. A copy is freed once every member has acknowledged its result,
//! which a member does implicitly by sending the slot's next use.

/// Members per job on one switch; trees of switches scale beyond it.
pub const MAX_MEMBERS: usize = 256;

#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Bitmap([u64; MAX_MEMBERS / 64]);

impl Bitmap {
    /// Sets bit `i`; returns false when it was already set.
    pub fn set(&mut self, i: usize) -> bool {
        let (w, b) = (i / 64, 1u64 << (i % 64));
        let fresh = self.0[w] & b == 0;
        self.0[w] |= b;
        fresh
    }

    pub fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1u64 << (i % 64)) != 0
    }

    pub fn count(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn clear(&mut self) {
        self.0 = [0; MAX_MEMBERS / 64];
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Holds no memory. `seq` still names the last use, to reject stale packets.
    Empty,
    /// Contributions are being summed into `acc`.
    Aggregating,
    /// A leaf switch sent the partial sum to its parent and waits for the result.
    Up,
    /// `packet` is the encoded result, kept for retransmissions.
    Done,
}

/// How a packet's sequence number relates to a copy's current use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// The copy is free, or holds an older use that may be recycled.
    Fresh,
    /// The packet belongs to the copy's current use.
    Same,
    /// The packet is older than the copy's current use.
    Stale,
}

pub struct SlotCopy {
    pub state: State,
    pub used: bool,
    pub seq: u32,
    pub contrib: Bitmap,
    pub acked: Bitmap,
    pub members_in: u16,
    /// Workers represented (sum of the packets' contributor counts).
    pub workers: u16,
    pub wire: crate::proto::WireType,
    pub op: crate::proto::WireOp,
    pub count: u16,
    pub exp: i8,
    /// ECN and OVERFLOW flags gathered from contributions.
    pub flags: u8,
    /// Smallest cwnd_cap seen in contributions (PANAMA's min along the tree).
    pub cap_min: u16,
    pub acc: Vec<u32>,
    pub packet: Vec<u8>,
}

impl SlotCopy {
    pub fn new() -> SlotCopy {
        SlotCopy {
            state: State::Empty,
            used: false,
            seq: 0,
            contrib: Bitmap::default(),
            acked: Bitmap::default(),
            members_in: 0,
            workers: 0,
            wire: crate::proto::WireType::F32,
            op: crate::proto::WireOp::Sum,
            count: 0,
            exp: 0,
            flags: 0,
            cap_min: u16::MAX,
            acc: Vec::new(),
            packet: Vec::new(),
        }
    }

    pub fn holds_memory(&self) -> bool {
        self.state != State::Empty
    }

    pub fn classify(&self, seq: u32) -> Use {
        if !self.used {
            return Use::Fresh;
        }
        match seq.wrapping_sub(self.seq) as i32 {
            0 if self.state != State::Empty => Use::Same,
            d if d > 0 => Use::Fresh,
            _ => Use::Stale,
        }
    }

    /// Makes the copy hold a new use of its slot (its buffers are reused).
    pub fn reset(&mut self, seq: u32) {
        self.state = State::Aggregating;
        self.used = true;
        self.seq = seq;
        self.contrib.clear();
        self.acked.clear();
        self.members_in = 0;
        self.workers = 0;
        self.flags = 0;
        self.cap_min = u16::MAX;
    }
}

impl Default for SlotCopy {
    fn default() -> Self {
        SlotCopy::new()
    }
}
