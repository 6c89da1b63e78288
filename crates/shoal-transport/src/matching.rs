//! Tag matching shared by all transports: posted receives, the unexpected
//! message queue, request states, call-signature and length checks, and the
//! bookkeeping of dead, closed and aborted peers.
//!
//! Transports only move bytes: when a header arrives they ask
//! [`Matcher::on_header`] where its payload goes, push the payload into the
//! returned [`Incoming`], and hand it back to [`Matcher::on_complete`]. A
//! message matching no posted receive is copied to the heap, so a channel
//! never stalls behind a receive that has not been posted yet.
//!
//! A rendezvous descriptor (shm's single-copy path) is matched the same way
//! through [`Matcher::on_rndv`], but what waits in the unexpected queue is the
//! descriptor, not the payload. Once a descriptor and a receive meet, the
//! matcher hands the transport a [`Pull`] (from [`Matcher::take_pulls`]): the
//! transport reads the payload from the sender into the [`Incoming`], hands
//! it to [`Matcher::on_complete`], and acknowledges the sender.
//!
//! Mismatched collective calls are caught here whatever messages they
//! exchange: a message meeting a receive of the same call with another
//! signature fails it; a message for a call this rank has finished (or one
//! left over when it finishes: [`Matcher::finish_call`]) was sent by a rank
//! whose call differs, and fails the job instead of waiting in a queue
//! forever; and a rank blocked in a call tells the ranks it waits on which
//! call that is ([`Matcher::on_waiting`]), so two calls that wait on each
//! other are a mismatch, not a deadlock.

use std::collections::{HashMap, VecDeque};

use crate::flow::Flow;
use crate::frame::{Header, RndvInfo};
use crate::pool::{BufferPool, KEEP_NONE};
use crate::{Answer, Blocked, CallSig, RecvInto, ReqId, Result, Sink, Tag, TransportError};

/// Finished calls remembered per communicator, to name this rank's side of
/// a mismatch found after the call.
const CALLS_KEPT: usize = 16;
/// Collective sequence numbers count modulo 2^31 (the top bit marks
/// point-to-point messages).
const SEQ_MODULUS_MASK: u32 = (1 << 31) - 1;

/// Where the payload of one arriving message goes.
enum Dest {
    Buffer(*mut u8),
    /// `carry` holds received bytes not yet handed on (fewer than 64), so
    /// every piece but the last is a multiple of 64 whatever the I/O sizes.
    Sink {
        sink: Sink,
        carry: Vec<u8>,
    },
    Heap(Vec<u8>),
    Discard,
}

enum Target {
    Req(ReqId),
    Unexpected(u64),
    Discard,
}

/// A message whose payload is arriving.
pub(crate) struct Incoming {
    pub len: usize,
    pub received: usize,
    target: Target,
    dest: Dest,
}

// SAFETY: the buffer pointer comes from a receive whose caller guarantees the
// memory outlives the request (see `Transport::irecv`).
unsafe impl Send for Incoming {}

/// A rendezvous message whose payload the transport must read from the
/// sender (`rndv` says where) into `inc`, then acknowledge.
pub(crate) struct Pull {
    pub peer: usize,
    pub rndv: RndvInfo,
    pub inc: Incoming,
}

impl Incoming {
    fn discard(len: usize) -> Incoming {
        Incoming {
            len,
            received: 0,
            target: Target::Discard,
            dest: Dest::Discard,
        }
    }

    /// Whether anybody wants the payload (a discarded one need not be read).
    pub fn wanted(&self) -> bool {
        !matches!(self.dest, Dest::Discard)
    }

    pub fn done(&self) -> bool {
        self.received == self.len
    }

    pub fn remaining(&self) -> usize {
        self.len - self.received
    }

    /// The rest of the destination when it is plain memory, so a transport
    /// can read straight into it (then call [`Incoming::advance`]).
    pub fn direct(&mut self) -> Option<&mut [u8]> {
        let rest = self.remaining();
        match &mut self.dest {
            // (an empty receive's pointer may be null, which no slice may hold)
            Dest::Buffer(_) if rest == 0 => Some(&mut []),
            // SAFETY: the receive's buffer has `len` bytes (checked on match).
            Dest::Buffer(p) => {
                Some(unsafe { std::slice::from_raw_parts_mut(p.add(self.received), rest) })
            }
            Dest::Heap(v) => Some(&mut v[self.received..]),
            _ => None,
        }
    }

    pub fn advance(&mut self, n: usize) {
        debug_assert!(n <= self.remaining());
        self.received += n;
    }

