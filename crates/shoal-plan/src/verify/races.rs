//! Data races within one rank: two steps that touch overlapping elements,
//! at least one writing, must be ordered by (transitive) dependencies, since
//! the executor runs unordered steps concurrently.
//!
//! When the call may be in place, Input and Output are one buffer, and a
//! step reading Input must also come *before* any step writing the same
//! elements of Output (the identity Copy Input -> Output is the exception:
//! in place it is a no-op).

use super::error::{ErrorKind, VerifyError};
use crate::builder::{accesses, may_alias};
use crate::plan::{Buf, CallShape, Op, Plan, Region};

/// The most steps of one rank the verifier checks: [`Order`] holds a bit per
/// pair of steps (128 MiB at this size), and steps grow with the count at a
/// given chunk size.
pub const MAX_STEPS: usize = 1 << 15;

pub fn check(shape: &CallShape, plan: &Plan) -> Result<(), VerifyError> {
    if plan.steps.len() > MAX_STEPS {
        let (steps, limit) = (plan.steps.len(), MAX_STEPS);
        return Err(VerifyError {
            rank: Some(plan.rank),
            ..VerifyError::global(ErrorKind::TooManySteps { steps, limit })
        });
    }
    let aliased = may_alias(shape.collective);
    let order = Order::of(plan);
    let mut all = Vec::new();
    for (i, step) in plan.steps.iter().enumerate() {
        let (reads, writes) = accesses(&step.op);
        if aliased {
            check_aliased_copy(plan, i, &reads, &writes)?;
        }
        let tagged = reads
            .iter()
            .map(|r| (r, false))
            .chain(writes.iter().map(|w| (w, true)));
        all.extend(
            tagged
                .filter(|(r, _)| r.len > 0)
                .map(|(&region, write)| Access {
                    region,
                    step: i,
                    write,
                    identity: write && is_identity_copy(&step.op),
                }),
        );
    }
    for key in [Buf::Input, Buf::Output, Buf::Scratch] {
        let key_of = |b: Buf| {
            if aliased && b == Buf::Output {
                Buf::Input
            } else {
                b
            }
        };
        let mut mine: Vec<&Access> = all.iter().filter(|a| key_of(a.region.buf) == key).collect();
        mine.sort_by_key(|a| a.region.offset);
        sweep(plan, &order, &mine)?;
    }
    Ok(())
}

/// One region a step reads or writes.
struct Access {
    region: Region,
    step: usize,
    write: bool,
    /// The write of a Copy from Input to the same offsets of Output: a
    /// no-op in place, so it never conflicts with reads of Input.
    identity: bool,
}

impl Access {
    fn start(&self) -> usize {
        self.region.offset
    }
    fn end(&self) -> usize {
        self.region.end()
    }
}

/// Compares every pair of overlapping accesses (sorted by start).
fn sweep(plan: &Plan, order: &Order, sorted: &[&Access]) -> Result<(), VerifyError> {
    let mut active: Vec<&Access> = Vec::new();
    for &a in sorted {
        active.retain(|b| b.end() > a.start());
        for &b in &active {
            check_pair(plan, order, a, b)?;
        }
        active.push(a);
    }
    Ok(())
}

fn check_pair(plan: &Plan, order: &Order, a: &Access, b: &Access) -> Result<(), VerifyError> {
    let harmless = |x: &Access, y: &Access| x.identity && !y.write && y.region.buf == Buf::Input;
    if harmless(a, b) || harmless(b, a) {
        return Ok(());
    }
    if a.step == b.step || !(a.write || b.write) {
        return Ok(());
    }
    let (early, late) = if a.step < b.step { (a, b) } else { (b, a) };
    let overlap = intersect(&late.region, &early.region);
    let fail = |kind| {
        Err(VerifyError::at(
            plan.rank,
            late.step,
            &plan.steps[late.step].op,
            kind,
        ))
    };
    if !order.before(early.step, late.step) {
        return fail(ErrorKind::Race {
            other: early.step,
            region: overlap,
        });
    }
    // Ordered early -> late; only a read of Input after an Output write is wrong.
    if early.write
        && early.region.buf == Buf::Output
        && !late.write
        && late.region.buf == Buf::Input
    {
        return fail(ErrorKind::InPlaceHazard {
            writer: early.step,
            // The elements the writer wrote, named as it wrote them.
            region: Region::new(Buf::Output, overlap.offset, overlap.len),
        });
    }
    Ok(())
}

/// In place, a Copy or Reduce from Input to Output must not shift elements
/// onto themselves; the identity copy is fine (a no-op).
fn check_aliased_copy(
    plan: &Plan,
    i: usize,
    reads: &[Region],
    writes: &[Region],
) -> Result<(), VerifyError> {
    for r in reads.iter().filter(|r| r.buf == Buf::Input) {
        for w in writes.iter().filter(|w| w.buf == Buf::Output) {
            let as_input = Region::input(w.offset, w.len);
            let identity_copy = is_identity_copy(&plan.steps[i].op);
            if as_input.overlaps(r) && !identity_copy {
                return Err(VerifyError::at(
                    plan.rank,
                    i,
                    &plan.steps[i].op,
                    ErrorKind::AliasedOverlap,
                ));
            }
        }
    }
    Ok(())
}

/// The elements `a` shares with `b`, named in `a`'s buffer.
fn is_identity_copy(op: &Op) -> bool {
    matches!(op, Op::Copy { src, dst } if src.buf == Buf::Input && dst.buf == Buf::Output && src.offset == dst.offset)
}

fn intersect(a: &Region, b: &Region) -> Region {
    let start = a.offset.max(b.offset);
    Region::new(a.buf, start, a.end().min(b.end()) - start)
}

/// Transitive dependencies as one bitset row per step.
pub(super) struct Order {
    words: usize,
    ancestors: Vec<u64>,
}

impl Order {
    pub(super) fn of(plan: &Plan) -> Order {
        let n = plan.steps.len();
        let words = n.div_ceil(64);
        let mut ancestors = vec![0u64; n * words];
        for (i, step) in plan.steps.iter().enumerate() {
            let (done, row) = ancestors.split_at_mut(i * words);
            let row = &mut row[..words];
            for &d in &step.deps {
                row[d / 64] |= 1 << (d % 64);
                for (x, y) in row.iter_mut().zip(&done[d * words..(d + 1) * words]) {
                    *x |= y;
                }
            }
        }
        Order { words, ancestors }
    }

    /// Whether step `a` (< `b`) is a transitive dependency of `b`.
    pub(super) fn before(&self, a: usize, b: usize) -> bool {
        self.ancestors[b * self.words + a / 64] & (1 << (a % 64)) != 0
    }
}
