//! A numpy array's memory and element type read off the array's own C
//! struct, for `run_in_place`: the buffer protocol's export would cost a
//! fifth of a small call (numpy builds the format string and its cached
//! buffer info on every export, then the view must be released).
//!
//! Only an exact `numpy.ndarray` (no subclass, whose memory may be managed
//! otherwise) that is C-contiguous, aligned and, where the call writes it,
//! writable is read so; anything else takes the buffer protocol. The caller
//! holds a reference to the array for the call's length, which keeps its
//! memory alive: numpy refuses to resize an array that others reference
//! (`resize(refcheck=False)` is numpy's own documented unsafety).
//!
//! The fields read are the heads of `PyArrayObject_fields` and
//! `PyArray_Descr` (numpy/ndarraytypes.h), laid out alike in numpy 1.x and
//! 2.x: 2.0 changed only what follows `type_num` in the descriptor.

use std::os::raw::{c_char, c_int, c_long};

use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::PyType;
use shoal_core::DType;

/// The head of numpy's `PyArrayObject_fields`.
#[repr(C)]
struct ArrayHead {
    ob_base: pyo3::ffi::PyObject,
    data: *mut u8,
    nd: c_int,
    dimensions: *const pyo3::ffi::Py_ssize_t,
    strides: *const pyo3::ffi::Py_ssize_t,
    base: *mut pyo3::ffi::PyObject,
    descr: *const DescrHead,
    flags: c_int,
}

/// The head of numpy's `PyArray_Descr`.
#[repr(C)]
struct DescrHead {
    ob_base: pyo3::ffi::PyObject,
    typeobj: *mut pyo3::ffi::PyObject,
    kind: c_char,
    type_char: c_char,
    byteorder: c_char,
}

// numpy's NPY_ARRAY_* flags.
const C_CONTIGUOUS: c_int = 0x0001;
const ALIGNED: c_int = 0x0100;
const WRITEABLE: c_int = 0x0400;

/// `numpy.ndarray`, looked up once (numpy is a dependency of shoal).
static NDARRAY: GILOnceCell<Py<PyType>> = GILOnceCell::new();

/// The address, length in bytes and element type of `obj`'s memory, if it
/// is a plain numpy array of a type shoal has (see the module); None
/// otherwise.
pub fn plain_span(obj: &Bound<'_, PyAny>, writable: bool) -> Option<(*mut u8, usize, DType)> {
    let py = obj.py();
    let ndarray = NDARRAY
        .get_or_try_init(py, || -> PyResult<Py<PyType>> {
            let t = py.import("numpy")?.getattr("ndarray")?;
            Ok(t.downcast_into::<PyType>()?.unbind())
        })
        .ok()?;
    if !obj.get_type().is(ndarray.bind(py)) {
        return None;
    }
    // SAFETY: `obj` is exactly a numpy.ndarray, whose struct begins with
    // `ArrayHead`, and its descriptor with `DescrHead`; both live while
    // `obj` does, and we hold the GIL, so nothing changes them meanwhile.
    let (array, descr) = unsafe {
        let array = &*obj.as_ptr().cast::<ArrayHead>();
        (array, &*array.descr)
    };
    let needed = C_CONTIGUOUS | ALIGNED | if writable { WRITEABLE } else { 0 };
    if array.flags & needed != needed {
        return None;
    }
    let dtype = dtype_of(descr.type_char as u8, descr.byteorder as u8)?;
    // SAFETY: `dimensions` holds `nd` sizes (none for a 0-d array).
    let dims = unsafe { std::slice::from_raw_parts(array.dimensions, array.nd.max(0) as usize) };
    let count = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))?;
    Some((array.data, count.checked_mul(dtype.size())?, dtype))
}

/// The element type of a numpy descriptor's type character and byte order,
/// by the buffer protocol's format rules (numpy's characters are struct's).
fn dtype_of(type_char: u8, byteorder: u8) -> Option<DType> {
    let size = match type_char {
        b'b' | b'B' => 1,
        b'e' => 2,
        b'f' => 4,
        b'd' | b'q' => 8,
        b'i' => std::mem::size_of::<c_int>(),
        b'l' => std::mem::size_of::<c_long>(),
        _ => return None,
    };
    // '|': byte order does not apply (one-byte elements).
    let order = if byteorder == b'|' { b'=' } else { byteorder };
    DType::of_buffer_format(&[order, type_char], size)
}