    /// Appends the next payload bytes (at most `remaining()`).
    pub fn push(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        debug_assert!(n <= self.remaining());
        match &mut self.dest {
            Dest::Buffer(_) | Dest::Heap(_) => self.direct().unwrap()[..n].copy_from_slice(bytes),
            Dest::Sink { sink, carry } => feed_sink(sink, carry, self.received, self.len, bytes),
            Dest::Discard => {}
        }
        self.received += n;
    }
}

/// Hands `bytes` (arriving at message offset `at`) to `sink` in pieces that
/// are multiples of 64 except the message's last one.
fn feed_sink(sink: &mut Sink, carry: &mut Vec<u8>, at: usize, total: usize, mut bytes: &[u8]) {
    let end = at + bytes.len();
    if !carry.is_empty() {
        let take = (64 - carry.len()).min(bytes.len());
        carry.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if carry.len() < 64 && end < total {
            return;
        }
        sink(at + take - carry.len(), carry);
        carry.clear();
    }
    let start = end - bytes.len();
    let whole = if end == total {
        bytes.len()
    } else {
        bytes.len() / 64 * 64
    };
    if whole > 0 {
        sink(start, &bytes[..whole]);
    }
    carry.extend_from_slice(&bytes[whole..]);
}

fn dest_of(into: RecvInto) -> Dest {
    match into {
        RecvInto::Buffer { dst, .. } => Dest::Buffer(dst),
        RecvInto::Sink { sink, .. } => Dest::Sink {
            sink,
            carry: Vec::with_capacity(64),
        },
    }
}

fn len_of(into: &RecvInto) -> usize {
    match into {
        RecvInto::Buffer { len, .. } | RecvInto::Sink { len, .. } => *len,
    }
}

/// Delivers a fully received unexpected message into a late receive.
fn deliver(into: RecvInto, data: &[u8]) {
    match into {
        // SAFETY: lengths were checked equal when the receive matched.
        RecvInto::Buffer { dst, .. } => unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len())
        },
        RecvInto::Sink { mut sink, .. } => sink(0, data),
    }
}

enum State {
    Pending,
    Done,
    Failed(TransportError),
}

struct Req {
    peer: usize,
    state: State,
}

struct Posted {
    id: ReqId,
    tag: Tag,
    sig: CallSig,
    into: RecvInto,
}

/// What happens to an unexpected message still arriving when a receive matches it.
enum Claim {
    None,
    Recv(ReqId, RecvInto),
    Drop,
}

struct Unexpected {
    key: u64,
    tag: Tag,
    sig: CallSig,
    len: usize,
    /// `None` while the payload is still arriving (or stays with the sender).
    data: Option<Vec<u8>>,
    /// A rendezvous descriptor: the payload stays in the sender's memory
    /// until a receive matches.
    rndv: Option<RndvInfo>,
    claim: Claim,
}

#[derive(Default)]
struct PeerQ {
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Unexpected>,
    /// Set when the peer died (or its channel broke) without saying bye.
    down: Option<TransportError>,
    /// Set when the peer closed cleanly: nothing more will arrive.
    bye: bool,
}

/// The collective calls this rank finished on one communicator, newest last.
#[derive(Default)]
struct Finished {
    calls: VecDeque<(u32, CallSig)>,
}

impl Finished {
    /// Whether call `seq` is over here: one of the remembered calls, or
    /// older than all of them (finished, or skipped by every rank).
    fn covers(&self, seq: u32) -> bool {
        let older = |oldest: u32| {
            let behind = oldest.wrapping_sub(seq) & SEQ_MODULUS_MASK;
            behind != 0 && behind < 1 << 30
        };
        self.calls.iter().any(|c| c.0 == seq) || self.calls.front().is_some_and(|c| older(c.0))
    }

    fn sig_of(&self, seq: u32) -> Option<CallSig> {
        self.calls.iter().rev().find(|c| c.0 == seq).map(|c| c.1)
    }
}

