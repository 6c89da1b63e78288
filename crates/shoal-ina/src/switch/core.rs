//! Packet handling of the switch, free of sockets and threads so that tests
//! and the randomized parser test can drive it directly.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use crate::codec;
use crate::control::{CtrlMsg, ErrCode};
use crate::mac::PacketKey;
use crate::proto::{
    flags, max_count, slot_of, tag_ok, Header, Kind, ProtoError, ALL_MEMBERS, HEADER_LEN,
};
use crate::rng::Rng;

use super::jobs::{Job, Jobs};
use super::metrics::{DropReason, Metrics, ShardCounters};
use super::slots::{SlotCopy, State, Use};
use super::SwitchConfig;

/// Where the core sends packets (the UDP socket, or a test's capture).
pub trait Sink {
    fn send(&mut self, pkt: &[u8], to: SocketAddr);

    /// Sends `pkt` to every address present in `to` (a result's fan-out);
    /// sinks that can share one copy of the bytes override it.
    fn send_all(&mut self, pkt: &[u8], to: &[Option<SocketAddr>]) {
        for &addr in to.iter().flatten() {
            self.send(pkt, addr);
        }
    }
}

/// Which data-plane thread a core is, of how many. Each thread owns its
/// jobs (and so every slot of them) alone: no slot is ever shared.
#[derive(Clone, Copy, Debug)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

/// What one packet's processing needs besides the job itself.
struct Ctx<'a> {
    cap: u16,
    congested: bool,
    /// Where this job's partial sums go (leaf jobs only).
    parent: Option<SocketAddr>,
    metrics: &'a ShardCounters,
    out: &'a mut dyn Sink,
}

pub struct SwitchCore {
    pub jobs: Jobs,
    metrics: Arc<Metrics>,
    /// This core's data-plane thread: the counters it updates.
    shard: usize,
    parent: Option<SocketAddr>,
    drop_rng: Rng,
    drop_rate: f64,
    ecn_copies: usize,
    /// Set by the event loop when the socket backlog is deep.
    pub queue_congested: bool,
    /// Partial-aggregation deadlines: (when, job, copy index, seq).
    deadlines: BinaryHeap<Reverse<(Instant, u32, usize, u32)>>,
}

fn copy_index(slot: u16, shadow: bool) -> usize {
    slot as usize * 2 + shadow as usize
}

impl SwitchCore {
    /// The core of a single-threaded switch (shard 0 of 1).
    pub fn new(cfg: &SwitchConfig, data_port: u16, metrics: Arc<Metrics>) -> SwitchCore {
        SwitchCore::shard(cfg, data_port, metrics, Shard { index: 0, count: 1 })
    }

    /// The core of data-plane thread `shard.index`: it owns its jobs alone
    /// and gets `1 / shard.count` of the switch memory.
    pub fn shard(
        cfg: &SwitchConfig,
        data_port: u16,
        metrics: Arc<Metrics>,
        shard: Shard,
    ) -> SwitchCore {
        let jobs = Jobs::new(cfg, data_port, metrics.clone(), shard);
        let ecn_copies = (jobs.capacity_copies as f64 * cfg.ecn_threshold) as usize;
        SwitchCore {
            jobs,
            metrics,
            shard: shard.index,
            parent: cfg.parent,
            drop_rng: Rng::new(cfg.seed),
            drop_rate: cfg.drop_rate,
            ecn_copies,
            queue_congested: false,
            deadlines: BinaryHeap::new(),
        }
    }

    pub fn control(&mut self, msg: CtrlMsg, conn: u64) -> CtrlMsg {
        let res = match msg {
            CtrlMsg::Admit(req) => self.jobs.admit(&req, conn).map(CtrlMsg::AdmitOk),
            CtrlMsg::Release { job } => self
                .jobs
                .release(job, conn)
                .map(|_| CtrlMsg::Released { job }),
            _ => Err((ErrCode::Protocol, "unexpected control message".into())),
        };
        res.unwrap_or_else(|(code, reason)| {
            self.metrics.jobs_refused.fetch_add(1, Relaxed);
            CtrlMsg::Error { code, reason }
        })
    }

    pub fn conn_closed(&mut self, conn: u64) {
        self.jobs.release_conn(conn);
    }

