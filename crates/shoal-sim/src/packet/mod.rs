//! The packet-level engine: every packet is serialised on every link of its
//! route, waits in drop-tail output queues that mark ECN at `K` packets, and
//! is carried by a DCTCP sender; collectives run as their message DAGs, each
//! message sent on the (persistent) connection between its two ranks once
//! its dependencies are delivered.
//!
//! Speed: packets live in a [`Slab`] (reused slots, no allocation per
//! packet); events are `(time, kind, index)` values; each link keeps its
//! own FIFOs (the output queue and the wire, whose arrivals are in order
//! because latency is constant) and puts only its next departure and its
//! next arrival in the global heap. Counted events, as htsim counts them:
//! departures from queues (`TX_DONE`), arrivals at the far end of a link
//! (`WIRE`), timers and flow starts.

mod ina;
mod pfc;
mod tcp;

use std::collections::{HashMap, VecDeque};

pub use ina::{InaJob, InaStats};
pub use pfc::{PfcConfig, PfcStats};

pub use tcp::TcpConfig;
use tcp::{AckAction, Window};

use crate::dag::CollectiveDag;
use crate::error::SimError;
use crate::event::{EventQueue, Slab};
use crate::topology::{mix, Node, Topology};
use crate::units::Time;

const TX_DONE: u8 = 0;
const WIRE: u8 = 1;
const TIMER: u8 = 2;
const FLOW_START: u8 = 3;
const COLL_START: u8 = 4;
const INA_TIMER: u8 = 5;
const INA_START: u8 = 6;
const MSG_READY: u8 = 7;
const PFC_PAUSE: u8 = 8;
const PFC_RESUME: u8 = 9;

/// `Packet::ina`: not an aggregation packet, a contribution going up, a
/// result coming down.
const INA_NONE: u8 = 0;
const INA_UP: u8 = 1;
const INA_DOWN: u8 = 2;
/// Marks an aggregation sender (not a flow) in a NIC's round.
const INA_SENDER: u32 = 1 << 31;

/// Parameters of a packet-level run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacketConfig {
    /// Largest packet on the wire, headers included (default 1500).
    pub mtu: u32,
    /// Header bytes per data packet (default 40: IPv4 + TCP).
    pub header: u32,
    /// Size of an ACK on the wire (default 64, a minimum Ethernet frame).
    pub ack_bytes: u32,
    /// ECN marking threshold in packets of an output queue (default 85,
    /// PANAMA's K).
    pub ecn_k: u32,
    pub tcp: TcpConfig,
    /// Salt of the ECMP hash and the loss draws.
    pub seed: u64,
    /// Probability that a switch loses an arriving packet (default 0), to
    /// test recovery.
    pub loss: f64,
    /// Aggregation memory per switch in bytes (default 64 MB, PANAMA's).
    pub ina_memory: u64,
    /// Host software time per collective message (default 0): a message
    /// whose dependencies are delivered reaches its connection this much
    /// later. It stands for what a real rank does between a receive
    /// completing and the next send starting (being woken, posting the
    /// send, reducing the piece), which dominates small and mid-size calls
    /// on a loaded host; measured on the testbed as the time of an 8-byte
    /// allreduce over its number of steps (docs/sim.md, "Against the
    /// testbed"). Transfers already under way overlap it.
    pub host_overhead: Time,
    /// PFC/PAUSE at switch ports (a lossless fabric); `None` (default):
    /// drop-tail.
    pub pfc: Option<PfcConfig>,
}

impl Default for PacketConfig {
    fn default() -> PacketConfig {
        PacketConfig {
            mtu: 1500,
            header: 40,
            ack_bytes: 64,
            ecn_k: 85,
            tcp: TcpConfig::default(),
            seed: 0,
            loss: 0.0,
            ina_memory: 64_000_000,
            host_overhead: 0,
            pfc: None,
        }
    }
}

