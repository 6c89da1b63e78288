//! Choosing among a call's contenders while the job runs (`SHOAL_ADAPT`).
//!
//! A choice made once, at a shape's first call, holds only while the host
//! stays as it was measured. On the 2-vCPU dev VM, moving data between the
//! two vCPUs slows fivefold for tens of seconds at a time while a read in
//! place keeps its speed, so a chain broadcast that is 2.5 times faster than
//! `shm_read` in one minute is 5 times slower in the next
//! (docs/benchmarks.md). So the calls of a shape whose decision names
//! several contenders (`Selector::contenders`) time them as they run:
//!
//! - The calls go in epochs. An epoch first explores the contenders that are
//!   due, then runs the leader, the contender with the lowest estimate.
//!   An exploration is two calls, of which the second is timed; four, of
//!   which the last three are timed, where calls are short: a short call's
//!   cost can land on the next ones (`EXPLORE_CALLS_SHORT`); one, timed,
//!   where they are long (`LONG_CALL`). Otherwise the first call after
//!   another algorithm's is not timed: it pays for the switch (on the dev
//!   VM a 32 KiB recursive_doubling allreduce took 11-15 us after a run of
//!   shm_sharded calls and 7-8 after its own), and for the skew the
//!   epoch's exchange leaves between the ranks.
//! - At the end of an epoch the ranks exchange what they timed
//!   (`Communicator::allgather_bytes`, in call order), and every rank
//!   computes the same new leader from the same bytes: a contender's
//!   estimate is the slowest rank's mean time per call. A contender takes
//!   the lead only when measured in the same epoch as the leader, in the
//!   same state of the host; one whose older estimate is the faster is
//!   explored first.
//! - Exploring costs at most 2% of the leader's time, by the estimates: the
//!   leader's calls build credit at that rate, and an exploration is due
//!   once the credit covers what it is expected to cost over the leader's
//!   calls (a contender not yet measured is expected to take 1.5 times the
//!   leader's time, one measured at most four times: one unlucky call does
//!   not send it away for long). So a contender 5 times slower is tried
//!   about once per 300 of the leader's calls (600 where calls are short,
//!   150 where they are long). With more contenders, the credit goes to
//!   the one charged least so far, so each is charged alike: one cheaper
//!   to explore is explored more often, but cannot take all the credit.
//! - The leader's first estimate (after a shape's first epoch), or a
//!   leader whose time moved by half between epochs (the host changed), has
//!   every other contender explored in the next epoch. A new leader does
//!   not: where two contenders are as fast as each other the lead changes
//!   often, and exploring a slow third at each change cost more than twice
//!   the budget.
//!
//! Every rank picks the same contender for every call without a message of
//! its own, because what decides the picks (the epoch's schedule, the new
//! leader) is a function of the exchanged bytes. An epoch lasts about 2 ms
//! of the leader's calls (4 to 4096 calls; a shape's first epochs 2, 4,
//! 8, ... calls), so the exchange costs little.

use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::{CommState, Communicator};
use crate::agree::ranks_text;
use crate::error::{Error, Result};
use crate::exec::CompiledPlan;
use crate::registry::Choice;
use crate::select::MAX_CONTENDERS;

/// The leader's time an epoch lasts, by its estimate.
const EPOCH_SECONDS: f64 = 2e-3;
const MIN_EPOCH_CALLS: usize = 4;
const MAX_EPOCH_CALLS: usize = 4096;
/// A shape's first epoch: an untimed call, then a timed one, after which
/// every contender is explored.
const FIRST_EPOCH_CALLS: usize = 2;
/// The calls of the leader after an epoch's explorations, at least; fewer
/// where calls are long (`LONG_CALL`), whose first is timed too.
const MIN_LEADER_CALLS: usize = 4;
const MIN_LEADER_CALLS_LONG: usize = 2;
/// The share of the leader's time that explorations may cost, by the
/// estimates: the time a shape's calls run builds credit at this rate, and
/// each exploration spends what it is expected to cost over the leader's
/// calls.
const EXPLORE_BUDGET: f64 = 0.02;
/// A contender not yet measured is expected to take this many times the
/// leader's time, and one measured slower is expected to take at most
/// this many times (so one unlucky call does not send it away for long).
const UNKNOWN_SLOWER: f64 = 1.5;
const MOST_SLOWER: f64 = 4.0;
/// An exploration's calls of its contender: an untimed one, which pays
/// for the switch from the leader's algorithm (its buffers, its rings'
/// cache lines), then timed ones: one, or three where the leader's calls
/// are short (under `SHORT_CALL`). A short call's cost can land on the
/// calls after it: a broadcast's root returns before its peers read its
/// slot, and its next writes there wait for those cache lines. One timed
/// call missed that: in the 2-vCPU VM's slow spells, 16 KiB `shm_read`
/// broadcasts measured 2.2 us explored and ran 7-8 us once they led, so
/// the lead flapped every few epochs.
const EXPLORE_CALLS: usize = 2;
const EXPLORE_CALLS_SHORT: usize = 4;
const SHORT_CALL: f64 = 100e-6;
/// Where the leader's calls take at least this long, a switch between
/// algorithms costs nothing measurable against a call, and a bench job
/// makes few of them (27 at 64 MiB): an exploration is one timed call, and
/// the leader's first call after it is timed too.
const LONG_CALL: f64 = 1e-3;
/// A leader whose time changes by this factor between epochs: the host
/// changed, and every contender is measured again.
const SHIFT: f64 = 1.5;
/// A contender takes the lead once it is this much faster than the
/// leader's estimate (not on a tie, which would flap).
const TAKE_LEAD: f64 = 0.9;

