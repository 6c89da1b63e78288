//! A futex-backed doorbell: a counter that producers bump ("ring") and a
//! consumer sleeps on. It can live in process-private memory (tcp's I/O
//! threads ring it) or in a shared segment (shm peers in other processes ring
//! it), so one `wait` can sleep on activity of both transports at once.

use std::any::Any;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::Result;

/// Two words: the ring counter and the number of sleepers. Ringers only make
/// the futex syscall when somebody sleeps, so ringing an idle bell is two
/// atomic operations.
#[repr(C, align(64))]
#[derive(Default)]
pub struct BellWords {
    seq: AtomicU32,
    sleepers: AtomicU32,
    /// Threads in `wait_for_sleeper`, so `sleep` only wakes them if there are any.
    standing_by: AtomicU32,
}

/// A handle on a doorbell; clones ring and wait on the same counter.
#[derive(Clone)]
pub struct Doorbell {
    words: *const BellWords,
    /// Keeps the memory behind `words` alive (a heap box or a shm mapping).
    _owner: Arc<dyn Any + Send + Sync>,
}

// SAFETY: `words` points at atomics kept alive by `_owner`; all access is atomic.
unsafe impl Send for Doorbell {}
unsafe impl Sync for Doorbell {}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A doorbell in private heap memory.
    pub fn new() -> Doorbell {
        let owner: Arc<BellWords> = Arc::new(BellWords::default());
        let words = Arc::as_ptr(&owner);
        Doorbell {
            words,
            _owner: owner,
        }
    }

    /// A doorbell at `words` (e.g. inside a shared mapping) kept alive by `owner`.
    ///
    /// # Safety
    /// `words` must point at a `BellWords` valid as long as `owner` lives.
    pub(crate) unsafe fn at(
        words: *const BellWords,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Doorbell {
        Doorbell {
            words,
            _owner: owner,
        }
    }

    fn words(&self) -> &BellWords {
        // SAFETY: see the struct invariant.
        unsafe { &*self.words }
    }

    /// Whether a thread is asleep on the bell right now.
    pub fn has_sleepers(&self) -> bool {
        self.words().sleepers.load(Ordering::SeqCst) != 0
    }

    /// The current counter; pass it to [`Doorbell::sleep`] to sleep only if
    /// nothing rang since.
    pub fn seq(&self) -> u32 {
        self.words().seq.load(Ordering::SeqCst)
    }

    /// Signals that something changed; wakes sleepers.
    pub fn ring(&self) {
        let w = self.words();
        w.seq.fetch_add(1, Ordering::SeqCst);
        if w.sleepers.load(Ordering::SeqCst) != 0 {
            futex_wake(&w.seq);
        }
    }

    /// Sleeps until a thread goes to sleep on the bell, or `timeout` passes.
    /// An I/O thread that leaves the work to a polling rank waits here, so
    /// that it resumes as soon as the rank stops polling to sleep.
    pub fn wait_for_sleeper(&self, timeout: Duration) {
        let w = self.words();
        w.standing_by.fetch_add(1, Ordering::SeqCst);
        if w.sleepers.load(Ordering::SeqCst) == 0 {
            futex_wait(&w.sleepers, 0, timeout);
        }
        w.standing_by.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sleeps until the counter differs from `seen` or `timeout` passes.
    pub fn sleep(&self, seen: u32, timeout: Duration) {
        let w = self.words();
        w.sleepers.fetch_add(1, Ordering::SeqCst);
        // Threads that stand by while the rank polls (see `wait_for_sleeper`) take over now.
        if w.standing_by.load(Ordering::SeqCst) != 0 {
            futex_wake(&w.sleepers);
        }
        if w.seq.load(Ordering::SeqCst) == seen {
            futex_wait(&w.seq, seen, timeout);
        }
        w.sleepers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Spin budget before sleeping: long enough to catch a reply that crosses a
/// network stack (the spin yields, so peers sharing a core still run), short
/// enough not to burn a core through a long wait. Measured on the testbed
/// (2 vCPUs): 500 us against 30 us took 8-byte allreduces from 28-44 to 15 us
/// at 2 ranks over TCP, 138-187 to 123-130 us at 4 ranks and 520-535 to
/// 492-508 us at 8 ranks on 4 hosts; shared memory unchanged or better.
const SPIN: Duration = Duration::from_micros(500);
/// Longest single futex sleep, so liveness checks still run while idle.
const NAP: Duration = Duration::from_millis(20);
/// How long a wait spins before it calls this thread's long-wait hook.
const LONG_WAIT: Duration = Duration::from_micros(20);

thread_local! {
    /// Called once, then cleared, where a wait of this thread has spun for
    /// [`LONG_WAIT`] or is about to sleep (see [`with_long_wait_hook`]).
    static ON_LONG_WAIT: Cell<Option<fn()>> = const { Cell::new(None) };
}

/// Runs `f` on this thread with `on_long_wait` called, once, where one of
/// its waits has spun for [`LONG_WAIT`] without an answer or is about to
/// sleep. The Python binding runs small calls holding the GIL and releases
/// it there: releasing and retaking it costs more than such a call's usual
/// wait, yet a long wait must not keep other Python threads out.
pub fn with_long_wait_hook<T>(on_long_wait: fn(), f: impl FnOnce() -> T) -> T {
    /// Clears the hook however `f` ends.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            ON_LONG_WAIT.set(None);
        }
    }
    ON_LONG_WAIT.set(Some(on_long_wait));
    let _clear = Clear;
    f()
}

/// Calls (and clears) this thread's long-wait hook, if it has one: for a
/// wait elsewhere (a lock another thread holds) that may be long.
pub fn long_wait_begins() {
    if let Some(hook) = ON_LONG_WAIT.take() {
        hook();
    }
}

/// How a waiting rank spends its spin budget before it sleeps on its bell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spin {
    /// `sched_yield` between polls: an I/O thread or a peer sharing this
    /// core may be the one that has to run for `poll` to see progress.
    Yielding,
    /// Polls back to back, as OpenMPI's shared memory does: each yield is a
    /// system call (about a microsecond in a VM) that a rank with a core
    /// of its own gains nothing from.
    Busy,
    /// Busy for the first [`BUSY_FIRST`], then yielding: a small call's
    /// answer, which comes within a microsecond or two, is seen without a
    /// system call in the way, and a long wait still lets others run.
    BusyFirst,
}

