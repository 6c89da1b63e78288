//! Buffer exports held for as long as a call uses the memory.
//!
//! While an export is held, its exporter keeps the memory alive and refuses
//! to move it: a numpy array (or its base) cannot be freed or resized, a
//! bytearray cannot be resized, an mmap cannot be closed. Asynchronous calls
//! own their exports until they finish, so dropping the Python handle, the
//! arrays, or a `wait(timeout)` that expires cannot free memory the call is
//! still reading or writing.
//!
//! Releasing an export needs the GIL. The async worker finishes calls
//! without it, and taking it there would stall the next call behind
//! whatever Python code holds it (up to the 5 ms switch interval), so
//! exports dropped without the GIL wait in a list that the next shoal entry
//! point holding the GIL releases (`wait`, `is_completed`, the start of every
//! call and the end of every blocking one, `synchronize`, a handle's
//! destruction). A blocking call first waits for the asynchronous ones, so
//! once it returns no finished call holds an export.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use std::os::raw::c_int;

use pyo3::prelude::*;
use shoal_core::DType;

// The buffer protocol as the 3.9 stable ABI lacks it (see `ffi`).
mod ffi;

/// One export (`PyObject_GetBuffer`), boxed so its address stays put.
struct Export(Box<ffi::Py_buffer>);

// SAFETY: the view is only read (for its address and length) and released,
// and it is released only by a thread holding the GIL.
unsafe impl Send for Export {}

impl Export {
    /// # Safety
    /// The calling thread must hold the GIL.
    unsafe fn release(mut self) {
        ffi::PyBuffer_Release(&mut *self.0);
    }
}

/// Exports dropped by threads without the GIL, and whether there are any
/// (so that the common case costs one atomic load).
static DEFERRED: Mutex<Vec<Export>> = Mutex::new(Vec::new());
static ANY_DEFERRED: AtomicBool = AtomicBool::new(false);

/// Releases the exports that calls finished without the GIL.
pub fn release_deferred(_py: Python<'_>) {
    // A load first: the common case (nothing deferred) writes nothing.
    if !ANY_DEFERRED.load(Ordering::Acquire) || !ANY_DEFERRED.swap(false, Ordering::AcqRel) {
        return;
    }
    // Taken out first: releasing may run Python code that calls back in here.
    let exports = std::mem::take(&mut *DEFERRED.lock().unwrap());
    for e in exports {
        // SAFETY: `_py` proves this thread holds the GIL.
        unsafe { e.release() };
    }
}

/// A held export of a C-contiguous buffer; released when dropped.
pub struct Held(Option<Export>);

impl Held {
    /// Exports `obj` (C-contiguous, and writable if asked).
    pub fn export(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<Held> {
        Held::export_with(obj, writable, 0)
    }

    /// Exports `obj` (C-contiguous, and writable if asked) with the element
    /// type its format names, for a buffer that describes itself (a numpy
    /// array, a bytearray). None, with no Python error pending, where it
    /// cannot be exported so or its elements are of no type shoal has: the
    /// caller then takes the path that names the problem.
    pub fn export_typed(obj: &Bound<'_, PyAny>, writable: bool) -> Option<(Held, DType)> {
        let Ok(held) = Held::export_with(obj, writable, ffi::PyBUF_FORMAT) else {
            return None; // the error is dropped here: the full path raises its own
        };
        let view = &held.0.as_ref().expect("just exported").0;
        let format = if view.format.is_null() {
            b"B".as_slice() // the protocol's default: unsigned bytes
        } else {
            // SAFETY: a non-null format is a NUL-terminated string the export owns.
            unsafe { std::ffi::CStr::from_ptr(view.format) }.to_bytes()
        };
        let dtype = DType::of_buffer_format(format, view.itemsize as usize)?;
        Some((held, dtype))
    }

    fn export_with(obj: &Bound<'_, PyAny>, writable: bool, extra: c_int) -> PyResult<Held> {
        let writable = if writable { ffi::PyBUF_WRITABLE } else { 0 };
        let flags = ffi::PyBUF_C_CONTIGUOUS | writable | extra;
        // SAFETY: a zeroed Py_buffer is a valid target for PyObject_GetBuffer,
        // which fills it on success (and leaves nothing to release on failure).
        let mut view: Box<ffi::Py_buffer> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: `obj` is a live object and we hold the GIL (`obj` proves it).
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            return Err(PyErr::fetch(obj.py()));
        }
        Ok(Held(Some(Export(view))))
    }

    /// `export` of an optional object (`None`: no buffer).
    pub fn export_opt(obj: Option<&Bound<'_, PyAny>>, writable: bool) -> PyResult<Option<Held>> {
        obj.map(|o| Held::export(o, writable)).transpose()
    }

    /// The address and byte length of the memory.
    pub fn span(&self) -> (*mut u8, usize) {
        let view = &self.0.as_ref().expect("held until dropped").0;
        (view.buf.cast(), view.len as usize)
    }

    /// `span` of an optional buffer (null and 0 for none).
    pub fn span_of(held: &Option<Held>) -> (*mut u8, usize) {
        held.as_ref().map_or((std::ptr::null_mut(), 0), Held::span)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(export) = self.0.take() else {
            return;
        };
        // SAFETY: PyGILState_Check only reads this thread's state.
        if unsafe { ffi::PyGILState_Check() } == 1 {
            // SAFETY: this thread holds the GIL.
            unsafe { export.release() };
            return;
        }
        let mut deferred = DEFERRED.lock().unwrap();
        deferred.push(export);
        ANY_DEFERRED.store(true, Ordering::Release);
    }
}
