//! The progress loop: streams queued frames into the peers' rings, reads
//! the rings into receives, runs rendezvous reads (`process_vm_readv`) and
//! acks them, and picks up peers' abort and bye flags and deaths. Large
//! messages read in place are split between the two ranks in `split`.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::ring::{pad64, Ring};
use super::segment::{read_reason, Mapping};
use super::split::{on_split, split, Write};
use crate::cma;
use crate::doorbell::Doorbell;
use crate::frame::{
    credit, decode_waiting, waiting, Header, Kind, RndvInfo, ACK_FAILED, ACK_OK, ACK_UNWANTED,
    HEADER_LEN,
};
use crate::matching::{closed, Incoming, Matcher, Pull};
use crate::{ReqId, TransportError};

/// Staging buffer of rendezvous receives into a sink: small enough to stay
/// in cache between the read and the sink's pass over it.
const STAGE: usize = 128 << 10;
/// Bytes one `progress` call reads at most (it also finishes at most one
/// message), so the caller gets to post the steps a finished piece unblocks
/// and other channels keep moving during a long pull.
pub(super) const PULL_BUDGET: usize = 256 << 10;

/// Bytes published per step, so the receiver copies out while the sender
/// still copies in.
const CHUNK: usize = 256 << 10;
/// How often peers' pids are checked.
const LIVENESS_EVERY: Duration = Duration::from_millis(50);

/// A send being streamed into a ring.
pub(super) struct SendOp {
    pub(super) id: ReqId,
    pub(super) header: [u8; HEADER_LEN],
    pub(super) data: *const u8,
    /// Payload bytes in the ring (0 for a rendezvous descriptor).
    pub(super) len: usize,
    /// A rendezvous descriptor: the message's length (its request completes
    /// on the peer's ack).
    pub(super) rndv: Option<usize>,
    /// Frame bytes (header + padded payload) already in the ring.
    pub(super) sent: usize,
}

impl SendOp {
    fn frame_len(&self) -> usize {
        HEADER_LEN + pad64(self.len)
    }
}

/// A rendezvous send waiting for its ack: the request, and the message (its
/// second half is written to the receiver if it asks, `Split`).
pub(super) struct Awaiting {
    pub(super) id: ReqId,
    pub(super) data: *const u8,
    pub(super) len: usize,
}

/// A rendezvous message being read in place, `until` bytes of it by this
/// rank (the whole message, or its first half once split).
pub(super) struct Reading {
    pub(super) pull: Pull,
    pub(super) until: usize,
    /// Why reading it failed (a split one still waits for the sender's half).
    pub(super) failed: Option<TransportError>,
}

pub(super) struct OutChan {
    ring: Ring,
    tail: u64,
    head_seen: u64,
    pub(super) queue: VecDeque<SendOp>,
    /// Header-only control frames (acks), written at the next frame boundary
    /// ahead of queued sends.
    pub(super) ctl: VecDeque<[u8; HEADER_LEN]>,
    /// Whether large messages to this peer take the rendezvous path.
    pub(super) cma: bool,
    /// Rendezvous sends whose descriptor is out, waiting for the peer's ack.
    pub(super) awaiting: Vec<Awaiting>,
    /// Payloads the peer is to ask for (it may not read our memory), by
    /// request id: the `Payload` header, the data and its length.
    pub(super) held: HashMap<ReqId, ([u8; HEADER_LEN], *const u8, usize)>,
    pub(super) bell: Doorbell,
}

pub(super) struct InChan {
    pub(super) peer: usize,
    ring: Ring,
    head: u64,
    incoming: Option<Incoming>,
    /// Rendezvous messages whose payload we asked for, by cookie: where
    /// each goes when its `Payload` frame comes through the ring.
    asked: HashMap<u64, Incoming>,
    /// Split messages from this peer, by cookie: its `Wrote` status once
    /// it came (`None` before).
    pub(super) split: HashMap<u64, Option<u64>>,
    /// Split messages whose first half we have read, waiting for `Wrote`.
    pub(super) parked: HashMap<u64, Reading>,
    /// Rung after freeing space, in case the producer waits for it.
    producer_bell: Doorbell,
    producer: Arc<Mapping>,
    pub(super) pid: i32,
    bye_done: bool,
}

