//! Point-to-point transports behind one trait: tag-matched, non-blocking,
//! with completion handles. `shm` connects ranks of one host, `tcp` any ranks.
//!
//! Every message carries its [`Tag`] and the [`CallSig`] of the collective
//! call that sent it, so a receiver whose own call differs (another
//! collective, count, dtype, op or root) reports a mismatch instead of
//! waiting forever or reading the wrong bytes. Calls that exchange no message
//! between the two differing ranks are caught too (see `matching/mismatch.rs`): a
//! message for a call the receiver has finished, a message left over when it
//! finishes, a rank blocked in a call telling the rank it waits on which call
//! that is ([`Blocked`]), and the signature's `history` of the earlier calls.

use std::fmt;
use std::time::Duration;

use shoal_bootstrap::fnv;

pub mod cma;
pub mod doorbell;
pub mod flow;
mod frame;
mod matching;
mod pool;
pub mod routed;
mod setup;
pub mod shm;
pub mod tcp;
pub mod ucx;

pub use doorbell::Doorbell;
pub use routed::{Routed, RoutedConfig};
pub use shm::{ShmConfig, ShmTransport};
/// Keys and proofs, and the store ranks exchange addresses through, come from
/// the bootstrap crate; re-exported so transport users need one import.
pub use shoal_bootstrap::{auth, KvStore};
pub use tcp::{Congestion, TcpConfig, TcpTransport};
pub use ucx::{UcxConfig, UcxTransport};

/// Identifies a message between one sender and one receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// Communicator (group) id, equal on all members.
    pub comm: u32,
    /// Per-communicator collective sequence number.
    pub seq: u32,
    /// Step tag from the plan.
    pub step: u32,
}

/// A fingerprint of one collective call, compared between sender and receiver
/// of every message with the same `(comm, seq)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct CallSig {
    /// Collective kind (its index in the core's list; 0xff for point-to-point).
    pub kind: u8,
    pub dtype: u8,
    pub op: u8,
    /// Algorithm id, so ranks that picked different algorithms are caught
    /// too: a stable hash of the algorithm's name (`shoal_plan::algorithms::
    /// algorithm_id`), never a position in a list two builds could order
    /// differently.
    pub algo: u32,
    pub root: u32,
    pub count: u64,
    /// A hash of the signatures of the communicator's earlier calls (0 for
    /// point-to-point), so that a mismatch nobody noticed when it happened
    /// is refused by the next message between two ranks whose calls diverged.
    pub history: u32,
}

impl CallSig {
    /// The `kind` of point-to-point messages; their signatures are compared
    /// only between the same two ranks.
    pub const P2P_KIND: u8 = 0xff;

    /// Whether this is a collective call's signature (not point-to-point).
    pub fn is_collective(&self) -> bool {
        self.kind != Self::P2P_KIND
    }

    /// The `history` of the call after this one: this call folded into ours.
    pub fn next_history(&self) -> u32 {
        // FNV-1a over the fields, seeded with the history so far.
        let h = fnv::OFFSET_32 ^ self.history;
        let h = fnv::fold_32(h, &[self.kind, self.dtype, self.op]);
        let h = fnv::fold_32(h, &self.algo.to_le_bytes());
        let h = fnv::fold_32(h, &self.root.to_le_bytes());
        fnv::fold_32(h, &self.count.to_le_bytes())
    }

    /// Whether `other` is the same call (collective, arguments, algorithm)
    /// whatever the calls before it were.
    pub fn same_call(&self, other: &CallSig) -> bool {
        CallSig {
            history: other.history,
            ..*self
        } == *other
    }
}

/// What a rank blocked in a call is waiting for. It tells the ranks it waits
/// on (each compares the call with its own, so calls that deadlock on each
/// other are reported as a mismatch), and answers anyone who asks
/// ([`Transport::ask`]), so a timeout can name the rank that stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// The call (`comm`, `seq`) and the step of its oldest pending request.
    pub tag: Tag,
    pub sig: CallSig,
    /// Global ranks whose messages (or room for ours) it waits for; at most
    /// [`Blocked::MAX_ON`] travel.
    pub on: Vec<usize>,
}

impl Blocked {
    /// How many ranks waited on a message can name.
    pub const MAX_ON: usize = 4;
}

/// What a peer said when asked what it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It is blocked in a call.
    Blocked(Blocked),
    /// It is inside shoal but not blocked in a call (still working on it).
    Busy,
}

/// A transport request handle.
pub type ReqId = u64;

/// Receives the bytes of an incoming message piece by piece: `(offset, bytes)`.
/// Every piece but the last has a length that is a multiple of 64, so
/// element boundaries of any dtype are respected.
pub type Sink = Box<dyn FnMut(usize, &[u8]) + Send>;

/// Where a receive puts the incoming bytes.
pub enum RecvInto {
    /// Copy into `len` bytes at `dst`.
    Buffer { dst: *mut u8, len: usize },
    /// Hand the bytes to a sink (used to reduce straight out of the transport).
    Sink { len: usize, sink: Sink },
}

