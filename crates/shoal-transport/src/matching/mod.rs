//! Tag matching shared by all transports: posted receives, the unexpected
//! message queue and request states; around it, in sibling files, where
//! payloads go ([`incoming`]), mismatch detection ([`mismatch`]), the stall
//! protocol ([`stall`]) and peer liveness ([`liveness`]).
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

use std::collections::{HashMap, VecDeque};

mod incoming;
mod liveness;
mod mismatch;
mod stall;

use crate::flow::Flow;
use crate::frame::{Header, RndvInfo};
use crate::pool::{BufferPool, KEEP_NONE};
use crate::{Answer, Blocked, CallSig, RecvInto, ReqId, Result, Tag, TransportError};
use incoming::{deliver, dest_of, len_of, Dest, Target};
pub(crate) use incoming::{Incoming, Pull};
pub(crate) use liveness::closed;
use mismatch::{conflicting, Finished};

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

    /// Holds collective messages to `ahead` bytes of each peer's credit
    /// ([`Flow::limit_run_ahead`]); the peers must hold theirs alike.
    pub fn limit_run_ahead(&mut self, ahead: usize) {
        self.flow.limit_run_ahead(ahead);
    }

    /// Whether a `len`-byte message to `peer` may go eagerly (its credit is
    /// then spent); otherwise it must go by rendezvous.
    pub fn may_send_eagerly(&mut self, peer: usize, len: usize, collective: bool) -> bool {
        self.flow.spend(peer, len, collective)
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
