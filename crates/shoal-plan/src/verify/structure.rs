//! Checks of each step on its own: buffers, peers and dependency indices.

use super::error::{ErrorKind, VerifyError};
use crate::builder::accesses;
use crate::plan::{Buf, CallShape, Op, Plan, Region, MAX_ELEMENTS};

pub fn check(shape: &CallShape, plans: &[Plan]) -> Result<(), VerifyError> {
    if plans.len() != shape.world {
        return Err(VerifyError::global(ErrorKind::PlanCount {
            expected: shape.world,
            got: plans.len(),
        }));
    }
    for (rank, plan) in plans.iter().enumerate() {
        check_plan(shape, rank, plan)?;
    }
    Ok(())
}

/// The checks of one rank's plan on its own: every step in bounds, peers in
/// the group, dependencies backwards, scratch within
/// [`CallShape::max_scratch`]. What the executor relies on to run a
/// plan safely, so plans from outside (Python, JSON) get it before running.
pub fn check_plan(shape: &CallShape, rank: usize, plan: &Plan) -> Result<(), VerifyError> {
    if plan.rank != rank {
        return Err(VerifyError {
            rank: Some(rank),
            ..VerifyError::global(ErrorKind::RankField { got: plan.rank })
        });
    }
    if let Err(kind) = check_scratch(shape, plan.scratch_len) {
        return Err(VerifyError {
            rank: Some(rank),
            ..VerifyError::global(kind)
        });
    }
    for (i, step) in plan.steps.iter().enumerate() {
        let fail = |kind| Err(VerifyError::at(rank, i, &step.op, kind));
        if let Some(&dep) = step.deps.iter().find(|&&d| d >= i) {
            return fail(ErrorKind::BadDep { dep });
        }
        if let Some(kind) = check_op(shape, plan, &step.op) {
            return fail(kind);
        }
    }
    Ok(())
}

/// Why a plan of `shape` may not use `scratch` elements, if so.
pub fn check_scratch(shape: &CallShape, scratch: usize) -> Result<(), ErrorKind> {
    let limit = shape.max_scratch();
    if scratch <= limit {
        return Ok(());
    }
    let elements = shape.elements().unwrap_or(MAX_ELEMENTS);
    Err(ErrorKind::ScratchLimit {
        scratch,
        limit,
        elements,
    })
}

fn check_op(shape: &CallShape, plan: &Plan, op: &Op) -> Option<ErrorKind> {
    let (mut reads, writes) = accesses(op);
    if let Op::Expose { src, .. } = *op {
        reads.push(src);
    }
    for region in reads.iter().chain(&writes) {
        let buf_len = buffer_len(shape, plan, region.buf);
        if region.end() > buf_len {
            return Some(ErrorKind::OutOfBounds {
                region: *region,
                buf_len,
            });
        }
    }
    if writes.iter().any(|w| w.buf == Buf::Input) {
        return Some(ErrorKind::WritesInput);
    }
    match *op {
        Op::Send { peer, .. } | Op::Recv { peer, .. } | Op::RecvReduce { peer, .. } => {
            (peer >= shape.world || peer == plan.rank).then_some(ErrorKind::BadPeer { peer })
        }
        Op::Copy { src, dst } | Op::Reduce { src, dst } => local_op(src, dst),
        Op::PeerRead { peer, .. } | Op::PeerReadReduce { peer, .. } => {
            (peer >= shape.world || peer == plan.rank).then_some(ErrorKind::BadPeer { peer })
        }
        Op::Expose { .. } | Op::Release { .. } => None,
    }
}

fn local_op(src: Region, dst: Region) -> Option<ErrorKind> {
    if src.len != dst.len {
        Some(ErrorKind::LengthMismatch {
            src: src.len,
            dst: dst.len,
        })
    } else if src.overlaps(&dst) {
        Some(ErrorKind::SelfOverlap)
    } else {
        None
    }
}

/// Length of `buf` on the plan's rank: from the contract, or the plan's scratch.
pub fn buffer_len(shape: &CallShape, plan: &Plan, buf: Buf) -> usize {
    match buf {
        Buf::Scratch => plan.scratch_len,
        _ => shape.buffer_len(plan.rank, buf),
    }
}
