//! The trace of one rank: every executed plan step and every call, as
//! Chrome/Perfetto "X" (complete) events with `pid` = rank and `tid` = a
//! lane, buffered in memory and written to `DIR/rank-<rank>.json` by a
//! writer thread, so a call only hands its events over.
//!
//! Steps of one call overlap (sends and receives are in flight together),
//! and events on one Chrome thread must nest, so each step takes the lowest
//! lane free when it is posted and frees it when it completes. Lane 0 holds
//! the calls. The file is a JSON array kept valid at every write: each
//! flush overwrites the closing bracket, so a crash leaves everything up to
//! the last flush readable.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shoal_transport::CallSig;

use super::clock::ClockOffset;
use super::json::Obj;
use crate::error::{sig_dtype, sig_names, Error, Result};

/// The writer thread writes once this many events are buffered...
const FLUSH_EVENTS: usize = 1 << 14;
/// ...or this long after its last write.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
const FOOTER: &[u8] = b"\n]\n";

/// What a plan step does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    Send,
    Recv,
    RecvReduce,
    Copy,
    Reduce,
    Expose,
    PeerRead,
    PeerReadReduce,
    Release,
}

impl StepKind {
    pub fn name(self) -> &'static str {
        match self {
            StepKind::Send => "send",
            StepKind::Recv => "recv",
            StepKind::RecvReduce => "recv_reduce",
            StepKind::Copy => "copy",
            StepKind::Reduce => "reduce",
            StepKind::Expose => "expose",
            StepKind::PeerRead => "peer_read",
            StepKind::PeerReadReduce => "peer_read_reduce",
            StepKind::Release => "release",
        }
    }
}

/// Times in nanoseconds since the tracing origin.
enum Event {
    Call {
        sig: CallSig,
        comm: u32,
        seq: u32,
        start: u64,
        dur: u64,
        steps: u32,
        blocked: u64,
        failed: bool,
    },
    Step {
        sig: CallSig,
        seq: u32,
        step: u32,
        kind: StepKind,
        /// Global rank.
        peer: Option<usize>,
        bytes: usize,
        start: u64,
        dur: u64,
        blocked: u64,
        lane: u32,
    },
    Ina {
        start: u64,
        dur: u64,
        bytes: usize,
        ok: bool,
        wire: shoal_ina::CallStats,
    },
}

pub struct Recorder {
    origin: Instant,
    shared: Arc<Shared>,
    /// Writes the buffered events every second (or once many wait), so the
    /// calls only hand their events over.
    writer: Option<JoinHandle<()>>,
}

/// What the calls and the writer thread share. Lock order: `file`, then `pending`.
struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    file: Mutex<TraceFile>,
}

#[derive(Default)]
struct Pending {
    events: Vec<Event>,
    stop: bool,
}

/// The trace file and what writing it remembers.
struct TraceFile {
    rank: usize,
    path: PathBuf,
    file: File,
    /// Lanes named so far (a `thread_name` metadata event each).
    lanes_named: u32,
    /// A failed write is reported once, then tracing stops.
    broken: bool,
    names: Names,
}

impl Recorder {
    /// Creates `dir/rank-<rank>.json` with its metadata: the rank and the
    /// clock offset to rank 0 that `shoal trace merge` applies.
    pub fn create(
        dir: &Path,
        rank: usize,
        world: usize,
        origin: Instant,
        clock: ClockOffset,
    ) -> Result<Recorder> {
        let failed = |what: &str, e: std::io::Error| {
            Error::runtime(format!("SHOAL_TRACE={}: cannot {what}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| failed("create the directory", e))?;
        let path = dir.join(format!("rank-{rank}.json"));
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| failed(&format!("create {}", path.display()), e))?;
        let unix_origin = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(origin.elapsed());
        let pid = rank as u64;
        let mut header = String::from("[");
        let meta = |out: &mut String, name: &str, args: &dyn Fn(Obj<'_>) -> Obj<'_>| {
            Obj::open(out)
                .str("name", name)
                .str("ph", "M")
                .int("pid", pid)
                .int("tid", 0)
                .obj("args", args)
                .close();
            out.push_str(",\n");
        };
        meta(&mut header, "process_name", &|a| {
            a.str("name", &format!("rank {rank}"))
        });
        meta(&mut header, "process_sort_index", &|a| {
            a.int("sort_index", pid)
        });
        meta(&mut header, "thread_name", &|a| a.str("name", "calls"));
        meta(&mut header, "shoal_clock", &|a| {
            a.int("rank", pid)
                .int("world", world as u64)
                .signed("offset_ns", clock.offset_ns)
                .int("rtt_ns", clock.rtt_ns)
                .int("origin_unix_us", unix_origin.as_micros() as u64)
        });
        header.truncate(header.len() - 2); // the last ",\n"
        header.push_str(std::str::from_utf8(FOOTER).unwrap());
        file.write_all(header.as_bytes())
            .map_err(|e| failed(&format!("write {}", path.display()), e))?;
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            file: Mutex::new(TraceFile {
                rank,
                path,
                file,
                lanes_named: 0,
                broken: false,
                names: Names::default(),
            }),
        });
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("shoal-trace".into())
                .spawn(move || write_until_stopped(&shared))
                .map_err(|e| failed("start the trace writer thread", e))?
        };
        Ok(Recorder {
            origin,
            shared,
            writer: Some(writer),
        })
    }