impl PacketConfig {
    /// Payload bytes of a full packet.
    pub fn mss(&self) -> u32 {
        self.mtu - self.header
    }
}

/// A packet in flight: a data packet or its ACK, with the hop it is at.
#[derive(Clone, Copy, Debug, Default)]
struct Packet {
    flow: u32,
    /// Data: the packet's sequence number. ACK: the cumulative ACK.
    seq: u32,
    /// Bytes on the wire.
    wire: u32,
    /// Payload bytes (data only).
    payload: u32,
    /// Index in the route of the link it will take next.
    hop: u16,
    ack: bool,
    ecn: bool,
    /// Send time of the data packet (echoed by the ACK for RTT samples).
    sent: Time,
    /// Aggregation: `INA_NONE`, `INA_UP` or `INA_DOWN`; `flow` is the tree.
    ina: u8,
    /// Aggregation: the (partial) sum, workers in it, the window cap.
    value: u64,
    contributors: u32,
    cap: u32,
    /// Aggregation, going up: results the sender(s) hold, in order.
    acked: u32,
    /// PFC: 1 + the link it arrived on while it waits in a switch, else 0.
    ingress: u32,
}

/// One output port: its queue, and the packets on the wire beyond it.
#[derive(Debug)]
struct Port {
    to: u32,
    latency: Time,
    /// Picoseconds per byte when exact, else 0 (see [`Port::serialize`]).
    ps_per_byte: u64,
    rate: crate::units::Rate,
    buffer: u64,
    /// Whether the port marks ECN (switch ports; hosts do not mark).
    marks: bool,
    queue: VecDeque<u32>,
    queued_bytes: u64,
    wire: VecDeque<(Time, u32)>,
    /// Bytes sent, for utilisation.
    sent_bytes: u64,
    /// Longest the queue has been, in packets.
    peak_queue: u32,
    /// Host NICs: flows with window and data, served round-robin.
    ready: VecDeque<u32>,
    /// The head of the queue is being serialised.
    transmitting: bool,
    /// Stopped by a PFC PAUSE from the far end.
    paused: bool,
}

impl Port {
    fn serialize(&self, bytes: u32) -> Time {
        if self.ps_per_byte != 0 {
            bytes as u64 * self.ps_per_byte
        } else {
            self.rate.serialize(bytes as u64)
        }
    }
}

/// A run of packets of one message on a connection: sequence numbers
/// `[.., end)`, the last one carrying `last_payload` bytes.
#[derive(Clone, Copy, Debug)]
struct Segment {
    end: u32,
    last_payload: u32,
    /// Message id in its collective, or the background flow's index.
    msg: u32,
}

/// Who a connection belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// An ordinary flow (its index in `flows`).
    Background,
    /// The connection between two ranks of collective `.0`.
    Collective(u32),
}

/// A connection: sender, receiver and route in both directions.
#[derive(Debug)]
struct Flow {
    owner: Owner,
    route: Box<[u32]>,
    ack_route: Box<[u32]>,
    win: Window,
    next_seq: u32,
    acked: u32,
    /// Sequence numbers queued so far (end of the last segment).
    end: u32,
    segments: Vec<Segment>,
    /// Segment holding `next_seq` (moves back on go-back-N).
    send_seg: usize,
    /// First segment not yet fully delivered to the receiver.
    recv_seg: usize,
    expected: u32,
    rto_deadline: Time,
    timer_armed: bool,
    /// Whether the flow is in its NIC's round of senders.
    in_ready: bool,
    start: Time,
    /// When the last byte reached the receiver.
    finish: Option<Time>,
}

impl Flow {
    /// Whether the window allows another packet and there is one to send.
    fn can_send(&self) -> bool {
        self.next_seq < self.end && self.next_seq - self.acked < self.win.allowed()
    }
}