/// One rank's exchanged record: the epoch, then per contender its id, the
/// nanoseconds of its timed calls and their number (little-endian).
const RECORD: usize = 8 + MAX_CONTENDERS * (4 + 8 + 4);

/// What a call of an adapting shape does next.
#[derive(Debug, PartialEq)]
enum Next {
    /// Runs contender `index`; `timed`: its time counts.
    Run { index: usize, timed: bool },
    /// The epoch is over: the ranks exchange these records first
    /// (`Adapt::conclude`).
    Exchange([u8; RECORD]),
}

/// Time this rank measured of one contender in the current epoch.
#[derive(Clone, Copy, Default)]
struct Tally {
    ns: u64,
    calls: u32,
}

/// The measurements of one call shape's contenders on one communicator.
pub(super) struct Adapt {
    pub(super) contenders: Arc<[Choice]>,
    state: Mutex<State>,
    /// Each contender's plan for this shape, as last fetched: a leader
    /// other than the selector's choice then runs without a plan-cache
    /// lookup per call. Weak, so the plan cache's bound still holds.
    plans: Mutex<[Weak<CompiledPlan>; MAX_CONTENDERS]>,
}

struct State {
    leader: usize,
    /// Seconds per call, the slowest rank's mean, as last measured.
    estimate: [Option<f64>; MAX_CONTENDERS],
    /// Seconds of exploring the budget allows now.
    credit: f64,
    /// What each contender's explorations were charged, in all: the
    /// credit goes to the one charged least, so each is charged alike.
    charged: [f64; MAX_CONTENDERS],
    /// Whether a contender has led (a shape's first call, untimed, warms up
    /// the selector's choice).
    warmed: [bool; MAX_CONTENDERS],
    /// Contenders the next epoch explores whatever the credit.
    due: [bool; MAX_CONTENDERS],
    epoch: u64,
    /// This epoch's exploring calls, first in the epoch: the contender, and
    /// whether the call is timed.
    exploring: Vec<(usize, bool)>,
    /// Calls taken in this epoch, and how many it has.
    taken: usize,
    length: usize,
    /// Whether the leader's calls are long (`LONG_CALL`), by its estimate.
    long: bool,
    tally: [Tally; MAX_CONTENDERS],
}

impl Adapt {
    /// `contenders[0]` leads until measured (the selector's choice).
    pub(super) fn new(contenders: Arc<[Choice]>) -> Adapt {
        assert!((2..=MAX_CONTENDERS).contains(&contenders.len()));
        let mut state = State {
            leader: 0,
            estimate: [None; MAX_CONTENDERS],
            credit: 0.0,
            charged: [0.0; MAX_CONTENDERS],
            warmed: [false; MAX_CONTENDERS],
            due: [false; MAX_CONTENDERS],
            epoch: 0,
            exploring: Vec::new(),
            taken: 0,
            length: 0,
            long: false,
            tally: [Tally::default(); MAX_CONTENDERS],
        };
        state.begin_epoch(contenders.len());
        Adapt {
            contenders,
            state: Mutex::new(state),
            plans: Mutex::new(std::array::from_fn(|_| Weak::new())),
        }
    }

    pub(super) fn contender(&self, index: usize) -> Choice {
        self.contenders[index]
    }

