//! The algorithm IR: a plan is, for one rank, a list of steps over regions of
//! the input, output and scratch buffers, each with the steps it waits on.
//!
//! Plans are data: the executor runs them, the verifier checks them, the
//! simulator and tracer replay them. Sizes and offsets are in *elements*; the
//! executor multiplies by the element size of the call's dtype.

use std::fmt;
use std::sync::Arc;

use crate::deps::Deps;

/// Which collective a plan implements. Determines the buffer contract below.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    Allreduce,
    Broadcast,
    Reduce,
    Allgather,
    ReduceScatter,
    Alltoall,
    Gather,
    Scatter,
    Barrier,
}

impl Collective {
    pub const ALL: [Collective; 9] = [
        Collective::Allreduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Allgather,
        Collective::ReduceScatter,
        Collective::Alltoall,
        Collective::Gather,
        Collective::Scatter,
        Collective::Barrier,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Allgather => "allgather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::Alltoall => "alltoall",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
            Collective::Barrier => "barrier",
        }
    }

    pub fn from_name(name: &str) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Whether the collective combines values with a reduction op.
    pub fn reduces(self) -> bool {
        matches!(
            self,
            Collective::Allreduce | Collective::Reduce | Collective::ReduceScatter
        )
    }

    /// Whether the collective has a root rank.
    pub fn rooted(self) -> bool {
        matches!(
            self,
            Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter
        )
    }
}

impl fmt::Display for Collective {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The parameters a generator needs to build the plans of one call.
///
/// `count` is the per-rank block size `n` in elements; the buffer contract per
/// collective (all ranks are group-local indices `0..world`):
///
/// | collective     | Input (read-only)          | Output                                        |
/// |----------------|----------------------------|-----------------------------------------------|
/// | allreduce      | n, own contribution        | n, the reduction of all Inputs                |
/// | reduce         | n, own contribution        | n at root (result); 0 elsewhere               |
/// | broadcast      | n at root; 0 elsewhere     | n, root's Input on every rank                 |
/// | allgather      | n                          | world*n, block q = Input of rank q            |
/// | reduce_scatter | world*n                    | n, reduction over ranks of their Input block r|
/// | alltoall       | world*n, block q goes to q | world*n, block q came from rank q             |
/// | gather         | n                          | world*n at root; 0 elsewhere                  |
/// | scatter        | world*n at root; 0 elsewhere | n, block r of root's Input                  |
/// | barrier        | 0                          | 0                                             |
///
/// With per-rank counts (`counts`, the `v` forms of MPI: allgatherv,
/// reduce_scatter with counts, alltoallv) block `q` has `counts[q]` elements
/// instead of `n` and blocks lie back to back: allgather's Output and
/// reduce_scatter's Input hold `sum(counts)`, rank `r`'s allgather Input and
/// reduce_scatter Output `counts[r]`. For alltoall `counts` is the
/// `world x world` matrix, `counts[s * world + d]` the elements rank `s`
/// sends to rank `d`: rank `r`'s Input is its row, block `d` going to `d`, its
/// Output its column, block `s` from `s`. Other collectives take no counts.
///
/// Input and Output may be the same memory (in-place calls: allreduce with
/// Input == Output, broadcast at root). Plans must therefore copy Input into
/// Output/Scratch before writing Output, and never read Input after writing
/// Output; the executor turns a Copy whose source and destination are the same
/// memory into a no-op.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CallShape {
    pub collective: Collective,
    /// Group size.
    pub world: usize,
    /// Per-rank block size in elements (see the table above).
    pub count: usize,
    /// Root rank for rooted collectives, 0 otherwise.
    pub root: usize,
    /// Elements per pipelined chunk; generators split transfers into pieces
    /// of at most this many elements so the executor can overlap them.
    pub chunk: usize,
    /// Ranks per host when the group is laid out in equal contiguous blocks
    /// (rank `r` on host `r / ranks_per_host`), as launchers place ranks; 1 when every
    /// rank is its own host or the layout is irregular. Topology-aware
    /// algorithms use it; the others ignore it.
    pub ranks_per_host: usize,
    /// Per-rank block sizes replacing `count` (see the table above), or
    /// `None` when every block has `count` elements.
    pub counts: Option<Arc<[usize]>>,
}

