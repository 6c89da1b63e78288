//! A plan builder that infers dependencies from the regions steps touch.
//!
//! Generators only say *what* moves where, in program order; the builder adds
//! the minimal read-after-write, write-after-read and write-after-write
//! dependencies per element range. Pipelining then falls out by itself: piece
//! `k` of round `s` waits only for the steps that last touched piece `k`, and
//! plans are race-free by construction. Transfers are split into pieces of at
//! most `shape.chunk` elements, tagged `(round, piece)`.
//!
//! A two-rank allreduce, verified:
//!
//! ```
//! use shoal_plan::{verify_plans, CallShape, Collective, PlanBuilder, Region};
//!
//! let shape = CallShape { collective: Collective::Allreduce, world: 2, count: 8, root: 0, chunk: 4, ranks_per_host: 1, counts: None };
//! let plans: Vec<_> = (0..2)
//!     .map(|rank| {
//!         let mut b = PlanBuilder::new(&shape, rank);
//!         let (input, out) = (Region::input(0, 8), Region::output(0, 8));
//!         let incoming = b.scratch(8);
//!         b.copy(input, out);
//!         b.send(1 - rank, 0, out);
//!         b.recv(1 - rank, 0, incoming);
//!         b.reduce(incoming, out); // waits for the send of each piece, too
//!         b.finish()
//!     })
//!     .collect();
//! verify_plans(&shape, &plans).unwrap();
//! ```

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;

use crate::deps::Deps;
use crate::partition::{piece_count, pieces};
use crate::plan::{Buf, CallShape, Collective, Op, Plan, Region};

/// Builds the plan of one rank; see the module docs.
pub struct PlanBuilder {
    plan: Plan,
    world: usize,
    chunk: usize,
    /// Tags are `round * stride + piece`; `stride` bounds the pieces of any message.
    stride: usize,
    /// Whether Input and Output may be the same memory (in-place calls), in
    /// which case they share one hazard map.
    aliased: bool,
    hazards: [Hazards; 3],
    /// The dependencies of the step being pushed (reused, not reallocated
    /// per step: a 1024-rank ring pushes 4 M steps).
    deps: Vec<usize>,
}

impl PlanBuilder {
    pub fn new(shape: &CallShape, rank: usize) -> PlanBuilder {
        // No message is longer than the largest buffer.
        let largest = (0..shape.world)
            .flat_map(|r| {
                [
                    shape.buffer_len(r, Buf::Input),
                    shape.buffer_len(r, Buf::Output),
                ]
            })
            .chain([shape.world * shape.count])
            .max()
            .unwrap_or(0)
            .max(1);
        PlanBuilder {
            plan: Plan::new(rank),
            world: shape.world,
            chunk: shape.chunk.max(1),
            stride: piece_count(largest, shape.chunk),
            aliased: may_alias(shape.collective),
            hazards: Default::default(),
            deps: Vec::new(),
        }
    }