    /// Contender `index`'s plan: the one it last ran while still cached,
    /// else `fetch`'s (from the plan cache, or built).
    pub(super) fn plan(
        &self,
        index: usize,
        fetch: impl FnOnce() -> Result<Arc<CompiledPlan>>,
    ) -> Result<Arc<CompiledPlan>> {
        if let Some(plan) = self.plans.lock().unwrap()[index].upgrade() {
            return Ok(plan);
        }
        let plan = fetch()?;
        self.plans.lock().unwrap()[index] = Arc::downgrade(&plan);
        Ok(plan)
    }

    /// The contender that leads now (for inspection).
    pub(super) fn leader(&self) -> Choice {
        self.contenders[self.state.lock().unwrap().leader]
    }

    /// What the next call does (called once per call, in call order, until
    /// it says `Run`).
    fn next(&self) -> Next {
        let mut st = self.state.lock().unwrap();
        if st.taken == st.length {
            return Next::Exchange(st.record(&self.contenders));
        }
        let call = st.taken;
        st.taken += 1;
        let exploring = st.exploring.len();
        if let Some(&(index, timed)) = st.exploring.get(call) {
            return Next::Run { index, timed };
        }
        // The leader's first call after an exploration warms it up again,
        // as a shape's first call warms up the selector's choice.
        let leader = st.leader;
        let timed = (exploring == 0 || call > exploring || st.long) && st.warmed[leader];
        st.warmed[leader] = true;
        Next::Run {
            index: leader,
            timed,
        }
    }

    /// Counts a timed call of contender `index` that succeeded.
    pub(super) fn record(&self, index: usize, took: Duration) {
        let mut st = self.state.lock().unwrap();
        let tally = &mut st.tally[index];
        tally.ns = tally.ns.saturating_add(took.as_nanos() as u64);
        tally.calls += 1;
    }

    /// Ends the epoch with every rank's record (`all`, in group rank order;
    /// `members` names the ranks in an error): the new estimates, leader and
    /// schedule, the same on every rank.
    fn conclude(&self, all: &[u8], members: &[usize]) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let mine = st.record(&self.contenders);
        let differ: Vec<usize> = all
            .chunks_exact(RECORD)
            .enumerate()
            .filter(|(_, r)| r[..8] != mine[..8] || ids(r) != ids(&mine))
            .map(|(rank, _)| rank)
            .collect();
        if !differ.is_empty() || all.len() != RECORD * members.len() {
            return Err(Error::runtime(format!(
                "{} measured other algorithms or epochs of a {} call than the rest \
                 (SHOAL_ADAPT): their calls of this shape diverged",
                ranks_text(&differ, members),
                self.contenders[0].collective()
            )));
        }
        let n = self.contenders.len();
        let mut measured = [None; MAX_CONTENDERS];
        for (c, slot) in measured.iter_mut().enumerate().take(n) {
            *slot = all
                .chunks_exact(RECORD)
                .filter_map(|r| mean_seconds(r, c))
                .reduce(f64::max);
        }
        let leader = st.leader;
        st.conclude(&measured, n);
        if st.leader != leader || tracing::enabled!(tracing::Level::TRACE) {
            let times: Vec<String> = (0..n)
                .map(|c| match st.estimate[c] {
                    Some(t) => format!("{} {:.1} us", self.contenders[c].name(), t * 1e6),
                    None => format!("{} unmeasured", self.contenders[c].name()),
                })
                .collect();
            tracing::debug!(
                "{} of {} leads from epoch {} ({})",
                self.contenders[0].collective(),
                self.contenders[st.leader].name(),
                st.epoch,
                times.join(", ")
            );
        }
        Ok(())
    }
}

impl State {
    /// Starts the epoch `self.epoch`: who is explored, and for how many
    /// calls: the contenders that are due, then, while the credit covers
    /// what exploring it is expected to cost over the leader's calls, the
    /// one charged least so far (stride scheduling: each is charged alike,
    /// so one cheaper to explore is explored more often, but cannot take
    /// the credit whenever it suffices and keep a dearer one from ever
    /// being tried again). None is explored before the leader has an
    /// estimate.
    fn begin_epoch(&mut self, n: usize) {
        self.exploring.clear();
        let lead = self.estimate[self.leader];
        self.long = lead.is_some_and(|t| t >= LONG_CALL);
        if let Some(lead) = lead {
            let explored = self.explored(n, lead);
            let calls = explore_calls(lead);
            for c in (0..n).filter(|&c| explored[c]) {
                let timed = (1..=calls).map(|call| (c, calls == 1 || call > 1));
                self.exploring.extend(timed);
            }
        }
        let min_leader = if self.long {
            MIN_LEADER_CALLS_LONG
        } else {
            MIN_LEADER_CALLS
        };
        self.length = match self.exploring.len() {
            0 => self.leader_calls(),
            exploring => (exploring + min_leader).max(self.leader_calls()),
        };
        self.taken = 0;
        self.tally = [Tally::default(); MAX_CONTENDERS];
    }

