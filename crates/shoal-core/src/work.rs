//! Asynchronous work: collectives submitted with `async_op=True` run in
//! issue order on one worker thread per process while the caller continues.
//! Synchronous calls first wait for earlier asynchronous ones, so every rank
//! executes its collectives in the order it issued them.

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
    outstanding: Arc<(Mutex<usize>, Condvar)>,
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
            outstanding: Arc::new((Mutex::new(0), Condvar::new())),
        }
    }

    /// Queues `job`; the returned work completes when it has run.
    pub fn submit(&self, job: Job) -> Arc<Work> {
        let work = Arc::new(Work::default());
        *self.outstanding.0.lock().unwrap() += 1;
        let mut sender = self.sender.lock().unwrap();
        let tx = sender.get_or_insert_with(|| self.spawn_worker());
        tx.send((job, work.clone()))
            .expect("async worker thread is gone");
        work
    }

    /// Whether every submitted job has finished.
    pub fn is_idle(&self) -> bool {
        *self.outstanding.0.lock().unwrap() == 0
    }

    /// Waits until every submitted job has finished.
    pub fn flush(&self) {
        let (count, cv) = &*self.outstanding;
        let mut n = count.lock().unwrap();
        while *n > 0 {
            n = cv.wait(n).unwrap();
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
                    let (count, cv) = &*outstanding;
                    *count.lock().unwrap() -= 1;
                    cv.notify_all();
                }
            })
            .expect("cannot start the async worker thread");
        tx
    }
}
