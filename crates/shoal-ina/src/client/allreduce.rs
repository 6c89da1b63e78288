//! The allreduce loop: chunks spread round-robin over the trees, each tree
//! sending within its window, results written in place as they arrive
//! (identical bytes on every rank), overdue chunks retransmitted.

use std::time::{Duration, Instant};

use super::faults;
use super::window::SendWindow;
use super::CallStats;
use crate::codec;
use crate::proto::{flags, max_count, slot_of, tag_ok, Header, Kind, WireOp, WireType, HEADER_LEN};
use crate::{InaDType, InaError, InaOp};

use super::InaClient;

/// How one call's buffer is cut into packets and spread over the trees
/// (not a shoal-plan `Plan`: the switch call has no steps).
struct PacketLayout {
    dtype: InaDType,
    wire: WireType,
    op: WireOp,
    avg: bool,
    per_pkt: usize,
    elems: usize,
    trees: usize,
    headroom: i32,
}

impl PacketLayout {
    /// Chunk `k` of tree `t`: global chunk `t + k * trees`; (first element, count).
    fn chunk(&self, t: usize, k: usize) -> (usize, usize) {
        let start = (t + k * self.trees) * self.per_pkt;
        (start, self.per_pkt.min(self.elems - start))
    }

    fn chunks_of_tree(&self, t: usize) -> usize {
        let total = self.elems.div_ceil(self.per_pkt);
        (total + self.trees - 1 - t) / self.trees
    }

    fn bytes(&self, start: usize, count: usize) -> std::ops::Range<usize> {
        let s = self.dtype.size();
        start * s..(start + count) * s
    }
}

/// How far `drain_results` goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Drain {
    /// Until a batch brings progress (the window opened: time to send) or
    /// the socket is empty; waits briefly only when nothing is queued at all.
    UntilProgress,
    /// Until the socket is empty, never waiting.
    All,
}

/// Asked while a call waits for results: `Err(why)` when another rank of
/// the job has failed (the caller's own error, e.g. its transport's), so the
/// call stops instead of waiting for results that cannot come (the switch
/// never completes a slot without every member).
pub type PeerCheck<'a> = &'a dyn Fn() -> Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// How often a waiting call asks the peer check once it runs.
const PEER_CHECK_EVERY: Duration = Duration::from_millis(50);

/// Scratch state reused through one call.
struct Scratch {
    expired: Vec<usize>,
    overflow: bool,
}

impl InaClient {
    /// Reduces `buf` (elements of `dtype`) across all ranks in place. Every
    /// rank gets the same bytes. Errors are reasons to fall back to host
    /// algorithms; after `SwitchDied` the client should not be reused.
    pub fn allreduce(
        &mut self,
        buf: &mut [u8],
        dtype: InaDType,
        op: InaOp,
    ) -> Result<(), InaError> {
        self.allreduce_checked(buf, dtype, op, &|| Ok(()))
    }

    /// [`Self::allreduce`], asking `peers` whether the other ranks are
    /// still alive whenever results stop coming for a while
    /// (`peer_check_after`): a dead rank is then `PeerFailed` within
    /// milliseconds of the check, not `SwitchDied` after `dead_timeout`.
    pub fn allreduce_checked(
        &mut self,
        buf: &mut [u8],
        dtype: InaDType,
        op: InaOp,
        peers: PeerCheck<'_>,
    ) -> Result<(), InaError> {
        self.stats = CallStats::default();
        let layout = self.layout(buf.len(), dtype, op)?;
        if layout.elems == 0 {
            return Ok(());
        }
        let mut wins: Vec<SendWindow> = (0..layout.trees)
            .map(|t| SendWindow::new(self.trees[t].next_seq, layout.chunks_of_tree(t)))
            .collect();
        let mut s = Scratch {
            expired: Vec::new(),
            overflow: false,
        };
        let res = self.run(&layout, buf, &mut wins, &mut s, peers);
        for (tree, w) in self.trees.iter_mut().zip(&wins) {
            tree.next_seq = tree.next_seq.wrapping_add(w.count() as u32);
        }
        self.stats.windows = self.trees.iter().map(|t| t.cc.allowed()).collect();
        res?;
        if s.overflow {
            return Err(InaError::Protocol(
                "int32 sum overflowed on the switch".into(),
            ));
        }
        Ok(())
    }

    /// What the last allreduce did on the wire (packets, retransmissions,
    /// timeouts, ECN marks, the windows at its end).
    pub fn last_call(&self) -> &CallStats {
        &self.stats
    }

