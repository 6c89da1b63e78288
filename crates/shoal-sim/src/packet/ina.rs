//! In-network aggregation in the packet engine: shoal's protocol
//! (docs/ina-protocol.md) and PANAMA's congestion control (its sections
//! 4.1-4.2), packet by packet.
//!
//! - A job's workers send packet `s` of their gradient on tree `s mod T`
//!   (several trees per job, round robin, PANAMA's load balancing). A tree
//!   is the union of the unique up-paths from the workers to a root switch
//!   that reaches them all at the least height (a ToR, an aggregation or a
//!   core switch of a fat-tree).
//! - Every switch of a tree keeps one slot per sequence number in flight:
//!   the contributions of its children are summed once each (a bitmap of
//!   children), ECN bits are OR-ed, and `cwnd_cap` is lowered to the
//!   switch's share; when all children (or the partial-aggregation quorum)
//!   are in, the sum goes to the parent, or, at the root, the result goes
//!   down and is replicated to every child.
//! - The result is the ACK: each worker runs a DCTCP window per tree on the
//!   results' ECN bits, capped by the results' `cwnd_cap` =
//!   min over the tree of `memory / slot bytes / jobs / trees of the job`.
//! - Loss: a worker that gets no result repeats from its first missing
//!   packet (go-back-N on a timeout). A repeated contribution is never
//!   summed twice: a switch still collecting ignores it, one waiting for its
//!   parent re-sends its partial sum up, one holding the result sends it
//!   back to that child. A switch frees a slot once every child has
//!   acknowledged (reported results past it), as shoal's shadow copies do.
//!
//! Payload values are symbolic: with at most 64 workers worker `w`
//! contributes `1 << w` to every packet, so a sum is exact only if each
//! contribution is in it once (double counting carries into other bits);
//! results are checked on arrival and mismatches counted in
//! [`InaStats::wrong_results`].

use std::collections::{HashMap, VecDeque};

use super::tcp::Window;
use super::{PacketSim, INA_TIMER};
use crate::error::SimError;
use crate::topology::{LinkId, Node, NodeId};
use crate::units::Time;

/// One aggregation job.
#[derive(Clone, Debug, PartialEq)]
pub struct InaJob {
    /// The worker hosts.
    pub workers: Vec<usize>,
    /// Gradient bytes per worker.
    pub bytes: u64,
    /// Trees to spread packets over (fewer if the topology has fewer).
    pub trees: usize,
    /// Send everything over this one of the `trees` instead (PANAMA Fig.
    /// 9's Agg1..Agg4); `None`: over all of them.
    pub only_tree: Option<usize>,
    /// Fraction of a switch's children to wait for (1.0: all; PANAMA-0.88).
    pub quorum: f64,
    /// PANAMA's congestion control; off: a fixed window of `cwnd_cap`
    /// (the SwitchML*-like baseline).
    pub congestion_control: bool,
}

impl InaJob {
    pub fn new(workers: Vec<usize>, bytes: u64) -> InaJob {
        InaJob {
            workers,
            bytes,
            trees: 4,
            only_tree: None,
            quorum: 1.0,
            congestion_control: true,
        }
    }
}

/// Counters of the aggregation jobs of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InaStats {
    /// Results whose sum or contributor count was wrong.
    pub wrong_results: u64,
    /// Results received by workers (first copy of each).
    pub results: u64,
    /// Contributions a switch ignored because they were already summed.
    pub duplicates_ignored: u64,
    /// Packets dropped for want of a slot.
    pub no_memory: u64,
    pub worker_timeouts: u64,
}

/// One switch's state for one tree.
#[derive(Debug)]
pub(super) struct Aggregator {
    tree: u32,
    node: NodeId,
    /// Trees of the same job through this switch (they split its share).
    trees_here: u32,
    /// Links from each child into this switch (a child is found by the
    /// link a packet came in on).
    child_in: Vec<LinkId>,
    /// Links from this switch down to each child.
    child_out: Vec<LinkId>,
    /// Link up to the parent; `None` at the root.
    up: Option<LinkId>,
    /// Children to wait for before a partial sum goes on.
    quorum: u32,
    /// Slot of tree-local index `base + i`.
    slots: VecDeque<Slot>,
    base: u32,
    /// Results each child has acknowledged (tree-local index).
    child_acked: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Collecting,
    /// Sum sent to the parent, waiting for the result.
    Up,
    Done,
}

#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    seen: u64,
    arrived: u32,
    value: u64,
    contributors: u32,
    ecn: bool,
    cap: u32,
    state: SlotState,
}

