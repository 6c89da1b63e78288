//! Checks of the shared-memory steps: a rank lends a region to the ranks on
//! its host with `Expose { flag }`, they read it with `PeerRead` /
//! `PeerReadReduce`, and its `Release { flag, reads }` waits for all those
//! reads before the region may change again.
//!
//! Checked here: every flag is exposed once and released once after its
//! Expose (a dependency path), every read names a flag its peer exposes,
//! stays inside the exposed region and reads a rank of the same host, the
//! Release counts exactly the reads made of its flag, and the owner writes
//! no exposed element between the Expose and the Release. The symbolic
//! execution ([`super::exec`]) then runs the reads against the owner's
//! memory, so what they read is checked like any message.
//!
//! A slot exposure (`Expose { slot: true }`) is checked as if in place,
//! since the executor exposes in place what does not fit the slot; a plan
//! makes at most one, since it owns one slot buffer per call.

use std::collections::HashMap;

use super::error::{ErrorKind, VerifyError};
use super::matching::{Exposure, Matches};
use super::races::Order;
use crate::builder::{accesses, may_alias};
use crate::plan::{Buf, CallShape, Op, Plan, Region};

/// Each rank's exposed flags, with their Release steps.
pub fn exposures(plans: &[Plan]) -> Result<Vec<HashMap<u32, Exposure>>, VerifyError> {
    plans
        .iter()
        .enumerate()
        .map(|(rank, plan)| rank_exposures(rank, plan))
        .collect()
}

fn rank_exposures(rank: usize, plan: &Plan) -> Result<HashMap<u32, Exposure>, VerifyError> {
    let mut exposed: HashMap<u32, Exposure> = HashMap::new();
    let mut released: HashMap<u32, usize> = HashMap::new();
    let mut slot_step: Option<usize> = None;
    for (i, step) in plan.steps.iter().enumerate() {
        let fail = |kind| Err(VerifyError::at(rank, i, &step.op, kind));
        match step.op {
            Op::Expose { slot: true, .. } if slot_step.is_some() => {
                let first = slot_step.unwrap_or_default();
                return fail(ErrorKind::SecondSlot { first });
            }
            Op::Expose { flag, src, slot } => {
                if slot {
                    slot_step = Some(i);
                }
                if let Some(e) = exposed.get(&flag) {
                    let first = e.expose;
                    return fail(ErrorKind::DuplicateFlag { flag, first });
                }
                let release = usize::MAX;
                exposed.insert(
                    flag,
                    Exposure {
                        expose: i,
                        release,
                        src,
                    },
                );
            }
            Op::Release { flag, .. }
                if released.insert(flag, i).is_some() || !exposed.contains_key(&flag) =>
            {
                return fail(ErrorKind::Unreleased { flag });
            }
            _ => {}
        }
    }
    for (flag, e) in exposed.iter_mut() {
        match released.get(flag) {
            Some(&release) => e.release = release,
            None => {
                let op = &plan.steps[e.expose].op;
                let kind = ErrorKind::Unreleased { flag: *flag };
                return Err(VerifyError::at(rank, e.expose, op, kind));
            }
        }
    }
    Ok(exposed)
}

/// Pairs every read with the Expose it reads (its partner), checks bounds
/// and that each Release counts the reads of its flag.
pub fn match_reads(
    plans: &[Plan],
    exposures: &[HashMap<u32, Exposure>],
    partners: &mut [Vec<Option<(usize, usize)>>],
) -> Result<(), VerifyError> {
    let mut reads: HashMap<(usize, u32), usize> = HashMap::new();
    for (rank, plan) in plans.iter().enumerate() {
        for (i, step) in plan.steps.iter().enumerate() {
            let Some((peer, flag, offset, dst, _)) = step.op.read_peer() else {
                continue;
            };
            let fail = |kind| Err(VerifyError::at(rank, i, &step.op, kind));
            let Some(e) = exposures.get(peer).and_then(|m| m.get(&flag)) else {
                return fail(ErrorKind::NotExposed { peer, flag });
            };
            if offset.saturating_add(dst.len) > e.src.len {
                let (exposed, len) = (e.src.len, dst.len);
                return fail(ErrorKind::ExposedBounds {
                    exposed,
                    offset,
                    len,
                });
            }
            partners[rank][i] = Some((peer, e.expose));
            *reads.entry((peer, flag)).or_default() += 1;
        }
    }
    for (rank, plan) in plans.iter().enumerate() {
        for (&flag, e) in &exposures[rank] {
            let op = &plan.steps[e.release].op;
            let Op::Release {
                reads: declared, ..
            } = *op
            else {
                unreachable!("indexed as a Release")
            };
            let actual = reads.get(&(rank, flag)).copied().unwrap_or(0);
            if declared as usize != actual {
                let kind = ErrorKind::ReleaseCount {
                    flag,
                    declared,
                    actual,
                };
                return Err(VerifyError::at(rank, e.release, op, kind));
            }
        }
    }
    Ok(())
}

/// The per-rank checks: reads stay on the host, Releases follow their
/// Expose, and exposed elements are not written while lent.
pub fn check(shape: &CallShape, plan: &Plan, matches: &Matches) -> Result<(), VerifyError> {
    let (_, per_host) = shape.layout();
    let rank = plan.rank;
    for (i, step) in plan.steps.iter().enumerate() {
        if let Some((peer, ..)) = step.op.read_peer() {
            if peer / per_host != rank / per_host {
                let kind = ErrorKind::OtherHost { peer };
                return Err(VerifyError::at(rank, i, &step.op, kind));
            }
        }
    }
    let order = Order::of(plan);
    let aliased = may_alias(shape.collective);
    // Input and Output are one buffer in in-place calls.
    let key = |r: Region| {
        if aliased && r.buf == Buf::Output {
            Region::new(Buf::Input, r.offset, r.len)
        } else {
            r
        }
    };
    for e in matches.exposures[rank].values() {
        let release = &plan.steps[e.release];
        if !order.before(e.expose, e.release) {
            let kind = ErrorKind::Unreleased {
                flag: flag_of(&release.op),
            };
            return Err(VerifyError::at(rank, e.release, &release.op, kind));
        }
        let lent = key(e.src);
        for (i, step) in plan.steps.iter().enumerate() {
            let ordered = order.before(i, e.expose) || order.before(e.release, i);
            if ordered {
                continue;
            }
            for w in accesses(&step.op).1 {
                if key(w).overlaps(&lent) {
                    let start = w.offset.max(e.src.offset);
                    let end = w.end().min(e.src.end());
                    let region = Region::new(w.buf, start, end - start);
                    let kind = ErrorKind::WritesExposed {
                        expose: e.expose,
                        region,
                    };
                    return Err(VerifyError::at(rank, i, &step.op, kind));
                }
            }
        }
    }
    Ok(())
}

fn flag_of(op: &Op) -> u32 {
    match *op {
        Op::Expose { flag, .. } | Op::Release { flag, .. } => flag,
        _ => unreachable!("only Expose and Release carry a flag"),
    }
}