/// A collective under way: remaining dependencies of each message.
#[derive(Debug)]
struct CollectiveRun {
    dag: CollectiveDag,
    dependents: Vec<Vec<usize>>,
    waiting: Vec<u32>,
    delivered: usize,
    /// Connection of each (src rank, dst rank) pair, made on first use.
    channels: HashMap<(usize, usize), u32>,
    start: Time,
    finish: Option<Time>,
}

/// Something that finished: its kind and id (as returned when added).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Completion {
    Flow(usize),
    Collective(usize),
    Ina(usize),
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketStats {
    pub events: u64,
    pub drops: u64,
    pub ecn_marks: u64,
    pub timeouts: u64,
    pub data_packets: u64,
    /// Payload bytes delivered in order to receivers (each byte once).
    pub delivered_bytes: u64,
    /// Most packets alive at once (slab high-water mark).
    pub peak_packets: u64,
    pub ina: InaStats,
}

/// A packet-level simulation over one topology.
pub struct PacketSim {
    cfg: PacketConfig,
    nodes: Vec<Node>,
    ports: Vec<Port>,
    topo: Topology,
    queue: EventQueue,
    packets: Slab<Packet>,
    flows: Vec<Flow>,
    collectives: Vec<CollectiveRun>,
    stats: PacketStats,
    ina_jobs: Vec<ina::JobRun>,
    ina_trees: Vec<ina::Tree>,
    ina_aggs: Vec<ina::Aggregator>,
    ina_senders: Vec<ina::InaSender>,
    /// Active aggregation jobs at each node.
    ina_jobs_at: Vec<u32>,
    ina_stats: InaStats,
    /// State of the loss draws.
    rng: u64,
    /// Completions not yet returned by `run_until_completion`.
    completions: VecDeque<Completion>,
    /// Messages (collective, message) waiting out `host_overhead`, in the
    /// order their `MSG_READY` events fire (one constant delay keeps it FIFO).
    overhead_wait: VecDeque<(u32, u32)>,
    /// PFC state per link (empty without PFC).
    pfc: Vec<pfc::PfcLink>,
}

impl PacketSim {
    pub fn new(topo: &Topology, cfg: PacketConfig) -> PacketSim {
        let ports = topo
            .links
            .iter()
            .map(|l| {
                let from_host = topo.nodes[l.from] == Node::Host;
                let bits = 8 * crate::units::PS_PER_S;
                Port {
                    to: l.to as u32,
                    latency: l.latency,
                    ps_per_byte: if bits.is_multiple_of(l.rate.0) {
                        bits / l.rate.0
                    } else {
                        0
                    },
                    rate: l.rate,
                    // A host's NIC queue never drops: its sender's window
                    // bounds it (as TCP small queues do).
                    buffer: if from_host { u64::MAX } else { l.buffer },
                    marks: !from_host,
                    queue: VecDeque::new(),
                    queued_bytes: 0,
                    wire: VecDeque::new(),
                    sent_bytes: 0,
                    peak_queue: 0,
                    ready: VecDeque::new(),
                    transmitting: false,
                    paused: false,
                }
            })
            .collect();
        PacketSim {
            cfg,
            nodes: topo.nodes.clone(),
            ports,
            topo: topo.clone(),
            queue: EventQueue::new(),
            packets: Slab::default(),
            flows: Vec::new(),
            collectives: Vec::new(),
            stats: PacketStats::default(),
            ina_jobs: Vec::new(),
            ina_trees: Vec::new(),
            ina_aggs: Vec::new(),
            ina_senders: Vec::new(),
            ina_jobs_at: vec![0; topo.nodes.len()],
            ina_stats: InaStats::default(),
            rng: mix(cfg.seed ^ 0x5eed),
            completions: VecDeque::new(),
            overhead_wait: VecDeque::new(),
            pfc: if cfg.pfc.is_some() {
                vec![pfc::PfcLink::default(); topo.links.len()]
            } else {
                Vec::new()
            },
        }
    }

    pub fn now(&self) -> Time {
        self.queue.now()
    }

