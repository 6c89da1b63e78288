//! The progress loop: drives the UCP worker, receives control frames as
//! they arrive, runs payload receives for matched messages, tracks sends,
//! and turns endpoint errors and dead local pids into dead peers.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::ffi::{Ep, StatusPtr, Ucp, Worker, UCS_INPROGRESS, UCS_OK};
use super::{ctl_tag, payload_tag, sender_of, CLASS_PAYLOAD};
use crate::frame::{credit, decode_waiting, waiting, Header, Kind, RndvInfo, HEADER_LEN};
use crate::matching::{closed, Incoming, Matcher};
use crate::shm::pid_dead;
use crate::{KvStore, ReqId, TransportError};

fn wire_err(what: String) -> TransportError {
    TransportError::Io(format!("ucx: wiring up the endpoints: {what}"))
}

/// How often the pids of peers on this host are checked: UCX's own
/// keepalive over shared memory takes seconds, a pid check microseconds.
const LIVENESS_EVERY: Duration = Duration::from_millis(50);
/// `ucp_worker_progress` calls per poll at most (each returns how many
/// events it handled; the loop ends early on zero).
const PROGRESS_ROUNDS: usize = 64;
/// Bytes of receive buffers kept for reuse per rank: the staging buffers
/// of payloads for sinks (reducing receives). A pipelined plan sends a
/// large call in 1 MiB pieces, several of which may be staged at once;
/// this many keeps up to a 64 MiB call's worth.
pub(super) const KEPT_BUFFER_BYTES: usize = 64 << 20;

/// Endpoint errors reported by UCX's callback, picked up by `poll`.
pub(super) type ErrList = Arc<Mutex<Vec<(usize, String)>>>;

/// What the error callback of one endpoint gets as its argument.
pub(super) struct ErrArg {
    pub peer: usize,
    pub errs: ErrList,
    pub ucp: Arc<Ucp>,
}

/// Called by UCX (inside `ucp_worker_progress`) when an endpoint fails:
/// its peer died or became unreachable.
pub(super) unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: Ep, status: i8) {
    // SAFETY: `arg` is the endpoint's boxed `ErrArg`, alive while the endpoint is.
    let a = unsafe { &*(arg as *const ErrArg) };
    let why = format!("UCX endpoint error: {}", a.ucp.describe(status));
    a.errs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((a.peer, why));
}

/// A request UCX may still be working on, with the memory it uses.
struct Op {
    req: *mut c_void,
    peer: usize,
    /// The shoal request completed or failed with it (none for frames that
    /// are part of a message, or control).
    id: Option<ReqId>,
    /// Heap bytes UCX reads until the request completes.
    _buf: Vec<u8>,
}

/// A control frame being received, processed in arrival order.
struct CtlIn {
    peer: usize,
    buf: Vec<u8>,
    req: Option<*mut c_void>,
}

/// A message whose payload is being received (into its receive's buffer,
/// or a staging buffer for a sink).
struct Payload {
    peer: usize,
    inc: Incoming,
    req: Option<*mut c_void>,
    /// Receives into sinks and discarded payloads land here first.
    stage: Option<Vec<u8>>,
}

pub(super) struct Peer {
    pub ep: Option<Ep>,
    /// The process, when it runs on this host (its liveness is checked).
    pub local_pid: Option<i32>,
    pub _err_arg: Box<ErrArg>,
}

pub(super) struct Inner {
    pub(super) ucp: Arc<Ucp>,
    pub(super) worker: Worker,
    pub(super) rank: usize,
    pub(super) matcher: Matcher,
    pub(super) peers: Vec<Option<Peer>>,
    pub(super) errs: ErrList,
    sends: Vec<Op>,
    ctl_in: VecDeque<CtlIn>,
    payloads: Vec<Payload>,
    next_payload: u32,
    last_liveness: Instant,
    /// Whether the last poll saw UCX handle events: a large message
    /// crosses in many fragments (shared-memory FIFO copies, TCP segments,
    /// rendezvous steps) before anything completes, and a rank that napped
    /// between them would throttle the transfer. Not progress, though
    /// (the stall timeout must still run out on a stuck call).
    pub(super) busy: bool,
    pub(super) closed: bool,
}