pub(super) struct Inner {
    pub(super) matcher: Matcher,
    pub(super) outs: Vec<OutChan>,
    pub(super) ins: Vec<InChan>,
    /// Rendezvous messages being read, oldest first.
    pub(super) pulls: VecDeque<Reading>,
    /// Halves of split messages this rank writes into their receivers.
    pub(super) writes: VecDeque<Write>,
    /// Messages of at least this many bytes read in place are split
    /// (`ShmConfig::split_bytes`; 0: never).
    pub(super) split_bytes: usize,
    /// Halves of split messages this rank has written.
    pub(super) halves_written: u64,
    /// Staging for rendezvous reads into sinks (`STAGE` bytes, 64-aligned).
    stage: Vec<Line>,
    pub(super) cma_threshold: usize,
    /// Index into `outs`/`ins` by global rank.
    pub(super) index: Vec<Option<usize>>,
    last_liveness: Instant,
    pub(super) closed: bool,
}

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

// SAFETY: raw pointers in the channels point into shared mappings kept alive
// by `Arc<Mapping>`s; send buffers are the caller's responsibility (isend).
unsafe impl Send for Inner {}

impl Inner {
    /// The engine of `rank`, one of the `locals` ranks of this host, before
    /// any channel is added.
    /// `unexpected_bytes`: the most early payloads a peer may have waiting
    /// (eager credit), and the most of their buffers kept for the next ones:
    /// a fresh buffer for each early payload page-faulted on every 4 KiB
    /// (back-to-back 512 KiB broadcasts on the 2-vCPU VM: 435 us each, 186
    /// us with the buffers kept).
    pub(super) fn new(
        rank: usize,
        world: usize,
        locals: &[usize],
        cma_threshold: usize,
        unexpected_bytes: usize,
    ) -> Inner {
        let mut matcher = Matcher::new(rank, locals.iter().copied());
        matcher.limit_unexpected(unexpected_bytes);
        matcher.keep_buffers(unexpected_bytes);
        Inner {
            matcher,
            outs: Vec::new(),
            ins: Vec::new(),
            pulls: VecDeque::new(),
            writes: VecDeque::new(),
            split_bytes: 0,
            halves_written: 0,
            stage: Vec::new(),
            cma_threshold,
            index: vec![None; world.max(locals.iter().max().map_or(0, |m| m + 1))],
            last_liveness: Instant::now(),
            closed: false,
        }
    }

    /// Adds the channels with local rank `peer` (process `pid`, whose
    /// segment is `theirs`): this rank writes into `to_peer` (a ring in
    /// their segment) and reads `from_peer` (in its own); `cma`: whether
    /// large messages to `peer` take the rendezvous path.
    pub(super) fn add_peer(
        &mut self,
        peer: usize,
        pid: i32,
        theirs: Arc<Mapping>,
        to_peer: Ring,
        from_peer: Ring,
        cma: bool,
    ) {
        self.index[peer] = Some(self.outs.len());
        self.outs.push(OutChan {
            ring: to_peer,
            tail: 0,
            head_seen: 0,
            queue: VecDeque::new(),
            ctl: VecDeque::new(),
            cma,
            awaiting: Vec::new(),
            held: HashMap::new(),
            bell: theirs.bell(),
        });
        self.ins.push(InChan {
            peer,
            ring: from_peer,
            head: 0,
            incoming: None,
            asked: HashMap::new(),
            split: HashMap::new(),
            parked: HashMap::new(),
            producer_bell: theirs.bell(),
            producer: theirs,
            pid,
            bye_done: false,
        });
    }