    pub fn rank(&self) -> usize {
        self.plan.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Largest piece of a transfer, in elements.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Reserves `len` fresh scratch elements.
    pub fn scratch(&mut self, len: usize) -> Region {
        let region = Region::scratch(self.plan.scratch_len, len);
        self.plan.scratch_len += len;
        region
    }

    /// Appends `op`, waiting on the inferred dependencies plus `after`
    /// (needed only for ordering that no data carries, e.g. barriers).
    pub fn push(&mut self, op: Op, after: &[usize]) -> usize {
        let index = self.plan.steps.len();
        let mut deps = std::mem::take(&mut self.deps);
        deps.clear();
        deps.extend_from_slice(after);
        let (read, write) = region_accesses(&op);
        for (region, write) in [(read, false), (write, true)] {
            if let Some(region) = region.filter(|r| r.len > 0) {
                let slot = self.slot(region.buf);
                self.hazards[slot].access(region.offset, region.end(), index, write, &mut deps);
            }
        }
        deps.sort_unstable();
        deps.dedup();
        // A step that reads and writes one segment met itself: every other
        // dependency is an earlier step, so it can only be the last.
        if deps.last() == Some(&index) {
            deps.pop();
        }
        // A copy (inline for up to two): the builder keeps its scratch.
        let index = self.plan.push(op, deps.as_slice());
        self.deps = deps;
        index
    }

    /// Sends `src` to `peer` in pieces; returns the steps.
    pub fn send(&mut self, peer: usize, round: usize, src: Region) -> Range<usize> {
        self.message(Msg::Send, peer, round, src, &[])
    }

    /// Receives into `dst` from `peer`, matching [`PlanBuilder::send`] with the same round.
    pub fn recv(&mut self, peer: usize, round: usize, dst: Region) -> Range<usize> {
        self.message(Msg::Recv, peer, round, dst, &[])
    }

    /// Receives from `peer` and reduces into `dst`.
    pub fn recv_reduce(&mut self, peer: usize, round: usize, dst: Region) -> Range<usize> {
        self.message(Msg::RecvReduce, peer, round, dst, &[])
    }

    /// One message split into pieces tagged `(round, piece)`, each piece
    /// also waiting for `after`. Returns the steps, which are consecutive
    /// (a range, not a `Vec`: most callers drop it, and a 1024-rank ring
    /// makes 2 M messages).
    pub fn message(
        &mut self,
        kind: Msg,
        peer: usize,
        round: usize,
        region: Region,
        after: &[usize],
    ) -> Range<usize> {
        let first = self.plan.steps.len();
        for (k, (off, len)) in pieces(region.len, self.chunk).enumerate() {
            let (tag, part) = (self.tag(round, k), region.sub(off, len));
            let op = match kind {
                Msg::Send => Op::Send {
                    peer,
                    tag,
                    src: part,
                },
                Msg::Recv => Op::Recv {
                    peer,
                    tag,
                    dst: part,
                },
                Msg::RecvReduce => Op::RecvReduce {
                    peer,
                    tag,
                    dst: part,
                },
            };
            self.push(op, after);
        }
        first..self.plan.steps.len()
    }

    /// Copies `src` to `dst` piece by piece, so later pieces need not wait.
    pub fn copy(&mut self, src: Region, dst: Region) -> Range<usize> {
        self.local(src, dst, |src, dst| Op::Copy { src, dst })
    }

    /// `dst = dst (op) src`, piece by piece.
    pub fn reduce(&mut self, src: Region, dst: Region) -> Range<usize> {
        self.local(src, dst, |src, dst| Op::Reduce { src, dst })
    }

    pub fn finish(self) -> Plan {
        self.plan
    }

    /// The steps of a copy or reduction, piece by piece (consecutive).
    fn local(
        &mut self,
        src: Region,
        dst: Region,
        op: impl Fn(Region, Region) -> Op,
    ) -> Range<usize> {
        assert_eq!(src.len, dst.len, "copy/reduce of unequal regions");
        let first = self.plan.steps.len();
        for (off, len) in pieces(src.len, self.chunk) {
            self.push(op(src.sub(off, len), dst.sub(off, len)), &[]);
        }
        first..self.plan.steps.len()
    }

    /// Rounds `0..round_limit()` have tags (u32) for all their pieces.
    pub fn round_limit(&self) -> usize {
        u32::MAX as usize / self.stride
    }

    /// The tag of piece `piece` of a message in tag round `round`.
    pub fn tag(&self, round: usize, piece: usize) -> u32 {
        debug_assert!(piece < self.stride);
        u32::try_from(round * self.stride + piece)
            .expect("message tags overflow u32: raise the chunk size")
    }

    fn slot(&self, buf: Buf) -> usize {
        match buf {
            Buf::Input => 0,
            Buf::Output if self.aliased => 0,
            Buf::Output => 1,
            Buf::Scratch => 2,
        }
    }
}

/// The kinds of message step, for [`PlanBuilder::message`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Msg {
    Send,
    Recv,
    RecvReduce,
}

/// Collectives whose Input and Output may be one buffer (in-place calls).
/// Reduce is included because frameworks call it in place at the root.
pub fn may_alias(collective: Collective) -> bool {
    matches!(
        collective,
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce
    )
}

/// The regions `op` reads and the regions it writes (RecvReduce and Reduce
/// read their destination too, which a write already orders).
pub fn accesses(op: &Op) -> (Vec<Region>, Vec<Region>) {
    let (read, write) = region_accesses(op);
    (read.into_iter().collect(), write.into_iter().collect())
}