// SAFETY: UCX handles are used only under the transport's mutex (the worker
// is single-threaded mode: one thread at a time, which the mutex ensures).
unsafe impl Send for Inner {}

impl Inner {
    pub(super) fn new(
        ucp: Arc<Ucp>,
        worker: Worker,
        rank: usize,
        matcher: Matcher,
        peers: Vec<Option<Peer>>,
        errs: ErrList,
    ) -> Inner {
        Inner {
            ucp,
            worker,
            rank,
            matcher,
            peers,
            errs,
            sends: Vec::new(),
            ctl_in: VecDeque::new(),
            payloads: Vec::new(),
            next_payload: 0,
            last_liveness: Instant::now(),
            busy: false,
            closed: false,
        }
    }

    fn ep(&self, peer: usize) -> Option<Ep> {
        self.peers.get(peer)?.as_ref()?.ep
    }

    /// Sends a control frame (`bytes`: header, maybe payload) to `peer`;
    /// `id` completes when UCX is done with it. False if `peer` has no
    /// endpoint.
    pub(super) fn send_frame(&mut self, peer: usize, bytes: Vec<u8>, id: Option<ReqId>) -> bool {
        let Some(ep) = self.ep(peer) else {
            return false;
        };
        let tag = ctl_tag(self.rank);
        // SAFETY: `bytes` moves into the op and outlives the request.
        let r = unsafe { self.ucp.send(ep, bytes.as_ptr(), bytes.len(), tag) };
        self.track_send(r, peer, id, bytes);
        true
    }

    /// Sends a message's payload as its own UCX message (rendezvous, so
    /// zero-copy where the transport can) under a fresh payload id.
    ///
    /// # Safety
    /// `data[..len]` stays valid until request `id` completes.
    /// `sync`: the send completes only once the receiver took the payload
    /// (for a payload sent this way for want of flow-control credit, which
    /// UCX would otherwise deliver eagerly into the receiver's memory).
    pub(super) unsafe fn send_payload(
        &mut self,
        peer: usize,
        data: *const u8,
        len: usize,
        id: ReqId,
        sync: bool,
    ) -> u32 {
        let pid = self.next_payload;
        self.next_payload = self.next_payload.wrapping_add(1);
        let ep = self.ep(peer).expect("add_send checked the peer");
        let tag = payload_tag(self.rank, pid);
        let r = if sync {
            self.ucp.send_sync(ep, data, len, tag)
        } else {
            self.ucp.send(ep, data, len, tag)
        };
        self.track_send(r, peer, Some(id), Vec::new());
        pid
    }

    fn track_send(&mut self, r: StatusPtr, peer: usize, id: Option<ReqId>, buf: Vec<u8>) {
        match r {
            StatusPtr::Done => {
                if let Some(id) = id {
                    self.matcher.complete(id);
                }
            }
            StatusPtr::Err(s) => {
                let why = format!("UCX send: {}", self.ucp.describe(s));
                self.send_failed(peer, id, &why);
            }
            StatusPtr::Request(req) => self.sends.push(Op {
                req,
                peer,
                id,
                _buf: buf,
            }),
        }
    }

    fn send_failed(&mut self, peer: usize, id: Option<ReqId>, why: &str) {
        if self.matcher.said_bye(peer) || self.matcher.is_fatal() {
            if let Some(id) = id {
                self.matcher.fail(id, closed(peer));
            }
        } else {
            self.matcher.peer_down(peer, why);
        }
    }