impl CallShape {
    /// A call of `count` elements per rank block on `world` ranks, in
    /// chunks of `chunk` elements: root 0, every rank its own host, equal
    /// blocks (set the other fields with `..CallShape::new(..)`).
    pub fn new(collective: Collective, world: usize, count: usize, chunk: usize) -> CallShape {
        CallShape {
            collective,
            world,
            count,
            root: 0,
            chunk,
            ranks_per_host: 1,
            counts: None,
        }
    }

    /// `(hosts, ranks per host)` of the block layout; `(world, 1)` when
    /// `ranks_per_host` does not describe one.
    pub fn layout(&self) -> (usize, usize) {
        let l = self.ranks_per_host;
        if l == 0 || self.world == 0 || !self.world.is_multiple_of(l) {
            (self.world, 1)
        } else {
            (self.world / l, l)
        }
    }

    /// How many entries `counts` must have for this collective, or `None`
    /// when it takes no per-rank counts.
    pub fn counts_len(&self) -> Option<usize> {
        match self.collective {
            Collective::Allgather | Collective::ReduceScatter => Some(self.world),
            Collective::Alltoall => Some(self.world * self.world),
            _ => None,
        }
    }

    /// Elements of block `q` (allgather, reduce_scatter).
    pub fn block(&self, q: usize) -> usize {
        self.counts.as_ref().map_or(self.count, |c| c[q])
    }

    /// Offset of block `q` in the vector of all blocks (allgather's Output,
    /// reduce_scatter's Input); `block_offset(world)` is its length.
    pub fn block_offset(&self, q: usize) -> usize {
        self.counts
            .as_ref()
            .map_or(q * self.count, |c| c[..q].iter().sum())
    }

    /// Alltoall: elements rank `src` sends to rank `dst`.
    pub fn sends(&self, src: usize, dst: usize) -> usize {
        self.counts
            .as_ref()
            .map_or(self.count, |c| c[src * self.world + dst])
    }

    /// Alltoall: offset in `src`'s Input of its block for `dst`.
    pub fn send_offset(&self, src: usize, dst: usize) -> usize {
        (0..dst).map(|d| self.sends(src, d)).sum()
    }

    /// Alltoall: offset in `dst`'s Output of the block from `src`.
    pub fn recv_offset(&self, dst: usize, src: usize) -> usize {
        (0..src).map(|s| self.sends(s, dst)).sum()
    }

    /// Length in elements of each buffer for `rank`.
    pub fn buffer_len(&self, rank: usize, buf: Buf) -> usize {
        use Collective::*;
        let n = self.count;
        let w = self.world;
        let is_root = rank == self.root;
        match (self.collective, buf) {
            (_, Buf::Scratch) => 0, // scratch size is declared by the plan
            (Allreduce, _) => n,
            (Reduce, Buf::Input) => n,
            (Reduce, Buf::Output) => {
                if is_root {
                    n
                } else {
                    0
                }
            }
            (Broadcast, Buf::Input) => {
                if is_root {
                    n
                } else {
                    0
                }
            }
            (Broadcast, Buf::Output) => n,
            (Allgather, Buf::Input) => self.block(rank),
            (Allgather, Buf::Output) => self.block_offset(w),
            (ReduceScatter, Buf::Input) => self.block_offset(w),
            (ReduceScatter, Buf::Output) => self.block(rank),
            (Alltoall, Buf::Input) => self.send_offset(rank, w),
            (Alltoall, Buf::Output) => self.recv_offset(rank, w),
            (Gather, Buf::Input) => n,
            (Gather, Buf::Output) => {
                if is_root {
                    w * n
                } else {
                    0
                }
            }
            (Scatter, Buf::Input) => {
                if is_root {
                    w * n
                } else {
                    0
                }
            }
            (Scatter, Buf::Output) => n,
            (Barrier, _) => 0,
        }
    }
}

