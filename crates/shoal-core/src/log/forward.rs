//! Handing records to a host language (Python's `logging`) without ever
//! waiting for it.
//!
//! Records are made on any thread: the caller's, the async worker, TCP
//! readers. Delivering one from there would need the GIL, and a shoal
//! thread waiting for the GIL while the thread that holds it waits for that
//! shoal thread (a binding call that does not release the GIL, a handler
//! that calls into shoal) deadlocks the process. So nothing here touches
//! the host: records go into a bounded queue, and the host's own thread
//! takes them out ([`take`], which waits without the GIL) and delivers them.
//!
//! A record the queue cannot hold (the host thread is starved, or it is
//! gone: a forked child, interpreter exit) is written to stderr by the
//! caller instead: never lost, never waited for.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::Record;

/// Records waiting for the host; beyond this they go to stderr directly.
const CAPACITY: usize = 4096;

/// A record the host takes, and whether it was already written to the log
/// file (then the host need not print it when it has nowhere to send it).
pub struct Forwarded {
    pub record: Record,
    pub written: bool,
}

struct Queue {
    /// The process whose host thread takes the records (`None`: nobody).
    /// Checked per record so a forked child, which has no such thread,
    /// writes its own.
    taker: Option<u32>,
    records: VecDeque<Forwarded>,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue {
    taker: None,
    records: VecDeque::new(),
});
static ARRIVED: Condvar = Condvar::new();

/// From now on this process's records go to the host until [`detach`].
pub fn attach() {
    QUEUE.lock().unwrap().taker = Some(std::process::id());
}

/// Stops forwarding; returns the records not yet taken, and wakes a
/// [`take`] in progress so the host thread can end.
pub fn detach() -> Vec<Forwarded> {
    let mut q = QUEUE.lock().unwrap();
    q.taker = None;
    ARRIVED.notify_all();
    q.records.drain(..).collect()
}

/// Queues `record` for the host; gives it back when nobody takes records in
/// this process or the queue is full.
pub(super) fn offer(record: Record, written: bool) -> Result<(), Record> {
    let mut q = QUEUE.lock().unwrap();
    if q.taker != Some(std::process::id()) || q.records.len() >= CAPACITY {
        return Err(record);
    }
    q.records.push_back(Forwarded { record, written });
    ARRIVED.notify_one();
    Ok(())
}

/// Waits up to `timeout` for records and takes all there are; `None` once
/// detached (the host thread should end).
pub fn take(timeout: Duration) -> Option<Vec<Forwarded>> {
    let q = QUEUE.lock().unwrap();
    let (mut q, _) = ARRIVED
        .wait_timeout_while(q, timeout, |q| q.taker.is_some() && q.records.is_empty())
        .unwrap();
    q.taker?; // detached: the host thread should end
    Some(q.records.drain(..).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn record(message: &str) -> Record {
        Record {
            level: Level::INFO,
            target: "t".into(),
            message: message.into(),
            time: 0.0,
            who: None,
        }
    }

    // One test: the queue is the process's.
    #[test]
    fn records_wait_for_the_taker_and_overflow_comes_back() {
        assert!(offer(record("nobody takes"), false).is_err());
        attach();
        offer(record("one"), false).unwrap();
        let got = take(Duration::from_secs(1)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].record.message, "one");
        assert!(take(Duration::from_millis(1)).unwrap().is_empty());
        for i in 0..CAPACITY {
            offer(record(&i.to_string()), false).unwrap();
        }
        assert!(offer(record("full"), false).is_err());
        assert_eq!(detach().len(), CAPACITY);
        assert!(take(Duration::from_secs(5)).is_none());
        assert!(offer(record("detached"), false).is_err());
    }
}