    /// An ordinary DCTCP flow of `bytes` from host `src` to host `dst`
    /// starting at `start`; returns its id for [`PacketSim::flow_finish`].
    /// A flow within one host finishes at its start without touching the
    /// network. Panics if `src` or `dst` is not a host.
    pub fn add_flow(&mut self, src: usize, dst: usize, bytes: u64, start: Time) -> usize {
        let id = self.new_flow(src, dst, Owner::Background, start);
        let id_u32 = id as u32;
        if src != dst {
            self.push_segment(id, bytes, id_u32);
        }
        self.queue.schedule(start, FLOW_START, id_u32);
        id
    }

    /// A collective starting at `start`; returns its id for
    /// [`PacketSim::collective_finish`].
    pub fn add_collective(&mut self, dag: CollectiveDag, start: Time) -> Result<usize, SimError> {
        if let Some(&h) = dag.placement.iter().find(|&&h| h >= self.topo.hosts()) {
            return Err(SimError::RankOutside {
                host: h,
                topology: self.topo.name.clone(),
                hosts: self.topo.hosts(),
            });
        }
        let id = self.collectives.len();
        self.collectives.push(CollectiveRun {
            waiting: dag
                .messages
                .iter()
                .map(|m| dag.deps(m.id).len() as u32)
                .collect(),
            dependents: dag.dependents(),
            dag,
            delivered: 0,
            channels: HashMap::new(),
            start,
            finish: None,
        });
        self.queue.schedule(start, COLL_START, id as u32);
        Ok(id)
    }

    /// Runs until no event is left.
    pub fn run(&mut self) -> PacketStats {
        self.run_until(Time::MAX)
    }

    /// Runs the events up to time `until`.
    pub fn run_until(&mut self, until: Time) -> PacketStats {
        while self.step(until) {}
        self.stats()
    }

    /// Runs events up to time `until` until one completes a flow, a
    /// collective or an aggregation job, and returns that completion; `None`
    /// when no event is left before `until`. The way to drive closed loops
    /// (a training job's next iteration starts when its collective ends).
    pub fn run_until_completion(&mut self, until: Time) -> Option<Completion> {
        loop {
            if let Some(c) = self.completions.pop_front() {
                return Some(c);
            }
            if !self.step(until) {
                return None;
            }
        }
    }

    /// Handles one event due by `until`; false when there is none.
    #[inline(always)]
    fn step(&mut self, until: Time) -> bool {
        if let Some(e) = self.queue.pop_before(until) {
            match e.kind {
                TX_DONE => self.tx_done(e.index),
                WIRE => self.wire_arrival(e.index),
                TIMER => self.timer(e.index),
                FLOW_START => self.start_flow(e.index),
                COLL_START => self.start_collective(e.index as usize),
                INA_TIMER => self.ina_timer(e.index),
                INA_START => self.ina_try_send(e.index),
                MSG_READY => {
                    let (c, m) = self.overhead_wait.pop_front().expect("a message waits");
                    self.post_message(c as usize, m as usize);
                }
                PFC_PAUSE => self.pfc_pause(e.index),
                PFC_RESUME => self.pfc_resume(e.index),
                k => unreachable!("unknown event kind {k}"),
            }
            true
        } else {
            false
        }
    }

    pub fn stats(&self) -> PacketStats {
        PacketStats {
            events: self.queue.popped,
            ina: self.ina_stats,
            peak_packets: self.packets.capacity() as u64,
            ..self.stats
        }
    }

    fn start_flow(&mut self, f: u32) {
        if self.flows[f as usize].route.is_empty() {
            // Within one host: done without the network.
            self.complete(Completion::Flow(f as usize));
        } else {
            self.try_send(f);
        }
    }

    /// Records a completion at the current time.
    fn complete(&mut self, c: Completion) {
        let now = self.queue.now();
        match c {
            Completion::Flow(f) => self.flows[f].finish = Some(now),
            Completion::Collective(id) => self.collectives[id].finish = Some(now),
            Completion::Ina(id) => self.ina_jobs[id].finish = Some(now),
        }
        self.completions.push_back(c);
    }