    /// The contenders this epoch explores, the leader taking `lead` seconds
    /// a call: those due, then those the credit covers, one charged least
    /// first.
    fn explored(&mut self, n: usize, lead: f64) -> [bool; MAX_CONTENDERS] {
        let mut explored = [false; MAX_CONTENDERS];
        for (c, due) in self.due.iter_mut().enumerate().take(n) {
            // (not charged: the host changed, or the shape is new)
            explored[c] = std::mem::take(due) && c != self.leader;
        }
        let leader = self.leader;
        while let Some(c) = (0..n)
            .filter(|&c| c != leader && !explored[c])
            .min_by(|&x, &y| self.charged[x].total_cmp(&self.charged[y]))
        {
            let cost = self.exploring_cost(c, lead);
            if cost > self.credit {
                break;
            }
            self.credit -= cost;
            self.charged[c] += cost;
            explored[c] = true;
        }
        explored
    }

    /// What exploring contender `c` is expected to cost over running the
    /// leader (`lead` seconds a call) instead.
    fn exploring_cost(&self, c: usize, lead: f64) -> f64 {
        let time = self.estimate[c].map_or(UNKNOWN_SLOWER * lead, |t| t.min(MOST_SLOWER * lead));
        explore_calls(lead) as f64 * (time - lead).max(0.0)
    }

    /// The leader's calls that last about `EPOCH_SECONDS`; the first
    /// epochs are shorter (2, 4, 8, ... calls), so that a shape's first
    /// explorations come as soon as the credit allows.
    fn leader_calls(&self) -> usize {
        let ramp = FIRST_EPOCH_CALLS << self.epoch.min(16);
        let calls = match self.estimate[self.leader] {
            Some(t) if t > 0.0 => {
                (EPOCH_SECONDS / t).clamp(MIN_EPOCH_CALLS as f64, MAX_EPOCH_CALLS as f64) as usize
            }
            Some(_) => MAX_EPOCH_CALLS,
            None => FIRST_EPOCH_CALLS,
        };
        calls.min(ramp)
    }

