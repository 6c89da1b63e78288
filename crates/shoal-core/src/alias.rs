//! Aliasing rules: which overlaps of a call's input (`x`) and output (`out`)
//! memory a collective accepts, and how it runs them.
//!
//! Disjoint buffers always work. Of overlapping ones only the in-place forms
//! (MPI_IN_PLACE's, and what torch's in-place calls pass) are accepted:
//!
//! | collective     | in-place form                         | how it runs                    |
//! |----------------|---------------------------------------|--------------------------------|
//! | allreduce      | x is out                              | the plans (verified in place)  |
//! | broadcast      | x is out (at the root)                | the plans (verified in place)  |
//! | reduce         | x is out (at the root)                | the plans (verified in place)  |
//! | allgather      | x is block `rank` of out              | x copied aside first           |
//! | gather         | x is block `root` of out (at the root)| x copied aside first           |
//! | alltoall       | x is out                              | x copied aside first           |
//! | reduce_scatter | out is block `rank` of x              | result copied into out at end  |
//! | scatter        | out is block `root` of x (at the root)| result copied into out at end  |
//!
//! Any other overlap (a partial one, another rank's block, a shifted view)
//! is refused before anything is sent, with the overlapping bytes named.
//! The check works on addresses, so it holds for every caller: numpy views
//! of one base, torch tensors passed by the torch backend, Rust callers.

use std::sync::{Mutex, MutexGuard};

use shoal_plan::{CallShape, Collective};

use crate::buffers::CallBuffers;
use crate::error::{Error, Result};

/// How a call whose buffers are checked runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// Straight on the caller's buffers: disjoint, or an in-place form the
    /// plans handle themselves.
    Direct,
    /// The input lies inside the output: it is copied aside before the call.
    StageInput,
    /// The output lies inside the input: the result is collected aside and
    /// copied into the output once the input is no longer read.
    StageOutput,
}

/// A byte range of the address space.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
}

impl Span {
    fn end(self) -> usize {
        self.start + self.len
    }

    /// Whether `self` starts `offset` bytes into `outer` and is `len` long.
    fn is_at(self, outer: Span, offset: usize, len: usize) -> bool {
        self.start == outer.start + offset && self.len == len
    }
}

/// Checks the overlap of `bufs` for a call of `shape` on group rank `rank`
/// (elements of `elem_size` bytes) and says how to run it.
pub fn classify(
    shape: &CallShape,
    rank: usize,
    elem_size: usize,
    bufs: &CallBuffers,
) -> Result<InPlace> {
    let x = Span {
        start: bufs.input as usize,
        len: bufs.input_bytes,
    };
    let out = Span {
        start: bufs.output as usize,
        len: bufs.output_bytes,
    };
    if x.len == 0 || out.len == 0 || x.end() <= out.start || out.end() <= x.start {
        return Ok(InPlace::Direct);
    }
    // This rank's block of the vector of all blocks (per-rank counts too).
    let own_block = shape.block_offset(rank) * elem_size;
    let block_bytes = shape.block(rank) * elem_size;
    use Collective::*;
    let mode = match shape.collective {
        Allreduce | Broadcast | Reduce if x.is_at(out, 0, out.len) => InPlace::Direct,
        Alltoall if x.is_at(out, 0, out.len) => InPlace::StageInput,
        Allgather | Gather if x.is_at(out, own_block, block_bytes) => InPlace::StageInput,
        ReduceScatter | Scatter if out.is_at(x, own_block, block_bytes) => InPlace::StageOutput,
        c => return Err(overlap_error(c, x, out)),
    };
    Ok(mode)
}

fn overlap_error(collective: Collective, x: Span, out: Span) -> Error {
    let start = x.start.max(out.start);
    let end = x.end().min(out.end());
    let allowed = match collective {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => {
            "pass out=x (in place) or disjoint buffers"
        }
        Collective::Alltoall => "pass out=x exactly (in place) or disjoint buffers",
        Collective::Allgather => "in place, x must be exactly this rank's block of out",
        Collective::Gather => "in place, the root's x must be exactly the root's block of out",
        Collective::ReduceScatter => "in place, out must be exactly this rank's block of x",
        Collective::Scatter => "in place, the root's out must be exactly the root's block of x",
        Collective::Barrier => "",
    };
    Error::invalid(format!(
        "{collective}: out overlaps x (bytes {}..{} of out are bytes {}..{} of x); {allowed}",
        start - out.start,
        end - out.start,
        start - x.start,
        end - x.start,
    ))
}