    /// When flow `id` delivered its last byte.
    pub fn flow_finish(&self, id: usize) -> Option<Time> {
        self.flows[id].finish
    }

    /// Payload bytes flow `id` has delivered in order so far.
    pub fn flow_delivered(&self, id: usize) -> u64 {
        let f = &self.flows[id];
        f.expected as u64 * self.cfg.mss() as u64
    }

    pub fn flow_start(&self, id: usize) -> Time {
        self.flows[id].start
    }

    /// When collective `id` delivered its last message.
    pub fn collective_finish(&self, id: usize) -> Option<Time> {
        self.collectives[id].finish
    }

    pub fn collective_start(&self, id: usize) -> Time {
        self.collectives[id].start
    }

    /// Bytes each link has sent.
    pub fn link_bytes(&self) -> Vec<u64> {
        self.ports.iter().map(|p| p.sent_bytes).collect()
    }

    /// Bytes each link holds now: in its output queue (the packet being
    /// serialised included) and on its wire.
    pub fn link_backlog(&self) -> Vec<(u64, u64)> {
        self.ports
            .iter()
            .map(|p| {
                let wire = p.wire.iter().map(|&(_, q)| self.packets[q].wire as u64);
                (p.queued_bytes, wire.sum())
            })
            .collect()
    }

    /// The longest each link's queue has been, in packets.
    pub fn link_peak_queue(&self) -> Vec<u32> {
        self.ports.iter().map(|p| p.peak_queue).collect()
    }

    fn new_flow(&mut self, src: usize, dst: usize, owner: Owner, start: Time) -> usize {
        let id = self.flows.len();
        let hash = mix(self.cfg.seed ^ mix(id as u64));
        let route = |a, b| -> Box<[u32]> {
            self.topo
                .ecmp_route(a, b, hash)
                .into_iter()
                .map(|l| l as u32)
                .collect()
        };
        let (fwd, back) = (route(src, dst), route(dst, src));
        self.flows.push(Flow {
            owner,
            route: fwd,
            ack_route: back,
            win: Window::new(&self.cfg.tcp),
            next_seq: 0,
            acked: 0,
            end: 0,
            segments: Vec::new(),
            send_seg: 0,
            recv_seg: 0,
            expected: 0,
            rto_deadline: 0,
            timer_armed: false,
            in_ready: false,
            start,
            finish: None,
        });
        id
    }

    /// Appends `bytes` (at least one packet, so empty messages still
    /// synchronise) to flow `f`'s stream.
    fn push_segment(&mut self, f: usize, bytes: u64, msg: u32) {
        let mss = self.cfg.mss() as u64;
        let packets = bytes.div_ceil(mss).max(1);
        let last = bytes - (packets - 1) * mss;
        let flow = &mut self.flows[f];
        flow.end += packets as u32;
        flow.segments.push(Segment {
            end: flow.end,
            last_payload: last as u32,
            msg,
        });
    }

    fn start_collective(&mut self, c: usize) {
        let roots: Vec<usize> = self.collectives[c].dag.roots().map(|m| m.id).collect();
        if self.collectives[c].dag.messages.is_empty() {
            self.complete(Completion::Collective(c));
        }
        for m in roots {
            self.message_ready(c, m);
        }
    }

    /// Message `m` of collective `c` has its dependencies: post it now, or
    /// after the host's software overhead.
    fn message_ready(&mut self, c: usize, m: usize) {
        if self.cfg.host_overhead == 0 {
            self.post_message(c, m);
        } else {
            self.overhead_wait.push_back((c as u32, m as u32));
            let at = self.now() + self.cfg.host_overhead;
            self.queue.schedule(at, MSG_READY, 0);
        }
    }