    fn layout(&self, len: usize, dtype: InaDType, op: InaOp) -> Result<PacketLayout, InaError> {
        if !len.is_multiple_of(dtype.size()) {
            return Err(InaError::Protocol(format!(
                "{len} bytes is not a whole number of {dtype:?}"
            )));
        }
        let wire = match dtype {
            InaDType::F32 if self.cfg.f32_as_int32 => WireType::I32,
            InaDType::F32 => WireType::F32,
            InaDType::F16 => WireType::F16,
            InaDType::Bf16 => WireType::Bf16,
            InaDType::I32 => WireType::I32,
        };
        if self.cfg.wire_mask() & wire.mask_bit() == 0 {
            return Err(InaError::Protocol(format!(
                "{dtype:?} is not admitted in int32-only mode"
            )));
        }
        let budget = self.trees.iter().map(|t| t.p.budget).min().unwrap_or(0);
        let per_pkt = max_count(budget.min(self.cfg.payload_budget), wire);
        if per_pkt == 0 {
            return Err(InaError::Protocol(format!(
                "payload budget {budget} holds no element"
            )));
        }
        let workers = self.trees.iter().map(|t| t.p.workers).max().unwrap_or(1);
        Ok(PacketLayout {
            dtype,
            wire,
            op: match op {
                InaOp::Sum | InaOp::Avg => WireOp::Sum,
                InaOp::Min => WireOp::Min,
                InaOp::Max => WireOp::Max,
            },
            avg: op == InaOp::Avg,
            per_pkt,
            elems: len / dtype.size(),
            trees: self.trees.len(),
            headroom: codec::headroom_bits(workers),
        })
    }

    fn run(
        &mut self,
        layout: &PacketLayout,
        buf: &mut [u8],
        wins: &mut [SendWindow],
        s: &mut Scratch,
        peers: PeerCheck<'_>,
    ) -> Result<(), InaError> {
        let mut now = Instant::now();
        let mut last_progress = now;
        let mut next_scan = now;
        let mut next_peer_check = now;
        loop {
            self.send_new(layout, buf, wins, now);
            if wins.iter().all(|w| w.is_done()) {
                return Ok(());
            }
            let progress = self.drain_results(layout, buf, wins, s, Drain::UntilProgress)?;
            now = Instant::now();
            if progress {
                last_progress = now;
            }
            if now >= next_scan {
                // Results may be queued behind a scheduling delay of this
                // thread: apply them all before judging anything overdue.
                if self.drain_results(layout, buf, wins, s, Drain::All)? {
                    last_progress = now;
                }
                self.retransmit(layout, buf, wins, s, now);
                next_scan = now + self.cfg.rto_min / 2;
            }
            let stalled = now.duration_since(last_progress);
            if stalled >= self.cfg.peer_check_after && now >= next_peer_check {
                next_peer_check = now + PEER_CHECK_EVERY;
                peers().map_err(|e| InaError::PeerFailed(e.to_string()))?;
            }
            if now.duration_since(last_progress) > self.cfg.dead_timeout {
                return Err(InaError::SwitchDied(format!(
                    "no result for {:?} with packets outstanding",
                    self.cfg.dead_timeout
                )));
            }
        }
    }

    /// Applies the results queued on the socket, one `recvmmsg` batch at a
    /// time (see [`Drain`]). Retransmissions this triggers are sent before
    /// returning. Returns whether any result was new.
    fn drain_results(
        &mut self,
        layout: &PacketLayout,
        buf: &mut [u8],
        wins: &mut [SendWindow],
        s: &mut Scratch,
        mode: Drain,
    ) -> Result<bool, InaError> {
        let mut progress = false;
        let mut waited = false;
        let mut rx = std::mem::take(&mut self.rx);
        let res = loop {
            let n = rx.recv(&self.sock).unwrap_or(0);
            if n == 0 {
                if waited || progress || mode == Drain::All {
                    break Ok(progress);
                }
                crate::net::wait_readable(&self.sock, Duration::from_millis(1));
                waited = true;
                continue;
            }
            let now = Instant::now();
            let mut err = None;
            for i in 0..rx.len() {
                match self.on_result(layout, buf, wins, rx.get(i).0, s, now) {
                    Ok(p) => progress |= p,
                    Err(e) => {
                        err = Some(e);
                        break;
                    }
                }
            }
            if let Some(e) = err {
                break Err(e);
            }
            if n < rx.capacity() || (progress && mode == Drain::UntilProgress) {
                break Ok(progress);
            }
        };
        self.rx = rx;
        self.flush();
        res
    }

    /// Sends every packet queued (one `sendmmsg` per batch).
    fn flush(&mut self) {
        self.faults.flush(&mut self.tx);
        self.tx.send(&self.sock);
    }