    /// The new estimates (`measured`: this epoch's, the slowest rank's mean
    /// seconds per call), leader, credit and exploration schedule.
    fn conclude(&mut self, measured: &[Option<f64>; MAX_CONTENDERS], n: usize) {
        let before = self.estimate[self.leader];
        let leader_calls = self.length - self.exploring.len();
        for (estimate, now) in self.estimate.iter_mut().zip(measured).take(n) {
            if now.is_some() {
                *estimate = *now;
            }
        }
        if let Some(lead) = self.estimate[self.leader] {
            self.credit += EXPLORE_BUDGET * leader_calls as f64 * lead;
        }
        let shifted = matches!((before, measured[self.leader]),
            (Some(b), Some(m)) if m > b * SHIFT || m * SHIFT < b);
        let first = before.is_none();
        let fastest = (0..n)
            .filter_map(|c| self.estimate[c].map(|t| (c, t)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        // Only a contender measured in this epoch takes the lead: alongside
        // the leader, in the same state of the host. One whose older
        // estimate beats the leader's time of this epoch (a slow spell of
        // the whole host, a preempted call) is explored first: by the
        // estimates that costs nothing, so the next epoch does it.
        let switched = match (fastest, self.estimate[self.leader]) {
            (Some((c, t)), Some(lead)) => {
                c != self.leader && t < lead * TAKE_LEAD && measured[c].is_some()
            }
            (Some((c, _)), None) => c != self.leader,
            (None, _) => false,
        };
        if switched {
            // The old leader is charged as the least charged of the others,
            // so it does not take the credit until it has caught up.
            let new = fastest.unwrap().0;
            let others = (0..n).filter(|&c| c != self.leader && c != new);
            if let Some(least) = others.map(|c| self.charged[c]).reduce(f64::min) {
                self.charged[self.leader] = self.charged[self.leader].max(least);
            }
            self.leader = new;
        }
        // The leader's first estimate, or a leader whose time moved (the
        // host changed): every other contender not measured in this epoch
        // is measured at once. (At a shape's start that costs a few calls
        // once, and a short job then runs its fastest contender, not its
        // first.)
        if first || shifted {
            for c in (0..n).filter(|&c| c != self.leader && measured[c].is_none()) {
                self.due[c] = true;
            }
        }
        self.epoch += 1;
        self.begin_epoch(n);
    }

    /// This rank's record of the epoch (see [`RECORD`]).
    fn record(&self, contenders: &[Choice]) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[..8].copy_from_slice(&self.epoch.to_le_bytes());
        for (c, choice) in contenders.iter().enumerate() {
            let at = 8 + c * 16;
            r[at..at + 4].copy_from_slice(&choice.id().to_le_bytes());
            r[at + 4..at + 12].copy_from_slice(&self.tally[c].ns.to_le_bytes());
            r[at + 12..at + 16].copy_from_slice(&self.tally[c].calls.to_le_bytes());
        }
        r
    }
}

/// An exploration's calls, where the leader's take `lead` seconds.
fn explore_calls(lead: f64) -> usize {
    if lead < SHORT_CALL {
        EXPLORE_CALLS_SHORT
    } else if lead < LONG_CALL {
        EXPLORE_CALLS
    } else {
        1
    }
}

/// The contenders' ids in a record.
fn ids(record: &[u8]) -> [u32; MAX_CONTENDERS] {
    std::array::from_fn(|c| u32::from_le_bytes(record[8 + c * 16..][..4].try_into().unwrap()))
}

/// Contender `c`'s mean seconds per timed call in a record, if it has any.
fn mean_seconds(record: &[u8], c: usize) -> Option<f64> {
    let at = 8 + c * 16;
    let ns = u64::from_le_bytes(record[at + 4..at + 12].try_into().unwrap());
    let calls = u32::from_le_bytes(record[at + 12..at + 16].try_into().unwrap());
    (calls > 0).then(|| ns as f64 * 1e-9 / calls as f64)
}

impl Communicator {
    /// Which contender of `adapt` the call being prepared runs. An epoch's
    /// end is first an exchange of the ranks' records, in call order, with
    /// the state's lock (`st`, returned) let go meanwhile.
    pub(super) fn next_contender<'a>(
        &'a self,
        adapt: Arc<Adapt>,
        mut st: MutexGuard<'a, CommState>,
    ) -> Result<(Adapted, MutexGuard<'a, CommState>)> {
        loop {
            match adapt.next() {
                Next::Run { index, timed } => {
                    return Ok((
                        Adapted {
                            adapt,
                            index,
                            timed,
                        },
                        st,
                    ))
                }
                Next::Exchange(record) => {
                    drop(st);
                    let all = self.allgather_bytes(&record)?;
                    adapt.conclude(&all, &self.members)?;
                    st = self.state.lock().unwrap();
                }
            }
        }
    }
}

/// A prepared call's part in its shape's measurements.
pub(super) struct Adapted {
    pub adapt: Arc<Adapt>,
    pub index: usize,
    pub timed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_plan::algorithms;
    use shoal_plan::Collective;

    fn contenders(names: &[&str]) -> Arc<[Choice]> {
        names
            .iter()
            .map(|n| Choice::Builtin(algorithms::find(Collective::Broadcast, n).unwrap()))
            .collect()
    }

    /// Runs `adapt` on `ranks` ranks whose calls of contender `c` take
    /// `time(c, call)` seconds, for `calls` calls; returns the contender of
    /// each call (the same on every rank, or the test fails).
    fn run(
        ranks: usize,
        names: &[&str],
        calls: usize,
        time: impl Fn(usize, usize) -> f64,
    ) -> Vec<usize> {
        run_switching(ranks, names, calls, 0.0, time)
    }

    /// [`run`], where a call after another contender's takes `switch`
    /// seconds more.
    fn run_switching(
        ranks: usize,
        names: &[&str],
        calls: usize,
        switch: f64,
        time: impl Fn(usize, usize) -> f64,
    ) -> Vec<usize> {
        run_streaks(ranks, names, calls, |c, call, streak| {
            time(c, call) + if streak == 0 && call > 0 { switch } else { 0.0 }
        })
    }