// SAFETY: the raw pointer is only dereferenced while the owning request is
// live; the caller of `irecv` guarantees the memory outlives the request.
unsafe impl Send for RecvInto {}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The peer process exited or its connection broke.
    PeerDied { peer: usize, detail: String },
    /// Rank `peer` made call number `seq` of a communicator with signature
    /// `theirs` while this rank (`rank`) made it with `ours` (`None`: too
    /// long ago to remember).
    Mismatch {
        rank: usize,
        peer: usize,
        seq: u32,
        ours: Option<CallSig>,
        theirs: CallSig,
    },
    /// A message matched by tag had a different length than the receive expected.
    LengthMismatch {
        peer: usize,
        tag: Tag,
        expected: usize,
        got: usize,
    },
    /// A peer aborted the job and told us why.
    Aborted { peer: usize, reason: String },
    /// Setting up or using the transport failed.
    Io(String),
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::PeerDied { peer, detail } => write!(f, "rank {peer} died ({detail})"),
            TransportError::Mismatch {
                rank,
                peer,
                seq,
                ours,
                theirs,
            } => write!(
                f,
                "mismatched collective: call {seq}: rank {peer} called {theirs:?} while rank {rank} called {ours:?}"
            ),
            TransportError::LengthMismatch { peer, tag, expected, got } => write!(
                f,
                "message from rank {peer} ({tag:?}) has {got} bytes, expected {expected}"
            ),
            TransportError::Aborted { peer, reason } => write!(f, "rank {peer} aborted: {reason}"),
            TransportError::Io(e) => write!(f, "transport error: {e}"),
        }
    }
}

impl std::error::Error for TransportError {}

pub type Result<T> = std::result::Result<T, TransportError>;

/// A point-to-point transport among the ranks `0..world` of one job.
///
/// Ranks are global job ranks. Requests progress when `progress`, `test` or
/// `wait` is called (and, for transports with I/O threads, in the
/// background). All methods may be called from one thread at a time per
/// transport; implementations must be `Send + Sync` so a transport can be
/// shared by the Python binding's threads.
pub trait Transport: Send + Sync {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;

    /// Starts sending `len` bytes at `data` to `peer`. `call_bytes` is the
    /// size of the call the message belongs to on this rank (the larger of
    /// its input and output; 0 outside a collective): whether the data is
    /// likely still in cache, which decides how shared memory moves it
    /// (`ShmConfig::cma_min_call`).
    ///
    /// # Safety
    /// The memory must stay valid and unmodified until the request completes.
    unsafe fn isend(
        &self,
        peer: usize,
        tag: Tag,
        sig: CallSig,
        data: *const u8,
        len: usize,
        call_bytes: usize,
    ) -> Result<ReqId>;

    /// Posts a receive of the message from `peer` with `tag`.
    ///
    /// # Safety
    /// For `RecvInto::Buffer`, the memory must stay valid and otherwise
    /// untouched until the request completes.
    unsafe fn irecv(&self, peer: usize, tag: Tag, sig: CallSig, into: RecvInto) -> Result<ReqId>;

    /// Receive from any source: of the messages from the `(peer, tag)` pairs
    /// of `from` that have arrived here and wait for their receive, the
    /// sender of the earliest (see `Matcher::probe`); `None` while there is
    /// none. Moves nothing: the caller then posts the receive from that peer
    /// with [`Transport::irecv`], which takes the message.
    fn probe(&self, from: &[(usize, Tag)]) -> Result<Option<usize>>;

    /// Whether the request is complete; a completed request is forgotten, so
    /// `test` returns `Ok(true)` once per request. Errors name the failing peer.
    fn test(&self, req: ReqId) -> Result<bool>;

    /// Moves data without blocking. Returns whether anything changed.
    fn progress(&self) -> Result<bool>;

    /// Blocks until something may have changed or `timeout` passes, spinning
    /// briefly and then sleeping (so waiting ranks do not burn the CPU when
    /// ranks outnumber cores). Returns an error when a peer died or aborted.
    fn wait(&self, timeout: Duration) -> Result<()>;

    /// Tells every peer that this rank gives up, with the reason; their
    /// pending and later operations fail with `TransportError::Aborted`.
    fn abort(&self, reason: &str);

    /// This rank finished call `seq` of communicator `comm` (signature
    /// `sig`). Collective calls finish in sequence order on every rank, so
    /// from now on a message for this call or an earlier one can never be
    /// received: one already queued is a mismatch now, a later one when it
    /// arrives (the job fails, and the message is dropped instead of
    /// waiting forever). Also forgets what [`Transport::set_blocked`] said.
    fn finish_call(&self, comm: u32, seq: u32, sig: CallSig) -> Result<()>;