    /// Message `m` of collective `c` is ready: queue it on its connection,
    /// or deliver it at once between ranks of one host.
    fn post_message(&mut self, c: usize, m: usize) {
        let run = &self.collectives[c];
        let msg = &run.dag.messages[m];
        let (src, dst) = (
            run.dag.placement[msg.src_rank],
            run.dag.placement[msg.dst_rank],
        );
        if src == dst {
            self.stats.delivered_bytes += msg.bytes;
            self.message_delivered(c, m);
            return;
        }
        let key = (msg.src_rank, msg.dst_rank);
        let bytes = msg.bytes;
        let f = match run.channels.get(&key) {
            Some(&f) => f as usize,
            None => {
                let now = self.now();
                let f = self.new_flow(src, dst, Owner::Collective(c as u32), now);
                self.collectives[c].channels.insert(key, f as u32);
                f
            }
        };
        self.push_segment(f, bytes, m as u32);
        self.try_send(f as u32);
    }

    fn message_delivered(&mut self, c: usize, m: usize) {
        let mut ready = vec![m];
        while let Some(m) = ready.pop() {
            let run = &mut self.collectives[c];
            run.delivered += 1;
            if run.delivered == run.dag.messages.len() {
                self.complete(Completion::Collective(c));
            }
            let run = &mut self.collectives[c];
            let dependents = std::mem::take(&mut run.dependents[m]);
            for d in dependents {
                let run = &mut self.collectives[c];
                run.waiting[d] -= 1;
                if run.waiting[d] > 0 {
                    continue;
                }
                // Same-host messages complete at once: loop, not recurse.
                let msg = &run.dag.messages[d];
                if self.cfg.host_overhead > 0 {
                    self.message_ready(c, d);
                } else if run.dag.placement[msg.src_rank] == run.dag.placement[msg.dst_rank] {
                    self.stats.delivered_bytes += msg.bytes;
                    ready.push(d);
                } else {
                    self.post_message(c, d);
                }
            }
        }
    }

    /// Flow `f` may have window and data: put it in its host's round of
    /// senders, and start the NIC if it is idle.
    fn try_send(&mut self, f: u32) {
        let flow = &mut self.flows[f as usize];
        if flow.in_ready || !flow.can_send() {
            return;
        }
        flow.in_ready = true;
        let nic = flow.route[0];
        let port = &mut self.ports[nic as usize];
        port.ready.push_back(f);
        if port.queue.is_empty() {
            self.pull(nic);
        }
    }

    /// The host NIC `nic` is free: take one packet from the next flow in
    /// its round. Pulling one packet at a time, only when the NIC is free,
    /// keeps the NIC queue short (as TCP small queues and BQL do), so ACKs
    /// are not stuck behind a whole window of the host's own data.
    fn pull(&mut self, nic: u32) {
        while let Some(f) = self.ports[nic as usize].ready.pop_front() {
            if f & INA_SENDER != 0 {
                let s = f & !INA_SENDER;
                self.ina_senders[s as usize].in_ready = false;
                if !self.ina_senders[s as usize].can_send() {
                    continue;
                }
                let p = self.ina_next_packet(s);
                if self.ina_senders[s as usize].can_send() {
                    self.ina_senders[s as usize].in_ready = true;
                    self.ports[nic as usize].ready.push_back(f);
                }
                self.enqueue(nic, p);
                return;
            }
            self.flows[f as usize].in_ready = false;
            if !self.flows[f as usize].can_send() {
                continue;
            }
            let p = self.next_packet(f);
            if self.flows[f as usize].can_send() {
                self.flows[f as usize].in_ready = true;
                self.ports[nic as usize].ready.push_back(f);
            }
            self.enqueue(nic, p);
            return;
        }
    }