    /// [`run`], where a call of contender `c` takes `time(c, call, streak)`
    /// seconds, `streak` being how many calls of `c` ran just before it.
    fn run_streaks(
        ranks: usize,
        names: &[&str],
        calls: usize,
        time: impl Fn(usize, usize, usize) -> f64,
    ) -> Vec<usize> {
        let set = contenders(names);
        let adapts: Vec<Adapt> = (0..ranks).map(|_| Adapt::new(set.clone())).collect();
        let members: Vec<usize> = (0..ranks).collect();
        let mut picks = Vec::new();
        while picks.len() < calls {
            let nexts: Vec<Next> = adapts.iter().map(|a| a.next()).collect();
            match &nexts[0] {
                Next::Exchange(_) => {
                    let all: Vec<u8> = nexts
                        .iter()
                        .flat_map(|n| match n {
                            Next::Exchange(r) => r.to_vec(),
                            other => panic!("ranks out of step: {other:?}"),
                        })
                        .collect();
                    for a in &adapts {
                        a.conclude(&all, &members).unwrap();
                    }
                }
                Next::Run { index, timed } => {
                    assert!(nexts.iter().all(|n| n == &nexts[0]), "ranks picked apart");
                    let call = picks.len();
                    if *timed {
                        let streak = picks.iter().rev().take_while(|&p| p == index).count();
                        let took = time(*index, call, streak);
                        for (r, a) in adapts.iter().enumerate() {
                            // The slowest rank sets the time: rank 0's here.
                            a.record(*index, Duration::from_secs_f64(took / (1 + r) as f64));
                        }
                    }
                    picks.push(*index);
                }
            }
        }
        picks
    }

    /// The call from which contender `c` ran `streak` calls in a row.
    fn led_from(picks: &[usize], c: usize, streak: usize) -> usize {
        picks
            .windows(streak)
            .position(|w| w.iter().all(|&p| p == c))
            .unwrap_or_else(|| panic!("contender {c} never ran {streak} calls in a row"))
    }

    /// The longest run of calls in a row by contenders other than `c`.
    fn longest_run_of_others(picks: &[usize], c: usize) -> usize {
        picks
            .chunk_by(|a, b| a == b)
            .filter(|run| run[0] != c)
            .map(<[usize]>::len)
            .max()
            .unwrap()
    }

    fn share(picks: &[usize], c: usize) -> f64 {
        picks.iter().filter(|&&p| p == c).count() as f64 / picks.len() as f64
    }

    #[test]
    fn the_faster_contender_leads_and_the_slower_is_seldom_tried() {
        // The selector's pick (0) is 5 times slower than the other.
        let picks = run(2, &["binomial", "shm_read"], 20_000, |c, _| {
            [500e-6, 100e-6][c]
        });
        let tried = picks.iter().position(|&p| p == 1).unwrap();
        assert!(tried < 150, "first tried at call {tried}");
        assert!(
            share(&picks[200..], 1) > 0.98,
            "{}",
            share(&picks[200..], 1)
        );
        // Exploring the loser costs about the budget, not more.
        let extra = picks[200..].iter().filter(|&&p| p == 0).count() as f64 * 400e-6;
        let total = (picks.len() - 200) as f64 * 100e-6;
        assert!(extra / total < 2.0 * EXPLORE_BUDGET, "{}", extra / total);
    }

    #[test]
    fn short_calls_explore_within_their_first_hundred() {
        // 12 us calls: a whole epoch would be 166 of them.
        let picks = run(2, &["binomial", "shm_read"], 2000, |c, _| {
            [12e-6, 5.5e-6][c]
        });
        let tried = picks.iter().position(|&p| p == 1).unwrap();
        assert!(tried < 100, "first tried at call {tried}");
        assert!(share(&picks[200..], 1) > 0.98);
    }

    #[test]
    fn every_contender_is_measured_once_the_leader_is() {
        // The selector's pick (shm_read) is the slowest: the fastest leads
        // within a short job's first calls (a bench's job at 1 MiB makes
        // about 250), not after the credit has built up for each in turn.
        let picks = run(
            2,
            &["shm_read", "binomial", "pipelined_chain"],
            400,
            |c, _| [82e-6, 50e-6, 33e-6][c],
        );
        let led = led_from(&picks, 2, 10);
        assert!(led < 50, "the fastest led from call {led}");
    }

    #[test]
    fn long_calls_switch_to_the_fastest_within_a_short_jobs_calls() {
        // 3-5 ms calls: a bench's job at 64 MiB makes 27 of them.
        let picks = run(
            2,
            &["shm_read", "binomial", "pipelined_chain"],
            60,
            |c, _| [4.9e-3, 4.0e-3, 2.9e-3][c],
        );
        // Two calls of the selector's choice (the first untimed), one
        // timed call of each other, two of the selector's again: 6.
        let led = led_from(&picks, 2, 5);
        assert!(led <= 6, "the fastest led from call {led}");
    }