    /// This rank is blocked in a call: tells the ranks in `b.on` (reachable
    /// by this transport) which call it is in and answers [`Transport::ask`]
    /// with it until the call finishes. A peer in another call with the same
    /// sequence number reports the mismatch.
    fn set_blocked(&self, b: &Blocked);

    /// Asks `peer` what it is waiting for; its answer replaces the last one
    /// heard ([`Transport::answer`]). A peer answers while it is inside
    /// shoal; a stopped one never does.
    fn ask(&self, peer: usize) -> Result<()>;

    /// What `peer` last said it waits for since this rank asked it (or
    /// told unasked, being blocked on this rank); `None` if nothing.
    fn answer(&self, peer: usize) -> Option<Answer>;

    /// The shared-memory window over the ranks of this host, when this
    /// transport has one (shm); plans with shared-memory steps need it.
    fn shared(&self) -> Option<&dyn SharedWindow> {
        None
    }
}

/// Where a peer's exposed region is (see [`SharedWindow::exposed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposed {
    /// `len` bytes at `addr` of the peer's own memory, read with
    /// [`SharedWindow::read`] (a syscall).
    Memory { addr: u64, len: usize },
    /// `len` bytes copied into the peer's slot buffer `index`, mapped here at
    /// `data`: read with plain loads. Valid until the read is counted.
    Slot {
        data: *const u8,
        len: usize,
        index: usize,
    },
}

impl Exposed {
    /// Bytes exposed.
    pub fn len(&self) -> usize {
        match *self {
            Exposed::Memory { len, .. } | Exposed::Slot { len, .. } => len,
        }
    }

    /// Whether no bytes are exposed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slot buffer holding the region, if it is in one.
    pub fn slot(&self) -> Option<usize> {
        match *self {
            Exposed::Slot { index, .. } => Some(index),
            Exposed::Memory { .. } => None,
        }
    }
}

/// What [`SharedWindow::expose_slot`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotExpose {
    /// Copied into slot buffer `index`.
    Placed(usize),
    /// Every slot buffer is still read by peers (of the calls before):
    /// try again when they are done.
    Busy,
    /// The region does not fit a slot buffer (or slots are off).
    TooBig,
}

/// Exposed regions of the ranks on one host, read in place (see
/// `shm::window`). Flags are small per-call numbers; `stamp` names the call
/// (`comm << 32 | seq`), so a region exposed for another call is not taken.
pub trait SharedWindow {
    /// Whether this rank may read every local peer's memory.
    fn can_read_all(&self) -> bool;
    /// Publishes `len` bytes at `addr` of this process under `flag` for the
    /// call `stamp` with signature `sig`, with no reads done yet, and wakes
    /// the local peers.
    fn expose(&self, flag: u32, stamp: u64, sig: &CallSig, addr: u64, len: usize) -> Result<()>;
    /// Copies `src` into the first of this rank's slot buffers whose reads
    /// are all counted, and publishes it under `flag` like
    /// [`SharedWindow::expose`]; the owner need not wait for its readers
    /// (they are awaited when the buffer is reused).
    fn expose_slot(&self, flag: u32, stamp: u64, sig: &CallSig, src: &[u8]) -> Result<SlotExpose>;
    /// Whether every slot buffer of this rank is still being read.
    fn slot_busy(&self) -> bool;
    /// Records that `reads` peer reads will be made of slot buffer `index`
    /// (its plan's Release), after which the buffer may be filled again.
    fn slot_release(&self, index: usize, reads: u32) -> Result<()>;
    /// Where `peer` exposed `flag` for `stamp`, or `None` while it has not;
    /// `TransportError::Mismatch` when the peer exposed it in a call whose
    /// signature differs from `sig`.
    fn exposed(&self, peer: usize, flag: u32, stamp: u64, sig: &CallSig)
        -> Result<Option<Exposed>>;
    /// Reads `dst.len()` bytes at `addr` of `peer`'s memory.
    fn read(&self, peer: usize, addr: u64, dst: &mut [u8]) -> Result<()>;
    /// Counts one finished read of `peer`'s `flag` region (in slot buffer
    /// `slot`, if it was in one) and wakes `peer`.
    fn read_done(&self, peer: usize, flag: u32, slot: Option<usize>) -> Result<()>;
    /// Finished peer reads of this rank's `flag` region since it was exposed.
    fn reads_done(&self, flag: u32) -> Result<u32>;
    /// Waits until `ready()` holds, something arrives, or `timeout` passes:
    /// spins yielding, then sleeps on the doorbell. Errors when a peer died
    /// or the job aborted.
    fn wait_until(&self, timeout: Duration, ready: &mut dyn FnMut() -> bool) -> Result<()>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_hash_is_pinned() {
        // Ranks of different builds compare it in every message header.
        let sig = CallSig {
            kind: 0,
            dtype: 7,
            op: 2,
            algo: 0x4385_fe69,
            root: 3,
            count: 1000,
            history: 0x1234_5678,
        };
        assert_eq!(sig.next_history(), 0x5fb0_b603);
    }
}
