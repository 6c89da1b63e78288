//! Bitwise reproducibility of allreduce: every rank must combine each element
//! in the same order, up to the commutativity of a single operation
//! (`a + b` and `b + a` give the same bits; `(a + b) + c` and `a + (b + c)`
//! need not). Values are expression trees, hash-consed into ids with the two
//! operands of each node sorted, so equal ids mean equal bits.

use std::collections::HashMap;

use super::error::{ErrorKind, VerifyError};
use super::exec::{self, Domain};
use super::matching::Matches;
use crate::plan::{Buf, CallShape, Plan};

/// Hash-consed expression trees; id 0 is uninitialised memory.
#[derive(Default)]
struct Expressions {
    leaves: HashMap<(usize, usize), u32>,
    nodes: HashMap<(u32, u32), u32>,
    next: u32,
}

impl Expressions {
    fn fresh(&mut self) -> u32 {
        self.next += 1;
        self.next
    }
}

impl Domain for Expressions {
    type Value = u32;
    fn input(&mut self, rank: usize, index: usize) -> u32 {
        if let Some(&id) = self.leaves.get(&(rank, index)) {
            return id;
        }
        let id = self.fresh();
        self.leaves.insert((rank, index), id);
        id
    }
    fn undefined(&mut self) -> u32 {
        0
    }
    fn reduce(&mut self, acc: &u32, incoming: &u32) -> u32 {
        let key = ((*acc).min(*incoming), (*acc).max(*incoming));
        if let Some(&id) = self.nodes.get(&key) {
            return id;
        }
        let id = self.fresh();
        self.nodes.insert(key, id);
        id
    }
}

/// Every rank's Output must hold the same expression as rank 0's.
pub fn check(shape: &CallShape, plans: &[Plan], matches: &Matches) -> Result<(), VerifyError> {
    let memories = exec::run(&mut Expressions::default(), shape, plans, matches)?;
    let reference = memories[0].get(Buf::Output);
    for (rank, mem) in memories.iter().enumerate().skip(1) {
        let output = mem.get(Buf::Output);
        if let Some(index) = (0..output.len()).find(|&i| output[i] != reference[i]) {
            let kind = ErrorKind::NotReproducible { index };
            return Err(VerifyError {
                rank: Some(rank),
                ..VerifyError::global(kind)
            });
        }
    }
    Ok(())
}
