//! Max-min fair rates by progressive filling ("water-filling") over one
//! set of links and the flows that cross them.
//!
//! Every flow's rate rises together until a link saturates (its remaining
//! capacity divided by its unfrozen flows is the smallest "fair share") or
//! a flow reaches its own cap; those flows freeze and the rest keep
//! rising. Links sit in a heap keyed by fair share, re-pushed when a freeze
//! changes their share (stale entries are recognised by an epoch).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One link as the water-filling sees it.
#[derive(Clone, Debug, Default)]
pub struct LinkFill {
    pub remaining_bps: f64,
    pub unfrozen: u32,
    epoch: u32,
}

/// (fair share, link, epoch) ordered smallest share first.
#[derive(PartialEq)]
struct ShareEntry(f64, u32, u32);

impl Eq for ShareEntry {}

impl PartialOrd for ShareEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ShareEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the smallest share.
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

/// Reusable buffers for water-filling, so a recompute allocates nothing
/// in the steady state.
#[derive(Default)]
pub struct WaterFill {
    heap: BinaryHeap<ShareEntry>,
    /// Unfrozen flows sorted by cap, largest first (pop the smallest).
    by_cap: Vec<(f64, u32)>,
    frozen: Vec<bool>,
    unfrozen_flows: usize,
}

/// What the water-filling needs to know about the flows: their links and
/// caps, by a dense index 0..n.
pub trait FillInput {
    fn flow_count(&self) -> usize;
    fn flow_links(&self, flow: usize) -> &[u32];
    fn flow_cap(&self, flow: usize) -> f64;
    /// Dense flows crossing a link, by link id.
    fn link_flows(&self, link: u32) -> &[u32];
}

impl WaterFill {
    /// Fills `rates[i]` for every flow of `input`. `links` holds the fill
    /// state of every link the flows cross, indexed by link id, with
    /// `remaining_bps` = capacity and `unfrozen` = number of these flows on
    /// it; `link_ids` lists those links. Flows crossing no link get their cap.
    pub fn fill(
        &mut self,
        input: &impl FillInput,
        links: &mut [LinkFill],
        link_ids: &[u32],
        rates: &mut [f64],
    ) {
        let n = input.flow_count();
        self.frozen.clear();
        self.frozen.resize(n, false);
        self.by_cap.clear();
        for f in 0..n {
            let cap = input.flow_cap(f);
            if cap.is_finite() {
                self.by_cap.push((cap, f as u32));
            }
        }
        self.by_cap.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.heap.clear();
        for &l in link_ids {
            let link = &links[l as usize];
            if link.unfrozen > 0 {
                self.heap.push(ShareEntry(
                    link.remaining_bps / link.unfrozen as f64,
                    l,
                    link.epoch,
                ));
            }
        }
        self.unfrozen_flows = n;
        for (f, rate) in rates.iter_mut().enumerate().take(n) {
            if input.flow_links(f).is_empty() {
                *rate = input.flow_cap(f);
                self.frozen[f] = true;
                self.unfrozen_flows -= 1;
            }
        }
        while self.unfrozen_flows > 0 {
            // Skip caps of flows already frozen by a link.
            while let Some(&(_, f)) = self.by_cap.last() {
                if self.frozen[f as usize] {
                    self.by_cap.pop();
                } else {
                    break;
                }
            }
            let link_share = loop {
                match self.heap.peek() {
                    Some(ShareEntry(share, l, epoch)) if links[*l as usize].epoch == *epoch => {
                        break Some((*share, *l))
                    }
                    Some(_) => {
                        self.heap.pop();
                    }
                    None => break None,
                }
            };
            let cap_next = self.by_cap.last().copied();
            match (link_share, cap_next) {
                (Some((share, _)), Some((cap, f))) if cap < share => {
                    self.freeze(input, links, f as usize, cap, rates);
                    self.by_cap.pop();
                }
                (None, Some((cap, f))) => {
                    self.freeze(input, links, f as usize, cap, rates);
                    self.by_cap.pop();
                }
                (Some((share, l)), _) => {
                    self.heap.pop();
                    // Freeze every unfrozen flow of the saturated link.
                    for i in 0..input.link_flows(l).len() {
                        let f = input.link_flows(l)[i] as usize;
                        if !self.frozen[f] {
                            self.freeze(input, links, f, share, rates);
                        }
                    }
                }
                (None, None) => unreachable!("unfrozen flows always cross a link or have a cap"),
            }
        }
    }

    fn freeze(
        &mut self,
        input: &impl FillInput,
        links: &mut [LinkFill],
        f: usize,
        rate: f64,
        rates: &mut [f64],
    ) {
        self.frozen[f] = true;
        self.unfrozen_flows -= 1;
        rates[f] = rate;
        for &l in input.flow_links(f) {
            let link = &mut links[l as usize];
            link.remaining_bps = (link.remaining_bps - rate).max(0.0);
            link.unfrozen -= 1;
            link.epoch = link.epoch.wrapping_add(1);
            if link.unfrozen > 0 {
                self.heap.push(ShareEntry(
                    link.remaining_bps / link.unfrozen as f64,
                    l,
                    link.epoch,
                ));
            }
        }
    }
}