    /// Moves bytes in both directions and checks flags; returns whether anything moved.
    pub(super) fn poll(&mut self) -> bool {
        let mut changed = false;
        for i in 0..self.outs.len() {
            changed |= self.push_out(i);
        }
        for i in 0..self.ins.len() {
            changed |= self.pull_in(i);
        }
        for (peer, bytes) in self.matcher.take_credit_due() {
            if let Some(o) = self.index[peer].and_then(|ch| self.outs.get_mut(ch)) {
                o.ctl.push_back(credit(bytes));
            }
        }
        // Answers to queries and credit (they do not count as progress).
        for i in 0..self.outs.len() {
            if !self.outs[i].ctl.is_empty() {
                self.push_out(i);
            }
        }
        changed |= self.run_pulls();
        changed |= self.run_writes();
        self.check_flags();
        // A dead peer shows as silence, so liveness is checked only while
        // nothing moves: a busy poll does not read the clock.
        if !changed && self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.last_liveness = Instant::now();
            self.check_liveness();
        }
        changed
    }

    /// Streams control frames and queued sends of `outs[i]` into its ring
    /// while space lasts.
    pub(super) fn push_out(&mut self, i: usize) -> bool {
        let Inner { outs, matcher, .. } = self;
        let o = &mut outs[i];
        let size = o.ring.size as u64;
        let mut moved = false;
        loop {
            let boundary = o.queue.front().is_none_or(|op| op.sent == 0);
            let ctl = boundary && !o.ctl.is_empty();
            if !ctl && o.queue.is_empty() {
                break;
            }
            if o.tail - o.head_seen == size {
                o.head_seen = o.ring.hdr().head.0.load(Ordering::Acquire);
                if o.tail - o.head_seen == size {
                    break;
                }
            }
            if ctl {
                // Positions and sizes are multiples of 64: a header fits.
                let frame = o.ctl.pop_front().unwrap();
                o.ring.write(o.tail, &frame);
                o.tail += HEADER_LEN as u64;
            } else {
                let op = o.queue.front_mut().unwrap();
                let free = (size - (o.tail - o.head_seen)) as usize;
                o.tail += push_chunk(&o.ring, o.tail, op, free.min(CHUNK)) as u64;
                if op.sent == op.frame_len() {
                    let (id, data, rndv) = (op.id, op.data, op.rndv);
                    o.queue.pop_front();
                    match rndv {
                        Some(len) => o.awaiting.push(Awaiting { id, data, len }),
                        None => matcher.complete(id),
                    }
                }
            }
            o.ring.hdr().tail.0.store(o.tail, Ordering::Release);
            o.bell.ring();
            moved = true;
        }
        moved
    }

    /// Consumes frames from `ins[i]`'s ring into receives or the unexpected
    /// queue. Returns whether anything moved (`Waiting` and `Query` frames
    /// are talk about progress, not progress).
    pub(super) fn pull_in(&mut self, i: usize) -> bool {
        let Inner {
            ins,
            outs,
            matcher,
            writes,
            pulls,
            ..
        } = self;
        let c = &mut ins[i];
        let tail = c.ring.hdr().tail.0.load(Ordering::Acquire);
        if tail == c.head {
            return false;
        }
        let mut moved = false;
        while c.head < tail {
            let mut inc = match c.incoming.take() {
                Some(inc) => inc,
                None => {
                    let raw = c.ring.read(c.head, HEADER_LEN);
                    let h = match Header::decode(raw) {
                        Ok(h) => h,
                        Err(e) => {
                            matcher.peer_down(c.peer, &e.to_string());
                            return true;
                        }
                    };
                    let info = RndvInfo::decode(raw);
                    let answer = (h.kind == Kind::Waiting).then(|| decode_waiting(&h, raw));
                    c.head += HEADER_LEN as u64;
                    moved |= !matches!(h.kind, Kind::Waiting | Kind::Query | Kind::Credit);
                    match h.kind {
                        Kind::Rndv => {
                            matcher.on_rndv(c.peer, &h, info);
                            continue;
                        }
                        Kind::Ack => {
                            // (No out channel once closed: nothing awaits.)
                            if let Some(o) = outs.get_mut(i) {
                                on_ack(o, writes, matcher, c.peer, info);
                            }
                            continue;
                        }
                        Kind::Waiting => {
                            matcher.on_waiting(c.peer, answer.unwrap());
                            continue;
                        }
                        Kind::Query => {
                            // Answered by `poll` once the frames are read.
                            if let Some(o) = outs.get_mut(i) {
                                o.ctl.push_back(waiting(matcher.blocked()));
                            }
                            continue;
                        }
                        Kind::Credit => {
                            matcher.on_credit(c.peer, info.word);
                            continue;
                        }
                        Kind::Split => {
                            let Some(o) = outs.get_mut(i) else {
                                continue;
                            };
                            if !on_split(o, i, info, !pulls.is_empty(), writes) {
                                let why =
                                    format!("a split of no message of ours ({})", info.cookie);
                                matcher.peer_down(c.peer, &why);
                                return true;
                            }
                            continue;
                        }
                        Kind::Wrote => match c.split.get_mut(&info.cookie) {
                            Some(status @ None) => {
                                *status = Some(info.word);
                                continue;
                            }
                            _ => {
                                let why = format!("a write nobody asked for ({})", info.cookie);
                                matcher.peer_down(c.peer, &why);
                                return true;
                            }
                        },
                        Kind::Payload => match c.asked.remove(&info.cookie) {
                            Some(inc) if inc.len as u64 == h.len => inc,
                            _ => {
                                let why = format!("a payload nobody asked for ({})", info.cookie);
                                matcher.peer_down(c.peer, &why);
                                return true;
                            }
                        },
                        _ => matcher.on_header(c.peer, &h),
                    }
                }
            };
            moved = true;
            while !inc.done() && c.head < tail {
                let piece = c
                    .ring
                    .read(c.head, ((tail - c.head) as usize).min(inc.remaining()));
                let n = piece.len();
                inc.push(piece);
                c.head += n as u64;
            }
            if inc.done() {
                c.head = pad64(c.head as usize) as u64;
                matcher.on_complete(c.peer, inc);
            } else {
                c.incoming = Some(inc);
            }
            c.ring.hdr().head.0.store(c.head, Ordering::Release);
        }
        c.ring.hdr().head.0.store(c.head, Ordering::Release);
        c.producer_bell.ring();
        moved
    }

    /// Reads matched rendezvous messages from their senders, oldest first,
    /// and acks the finished ones: per call at most `PULL_BUDGET` bytes and
    /// at most one finished message (a long message takes several calls).
    pub(super) fn run_pulls(&mut self) -> bool {
        let new = self.matcher.take_pulls().into_iter();
        self.pulls.extend(new.map(|pull| Reading {
            until: pull.inc.len,
            pull,
            failed: None,
        }));
        let mut moved = self.finish_splits();
        let mut budget = PULL_BUDGET;
        while budget > 0 {
            let Some(r) = self.pulls.front_mut() else {
                break;
            };
            let peer = r.pull.peer;
            let ch = self.index[peer].expect("pulls come from local peers");
            if !self.matcher.may_pull(peer) {
                // The peer died or closed, or the job failed: nobody to ack.
                // (Failing it is a no-op when the matcher did already, and
                // after an abort the request reports the abort.)
                let r = self.pulls.pop_front().unwrap();
                if !self.matcher.is_fatal() {
                    self.matcher.fail_incoming(r.pull.inc, closed(peer));
                }
                continue;
            }
            moved = true;
            if r.pull.rndv.word == 0 {
                // The sender holds the payload until we ask for it.
                let p = self.pulls.pop_front().unwrap().pull;
                let status = if p.inc.wanted() {
                    self.ins[ch].asked.insert(p.rndv.cookie, p.inc);
                    ACK_OK
                } else {
                    ACK_UNWANTED
                };
                self.ack(ch, p.rndv.cookie, status);
                continue;
            }
            // (not in an exchange: the peer, reading our message to it,
            // has no core to spare)
            let may_write = self.outs[ch].cma && self.outs[ch].awaiting.is_empty();
            if let Some(frame) = split(r, self.split_bytes, may_write, &mut self.ins[ch].split) {
                self.send_control(peer, frame);
                continue;
            }
            let pid = self.ins[ch].pid;
            let status = if r.pull.inc.wanted() {
                let step = budget.min(r.until - r.pull.inc.received);
                match pull_step(pid, &mut r.pull, step, &mut self.stage) {
                    Ok(n) => {
                        budget -= n;
                        if r.pull.inc.received < r.until {
                            continue;
                        }
                        ACK_OK
                    }
                    Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                        let why = format!("process {pid} exited (process_vm_readv: {e})");
                        self.pulls.pop_front();
                        self.matcher.peer_down(peer, &why);
                        continue;
                    }
                    Err(e) => {
                        let what = format!(
                            "shm: reading {} bytes from rank {peer} (process_vm_readv): {e}",
                            r.pull.inc.len
                        );
                        r.failed = Some(TransportError::Io(what));
                        ACK_FAILED
                    }
                }
            } else {
                ACK_OK
            };
            let r = self.pulls.pop_front().unwrap();
            if r.until < r.pull.inc.len {
                // Split: done once the sender has written its half.
                self.ins[ch].parked.insert(r.pull.rndv.cookie, r);
                continue;
            }
            self.finish(ch, r, status);
            // Let the caller act on it (post the steps it unblocks, which
            // keeps pipelined plans flowing) before reading the next one.
            break;
        }
        moved
    }

    /// Completes (or fails) the read message `r` and acks it with `status`.
    pub(super) fn finish(&mut self, ch: usize, r: Reading, status: u64) {
        let cookie = r.pull.rndv.cookie;
        match r.failed {
            Some(e) => self.matcher.fail_incoming(r.pull.inc, e),
            None if r.pull.inc.wanted() => self.matcher.on_complete(r.pull.peer, r.pull.inc),
            None => {}
        }
        self.ack(ch, cookie, status);
    }

    /// Sends a header-only control frame to `peer` ahead of queued data;
    /// false if `peer` is not a local rank (or the transport closed).
    pub(super) fn send_control(&mut self, peer: usize, frame: [u8; HEADER_LEN]) -> bool {
        let Some(ch) = self.index.get(peer).copied().flatten() else {
            return false;
        };
        let Some(o) = self.outs.get_mut(ch) else {
            return false;
        };
        o.ctl.push_back(frame);
        self.push_out(ch);
        true
    }

    /// Queues an ack of the rendezvous send `cookie` to `outs[ch]`'s peer.
    fn ack(&mut self, ch: usize, cookie: u64, status: u64) {
        let info = RndvInfo {
            word: status,
            cookie,
        };
        let frame = info.encode(&Header::control(Kind::Ack, 0));
        if let Some(o) = self.outs.get_mut(ch) {
            o.ctl.push_back(frame);
            self.push_out(ch);
        }
    }

    /// Picks up peers' abort and bye flags.
    fn check_flags(&mut self) {
        for c in &mut self.ins {
            let ctl = c.producer.control();
            if ctl.abort.load(Ordering::Acquire) != 0 {
                let reason = read_reason(ctl);
                self.matcher.set_fatal(TransportError::Aborted {
                    peer: c.peer,
                    reason,
                });
            }
            if !c.bye_done && ctl.bye.load(Ordering::Acquire) != 0 {
                let drained = c.ring.hdr().tail.0.load(Ordering::Acquire) == c.head;
                if drained && c.incoming.is_none() {
                    c.bye_done = true;
                    self.matcher.peer_bye(c.peer);
                }
            }
        }
        // A peer that closed will never ack. (After an abort, which a peer
        // sets before it closes, the requests report the abort instead.)
        let fatal = self.matcher.is_fatal();
        for (o, c) in self.outs.iter_mut().zip(&self.ins) {
            if c.bye_done && !fatal {
                o.held.clear();
                for a in o.awaiting.drain(..) {
                    self.matcher.fail(a.id, closed(c.peer));
                }
            }
        }
    }

    fn check_liveness(&mut self) {
        for c in &self.ins {
            if c.bye_done || c.producer.control().bye.load(Ordering::Acquire) != 0 {
                continue;
            }
            if let Some(why) = pid_dead(c.pid) {
                self.matcher
                    .peer_down(c.peer, &format!("process {} {why}", c.pid));
            }
        }
    }
}

