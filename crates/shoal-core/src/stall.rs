//! Who a stalled call really waits for.
//!
//! When a call times out, the ranks it waits on are often waiting
//! themselves: in a ring, every rank behind a stopped one waits on its
//! neighbour, so "waiting on rank 3" says little. The executor asks the
//! ranks it waits on what they wait for ([`Transport::ask`]), follows
//! their answers, and names the ranks at the ends of the chains: those that
//! do not answer (stopped, busy outside shoal, or preparing a call: a rank
//! answers only from inside a call, and building a registered algorithm's
//! plan in Python happens before the call sends anything) or answer that
//! they are not blocked. Asking happens only once a call has timed out, so a
//! healthy job never pays for it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shoal_transport::{Answer, Transport, TransportError};

/// What a rank asked about said.
enum Heard {
    Nothing,
    Blocked(Vec<usize>),
    Busy,
}

/// The ranks a stalled call waits on, directly or through others.
pub struct Stall {
    me: usize,
    /// Every rank asked, with what it said.
    heard: BTreeMap<usize, Heard>,
    /// The rank whose answer led to asking each rank (absent: waited on directly).
    via: BTreeMap<usize, usize>,
}

/// How long to wait for answers: long enough for a live rank on a loaded
/// host to answer, short against the timeout it adds to.
pub fn answer_time(timeout: Duration) -> Duration {
    (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

impl Stall {
    /// Asks `first` (the ranks this rank `me` waits on) and, transitively,
    /// the ranks they wait on, until every asked rank answered or `patience`
    /// passed since the last question. A transport failure (an abort from
    /// a rank that got there first, a death) ends it with that failure.
    pub fn find(
        t: &dyn Transport,
        me: usize,
        first: &[usize],
        patience: Duration,
    ) -> std::result::Result<Stall, TransportError> {
        let mut s = Stall {
            me,
            heard: BTreeMap::new(),
            via: BTreeMap::new(),
        };
        let mut last_question = Instant::now();
        for &p in first {
            s.ask(t, p, None)?;
        }
        loop {
            t.progress()?;
            for (p, on) in s.new_answers(t) {
                for q in on.into_iter().filter(|&q| q != me) {
                    if !s.heard.contains_key(&q) {
                        s.ask(t, q, Some(p))?;
                        last_question = Instant::now();
                    }
                }
            }
            let waiting = s.heard.values().any(|h| matches!(h, Heard::Nothing));
            if !waiting || last_question.elapsed() >= patience {
                return Ok(s);
            }
            t.wait(Duration::from_millis(10))?;
        }
    }

    fn ask(
        &mut self,
        t: &dyn Transport,
        peer: usize,
        via: Option<usize>,
    ) -> std::result::Result<(), TransportError> {
        self.heard.insert(peer, Heard::Nothing);
        if let Some(v) = via {
            self.via.insert(peer, v);
        }
        t.ask(peer)
    }

    /// Records the answers that came in; returns the blocked ones' waits.
    fn new_answers(&mut self, t: &dyn Transport) -> Vec<(usize, Vec<usize>)> {
        let mut blocked = Vec::new();
        for (&p, h) in self.heard.iter_mut() {
            if !matches!(h, Heard::Nothing) {
                continue;
            }
            match t.answer(p) {
                Some(Answer::Blocked(b)) => {
                    *h = Heard::Blocked(b.on.clone());
                    blocked.push((p, b.on));
                }
                Some(Answer::Busy) => *h = Heard::Busy,
                None => {}
            }
        }
        blocked
    }

    /// The findings in words, e.g. `rank 3 waits on rank 2; rank 2 stopped
    /// progressing (it does not answer: stopped, busy outside shoal, or
    /// preparing a call (e.g. building a registered algorithm's plan))`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (&p, h) in &self.heard {
            if let Heard::Blocked(on) = h {
                if on.iter().any(|q| self.via.get(q) == Some(&p)) {
                    let on: Vec<String> = on.iter().map(|q| format!("rank {q}")).collect();
                    parts.push(format!("rank {p} waits on {}", on.join(" and ")));
                }
            }
        }
        let mut ends = 0;
        for (&p, h) in &self.heard {
            let why = match h {
                Heard::Nothing => {
                    "it does not answer: stopped, busy outside shoal, or preparing a call \
                     (e.g. building a registered algorithm's plan)"
                }
                Heard::Busy => {
                    "it answers but is not blocked in a call: still busy with an earlier one?"
                }
                Heard::Blocked(_) => continue,
            };
            parts.push(format!("rank {p} stopped progressing ({why})"));
            ends += 1;
        }
        if ends == 0 && !self.heard.is_empty() {
            let mut all: Vec<usize> = self.heard.keys().copied().collect();
            all.push(self.me);
            all.sort_unstable();
            let all: Vec<String> = all.iter().map(|p| format!("rank {p}")).collect();
            parts.push(format!(
                "{} all wait on each other: a deadlock (do the calls of every rank match?)",
                all.join(", ")
            ));
        }
        parts.join("; ")
    }
}