/// [`accesses`] without allocating: every operation reads at most one
/// region and writes at most one.
fn region_accesses(op: &Op) -> (Option<Region>, Option<Region>) {
    match *op {
        Op::Send { src, .. } => (Some(src), None),
        Op::Recv { dst, .. } | Op::RecvReduce { dst, .. } => (None, Some(dst)),
        Op::Copy { src, dst } | Op::Reduce { src, dst } => (Some(src), Some(dst)),
        // What an Expose lends to its readers until its Release is checked
        // by `verify::shared`; at the step itself nothing is touched.
        Op::Expose { .. } | Op::Release { .. } => (None, None),
        Op::PeerRead { dst, .. } | Op::PeerReadReduce { dst, .. } => (None, Some(dst)),
    }
}

/// Per element range `[start, end)` (`start` is its key in [`Hazards`]):
/// the last step that wrote it and the steps that read it since. Most
/// segments are read once or twice between writes (a piece sent, a block
/// sent), so the readers are a [`Deps`], inline up to two: a heap `Vec`
/// per segment read, and another per segment split after a read, were
/// most of the allocations of generating a plan.
#[derive(Clone, Debug)]
struct Segment {
    end: usize,
    writer: Option<usize>,
    readers: Deps,
}

impl Segment {
    /// Records that `step` reads or writes the segment and adds the steps it must wait for.
    fn access(&mut self, step: usize, write: bool, deps: &mut Vec<usize>) {
        if write {
            if self.readers.is_empty() {
                deps.extend(self.writer);
            } else {
                // Every reader already waits for the writer.
                deps.extend_from_slice(&self.readers);
                self.readers.clear();
            }
            self.writer = Some(step);
        } else {
            deps.extend(self.writer);
            self.readers.push(step);
        }
    }
}

/// Segments covering `[0, usize::MAX)` of one buffer. Their starts are
/// kept in order, to cut and walk ranges: a map, not a sorted `Vec` (a
/// 1024-rank ring cuts each buffer into 1024 blocks, walking them
/// downwards, and inserting each cut near the front of a `Vec` moved the
/// cuts already made: quadratic, a tenth of simulating that ring was this
/// memmove). The segments sit in a hash table by start, so the common
/// access, to a range cut before (a block or a piece), is one hash look-up
/// instead of a walk down the ordered map (a third of pushing a step).
#[derive(Clone, Debug)]
struct Hazards {
    starts: BTreeSet<usize>,
    segments: HashMap<usize, Segment, BuildHasherDefault<OffsetHasher>>,
}

impl Default for Hazards {
    fn default() -> Self {
        let whole = Segment {
            end: usize::MAX,
            writer: None,
            readers: Deps::new(),
        };
        let mut segments = HashMap::default();
        segments.insert(0, whole);
        Hazards {
            starts: BTreeSet::from([0]),
            segments,
        }
    }
}

impl Hazards {
    /// Records that `step` reads or writes `[start, end)` and adds the steps it must wait for.
    fn access(
        &mut self,
        start: usize,
        end: usize,
        step: usize,
        write: bool,
        deps: &mut Vec<usize>,
    ) {
        if let Some(seg) = self.segments.get_mut(&start).filter(|seg| seg.end == end) {
            seg.access(step, write, deps);
            return;
        }
        self.split(start);
        self.split(end);
        for s in self.starts.range(start..end) {
            let seg = self.segments.get_mut(s).expect("a segment at every start");
            seg.access(step, write, deps);
        }
    }

    /// Makes a segment start at `pos`.
    fn split(&mut self, pos: usize) {
        if self.segments.contains_key(&pos) {
            return;
        }
        let start = *self
            .starts
            .range(..pos)
            .next_back()
            .expect("the first segment starts at 0");
        let seg = self
            .segments
            .get_mut(&start)
            .expect("a segment at every start");
        let tail = Segment {
            end: seg.end,
            ..seg.clone()
        };
        seg.end = pos;
        self.starts.insert(pos);
        self.segments.insert(pos, tail);
    }
}

/// Hashes a buffer offset: a multiplication, whose high bits are folded
/// into the low ones (offsets are multiples of large powers of two, which
/// a multiplication alone leaves in the low bits the table indexes by).
#[derive(Default)]
struct OffsetHasher(u64);

impl Hasher for OffsetHasher {
    fn finish(&self) -> u64 {
        let h = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        h ^ (h >> 29)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_usize(&mut self, x: usize) {
        self.0 = x as u64;
    }
}
