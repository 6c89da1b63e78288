//! The stall protocol: a rank blocked in a call tells the ranks it waits on
//! which call that is ([`Matcher::on_waiting`]), so two calls that wait on
//! each other are a mismatch, not a deadlock; and it answers peers that ask
//! what it waits for, so a timeout can name the rank that stopped.

use super::Matcher;
use crate::{Answer, Blocked};

impl Matcher {
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
}