/// Memory for staged inputs and outputs, reused across calls because fresh
/// pages cost more than the copy. Only in-place calls of the collectives
/// whose plans write their output freely use it.
#[derive(Default)]
pub struct Staging(Mutex<Vec<u64>>);

impl Staging {
    /// The buffers a call of `mode` runs on, without the overlap the mode
    /// names (the input copied aside, or the output written aside), holding
    /// the staging memory until [`Staged::finish`]. The caller runs the call
    /// itself: staging is a step before and after it, not a layer above it.
    pub fn stage(&self, mode: InPlace, bufs: CallBuffers) -> Staged<'_> {
        let (mem, staged) = match mode {
            InPlace::Direct => (None, bufs),
            InPlace::StageInput => {
                let mut mem = self.0.lock().unwrap();
                let aside = grown(&mut mem, bufs.input_bytes);
                // SAFETY: the input is valid for input_bytes (checked by the
                // caller's prepare); `aside` is our own memory of that size.
                unsafe { std::ptr::copy_nonoverlapping(bufs.input, aside, bufs.input_bytes) };
                let staged = CallBuffers {
                    input: aside,
                    ..bufs
                };
                (Some(mem), staged)
            }
            InPlace::StageOutput => {
                let mut mem = self.0.lock().unwrap();
                let aside = grown(&mut mem, bufs.output_bytes);
                let staged = CallBuffers {
                    output: aside,
                    ..bufs
                };
                (Some(mem), staged)
            }
        };
        Staged {
            _mem: mem,
            bufs: staged,
            output: bufs.output,
        }
    }
}

/// A call's buffers while it runs staged (`Staging::stage`).
pub struct Staged<'a> {
    /// The staging memory, held while the call uses it.
    _mem: Option<MutexGuard<'a, Vec<u64>>>,
    /// What the call runs on.
    pub bufs: CallBuffers,
    /// Where its output belongs.
    output: *mut u8,
}

impl Staged<'_> {
    /// After the call succeeded: an output written aside goes where it
    /// belongs (a failed call is dropped instead, its output left as is).
    pub fn finish(self) {
        if self.bufs.output != self.output {
            // SAFETY: as in `stage`; the call is over, so the input (which
            // holds the output) is no longer read.
            unsafe {
                std::ptr::copy_nonoverlapping(self.bufs.output, self.output, self.bufs.output_bytes)
            };
        }
    }
}

