//! Spreads the cuts between segments over the spaces: from the ends of every
//! region a step names, across every step that moves elements from one
//! region to another, until no cut adds another.

use std::collections::BTreeSet;

use super::layout::Layout;
use crate::builder::accesses;
use crate::plan::{Op, Plan, Region};
use crate::verify::exec::slot;
use crate::verify::matching::Matches;

/// The final cuts of each space, sorted (its ends and every cut between),
/// or None past `limit` cuts.
pub fn spread(
    layout: &Layout,
    plans: &[Plan],
    matches: &Matches,
    limit: usize,
) -> Option<Vec<Vec<usize>>> {
    Cutter::new(layout, plans, matches, limit).run(plans)
}

/// Two regions that hold the same elements once a step is done (the ends of
/// a copy, a reduction, a message or a shared-memory read), seen from one end.
#[derive(Clone, Copy)]
struct Link {
    here: Region,
    rank: usize,
    there: Region,
}

/// The links of one buffer, sorted by start, with the furthest end of any
/// link up to each one, to find the links around an element quickly.
#[derive(Default)]
struct Links {
    links: Vec<Link>,
    reach: Vec<usize>,
}

impl Links {
    fn sort(&mut self) {
        self.links.sort_by_key(|l| l.here.offset);
        let mut furthest = 0;
        self.reach = self
            .links
            .iter()
            .map(|l| {
                furthest = furthest.max(l.here.end());
                furthest
            })
            .collect();
    }

    /// The links whose region has `p` strictly inside.
    fn around(&self, p: usize) -> impl Iterator<Item = &Link> {
        let before = self.links.partition_point(|l| l.here.offset < p);
        (0..before)
            .rev()
            .take_while(move |&k| self.reach[k] > p)
            .map(|k| &self.links[k])
            .filter(move |l| l.here.end() > p)
    }
}

/// Spreads cuts over the spaces until no cut adds another.
struct Cutter<'a> {
    layout: &'a Layout,
    links: Vec<[Links; 3]>,
    sets: Vec<BTreeSet<usize>>,
    /// Cuts made but not yet spread.
    work: Vec<(usize, usize)>,
    total: usize,
    limit: usize,
}

impl<'a> Cutter<'a> {
    fn new(layout: &'a Layout, plans: &[Plan], matches: &Matches, limit: usize) -> Cutter<'a> {
        let mut cutter = Cutter {
            layout,
            links: plans.iter().map(|_| Default::default()).collect(),
            sets: vec![BTreeSet::new(); layout.lens.len()],
            work: Vec::new(),
            total: 0,
            limit,
        };
        for (rank, plan) in plans.iter().enumerate() {
            for (i, step) in plan.steps.iter().enumerate() {
                cutter.link(plans, matches, rank, i, &step.op);
            }
        }
        for bufs in &mut cutter.links {
            for links in bufs {
                links.sort();
            }
        }
        cutter
    }

    /// Links the ends of step `i` of `rank` that hold the same elements.
    fn link(&mut self, plans: &[Plan], matches: &Matches, rank: usize, i: usize, op: &Op) {
        match *op {
            Op::Copy { src, dst } | Op::Reduce { src, dst } => self.tie((rank, src), (rank, dst)),
            Op::Send { src, .. } => {
                let (peer, j) = matches.partner(rank, i).expect("matched before modelling");
                let dst = accesses(&plans[peer].steps[j].op).1[0];
                self.tie((rank, src), (peer, dst));
            }
            _ => {
                if let Some((peer, flag, offset, dst, _)) = op.read_peer() {
                    let src = matches.exposures[peer][&flag].src.sub(offset, dst.len);
                    self.tie((peer, src), (rank, dst));
                }
            }
        }
    }

    fn tie(&mut self, (a, here): (usize, Region), (b, there): (usize, Region)) {
        if here.len == 0 {
            return;
        }
        let (rank, slot_a, slot_b) = (b, slot(here.buf), slot(there.buf));
        self.links[a][slot_a].links.push(Link { here, rank, there });
        let (here, there, rank) = (there, here, a);
        self.links[b][slot_b].links.push(Link { here, rank, there });
    }

    fn run(mut self, plans: &[Plan]) -> Option<Vec<Vec<usize>>> {
        self.seed(plans)?;
        let layout = self.layout;
        let mut across = Vec::new();
        while let Some((space, local)) = self.work.pop() {
            for &(rank, s, start) in &layout.placements[space] {
                let p = start + local;
                across.extend(self.links[rank][s].around(p).map(|l| {
                    (
                        l.rank,
                        slot(l.there.buf),
                        l.there.offset + (p - l.here.offset),
                    )
                }));
            }
            for (rank, s, q) in across.drain(..) {
                self.cut(rank, s, q)?;
            }
        }
        Some(
            self.sets
                .into_iter()
                .map(|s| s.into_iter().collect())
                .collect(),
        )
    }

    /// The cuts every space starts with: its ends, the ends of every
    /// link, and the ends of exposed regions (shared-memory reads name
    /// their source relative to one).
    fn seed(&mut self, plans: &[Plan]) -> Option<()> {
        for space in 0..self.layout.lens.len() {
            self.add(space, 0)?;
            self.add(space, self.layout.lens[space])?;
        }
        let mut ends = Vec::new();
        for (rank, plan) in plans.iter().enumerate() {
            for links in &self.links[rank] {
                ends.extend(links.links.iter().map(|l| (rank, l.here)));
            }
            for step in &plan.steps {
                if let Op::Expose { src, .. } = step.op {
                    ends.push((rank, src));
                }
            }
        }
        for (rank, r) in ends {
            self.cut(rank, slot(r.buf), r.offset)?;
            self.cut(rank, slot(r.buf), r.end())?;
        }
        Some(())
    }

    /// Cuts `rank`'s buffer `slot` before element `p`, and so its space.
    fn cut(&mut self, rank: usize, slot: usize, p: usize) -> Option<()> {
        match self.layout.locate(rank, slot, p) {
            Some((i, local)) => self.add(self.layout.bufs[rank][slot][i].space, local),
            None => Some(()), // the buffer's end
        }
    }

    fn add(&mut self, space: usize, local: usize) -> Option<()> {
        if self.sets[space].insert(local) {
            self.total += 1;
            if self.total > self.limit {
                return None;
            }
            self.work.push((space, local));
        }
        Some(())
    }
}