/// How long a [`Spin::BusyFirst`] wait polls back to back before it yields.
pub const BUSY_FIRST: Duration = Duration::from_micros(5);

impl Spin {
    /// How long a wait polls back to back before it yields between polls.
    fn busy_for(self) -> Duration {
        match self {
            Spin::Yielding => Duration::ZERO,
            Spin::BusyFirst => BUSY_FIRST,
            Spin::Busy => Duration::MAX,
        }
    }
}

/// `SHOAL_WAIT`: how the shared-memory transport's waits spin.
///
/// `auto` is the default. On the quiet 2-vCPU VM, 8-byte calls at 2 ranks
/// waited out their peer's answer in a `sched_yield` system call when
/// yielding from the first poll: allreduces took 0.80-0.84 us yielding
/// against 0.57-0.59 busy first (docs/benchmarks.md). A wait only spins
/// busily for its first [`BUSY_FIRST`], so the whole-wait spinning that
/// measured worse on the same VM under load (8-byte allreduces: a median
/// 0.7-0.8 ms yielding, 1.1-1.8 ms busy, at load 13-16) is `spin` alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WaitPolicy {
    /// Busy for the first [`BUSY_FIRST`] of a wait, then yielding, while
    /// the host's ranks fit its cores; yielding from the start once they
    /// outnumber them (a busy rank then holds the core its peer needs).
    #[default]
    Auto,
    /// Always busy.
    Spin,
    /// Always yielding.
    Yield,
}

impl WaitPolicy {
    /// `auto`, `spin` or `yield`; `None` for anything else.
    pub fn parse(text: &str) -> Option<WaitPolicy> {
        match text {
            "auto" => Some(WaitPolicy::Auto),
            "spin" => Some(WaitPolicy::Spin),
            "yield" => Some(WaitPolicy::Yield),
            _ => None,
        }
    }

    /// How a rank of a host running `local_ranks` ranks on `cpus` logical
    /// CPUs spins.
    pub fn spin(self, local_ranks: usize, cpus: usize) -> Spin {
        match self {
            WaitPolicy::Auto if !crate::shm::oversubscribed(local_ranks, cpus) => Spin::BusyFirst,
            WaitPolicy::Auto | WaitPolicy::Yield => Spin::Yielding,
            WaitPolicy::Spin => Spin::Busy,
        }
    }
}

