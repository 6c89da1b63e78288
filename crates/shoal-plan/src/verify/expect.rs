//! The result each collective must leave in Output (the contract table in
//! `plan.rs`), compared element by element with the symbolic execution.

use super::error::{ErrorKind, Problem, VerifyError};
use super::exec::{Memory, Value, UNDEFINED};
use crate::plan::{Buf, CallShape, Collective};

/// What one output element must hold.
enum Expected {
    /// Every rank's input element `index`, each exactly once.
    Reduction { index: usize },
    /// Exactly input element `.1` of rank `.0`.
    Copy(usize, usize),
}

pub fn check(shape: &CallShape, memories: &[Memory]) -> Result<(), VerifyError> {
    for (rank, mem) in memories.iter().enumerate() {
        for (i, value) in mem.get(Buf::Output).iter().enumerate() {
            let expected = expected(shape, rank, i);
            if let Some(problem) = compare(shape.world, value, &expected) {
                let kind = ErrorKind::WrongResult {
                    buf: Buf::Output,
                    index: i,
                    problem,
                };
                return Err(VerifyError {
                    rank: Some(rank),
                    ..VerifyError::global(kind)
                });
            }
        }
    }
    Ok(())
}

fn expected(shape: &CallShape, rank: usize, i: usize) -> Expected {
    use Collective::*;
    let n = shape.count;
    match shape.collective {
        Allreduce | Reduce => Expected::Reduction { index: i },
        ReduceScatter => Expected::Reduction {
            index: shape.block_offset(rank) + i,
        },
        Broadcast => Expected::Copy(shape.root, i),
        Gather => Expected::Copy(i / n, i % n),
        Allgather => {
            let q = containing(shape.world, i, |q| shape.block_offset(q));
            Expected::Copy(q, i - shape.block_offset(q))
        }
        Alltoall => {
            let q = containing(shape.world, i, |q| shape.recv_offset(rank, q));
            let from = shape.send_offset(q, rank) + i - shape.recv_offset(rank, q);
            Expected::Copy(q, from)
        }
        Scatter => Expected::Copy(shape.root, rank * n + i),
        Barrier => unreachable!("barriers have no output"),
    }
}

/// The block `q < world` holding element `i`, given each block's start
/// (non-decreasing; empty blocks are skipped).
fn containing(world: usize, i: usize, start: impl Fn(usize) -> usize) -> usize {
    (0..world)
        .rev()
        .find(|&q| start(q) <= i)
        .expect("block 0 starts at 0")
}

fn compare(world: usize, value: &Value, expected: &Expected) -> Option<Problem> {
    if value.contains(&UNDEFINED) {
        return Some(Problem::Uninitialized);
    }
    match *expected {
        Expected::Copy(rank, index) => match value.as_slice() {
            [(r, i)] if (*r as usize, *i as usize) == (rank, index) => None,
            [(r, i)] => Some(Problem::WrongElement {
                got: (*r as usize, *i as usize),
                expected: (rank, index),
            }),
            _ => Some(Problem::NotASingleValue {
                contributions: value.len(),
            }),
        },
        Expected::Reduction { index } => compare_reduction(world, value, index),
    }
}

/// `value` is sorted, so each rank's contributions are adjacent.
fn compare_reduction(world: usize, value: &Value, index: usize) -> Option<Problem> {
    let mut next_rank = 0;
    for (k, &(r, i)) in value.iter().enumerate() {
        let r = r as usize;
        if i as usize != index {
            return Some(Problem::WrongElement {
                got: (r, i as usize),
                expected: (r, index),
            });
        }
        if k > 0 && value[k - 1].0 as usize == r {
            return Some(Problem::CountedTwice { rank: r });
        }
        if r != next_rank {
            return Some(Problem::Missing { rank: next_rank });
        }
        next_rank += 1;
    }
    (next_rank < world).then_some(Problem::Missing { rank: next_rank })
}
