//! What the verifier reports: the rank, the step and what is wrong.

use std::fmt;

use crate::plan::{Buf, Collective, Op, Plan, Region, SCRATCH_FACTOR, SCRATCH_FLOOR};

/// A verification failure. `rank` and `step` locate it when it belongs to
/// one step; `op` is that step's operation, for the message.
#[derive(Clone, Debug, PartialEq)]
pub struct VerifyError {
    pub rank: Option<usize>,
    pub step: Option<usize>,
    pub op: Option<Box<Op>>,
    pub kind: ErrorKind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum ErrorKind {
    WrongCollective {
        algorithm: Collective,
        call: Collective,
    },
    PlanCount {
        expected: usize,
        got: usize,
    },
    RankField {
        got: usize,
    },
    /// Asks for more scratch than a plan of the call may use: `limit`, from
    /// the call's `elements` (see `CallShape::max_scratch`).
    ScratchLimit {
        scratch: usize,
        limit: usize,
        elements: usize,
    },
    /// More steps than the verifier checks in one rank's plan.
    TooManySteps {
        steps: usize,
        limit: usize,
    },
    /// The plans cut their buffers into more pieces than the verifier
    /// models (see `segments`).
    TooManySegments {
        limit: usize,
    },
    BadPeer {
        peer: usize,
    },
    BadDep {
        dep: usize,
    },
    OutOfBounds {
        region: Region,
        buf_len: usize,
    },
    WritesInput,
    LengthMismatch {
        src: usize,
        dst: usize,
    },
    SelfOverlap,
    DuplicateTag {
        peer: usize,
        tag: u32,
        first: usize,
    },
    Unmatched {
        peer: usize,
        tag: u32,
    },
    MessageLength {
        sent: usize,
        received: usize,
    },
    Race {
        other: usize,
        region: Region,
    },
    /// Reads Input after `writer` wrote the same elements of Output, which
    /// breaks in-place calls where they are one buffer.
    InPlaceHazard {
        writer: usize,
        region: Region,
    },
    /// Reads Input elements that it also writes through Output.
    AliasedOverlap,
    Deadlock {
        stuck: Vec<Stuck>,
    },
    WrongResult {
        buf: Buf,
        index: usize,
        problem: Problem,
    },
    /// Output element `index` is combined in another order than on rank 0.
    NotReproducible {
        index: usize,
    },
    BarrierLeak {
        unseen: usize,
    },
    /// Reads a flag that `peer` never exposes.
    NotExposed {
        peer: usize,
        flag: u32,
    },
    /// Reads past the end of the peer's exposed region of `exposed` elements.
    ExposedBounds {
        exposed: usize,
        offset: usize,
        len: usize,
    },
    /// Reads the memory of a rank on another host.
    OtherHost {
        peer: usize,
    },
    /// Exposes `flag` a second time (step `first` did already).
    DuplicateFlag {
        flag: u32,
        first: usize,
    },
    /// A second Expose through the rank's slot (step `first` was one): a
    /// plan owns one slot per call.
    SecondSlot {
        first: usize,
    },
    /// An Expose without a Release after it, or a Release without an Expose
    /// before it.
    Unreleased {
        flag: u32,
    },
    /// Releases `flag` after `declared` reads, but the peers read it `actual` times.
    ReleaseCount {
        flag: u32,
        declared: u32,
        actual: usize,
    },
    /// Writes elements exposed by step `expose` before its Release.
    WritesExposed {
        expose: usize,
        region: Region,
    },
}

/// A step that is ready but whose message partner never becomes ready.
#[derive(Clone, Debug, PartialEq)]
pub struct Stuck {
    pub rank: usize,
    pub step: usize,
    pub op: Op,
    /// The partner (rank, step) and the deps it still waits on.
    pub partner: (usize, usize),
    pub partner_waits_on: Vec<usize>,
}

/// What is wrong with one output element.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    Uninitialized,
    Missing {
        rank: usize,
    },
    CountedTwice {
        rank: usize,
    },
    WrongElement {
        got: (usize, usize),
        expected: (usize, usize),
    },
    NotASingleValue {
        contributions: usize,
    },
}