    fn send_new(
        &mut self,
        layout: &PacketLayout,
        buf: &[u8],
        wins: &mut [SendWindow],
        now: Instant,
    ) {
        for (t, w) in wins.iter_mut().enumerate() {
            while let Some(k) = w.next_to_send(self.trees[t].cc.allowed()) {
                self.send_chunk(layout, buf, t, w, k, false);
                w.on_sent(k, now);
            }
        }
        self.flush();
    }

    fn retransmit(
        &mut self,
        layout: &PacketLayout,
        buf: &[u8],
        wins: &mut [SendWindow],
        s: &mut Scratch,
        now: Instant,
    ) {
        for (t, w) in wins.iter_mut().enumerate() {
            w.take_expired(now, self.trees[t].rto.current(), &mut s.expired);
            if !s.expired.is_empty() {
                self.trees[t].cc.on_timeout();
                self.stats.timeouts += 1;
            }
            for &k in &s.expired {
                self.send_chunk(layout, buf, t, w, k, true);
            }
        }
        self.flush();
    }

    /// Queues chunk `k` of tree `t`, encoded straight into the send batch.
    fn send_chunk(
        &mut self,
        layout: &PacketLayout,
        buf: &[u8],
        t: usize,
        w: &SendWindow,
        k: usize,
        retx: bool,
    ) {
        self.stats.packets += 1;
        self.stats.retransmitted += u64::from(retx);
        let (start, count) = layout.chunk(t, k);
        let p = &self.trees[t].p;
        let seq = w.base.wrapping_add(k as u32);
        let (slot, shadow) = slot_of(seq, p.slots);
        let plen = count * layout.wire.size();
        let last = if k + 1 == w.count() { flags::LAST } else { 0 };
        let mut h = Header {
            kind: Kind::Data,
            flags: last | if retx { flags::RETX } else { 0 },
            wire: layout.wire,
            op: layout.op,
            exponent: 0,
            job: p.job,
            tree: p.tree,
            member: p.member,
            seq,
            slot,
            shadow,
            count: count as u16,
            contributors: 1,
            cwnd_cap: u16::MAX,
        };
        let to = p.data;
        if self.tx.room() < faults::MAX_FANOUT {
            self.tx.send(&self.sock);
        }
        let src = &buf[layout.bytes(start, count)];
        let key = p.key;
        self.tx.push_with(HEADER_LEN + plen, to, |pkt| {
            h.exponent = codec::encode(
                src,
                layout.dtype,
                layout.wire,
                layout.headroom,
                &mut pkt[HEADER_LEN..],
            );
            h.encode(pkt, &key);
        });
        self.faults.on_queued(&mut self.tx, to);
    }

    /// Applies a result; returns whether it was new (progress).
    fn on_result(
        &mut self,
        layout: &PacketLayout,
        buf: &mut [u8],
        wins: &mut [SendWindow],
        pkt: &[u8],
        s: &mut Scratch,
        now: Instant,
    ) -> Result<bool, InaError> {
        let Ok((h, payload)) = Header::decode(pkt) else {
            return Ok(false);
        };
        let t = h.tree as usize;
        let Some(tree) = self.trees.get_mut(t) else {
            return Ok(false);
        };
        // Anything not tagged by our switch is ignored, like loss.
        if h.kind != Kind::Result || h.job != tree.p.job || !tag_ok(pkt, &tree.p.key) {
            return Ok(false);
        }
        let Some(k) = wins[t].accept(h.seq) else {
            return Ok(false);
        };
        let (start, count) = layout.chunk(t, k);
        if h.count as usize != count || h.wire != layout.wire {
            return Err(InaError::Protocol(format!(
                "result for sequence {} has {} {:?} elements, expected {count} {:?}",
                h.seq, h.count, h.wire, layout.wire
            )));
        }
        let divisor = layout.avg.then_some(h.contributors.max(1) as u32);
        let dst = &mut buf[layout.bytes(start, count)];
        codec::decode(payload, h.wire, h.exponent, layout.dtype, divisor, dst);
        s.overflow |= h.has(flags::OVERFLOW);
        let sent = wins[t].sent_at(k);
        if let Some(rtt) = wins[t].on_result(k, now) {
            tree.rto.sample(rtt);
        }
        tree.cc.on_result(h.has(flags::ECN), h.cwnd_cap);
        self.stats.marked += u64::from(h.has(flags::ECN));
        if let Some(sent) = sent {
            let mut lost = std::mem::take(&mut s.expired);
            wins[t].take_overtaken(k, sent, now, &mut lost);
            for &j in &lost {
                self.send_chunk(layout, buf, t, &wins[t], j, true);
            }
            s.expired = lost;
        }
        Ok(true)
    }
}
