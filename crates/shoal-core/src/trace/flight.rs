//! The flight recorder: the last calls of this rank with their state, kept
//! in a ring and dumped with the error when a call fails (timeout,
//! mismatch, peer death), like the NCCL flight recorder of torch. It tells
//! which call each rank was in, and on which step and peer it waited.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

use shoal_transport::CallSig;

use crate::error::describe_sig;

/// How many of the most recent calls go into an error's message (the log
/// gets them all).
const IN_MESSAGE: usize = 4;

/// A call the recorder was told of at its start ([`Flight::begin`]); it
/// enters the ring when it ends, under the ring's one lock of the call.
#[derive(Debug)]
pub struct FlightCall {
    comm: u32,
    seq: u32,
    sig: CallSig,
    steps: usize,
    started: CoarseTime,
}

enum State {
    Finished,
    /// Failed while these steps were pending.
    Failed(String),
}

struct Record {
    call: FlightCall,
    done: usize,
    ended: CoarseTime,
    state: State,
}

pub struct Flight {
    capacity: usize,
    ring: Mutex<VecDeque<Record>>,
}

impl Flight {
    /// Keeps the last `capacity` calls (0: off).
    pub fn new(capacity: usize) -> Flight {
        Flight {
            capacity,
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// A call of `steps` plan steps starts; `None` when the recorder is off.
    /// Nothing is locked: calls run one at a time (the engine's scratch
    /// lock), so a dump, made after the failed call ended, never finds one
    /// running, and the record is written once, by [`Flight::end`].
    pub fn begin(&self, comm: u32, seq: u32, sig: CallSig, steps: usize) -> Option<FlightCall> {
        (self.capacity > 0).then(|| FlightCall {
            comm,
            seq,
            sig,
            steps,
            started: CoarseTime::now(),
        })
    }

    /// The call ended after `done` steps; `pending` (on failure) names the
    /// steps it still waited on.
    pub fn end(&self, call: Option<FlightCall>, done: usize, pending: Option<String>) {
        let Some(call) = call else { return };
        let record = Record {
            call,
            done,
            ended: CoarseTime::now(),
            state: match pending {
                Some(p) => State::Failed(p),
                None => State::Finished,
            },
        };
        let mut ring = self.ring.lock().unwrap();
        if ring.len() == self.capacity {
            ring.pop_front();
        }
        ring.push_back(record);
    }

    /// The last `n` calls in words, oldest first, one per line; empty when off.
    pub fn dump(&self, n: usize) -> String {
        let ring = self.ring.lock().unwrap();
        let skip = ring.len().saturating_sub(n);
        let mut out = String::new();
        for r in ring.iter().skip(skip) {
            let c = &r.call;
            let _ = if c.sig.is_collective() {
                write!(out, "\n  comm {} call {}: ", c.comm, c.seq)
            } else {
                // Point-to-point "calls" are numbered by their tag.
                write!(out, "\n  comm {} tag {}: ", c.comm, c.seq & !(1 << 31))
            };
            let _ = write!(out, "{}: ", describe_sig(&c.sig));
            let took = CoarseTime::between(c.started, r.ended);
            let _ = match &r.state {
                State::Finished => write!(out, "finished, {} steps in {took}", c.steps),
                State::Failed(pending) => write!(
                    out,
                    "FAILED after {took}, {} of {} steps done, pending: {pending}",
                    r.done, c.steps
                ),
            };
        }
        out
    }

    /// The tail added to a failed call's error: its last few calls.
    pub fn error_tail(&self, rank: usize) -> String {
        if self.capacity == 0 {
            return String::new();
        }
        format!(
            "\nlast calls of rank {rank} (flight recorder, oldest first; the log has the last {}):{}",
            self.capacity,
            self.dump(IN_MESSAGE)
        )
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A reading of the kernel's coarse monotonic clock, in ns: it costs a few
/// ns (the vDSO copies the last tick's time) against 20-40 for a precise
/// reading, which every call would pay twice; it moves once a scheduler tick
/// (1-4 ms), enough to tell which call hung and for how long.
#[derive(Clone, Copy, Debug)]
struct CoarseTime(u64);

impl CoarseTime {
    fn now() -> CoarseTime {
        CoarseTime(read_clock(
            libc::CLOCK_MONOTONIC_COARSE,
            libc::clock_gettime,
        ))
    }

    /// The time from `start` to `end` in words, as precisely as the clock
    /// tells it: `12 ms`, or `under 4 ms` below its tick.
    fn between(start: CoarseTime, end: CoarseTime) -> String {
        static TICK_NS: OnceLock<u64> = OnceLock::new();
        let tick = *TICK_NS
            .get_or_init(|| read_clock(libc::CLOCK_MONOTONIC_COARSE, libc::clock_getres).max(1));
        let ns = end.0.saturating_sub(start.0);
        if ns < tick {
            format!("under {} ms", tick.div_ceil(1_000_000))
        } else {
            format!("{} ms", ns / 1_000_000)
        }
    }
}

/// `clock_gettime` or `clock_getres` of `clock`, in ns.
fn read_clock(
    clock: libc::clockid_t,
    read: unsafe extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int,
) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock exists on every
    // Linux since 2.6.32, and on failure `ts` stays zero.
    unsafe { read(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(count: u64) -> CallSig {
        CallSig {
            kind: 0,
            dtype: 0,
            op: 0,
            algo: 0,
            root: 0,
            count,
            history: 0,
        }
    }

    #[test]
    fn keeps_the_last_calls_and_says_what_the_failed_one_waited_on() {
        let f = Flight::new(3);
        for seq in 0..5 {
            let id = f.begin(0, seq, sig(seq as u64 + 10), 8);
            let pending = (seq == 4).then(|| "step 3 (recv 1 elements from rank 2)".to_string());
            f.end(id, if seq == 4 { 3 } else { 8 }, pending);
        }
        let d = f.dump(10);
        assert_eq!(d.lines().count(), 4, "{d}"); // a leading newline, then 3 calls
        assert!(!d.contains("call 1:") && d.contains("call 2:"), "{d}");
        assert!(d.contains("call 4: allreduce(count=14"), "{d}");
        assert!(
            d.contains("FAILED")
                && d.contains("3 of 8 steps done, pending: step 3 (recv 1 elements from rank 2)"),
            "{d}"
        );
        assert_eq!(f.dump(1).lines().count(), 2);
    }

    #[test]
    fn durations_are_told_as_precisely_as_the_coarse_clock_ticks() {
        let ms = |n: u64| CoarseTime(n * 1_000_000);
        let under = CoarseTime::between(ms(100), ms(100));
        assert!(
            under.starts_with("under ") && under.ends_with(" ms"),
            "{under}"
        );
        assert_eq!(CoarseTime::between(ms(100), ms(2620)), "2520 ms");
        assert!(CoarseTime::now().0 > 0);
    }

    #[test]
    fn off_records_nothing() {
        let f = Flight::new(0);
        assert!(f.begin(0, 0, sig(1), 1).is_none());
        assert_eq!(f.error_tail(0), "");
    }
}
