//! A provider for tests, registered by its one line in the `providers!`
//! table like the shipped ones, to show that a provider is its file plus
//! that line: allreduce as every rank gathering every contribution (the
//! ring allgather, run directly) and adding them up itself. It offers
//! itself only on a thread that opened it ([`open`]), so the crate's other
//! tests, running beside, decide without it.

use std::cell::Cell;

use shoal_plan::algorithms::algorithm_id;
use shoal_plan::{CallShape, Collective};

use super::providers::CallProvider;
use super::{CommState, Communicator, Prepared, RunCall};
use crate::error::Result;
use crate::exec::CallBuffers;
use crate::provider::{Market, Provider};
use crate::reduce::{divide, reduce_into};

/// Its own algorithm's name, for `algorithm=`.
pub(super) const NAME: &str = "test_gather_reduce";

pub(super) struct GatherReduce;

pub(super) static GATHER_REDUCE: GatherReduce = GatherReduce;

thread_local! {
    static OPEN: Cell<bool> = const { Cell::new(false) };
    static PRICED: Cell<usize> = const { Cell::new(0) };
    static RUN: Cell<usize> = const { Cell::new(0) };
}

/// Offers the provider to this thread's calls (or stops offering it).
pub(super) fn open(offered: bool) {
    OPEN.set(offered);
}

/// How often this thread priced it, and how often it ran a call.
pub(super) fn counts() -> (usize, usize) {
    (PRICED.get(), RUN.get())
}

impl Provider for GatherReduce {
    fn can_run(&self, _: &Market, shape: &CallShape, _: usize) -> bool {
        OPEN.get() && shape.collective == Collective::Allreduce
    }
    /// A microsecond under the cheapest plan, so it wins wherever it is
    /// offered.
    fn cost(&self, market: &Market, shape: &CallShape, elem_size: usize) -> Result<f64> {
        PRICED.set(PRICED.get() + 1);
        Ok(market.plan_cost(shape, elem_size)? - 1e-6)
    }
}

impl CallProvider for GatherReduce {
    fn algorithm(&self) -> Option<(&'static str, u32)> {
        Some((NAME, algorithm_id(Collective::Allreduce, NAME)))
    }
    fn runner(&self, _: &Communicator, _: &CallShape) -> Result<Box<dyn RunCall>> {
        Ok(Box::new(GatherThenReduce { seq: 0 }))
    }
}

/// One call: the sequence number of its allgather.
struct GatherThenReduce {
    seq: u32,
}

impl RunCall for GatherThenReduce {
    fn reserve(&mut self, st: &mut CommState) {
        self.seq = st.next_seq();
    }
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        RUN.set(RUN.get() + 1);
        let block = bufs.input_bytes;
        // SAFETY: the buffers were validated by prepare; the input may be
        // the output, so it is read whole (into `all`) before that is written.
        let all = {
            let mine = unsafe { std::slice::from_raw_parts(bufs.input, block) };
            let describe = || p.describe();
            comm.exchange(self.seq, p.sig, mine, &describe)?
        };
        if block == 0 {
            return Ok(());
        }
        // SAFETY: as above.
        let out = unsafe { std::slice::from_raw_parts_mut(bufs.output, bufs.output_bytes) };
        let mut blocks = all.chunks_exact(block);
        out.copy_from_slice(blocks.next().unwrap_or_default());
        for other in blocks {
            reduce_into(p.dtype, p.op, out, other);
        }
        if let Some(n) = p.divide_by {
            divide(p.dtype, out, n);
        }
        Ok(())
    }
}
