//! Pairs every Send with the Recv or RecvReduce that names the same
//! (sender, tag) on the receiver, and rejects reused tags and leftovers.

use std::collections::HashMap;

use super::error::{ErrorKind, VerifyError};
use crate::plan::{Op, Plan, Region};

/// For each rank and step, the (rank, step) of its message partner (for a
/// PeerRead or PeerReadReduce: the Expose it reads).
pub struct Matches {
    partners: Vec<Vec<Option<(usize, usize)>>>,
    /// Per rank, its exposed flags (see [`super::shared`]).
    pub exposures: Vec<HashMap<u32, Exposure>>,
}

/// One flag a rank exposes: its Expose and Release steps and the region.
#[derive(Clone, Copy, Debug)]
pub struct Exposure {
    pub expose: usize,
    pub release: usize,
    pub src: Region,
}

impl Matches {
    pub fn partner(&self, rank: usize, step: usize) -> Option<(usize, usize)> {
        self.partners[rank][step]
    }
}

/// A message endpoint as its plan describes it.
struct End {
    peer: usize,
    tag: u32,
    len: usize,
}

fn endpoint(op: &Op) -> Option<(bool, End)> {
    match *op {
        Op::Send { peer, tag, src } => Some((
            true,
            End {
                peer,
                tag,
                len: src.len,
            },
        )),
        Op::Recv { peer, tag, dst } | Op::RecvReduce { peer, tag, dst } => Some((
            false,
            End {
                peer,
                tag,
                len: dst.len,
            },
        )),
        _ => None,
    }
}

type Index = HashMap<(usize, u32), usize>;

pub fn match_messages(plans: &[Plan]) -> Result<Matches, VerifyError> {
    let mut sends: Vec<Index> = Vec::with_capacity(plans.len());
    let mut recvs: Vec<Index> = Vec::with_capacity(plans.len());
    for (rank, plan) in plans.iter().enumerate() {
        let (s, r) = index(rank, plan)?;
        sends.push(s);
        recvs.push(r);
    }
    let mut partners: Vec<Vec<Option<(usize, usize)>>> =
        plans.iter().map(|p| vec![None; p.steps.len()]).collect();
    for (rank, plan) in plans.iter().enumerate() {
        for (i, step) in plan.steps.iter().enumerate() {
            let Some((is_send, end)) = endpoint(&step.op) else {
                continue;
            };
            let other = if is_send {
                &recvs[end.peer]
            } else {
                &sends[end.peer]
            };
            let fail = |kind| Err(VerifyError::at(rank, i, &step.op, kind));
            let Some(&j) = other.get(&(rank, end.tag)) else {
                return fail(ErrorKind::Unmatched {
                    peer: end.peer,
                    tag: end.tag,
                });
            };
            let (_, theirs) = endpoint(&plans[end.peer].steps[j].op).expect("indexed as a message");
            if theirs.len != end.len {
                let (sent, received) = if is_send {
                    (end.len, theirs.len)
                } else {
                    (theirs.len, end.len)
                };
                return fail(ErrorKind::MessageLength { sent, received });
            }
            partners[rank][i] = Some((end.peer, j));
        }
    }
    let exposures = super::shared::exposures(plans)?;
    super::shared::match_reads(plans, &exposures, &mut partners)?;
    Ok(Matches {
        partners,
        exposures,
    })
}

/// Sends and receives of one rank by (peer, tag); a reused pair is an error.
fn index(rank: usize, plan: &Plan) -> Result<(Index, Index), VerifyError> {
    let (mut sends, mut recvs) = (Index::new(), Index::new());
    for (i, step) in plan.steps.iter().enumerate() {
        let Some((is_send, end)) = endpoint(&step.op) else {
            continue;
        };
        let map = if is_send { &mut sends } else { &mut recvs };
        if let Some(&first) = map.get(&(end.peer, end.tag)) {
            let kind = ErrorKind::DuplicateTag {
                peer: end.peer,
                tag: end.tag,
                first,
            };
            return Err(VerifyError::at(rank, i, &step.op, kind));
        }
        map.insert((end.peer, end.tag), i);
    }
    Ok((sends, recvs))
}