    /// Makes flow `f`'s next data packet and arms its timer.
    fn next_packet(&mut self, f: u32) -> u32 {
        let now = self.queue.now();
        let (mss, header) = (self.cfg.mss(), self.cfg.header);
        let flow = &mut self.flows[f as usize];
        while flow.segments[flow.send_seg].end <= flow.next_seq {
            flow.send_seg += 1;
        }
        let seg = flow.segments[flow.send_seg];
        let payload = if flow.next_seq + 1 == seg.end {
            seg.last_payload
        } else {
            mss
        };
        let pkt = Packet {
            flow: f,
            seq: flow.next_seq,
            wire: payload + header,
            payload,
            hop: 1,
            ack: false,
            ecn: false,
            sent: now,
            ..Default::default()
        };
        flow.next_seq += 1;
        flow.rto_deadline = now + flow.win.rto(&self.cfg.tcp);
        if !flow.timer_armed {
            flow.timer_armed = true;
            let at = flow.rto_deadline;
            self.queue.schedule(at, TIMER, f);
        }
        self.stats.data_packets += 1;
        self.packets.insert(pkt)
    }

    /// Puts packet `p` in the output queue of `link` (drop-tail, ECN at K).
    fn enqueue(&mut self, link: u32, p: u32) {
        let port = &mut self.ports[link as usize];
        let pkt = &mut self.packets[p];
        // A lossless port (PFC) never drops: PAUSE holds the senders back.
        let lossless = self.cfg.pfc.is_some();
        if !lossless && port.queued_bytes + pkt.wire as u64 > port.buffer {
            self.stats.drops += 1;
            self.packets.remove(p);
            return;
        }
        if port.marks && !pkt.ack && port.queue.len() as u32 >= self.cfg.ecn_k {
            pkt.ecn = true;
            self.stats.ecn_marks += 1;
        }
        port.queued_bytes += pkt.wire as u64;
        port.queue.push_back(p);
        port.peak_queue = port.peak_queue.max(port.queue.len() as u32);
        if !port.transmitting && !port.paused {
            port.transmitting = true;
            let done = self.queue.now() + port.serialize(pkt.wire);
            self.queue.schedule(done, TX_DONE, link);
        }
    }

    /// Starts `link`'s next packet if it is idle and not paused: the head
    /// of its queue, or for a host NIC the next packet of its senders.
    fn start_port(&mut self, link: u32) {
        let port = &mut self.ports[link as usize];
        if port.transmitting || port.paused {
            return;
        }
        if let Some(&next) = port.queue.front() {
            port.transmitting = true;
            let done = self.queue.now() + port.serialize(self.packets[next].wire);
            self.queue.schedule(done, TX_DONE, link);
        } else if !port.ready.is_empty() {
            self.pull(link);
        }
    }

    /// The head of `link`'s queue is on the wire: start the next one.
    fn tx_done(&mut self, link: u32) {
        let now = self.queue.now();
        let port = &mut self.ports[link as usize];
        let p = port.queue.pop_front().expect("TX_DONE on an empty queue");
        port.transmitting = false;
        let wire = self.packets[p].wire;
        port.queued_bytes -= wire as u64;
        port.sent_bytes += wire as u64;
        let arrive = now + port.latency;
        port.wire.push_back((arrive, p));
        if port.wire.len() == 1 {
            self.queue.schedule(arrive, WIRE, link);
        }
        if self.cfg.pfc.is_some() {
            self.pfc_left(p);
        }
        self.start_port(link);
    }

    /// The first packet on `link`'s wire reaches the far end.
    fn wire_arrival(&mut self, link: u32) {
        let port = &mut self.ports[link as usize];
        let (_, p) = port
            .wire
            .pop_front()
            .expect("WIRE with nothing on the wire");
        let node = port.to as usize;
        if let Some(&(next, _)) = port.wire.front() {
            self.queue.schedule(next, WIRE, link);
        }
        if self.cfg.loss > 0.0 && self.nodes[node] != Node::Host && self.lose() {
            self.stats.drops += 1;
            self.packets.remove(p);
            return;
        }
        let ina = self.packets[p].ina;
        if ina != INA_NONE {
            if self.nodes[node] == Node::Host {
                self.ina_result_at_host(node, p);
            } else {
                self.ina_at_switch(node, link, p);
            }
        } else if self.nodes[node] == Node::Host {
            self.deliver(p);
        } else {
            let pkt = &mut self.packets[p];
            let flow = &self.flows[pkt.flow as usize];
            let route = if pkt.ack {
                &flow.ack_route
            } else {
                &flow.route
            };
            let next = route[pkt.hop as usize];
            pkt.hop += 1;
            if self.cfg.pfc.is_some() {
                self.pfc_arrived(link, p);
            }
            self.enqueue(next, p);
        }
    }