/// One tree of one job.
#[derive(Debug)]
pub(super) struct Tree {
    job: u32,
    /// Index of this tree in its job (packets `s` with `s mod T == index`).
    index: u32,
    /// Aggregator of each switch of the tree.
    agg_at: HashMap<NodeId, u32>,
    /// The same, indexed by node (`u32::MAX`: not in the tree), for the
    /// per-packet lookup.
    agg_of: Vec<u32>,
}

/// One worker's sender on one tree.
#[derive(Debug)]
pub(super) struct InaSender {
    pub(super) job: u32,
    pub(super) tree: u32,
    worker: u32,
    pub(super) nic: u32,
    /// Tree-local packets this worker sends on this tree.
    total: u32,
    pub(super) win: Window,
    next: u32,
    acked: u32,
    got: Vec<bool>,
    pub(super) in_ready: bool,
    rto_deadline: Time,
    timer_armed: bool,
}

impl InaSender {
    pub(super) fn can_send(&self) -> bool {
        let mut next = self.next;
        while next < self.total && self.got[next as usize] {
            next += 1;
        }
        next < self.total && next - self.acked < self.win.allowed()
    }
}

/// A job under way.
#[derive(Debug)]
pub(super) struct JobRun {
    job: InaJob,
    /// Worker index of each host (`u32::MAX`: not a worker).
    worker_of: Vec<u32>,
    /// Sender of worker `w` on tree `i` is `first_sender + w * trees + i`.
    first_sender: u32,
    trees: Vec<u32>,
    /// Results still missing, over all workers.
    missing: u64,
    start: Time,
    pub(super) finish: Option<Time>,
    /// `1 << w` (at most 64 workers) or 1.
    symbolic: bool,
}

/// Bytes of aggregation memory one slot takes: accumulator and stored
/// result of one packet, plus bookkeeping (docs/ina-protocol.md).
fn slot_bytes(mtu: u32) -> u64 {
    2 * mtu as u64 + 64
}

/// The switches that reach every worker at the least height: the
/// candidate tree roots, in node order.
fn roots(sim: &PacketSim, workers: &[usize]) -> Vec<NodeId> {
    let topo = &sim.topo;
    let height = |s: NodeId| workers.iter().map(|&w| topo.hops(s, w)).max().unwrap_or(0);
    let switches = topo.hosts()..topo.nodes.len();
    let best = switches.clone().map(height).min().unwrap_or(0);
    switches.filter(|&s| height(s) == best).collect()
}

/// Hops from every node to `root` (through switches only).
fn distances_to(sim: &PacketSim, root: NodeId) -> Vec<u32> {
    let topo = &sim.topo;
    let mut dist = vec![u32::MAX; topo.nodes.len()];
    dist[root] = 0;
    let mut queue = VecDeque::from([root]);
    while let Some(n) = queue.pop_front() {
        for &l in topo.out_links(n) {
            let m = topo.links[l].to;
            if dist[m] == u32::MAX {
                dist[m] = dist[n] + 1;
                if topo.nodes[m] != Node::Host {
                    queue.push_back(m);
                }
            }
        }
    }
    dist
}