    pub fn on_datagram(&mut self, pkt: &[u8], from: SocketAddr, now: Instant, out: &mut dyn Sink) {
        let m = self.metrics.shard(self.shard);
        m.rx_packets.fetch_add(1, Relaxed);
        m.rx_bytes.fetch_add(pkt.len() as u64, Relaxed);
        if self.drop_rng.chance(self.drop_rate) {
            return m.count_drop(DropReason::Injected);
        }
        let (h, payload) = match Header::decode(pkt) {
            Ok(x) => x,
            Err(ProtoError::Version(_)) => return m.count_drop(DropReason::Version),
            Err(_) => return m.count_drop(DropReason::Malformed),
        };
        let res = match h.kind {
            Kind::Data => self.on_data(&h, pkt, payload, from, now, out),
            Kind::Result => self.on_parent_result(&h, pkt, from, out),
        };
        if let Err(r) = res {
            self.metrics.shard(self.shard).count_drop(r);
        }
    }

    /// Emits partial results whose deadline passed.
    pub fn on_tick(&mut self, now: Instant, out: &mut dyn Sink) {
        while let Some(&Reverse((t, id, idx, seq))) = self.deadlines.peek() {
            if t > now {
                break;
            }
            self.deadlines.pop();
            let Some(job) = self.jobs.map.get(&id) else {
                continue;
            };
            let congested = self.congested();
            let mut cx = Ctx {
                cap: self.jobs.cwnd_cap(job),
                congested,
                parent: uplink_addr(self.parent, job),
                metrics: self.metrics.shard(self.shard),
                out: &mut *out,
            };
            let job = self.jobs.map.get_mut(&id).expect("looked up above");
            let c = &job.copies[idx];
            if c.state == State::Aggregating && c.seq == seq && c.members_in > 0 {
                complete(job, idx, &mut cx);
            }
        }
    }

    /// ECN condition: switch memory or the socket backlog past its threshold.
    fn congested(&self) -> bool {
        self.queue_congested || self.jobs.copies_in_use >= self.ecn_copies
    }

    fn on_data(
        &mut self,
        h: &Header,
        pkt: &[u8],
        payload: &[u8],
        from: SocketAddr,
        now: Instant,
        out: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let job = self.jobs.map.get(&h.job).ok_or(DropReason::UnknownJob)?;
        authenticate(job, h, pkt, from)?;
        validate(job, h, self.jobs.payload_budget)?;
        let congested = self.congested();
        let mut cx = Ctx {
            cap: self.jobs.cwnd_cap(job),
            congested,
            parent: uplink_addr(self.parent, job),
            metrics: self.metrics.shard(self.shard),
            out,
        };
        let jobs = &mut self.jobs;
        let job = jobs.map.get_mut(&h.job).expect("validated above");
        let m = h.member as usize;
        if h.has(flags::FIN) {
            job.addrs[m] = None;
            return Ok(());
        }
        job.addrs[m] = Some(from);
        job.stats.packets.fetch_add(1, Relaxed);
        job.stats.bytes.fetch_add(payload.len() as u64, Relaxed);
        if h.has(flags::RETX) {
            cx.metrics.retransmissions.fetch_add(1, Relaxed);
        }
        let freed = ack_previous(job, h);
        let mut allocated = 0;
        let idx = copy_index(h.slot, h.shadow);
        let res = match job.copies[idx].classify(h.seq) {
            Use::Stale => Err(DropReason::Stale),
            Use::Same => on_same_use(job, idx, h, payload, from, &mut cx),
            Use::Fresh => {
                let holds = job.copies[idx].holds_memory();
                if !holds && jobs.copies_in_use - freed >= jobs.capacity_copies {
                    Err(DropReason::NoMemory)
                } else {
                    allocated = usize::from(!holds);
                    job.in_use += allocated;
                    job.copies[idx].reset(h.seq);
                    if let Some(d) = job.deadline {
                        self.deadlines.push(Reverse((now + d, job.id, idx, h.seq)));
                    }
                    contribute(job, idx, h, payload, &mut cx)
                }
            }
        };
        jobs.copies_in_use = jobs.copies_in_use + allocated - freed;
        job.stats
            .memory_bytes
            .store((job.in_use * jobs.slot_bytes) as u64, Relaxed);
        jobs.publish_memory();
        res
    }