    #[test]
    fn a_switch_costs_the_explored_nothing() {
        // The selector's pick (0) is the faster, but its first 30 calls
        // (the job's first) are slow, and a call after the other
        // contender's costs 20 us more, as a 32 KiB recursive_doubling
        // allreduce after shm_sharded's did on the dev VM (the names stand
        // in). The other takes the lead at first; explored, the faster must
        // not pay for the switch, or it would never lead again.
        let picks = run_switching(
            2,
            &["binomial", "shm_read"],
            3000,
            20e-6,
            |c, call| match c {
                0 if call < 30 => 40e-6,
                0 => 4.5e-6,
                _ => 11e-6,
            },
        );
        let led = led_from(&picks, 0, 50);
        assert!(
            share(&picks[led..], 0) > 0.95,
            "{}",
            share(&picks[led..], 0)
        );
    }

    #[test]
    fn a_slow_spell_of_the_whole_host_does_not_move_the_lead() {
        // Every contender takes 2.5 times as long for calls 300-309 (the
        // dev VM's 64 MiB broadcasts had such spells). Compared with the
        // others' estimates from before the spell, the leader would lose
        // its lead to a slower contender for an epoch or more.
        let spell = |call: usize| if (300..310).contains(&call) { 2.5 } else { 1.0 };
        let picks = run(
            2,
            &["binomial", "shm_read", "scatter_allgather"],
            1000,
            |c, call| [1.0e-3, 1.2e-3, 1.5e-3][c] * spell(call),
        );
        // After the first epochs, the others run only their explorations
        // (one call each: the calls are long).
        let led = led_from(&picks, 0, 8);
        assert!(
            longest_run_of_others(&picks[led..], 0) <= EXPLORE_CALLS,
            "{picks:?}"
        );
    }

    #[test]
    fn a_short_call_whose_cost_lands_on_the_next_calls_does_not_take_the_lead() {
        // shm_read's first two calls after a switch take 1 us, the next
        // ones 3 (the root's writes waiting for the lines its readers hold);
        // binomial's take 2.
        let picks = run_streaks(2, &["binomial", "shm_read"], 20_000, |c, _, streak| match (
            c, streak,
        ) {
            (0, _) => 2e-6,
            (_, 0 | 1) => 1e-6,
            _ => 3e-6,
        });
        let led = share(&picks[2000..], 0);
        assert!(led > 0.98, "binomial ran {led} of the calls");
    }

    #[test]
    fn only_a_contender_measured_in_the_epoch_takes_the_lead() {
        // The leader (0) measured 1.0 ms, then one epoch at 1.35 ms (a
        // preempted call; not a shift). Contender 1's estimate, 1.2 ms, is
        // from an earlier epoch: it is explored again, not given the lead.
        let adapt = Adapt::new(contenders(&["binomial", "shm_read"]));
        let mut st = adapt.state.lock().unwrap();
        let mut measured = [None; MAX_CONTENDERS];
        measured[..2].copy_from_slice(&[Some(1.0e-3), Some(1.2e-3)]);
        st.conclude(&measured, 2);
        assert_eq!(st.leader, 0);
        measured[..2].copy_from_slice(&[Some(1.35e-3), None]);
        st.conclude(&measured, 2);
        assert_eq!(st.leader, 0);
        assert!(
            st.exploring.iter().any(|&(c, _)| c == 1),
            "{:?}",
            st.exploring
        );
        // Measured alongside the leader's slow epoch, it leads.
        measured[..2].copy_from_slice(&[Some(1.35e-3), Some(1.2e-3)]);
        st.conclude(&measured, 2);
        assert_eq!(st.leader, 1);
    }

    #[test]
    fn a_tie_keeps_the_selectors_choice() {
        // The other runs only its explorations (free on a tie, so one an
        // epoch), never leads.
        let picks = run(2, &["binomial", "shm_read"], 2000, |_, _| 50e-6);
        assert!(
            longest_run_of_others(&picks, 0) <= EXPLORE_CALLS_SHORT,
            "{picks:?}"
        );
        assert!(share(&picks[20..], 0) > 0.85);
    }

    #[test]
    fn the_lead_follows_the_host_when_it_changes() {
        // Chains (0) are fast until call 4000, then 5 times slower than
        // the read (1), whose speed does not change; then fast again.
        let slow = |call: usize| (4000..12_000).contains(&call);
        let picks = run(2, &["binomial", "shm_read"], 20_000, |c, call| match c {
            0 if slow(call) => 450e-6,
            0 => 35e-6,
            _ => 85e-6,
        });
        assert!(share(&picks[500..4000], 0) > 0.97);
        assert!(
            share(&picks[4100..12_000], 1) > 0.97,
            "{}",
            share(&picks[4100..12_000], 1)
        );
        // Back to the chain within a few hundred calls of the read's
        // (the loser's next exploration, within the budget).
        assert!(
            share(&picks[14_000..], 0) > 0.97,
            "{}",
            share(&picks[14_000..], 0)
        );
    }

