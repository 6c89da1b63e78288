//! The flow-level engine: flows over directed links share bandwidth
//! max-min fairly; rates are recomputed only for the connected component
//! (flows linked through shared links) touched by a start or an end.
//!
//! Time is f64 seconds, rates bit/s. A flow transmits its bytes at its
//! current rate; when the last bit leaves, it frees its links and is
//! delivered `latency_s` later (propagation plus per-hop delays, which a
//! fluid model does not otherwise see). Starts and ends at one instant are
//! batched: the rates are recomputed once, just before time advances.

use std::fmt;

use super::maxmin::{FillInput, LinkFill, WaterFill};
use super::queue::EventQueue;

/// A flow handle, valid until the flow is delivered (slots are reused).
pub type FlowId = u32;

/// What the engine reports to its driver.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Event {
    /// A flow's last byte arrived at its destination.
    Delivered {
        tag: u64,
        bytes: u64,
        start_s: f64,
        time_s: f64,
    },
    /// A flow's last byte left its source (it is delivered one route
    /// latency later): the source may start the next message on the same
    /// connection.
    Sent { tag: u64, time_s: f64 },
    /// A timer set with [`FlowEngine::timer`] fired.
    Timer { token: u64, time_s: f64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Start(u32),
    /// Flow id and the rate version the finish time was computed for.
    Finish(u32, u32),
    Deliver(u32),
    /// Index into the engine's timer tokens.
    Timer(u32),
}

impl Kind {
    /// Packs into 64 bits (2 bits of kind, 30 of version, 32 of id) so a
    /// queue entry is 16 bytes: the queue is the engine's hottest structure.
    fn encode(self) -> u64 {
        match self {
            Kind::Start(id) => id as u64,
            Kind::Finish(id, version) => {
                1 << 62 | ((version as u64 & 0x3FFF_FFFF) << 32) | id as u64
            }
            Kind::Deliver(id) => 2 << 62 | id as u64,
            Kind::Timer(slot) => 3 << 62 | slot as u64,
        }
    }

    fn decode(bits: u64) -> Kind {
        let id = bits as u32;
        match bits >> 62 {
            0 => Kind::Start(id),
            1 => Kind::Finish(id, ((bits >> 32) & 0x3FFF_FFFF) as u32),
            2 => Kind::Deliver(id),
            _ => Kind::Timer(id),
        }
    }
}

// Queue entries are (time as ordered bits, packed kind). Equal times pop
// in kind order (starts, finishes, deliveries, timers), then by id: the
// order is fixed by the inputs, so runs are deterministic.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Pending,
    Active,
    Done,
    Free,
}

/// The flow id of the tick that runs a deferred recompute
/// ([`FlowEngine::set_rate_interval`]); never a real flow's.
const TICK: u32 = u32::MAX;

/// Links kept inline in a flow (a fat-tree route needs 6); longer link
/// sets (an aggregation tree) are stored on the heap.
pub const MAX_HOPS: usize = 8;

#[derive(Clone, Debug)]
struct Flow {
    /// Links `path[..hops]`, inline: no allocation per flow; or, when
    /// there are more than MAX_HOPS, `long`.
    path: [u32; MAX_HOPS],
    hops: u32,
    long: Option<Box<[u32]>>,
    /// Weight in the max-min sharing (1: fair share).
    weight: f64,
    bytes: u64,
    remaining_bits: f64,
    rate_bps: f64,
    updated_s: f64,
    start_s: f64,
    version: u32,
    cap_bps: f64,
    latency_s: f64,
    tag: u64,
    state: State,
    mark: u32,
}

#[derive(Clone, Debug, Default)]
struct Link {
    capacity_bps: f64,
    active: Vec<u32>,
    /// Active flows that do not back off (weight > 1).
    greedy: u32,
    /// Standing queue while busy (congestion-controlled flows keep about
    /// the ECN threshold queued) and while a greedy flow is on it (the
    /// whole buffer), in seconds of this link's time.
    busy_queue_s: f64,
    greedy_queue_s: f64,
    bytes_done: f64,
    mark: u32,
}

