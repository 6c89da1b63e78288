//! What a rank did, kept for people: the trace of every executed step
//! (`SHOAL_TRACE=DIR`, Chrome/Perfetto JSON, see docs/tracing.md) and the
//! flight recorder of the last calls, dumped with an error.
//!
//! Both are per process and shared by its communicators ([`Tracing`] lives
//! in the engine). With tracing off the executor pays one branch per step;
//! the flight recorder costs two uncontended lock operations per call.

mod clock;
mod flight;
mod json;
mod recorder;

use std::path::Path;
use std::sync::OnceLock;
use std::time::Instant;

pub use clock::{measure_offset, ClockOffset, WordExchange};
pub use flight::{Flight, FlightCall};
pub use recorder::{Recorder, StepKind, StepTimer};

/// A process's tracing state.
pub struct Tracing {
    /// When trace timestamps are zero (nanoseconds since then); the clock
    /// offset to rank 0 is measured against it.
    pub origin: Instant,
    /// Installed at the end of init (so the clock measurement itself is not
    /// traced) when `SHOAL_TRACE` names a directory.
    recorder: OnceLock<Recorder>,
    pub flight: Flight,
}

impl Tracing {
    /// `flight_calls`: how many calls the flight recorder keeps (0: none).
    pub fn new(flight_calls: usize) -> Tracing {
        Tracing {
            origin: process_origin(),
            recorder: OnceLock::new(),
            flight: Flight::new(flight_calls),
        }
    }

    /// Starts writing this rank's trace under `dir` (`rank-<rank>.json`).
    pub fn start(
        &self,
        dir: &Path,
        rank: usize,
        world: usize,
        clock: ClockOffset,
    ) -> crate::Result<()> {
        let r = Recorder::create(dir, rank, world, self.origin, clock)?;
        // A second engine in one process (init after finalize) has its own Tracing.
        let _ = self.recorder.set(r);
        Ok(())
    }

    /// The recorder, when this process traces.
    pub fn recorder(&self) -> Option<&Recorder> {
        self.recorder.get()
    }

    /// Nanoseconds since [`Tracing::origin`].
    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Writes what is buffered (at finalize; a crash loses at most the last second).
    pub fn flush(&self) {
        if let Some(r) = self.recorder() {
            r.flush();
        }
    }
}

/// When this process's trace clock reads zero: its first `init` (so ranks
/// started apart have clocks apart, which the measured offsets undo).
pub fn process_origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// A call failed with `e`: its last calls go into the message's tail and,
/// all of them, into the log, and the trace is written out.
pub fn dump_flight(tracing: &Tracing, rank: usize, e: &mut crate::Error) {
    if tracing.flight.capacity() > 0 {
        tracing::error!(
            "rank {rank} failed ({:?}); its last calls (flight recorder, oldest first):{}",
            e.kind,
            tracing.flight.dump(usize::MAX)
        );
        e.message.push_str(&tracing.flight.error_tail(rank));
    }
    tracing.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_transport::CallSig;
    use std::time::Duration;

    /// What recording costs per call, writing included (docs/tracing.md
    /// quotes it): `cargo test --release -p shoal-core recording_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn recording_cost() {
        const CALLS: u32 = 200_000;
        const STEPS: usize = 5; // a 2-rank ring allreduce
        let dir = std::env::temp_dir().join(format!("shoal-trace-cost-{}", std::process::id()));
        let t = Tracing::new(64);
        t.start(&dir, 0, 2, ClockOffset::default()).unwrap();
        let sig = CallSig {
            kind: 0,
            dtype: 0,
            op: 0,
            algo: 0,
            root: 0,
            count: 262_144,
            history: 0,
        };
        let started = Instant::now();
        for seq in 0..CALLS {
            let mut timer = t.recorder().unwrap().call(sig, 0, seq, STEPS);
            for s in 0..STEPS {
                timer.posted(s);
                timer.blocked(Duration::from_nanos(10));
                timer.completed(s, StepKind::Send, Some(1), 1 << 19);
            }
            timer.finish(false);
        }
        let in_call = started.elapsed() / CALLS;
        t.flush();
        let with_writing = started.elapsed() / CALLS;
        let started = Instant::now();
        for seq in 0..CALLS {
            let id = t.flight.begin(0, seq, sig, STEPS);
            t.flight.end(id, STEPS, None);
        }
        let flight = started.elapsed() / CALLS;
        let bytes = std::fs::metadata(dir.join("rank-0.json")).unwrap().len();
        std::fs::remove_dir_all(&dir).unwrap();
        println!(
            "per call of {STEPS} steps: trace {in_call:?} in the call, {with_writing:?} with the \
             writing ({} bytes of JSON); flight recorder {flight:?}",
            bytes / CALLS as u64
        );
        assert!(with_writing < Duration::from_micros(50) && flight < Duration::from_micros(5));
    }
}