impl VerifyError {
    pub fn global(kind: ErrorKind) -> VerifyError {
        VerifyError {
            rank: None,
            step: None,
            op: None,
            kind,
        }
    }

    pub fn at(rank: usize, step: usize, op: &Op, kind: ErrorKind) -> VerifyError {
        VerifyError {
            rank: Some(rank),
            step: Some(step),
            op: Some(Box::new(op.clone())),
            kind,
        }
    }
}

impl VerifyError {
    /// The `(rank, step)` to show the author: where the error is, else the
    /// first stuck step of a deadlock, else the step of `rank` that last
    /// wrote a wrong output element (writes of one element are ordered in a
    /// race-free plan, and deps point backwards, so the last is the highest).
    pub fn location(&self, plans: &[Plan]) -> Option<(usize, usize)> {
        if let (Some(rank), Some(step)) = (self.rank, self.step) {
            return Some((rank, step));
        }
        match &self.kind {
            ErrorKind::Deadlock { stuck } => stuck.first().map(|s| (s.rank, s.step)),
            ErrorKind::WrongResult { buf, index, .. } => {
                let rank = self.rank?;
                let element = Region::new(*buf, *index, 1);
                let step = plans.get(rank)?.steps.iter().rposition(|s| {
                    crate::builder::accesses(&s.op)
                        .1
                        .iter()
                        .any(|w| w.overlaps(&element))
                })?;
                Some((rank, step))
            }
            _ => None,
        }
    }
}

impl std::error::Error for VerifyError {}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(rank) = self.rank {
            write!(f, "rank {rank}")?;
            if let Some(step) = self.step {
                write!(f, " step {step}")?;
            }
            if let Some(op) = &self.op {
                write!(f, " ({})", OpText(op))?;
            }
            write!(f, ": ")?;
        }
        write!(f, "{}", self.kind)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ErrorKind::*;
        match self {
            WrongCollective { algorithm, call } => {
                write!(f, "a {algorithm} algorithm cannot serve a {call} call")
            }
            PlanCount { expected, got } => write!(f, "expected {expected} plans, got {got}"),
            RankField { got } => write!(f, "plan says it is rank {got}"),
            ScratchLimit {
                scratch,
                limit,
                elements,
            } => write!(
                f,
                "scratch of {scratch} elements is more than the limit of {limit} for this call \
                 ({SCRATCH_FACTOR} × its {elements} elements + {SCRATCH_FLOOR})"
            ),
            TooManySteps { steps, limit } => write!(
                f,
                "{steps} steps are more than the verifier checks in one plan ({limit}); \
                 verify a smaller count or larger chunks"
            ),
            TooManySegments { limit } => write!(
                f,
                "the plans cut the buffers into more segments than the verifier models ({limit}); \
                 verify a smaller count or larger chunks"
            ),
            BadPeer { peer } => write!(f, "peer {peer} is itself or outside the group"),
            BadDep { dep } => write!(f, "depends on step {dep}, which is not earlier"),
            OutOfBounds { region, buf_len } => write!(
                f,
                "{} is outside its buffer of {buf_len} elements",
                RegionText(region)
            ),
            WritesInput => write!(f, "writes the read-only Input"),
            LengthMismatch { src, dst } => {
                write!(f, "source has {src} elements, destination {dst}")
            }
            SelfOverlap => write!(f, "source and destination overlap"),
            DuplicateTag { peer, tag, first } => write!(
                f,
                "tag {tag} with peer {peer} is already used by step {first}"
            ),
            Unmatched { peer, tag } => {
                write!(f, "no matching message on rank {peer} (tag {tag})")
            }
            MessageLength { sent, received } => {
                write!(f, "{sent} elements sent but {received} received")
            }
            Race { other, region } => write!(
                f,
                "data race with step {other} on {}: neither waits for the other",
                RegionText(region)
            ),
            InPlaceHazard { writer, region } => write!(
                f,
                "reads Input after step {writer} wrote {}; wrong when Input and Output are one buffer",
                RegionText(region)
            ),
            AliasedOverlap => write!(
                f,
                "reads Input elements it writes through Output; wrong when they are one buffer"
            ),
            Deadlock { stuck } => {
                write!(f, "deadlock; {} step(s) wait for partners that never come:", stuck.len())?;
                for s in stuck {
                    write!(f, "\n  {s}")?;
                }
                Ok(())
            }
            WrongResult { buf, index, problem } => write!(f, "{buf:?}[{index}]: {problem}"),
            NotReproducible { index } => write!(
                f,
                "Output[{index}] is combined in a different order than on rank 0, so the bits may differ"
            ),
            BarrierLeak { unseen } => write!(
                f,
                "can leave the barrier before rank {unseen} has entered it"
            ),
            NotExposed { peer, flag } => write!(f, "rank {peer} never exposes flag {flag}"),
            ExposedBounds {
                exposed,
                offset,
                len,
            } => write!(
                f,
                "reads [{offset}..{}] of a region of {exposed} exposed elements",
                offset.saturating_add(*len)
            ),
            OtherHost { peer } => write!(
                f,
                "rank {peer} is on another host; only ranks on one host share memory"
            ),
            DuplicateFlag { flag, first } => {
                write!(f, "flag {flag} is already exposed by step {first}")
            }
            SecondSlot { first } => write!(
                f,
                "step {first} already exposes through the rank's slot; a plan has one slot"
            ),
            Unreleased { flag } => write!(
                f,
                "flag {flag} needs one Expose and one Release after it (depending on it)"
            ),
            ReleaseCount {
                flag,
                declared,
                actual,
            } => write!(
                f,
                "releases flag {flag} after {declared} reads, but peers read it {actual} times"
            ),
            WritesExposed { expose, region } => write!(
                f,
                "writes {} exposed by step {expose} to the peers before its Release",
                RegionText(region)
            ),
        }
    }
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (pr, ps) = self.partner;
        write!(
            f,
            "rank {} step {} ({}) waits for rank {pr} step {ps}, which waits on steps {:?}",
            self.rank,
            self.step,
            OpText(&self.op),
            self.partner_waits_on
        )
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Uninitialized => write!(f, "holds uninitialised data"),
            Problem::Missing { rank } => write!(f, "missing the contribution of rank {rank}"),
            Problem::CountedTwice { rank } => {
                write!(f, "contribution of rank {rank} counted twice")
            }
            Problem::WrongElement { got, expected } => write!(
                f,
                "holds element {} of rank {}, expected element {} of rank {}",
                got.1, got.0, expected.1, expected.0
            ),
            Problem::NotASingleValue { contributions } => {
                write!(
                    f,
                    "holds a sum of {contributions} values, expected a copy of one"
                )
            }
        }
    }
}