/// Matching state of one transport.
pub(crate) struct Matcher {
    rank: usize,
    next_id: ReqId,
    next_key: u64,
    reqs: HashMap<ReqId, Req>,
    peers: HashMap<usize, PeerQ>,
    /// A job-wide failure (an abort, ours or a peer's): every request fails.
    fatal: Option<TransportError>,
    /// Rendezvous messages matched to a receive, for the transport to read.
    pulls: Vec<Pull>,
    /// Per communicator, the collective calls this rank finished.
    finished: HashMap<u32, Finished>,
    /// What this rank is blocked on, while it is.
    blocked: Option<Blocked>,
    /// Peers blocked in calls this rank has not reached yet (the newest per
    /// peer), compared with this rank's call when it gets there.
    notes: HashMap<usize, Blocked>,
    /// What each peer said it waits for since it was last asked.
    answers: HashMap<usize, Answer>,
    /// Peers that asked what this rank waits for and await the answer.
    queries: Vec<usize>,
    /// Heap buffers of unexpected payloads, given back once delivered
    /// (none kept unless the transport asks: [`Matcher::keep_buffers`]).
    heap: BufferPool,
    /// Whether a rendezvous payload stays readable after its sender closed
    /// ([`Matcher::rndv_outlives_bye`]).
    rndv_outlives_bye: bool,
    /// Credit for eager messages, both ways ([`crate::flow`]); unlimited
    /// unless the transport asks ([`Matcher::limit_unexpected`]).
    flow: Flow,
}

fn same_call(a: Tag, b: Tag) -> bool {
    a.comm == b.comm && a.seq == b.seq
}

/// Whether a message from `peer_a` and a receive for `peer_b` belong to the
/// same call but disagree on its signature. Collective calls have one
/// signature on every rank, so any two peers are compared; point-to-point
/// messages (`CallSig::P2P_KIND`) only with the same peer and message index,
/// since sends of different sizes may share a tag.
fn conflicting(
    peer_a: usize,
    tag_a: Tag,
    sig_a: CallSig,
    peer_b: usize,
    tag_b: Tag,
    sig_b: CallSig,
) -> bool {
    let p2p = sig_a.kind == CallSig::P2P_KIND || sig_b.kind == CallSig::P2P_KIND;
    // A point-to-point "call" is one message: successive sends with one tag
    // (the same seq, consecutive steps) may differ in size and type.
    let same = if p2p {
        peer_a == peer_b && tag_a == tag_b
    } else {
        same_call(tag_a, tag_b)
    };
    same && sig_a != sig_b
}

impl Matcher {
    pub fn new(rank: usize, peers: impl IntoIterator<Item = usize>) -> Matcher {
        let peers = peers
            .into_iter()
            .filter(|&p| p != rank)
            .map(|p| (p, PeerQ::default()))
            .collect();
        Matcher {
            rank,
            next_id: 1,
            next_key: 0,
            reqs: HashMap::new(),
            peers,
            fatal: None,
            pulls: Vec::new(),
            finished: HashMap::new(),
            blocked: None,
            notes: HashMap::new(),
            answers: HashMap::new(),
            queries: Vec::new(),
            heap: BufferPool::new(KEEP_NONE),
            rndv_outlives_bye: false,
            flow: Flow::unlimited(),
        }
    }

    /// Holds at most `window` bytes of each peer's eager messages before
    /// their receives are posted; the transport sends by rendezvous what
    /// [`Matcher::may_send_eagerly`] refuses, gives back the credit of
    /// [`Matcher::take_credit_due`], and passes on the peers' credit to
    /// [`Matcher::on_credit`].
    pub fn limit_unexpected(&mut self, window: usize) {
        self.flow = Flow::new(window);
    }

    /// Whether a `len`-byte message to `peer` may go eagerly (its credit is
    /// then spent); otherwise it must go by rendezvous.
    pub fn may_send_eagerly(&mut self, peer: usize, len: usize) -> bool {
        self.flow.spend(peer, len)
    }

    /// `peer` gave `bytes` of credit back.
    pub fn on_credit(&mut self, peer: usize, bytes: u64) {
        self.flow.refund(peer, bytes);
    }

    /// Credit this rank owes its peers now, as (peer, bytes).
    pub fn take_credit_due(&mut self) -> Vec<(usize, u64)> {
        self.flow.take_due()
    }

    /// Rendezvous payloads stay readable after their sender said bye: the
    /// transport holds them (UCX, whose sender closes only once its sends
    /// completed, so their bytes have reached this side). On shm they are
    /// the sender's memory, gone with it.
    pub fn rndv_outlives_bye(&mut self) {
        self.rndv_outlives_bye = true;
    }

    /// Keeps up to `max_bytes` of heap buffers of delivered unexpected
    /// payloads for the next ones (see [`crate::pool`]).
    pub fn keep_buffers(&mut self, max_bytes: usize) {
        self.heap = BufferPool::new(max_bytes);
    }

    /// The pool unexpected payloads are received into, for the transport's
    /// own staging buffers too.
    pub fn buffers(&mut self) -> &mut BufferPool {
        &mut self.heap
    }

