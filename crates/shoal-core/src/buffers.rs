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