    #[test]
    fn one_unlucky_call_does_not_send_the_faster_away() {
        // The faster contender's first timed call is preempted.
        let first = std::cell::Cell::new(true);
        let picks = run(2, &["shm_read", "binomial"], 3000, |c, _| match c {
            1 if first.replace(false) => 5000e-6,
            1 => 35e-6,
            _ => 85e-6,
        });
        // Tried again within the budget: four calls at most four times the
        // leader's 85 us cost the credit of 600 of its calls.
        let tried = picks.iter().position(|&p| p == 1).unwrap();
        let led = tried + led_from(&picks[tried..], 1, 10);
        assert!(
            led < tried + 700,
            "tried at call {tried}, led from call {led}"
        );
        assert!(share(&picks[led..], 1) > 0.98);
    }

    #[test]
    fn a_contender_dearer_to_explore_is_not_starved_by_a_cheaper_one() {
        // The chain (2) is the fastest, but its first exploration measured
        // 50 us (unlucky): exploring it again is expected to cost more than
        // exploring the read (1), at 40 us. Spent on the read whenever it
        // covered it, the credit never grew to cover the chain, which was
        // not tried again in the dev VM's jobs (a 512 KiB broadcast led by
        // binomial for 15 epochs with the chain at 18 us).
        let picks = run(
            2,
            &["binomial", "shm_read", "pipelined_chain"],
            5000,
            |c, call| match c {
                0 => 20e-6,
                1 => 40e-6,
                _ if call < 100 => 50e-6,
                _ => 15e-6,
            },
        );
        let led = led_from(&picks, 2, 50);
        assert!(led < 1000, "the fastest led from call {led}");
    }

    #[test]
    fn a_new_leader_does_not_have_a_slow_contender_explored_beyond_the_budget() {
        // Two contenders as fast as each other, give or take 15% from one
        // stretch of 100 calls to the next (the dev VM's 512 KiB
        // broadcasts: binomial and the chain), so the lead changes often;
        // a third is 4 times slower. Each new leader had the slow one
        // explored at once.
        let jitter = |c: usize, call: usize| {
            let x = ((call / 100) as u64 * 2 + c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            0.85 + 0.3 * (x >> 40) as f64 / (1u64 << 24) as f64
        };
        let time = |c: usize, call: usize| {
            if c == 2 {
                80e-6
            } else {
                20e-6 * jitter(c, call)
            }
        };
        let picks = run(
            2,
            &["binomial", "pipelined_chain", "shm_read"],
            60_000,
            time,
        );
        let slow = picks.iter().filter(|&&c| c == 2).count() as f64 * 60e-6;
        let total = picks.len() as f64 * 20e-6;
        assert!(slow / total < EXPLORE_BUDGET, "{}", slow / total);
    }

    #[test]
    fn three_contenders_settle_on_the_fastest() {
        let picks = run(
            3,
            &["binomial", "pipelined_chain", "shm_read"],
            5000,
            |c, _| [90e-6, 60e-6, 30e-6][c],
        );
        // The others run only their explorations, four calls each (short
        // calls), within the budget.
        assert!(
            share(&picks[200..], 2) > 0.97,
            "{}",
            share(&picks[200..], 2)
        );
        let extra: f64 = picks[200..].iter().map(|&p| [60e-6, 30e-6, 0.0][p]).sum();
        let total = (picks.len() - 200) as f64 * 30e-6;
        assert!(extra / total < 1.5 * EXPLORE_BUDGET, "{}", extra / total);
    }

    #[test]
    fn ranks_that_diverged_are_named() {
        let a = Adapt::new(contenders(&["binomial", "shm_read"]));
        let b = Adapt::new(contenders(&["binomial", "pipelined_chain"]));
        let mut all = Vec::new();
        for adapt in [&a, &b] {
            while let Next::Run { .. } = adapt.next() {}
            let Next::Exchange(r) = adapt.next() else {
                unreachable!()
            };
            all.extend_from_slice(&r);
        }
        let e = a.conclude(&all, &[4, 7]).unwrap_err();
        assert!(e.message.contains("ranks [7]"), "{}", e.message);
        assert!(e.message.contains("broadcast"), "{}", e.message);
    }
}