    fn mismatch(
        &self,
        peer: usize,
        seq: u32,
        ours: Option<CallSig>,
        theirs: CallSig,
    ) -> TransportError {
        TransportError::Mismatch {
            rank: self.rank,
            peer,
            seq,
            ours,
            theirs,
        }
    }

    fn peer(&mut self, peer: usize) -> Result<&mut PeerQ> {
        if peer == self.rank {
            return Err(TransportError::Io(format!(
                "rank {peer}: sending to self is not supported"
            )));
        }
        self.peers.get_mut(&peer).ok_or_else(|| {
            TransportError::Io(format!(
                "rank {peer} is not reachable through this transport"
            ))
        })
    }

    fn new_req(&mut self, peer: usize, state: State) -> ReqId {
        let id = self.next_id;
        self.next_id += 1;
        self.reqs.insert(id, Req { peer, state });
        id
    }

    /// Registers a send to `peer`; the transport completes or fails it.
    pub fn add_send(&mut self, peer: usize) -> Result<ReqId> {
        self.health_fatal()?;
        let q = self.peer(peer)?;
        if let Some(e) = &q.down {
            return Err(e.clone());
        }
        if q.bye {
            return Err(closed(peer));
        }
        Ok(self.new_req(peer, State::Pending))
    }

    /// Posts a receive: matches a queued unexpected message or waits for one.
    pub fn post_recv(
        &mut self,
        peer: usize,
        tag: Tag,
        sig: CallSig,
        into: RecvInto,
    ) -> Result<ReqId> {
        self.health_fatal()?;
        self.peer(peer)?;
        let len = len_of(&into);
        if let Some((from, theirs)) = self.conflicting_unexpected(peer, tag, sig) {
            let e = self.mismatch(from, tag.seq, Some(sig), theirs);
            return Ok(self.new_req(peer, State::Failed(e)));
        }
        let q = self.peer(peer)?;
        let hit = q
            .unexpected
            .iter()
            .position(|u| u.tag == tag && matches!(u.claim, Claim::None));
        let Some(i) = hit else {
            let early = q.down.clone().or_else(|| q.bye.then(|| closed(peer)));
            let state = early.map_or(State::Pending, State::Failed);
            let id = self.new_req(peer, state);
            if matches!(self.reqs[&id].state, State::Pending) {
                self.peers
                    .get_mut(&peer)
                    .unwrap()
                    .posted
                    .push_back(Posted { id, tag, sig, into });
            }
            return Ok(id);
        };
        let got = q.unexpected[i].len;
        if got != len {
            if let Some(rndv) = q.unexpected[i].rndv {
                // Nobody reads it, but the sender waits for the ack.
                q.unexpected.remove(i);
                self.pulls.push(Pull {
                    peer,
                    rndv,
                    inc: Incoming::discard(got),
                });
            } else if drop_unexpected(q, i) {
                self.flow.free(peer, got);
            }
            let e = TransportError::LengthMismatch {
                peer,
                tag,
                expected: len,
                got,
            };
            return Ok(self.new_req(peer, State::Failed(e)));
        }
        if q.unexpected[i].data.is_some() {
            let data = q.unexpected.remove(i).unwrap().data.unwrap();
            deliver(into, &data);
            self.heap.give(data);
            self.flow.free(peer, len);
            return Ok(self.new_req(peer, State::Done));
        }
        if let Some(rndv) = q.unexpected[i].rndv {
            q.unexpected.remove(i);
            let id = self.new_req(peer, State::Pending);
            self.pulls.push(Pull {
                peer,
                rndv,
                inc: Incoming {
                    len,
                    received: 0,
                    target: Target::Req(id),
                    dest: dest_of(into),
                },
            });
            return Ok(id);
        }
        let id = self.new_req(peer, State::Pending);
        self.peers.get_mut(&peer).unwrap().unexpected[i].claim = Claim::Recv(id, into);
        Ok(id)
    }

    /// Receive from any source: of the messages from the `(peer, tag)` pairs
    /// of `from` that wait for a receive (queued unexpected: their header or
    /// rendezvous descriptor has arrived), the sender of the one that arrived
    /// first; `None` while there is none. The caller then posts the receive
    /// from that peer as usual ([`Matcher::post_recv`]), which takes it.
    pub fn probe(&self, from: &[(usize, Tag)]) -> Option<usize> {
        let first_waiting = |&(peer, tag): &(usize, Tag)| {
            let q = self.peers.get(&peer)?;
            let u = q
                .unexpected
                .iter()
                .find(|u| u.tag == tag && matches!(u.claim, Claim::None))?;
            Some((u.key, peer))
        };
        from.iter()
            .filter_map(first_waiting)
            .min()
            .map(|(_, peer)| peer)
    }

