//! Weighted max-min fair rates by progressive filling ("water-filling")
//! over one set of links and the flows that cross them.
//!
//! A common "water level" rises; every unfrozen flow runs at weight x
//! level. A link saturates when its remaining capacity divided by the
//! weight of its unfrozen flows is the smallest (its fair level); a flow
//! also stops at its own rate cap. Those flows freeze and the rest keep
//! rising. Links sit in a heap keyed by fair level, re-pushed when a freeze
//! changes it (stale entries are recognised by an epoch). With every weight
//! 1 this is plain max-min fairness, what DCTCP-like congestion control
//! converges to; a large weight models traffic that does not back off.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One link as the water-filling sees it.
#[derive(Clone, Debug, Default)]
pub struct LinkFill {
    pub remaining_bps: f64,
    /// Number and total weight of the unfrozen flows crossing it.
    pub unfrozen: u32,
    pub weight: f64,
    epoch: u32,
}

impl LinkFill {
    fn level(&self) -> f64 {
        self.remaining_bps / self.weight
    }
}

/// (level, link, epoch) ordered smallest level first.
#[derive(PartialEq)]
struct LevelEntry(f64, u32, u32);

impl Eq for LevelEntry {}

impl PartialOrd for LevelEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for LevelEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap, we want the smallest level.
        other
            .0
            .total_cmp(&self.0)
            .then_with(|| other.1.cmp(&self.1))
    }
}

/// What the water-filling needs to know about the flows: their links,
/// caps and weights, by a dense index 0..n.
pub trait FillInput {
    fn flow_count(&self) -> usize;
    fn flow_links(&self, flow: usize) -> &[u32];
    fn flow_cap(&self, flow: usize) -> f64;
    fn flow_weight(&self, flow: usize) -> f64;
    /// Dense flows crossing a link, by link id.
    fn link_flows(&self, link: u32) -> &[u32];
}

/// Reusable buffers for water-filling, so a recompute allocates nothing
/// in the steady state.
#[derive(Default)]
pub struct WaterFill {
    heap: BinaryHeap<LevelEntry>,
    /// Capped flows by the level at which they hit their cap, largest
    /// first (pop the smallest).
    by_cap: Vec<(f64, u32)>,
    frozen: Vec<bool>,
    unfrozen_flows: usize,
}

impl WaterFill {
    /// Fills `rates[i]` for every flow of `input`. `links` holds the fill
    /// state of every link the flows cross, indexed by link id, with
    /// `remaining_bps` = capacity and `unfrozen`/`weight` = count and total
    /// weight of these flows on it; `link_ids` lists those links. Flows
    /// crossing no link get their cap.
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
                self.by_cap.push((cap / input.flow_weight(f), f as u32));
            }
        }
        self.by_cap.sort_by(|a, b| b.0.total_cmp(&a.0));
        self.heap.clear();
        for &l in link_ids {
            let link = &links[l as usize];
            if link.unfrozen > 0 {
                self.heap.push(LevelEntry(link.level(), l, link.epoch));
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
            let link_level = loop {
                match self.heap.peek() {
                    Some(LevelEntry(level, l, epoch)) if links[*l as usize].epoch == *epoch => {
                        break Some((*level, *l))
                    }
                    Some(_) => {
                        self.heap.pop();
                    }
                    None => break None,
                }
            };
            let cap_next = self.by_cap.last().copied();
            match (link_level, cap_next) {
                (Some((level, _)), Some((cap_level, f))) if cap_level < level => {
                    self.freeze(input, links, f as usize, cap_level, rates);
                    self.by_cap.pop();
                }
                (None, Some((cap_level, f))) => {
                    self.freeze(input, links, f as usize, cap_level, rates);
                    self.by_cap.pop();
                }
                (Some((level, l)), _) => {
                    self.heap.pop();
                    // Freeze every unfrozen flow of the saturated link.
                    for i in 0..input.link_flows(l).len() {
                        let f = input.link_flows(l)[i] as usize;
                        if !self.frozen[f] {
                            self.freeze(input, links, f, level, rates);
                        }
                    }
                }
                (None, None) => unreachable!("unfrozen flows always cross a link or have a cap"),
            }
        }
    }

    /// Freezes flow `f` at `level` (its rate: weight x level).
    fn freeze(
        &mut self,
        input: &impl FillInput,
        links: &mut [LinkFill],
        f: usize,
        level: f64,
        rates: &mut [f64],
    ) {
        self.frozen[f] = true;
        self.unfrozen_flows -= 1;
        let weight = input.flow_weight(f);
        let rate = weight * level;
        rates[f] = rate;
        for &l in input.flow_links(f) {
            let link = &mut links[l as usize];
            link.remaining_bps = (link.remaining_bps - rate).max(0.0);
            link.unfrozen -= 1;
            link.weight -= weight;
            link.epoch = link.epoch.wrapping_add(1);
            if link.unfrozen > 0 {
                // Guard the weight sum against rounding to zero or below.
                let level = link.remaining_bps / link.weight.max(1e-12);
                self.heap.push(LevelEntry(level, l, link.epoch));
            }
        }
    }
}