    /// A timer for one call's steps.
    pub fn call(&self, sig: CallSig, comm: u32, seq: u32, steps: usize) -> StepTimer<'_> {
        StepTimer {
            rec: self,
            sig,
            comm,
            seq,
            start: self.now(),
            posted: vec![(0, 0, 0); steps],
            busy: Vec::new(),
            blocked: 0,
            events: Vec::with_capacity(steps + 1),
        }
    }

    /// Records an allreduce through the switch that began at `start` (see [`Recorder::now`]).
    pub fn ina(&self, start: u64, bytes: usize, ok: bool, wire: shoal_ina::CallStats) {
        let dur = self.now().saturating_sub(start);
        self.add(vec![Event::Ina {
            start,
            dur,
            bytes,
            ok,
            wire,
        }]);
    }

    /// Nanoseconds since the origin.
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn add(&self, mut events: Vec<Event>) {
        let mut pending = self.shared.pending.lock().unwrap();
        if pending.events.is_empty() {
            std::mem::swap(&mut pending.events, &mut events);
        } else {
            pending.events.append(&mut events);
        }
        if pending.events.len() >= FLUSH_EVENTS {
            self.shared.wake.notify_one();
        }
    }

    /// Writes every buffered event now.
    pub fn flush(&self) {
        self.shared.write_pending();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.shared.pending.lock().unwrap().stop = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        self.flush();
    }
}

/// The writer thread: every `FLUSH_EVERY`, or when woken, writes what is pending.
fn write_until_stopped(shared: &Shared) {
    loop {
        {
            let pending = shared.pending.lock().unwrap();
            let (pending, _) = shared
                .wake
                .wait_timeout_while(pending, FLUSH_EVERY, |p| {
                    !p.stop && p.events.len() < FLUSH_EVENTS
                })
                .unwrap();
            if pending.stop {
                return;
            }
        }
        shared.write_pending();
    }
}

impl Shared {
    fn write_pending(&self) {
        let mut file = self.file.lock().unwrap();
        let events = std::mem::take(&mut self.pending.lock().unwrap().events);
        file.write(&events);
    }
}

impl TraceFile {
    fn write(&mut self, events: &[Event]) {
        if self.broken || events.is_empty() {
            return;
        }
        let mut text = String::new();
        for e in events {
            if let Event::Step { lane, .. } = e {
                while self.lanes_named < *lane {
                    self.lanes_named += 1;
                    text.push_str(",\n");
                    thread_name(&mut text, self.rank, self.lanes_named);
                }
            }
            text.push_str(",\n");
            render(&mut text, self.rank, e, &mut self.names);
        }
        text.push_str(std::str::from_utf8(FOOTER).unwrap());
        // Over the closing bracket, so the file stays a valid JSON array.
        let written = self
            .file
            .seek(SeekFrom::End(-(FOOTER.len() as i64)))
            .and_then(|_| self.file.write_all(text.as_bytes()));
        if let Err(e) = written {
            self.broken = true;
            tracing::error!(
                "SHOAL_TRACE: writing {} failed, tracing stops: {e}",
                self.path.display()
            );
        }
    }
}

fn thread_name(out: &mut String, rank: usize, lane: u32) {
    Obj::open(out)
        .str("name", "thread_name")
        .str("ph", "M")
        .int("pid", rank as u64)
        .int("tid", lane as u64)
        .obj("args", |a| a.str("name", &format!("steps {lane}")))
        .close();
}

/// The collective and algorithm names of signatures seen before (finding
/// an algorithm by id hashes names, too slow for every event).
#[derive(Default)]
struct Names(Vec<(SigKey, CallNames)>);

/// A signature's collective kind and algorithm id.
type SigKey = (u8, u32);
/// The collective's and the algorithm's names.
type CallNames = (&'static str, &'static str);

impl Names {
    fn of(&mut self, sig: &CallSig) -> CallNames {
        let key = (sig.kind, sig.algo);
        if let Some(&(_, names)) = self.0.iter().find(|(k, _)| *k == key) {
            return names;
        }
        let names = sig_names(sig);
        self.0.push((key, names));
        names
    }
}

