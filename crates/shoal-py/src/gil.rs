//! Letting the GIL go from inside a call, only once the call turns out to
//! wait: a small call (`run_in_place`) runs holding it, since releasing and
//! retaking it costs about 150 ns, more than such a call's usual wait for
//! its peers, and releases it where a wait grows long (the core calls
//! [`release`] then: `Communicator::run_collective_holding`), so other
//! Python threads never wait behind a slow peer.

use std::cell::Cell;

use pyo3::ffi;
use pyo3::Python;

thread_local! {
    /// This thread's state while [`release`] has let the GIL go.
    static RELEASED: Cell<*mut ffi::PyThreadState> = const { Cell::new(std::ptr::null_mut()) };
}

/// Lets go of the GIL this thread holds; the enclosing [`Retake`] takes it
/// back. Only to be called inside a `Retake`'s scope, by Rust code that
/// touches no Python object until then.
pub fn release() {
    // SAFETY: inside a `Retake`'s scope this thread holds the GIL (its
    // constructor proves it) and has not released it yet (the core calls
    // this once per call).
    let state = unsafe { ffi::PyEval_SaveThread() };
    RELEASED.set(state);
}

/// Takes the GIL back, when dropped, if [`release`] let it go meanwhile.
pub struct Retake(());

impl Retake {
    pub fn new(_py: Python<'_>) -> Retake {
        Retake(())
    }
}

impl Drop for Retake {
    fn drop(&mut self) {
        let state = RELEASED.replace(std::ptr::null_mut());
        if !state.is_null() {
            // SAFETY: `state` is this thread's, saved by `release`.
            unsafe { ffi::PyEval_RestoreThread(state) };
        }
    }
}