/// The most elements any buffer of a call, scratch included, may hold: at 8
/// bytes, the largest element the executor runs, the most one allocation can
/// have (`isize::MAX` bytes). Larger numbers in a plan document are typos or
/// attacks, and would overflow the executor's byte arithmetic.
pub const MAX_ELEMENTS: usize = isize::MAX as usize / 8;

/// A plan may use scratch of at most `SCRATCH_FACTOR` times the call's
/// elements ([`CallShape::elements`]) plus [`SCRATCH_FLOOR`]. The built-in
/// algorithms need at most once the call's elements (allreduce `direct`
/// keeps every rank's block); the rest is room for Python algorithms. A
/// plan asking for more is refused before anything is allocated, rather
/// than aborting the process on an allocation that cannot succeed.
pub const SCRATCH_FACTOR: usize = 4;

/// Scratch every plan may use whatever the call's size (1 Mi elements, a
/// few MiB), for algorithms that stage small calls.
pub const SCRATCH_FLOOR: usize = 1 << 20;

impl CallShape {
    /// Elements of every rank's blocks together: `world × count`, or the sum
    /// of `counts`; no buffer of the call is larger. None on overflow.
    pub fn elements(&self) -> Option<usize> {
        match &self.counts {
            None => self.world.checked_mul(self.count),
            Some(c) => c.iter().try_fold(0usize, |sum, &n| sum.checked_add(n)),
        }
    }

    /// Why no executor could run a call of this shape, if so: the field at
    /// fault (`world`, `count`, `counts`) and what is wrong with it. Every
    /// size the plan crate computes from a shape that passes fits a `usize`.
    pub fn check(&self) -> Result<(), ShapeError> {
        // Ranks are 32-bit in messages and in the verifier, and `world²`
        // (alltoall's counts) must not overflow.
        if self.world > u32::MAX as usize {
            return Err(ShapeError::WorldTooLarge(self.world));
        }
        // The contract names the root's buffers, which must exist.
        if self.collective.rooted() && self.root >= self.world {
            return Err(ShapeError::RootOutside {
                root: self.root,
                world: self.world,
            });
        }
        match self.elements() {
            Some(e) if e <= MAX_ELEMENTS => Ok(()),
            _ if self.counts.is_some() => Err(ShapeError::CountsTooLarge),
            _ => Err(ShapeError::CountTooLarge {
                world: self.world,
                count: self.count,
            }),
        }
    }

    /// The most scratch elements a plan of this call may use (see
    /// [`SCRATCH_FACTOR`]).
    pub fn max_scratch(&self) -> usize {
        let elements = self.elements().unwrap_or(MAX_ELEMENTS);
        elements
            .saturating_mul(SCRATCH_FACTOR)
            .saturating_add(SCRATCH_FLOOR)
            .min(MAX_ELEMENTS)
    }
}

/// Why no executor could run a call of some shape ([`CallShape::check`]).
/// Its text starts with the field at fault (`world: ...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapeError {
    /// More ranks than 32-bit rank numbers hold.
    WorldTooLarge(usize),
    /// A rooted collective whose root is no rank of the world.
    RootOutside { root: usize, world: usize },
    /// Per-rank counts that add up to more than a call can hold.
    CountsTooLarge,
    /// `world × count` is more than a call can hold.
    CountTooLarge { world: usize, count: usize },
}