/// A complete ("X") event's fields; its args follow.
fn complete<'o>(
    out: &'o mut String,
    rank: usize,
    name: &str,
    cat: &str,
    start: u64,
    dur: u64,
    tid: u32,
) -> Obj<'o> {
    Obj::open(out)
        .str("name", name)
        .str("cat", cat)
        .str("ph", "X")
        .micros("ts", start)
        .micros("dur", dur)
        .int("pid", rank as u64)
        .int("tid", tid as u64)
}

/// Appends one event as a trace line to `out`.
fn render(out: &mut String, rank: usize, e: &Event, names: &mut Names) {
    let x = |out, name, cat, start, dur, tid| complete(out, rank, name, cat, start, dur, tid);
    match e {
        Event::Call {
            sig,
            comm,
            seq,
            start,
            dur,
            steps,
            blocked,
            failed,
        } => {
            let (collective, algorithm) = names.of(sig);
            x(out, collective, "call", *start, *dur, 0)
                .obj("args", |a| {
                    a.str("collective", collective)
                        .str("algorithm", algorithm)
                        .int("comm", *comm as u64)
                        .int("seq", *seq as u64)
                        .int("count", sig.count)
                        .str("dtype", sig_dtype(sig))
                        .int("steps", *steps as u64)
                        .micros("blocked_us", *blocked)
                        .str("status", if *failed { "failed" } else { "ok" })
                })
                .close();
        }
        Event::Step {
            sig,
            seq,
            step,
            kind,
            peer,
            bytes,
            start,
            dur,
            blocked,
            lane,
        } => {
            let (collective, algorithm) = names.of(sig);
            x(out, kind.name(), "step", *start, *dur, *lane)
                .obj("args", |a| {
                    let a = a
                        .str("collective", collective)
                        .str("algorithm", algorithm)
                        .int("seq", *seq as u64)
                        .int("step", *step as u64)
                        .str("kind", kind.name());
                    let a = match peer {
                        Some(p) => a.int("peer", *p as u64),
                        None => a,
                    };
                    a.int("bytes", *bytes as u64).micros("blocked_us", *blocked)
                })
                .close();
        }
        Event::Ina {
            start,
            dur,
            bytes,
            ok,
            wire,
        } => {
            let windows: Vec<String> = wire.windows.iter().map(usize::to_string).collect();
            x(out, "ina allreduce", "ina", *start, *dur, 0)
                .obj("args", |a| {
                    a.int("bytes", *bytes as u64)
                        .str("status", if *ok { "ok" } else { "failed" })
                        .int("packets", wire.packets)
                        .int("retransmitted", wire.retransmitted)
                        .int("timeouts", wire.timeouts)
                        .int("ecn_marked", wire.marked)
                        .str("windows", &windows.join(","))
                })
                .close();
        }
    }
}

/// Times the steps of one call; handed to the recorder when the call ends.
pub struct StepTimer<'a> {
    rec: &'a Recorder,
    sig: CallSig,
    comm: u32,
    seq: u32,
    start: u64,
    /// Per step: when it was posted, the blocked time then, its lane.
    posted: Vec<(u64, u64, u32)>,
    /// Lanes 1.. in use.
    busy: Vec<bool>,
    /// Time the executor spent waiting for the transport so far.
    blocked: u64,
    events: Vec<Event>,
}

impl StepTimer<'_> {
    /// The executor posts `step` now.
    pub fn posted(&mut self, step: usize) {
        let lane = match self.busy.iter().position(|b| !b) {
            Some(i) => i,
            None => {
                self.busy.push(false);
                self.busy.len() - 1
            }
        };
        self.busy[lane] = true;
        self.posted[step] = (self.rec.now(), self.blocked, lane as u32 + 1);
    }

    /// `step` completed now.
    pub fn completed(&mut self, step: usize, kind: StepKind, peer: Option<usize>, bytes: usize) {
        let (start, blocked_then, lane) = self.posted[step];
        self.busy[lane as usize - 1] = false;
        self.events.push(Event::Step {
            sig: self.sig,
            seq: self.seq,
            step: step as u32,
            kind,
            peer,
            bytes,
            start,
            dur: self.rec.now().saturating_sub(start),
            blocked: self.blocked - blocked_then,
            lane,
        });
    }

    /// The executor waited `d` for the transport with nothing to do.
    pub fn blocked(&mut self, d: Duration) {
        self.blocked += d.as_nanos() as u64;
    }

    /// The call ended (`failed`: with an error); its events go to the recorder.
    pub fn finish(mut self, failed: bool) {
        let steps = self.posted.len() as u32;
        self.events.push(Event::Call {
            sig: self.sig,
            comm: self.comm,
            seq: self.seq,
            start: self.start,
            dur: self.rec.now().saturating_sub(self.start),
            steps,
            blocked: self.blocked,
            failed,
        });
        self.rec.add(self.events);
    }
}
