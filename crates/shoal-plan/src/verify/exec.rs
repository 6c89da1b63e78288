//! Symbolic execution of all ranks under rendezvous semantics.
//!
//! What an element holds is up to a [`Domain`]: by default ([`Contributions`])
//! the sorted multiset of `(rank, input index)` contributions it carries,
//! where uninitialised memory holds [`UNDEFINED`], which survives any
//! reduction it takes part in. Steps run as soon as their deps are done, a
//! Send and its receive together; since races are ruled out beforehand, the
//! order among ready steps does not change the outcome.

use super::error::{ErrorKind, Stuck, VerifyError};
use super::matching::Matches;
use super::structure::buffer_len;
use crate::plan::{Buf, CallShape, Op, Plan, Region};

/// What the symbolic values are and how a reduction combines them.
pub trait Domain {
    type Value: Clone;
    /// Input element `index` of `rank`.
    fn input(&mut self, rank: usize, index: usize) -> Self::Value;
    /// Memory nobody has written.
    fn undefined(&mut self) -> Self::Value;
    /// `acc (op) incoming`.
    fn reduce(&mut self, acc: &Self::Value, incoming: &Self::Value) -> Self::Value;
}

/// A contribution: input element `.1` of rank `.0`.
pub type Contribution = (u32, u32);
/// Sorted contributions of one element.
pub type Value = Vec<Contribution>;
/// The contribution that marks garbage.
pub const UNDEFINED: Contribution = (u32::MAX, u32::MAX);

/// Values as multisets of contributions: what the result check needs.
///
/// A value keeps at most `world + 1` contributions, plus [`UNDEFINED`] if it
/// holds garbage: a right one has one per rank, and the result check finds
/// what is wrong with a longer one within its first `world + 1` (sorted), so
/// a broken plan that keeps reducing a buffer into itself, doubling its
/// values each time, cannot grow them without bound.
pub struct Contributions {
    pub world: usize,
}

impl Domain for Contributions {
    type Value = Value;
    fn input(&mut self, rank: usize, index: usize) -> Value {
        vec![(rank as u32, index as u32)]
    }
    fn undefined(&mut self) -> Value {
        vec![UNDEFINED]
    }
    fn reduce(&mut self, acc: &Value, incoming: &Value) -> Value {
        let mut merged = [acc.as_slice(), incoming].concat();
        merged.sort_unstable();
        if merged.len() > self.world + 1 {
            let garbage = merged.last() == Some(&UNDEFINED);
            merged.truncate(self.world + 1);
            if garbage && merged.last() != Some(&UNDEFINED) {
                merged.push(UNDEFINED);
            }
        }
        merged
    }
}

/// The final buffers of one rank, indexed by [`slot`].
pub struct Memory<V = Value> {
    pub bufs: [Vec<V>; 3],
}

pub fn slot(buf: Buf) -> usize {
    match buf {
        Buf::Input => 0,
        Buf::Output => 1,
        Buf::Scratch => 2,
    }
}

impl<V: Clone> Memory<V> {
    fn new<D: Domain<Value = V>>(domain: &mut D, shape: &CallShape, plan: &Plan) -> Memory<V> {
        let len = |b| buffer_len(shape, plan, b);
        let input = (0..len(Buf::Input))
            .map(|i| domain.input(plan.rank, i))
            .collect();
        let undefined = domain.undefined();
        let garbage = |b| vec![undefined.clone(); len(b)];
        Memory {
            bufs: [input, garbage(Buf::Output), garbage(Buf::Scratch)],
        }
    }

    pub fn get(&self, buf: Buf) -> &[V] {
        &self.bufs[slot(buf)]
    }

    fn read(&self, r: Region) -> Vec<V> {
        self.bufs[slot(r.buf)][r.offset..r.end()].to_vec()
    }

    fn write<D: Domain<Value = V>>(
        &mut self,
        domain: &mut D,
        r: Region,
        values: Vec<V>,
        reduce: bool,
    ) {
        let dst = &mut self.bufs[slot(r.buf)][r.offset..r.end()];
        for (d, v) in dst.iter_mut().zip(values) {
            *d = if reduce { domain.reduce(d, &v) } else { v };
        }
    }
}

/// Runs every plan to completion and returns the final memories, or the
/// steps that deadlock.
pub fn run<D: Domain>(
    domain: &mut D,
    shape: &CallShape,
    plans: &[Plan],
    matches: &Matches,
) -> Result<Vec<Memory<D::Value>>, VerifyError> {
    let mut sched = Scheduler::new(plans);
    let mut mem: Vec<Memory<D::Value>> = plans
        .iter()
        .map(|p| Memory::new(domain, shape, p))
        .collect();
    // Posted shared-memory reads and Releases, retried once nothing else is ready.
    let mut waiting: Vec<(usize, usize)> = Vec::new();
    let mut reads_done: Vec<Vec<u32>> = plans.iter().map(|p| vec![0; p.steps.len()]).collect();
    loop {
        let Some((r, i)) = sched.ready.pop() else {
            let before = waiting.len();
            waiting.retain(|&(r, i)| {
                !try_shared(
                    domain,
                    plans,
                    matches,
                    &mut mem,
                    &mut sched,
                    &mut reads_done,
                    (r, i),
                )
            });
            if waiting.len() == before {
                break;
            }
            continue;
        };
        match plans[r].steps[i].op {
            Op::Copy { src, dst } | Op::Reduce { src, dst } => {
                let reduce = matches!(plans[r].steps[i].op, Op::Reduce { .. });
                let values = mem[r].read(src);
                mem[r].write(domain, dst, values, reduce);
                sched.complete(r, i);
            }
            Op::Expose { .. } => sched.complete(r, i),
            Op::PeerRead { .. } | Op::PeerReadReduce { .. } | Op::Release { .. } => {
                sched.posted[r][i] = true;
                if !try_shared(
                    domain,
                    plans,
                    matches,
                    &mut mem,
                    &mut sched,
                    &mut reads_done,
                    (r, i),
                ) {
                    waiting.push((r, i));
                }
            }
            _ => {
                sched.posted[r][i] = true;
                let (p, j) = matches.partner(r, i).expect("matched before running");
                if sched.posted[p][j] {
                    transfer(domain, plans, &mut mem, (r, i), (p, j));
                    sched.complete(r, i);
                    sched.complete(p, j);
                }
            }
        }
    }
    if sched.remaining > 0 {
        return Err(VerifyError::global(ErrorKind::Deadlock {
            stuck: sched.stuck(plans, matches),
        }));
    }
    Ok(mem)
}