    /// A data header arrived from `peer`: fails posted receives of the same
    /// call with another signature, then picks where the payload goes.
    pub fn on_header(&mut self, peer: usize, h: &Header) -> Incoming {
        if self.refuses(peer, h) {
            self.flow.free(peer, h.len as usize);
            return Incoming::discard(h.len as usize);
        }
        if let Some(inc) = self.match_posted(peer, h) {
            // (the payload goes to the receive's memory, or nowhere)
            self.flow.free(peer, inc.len);
            return inc;
        }
        let len = h.len as usize;
        let key = self.queue_unexpected(peer, h, None);
        Incoming {
            len,
            received: 0,
            target: Target::Unexpected(key),
            dest: Dest::Heap(self.heap.take(len)),
        }
    }

    /// A rendezvous descriptor arrived from `peer`: matched like a data
    /// header; the message becomes a [`Pull`] once a receive matches (now,
    /// or when one is posted).
    pub fn on_rndv(&mut self, peer: usize, h: &Header, rndv: RndvInfo) {
        if self.refuses(peer, h) {
            // Never read nor acknowledged: the job has failed, and the
            // sender learns it from the abort.
            return;
        }
        if let Some(inc) = self.match_posted(peer, h) {
            self.pulls.push(Pull { peer, rndv, inc });
        } else {
            self.queue_unexpected(peer, h, Some(rndv));
        }
    }

    /// Rendezvous messages matched since the last call, to be read.
    pub fn take_pulls(&mut self) -> Vec<Pull> {
        std::mem::take(&mut self.pulls)
    }

    /// Whether a pull from `peer` is still wanted: the peer neither died nor
    /// closed and the job did not fail.
    pub fn may_pull(&self, peer: usize) -> bool {
        self.fatal.is_none()
            && self
                .peers
                .get(&peer)
                .is_some_and(|q| q.down.is_none() && !q.bye)
    }

    /// Fails the receive `inc` was for (a pull that could not be done).
    pub fn fail_incoming(&mut self, inc: Incoming, e: TransportError) {
        if let Target::Req(id) = inc.target {
            self.fail(id, e);
        }
    }

