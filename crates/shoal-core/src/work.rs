//! Asynchronous work: collectives submitted with `async_op=True` run in
//! issue order on one worker thread per process while the caller continues.
//! Synchronous calls first wait for earlier asynchronous ones, so every rank
//! executes its collectives in the order it issued them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};

/// The completion of one submitted collective.
#[derive(Default)]
pub struct Work {
    result: Mutex<Option<Result<()>>>,
    done: Condvar,
}

impl Work {
    fn finish(&self, r: Result<()>) {
        *self.result.lock().unwrap() = Some(r);
        self.done.notify_all();
    }

    pub fn is_completed(&self) -> bool {
        self.result.lock().unwrap().is_some()
    }

    /// Blocks until the collective finishes (or `timeout` passes) and returns its outcome.
    /// A timeout too long for a deadline is no limit.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut guard = self.result.lock().unwrap();
        loop {
            if let Some(r) = guard.as_ref() {
                return r.clone();
            }
            guard = match deadline {
                None => self.done.wait(guard).unwrap(),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(Error::new(ErrorKind::Timeout, "work.wait() timed out"));
                    }
                    self.done.wait_timeout(guard, left).unwrap().0
                }
            };
        }
    }
}

type Job = Box<dyn FnOnce() -> Result<()> + Send>;
type Queued = (Job, Arc<Work>);

/// One worker thread and the count of jobs it has not finished.
pub struct AsyncQueue {
    sender: Mutex<Option<mpsc::Sender<Queued>>>,
    outstanding: Arc<Outstanding>,
}

/// The jobs not finished: counted under the lock the worker notifies
/// through, and mirrored in an atomic, so that a caller with no asynchronous
/// work (most blocking calls) checks it without the lock.
#[derive(Default)]
struct Outstanding {
    count: Mutex<usize>,
    finished: Condvar,
    any: AtomicUsize,
}

impl Outstanding {
    fn add(&self, n: isize) {
        let mut count = self.count.lock().unwrap();
        *count = count
            .checked_add_signed(n)
            .expect("more jobs finished than submitted");
        self.any.store(*count, Ordering::Release);
        if *count == 0 {
            self.finished.notify_all();
        }
    }
}

impl Default for AsyncQueue {
    fn default() -> Self {
        AsyncQueue::new()
    }
}

impl AsyncQueue {
    pub fn new() -> AsyncQueue {
        AsyncQueue {
            sender: Mutex::new(None),
            outstanding: Arc::default(),
        }
    }

    /// Queues `job`; the returned work completes when it has run.
    pub fn submit(&self, job: Job) -> Arc<Work> {
        let work = Arc::new(Work::default());
        self.outstanding.add(1);
        let mut sender = self.sender.lock().unwrap();
        let tx = sender.get_or_insert_with(|| self.spawn_worker());
        tx.send((job, work.clone()))
            .expect("async worker thread is gone");
        work
    }

    /// Whether every submitted job has finished.
    pub fn is_idle(&self) -> bool {
        self.outstanding.any.load(Ordering::Acquire) == 0
    }

    /// Waits until every submitted job has finished.
    pub fn flush(&self) {
        if self.is_idle() {
            return;
        }
        let o = &*self.outstanding;
        let mut n = o.count.lock().unwrap();
        while *n > 0 {
            n = o.finished.wait(n).unwrap();
        }
    }

    fn spawn_worker(&self) -> mpsc::Sender<Queued> {
        let (tx, rx) = mpsc::channel::<Queued>();
        let outstanding = self.outstanding.clone();
        thread::Builder::new()
            .name("shoal-async".into())
            .spawn(move || {
                for (job, work) in rx {
                    work.finish(job());
                    outstanding.add(-1);
                }
            })
            .expect("cannot start the async worker thread");
        tx
    }
}