/// Runs a posted shared-memory step if it can go: a read once its peer's
/// Expose is done (the owner's memory cannot change until the Release, which
/// waits for this read), a Release once all its reads are. `reads_done`
/// counts finished reads per Expose step.
fn try_shared<D: Domain>(
    domain: &mut D,
    plans: &[Plan],
    matches: &Matches,
    mem: &mut [Memory<D::Value>],
    sched: &mut Scheduler,
    reads_done: &mut [Vec<u32>],
    (r, i): (usize, usize),
) -> bool {
    let op = &plans[r].steps[i].op;
    if let Op::Release { flag, reads } = *op {
        let expose = matches.exposures[r][&flag].expose;
        if reads_done[r][expose] < reads {
            return false;
        }
        sched.complete(r, i);
        return true;
    }
    let (peer, flag, offset, dst, reduce) = op.read_peer().expect("a shared-memory read");
    let e = matches.exposures[peer][&flag];
    if !sched.done[peer][e.expose] {
        return false;
    }
    let values = mem[peer].read(e.src.sub(offset, dst.len));
    mem[r].write(domain, dst, values, reduce);
    reads_done[peer][e.expose] += 1;
    sched.complete(r, i);
    true
}

/// Moves a message between the two ends, whichever is the sender.
fn transfer<D: Domain>(
    domain: &mut D,
    plans: &[Plan],
    mem: &mut [Memory<D::Value>],
    a: (usize, usize),
    b: (usize, usize),
) {
    let (send, recv) = match plans[a.0].steps[a.1].op {
        Op::Send { .. } => (a, b),
        _ => (b, a),
    };
    let Op::Send { src, .. } = plans[send.0].steps[send.1].op else {
        unreachable!("matched to a Send")
    };
    let values = mem[send.0].read(src);
    match plans[recv.0].steps[recv.1].op {
        Op::Recv { dst, .. } => mem[recv.0].write(domain, dst, values, false),
        Op::RecvReduce { dst, .. } => mem[recv.0].write(domain, dst, values, true),
        _ => unreachable!("matched to a receive"),
    }
}

/// Which steps are ready, posted and done.
struct Scheduler {
    ready: Vec<(usize, usize)>,
    waiting: Vec<Vec<usize>>,
    dependents: Vec<Vec<Vec<usize>>>,
    posted: Vec<Vec<bool>>,
    done: Vec<Vec<bool>>,
    remaining: usize,
}

impl Scheduler {
    fn new(plans: &[Plan]) -> Scheduler {
        let mut s = Scheduler {
            ready: Vec::new(),
            waiting: Vec::new(),
            dependents: Vec::new(),
            posted: Vec::new(),
            done: Vec::new(),
            remaining: plans.iter().map(|p| p.steps.len()).sum(),
        };
        for (r, plan) in plans.iter().enumerate() {
            let n = plan.steps.len();
            let mut dependents = vec![Vec::new(); n];
            for (i, step) in plan.steps.iter().enumerate() {
                for &d in &step.deps {
                    dependents[d].push(i);
                }
                if step.deps.is_empty() {
                    s.ready.push((r, i));
                }
            }
            s.waiting
                .push(plan.steps.iter().map(|st| st.deps.len()).collect());
            s.dependents.push(dependents);
            s.posted.push(vec![false; n]);
            s.done.push(vec![false; n]);
        }
        s
    }

    fn complete(&mut self, r: usize, i: usize) {
        self.done[r][i] = true;
        self.remaining -= 1;
        for k in 0..self.dependents[r][i].len() {
            let d = self.dependents[r][i][k];
            self.waiting[r][d] -= 1;
            if self.waiting[r][d] == 0 {
                self.ready.push((r, d));
            }
        }
    }

    /// Posted messages whose partner is not posted: the frontier of the deadlock.
    fn stuck(&self, plans: &[Plan], matches: &Matches) -> Vec<Stuck> {
        const SHOWN: usize = 8;
        let mut out = Vec::new();
        for (r, plan) in plans.iter().enumerate() {
            for (i, step) in plan.steps.iter().enumerate() {
                if !self.posted[r][i] || self.done[r][i] || out.len() == SHOWN {
                    continue;
                }
                // A Release waits on its own reads, named by its Expose.
                let (p, j) = matches.partner(r, i).unwrap_or((r, i));
                let partner_waits_on = plans[p].steps[j]
                    .deps
                    .iter()
                    .copied()
                    .filter(|&d| !self.done[p][d])
                    .collect();
                out.push(Stuck {
                    rank: r,
                    step: i,
                    op: step.op.clone(),
                    partner: (p, j),
                    partner_waits_on,
                });
            }
        }
        out
    }
}