/// The shared `Transport::wait` loop: spins on `poll` briefly, yielding,
/// then sleeps on `bell`. `poll` moves data and checks peers; it returns
/// whether anything changed. Returns once something changed, the bell rang,
/// or `timeout` passed.
pub(crate) fn wait_on(
    bell: &Doorbell,
    timeout: Duration,
    poll: impl FnMut() -> Result<bool>,
) -> Result<()> {
    wait_on_napping(bell, timeout, NAP, Spin::Yielding, poll)
}

/// [`wait_on`] spinning as `spin` says.
pub(crate) fn wait_on_spinning(
    bell: &Doorbell,
    timeout: Duration,
    spin: Spin,
    poll: impl FnMut() -> Result<bool>,
) -> Result<()> {
    wait_on_napping(bell, timeout, NAP, spin, poll)
}

/// [`wait_on`] with sleeps of at most `nap`: short for a side nobody rings
/// (UCX progresses only when polled), so its messages are seen promptly.
/// Calls this thread's long-wait hook once it has spun for [`LONG_WAIT`],
/// or before it sleeps.
pub(crate) fn wait_on_napping(
    bell: &Doorbell,
    timeout: Duration,
    nap: Duration,
    spin: Spin,
    mut poll: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let spun = start.elapsed();
        if spun >= SPIN.min(timeout) {
            break;
        }
        if spun >= LONG_WAIT {
            long_wait_begins();
        }
        if poll()? {
            return Ok(());
        }
        std::hint::spin_loop();
        if spun >= spin.busy_for() {
            std::thread::yield_now();
        }
    }
    long_wait_begins();
    loop {
        let seen = bell.seq();
        if poll()? {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        bell.sleep(seen, (deadline - now).min(nap));
        if bell.seq() != seen {
            poll()?;
            return Ok(());
        }
    }
}

fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: plain futex syscall on a live atomic; a shared (non-private)
    // futex so wakers in other processes mapping the same page reach us.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: see futex_wait.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0,
            0,
            0,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_calls_the_long_wait_hook_once_and_only_when_long() {
        use std::sync::atomic::AtomicUsize;
        static CALLED: AtomicUsize = AtomicUsize::new(0);
        fn hook() {
            CALLED.fetch_add(1, Ordering::SeqCst);
        }
        let bell = Doorbell::new();
        let answered = |spins: u32| {
            let mut polls = 0;
            move || {
                polls += 1;
                Ok(polls > spins)
            }
        };
        // Answered at once: the hook is not called, and is gone afterwards.
        with_long_wait_hook(hook, || wait_on(&bell, Duration::from_secs(1), answered(0))).unwrap();
        assert_eq!(CALLED.load(Ordering::SeqCst), 0);
        // Never answered: the hook runs once, though the wait spins and sleeps.
        let never = || Ok(false);
        with_long_wait_hook(hook, || wait_on(&bell, Duration::from_millis(30), never)).unwrap();
        with_long_wait_hook(hook, || wait_on(&bell, Duration::from_micros(5), never)).unwrap();
        assert_eq!(CALLED.load(Ordering::SeqCst), 2);
        wait_on(&bell, Duration::from_millis(1), never).unwrap();
        assert_eq!(CALLED.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_wait_spins_busily_only_while_the_ranks_fit_the_cores() {
        let auto = WaitPolicy::parse("auto").unwrap();
        assert_eq!(WaitPolicy::default(), auto);
        assert_eq!(auto.spin(2, 2), Spin::BusyFirst);
        assert_eq!(auto.spin(4, 2), Spin::Yielding);
        assert_eq!(WaitPolicy::parse("spin").unwrap().spin(4, 2), Spin::Busy);
        assert_eq!(
            WaitPolicy::parse("yield").unwrap().spin(2, 2),
            Spin::Yielding
        );
        assert_eq!(WaitPolicy::parse("busy"), None);
    }

    #[test]
    fn ring_wakes_sleeper() {
        let bell = Doorbell::new();
        let b2 = bell.clone();
        let seen = bell.seq();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            b2.ring();
        });
        let t0 = Instant::now();
        bell.sleep(seen, Duration::from_secs(5));
        assert!(t0.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
    }
}