/// The connected component being recomputed, with dense flow indices.
#[derive(Default)]
struct Component {
    flows: Vec<u32>,
    links: Vec<u32>,
    caps: Vec<f64>,
    weights: Vec<f64>,
    flow_off: Vec<u32>,
    flow_links: Vec<u32>,
    /// For each global link id: its dense flows are `link_flow[link_off[l]..link_off[l]+count]`.
    link_off: Vec<u32>,
    link_count: Vec<u32>,
    link_flow: Vec<u32>,
    rates: Vec<f64>,
}

impl Flow {
    fn links(&self) -> &[u32] {
        match &self.long {
            Some(links) => links,
            None => &self.path[..self.hops as usize],
        }
    }

    fn link(&self, i: usize) -> u32 {
        match &self.long {
            Some(links) => links[i],
            None => self.path[i],
        }
    }
}

impl FillInput for Component {
    fn flow_count(&self) -> usize {
        self.flows.len()
    }
    fn flow_links(&self, flow: usize) -> &[u32] {
        &self.flow_links[self.flow_off[flow] as usize..self.flow_off[flow + 1] as usize]
    }
    fn flow_cap(&self, flow: usize) -> f64 {
        self.caps[flow]
    }
    fn flow_weight(&self, flow: usize) -> f64 {
        self.weights[flow]
    }
    fn link_flows(&self, link: u32) -> &[u32] {
        let start = self.link_off[link as usize] as usize;
        &self.link_flow[start..start + self.link_count[link as usize] as usize]
    }
}

/// Max-min fair flow-level network simulator.
pub struct FlowEngine {
    now: f64,
    links: Vec<Link>,
    flows: Vec<Flow>,
    free_slots: Vec<u32>,
    queue: EventQueue,
    /// Tokens of pending timers, by slot; free slots are reused.
    timers: Vec<u64>,
    free_timers: Vec<u32>,
    dirty: Vec<u32>,
    mark: u32,
    component: Component,
    fill: WaterFill,
    fill_links: Vec<LinkFill>,
    recomputes: u64,
    events: u64,
    /// Minimum simulated time between recomputes (0: exact), the time of
    /// the last one, and whether a tick to run the next one is queued.
    rate_interval_s: f64,
    last_recompute_s: f64,
    tick_queued: bool,
}

fn time_key(t: f64) -> u64 {
    debug_assert!(t >= 0.0);
    t.to_bits()
}

/// A flow engine or a flow its caller got wrong.
#[derive(Clone, Debug, PartialEq)]
pub enum FlowError {
    /// A link whose capacity is not positive.
    Capacity { link: usize, bps: f64 },
    /// A flow starting before the engine's current time.
    StartInPast { at: f64, now: f64 },
    /// A path through a link the engine does not have.
    NoSuchLink { link: u32, links: usize },
    /// A rate cap that is not positive, or a negative latency.
    CapOrLatency { cap_bps: f64, latency_s: f64 },
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowError::Capacity { link, bps } => {
                write!(f, "link {link} has non-positive capacity {bps} bit/s")
            }
            FlowError::StartInPast { at, now } => {
                write!(f, "flow start {at} s is before the current time {now} s")
            }
            FlowError::NoSuchLink { link, links } => {
                write!(
                    f,
                    "flow path names link {link}, but there are {links} links"
                )
            }
            FlowError::CapOrLatency { cap_bps, latency_s } => write!(
                f,
                "flow needs a positive rate cap and latency >= 0 (got {cap_bps}, {latency_s})"
            ),
        }
    }
}

impl std::error::Error for FlowError {}

