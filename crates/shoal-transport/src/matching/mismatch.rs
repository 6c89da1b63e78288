//! Mismatched collective calls, caught whatever messages they exchange: a
//! message meeting a receive of the same call with another signature fails
//! it; a message for a call this rank has finished (or one left over when
//! it finishes: [`Matcher::finish_call`]) was sent by a rank whose call
//! differs, and fails the job instead of waiting in a queue forever.

use std::collections::VecDeque;

use super::Matcher;
use crate::frame::Header;
use crate::{CallSig, Result, Tag, TransportError};

/// Finished calls remembered per communicator, to name this rank's side of
/// a mismatch found after the call.
const CALLS_KEPT: usize = 16;

/// Collective sequence numbers count modulo 2^31 (the top bit marks
/// point-to-point messages).
const SEQ_MODULUS_MASK: u32 = (1 << 31) - 1;

/// The collective calls this rank finished on one communicator, newest last.
#[derive(Default)]
pub(super) struct Finished {
    calls: VecDeque<(u32, CallSig)>,
}

impl Finished {
    /// Whether call `seq` is over here: one of the remembered calls, or
    /// older than all of them (finished, or skipped by every rank).
    pub(super) fn covers(&self, seq: u32) -> bool {
        let older = |oldest: u32| {
            let behind = oldest.wrapping_sub(seq) & SEQ_MODULUS_MASK;
            behind != 0 && behind < 1 << 30
        };
        self.calls.iter().any(|c| c.0 == seq) || self.calls.front().is_some_and(|c| older(c.0))
    }

    pub(super) fn sig_of(&self, seq: u32) -> Option<CallSig> {
        self.calls.iter().rev().find(|c| c.0 == seq).map(|c| c.1)
    }
}

fn same_call(a: Tag, b: Tag) -> bool {
    a.comm == b.comm && a.seq == b.seq
}

/// Whether a message from `peer_a` and a receive for `peer_b` belong to the
/// same call but disagree on its signature. Collective calls have one
/// signature on every rank, so any two peers are compared; point-to-point
/// messages (`CallSig::P2P_KIND`) only with the same peer and message index,
/// since sends of different sizes may share a tag.
pub(super) fn conflicting(
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
    pub(super) fn mismatch(
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

    /// Removes the first posted receive from `peer` satisfying `pred` (all of
    /// them when `pred` is a signature check, since those all fail).
    /// A queued message of the same call as a receive from `peer` with
    /// `tag`/`sig` whose signature differs: (its sender, its signature).
    pub(super) fn conflicting_unexpected(
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

    /// Whether a message from `peer` is dropped on arrival: the job has
    /// failed, or the message belongs to a call this rank has finished, so
    /// its sender's call differs from ours (the job fails now).
    pub(super) fn refuses(&mut self, peer: usize, h: &Header) -> bool {
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
        // Notes come only from peers that waited long enough to say where.
        let mut blocked_elsewhere = None;
        if !self.notes.is_empty() {
            blocked_elsewhere = self
                .notes
                .iter()
                .find(|(_, b)| of_this_call(&b.tag) && b.sig != sig)
                .map(|(&p, b)| (p, b.sig));
            self.notes.retain(|_, b| !of_this_call(&b.tag));
        }
        match leftover.or(blocked_elsewhere) {
            Some((peer, theirs)) => {
                let e = self.mismatch(peer, seq, Some(sig), theirs);
                self.set_fatal(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }
}
