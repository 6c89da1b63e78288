//! The caller's memory for one call, as the executor, the aliasing checks
//! and the providers see it: addresses and lengths, no ownership.

/// The caller's memory for one call. Input may alias Output (in-place calls).
#[derive(Clone, Copy)]
pub struct CallBuffers {
    pub input: *const u8,
    pub input_bytes: usize,
    pub output: *mut u8,
    pub output_bytes: usize,
}

impl CallBuffers {
    /// An in-place call on `data`: Input and Output are the same memory.
    pub fn in_place<T>(data: &mut [T]) -> CallBuffers {
        let bytes = std::mem::size_of_val(data);
        let ptr = data.as_mut_ptr() as *mut u8;
        CallBuffers {
            input: ptr,
            input_bytes: bytes,
            output: ptr,
            output_bytes: bytes,
        }
    }
}