/// `Output[3..7]`.
pub struct RegionText<'a>(pub &'a Region);

impl fmt::Display for RegionText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}[{}..{}]", self.0.buf, self.0.offset, self.0.end())
    }
}

/// `Send to 2 tag 5 Output[0..4]`.
pub struct OpText<'a>(pub &'a Op);

impl fmt::Display for OpText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Op::Send { peer, tag, src } => {
                write!(f, "Send to {peer} tag {tag} {}", RegionText(src))
            }
            Op::Recv { peer, tag, dst } => {
                write!(f, "Recv from {peer} tag {tag} {}", RegionText(dst))
            }
            Op::RecvReduce { peer, tag, dst } => {
                write!(f, "RecvReduce from {peer} tag {tag} {}", RegionText(dst))
            }
            Op::Copy { src, dst } => write!(f, "Copy {} -> {}", RegionText(src), RegionText(dst)),
            Op::Reduce { src, dst } => {
                write!(f, "Reduce {} into {}", RegionText(src), RegionText(dst))
            }
            Op::Expose { flag, src, slot } => {
                let via = if *slot { " via slot" } else { "" };
                write!(f, "Expose flag {flag} {}{via}", RegionText(src))
            }
            Op::PeerRead {
                peer,
                flag,
                offset,
                dst,
            } => write!(
                f,
                "PeerRead rank {peer} flag {flag} at {offset} -> {}",
                RegionText(dst)
            ),
            Op::PeerReadReduce {
                peer,
                flag,
                offset,
                dst,
            } => write!(
                f,
                "PeerReadReduce rank {peer} flag {flag} at {offset} into {}",
                RegionText(dst)
            ),
            Op::Release { flag, reads } => write!(f, "Release flag {flag} after {reads} reads"),
        }
    }
}