/// Completes (or fails) the rendezvous send `info.cookie` to `peer`, acked;
/// or queues its payload, when the peer asks for it.
fn on_ack(
    o: &mut OutChan,
    writes: &mut VecDeque<Write>,
    matcher: &mut Matcher,
    peer: usize,
    info: RndvInfo,
) {
    let Some(k) = o.awaiting.iter().position(|a| a.id == info.cookie) else {
        return;
    };
    let id = o.awaiting.swap_remove(k).id;
    // (a peer acks a split message only after our `Wrote`; one that acks
    // earlier gets no more of it)
    writes.retain(|w| w.cookie != id);
    if let Some((header, data, len)) = o.held.remove(&id) {
        if info.word == ACK_OK && matcher.is_pending(id) {
            // Completes once written, as an eager send does.
            o.queue.push_back(SendOp {
                id,
                header,
                data,
                len,
                rndv: None,
                sent: 0,
            });
        } else {
            matcher.complete(id);
        }
        return;
    }
    if info.word == ACK_OK {
        matcher.complete(id);
    } else {
        let what = format!("shm: rank {peer} could not read this message from our memory");
        matcher.fail(id, TransportError::Io(what));
    }
}

/// Reads up to `max` more bytes of pull `p` from process `pid`: straight into
/// a plain destination, or through `stage` into a sink. Returns the count.
fn pull_step(pid: i32, p: &mut Pull, max: usize, stage: &mut Vec<Line>) -> std::io::Result<usize> {
    let addr = p.rndv.word + p.inc.received as u64;
    if let Some(dst) = p.inc.direct() {
        let n = max.min(dst.len());
        let got = cma::read(pid, addr, &mut dst[..n])?;
        if got == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
        }
        p.inc.advance(got);
        return Ok(got);
    }
    if stage.is_empty() {
        stage.resize(STAGE / 64, Line([0; 64]));
    }
    // SAFETY: `Line` is 64 plain bytes; the vector holds STAGE bytes.
    let stage = unsafe { std::slice::from_raw_parts_mut(stage.as_mut_ptr().cast::<u8>(), STAGE) };
    let n = max.min(STAGE).min(p.inc.remaining());
    // Every piece but the last a multiple of 64, as sinks expect (a short
    // read only happens just before an error).
    cma::read_exact(pid, addr, &mut stage[..n])?;
    p.inc.push(&stage[..n]);
    Ok(n)
}

