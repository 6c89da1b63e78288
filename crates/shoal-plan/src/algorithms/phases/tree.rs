//! Binomial-tree phases over virtual ranks (root = vrank 0).
//!
//! The parent of `v` is `v` minus its lowest set bit; its children are
//! `v + m` for the powers of two `m` below that bit. The edge between a
//! parent and child `v + m` uses tag round `round0 + log2(m)`, so the tree
//! needs `log2_ceil(world)` rounds. Subtrees are contiguous vrank ranges,
//! which lets scatter and gather move them as one span.

use std::ops::Range;

use crate::builder::PlanBuilder;
use crate::partition::{from_vrank, vrank, Blocks};
use crate::plan::Region;

/// The tree seen from one rank.
struct Node {
    world: usize,
    root: usize,
    v: usize,
}

impl Node {
    fn of(b: &PlanBuilder, root: usize) -> Node {
        Node {
            world: b.world(),
            root,
            v: vrank(b.rank(), root, b.world()),
        }
    }

    /// Lowest set bit of `v`; the root's is past the whole tree.
    fn lowbit(&self, v: usize) -> usize {
        if v == 0 {
            self.world.next_power_of_two()
        } else {
            v & v.wrapping_neg()
        }
    }

    fn rank(&self, v: usize) -> usize {
        from_vrank(v, self.root, self.world)
    }

    /// Parent's rank and the edge's round offset.
    fn parent(&self) -> Option<(usize, usize)> {
        (self.v != 0).then(|| {
            let m = self.lowbit(self.v);
            (self.rank(self.v - m), m.trailing_zeros() as usize)
        })
    }

    /// Children as (vrank, round offset), nearest (smallest subtree) first.
    fn children(&self) -> Vec<(usize, usize)> {
        let top = self.lowbit(self.v);
        (0..top.trailing_zeros() as usize)
            .map(|k| (self.v + (1 << k), k))
            .filter(|&(c, _)| c < self.world)
            .collect()
    }

    fn subtree(&self, v: usize) -> Range<usize> {
        v..(v + self.lowbit(v)).min(self.world)
    }
}

/// Binomial reduce of `acc` (holding this rank's contribution) to `root`.
/// Children are folded in nearest first, a fixed order.
pub fn reduce(b: &mut PlanBuilder, root: usize, acc: Region, round0: usize) {
    let node = Node::of(b, root);
    for (c, k) in node.children() {
        b.recv_reduce(node.rank(c), round0 + k, acc);
    }
    if let Some((parent, k)) = node.parent() {
        b.send(parent, round0 + k, acc);
    }
}

/// Binomial broadcast of `data` (valid at `root`); farthest child first, as
/// it has the largest subtree waiting.
pub fn broadcast(b: &mut PlanBuilder, root: usize, data: Region, round0: usize) {
    let node = Node::of(b, root);
    if let Some((parent, k)) = node.parent() {
        b.recv(parent, round0 + k, data);
    }
    for (c, k) in node.children().into_iter().rev() {
        b.send(node.rank(c), round0 + k, data);
    }
}

/// Binomial scatter: `blocks` are indexed by vrank and valid at `root`;
/// afterwards each rank holds the blocks of its subtree (at least its own).
pub fn scatter(b: &mut PlanBuilder, root: usize, blocks: &Blocks, round0: usize) {
    let node = Node::of(b, root);
    if let Some((parent, k)) = node.parent() {
        b.recv(parent, round0 + k, blocks.span(node.subtree(node.v)));
    }
    for (c, k) in node.children().into_iter().rev() {
        b.send(node.rank(c), round0 + k, blocks.span(node.subtree(c)));
    }
}

/// Binomial gather: `blocks` are indexed by vrank, each rank's own block is
/// valid; afterwards `root` holds all of them.
pub fn gather(b: &mut PlanBuilder, root: usize, blocks: &Blocks, round0: usize) {
    let node = Node::of(b, root);
    for (c, k) in node.children() {
        b.recv(node.rank(c), round0 + k, blocks.span(node.subtree(c)));
    }
    if let Some((parent, k)) = node.parent() {
        b.send(parent, round0 + k, blocks.span(node.subtree(node.v)));
    }
}

/// The subtree (vrank range) that `rank` collects or distributes.
pub fn subtree_of(rank: usize, root: usize, world: usize) -> Range<usize> {
    let node = Node {
        world,
        root,
        v: vrank(rank, root, world),
    };
    node.subtree(node.v)
}