impl PacketSim {
    /// An aggregation job starting at `start` (all workers start then);
    /// returns its id for [`PacketSim::ina_finish`].
    pub fn add_ina_job(&mut self, job: InaJob, start: Time) -> Result<usize, SimError> {
        let hosts = self.topo.hosts();
        if job.workers.is_empty() {
            return Err(SimError::InaNoWorkers);
        }
        if let Some(&w) = job.workers.iter().find(|&&w| w >= hosts) {
            return Err(SimError::InaWorkerOutside {
                host: w,
                topology: self.topo.name.clone(),
            });
        }
        let mut sorted = job.workers.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != job.workers.len() {
            return Err(SimError::InaWorkersNotDistinct);
        }
        if !(0.0 < job.quorum && job.quorum <= 1.0) {
            return Err(SimError::InaQuorum(job.quorum));
        }
        let id = self.ina_jobs.len() as u32;
        let mut candidates = roots(self, &job.workers);
        candidates.truncate(job.trees.max(1));
        if let Some(only) = job.only_tree {
            if only >= candidates.len() {
                return Err(SimError::TreeOutside {
                    tree: only,
                    trees: candidates.len(),
                });
            }
            candidates = vec![candidates[only]];
        }
        let t = candidates.len();
        let payload = self.cfg.mss() as u64;
        let packets = job.bytes.div_ceil(payload).max(1) as u32;
        let mut tree_ids = Vec::new();
        for (index, &root) in candidates.iter().enumerate() {
            tree_ids.push(self.build_tree(id, index as u32, root, &job)?);
        }
        self.share_memory(&tree_ids);
        let first_sender = self.ina_senders.len() as u32;
        // Workers' senders, one per (worker, tree).
        for (w, &host) in job.workers.iter().enumerate() {
            for (index, &tree) in tree_ids.iter().enumerate() {
                let total = (packets as usize).saturating_sub(index).div_ceil(t) as u32;
                let mut win = Window::new(&self.cfg.tcp);
                win.cap = self.tree_cap(tree) as f64;
                if !job.congestion_control {
                    win.cwnd = win.cap;
                }
                let nic = self.topo.out_links(host)[0] as u32;
                let s = self.ina_senders.len() as u32;
                self.ina_senders.push(InaSender {
                    job: id,
                    tree,
                    worker: w as u32,
                    nic,
                    total,
                    win,
                    next: 0,
                    acked: 0,
                    got: vec![false; total as usize],
                    in_ready: false,
                    rto_deadline: 0,
                    timer_armed: false,
                });
                self.queue.schedule(start, super::INA_START, s);
            }
        }
        self.ina_jobs.push(JobRun {
            worker_of: {
                let mut of = vec![u32::MAX; hosts];
                for (w, &h) in job.workers.iter().enumerate() {
                    of[h] = w as u32;
                }
                of
            },
            first_sender,
            symbolic: job.workers.len() <= 64,
            missing: packets as u64 * job.workers.len() as u64,
            job,
            trees: tree_ids,
            start,
            finish: None,
        });
        Ok(id as usize)
    }

    /// When aggregation job `id` delivered its last result.
    pub fn ina_finish(&self, id: usize) -> Option<Time> {
        self.ina_jobs[id].finish
    }

    pub fn ina_start(&self, id: usize) -> Time {
        self.ina_jobs[id].start
    }

    /// Trees job `id` uses.
    pub fn ina_trees(&self, id: usize) -> usize {
        self.ina_jobs[id].trees.len()
    }

    pub fn ina_stats(&self) -> InaStats {
        self.ina_stats
    }

    /// Builds tree `index` of job `job` rooted at `root`.
    fn build_tree(
        &mut self,
        job: u32,
        index: u32,
        root: NodeId,
        spec: &InaJob,
    ) -> Result<u32, SimError> {
        let dist = distances_to(self, root);
        let tree_id = self.ina_trees.len() as u32;
        let mut agg_at: HashMap<NodeId, u32> = HashMap::new();
        for &w in &spec.workers {
            // Walk up from the worker; the first link towards the root.
            let mut node = w;
            while node != root {
                let up = self.topo.out_links(node).iter().copied().find(|&l| {
                    let to = self.topo.links[l].to;
                    dist[to] != u32::MAX && dist[to] + 1 == dist[node]
                });
                let up = up.ok_or(SimError::NoPath {
                    host: w,
                    switch: root,
                })?;
                let parent = self.topo.links[up].to;
                let a = match agg_at.get(&parent) {
                    Some(&a) => a,
                    None => {
                        let a = self.ina_aggs.len() as u32;
                        self.ina_aggs.push(Aggregator {
                            tree: tree_id,
                            node: parent,
                            trees_here: 1,
                            child_in: Vec::new(),
                            child_out: Vec::new(),
                            up: None,
                            quorum: 0,
                            slots: VecDeque::new(),
                            base: 0,
                            child_acked: Vec::new(),
                        });
                        agg_at.insert(parent, a);
                        a
                    }
                };
                let agg = &mut self.ina_aggs[a as usize];
                if agg.child_in.contains(&up) {
                    break; // the rest of the path is already in the tree
                }
                let down = self
                    .topo
                    .out_links(parent)
                    .iter()
                    .copied()
                    .find(|&l| self.topo.links[l].to == node);
                agg.child_in.push(up);
                agg.child_out.push(down.expect("links are symmetric"));
                agg.child_acked.push(0);
                if let Some(&child) = agg_at.get(&node) {
                    self.ina_aggs[child as usize].up = Some(up);
                }
                node = parent;
            }
        }
        for &a in agg_at.values() {
            let agg = &mut self.ina_aggs[a as usize];
            if agg.child_in.len() > 64 {
                return Err(SimError::TooManyChildren {
                    switch: agg.node,
                    children: agg.child_in.len(),
                });
            }
            let children = agg.child_in.len() as f64;
            agg.quorum = ((spec.quorum * children).ceil() as u32).clamp(1, children as u32);
        }
        let mut agg_of = vec![u32::MAX; self.topo.nodes.len()];
        for (&node, &a) in &agg_at {
            agg_of[node] = a;
        }
        self.ina_trees.push(Tree {
            job,
            index,
            agg_at,
            agg_of,
        });
        Ok(tree_id)
    }