/// Writes the next up-to-`room` bytes of `op`'s frame at ring position `pos`;
/// returns how many ring bytes were used (a multiple of 64).
fn push_chunk(ring: &Ring, pos: u64, op: &mut SendOp, room: usize) -> usize {
    let mut used = 0;
    if op.sent == 0 {
        ring.write(pos, &op.header);
        op.sent = HEADER_LEN;
        used = HEADER_LEN;
    }
    let n = (op.frame_len() - op.sent).min(room - used);
    let off = op.sent - HEADER_LEN;
    let copy = n.min(op.len.saturating_sub(off));
    if copy > 0 {
        // SAFETY: the caller of isend keeps `data[..len]` valid until completion.
        let src = unsafe { std::slice::from_raw_parts(op.data.add(off), copy) };
        ring.write(pos + used as u64, src);
    }
    op.sent += n;
    used + n
}

/// Why `pid` is dead, or `None` while it runs. A zombie counts as dead: it
/// will never write again but `kill(pid, 0)` still succeeds on it.
pub(crate) fn pid_dead(pid: i32) -> Option<&'static str> {
    // SAFETY: signal 0 only checks existence.
    if unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    {
        return Some("exited");
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => match s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
        {
            Some('Z') | Some('X') => Some("exited (zombie)"),
            _ => None,
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Some("exited"),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::Inner;

    #[test]
    fn early_payload_buffers_are_kept_up_to_the_unexpected_window() {
        let window = 16 << 20;
        let mut inner = Inner::new(0, 2, &[0, 1], 1 << 20, window);
        assert_eq!(inner.matcher.buffers().max_bytes(), window);
    }
}
