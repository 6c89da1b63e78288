//! Peer liveness: peers that died, closed cleanly, or aborted the job, and
//! what that does to the requests still waiting on them.

use super::{Matcher, PeerQ, Pull, State};
use crate::{ReqId, Result, TransportError};

impl Matcher {
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

    pub(super) fn health_fatal(&self) -> Result<()> {
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
}

pub(crate) fn closed(peer: usize) -> TransportError {
    TransportError::PeerDied {
        peer,
        detail: "peer closed its transport".into(),
    }
}