    fn queue_unexpected(&mut self, peer: usize, h: &Header, rndv: Option<RndvInfo>) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        if let Some(q) = self.peers.get_mut(&peer) {
            q.unexpected.push_back(Unexpected {
                key,
                tag: h.tag,
                sig: h.sig,
                len: h.len as usize,
                data: None,
                rndv,
                claim: Claim::None,
            });
        }
        key
    }

    /// Fails posted receives of `h`'s call with another signature, then
    /// takes the receive `h` is for, if posted: where its payload goes
    /// (discarded, with the receive failed, when the lengths differ).
    fn match_posted(&mut self, peer: usize, h: &Header) -> Option<Incoming> {
        let len = h.len as usize;
        let mut mismatched = Vec::new();
        let others: Vec<usize> = self.peers.keys().copied().collect();
        for other in others {
            let conflicts = |p: &Posted| conflicting(peer, h.tag, h.sig, other, p.tag, p.sig);
            mismatched.extend(self.take_posted(other, conflicts));
        }
        for p in mismatched {
            let e = self.mismatch(peer, h.tag.seq, Some(p.sig), h.sig);
            self.fail(p.id, e);
        }
        if let Some(p) = self
            .take_posted(peer, |p| p.tag == h.tag)
            .into_iter()
            .next()
        {
            let expected = len_of(&p.into);
            if expected != len {
                self.fail(
                    p.id,
                    TransportError::LengthMismatch {
                        peer,
                        tag: h.tag,
                        expected,
                        got: len,
                    },
                );
                return Some(Incoming::discard(len));
            }
            return Some(Incoming {
                len,
                received: 0,
                target: Target::Req(p.id),
                dest: dest_of(p.into),
            });
        }
        None
    }

    /// Removes the first posted receive from `peer` satisfying `pred` (all of
    /// them when `pred` is a signature check, since those all fail).
    /// A queued message of the same call as a receive from `peer` with
    /// `tag`/`sig` whose signature differs: (its sender, its signature).
    fn conflicting_unexpected(
        &self,
        peer: usize,
        tag: Tag,
        sig: CallSig,
    ) -> Option<(usize, CallSig)> {
        self.peers.iter().find_map(|(&from, q)| {
            q.unexpected
                .iter()
                .find(|u| conflicting(from, u.tag, u.sig, peer, tag, sig))
                .map(|u| (from, u.sig))
        })
    }

    fn take_posted(&mut self, peer: usize, pred: impl Fn(&Posted) -> bool) -> Vec<Posted> {
        let Some(q) = self.peers.get_mut(&peer) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut i = 0;
        while i < q.posted.len() {
            if pred(&q.posted[i]) {
                out.push(q.posted.remove(i).unwrap());
            } else {
                i += 1;
            }
        }
        out
    }

    /// Whether a message from `peer` is dropped on arrival: the job has
    /// failed, or the message belongs to a call this rank has finished, so
    /// its sender's call differs from ours (the job fails now).
    fn refuses(&mut self, peer: usize, h: &Header) -> bool {
        if self.fatal.is_some() {
            return true;
        }
        let Some(done) = self.finished.get(&h.tag.comm) else {
            return false;
        };
        if !h.sig.is_collective() || !done.covers(h.tag.seq) {
            return false;
        }
        let e = self.mismatch(peer, h.tag.seq, done.sig_of(h.tag.seq), h.sig);
        self.set_fatal(e);
        true
    }

    /// This rank finished collective call `seq` of `comm` (see
    /// `Transport::finish_call`): a message of the call still queued, or a
    /// peer blocked in it with another signature, is a mismatch.
    pub fn finish_call(&mut self, comm: u32, seq: u32, sig: CallSig) -> Result<()> {
        self.blocked = None;
        self.health_fatal()?;
        if !sig.is_collective() {
            return Ok(());
        }
        let done = self.finished.entry(comm).or_default();
        done.calls.push_back((seq, sig));
        if done.calls.len() > CALLS_KEPT {
            done.calls.pop_front();
        }
        let of_this_call = |t: &Tag| t.comm == comm && t.seq == seq;
        let leftover = self.peers.iter().find_map(|(&p, q)| {
            let u = q.unexpected.iter().find(|u| of_this_call(&u.tag))?;
            Some((p, u.sig))
        });
        let blocked_elsewhere = self
            .notes
            .iter()
            .find(|(_, b)| of_this_call(&b.tag) && b.sig != sig)
            .map(|(&p, b)| (p, b.sig));
        self.notes.retain(|_, b| !of_this_call(&b.tag));
        match leftover.or(blocked_elsewhere) {
            Some((peer, theirs)) => {
                let e = self.mismatch(peer, seq, Some(sig), theirs);
                self.set_fatal(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// This rank is blocked in a call (see `Transport::set_blocked`); a peer
    /// that said it is blocked in the same call with another signature is
    /// a mismatch.
    pub fn set_blocked(&mut self, b: &Blocked) {
        self.blocked = Some(b.clone());
        let noted: Vec<(usize, Blocked)> = self.notes.drain().collect();
        for (peer, note) in noted {
            self.check_note(peer, note);
        }
    }

    /// What this rank is blocked on, to answer a query with.
    pub fn blocked(&self) -> Option<&Blocked> {
        self.blocked.as_ref()
    }

    /// `peer` said what it waits for (asked or not).
    pub fn on_waiting(&mut self, peer: usize, a: Answer) {
        if let Answer::Blocked(b) = &a {
            self.check_note(peer, b.clone());
        }
        self.answers.insert(peer, a);
    }

    /// Compares the call `peer` is blocked in with this rank's call of the
    /// same sequence number: finished, blocked in now, or (not reached yet)
    /// kept for when it is.
    fn check_note(&mut self, peer: usize, theirs: Blocked) {
        let (comm, seq) = (theirs.tag.comm, theirs.tag.seq);
        if !theirs.sig.is_collective() || self.fatal.is_some() {
            return;
        }
        let done = self.finished.get(&comm).filter(|d| d.covers(seq));
        let ours = match done {
            Some(d) => d.sig_of(seq),
            None => self
                .blocked
                .as_ref()
                .filter(|b| b.tag.comm == comm && b.tag.seq == seq)
                .map(|b| b.sig),
        };
        match ours {
            Some(ours) if ours != theirs.sig => {
                let e = self.mismatch(peer, seq, Some(ours), theirs.sig);
                self.set_fatal(e);
            }
            None if done.is_none() => {
                self.notes.insert(peer, theirs);
            }
            _ => {}
        }
    }

    /// `peer` asks what this rank waits for.
    pub fn on_query(&mut self, peer: usize) {
        if !self.queries.contains(&peer) {
            self.queries.push(peer);
        }
    }

    /// The peers whose queries await an answer.
    pub fn take_queries(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.queries)
    }

    /// Forgets what `peer` said, before asking it again.
    pub fn forget_answer(&mut self, peer: usize) {
        self.answers.remove(&peer);
    }

    /// What `peer` said since it was last asked.
    pub fn answer(&self, peer: usize) -> Option<Answer> {
        self.answers.get(&peer).cloned()
    }

    /// The payload of `inc` (from `peer`) has fully arrived.
    pub fn on_complete(&mut self, peer: usize, inc: Incoming) {
        debug_assert!(inc.done());
        match (inc.target, inc.dest) {
            (Target::Req(id), _) => self.complete(id),
            (Target::Unexpected(key), Dest::Heap(data)) => self.unexpected_arrived(peer, key, data),
            _ => {}
        }
    }

    fn unexpected_arrived(&mut self, peer: usize, key: u64, data: Vec<u8>) {
        let Some(q) = self.peers.get_mut(&peer) else {
            return;
        };
        let Some(i) = q.unexpected.iter().position(|u| u.key == key) else {
            return;
        };
        match std::mem::replace(&mut q.unexpected[i].claim, Claim::None) {
            Claim::None => q.unexpected[i].data = Some(data),
            Claim::Drop => {
                q.unexpected.remove(i);
                self.flow.free(peer, data.len());
                self.heap.give(data);
            }
            Claim::Recv(id, into) => {
                q.unexpected.remove(i);
                deliver(into, &data);
                self.flow.free(peer, data.len());
                self.heap.give(data);
                self.complete(id);
            }
        }
    }

    /// Whether request `id` is still under way (neither done nor failed).
    pub fn is_pending(&self, id: ReqId) -> bool {
        self.fatal.is_none()
            && self
                .reqs
                .get(&id)
                .is_some_and(|r| matches!(r.state, State::Pending))
    }

    pub fn complete(&mut self, id: ReqId) {
        if let Some(r) = self.reqs.get_mut(&id) {
            if matches!(r.state, State::Pending) {
                r.state = State::Done;
            }
        }
    }

    pub fn fail(&mut self, id: ReqId, e: TransportError) {
        if let Some(r) = self.reqs.get_mut(&id) {
            if matches!(r.state, State::Pending) {
                r.state = State::Failed(e);
            }
        }
    }

    /// `peer` died or its channel broke: its pending requests fail and
    /// `health` reports it from now on.
    pub fn peer_down(&mut self, peer: usize, detail: &str) {
        let Some(q) = self.peers.get_mut(&peer) else {
            return;
        };
        if q.down.is_some() || q.bye {
            return;
        }
        let e = TransportError::PeerDied {
            peer,
            detail: detail.to_string(),
        };
        q.down = Some(e.clone());
        self.fail_pending_of(peer, &e);
    }

    /// `peer` closed cleanly; receives still waiting on it can never complete.
    pub fn peer_bye(&mut self, peer: usize) {
        let Some(q) = self.peers.get_mut(&peer) else {
            return;
        };
        q.bye = true;
        if !self.rndv_outlives_bye {
            // A closed sender's memory is no longer reserved for its messages.
            q.unexpected.retain(|u| u.rndv.is_none());
        }
        let posted: Vec<ReqId> = q.posted.drain(..).map(|p| p.id).collect();
        for id in posted {
            self.fail(id, closed(peer));
        }
        if self.rndv_outlives_bye {
            return;
        }
        for p in self.drop_pulls_of(peer) {
            self.fail_incoming(p.inc, closed(peer));
        }
    }

    /// Whether `peer` died (or its channel broke).
    pub fn is_down(&self, peer: usize) -> bool {
        self.peers.get(&peer).is_some_and(|q| q.down.is_some())
    }

    pub fn said_bye(&self, peer: usize) -> bool {
        self.peers.get(&peer).is_some_and(|q| q.bye)
    }

    fn fail_pending_of(&mut self, peer: usize, e: &TransportError) {
        if let Some(q) = self.peers.get_mut(&peer) {
            q.posted.clear();
            q.unexpected.retain(|u| u.data.is_some());
        }
        self.drop_pulls_of(peer);
        for r in self.reqs.values_mut() {
            if r.peer == peer && matches!(r.state, State::Pending) {
                r.state = State::Failed(e.clone());
            }
        }
    }

    fn drop_pulls_of(&mut self, peer: usize) -> Vec<Pull> {
        let (gone, kept) = std::mem::take(&mut self.pulls)
            .into_iter()
            .partition(|p| p.peer == peer);
        self.pulls = kept;
        gone
    }

    /// Records a job-wide failure (the first one wins). Nothing will be
    /// received any more, so queued messages are dropped.
    pub fn set_fatal(&mut self, e: TransportError) {
        if self.fatal.is_some() {
            return;
        }
        self.fatal = Some(e);
        for q in self.peers.values_mut() {
            q.unexpected.clear();
        }
        self.notes.clear();
    }

    /// Whether the job failed (every request reports that failure).
    pub fn is_fatal(&self) -> bool {
        self.fatal.is_some()
    }

    fn health_fatal(&self) -> Result<()> {
        self.fatal.clone().map_or(Ok(()), Err)
    }

    /// Errors when the job is aborted or any peer died without saying bye.
    pub fn health(&self) -> Result<()> {
        self.health_fatal()?;
        let mut dead: Vec<(&usize, &PeerQ)> = self
            .peers
            .iter()
            .filter(|(_, q)| q.down.is_some())
            .collect();
        dead.sort_by_key(|(p, _)| **p);
        dead.first()
            .map_or(Ok(()), |(_, q)| Err(q.down.clone().unwrap()))
    }

    /// Whether `id` completed (forgetting it then), or its error.
    pub fn test(&mut self, id: ReqId) -> Result<bool> {
        let Some(r) = self.reqs.get(&id) else {
            return Err(TransportError::Io(format!("unknown request {id}")));
        };
        match &r.state {
            State::Pending => {
                let down = self.peers.get(&r.peer).and_then(|q| q.down.clone());
                match self.fatal.clone().or(down) {
                    Some(e) => {
                        self.reqs.remove(&id);
                        Err(e)
                    }
                    None => Ok(false),
                }
            }
            State::Done => {
                self.reqs.remove(&id);
                Ok(true)
            }
            State::Failed(_) => match self.reqs.remove(&id).unwrap().state {
                State::Failed(e) => Err(e),
                _ => unreachable!(),
            },
        }
    }
}

/// Drops unexpected message `i`, now if it has arrived (then returns true),
/// else once it has.
fn drop_unexpected(q: &mut PeerQ, i: usize) -> bool {
    if q.unexpected[i].data.is_some() {
        q.unexpected.remove(i);
        true
    } else {
        q.unexpected[i].claim = Claim::Drop;
        false
    }
}

pub(crate) fn closed(peer: usize) -> TransportError {
    TransportError::PeerDied {
        peer,
        detail: "peer closed its transport".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Receives a `len`-byte payload from rank 1 before its receive is
    /// posted, then posts the receive: where the payload was received.
    fn early_payload(m: &mut Matcher, seq: u32, len: usize) -> *const u8 {
        let tag = Tag {
            comm: 0,
            seq,
            step: 0,
        };
        let h = Header::data(tag, CallSig::default(), len);
        let mut inc = m.on_header(1, &h);
        let at = inc.direct().unwrap().as_ptr();
        inc.push(&vec![7; len]);
        m.on_complete(1, inc);
        let mut out = vec![0u8; len];
        let into = RecvInto::Buffer {
            dst: out.as_mut_ptr(),
            len,
        };
        let id = m.post_recv(1, tag, CallSig::default(), into).unwrap();
        assert!(m.test(id).unwrap());
        assert_eq!(out, vec![7; len]);
        at
    }

    #[test]
    fn delivered_early_payloads_give_their_buffer_back() {
        let len = 1 << 20;
        let mut m = Matcher::new(0, [0, 1]);
        m.keep_buffers(2 * len);
        let first = early_payload(&mut m, 1, len);
        // Where a freed buffer would go again, were it freed.
        let other = vec![1u8; len];
        assert_eq!(early_payload(&mut m, 2, len), first);
        assert_eq!(early_payload(&mut m, 3, len / 2), first);
        assert_ne!(other.as_ptr(), first);
    }

    #[test]
    fn sink_pieces_are_multiples_of_64() {
        let got: Arc<Mutex<Vec<(usize, usize)>>> = Arc::default();
        let g = got.clone();
        let mut sink: Sink = Box::new(move |off, b| g.lock().unwrap().push((off, b.len())));
        let mut carry = Vec::new();
        let total = 1000;
        let mut at = 0;
        for n in [10, 100, 3, 500, 387] {
            feed_sink(&mut sink, &mut carry, at, total, &vec![0; n]);
            at += n;
        }
        let got = got.lock().unwrap();
        let mut next = 0;
        for (i, &(off, len)) in got.iter().enumerate() {
            assert_eq!(off, next);
            if i + 1 < got.len() {
                assert_eq!(len % 64, 0);
            }
            next += len;
        }
        assert_eq!(next, total);
    }
}