    fn on_parent_result(
        &mut self,
        h: &Header,
        pkt: &[u8],
        from: SocketAddr,
        out: &mut dyn Sink,
    ) -> Result<(), DropReason> {
        let local = *self
            .jobs
            .uplinks
            .get(&h.job)
            .ok_or(DropReason::UnexpectedResult)?;
        let job = self
            .jobs
            .map
            .get(&local)
            .ok_or(DropReason::UnexpectedResult)?;
        let up = job.uplink.expect("uplinks index only jobs with an uplink");
        if !tag_ok(pkt, &up.key) {
            return Err(DropReason::BadTag);
        }
        if uplink_addr(self.parent, job) != Some(from) {
            return Err(DropReason::BadSource);
        }
        let congested = self.congested();
        let mut cx = Ctx {
            cap: self.jobs.cwnd_cap(job),
            congested,
            parent: uplink_addr(self.parent, job),
            metrics: self.metrics.shard(self.shard),
            out,
        };
        let job = self.jobs.map.get_mut(&local).expect("checked above");
        let (slot, shadow) = slot_of(h.seq, job.slots);
        let idx = copy_index(slot, shadow);
        let c = &mut job.copies[idx];
        if c.seq != h.seq || c.state != State::Up {
            let dup = c.seq == h.seq && c.state == State::Done;
            return if dup {
                cx.metrics.duplicates.fetch_add(1, Relaxed);
                Ok(())
            } else {
                Err(DropReason::Stale)
            };
        }
        if c.count != h.count || c.wire != h.wire {
            return Err(DropReason::Mismatch);
        }
        let down = Header {
            job: job.id,
            tree: job.tree,
            member: ALL_MEMBERS,
            slot,
            shadow,
            flags: h.flags | (c.flags & flags::ECN),
            cwnd_cap: h.cwnd_cap.min(cx.cap),
            ..*h
        };
        c.packet.clear();
        c.packet.extend_from_slice(pkt);
        down.encode(&mut c.packet, &job.key);
        c.state = State::Done;
        multicast(job, idx, &mut cx);
        Ok(())
    }
}

/// A leaf job's parent data address: the parent's host with the port of the parent job's
/// data-plane thread (announced in the uplink), else `--parent` itself.
fn uplink_addr(parent: Option<SocketAddr>, job: &Job) -> Option<SocketAddr> {
    let (parent, up) = (parent?, job.uplink?);
    let port = if up.port == 0 { parent.port() } else { up.port };
    Some(SocketAddr::new(parent.ip(), port))
}

/// Whether a data packet comes from a member of the job: tagged with the
/// job's key, and sent from the address the member's first authenticated
/// packet came from (so a copied packet cannot move its results elsewhere).
fn authenticate(job: &Job, h: &Header, pkt: &[u8], from: SocketAddr) -> Result<(), DropReason> {
    if !tag_ok(pkt, &job.key) {
        return Err(DropReason::BadTag);
    }
    match job.addrs.get(h.member as usize) {
        Some(Some(bound)) if *bound != from => Err(DropReason::BadSource),
        _ => Ok(()),
    }
}

/// Isolation: everything about a data packet that can be checked without
/// touching slot memory.
fn validate(job: &Job, h: &Header, budget: usize) -> Result<(), DropReason> {
    if h.tree != job.tree {
        return Err(DropReason::BadTree);
    }
    if h.member >= job.members {
        return Err(DropReason::BadMember);
    }
    if job.wire_mask & h.wire.mask_bit() == 0 {
        return Err(DropReason::BadType);
    }
    let fin = h.has(flags::FIN);
    if (h.count == 0 && !fin) || h.count as usize > max_count(budget, h.wire) {
        return Err(DropReason::BadCount);
    }
    if (h.slot, h.shadow) != slot_of(h.seq, job.slots) {
        return Err(DropReason::BadSlot);
    }
    Ok(())
}

/// A member sending sequence `s` has the result of `s - slots` (its window
/// never exceeds the pool), so it acknowledges the other copy of the slot.
/// Returns how many copies this freed (0 or 1).
fn ack_previous(job: &mut Job, h: &Header) -> usize {
    let prev = h.seq.wrapping_sub(job.slots as u32);
    let members = job.members as usize;
    let c = &mut job.copies[copy_index(h.slot, !h.shadow)];
    if c.state != State::Done || c.seq != prev || !c.used {
        return 0;
    }
    if c.acked.set(h.member as usize) && c.acked.count() == members {
        c.state = State::Empty;
        job.in_use -= 1;
        return 1;
    }
    0
}

/// A packet for the copy's current use: a first contribution, a duplicate,
/// a retransmission after completion, or a latecomer after a partial result.
fn on_same_use(
    job: &mut Job,
    idx: usize,
    h: &Header,
    payload: &[u8],
    from: SocketAddr,
    cx: &mut Ctx<'_>,
) -> Result<(), DropReason> {
    let m = h.member as usize;
    let c = &mut job.copies[idx];
    match c.state {
        State::Aggregating if !c.contrib.get(m) => contribute(job, idx, h, payload, cx),
        State::Done => {
            cx.metrics.results_resent.fetch_add(1, Relaxed);
            send(cx, &c.packet, from);
            Ok(())
        }
        State::Up if h.has(flags::RETX) => {
            // Our uplink packet or the parent's result may have been lost.
            let up = job.uplink.expect("only leaf jobs send up");
            crate::proto::patch_flags(&mut c.packet, flags::RETX, &up.key);
            if let Some(p) = cx.parent {
                send(cx, &c.packet, p);
            }
            Ok(())
        }
        _ => {
            cx.metrics.duplicates.fetch_add(1, Relaxed);
            Ok(())
        }
    }
}