    /// Counts, per switch, the job's trees through it and the job itself
    /// among the switch's active jobs (their shares follow in `agg_cap`).
    fn share_memory(&mut self, trees: &[u32]) {
        let mut trees_at: HashMap<NodeId, u32> = HashMap::new();
        for &t in trees {
            for &node in self.ina_trees[t as usize].agg_at.keys() {
                *trees_at.entry(node).or_default() += 1;
            }
        }
        for &node in trees_at.keys() {
            self.ina_jobs_at[node] += 1;
        }
        for &t in trees {
            for (&node, &a) in &self.ina_trees[t as usize].agg_at {
                self.ina_aggs[a as usize].trees_here = trees_at[&node];
            }
        }
    }

    /// Aggregator `a`'s window share, PANAMA's `memory / num_jobs`: the
    /// switch's slots split over its active jobs, then over the job's trees
    /// through it. Recomputed on every packet, so it follows jobs.
    fn agg_cap(&self, a: u32) -> u32 {
        let agg = &self.ina_aggs[a as usize];
        let slots = self.cfg.ina_memory / slot_bytes(self.cfg.mtu);
        let jobs = self.ina_jobs_at[agg.node].max(1) as u64;
        (slots / jobs / agg.trees_here as u64).clamp(1, u16::MAX as u64) as u32
    }

    /// `cwnd_cap` of a tree: the least share along it.
    fn tree_cap(&self, tree: u32) -> u32 {
        let t = &self.ina_trees[tree as usize];
        t.agg_at
            .values()
            .map(|&a| self.agg_cap(a))
            .min()
            .unwrap_or(u32::MAX)
    }

    /// Worker `w`'s contribution to every packet.
    fn contribution(&self, job: u32, w: u32) -> u64 {
        if self.ina_jobs[job as usize].symbolic {
            1 << w
        } else {
            1
        }
    }

    /// Makes sender `s`'s next contribution; returns the packet slot.
    pub(super) fn ina_next_packet(&mut self, s: u32) -> u32 {
        let now = self.queue.now();
        let sender = &mut self.ina_senders[s as usize];
        // After a go-back, skip the packets whose results came back.
        while sender.got[sender.next as usize] {
            sender.next += 1;
        }
        let (job, worker, tree, index) = (sender.job, sender.worker, sender.tree, sender.next);
        let rto = sender.win.rto(&self.cfg.tcp);
        let acked = sender.acked;
        let value = self.contribution(job, worker);
        let sender = &mut self.ina_senders[s as usize];
        sender.next += 1;
        sender.rto_deadline = now + rto;
        if !sender.timer_armed {
            sender.timer_armed = true;
            self.queue.schedule(now + rto, INA_TIMER, s);
        }
        self.stats.data_packets += 1;
        self.packets.insert(super::Packet {
            flow: tree,
            seq: index,
            wire: self.cfg.mtu,
            payload: self.cfg.mss(),
            ina: super::INA_UP,
            value,
            contributors: 1,
            cap: u32::MAX,
            acked,
            sent: now,
            ..Default::default()
        })
    }