    /// Finishes every endpoint's wire-up now (flushing it) and waits, still
    /// progressing, until every peer has too: UCX moves nothing while a
    /// worker is not progressed, so without this a rank's first message
    /// could sit until its peer next polls.
    pub(super) fn wire_up(
        &mut self,
        store: &dyn KvStore,
        job: &str,
        peers: &[usize],
        timeout: Duration,
    ) -> crate::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut flushes = Vec::new();
        for p in self.peers.iter().flatten() {
            // SAFETY: a live endpoint.
            match unsafe { self.ucp.flush(p.ep.unwrap()) } {
                StatusPtr::Request(r) => flushes.push(r),
                StatusPtr::Done => {}
                StatusPtr::Err(s) => {
                    return Err(wire_err(format!("flush: {}", self.ucp.describe(s))))
                }
            }
        }
        let key = |r: usize| format!("{job}/ucx/{r}/wired");
        let mut published = false;
        let others: Vec<String> = peers
            .iter()
            .filter(|&&r| r != self.rank)
            .map(|&r| key(r))
            .collect();
        let others: Vec<&str> = others.iter().map(String::as_str).collect();
        loop {
            // SAFETY: a live worker.
            unsafe { (self.ucp.worker_progress)(self.worker) };
            let mut failed = None;
            flushes.retain(|&r| {
                // SAFETY: live requests of ours.
                let s = unsafe { self.ucp.status(r) };
                if s != UCS_INPROGRESS {
                    // SAFETY: complete; freed once.
                    unsafe { self.ucp.free(r) };
                    if s != UCS_OK {
                        failed = Some(s);
                    }
                }
                s == UCS_INPROGRESS
            });
            if let Some(s) = failed {
                return Err(wire_err(format!("flush: {}", self.ucp.describe(s))));
            }
            if flushes.is_empty() && !published {
                store
                    .set(&key(self.rank), b"1")
                    .map_err(|e| wire_err(format!("store: {e}")))?;
                published = true;
            }
            if published
                && store
                    .check(&others)
                    .map_err(|e| wire_err(format!("store: {e}")))?
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(wire_err(format!(
                    "not every peer finished connecting within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Whether sends are still in flight (close waits for them).
    pub(super) fn sending(&self) -> bool {
        !self.sends.is_empty()
    }

    /// One round of progress; returns whether anything changed for the
    /// caller (`Waiting` and `Query` frames are talk, not progress).
    pub(super) fn poll(&mut self) -> bool {
        self.busy = false;
        for _ in 0..PROGRESS_ROUNDS {
            // SAFETY: a live worker, used under the mutex.
            if unsafe { (self.ucp.worker_progress)(self.worker) } == 0 {
                break;
            }
            self.busy = true;
        }
        let mut changed = self.reap_sends();
        changed |= self.take_frames();
        changed |= self.start_pulls();
        changed |= self.run_payloads();
        for (peer, bytes) in self.matcher.take_credit_due() {
            self.send_frame(peer, credit(bytes).to_vec(), None);
        }
        self.check_errors();
        if self.last_liveness.elapsed() >= LIVENESS_EVERY {
            self.last_liveness = Instant::now();
            self.check_liveness();
        }
        changed
    }

    fn reap_sends(&mut self) -> bool {
        let mut changed = false;
        let mut i = 0;
        while i < self.sends.len() {
            // SAFETY: a live request of ours.
            let s = unsafe { self.ucp.status(self.sends[i].req) };
            if s == UCS_INPROGRESS {
                i += 1;
                continue;
            }
            let op = self.sends.swap_remove(i);
            // SAFETY: complete; freed once.
            unsafe { self.ucp.free(op.req) };
            changed = true;
            if s == UCS_OK {
                if let Some(id) = op.id {
                    self.matcher.complete(id);
                }
            } else {
                let why = format!("UCX send: {}", self.ucp.describe(s));
                self.send_failed(op.peer, op.id, &why);
            }
        }
        changed
    }

    /// Takes every arrived control frame out of UCX (so a sender never
    /// waits on this rank's matching), then handles the received ones in
    /// arrival order.
    fn take_frames(&mut self) -> bool {
        while let Some((msg, info)) = self.ucp.probe(self.worker, 0, CLASS_PAYLOAD) {
            let peer = sender_of(info.sender_tag);
            let mut buf = vec![0u8; info.length];
            // SAFETY: `buf` moves into `ctl_in` (its heap block stays put) and
            // lives until the request completes.
            let r = unsafe {
                self.ucp
                    .recv_probed(self.worker, buf.as_mut_ptr(), buf.len(), msg)
            };
            let req = match r {
                StatusPtr::Done => None,
                StatusPtr::Request(req) => Some(req),
                StatusPtr::Err(s) => {
                    let why = format!("UCX receive: {}", self.ucp.describe(s));
                    self.matcher.peer_down(peer, &why);
                    continue;
                }
            };
            self.ctl_in.push_back(CtlIn { peer, buf, req });
        }
        let mut changed = false;
        while let Some(front) = self.ctl_in.front_mut() {
            if let Some(req) = front.req {
                // SAFETY: a live request of ours.
                let s = unsafe { self.ucp.status(req) };
                if s == UCS_INPROGRESS {
                    break;
                }
                // SAFETY: complete; freed once.
                unsafe { self.ucp.free(req) };
                front.req = None;
                if s != UCS_OK {
                    let (peer, why) =
                        (front.peer, format!("UCX receive: {}", self.ucp.describe(s)));
                    self.ctl_in.pop_front();
                    self.matcher.peer_down(peer, &why);
                    continue;
                }
            }
            let f = self.ctl_in.pop_front().unwrap();
            changed |= self.on_frame(f.peer, &f.buf);
        }
        changed
    }

    fn on_frame(&mut self, peer: usize, b: &[u8]) -> bool {
        let h = match Header::decode(b) {
            Ok(h) => h,
            Err(e) => {
                self.matcher.peer_down(peer, &e.to_string());
                return true;
            }
        };
        let payload = &b[HEADER_LEN..];
        match h.kind {
            Kind::Data if payload.len() as u64 == h.len => {
                let mut inc = self.matcher.on_header(peer, &h);
                inc.push(payload);
                self.matcher.on_complete(peer, inc);
            }
            Kind::Rndv => self.matcher.on_rndv(peer, &h, RndvInfo::decode(b)),
            Kind::Credit => {
                self.matcher.on_credit(peer, RndvInfo::decode(b).word);
                return false;
            }
            Kind::Abort => {
                let reason = String::from_utf8_lossy(payload).into_owned();
                self.matcher
                    .set_fatal(TransportError::Aborted { peer, reason });
            }
            Kind::Bye => self.matcher.peer_bye(peer),
            Kind::Waiting => {
                self.matcher.on_waiting(peer, decode_waiting(&h, b));
                return false;
            }
            Kind::Query => {
                let frame = waiting(self.matcher.blocked()).to_vec();
                self.send_frame(peer, frame, None);
                return false;
            }
            _ => {
                let why = format!("unexpected {:?} frame of {} bytes", h.kind, b.len());
                self.matcher.peer_down(peer, &why);
            }
        }
        true
    }

    /// Completes the payloads that arrived. A payload from a peer that said
    /// bye still arrives (its sends had completed, so UCX holds the bytes);
    /// one from a dead peer, or after the job failed, is cancelled.
    pub(super) fn run_payloads(&mut self) -> bool {
        let mut changed = false;
        let mut i = 0;
        while i < self.payloads.len() {
            let p = &self.payloads[i];
            let s = match p.req {
                // SAFETY: a live request of ours.
                Some(req) => unsafe { self.ucp.status(req) },
                None => UCS_OK,
            };
            let lost = self.lost(p.peer);
            if s == UCS_INPROGRESS {
                if lost {
                    // The receive's memory must not be written once its
                    // request failed. SAFETY: a live request; it completes
                    // as cancelled.
                    unsafe { self.ucp.cancel(self.worker, p.req.unwrap()) };
                }
                i += 1;
                continue;
            }
            let mut p = self.payloads.swap_remove(i);
            if let Some(req) = p.req {
                // SAFETY: complete; freed once.
                unsafe { self.ucp.free(req) };
            }
            changed = true;
            let peer = p.peer;
            if lost {
                continue;
            }
            if s != UCS_OK {
                let why = format!(
                    "ucx: receiving {} bytes from rank {peer}: {}",
                    p.inc.len,
                    self.ucp.describe(s)
                );
                self.matcher.fail_incoming(p.inc, TransportError::Io(why));
                continue;
            }
            match p.stage.take() {
                Some(stage) => {
                    p.inc.push(&stage);
                    self.matcher.buffers().give(stage);
                }
                None => p.inc.advance(p.inc.len),
            }
            self.matcher.on_complete(peer, p.inc);
        }
        changed
    }

    /// Whether a payload from `peer` is no longer wanted: the peer died or
    /// the job failed (a peer that only said bye still delivers).
    fn lost(&self, peer: usize) -> bool {
        self.matcher.is_down(peer) || self.matcher.is_fatal()
    }

    /// Posts the UCX receives of the payloads whose `Rndv` header met a
    /// posted receive (on arrival, or since, in `irecv`); whether any.
    /// Until then a payload stays inside UCX: its sender's memory, which
    /// the receive reads straight into the destination (as shm's pulls).
    pub(super) fn start_pulls(&mut self) -> bool {
        let pulls = self.matcher.take_pulls();
        let any = !pulls.is_empty();
        for p in pulls {
            // A peer that said bye had its sends completed first, so UCX
            // holds their payloads: those are still received.
            if self.lost(p.peer) {
                // The request reports the death or the failure already.
                continue;
            }
            self.start_payload(p.peer, p.rndv.cookie as u32, p.inc);
        }
        any
    }

    /// Posts the receive of payload `id` from `peer`: straight into the
    /// receive's buffer when it is plain memory (zero-copy for UCX's
    /// rendezvous), else into a staging buffer handed to the sink (or
    /// dropped) on completion.
    fn start_payload(&mut self, peer: usize, id: u32, mut inc: Incoming) {
        let tag = payload_tag(peer, id);
        let len = inc.len;
        let mut stage = None;
        let dst = match inc.wanted().then(|| inc.direct()).flatten() {
            Some(d) => d.as_mut_ptr(),
            None => stage.insert(self.matcher.buffers().take(len)).as_mut_ptr(),
        };
        // SAFETY: the destination (the receive's buffer, which its caller
        // keeps valid until the request completes, or `stage`, which moves
        // without moving its bytes) holds `len` bytes.
        let r = unsafe { self.ucp.recv(self.worker, dst, len, tag) };
        let req = match r {
            StatusPtr::Done => None,
            StatusPtr::Request(req) => Some(req),
            StatusPtr::Err(s) => {
                let why = format!("ucx: receive from rank {peer}: {}", self.ucp.describe(s));
                self.matcher.fail_incoming(inc, TransportError::Io(why));
                return;
            }
        };
        self.payloads.push(Payload {
            peer,
            inc,
            req,
            stage,
        });
    }

    fn check_errors(&mut self) {
        let errs = std::mem::take(&mut *self.errs.lock().unwrap_or_else(|e| e.into_inner()));
        for (peer, why) in errs {
            if !self.matcher.said_bye(peer) {
                self.matcher.peer_down(peer, &why);
            }
        }
    }

    fn check_liveness(&mut self) {
        let dead: Vec<(usize, String)> = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| Some((r, p.as_ref()?.local_pid?)))
            .filter(|&(r, _)| !self.matcher.said_bye(r))
            .filter_map(|(r, pid)| Some((r, format!("process {pid} {}", pid_dead(pid)?))))
            .collect();
        for (peer, why) in dead {
            self.matcher.peer_down(peer, &why);
        }
    }

    /// Cancels what is in flight and closes the endpoints; the worker and
    /// context are destroyed by the caller.
    pub(super) fn shut_down(&mut self) {
        let reqs: Vec<*mut c_void> = self
            .sends
            .drain(..)
            .map(|o| o.req)
            .chain(self.payloads.drain(..).filter_map(|p| p.req))
            .chain(self.ctl_in.drain(..).filter_map(|c| c.req))
            .collect();
        for req in reqs {
            // SAFETY: live requests; cancelled, then released (UCX frees a
            // released request when it completes).
            unsafe {
                self.ucp.cancel(self.worker, req);
                self.ucp.free(req);
            }
        }
        let mut closing = Vec::new();
        for p in self.peers.iter_mut().flatten() {
            if let Some(ep) = p.ep.take() {
                // SAFETY: a live endpoint, not used again. Forced: peers may
                // be gone, and a flushing close would wait for them.
                if let StatusPtr::Request(r) = unsafe { self.ucp.close(ep, true) } {
                    closing.push(r);
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !closing.is_empty() && Instant::now() < deadline {
            // SAFETY: a live worker.
            unsafe { (self.ucp.worker_progress)(self.worker) };
            closing.retain(|&r| {
                // SAFETY: live requests of ours.
                let done = unsafe { self.ucp.status(r) } != UCS_INPROGRESS;
                if done {
                    // SAFETY: complete; freed once.
                    unsafe { self.ucp.free(r) };
                }
                !done
            });
        }
        self.closed = true;
    }
}