/// Adds one member's payload into the copy; completes the slot when enough
/// members are in.
fn contribute(
    job: &mut Job,
    idx: usize,
    h: &Header,
    payload: &[u8],
    cx: &mut Ctx<'_>,
) -> Result<(), DropReason> {
    let c = &mut job.copies[idx];
    if c.members_in == 0 {
        c.wire = h.wire;
        c.op = h.op;
        c.count = h.count;
        c.exp = h.exponent;
        codec::load(&mut c.acc, payload, h.wire);
    } else {
        if (c.wire, c.op, c.count) != (h.wire, h.op, h.count) {
            return Err(DropReason::Mismatch);
        }
        if codec::combine(&mut c.acc, &mut c.exp, payload, h.exponent, h.wire, h.op) {
            c.flags |= flags::OVERFLOW;
            cx.metrics.overflows.fetch_add(1, Relaxed);
        }
    }
    c.contrib.set(h.member as usize);
    c.members_in += 1;
    c.workers = c.workers.saturating_add(h.contributors.max(1));
    c.cap_min = c.cap_min.min(h.cwnd_cap);
    c.flags |= h.flags & flags::ECN;
    if cx.congested {
        c.flags |= flags::ECN;
        cx.metrics.ecn_marks.fetch_add(1, Relaxed);
    }
    if c.members_in >= job.needed {
        complete(job, idx, cx);
    }
    Ok(())
}

/// Sends a finished aggregate: up to the parent for a leaf, else down to
/// every member.
fn complete(job: &mut Job, idx: usize, cx: &mut Ctx<'_>) {
    cx.metrics.aggregations.fetch_add(1, Relaxed);
    job.stats.aggregations.fetch_add(1, Relaxed);
    let c = &mut job.copies[idx];
    if c.members_in < job.members {
        cx.metrics.partial_aggregations.fetch_add(1, Relaxed);
    }
    let cap = c.cap_min.min(cx.cap);
    match job.uplink {
        Some(u) => {
            let (slot, shadow) = slot_of(c.seq, u.slots);
            let h = copy_header(c, Kind::Data, u.job, u.tree, u.member, slot, shadow, cap);
            encode_copy(c, &h, &u.key);
            c.state = State::Up;
            if let Some(p) = cx.parent {
                send(cx, &c.packet, p);
            }
        }
        None => {
            let (slot, shadow) = slot_of(c.seq, job.slots);
            let h = copy_header(
                c,
                Kind::Result,
                job.id,
                job.tree,
                ALL_MEMBERS,
                slot,
                shadow,
                cap,
            );
            encode_copy(c, &h, &job.key);
            c.state = State::Done;
            multicast(job, idx, cx);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn copy_header(
    c: &SlotCopy,
    kind: Kind,
    job: u32,
    tree: u16,
    member: u16,
    slot: u16,
    shadow: bool,
    cwnd_cap: u16,
) -> Header {
    Header {
        kind,
        flags: c.flags,
        wire: c.wire,
        op: c.op,
        exponent: c.exp,
        job,
        tree,
        member,
        seq: c.seq,
        slot,
        shadow,
        count: c.count,
        contributors: c.workers,
        cwnd_cap,
    }
}

fn encode_copy(c: &mut SlotCopy, h: &Header, key: &PacketKey) {
    c.packet.resize(HEADER_LEN + h.payload_len(), 0);
    h.encode(&mut c.packet, key);
    codec::store(&c.acc, c.wire, &mut c.packet[HEADER_LEN..]);
}

fn multicast(job: &Job, idx: usize, cx: &mut Ctx<'_>) {
    let pkt = &job.copies[idx].packet;
    let n = job.addrs.iter().flatten().count() as u64;
    cx.metrics.tx_packets.fetch_add(n, Relaxed);
    cx.metrics.tx_bytes.fetch_add(n * pkt.len() as u64, Relaxed);
    cx.out.send_all(pkt, &job.addrs);
}

fn send(cx: &mut Ctx<'_>, pkt: &[u8], to: SocketAddr) {
    cx.metrics.tx_packets.fetch_add(1, Relaxed);
    cx.metrics.tx_bytes.fetch_add(pkt.len() as u64, Relaxed);
    cx.out.send(pkt, to);
}