impl ShapeError {
    /// The field of the shape at fault.
    pub fn field(&self) -> &'static str {
        match self {
            ShapeError::WorldTooLarge(_) => "world",
            ShapeError::RootOutside { .. } => "root",
            ShapeError::CountsTooLarge => "counts",
            ShapeError::CountTooLarge { .. } => "count",
        }
    }
}

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.field())?;
        match self {
            ShapeError::WorldTooLarge(world) => write!(f, "{world} ranks is more than 2^32 - 1"),
            ShapeError::RootOutside { root, world } => {
                write!(f, "{root} is not a rank of a world of {world}")
            }
            ShapeError::CountsTooLarge => write!(
                f,
                "they add up to more than the {MAX_ELEMENTS} elements a call can hold"
            ),
            ShapeError::CountTooLarge { world, count } => write!(
                f,
                "{world} ranks × {count} elements is more than the {MAX_ELEMENTS} elements a call can hold"
            ),
        }
    }
}

impl std::error::Error for ShapeError {}

/// A buffer a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The caller's input; never written by a plan.
    Input,
    /// The caller's output.
    Output,
    /// Private scratch of `Plan::scratch_len` elements, allocated by the executor.
    Scratch,
}

/// A contiguous range of elements in one buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    pub buf: Buf,
    pub offset: usize,
    pub len: usize,
}

impl Region {
    pub fn new(buf: Buf, offset: usize, len: usize) -> Region {
        Region { buf, offset, len }
    }
    pub fn input(offset: usize, len: usize) -> Region {
        Region::new(Buf::Input, offset, len)
    }
    pub fn output(offset: usize, len: usize) -> Region {
        Region::new(Buf::Output, offset, len)
    }
    pub fn scratch(offset: usize, len: usize) -> Region {
        Region::new(Buf::Scratch, offset, len)
    }
    pub fn end(&self) -> usize {
        self.offset + self.len
    }
    /// Whether the two regions share at least one element.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.buf == other.buf
            && self.len > 0
            && other.len > 0
            && self.offset < other.end()
            && other.offset < self.end()
    }
    /// The sub-region `[offset, offset+len)` relative to this one.
    pub fn sub(&self, offset: usize, len: usize) -> Region {
        debug_assert!(offset + len <= self.len);
        Region::new(self.buf, self.offset + offset, len)
    }
}

/// What a step does. Peers are group-local ranks. A `Send` matches the `Recv`
/// or `RecvReduce` on `peer` that names this rank and carries the same `tag`;
/// the lengths must agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Send {
        peer: usize,
        tag: u32,
        src: Region,
    },
    Recv {
        peer: usize,
        tag: u32,
        dst: Region,
    },
    /// `dst = dst (op) incoming`, fused with the receive.
    RecvReduce {
        peer: usize,
        tag: u32,
        dst: Region,
    },
    Copy {
        src: Region,
        dst: Region,
    },
    /// `dst = dst (op) src`.
    Reduce {
        src: Region,
        dst: Region,
    },
    /// Offers `src` to the ranks on this host under `flag` (a number unique
    /// per exposing rank within the plan): they read it with [`Op::PeerRead`]
    /// / [`Op::PeerReadReduce`] until the matching [`Op::Release`]. Completes
    /// at once; the region must not be written until that Release is done.
    ///
    /// With `slot`, the executor copies `src` into this rank's slot of the
    /// host's shared segment when it fits (`SHOAL_SHM_SLOT_BYTES`): peers then
    /// read it with plain loads instead of a syscall, and the Release waits
    /// for nothing (the slot's readers are awaited when the slot is reused,
    /// two calls later). Larger regions are exposed in place, so plans are
    /// checked as if they always were. At most one slot exposure per plan.
    Expose {
        flag: u32,
        src: Region,
        slot: bool,
    },
    /// Waits until `peer` exposed `flag`, then copies `dst.len` elements
    /// from `offset` (relative to the exposed region) of it into `dst`.
    PeerRead {
        peer: usize,
        flag: u32,
        offset: usize,
        dst: Region,
    },
    /// Like [`Op::PeerRead`], but `dst = dst (op) peer's elements`, reduced
    /// while reading.
    PeerReadReduce {
        peer: usize,
        flag: u32,
        offset: usize,
        dst: Region,
    },
    /// Waits until `reads` peer reads of this rank's `flag` region are done;
    /// after it the exposed region may be written again.
    Release {
        flag: u32,
        reads: u32,
    },
}