impl FlowEngine {
    /// An engine over directed links with the given capacities (bit/s).
    pub fn new(link_capacity_bps: &[f64]) -> Result<Self, FlowError> {
        if let Some((i, c)) = link_capacity_bps
            .iter()
            .enumerate()
            .find(|(_, c)| c.is_nan() || **c <= 0.0)
        {
            return Err(FlowError::Capacity { link: i, bps: *c });
        }
        let n = link_capacity_bps.len();
        Ok(FlowEngine {
            now: 0.0,
            links: link_capacity_bps
                .iter()
                .map(|&c| Link {
                    capacity_bps: c,
                    ..Link::default()
                })
                .collect(),
            flows: Vec::new(),
            free_slots: Vec::new(),
            queue: EventQueue::default(),
            timers: Vec::new(),
            free_timers: Vec::new(),
            dirty: Vec::new(),
            mark: 0,
            component: Component {
                link_off: vec![0; n],
                link_count: vec![0; n],
                ..Component::default()
            },
            fill: WaterFill::default(),
            fill_links: vec![LinkFill::default(); n],
            recomputes: 0,
            events: 0,
            rate_interval_s: 0.0,
            last_recompute_s: f64::NEG_INFINITY,
            tick_queued: false,
        })
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    /// Events handled so far (starts, finishes, deliveries, timers).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Component recomputations so far.
    pub fn recomputes(&self) -> u64 {
        self.recomputes
    }

    fn push(&mut self, at: f64, kind: Kind) {
        self.queue.push(time_key(at), kind.encode());
    }

    /// Schedules a flow of `bytes` over `path` (link ids) at time `at`
    /// (>= now), rate-limited to `cap_bps` (f64::INFINITY for none),
    /// delivered `latency_s` after its last bit is sent.
    pub fn start_flow(
        &mut self,
        at: f64,
        path: &[u32],
        bytes: u64,
        latency_s: f64,
        cap_bps: f64,
        tag: u64,
    ) -> Result<FlowId, FlowError> {
        if at.is_nan() || at < self.now {
            return Err(FlowError::StartInPast { at, now: self.now });
        }
        if let Some(&l) = path.iter().find(|&&l| l as usize >= self.links.len()) {
            return Err(FlowError::NoSuchLink {
                link: l,
                links: self.links.len(),
            });
        }
        if cap_bps.is_nan() || cap_bps <= 0.0 || latency_s.is_nan() || latency_s < 0.0 {
            return Err(FlowError::CapOrLatency { cap_bps, latency_s });
        }
        let mut links = [0; MAX_HOPS];
        let long = if path.len() > MAX_HOPS {
            Some(path.into())
        } else {
            links[..path.len()].copy_from_slice(path);
            None
        };
        let flow = Flow {
            path: links,
            hops: path.len() as u32,
            long,
            weight: 1.0,
            bytes,
            remaining_bits: bytes as f64 * 8.0,
            rate_bps: 0.0,
            updated_s: at,
            start_s: at,
            version: 0,
            cap_bps,
            latency_s,
            tag,
            state: State::Pending,
            mark: 0,
        };
        let id = match self.free_slots.pop() {
            Some(slot) => {
                self.flows[slot as usize] = flow;
                slot
            }
            None => {
                self.flows.push(flow);
                (self.flows.len() - 1) as u32
            }
        };
        if at == self.now {
            // Joins the batch of this instant: no queue round trip.
            self.activate(id);
        } else {
            self.push(at, Kind::Start(id));
        }
        Ok(id)
    }

    /// A timer that fires at `at` (>= now) and reports `token`.
    pub fn timer(&mut self, at: f64, token: u64) {
        let slot = match self.free_timers.pop() {
            Some(slot) => {
                self.timers[slot as usize] = token;
                slot
            }
            None => {
                self.timers.push(token);
                (self.timers.len() - 1) as u32
            }
        };
        self.push(at.max(self.now), Kind::Timer(slot));
    }

    /// Changes an active or pending flow's rate cap (e.g. a congestion
    /// window limit); its component is recomputed before time advances.
    pub fn set_cap(&mut self, flow: FlowId, cap_bps: f64) {
        let f = &mut self.flows[flow as usize];
        f.cap_bps = cap_bps;
        self.touch(flow);
    }

    /// Sets a flow's weight in the sharing (default 1; larger takes a
    /// proportionally larger share: traffic that does not back off).
    pub fn set_weight(&mut self, flow: FlowId, weight: f64) {
        assert!(weight > 0.0, "flow weight must be positive");
        let f = &mut self.flows[flow as usize];
        let change = (weight > 1.0) as i32 - (f.weight > 1.0) as i32;
        f.weight = weight;
        if f.state == State::Active && change != 0 {
            for i in 0..f.hops as usize {
                let l = self.flows[flow as usize].link(i);
                let link = &mut self.links[l as usize];
                link.greedy = (link.greedy as i32 + change) as u32;
            }
        }
        self.touch(flow);
    }

    /// Marks an active flow's component for recomputation.
    fn touch(&mut self, flow: FlowId) {
        let f = &self.flows[flow as usize];
        if f.state == State::Active {
            for i in 0..f.hops as usize {
                self.dirty.push(f.link(i));
            }
            if f.hops == 0 {
                self.reschedule_isolated(flow);
            }
        }
    }

    /// Queueing model: a flow starting over a busy link waits behind the
    /// standing queue there — `busy_bytes` (DCTCP keeps about K packets
    /// queued at a bottleneck) or, with a flow that does not back off on
    /// it, `greedy_bytes` (the buffer fills). A fluid model has no queues;
    /// this adds their delay to the short flows that meet them. Off (0) by
    /// default.
    pub fn set_queues(&mut self, busy_bytes: f64, greedy_bytes: f64) {
        for l in &mut self.links {
            l.busy_queue_s = busy_bytes * 8.0 / l.capacity_bps;
            l.greedy_queue_s = greedy_bytes * 8.0 / l.capacity_bps;
        }
    }

    /// Recompute rates at most every `interval_s` of simulated time
    /// (default 0: at every instant a flow starts or ends, exact max-min).
    /// In between, a new flow waits at rate 0 and an ended flow's share
    /// stays unused: each start and end takes effect up to `interval_s`
    /// late. For large scenarios, where every recompute is the whole
    /// network, this trades that bounded lag for speed.
    pub fn set_rate_interval(&mut self, interval_s: f64) {
        self.rate_interval_s = interval_s.max(0.0);
    }

    /// Flows now transmitting on a link.
    pub fn active_flows(&self, link: u32) -> usize {
        self.links[link as usize].active.len()
    }

    /// Current rate of an active flow (bit/s).
    pub fn rate_bps(&self, flow: FlowId) -> f64 {
        self.flows[flow as usize].rate_bps
    }

    /// Bytes each link has carried so far (finished flows, plus the sent
    /// part of active ones).
    pub fn link_bytes(&self) -> Vec<f64> {
        let mut bytes: Vec<f64> = self.links.iter().map(|l| l.bytes_done).collect();
        for f in self.flows.iter().filter(|f| f.state == State::Active) {
            let left = f.remaining_bits - f.rate_bps * (self.now - f.updated_s);
            let sent = (f.bytes as f64 - left.max(0.0) / 8.0).max(0.0);
            for &l in f.links() {
                bytes[l as usize] += sent;
            }
        }
        bytes
    }

    /// Handles internal events until one the driver sees; None when
    /// nothing is left to happen.
    pub fn next_event(&mut self) -> Option<Event> {
        loop {
            // The queue's present is `now`: when nothing more happens at
            // this instant, its starts and ends are batched into one recompute.
            if !self.dirty.is_empty() && !self.queue.has_present() {
                let due = self.last_recompute_s + self.rate_interval_s;
                if self.now >= due {
                    self.last_recompute_s = self.now;
                    self.recompute();
                    continue;
                }
                if !self.tick_queued {
                    self.tick_queued = true;
                    self.push(due, Kind::Start(TICK));
                }
            }
            let (t, bits) = self.queue.pop()?;
            let kind = Kind::decode(bits);
            self.now = f64::from_bits(t);
            self.events += 1;
            match kind {
                Kind::Start(TICK) => self.tick_queued = false,
                Kind::Start(id) => self.activate(id),
                Kind::Finish(id, version) => {
                    if self.finish(id, version) {
                        let tag = self.flows[id as usize].tag;
                        return Some(Event::Sent {
                            tag,
                            time_s: self.now,
                        });
                    }
                }
                Kind::Deliver(id) => {
                    let f = &mut self.flows[id as usize];
                    f.state = State::Free;
                    let event = Event::Delivered {
                        tag: f.tag,
                        bytes: f.bytes,
                        start_s: f.start_s,
                        time_s: self.now,
                    };
                    self.free_slots.push(id);
                    return Some(event);
                }
                Kind::Timer(slot) => {
                    self.free_timers.push(slot);
                    return Some(Event::Timer {
                        token: self.timers[slot as usize],
                        time_s: self.now,
                    });
                }
            }
        }
    }

    fn activate(&mut self, id: u32) {
        let f = &mut self.flows[id as usize];
        f.state = State::Active;
        f.updated_s = self.now;
        if f.hops == 0 {
            self.reschedule_isolated(id);
            return;
        }
        let greedy = f.weight > 1.0;
        let mut queued = 0.0;
        for i in 0..f.hops as usize {
            let l = self.flows[id as usize].link(i);
            let link = &mut self.links[l as usize];
            queued += if link.greedy > 0 {
                link.greedy_queue_s
            } else if !link.active.is_empty() {
                link.busy_queue_s
            } else {
                0.0
            };
            link.greedy += greedy as u32;
            self.links[l as usize].active.push(id);
            self.dirty.push(l);
        }
        self.flows[id as usize].latency_s += queued;
    }

    /// A flow crossing no link runs at its cap (or instantly).
    fn reschedule_isolated(&mut self, id: u32) {
        let now = self.now;
        let f = &mut self.flows[id as usize];
        f.remaining_bits = (f.remaining_bits - f.rate_bps * (now - f.updated_s)).max(0.0);
        f.updated_s = now;
        f.rate_bps = f.cap_bps;
        f.version += 1;
        let done = if f.cap_bps.is_finite() {
            now + f.remaining_bits / f.cap_bps
        } else {
            now
        };
        let version = f.version;
        self.push(done, Kind::Finish(id, version));
    }

    /// Ends flow `id`'s transmission; false when the finish was superseded
    /// by a rate change.
    fn finish(&mut self, id: u32, version: u32) -> bool {
        let f = &mut self.flows[id as usize];
        if f.state != State::Active || f.version & 0x3FFF_FFFF != version {
            return false; // superseded by a rate change
        }
        f.state = State::Done;
        f.remaining_bits = 0.0;
        f.rate_bps = 0.0;
        let (bytes, latency, weight) = (f.bytes as f64, f.latency_s, f.weight);
        let interval = self.rate_interval_s > 0.0;
        for i in 0..f.hops as usize {
            let l = self.flows[id as usize].link(i);
            let link = &mut self.links[l as usize];
            let pos = link
                .active
                .iter()
                .position(|&x| x == id)
                .expect("active flow is on its links");
            link.active.swap_remove(pos);
            link.greedy -= (weight > 1.0) as u32;
            link.bytes_done += bytes;
            // A link left idle changes no other flow's rate: no recompute
            // for it (half of a collective's were these, and found nothing
            // to do). With an interval a recompute, even an empty one,
            // restarts the interval, so there it stays.
            if !link.active.is_empty() || interval {
                self.dirty.push(l);
            }
        }
        self.push(self.now + latency, Kind::Deliver(id));
        true
    }

    /// Recomputes max-min rates over every component touching a dirty link.
    fn recompute(&mut self) {
        self.recomputes += 1;
        self.mark = self.mark.wrapping_add(1);
        let mark = self.mark;
        let c = &mut self.component;
        c.flows.clear();
        c.links.clear();
        // Breadth-first over links -> flows -> links.
        let mut stack = std::mem::take(&mut self.dirty);
        while let Some(l) = stack.pop() {
            let link = &mut self.links[l as usize];
            if link.mark == mark {
                continue;
            }
            link.mark = mark;
            c.links.push(l);
            for &fid in &self.links[l as usize].active {
                let f = &mut self.flows[fid as usize];
                if f.mark != mark {
                    f.mark = mark;
                    c.flows.push(fid);
                    stack.extend(
                        f.links()
                            .iter()
                            .copied()
                            .filter(|&x| self.links[x as usize].mark != mark),
                    );
                }
            }
        }
        self.dirty = stack; // keep the allocation
        self.dirty.clear();
        if self.component.flows.len() == 1 {
            // Alone on its links (the common case for a collective's
            // flows): the slowest link or its cap bounds it.
            let id = self.component.flows[0];
            let f = &self.flows[id as usize];
            let rate = f
                .links()
                .iter()
                .map(|&l| self.links[l as usize].capacity_bps)
                .fold(f.cap_bps, f64::min);
            self.set_rate(id, rate);
            return;
        }
        self.settle_lone_flows();
        if self.component.flows.is_empty() {
            return;
        }
        self.build_component();
        let c = &mut self.component;
        for &l in &c.links {
            let fill = &mut self.fill_links[l as usize];
            fill.remaining_bps = self.links[l as usize].capacity_bps;
            fill.unfrozen = c.link_count[l as usize];
            fill.weight = c.link_flows(l).iter().map(|&f| c.weights[f as usize]).sum();
        }
        c.rates.clear();
        c.rates.resize(c.flows.len(), 0.0);
        let mut rates = std::mem::take(&mut c.rates);
        self.fill.fill(
            &self.component,
            &mut self.fill_links,
            &self.component.links,
            &mut rates,
        );
        for (i, &rate) in rates.iter().enumerate() {
            let id = self.component.flows[i];
            self.set_rate(id, rate);
        }
        self.component.rates = rates;
    }

    /// Takes out of the component the flows alone on every link they
    /// cross and sets their rates directly, to exactly what the filling
    /// would give them (weight x the lowest of their links' and cap's
    /// levels). A batch of starts at one instant walks many disjoint
    /// groups of flows at once (a ring's thousand messages, most of them
    /// alone on their path); only the flows that share links need the heap.
    fn settle_lone_flows(&mut self) {
        let mut flows = std::mem::take(&mut self.component.flows);
        flows.retain(|&id| {
            let f = &self.flows[id as usize];
            let links = f.links();
            if links
                .iter()
                .any(|&l| self.links[l as usize].active.len() != 1)
            {
                return true;
            }
            let weight = f.weight;
            let level = links
                .iter()
                .map(|&l| self.links[l as usize].capacity_bps / weight)
                .fold(f.cap_bps / weight, f64::min);
            self.set_rate(id, weight * level);
            false
        });
        self.component.flows = flows;
    }

    fn build_component(&mut self) {
        let c = &mut self.component;
        c.caps.clear();
        c.weights.clear();
        c.flow_off.clear();
        c.flow_links.clear();
        c.flow_off.push(0);
        for &l in &c.links {
            c.link_count[l as usize] = 0;
        }
        for &fid in &c.flows {
            let f = &self.flows[fid as usize];
            c.caps.push(f.cap_bps);
            c.weights.push(f.weight);
            c.flow_links.extend_from_slice(f.links());
            c.flow_off.push(c.flow_links.len() as u32);
            for &l in f.links() {
                c.link_count[l as usize] += 1;
            }
        }
        let mut offset = 0;
        for &l in &c.links {
            c.link_off[l as usize] = offset;
            offset += c.link_count[l as usize];
            c.link_count[l as usize] = 0;
        }
        c.link_flow.clear();
        c.link_flow.resize(offset as usize, 0);
        for (dense, &fid) in c.flows.iter().enumerate() {
            for &l in self.flows[fid as usize].links() {
                let slot = c.link_off[l as usize] + c.link_count[l as usize];
                c.link_flow[slot as usize] = dense as u32;
                c.link_count[l as usize] += 1;
            }
        }
    }

    fn set_rate(&mut self, id: u32, rate: f64) {
        let now = self.now;
        let f = &mut self.flows[id as usize];
        if f.rate_bps == rate {
            return; // its finish event still holds
        }
        f.remaining_bits = (f.remaining_bits - f.rate_bps * (now - f.updated_s)).max(0.0);
        f.updated_s = now;
        f.rate_bps = rate;
        f.version += 1;
        let version = f.version;
        if rate > 0.0 {
            let done = now + f.remaining_bits / rate;
            self.push(done, Kind::Finish(id, version));
        }
    }
}