    /// An aggregation packet arrived at switch `node` over `link`.
    pub(super) fn ina_at_switch(&mut self, node: NodeId, link: u32, p: u32) {
        let pkt = self.packets[p];
        let a = self.ina_trees[pkt.flow as usize].agg_of[node];
        assert!(a != u32::MAX, "aggregation packet off its tree");
        if pkt.ina == super::INA_DOWN {
            self.packets.remove(p);
            return self.ina_result_down(a, pkt.seq, pkt);
        }
        let agg = &mut self.ina_aggs[a as usize];
        let child = agg
            .child_in
            .iter()
            .position(|&l| l == link as usize)
            .expect("contribution from a non-child");
        agg.child_acked[child] = agg.child_acked[child].max(pkt.acked);
        self.packets.remove(p);
        self.ina_free_slots(a);
        let cap = self.agg_cap(a);
        let agg = &mut self.ina_aggs[a as usize];
        if pkt.seq < agg.base {
            // Its slot is freed: every child holds the result already.
            self.ina_stats.duplicates_ignored += 1;
            return;
        }
        let i = (pkt.seq - agg.base) as usize;
        if i >= cap as usize * 2 {
            self.ina_stats.no_memory += 1;
            self.stats.drops += 1;
            return;
        }
        while agg.slots.len() <= i {
            agg.slots.push_back(Slot::default());
        }
        let bit = 1u64 << child;
        let slot = &mut agg.slots[i];
        if slot.seen & bit != 0 || slot.state != SlotState::Collecting {
            let state = slot.state;
            let late = slot.seen & bit == 0;
            slot.seen |= bit;
            match state {
                SlotState::Collecting | SlotState::Up if !late => {
                    self.ina_stats.duplicates_ignored += 1;
                    if state == SlotState::Up {
                        self.ina_send_up(a, pkt.seq); // the parent may have lost it
                    }
                }
                SlotState::Up => {} // a latecomer: the result will reach it
                SlotState::Done => self.ina_send_result(a, pkt.seq, Some(child)),
                SlotState::Collecting => unreachable!(),
            }
            return;
        }
        slot.seen |= bit;
        slot.arrived += 1;
        slot.value = slot.value.wrapping_add(pkt.value);
        slot.contributors += pkt.contributors;
        slot.ecn |= pkt.ecn;
        slot.cap = if slot.arrived == 1 {
            pkt.cap
        } else {
            slot.cap.min(pkt.cap)
        };
        if slot.arrived < agg.quorum {
            return;
        }
        slot.cap = slot.cap.min(cap);
        if agg.up.is_some() {
            slot.state = SlotState::Up;
            self.ina_send_up(a, pkt.seq);
        } else {
            slot.state = SlotState::Done;
            self.ina_send_result(a, pkt.seq, None);
        }
    }

    /// Frees the slots every child has acknowledged.
    fn ina_free_slots(&mut self, a: u32) {
        let agg = &mut self.ina_aggs[a as usize];
        let all_acked = agg.child_acked.iter().copied().min().unwrap_or(0);
        while agg.base < all_acked
            && agg
                .slots
                .front()
                .is_some_and(|s| s.state == SlotState::Done)
        {
            agg.slots.pop_front();
            agg.base += 1;
        }
    }

    /// Sends the partial sum of `seq` to the parent.
    fn ina_send_up(&mut self, a: u32, seq: u32) {
        let agg = &self.ina_aggs[a as usize];
        let slot = agg.slots[(seq - agg.base) as usize];
        let up = agg.up.expect("the root sends no partial sums");
        let acked = agg.child_acked.iter().copied().min().unwrap_or(0);
        let tree = self.ina_tree_of(a);
        let p = self.packets.insert(super::Packet {
            flow: tree,
            seq,
            wire: self.cfg.mtu,
            payload: self.cfg.mss(),
            ina: super::INA_UP,
            value: slot.value,
            contributors: slot.contributors,
            cap: slot.cap,
            ecn: slot.ecn,
            acked,
            sent: self.queue.now(),
            ..Default::default()
        });
        self.enqueue(up as u32, p);
    }

    fn ina_tree_of(&self, a: u32) -> u32 {
        self.ina_aggs[a as usize].tree
    }

    /// A result for `seq` came down to aggregator `a`: store it and pass
    /// it to every child.
    fn ina_result_down(&mut self, a: u32, seq: u32, pkt: super::Packet) {
        let agg = &mut self.ina_aggs[a as usize];
        if seq < agg.base {
            return;
        }
        let i = (seq - agg.base) as usize;
        while agg.slots.len() <= i {
            agg.slots.push_back(Slot::default());
        }
        let slot = &mut agg.slots[i];
        if slot.state == SlotState::Done {
            return; // a repeated result: the children have it or will ask
        }
        slot.state = SlotState::Done;
        slot.value = pkt.value;
        slot.contributors = pkt.contributors;
        slot.ecn = pkt.ecn;
        slot.cap = pkt.cap;
        self.ina_send_result(a, seq, None);
    }