    /// One loss draw (SplitMix64 stream, deterministic for the seed).
    fn lose(&mut self) -> bool {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let x = mix(self.rng);
        (x >> 11) as f64 / (1u64 << 53) as f64 <= self.cfg.loss
    }

    /// Packet `p` reached its destination host.
    fn deliver(&mut self, p: u32) {
        let pkt = self.packets[p];
        if pkt.ack {
            self.packets.remove(p);
            self.on_ack(pkt);
            return;
        }
        let f = pkt.flow as usize;
        let flow = &mut self.flows[f];
        let mut done = Vec::new();
        // Go-back-N receiver: only the next expected packet is accepted.
        if pkt.seq == flow.expected {
            flow.expected += 1;
            self.stats.delivered_bytes += pkt.payload as u64;
            while flow.recv_seg < flow.segments.len()
                && flow.segments[flow.recv_seg].end <= flow.expected
            {
                done.push(flow.segments[flow.recv_seg].msg);
                flow.recv_seg += 1;
            }
        }
        // Turn the data packet into its ACK (same slot, reverse route).
        let ack = &mut self.packets[p];
        ack.ack = true;
        ack.seq = flow.expected;
        ack.wire = self.cfg.ack_bytes;
        ack.payload = 0;
        ack.hop = 1;
        let first = flow.ack_route[0];
        let owner = flow.owner;
        self.enqueue(first, p);
        for msg in done {
            match owner {
                Owner::Background => self.complete(Completion::Flow(f)),
                Owner::Collective(c) => self.message_delivered(c as usize, msg as usize),
            }
        }
    }

    fn on_ack(&mut self, ack: Packet) {
        let now = self.queue.now();
        let cfg = self.cfg.tcp;
        let flow = &mut self.flows[ack.flow as usize];
        if ack.seq < flow.acked {
            return; // an old ACK overtaken by a go-back
        }
        let newly = ack.seq - flow.acked;
        if newly > 0 {
            flow.win.on_rtt(now - ack.sent);
            flow.acked = ack.seq;
            flow.rto_deadline = now + flow.win.rto(&cfg);
            if flow.next_seq < flow.acked {
                // Packets sent before a go-back were acknowledged after it:
                // go on from the first unacknowledged one, not resend them.
                go_back(flow);
            }
        }
        if flow
            .win
            .on_ack(&cfg, ack.seq, newly, ack.ecn, flow.next_seq)
            == AckAction::GoBack
        {
            go_back(flow);
        }
        self.try_send(ack.flow);
    }

    fn timer(&mut self, f: u32) {
        let now = self.queue.now();
        let flow = &mut self.flows[f as usize];
        if flow.acked == flow.end {
            flow.timer_armed = false;
            return;
        }
        if now < flow.rto_deadline {
            let at = flow.rto_deadline;
            self.queue.schedule(at, TIMER, f);
            return;
        }
        self.stats.timeouts += 1;
        flow.win.on_timeout(flow.next_seq);
        go_back(flow);
        flow.rto_deadline = now + 2 * flow.win.rto(&self.cfg.tcp);
        let at = flow.rto_deadline;
        self.queue.schedule(at, TIMER, f);
        self.try_send(f);
    }
}

/// Resend from the first unacknowledged packet.
fn go_back(flow: &mut Flow) {
    flow.next_seq = flow.acked;
    flow.send_seg = flow.segments.partition_point(|s| s.end <= flow.acked);
}
