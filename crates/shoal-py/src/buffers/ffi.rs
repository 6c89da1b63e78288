//! The few CPython functions `buffers` needs that the stable ABI of 3.9 and
//! 3.10 lacks, declared here so the extension builds for `abi3-py39`.
//!
//! The buffer protocol (`Py_buffer`, `PyObject_GetBuffer`,
//! `PyBuffer_Release`) joined the limited API only in 3.11, so pyo3-ffi
//! leaves it out below `abi3-py311`; yet one wheel must load on 3.9-3.13,
//! and copying each buffer, or building one wheel per Python, would undo the
//! point of the module. The functions have been exported by every CPython
//! 3 interpreter (an extension's undefined symbols resolve against the
//! running interpreter), and the struct's layout below has not changed since
//! 3.3: 3.11 froze exactly this layout into the stable ABI. Likewise
//! `PyGILState_Check` is exported by every 3.x release though declared
//! outside the limited API (it joined it in no release).

// CPython's own spelling, so the names can be looked up in its headers.
#![allow(non_camel_case_types, non_upper_case_globals)]

use std::os::raw::{c_char, c_int, c_void};

use pyo3::ffi::{PyObject, Py_ssize_t};

/// CPython's `Py_buffer` (Include/pybuffer.h, the same since 3.3).
#[repr(C)]
pub struct Py_buffer {
    pub buf: *mut c_void,
    pub obj: *mut PyObject,
    pub len: Py_ssize_t,
    pub itemsize: Py_ssize_t,
    pub readonly: c_int,
    pub ndim: c_int,
    pub format: *mut c_char,
    pub shape: *mut Py_ssize_t,
    pub strides: *mut Py_ssize_t,
    pub suboffsets: *mut Py_ssize_t,
    pub internal: *mut c_void,
}

pub const PyBUF_WRITABLE: c_int = 0x0001;
pub const PyBUF_FORMAT: c_int = 0x0004;
pub const PyBUF_ND: c_int = 0x0008;
pub const PyBUF_STRIDES: c_int = 0x0010 | PyBUF_ND;
pub const PyBUF_C_CONTIGUOUS: c_int = 0x0020 | PyBUF_STRIDES;

extern "C" {
    pub fn PyObject_GetBuffer(obj: *mut PyObject, view: *mut Py_buffer, flags: c_int) -> c_int;
    pub fn PyBuffer_Release(view: *mut Py_buffer);
    pub fn PyGILState_Check() -> c_int;
}
