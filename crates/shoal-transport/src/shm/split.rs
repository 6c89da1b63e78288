//! Splitting a large message read in place between its two ranks.
//!
//! A rendezvous message read in place (`process_vm_readv`) of at least
//! `split_bytes` may be split: on matching it, the receiver sends a `Split`
//! frame naming its receive buffer and reads the first half, while the
//! sender, which only waits for the ack, writes the second half (from
//! [`split_at`]) into that buffer (`process_vm_writev`) and answers
//! `Wrote`; the receiver acks as usual once both halves are in (or, if the
//! sender could not write or declined, reads the rest itself). So two cores
//! copy a large message. Only where a core is spare: a receiver sending to
//! the same peer does not ask, and a sender busy reading declines at once.

use std::collections::{HashMap, VecDeque};

use super::engine::{Inner, OutChan, Reading, PULL_BUDGET};
use crate::cma;
use crate::frame::{split_at, Header, Kind, RndvInfo, ACK_FAILED, ACK_OK, HEADER_LEN};
use crate::matching::closed;

/// `Wrote` status: the sender wrote its half of a split message.
pub(super) const WROTE_OK: u64 = 0;
/// `Wrote` status: it could not; the receiver reads that half too.
pub(super) const WROTE_FAILED: u64 = 1;

/// A sender's half of a split message, being written into its receiver.
pub(super) struct Write {
    ch: usize,
    pub(super) cookie: u64,
    /// The rest of the half: from here in our memory, to `dst` in the receiver's.
    src: *const u8,
    dst: u64,
    left: usize,
}

/// A `Split` frame (`info`) came from `o`'s peer (channel `ch`): queues
/// the write of the half it asks for, or declines at once when this rank
/// is `busy` reading. False if it names no message of ours read in place.
pub(super) fn on_split(
    o: &mut OutChan,
    ch: usize,
    info: RndvInfo,
    busy: bool,
    writes: &mut VecDeque<Write>,
) -> bool {
    let Some(w) = half_to_write(o, ch, info) else {
        return false;
    };
    if busy {
        // (both ranks of an exchange read at once: the receiver reads it
        // all, as it would unsplit)
        let no = RndvInfo {
            word: WROTE_FAILED,
            cookie: info.cookie,
        };
        o.ctl.push_back(no.encode(&Header::control(Kind::Wrote, 0)));
    } else {
        writes.push_back(w);
    }
    true
}

/// Splits the message `r` if it is worth it (`may_write`: its sender may
/// write into our memory, as it may read it): this rank will read only its
/// first half, and gets the `Split` frame that asks the sender to write the
/// rest; `asked` notes that it was asked.
pub(super) fn split(
    r: &mut Reading,
    split_bytes: usize,
    may_write: bool,
    asked: &mut HashMap<u64, Option<u64>>,
) -> Option<[u8; HEADER_LEN]> {
    let len = r.pull.inc.len;
    let fresh = r.pull.inc.received == 0 && r.until == len;
    if !fresh || split_bytes == 0 || len < split_bytes || !may_write {
        return None;
    }
    let addr = r.pull.inc.buffer_addr()?;
    let at = split_at(len);
    if at == 0 {
        return None;
    }
    r.until = at;
    let cookie = r.pull.rndv.cookie;
    asked.insert(cookie, None);
    let info = RndvInfo { word: addr, cookie };
    Some(info.encode(&Header::control(Kind::Split, 0)))
}

/// The half of the message a `Split` frame (`info`, from `o`'s peer on
/// channel `ch`) asks this rank to write, if it names a message of ours
/// that the peer reads in place.
fn half_to_write(o: &OutChan, ch: usize, info: RndvInfo) -> Option<Write> {
    let a = o.awaiting.iter().find(|a| a.id == info.cookie)?;
    let at = split_at(a.len);
    if a.data.is_null() || o.held.contains_key(&a.id) || at == 0 {
        return None;
    }
    Some(Write {
        ch,
        cookie: a.id,
        src: a.data.wrapping_add(at),
        dst: info.word.checked_add(at as u64)?,
        left: a.len - at,
    })
}

impl Inner {
    /// Finishes the split messages whose sender has answered: done if it
    /// wrote its half, else read on by this rank. Those from a peer that is
    /// gone fail (its half may never come).
    pub(super) fn finish_splits(&mut self) -> bool {
        let mut moved = false;
        for ch in 0..self.ins.len() {
            if self.ins[ch].parked.is_empty() {
                continue;
            }
            let peer = self.ins[ch].peer;
            let gone = !self.matcher.may_pull(peer);
            let c = &mut self.ins[ch];
            let answered: Vec<(u64, u64)> = c
                .parked
                .keys()
                .filter_map(|k| c.split.get(k).copied().flatten().map(|st| (*k, st)))
                .collect();
            for (cookie, wrote) in answered {
                moved = true;
                let mut r = self.ins[ch].parked.remove(&cookie).unwrap();
                self.ins[ch].split.remove(&cookie);
                if r.failed.is_some() || wrote == WROTE_OK {
                    let rest = r.pull.inc.len - r.until;
                    r.pull.inc.advance(rest);
                    let status = if r.failed.is_some() {
                        ACK_FAILED
                    } else {
                        ACK_OK
                    };
                    self.finish(ch, r, status);
                } else {
                    r.until = r.pull.inc.len;
                    self.pulls.push_front(r);
                }
            }
            if gone {
                let parked: Vec<(u64, Reading)> = self.ins[ch].parked.drain().collect();
                for (cookie, r) in parked {
                    self.ins[ch].split.remove(&cookie);
                    if !self.matcher.is_fatal() {
                        self.matcher.fail_incoming(r.pull.inc, closed(peer));
                    }
                }
            }
        }
        moved
    }

    /// Writes the halves of split messages into their receivers, oldest
    /// first, at most `PULL_BUDGET` bytes per call, and answers `Wrote`
    /// for each one done.
    pub(super) fn run_writes(&mut self) -> bool {
        let mut budget = PULL_BUDGET;
        let mut moved = false;
        while budget > 0 {
            let Some(w) = self.writes.front_mut() else {
                break;
            };
            moved = true;
            let (peer, pid) = (self.ins[w.ch].peer, self.ins[w.ch].pid);
            if !self.matcher.may_pull(peer) {
                // (nobody left to answer)
                self.writes.pop_front();
                continue;
            }
            let n = budget.min(w.left);
            // SAFETY: the send's request (and so its buffer) lasts until the
            // receiver's ack, which comes after our `Wrote`, and an ack
            // drops the send's queued writes.
            let src = unsafe { std::slice::from_raw_parts(w.src, n) };
            let status = match cma::write_all(pid, w.dst, src) {
                Ok(()) => {
                    w.src = w.src.wrapping_add(n);
                    w.dst += n as u64;
                    w.left -= n;
                    budget -= n;
                    if w.left > 0 {
                        continue;
                    }
                    self.halves_written += 1;
                    WROTE_OK
                }
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    self.writes.pop_front();
                    let why = format!("process {pid} exited (process_vm_writev: {e})");
                    self.matcher.peer_down(peer, &why);
                    continue;
                }
                Err(_) => WROTE_FAILED,
            };
            let cookie = self.writes.pop_front().unwrap().cookie;
            let info = RndvInfo {
                word: status,
                cookie,
            };
            self.send_control(peer, info.encode(&Header::control(Kind::Wrote, 0)));
        }
        moved
    }
}