impl Op {
    /// A [`Op::PeerRead`] (`reduce` false) or [`Op::PeerReadReduce`].
    pub fn peer_read(peer: usize, flag: u32, offset: usize, dst: Region, reduce: bool) -> Op {
        if reduce {
            Op::PeerReadReduce {
                peer,
                flag,
                offset,
                dst,
            }
        } else {
            Op::PeerRead {
                peer,
                flag,
                offset,
                dst,
            }
        }
    }

    /// `(peer, flag, offset, dst, reduces)` of a [`Op::PeerRead`] or
    /// [`Op::PeerReadReduce`].
    pub fn read_peer(&self) -> Option<(usize, u32, usize, Region, bool)> {
        match *self {
            Op::PeerRead {
                peer,
                flag,
                offset,
                dst,
            } => Some((peer, flag, offset, dst, false)),
            Op::PeerReadReduce {
                peer,
                flag,
                offset,
                dst,
            } => Some((peer, flag, offset, dst, true)),
            _ => None,
        }
    }
}

/// One step and the indices (into `Plan::steps`) of the steps it waits on.
/// Dependencies always point to earlier steps, so a plan is a DAG in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub op: Op,
    pub deps: Deps,
}

/// The steps of one rank for one call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub rank: usize,
    pub steps: Vec<Step>,
    /// Scratch elements the executor must provide.
    pub scratch_len: usize,
}

impl Plan {
    pub fn new(rank: usize) -> Plan {
        Plan {
            rank,
            steps: Vec::new(),
            scratch_len: 0,
        }
    }

    /// Appends a step and returns its index, for use in later `deps`.
    pub fn push(&mut self, op: Op, deps: impl Into<Deps>) -> usize {
        let deps = deps.into();
        debug_assert!(deps.iter().all(|&d| d < self.steps.len()));
        self.steps.push(Step { op, deps });
        self.steps.len() - 1
    }

    pub fn send(&mut self, peer: usize, tag: u32, src: Region, deps: Vec<usize>) -> usize {
        self.push(Op::Send { peer, tag, src }, deps)
    }
    pub fn recv(&mut self, peer: usize, tag: u32, dst: Region, deps: Vec<usize>) -> usize {
        self.push(Op::Recv { peer, tag, dst }, deps)
    }
    pub fn recv_reduce(&mut self, peer: usize, tag: u32, dst: Region, deps: Vec<usize>) -> usize {
        self.push(Op::RecvReduce { peer, tag, dst }, deps)
    }
    pub fn copy(&mut self, src: Region, dst: Region, deps: Vec<usize>) -> usize {
        self.push(Op::Copy { src, dst }, deps)
    }
    pub fn reduce(&mut self, src: Region, dst: Region, deps: Vec<usize>) -> usize {
        self.push(Op::Reduce { src, dst }, deps)
    }
    pub fn expose(&mut self, flag: u32, src: Region, deps: Vec<usize>) -> usize {
        let slot = false;
        self.push(Op::Expose { flag, src, slot }, deps)
    }
    /// An [`Op::Expose`] through this rank's shared slot when it fits.
    pub fn expose_slot(&mut self, flag: u32, src: Region, deps: Vec<usize>) -> usize {
        let slot = true;
        self.push(Op::Expose { flag, src, slot }, deps)
    }
    /// A [`Op::PeerRead`] (`reduce` false) or [`Op::PeerReadReduce`].
    pub fn peer_read(
        &mut self,
        peer: usize,
        flag: u32,
        offset: usize,
        dst: Region,
        reduce: bool,
        deps: Vec<usize>,
    ) -> usize {
        self.push(Op::peer_read(peer, flag, offset, dst, reduce), deps)
    }
    pub fn release(&mut self, flag: u32, reads: u32, deps: Vec<usize>) -> usize {
        self.push(Op::Release { flag, reads }, deps)
    }
}
