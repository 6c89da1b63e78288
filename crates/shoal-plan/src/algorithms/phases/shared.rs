//! Building blocks of the shared-memory algorithms (`shm_*`): ranks of one
//! host expose their buffers and read (or read-reduce) the peers' regions in
//! place instead of exchanging messages. See `Op::Expose` and its kin.

use crate::plan::{Plan, Region};

/// Flag under which every rank exposes its Input.
pub const INPUTS: u32 = 0;
/// Flag under which ranks expose finished results (second phases).
pub const RESULTS: u32 = 1;

/// Reduces, in rank order `((x0 op x1) op x2) ...` (so every rank that
/// computes an element combines it alike), the region at `offset` of every
/// rank's `INPUTS` exposure into `acc`; `own` is this rank's share of it.
/// Returns the last step.
pub fn reduce_in_rank_order(
    p: &mut Plan,
    world: usize,
    offset: usize,
    own: Region,
    acc: Region,
    deps: Vec<usize>,
) -> usize {
    let me = p.rank;
    let mut last = if me == 0 {
        p.copy(own, acc, deps)
    } else {
        p.peer_read(0, INPUTS, offset, acc, false, deps)
    };
    for q in 1..world {
        last = if q == me {
            p.reduce(own, acc, vec![last])
        } else {
            p.peer_read(q, INPUTS, offset, acc, true, vec![last])
        };
    }
    last
}

/// `[start, end)` of shard `q` when `n` elements are split over `world` ranks.
pub fn shard(n: usize, world: usize, q: usize) -> (usize, usize) {
    (q * n / world, (q + 1) * n / world)
}

/// The default of `SHOAL_SHM_SLOT_BYTES`: an `expose_slot` of at most this
/// many bytes goes through the rank's shared slot (the cost model's guess;
/// the executor decides with the configured size).
pub const SLOT_BYTES: usize = 16 << 10;
/// Bytes a reducing in-place read takes per `process_vm_readv` (the
/// executor's piece size).
const READ_PIECE: f64 = (32 << 10) as f64;
/// One `process_vm_readv`, in units of `alpha_local`: a syscall that pins the
/// peer's pages (about 1 us on the 2-vCPU dev VM, where alpha_local is 2 us).
const SYSCALL: f64 = 0.5;
/// A flag round through the slots (cache lines, no syscall, no doorbell
/// once everyone polls), in units of `alpha_local`.
const SLOT_ROUND: f64 = 0.25;
/// How a rank's region reaches its peers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposure {
    /// Copied into the rank's slot, read with plain loads.
    Slot,
    /// Read in place with `process_vm_readv`.
    InPlace,
}

impl Exposure {
    /// What an `expose_slot` of `bytes` does (with the default slot size).
    pub fn of_slot(bytes: f64) -> Exposure {
        if bytes <= SLOT_BYTES as f64 {
            Exposure::Slot
        } else {
            Exposure::InPlace
        }
    }
}

/// Cost of reading `bytes` from each of `peers` ranks of this host and
/// reducing them (`reduce`), exposed as `via` says, priced by what each way
/// does. Through the slots: a quarter flag round, the copy in and the plain
/// loads, each a pass over memory like the reduction's own (so at `gamma`,
/// the calibrated float32 sum's speed: a slot is in cache). In place: a flag
/// round (the owner's Release waits for the readers' counts: the same round
/// trip, overlapping the reads, so counted once), a syscall per read (per
/// 32 KiB piece when reducing) and the bytes at `beta_read`, the calibrated
/// speed of `process_vm_readv` itself. Pricing these reads as a pass over
/// memory (`gamma`, 46 GB/s on the AMD dev host) made the model pick
/// `shm_read` for 2-rank broadcasts of 64 KiB-1 MiB, which read at 8-13
/// GB/s there and took 1.7-2.5x a chain's time (issue 27).
pub fn cost(
    params: &crate::algorithms::CostParams,
    peers: usize,
    bytes: f64,
    reduce: bool,
    via: Exposure,
) -> f64 {
    let reduced = if reduce { params.gamma } else { 0.0 };
    match via {
        Exposure::Slot => {
            let passes = bytes * params.gamma + peers as f64 * bytes * (params.gamma + reduced);
            SLOT_ROUND * params.alpha_local + passes
        }
        Exposure::InPlace => {
            let moved = peers as f64 * bytes * (params.beta_read + reduced);
            let reads_each = if reduce {
                (bytes / READ_PIECE).ceil().max(1.0)
            } else {
                1.0
            };
            let syscalls = peers as f64 * reads_each;
            params.alpha_local * (1.0 + SYSCALL * syscalls) + moved
        }
    }
}

/// [`cost`] of a plan that reads one block of the call (`count` elements)
/// from each of `peers` ranks, out of an exposure of `exposed_blocks` such
/// blocks (through the slot when that fits): the `shm_read` algorithms.
pub fn block_read_cost(
    shape: &crate::plan::CallShape,
    elem_size: usize,
    params: &crate::algorithms::CostParams,
    peers: usize,
    reduce: bool,
    exposed_blocks: usize,
) -> f64 {
    let bytes = (shape.count * elem_size) as f64;
    let via = Exposure::of_slot(bytes * exposed_blocks as f64);
    cost(params, peers, bytes, reduce, via)
}