/// `mem` grown to at least `bytes`, as a byte pointer (8-byte aligned, so
/// every dtype's reductions may run on it).
fn grown(mem: &mut Vec<u64>, bytes: usize) -> *mut u8 {
    let words = bytes.div_ceil(8);
    if mem.len() < words {
        mem.resize(words, 0);
    }
    mem.as_mut_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(collective: Collective, world: usize, count: usize) -> CallShape {
        CallShape {
            collective,
            world,
            count,
            root: 0,
            chunk: 1024,
            ranks_per_host: 1,
            counts: None,
        }
    }

    fn bufs(input: usize, input_bytes: usize, output: usize, output_bytes: usize) -> CallBuffers {
        CallBuffers {
            input: input as *const u8,
            input_bytes,
            output: output as *mut u8,
            output_bytes,
        }
    }

    #[test]
    fn disjoint_and_empty_buffers_run_directly() {
        let s = shape(Collective::Alltoall, 4, 10);
        for b in [
            bufs(1000, 40, 1040, 40),
            bufs(1040, 40, 1000, 40),
            bufs(1000, 0, 1000, 40),
        ] {
            assert_eq!(classify(&s, 1, 1, &b).unwrap(), InPlace::Direct);
        }
    }

    #[test]
    fn in_place_forms() {
        use Collective::*;
        let w = 4;
        let n = 10; // bytes per block here
        let at =
            |c: Collective, rank: usize, b: CallBuffers| classify(&shape(c, w, n), rank, 1, &b);
        assert_eq!(
            at(Allreduce, 2, bufs(1000, n, 1000, n)).unwrap(),
            InPlace::Direct
        );
        assert_eq!(
            at(Broadcast, 0, bufs(1000, n, 1000, n)).unwrap(),
            InPlace::Direct
        );
        assert_eq!(
            at(Reduce, 0, bufs(1000, n, 1000, n)).unwrap(),
            InPlace::Direct
        );
        let all = w * n;
        assert_eq!(
            at(Alltoall, 2, bufs(1000, all, 1000, all)).unwrap(),
            InPlace::StageInput
        );
        assert_eq!(
            at(Allgather, 2, bufs(1020, n, 1000, all)).unwrap(),
            InPlace::StageInput
        );
        assert_eq!(
            at(Gather, 0, bufs(1000, n, 1000, all)).unwrap(),
            InPlace::StageInput
        );
        assert_eq!(
            at(ReduceScatter, 3, bufs(1000, all, 1030, n)).unwrap(),
            InPlace::StageOutput
        );
        assert_eq!(
            at(Scatter, 0, bufs(1000, all, 1000, n)).unwrap(),
            InPlace::StageOutput
        );
    }

    #[test]
    fn other_overlaps_are_refused_with_the_bytes() {
        use Collective::*;
        let (w, n) = (4, 10);
        let at = |c: Collective, rank: usize, b: CallBuffers| {
            classify(&shape(c, w, n), rank, 1, &b).unwrap_err().message
        };
        let e = at(Alltoall, 1, bufs(1000, 40, 1008, 40));
        assert_eq!(
            e,
            "alltoall: out overlaps x (bytes 0..32 of out are bytes 8..40 of x); \
             pass out=x exactly (in place) or disjoint buffers"
        );
        // another rank's block, a shifted block, and a partial allreduce
        assert!(at(Allgather, 1, bufs(1000, n, 1000, 40)).contains("this rank's block"));
        assert!(at(Allgather, 1, bufs(1011, n, 1000, 40)).contains("bytes 11..21 of out"));
        assert!(at(ReduceScatter, 0, bufs(1000, 40, 1010, n)).contains("reduce_scatter"));
        assert!(at(Allreduce, 0, bufs(1000, n, 1004, n)).contains("bytes 0..6 of out"));
    }

    #[test]
    fn staged_runs_see_the_original_input_and_fill_the_output() {
        let staging = Staging::default();
        // alltoall in place on one rank of 2: the call must read x as it was
        let mut mem: Vec<u8> = (0..8).collect();
        let b = CallBuffers::in_place(&mut mem);
        let staged = staging.stage(InPlace::StageInput, b);
        let b = staged.bufs;
        assert_ne!(b.input, b.output as *const u8);
        // SAFETY: test buffers of 8 bytes each.
        unsafe {
            std::ptr::write_bytes(b.output, 0xff, 8);
            assert_eq!(*b.input.add(7), 7);
        }
        staged.finish();
        assert_eq!(mem, [0xff; 8]);
        // reduce_scatter in place: out (block 1 of x) is written only at the end
        let mut x: Vec<u8> = (0..8).collect();
        let p = x.as_mut_ptr();
        let b = CallBuffers {
            input: p,
            input_bytes: 8,
            // SAFETY: block 1 of x.
            output: unsafe { p.add(4) },
            output_bytes: 4,
        };
        let staged = staging.stage(InPlace::StageOutput, b);
        let b = staged.bufs;
        // SAFETY: test buffers.
        unsafe {
            std::ptr::write_bytes(b.output, 9, 4);
            assert_eq!(*b.input.add(5), 5);
        }
        staged.finish();
        assert_eq!(x, [0, 1, 2, 3, 9, 9, 9, 9]);
    }
}