    /// Sends the stored result of `seq` to one child or to all.
    fn ina_send_result(&mut self, a: u32, seq: u32, only: Option<usize>) {
        let agg = &self.ina_aggs[a as usize];
        let slot = agg.slots[(seq - agg.base) as usize];
        let children = match only {
            Some(c) => c..c + 1,
            None => 0..agg.child_out.len(),
        };
        let tree = agg.tree;
        for c in children {
            let link = self.ina_aggs[a as usize].child_out[c];
            let p = self.packets.insert(super::Packet {
                flow: tree,
                seq,
                wire: self.cfg.mtu,
                payload: self.cfg.mss(),
                ina: super::INA_DOWN,
                value: slot.value,
                contributors: slot.contributors,
                cap: slot.cap,
                ecn: slot.ecn,
                sent: self.queue.now(),
                ..Default::default()
            });
            self.enqueue(link as u32, p);
        }
    }

    /// A result reached worker host `host`: it is the ACK of that packet.
    pub(super) fn ina_result_at_host(&mut self, host: NodeId, p: u32) {
        let pkt = self.packets[p];
        self.packets.remove(p);
        let tree = &self.ina_trees[pkt.flow as usize];
        let job = &self.ina_jobs[tree.job as usize];
        let w = job.worker_of[host];
        let s = job.first_sender + w * job.trees.len() as u32 + tree.index;
        let now = self.queue.now();
        // Check the sum: every contribution at most once, all of them
        // unless partial aggregation let some out.
        let workers = job.job.workers.len() as u32;
        let full = job.job.quorum >= 1.0;
        let ok = if job.symbolic {
            pkt.value.count_ones() == pkt.contributors
                && (!full || pkt.contributors == workers)
                && (workers == 64 || pkt.value < (1u64 << workers))
        } else {
            pkt.value == pkt.contributors as u64 && (!full || pkt.contributors == workers)
        };
        let sender = &mut self.ina_senders[s as usize];
        if sender.got[pkt.seq as usize] {
            return; // a repeated result
        }
        sender.got[pkt.seq as usize] = true;
        self.ina_stats.results += 1;
        if !ok {
            self.ina_stats.wrong_results += 1;
        }
        let before = sender.acked;
        while sender.acked < sender.total && sender.got[sender.acked as usize] {
            sender.acked += 1;
        }
        let newly = sender.acked - before;
        sender.win.cap = pkt.cap.max(1) as f64;
        if self.ina_jobs[tree.job as usize].job.congestion_control {
            sender.win.on_rtt(now.saturating_sub(pkt.sent));
            let next = sender.next;
            sender
                .win
                .on_ack(&self.cfg.tcp, sender.acked, newly.max(1), pkt.ecn, next);
        } else {
            sender.win.cwnd = sender.win.cap;
        }
        if newly > 0 {
            sender.rto_deadline = now + sender.win.rto(&self.cfg.tcp);
        }
        let job_id = tree.job as usize;
        let run = &mut self.ina_jobs[job_id];
        run.missing -= 1;
        if run.missing == 0 {
            // The job leaves its switches: the others' shares grow.
            let trees = run.trees.clone();
            let mut nodes: Vec<NodeId> = trees
                .iter()
                .flat_map(|&t| self.ina_trees[t as usize].agg_at.keys().copied())
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            for n in nodes {
                self.ina_jobs_at[n] -= 1;
            }
            self.complete(super::Completion::Ina(job_id));
        }
        self.ina_try_send(s);
    }

    /// Sender `s` may have window and data: join its NIC's round.
    pub(super) fn ina_try_send(&mut self, s: u32) {
        let sender = &mut self.ina_senders[s as usize];
        if sender.in_ready || !sender.can_send() {
            return;
        }
        sender.in_ready = true;
        let nic = sender.nic;
        self.ports[nic as usize]
            .ready
            .push_back(s | super::INA_SENDER);
        if self.ports[nic as usize].queue.is_empty() {
            self.pull(nic);
        }
    }

    /// Sender `s`'s timer: no result for too long, go back.
    pub(super) fn ina_timer(&mut self, s: u32) {
        let now = self.queue.now();
        let sender = &mut self.ina_senders[s as usize];
        if sender.acked == sender.total {
            sender.timer_armed = false;
            return;
        }
        if now < sender.rto_deadline {
            let at = sender.rto_deadline;
            self.queue.schedule(at, INA_TIMER, s);
            return;
        }
        self.ina_stats.worker_timeouts += 1;
        let next = sender.next;
        sender.win.on_timeout(next);
        sender.next = sender.acked;
        // Skip what already came back (results of later packets).
        sender.rto_deadline = now + 2 * sender.win.rto(&self.cfg.tcp);
        let at = sender.rto_deadline;
        self.queue.schedule(at, INA_TIMER, s);
        self.ina_try_send(s);
    }
}
