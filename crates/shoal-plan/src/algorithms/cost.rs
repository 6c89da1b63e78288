//! Shared terms of the alpha-beta-gamma cost model (Thakur, Rabenseifner and
//! Gropp 2005; Chan et al. 2007). Chunked transfers pay half an alpha per
//! further piece (see [`Model::latency`]), which is what makes small chunks
//! lose on latency-bound calls.

use crate::algorithms::CostParams;
use crate::partition::piece_count;
use crate::plan::CallShape;

/// Cost terms for one call shape, element size and level of the machine.
pub struct Model {
    alpha: f64,
    beta: f64,
    gamma: f64,
    elem_size: f64,
    chunk: usize,
    /// Seconds per byte of a message that the receiver reads in place
    /// (`process_vm_readv`): every rank on one host, a large call and a
    /// large message ([`Model::transfer`]). `None` elsewhere.
    read_in_place: Option<f64>,
}

/// The defaults of `SHOAL_SHM_CMA_BYTES` and `SHOAL_SHM_CMA_CALL_BYTES`:
/// on one host, messages of at least the first in calls of at least the
/// second are read in place instead of copied through the rings (the
/// model's guess; the transport decides with the configured sizes).
const READ_MESSAGE_BYTES: f64 = (1 << 20) as f64;
const READ_CALL_BYTES: usize = 8 << 20;

/// Whether a call's buffer is large enough for its large messages to be
/// read in place (on one host).
fn large_call(shape: &CallShape, elem_size: usize) -> bool {
    shape.count * elem_size >= READ_CALL_BYTES
}

impl Model {
    /// Messages over the links between hosts (or the only level there is).
    pub fn new(shape: &CallShape, elem_size: usize, params: &CostParams) -> Model {
        let one_host = shape.ranks_per_host >= shape.world;
        Model {
            alpha: params.alpha,
            beta: params.beta,
            gamma: params.gamma,
            elem_size: elem_size as f64,
            chunk: shape.chunk,
            read_in_place: (one_host && large_call(shape, elem_size)).then_some(params.beta_read),
        }
    }

    /// Messages between ranks of one host.
    pub fn local(shape: &CallShape, elem_size: usize, params: &CostParams) -> Model {
        Model {
            alpha: params.alpha_local,
            beta: params.beta_local,
            read_in_place: large_call(shape, elem_size).then_some(params.beta_read),
            ..Model::new(shape, elem_size, params)
        }
    }

    /// One message of `elems` elements: alpha per piece plus beta per byte.
    pub fn msg(&self, elems: usize) -> f64 {
        self.latency(elems) + self.transfer(elems)
    }

    /// The alpha part of a message of `elems` elements: the first piece's
    /// latency, and half of it again for each further piece.
    ///
    /// The pieces of one message are posted back to back (the executor does
    /// not wait for one before sending the next), so the receiver waits one
    /// latency and then only for the sender's own work per piece, as in
    /// [`Model::fan_latency`]. Charging a full alpha per piece, as this model
    /// did, priced a message of k pieces like k messages in sequence: it made
    /// algorithms that send few large messages (rabenseifner) look no cheaper
    /// than ones that send many (ring) at exactly the sizes where they win.
    /// At 8 ranks and 16 MiB the two tied to the cent, the tie went to ring,
    /// and ring measured 16.5 ms against rabenseifner's 6.8 ms (issue 12,
    /// 16-core machine; 66 against 40 ms at 64 MiB).
    pub fn latency(&self, elems: usize) -> f64 {
        let pieces = piece_count(elems, self.chunk).max(1);
        self.alpha * (1.0 + (pieces - 1) as f64 / 2.0)
    }

    /// The alpha part of `k` messages of `elems` elements posted at once by
    /// one rank: the first message's latency, and half of it again for each
    /// other one, which is the sender's own work per message (system call,
    /// network stack) that concurrent sends cannot overlap.
    pub fn fan_latency(&self, k: usize, elems: usize) -> f64 {
        self.latency(elems) * (1.0 + k.saturating_sub(1) as f64 / 2.0)
    }

    /// The beta part of a message of `elems` elements: through the rings
    /// at `beta`, or, where a large call's large message is read in place,
    /// at `beta_read`. Messages of 2-rank broadcasts of 64 MiB priced at
    /// the rings' 31 GB/s made the model pick scatter_allgather over
    /// shm_read, whose reads were priced alike (AMD dev host, issue 27).
    pub fn transfer(&self, elems: usize) -> f64 {
        let bytes = self.elem_size * elems as f64;
        match self.read_in_place {
            Some(beta_read) if bytes >= READ_MESSAGE_BYTES => beta_read * bytes,
            _ => self.beta * bytes,
        }
    }

    /// Reducing `elems` elements locally.
    pub fn reduce(&self, elems: usize) -> f64 {
        self.gamma * self.elem_size * elems as f64
    }

    /// A pipeline of `stages` hops carrying `elems` elements in pieces: the
    /// first piece crosses all hops but the last, and the last carries the
    /// whole message, its pieces posted back to back as in [`Model::msg`].
    /// A full alpha per piece on top priced a 2-rank broadcast of 4 MiB in
    /// four pieces above scatter_allgather's two halves, which measured
    /// 1.7x slower (238 against 137 us, AMD dev host, issue 27).
    pub fn pipeline(&self, stages: usize, elems: usize) -> f64 {
        if stages == 0 || elems == 0 {
            return 0.0;
        }
        let piece = elems.min(self.chunk.max(1));
        (stages - 1) as f64 * self.msg(piece) + self.msg(elems)
    }
}

#[cfg(test)]
mod tests {
    use crate::algorithms::{find, CostParams};
    use crate::plan::{CallShape, Collective};

    /// Shared memory as the selector's built-in figures price it.
    const SHM: CostParams = CostParams {
        alpha: 2e-6,
        beta: 1.0 / 4e9,
        gamma: 1.0 / 4e9,
        alpha_local: 2e-6,
        beta_local: 1.0 / 4e9,
        beta_read: 1.0 / 4e9,
    };

    /// An allreduce of `bytes` of float32 with every rank on one host.
    fn one_host_allreduce(world: usize, bytes: usize) -> CallShape {
        CallShape {
            ranks_per_host: world,
            ..CallShape::new(Collective::Allreduce, world, bytes / 4, (1 << 20) / 4)
        }
    }

    fn allreduce(name: &str, world: usize, bytes: usize) -> f64 {
        let shape = one_host_allreduce(world, bytes);
        (find(Collective::Allreduce, name).unwrap().cost)(&shape, 4, &SHM)
    }

    /// Issue 12's 16-core measurements at 8 ranks: rabenseifner 6.8 ms and
    /// ring 16.5 ms at 16 MiB, 40 and 66 ms at 64 MiB. With a full alpha per
    /// piece the two tied exactly and the tie went to ring.
    #[test]
    fn rabenseifner_beats_ring_on_large_power_of_two_allreduces() {
        for bytes in [16 << 20, 64 << 20] {
            let (rab, ring) = (
                allreduce("rabenseifner", 8, bytes),
                allreduce("ring", 8, bytes),
            );
            assert!(rab < ring, "{bytes} B: rabenseifner {rab} ring {ring}");
        }
        // Small calls stay latency-bound: recursive doubling still wins there.
        assert!(allreduce("recursive_doubling", 8, 64) < allreduce("ring", 8, 64));
    }

    /// The allreduce the cost model picks among all that handle the call
    /// (every rank on one host).
    fn cheapest_allreduce(world: usize, bytes: usize) -> &'static str {
        let shape = one_host_allreduce(world, bytes);
        let costs = crate::algorithms::for_collective(Collective::Allreduce)
            .filter(|a| a.handles(&shape))
            .map(|a| (a.name, (a.cost)(&shape, 4, &SHM)));
        let (name, _) = costs.min_by(|a, b| a.1.total_cmp(&b.1)).unwrap();
        name
    }

    /// Small allreduces go through the shm slots (plain loads, no syscall),
    /// which measured fastest (2-vCPU dev VM, 8 B: shm_flat 28 us against
    /// recursive doubling's 261 us at 2 ranks, loaded); with a syscall per
    /// peer read and per 32 KiB piece, shm_sharded is never the model's pick
    /// (it chose it at 8 B with 4 ranks, and it lost to ring at 1 MiB: 746
    /// against 455 us). Where it wins (16 MiB on the dev VM) the tuned table
    /// says so, not the model.
    #[test]
    fn shared_memory_allreduce_is_chosen_only_where_it_measured_faster() {
        for world in [2, 4, 8, 16] {
            assert_eq!(
                cheapest_allreduce(world, 8),
                "shm_flat",
                "{world} ranks, 8 B"
            );
            for bytes in [64 << 10, 1 << 20, 16 << 20] {
                let pick = cheapest_allreduce(world, bytes);
                assert!(
                    !pick.starts_with("shm_"),
                    "{world} ranks, {bytes} B: {pick}"
                );
            }
        }
        // Beyond the 16 KiB slot the flat reads go through syscalls and lose.
        assert_ne!(cheapest_allreduce(4, 64 << 10), "shm_flat");
    }

    /// Figures as calibration gave them on the 2-vCPU dev VM (issue 27,
    /// the fastest samples): 2 us a round trip's half, 1.5 GB/s through the
    /// transport, 12 GB/s for a float32 sum.
    const VM: CostParams = CostParams {
        alpha: 2e-6,
        beta: 1.0 / 1.5e9,
        gamma: 1.0 / 12e9,
        alpha_local: 2e-6,
        beta_local: 1.0 / 1.5e9,
        beta_read: 1.0 / 1.5e9,
    };

    fn cheapest(
        collective: Collective,
        world: usize,
        bytes: usize,
        p: &CostParams,
    ) -> &'static str {
        let shape = CallShape {
            ranks_per_host: world,
            ..CallShape::new(collective, world, bytes / 4, (1 << 20) / 4)
        };
        let costs = crate::algorithms::for_collective(collective)
            .filter(|a| a.handles(&shape))
            .map(|a| (a.name, (a.cost)(&shape, 4, p)));
        costs.min_by(|a, b| a.1.total_cmp(&b.1)).unwrap().0
    }

    /// Figures as calibration gives them: `alpha` and the 1 MiB single
    /// copy's speed (in a quiet window on the 2-vCPU dev VM, issue 27,
    /// 2026-11-27: alpha 1.3-4.4 us at 7.1-9.7 GB/s), a float32 sum at 13 GB/s.
    fn calibrated(alpha: f64, single_copy_gbs: f64) -> CostParams {
        CostParams {
            gamma: 1.0 / 13e9,
            ..one_host(alpha, single_copy_gbs, single_copy_gbs)
        }
    }

    /// Calibration's figures on one host: `alpha_local`, the rings' speed
    /// (`beta_local`), `process_vm_readv`'s (`beta_read`), a float32 sum at
    /// 46 GB/s.
    fn one_host(alpha: f64, ring_gbs: f64, read_gbs: f64) -> CostParams {
        CostParams {
            alpha,
            beta: 1.0 / (ring_gbs * 1e9),
            gamma: 1.0 / 46e9,
            alpha_local: alpha,
            beta_local: 1.0 / (ring_gbs * 1e9),
            beta_read: 1.0 / (read_gbs * 1e9),
        }
    }

    /// 2-rank broadcasts of 64 KiB-1 MiB go the way that calibration found
    /// faster. On the AMD dev host (issue 27, 2026-11-28 19:14), the rings
    /// carried 1 MiB at about 25 GB/s and `process_vm_readv` read it at 12:
    /// the chains took 4.8 us at 64 KiB and 33 at 1 MiB, `shm_read` 8.0
    /// and 83. In the same VM's slow periods the rings copy 5-10x slower
    /// and `process_vm_readv` does not, and `shm_read` beat the chains by
    /// 129% from 64 KiB to 4 MiB (docs/benchmarks.md). The model priced the
    /// read as a pass over cached memory and picked `shm_read` in both.
    #[test]
    fn one_host_broadcasts_go_the_way_calibration_found_faster() {
        for bytes in [64 << 10, 256 << 10, 1 << 20] {
            for alpha in [1e-6, 4e-6] {
                let fast_rings = one_host(alpha, 25.0, 12.0);
                let pick = cheapest(Collective::Broadcast, 2, bytes, &fast_rings);
                assert_ne!(pick, "shm_read", "{bytes} B, alpha {alpha}, fast rings");
                let slow_rings = one_host(alpha, 3.0, 12.0);
                let pick = cheapest(Collective::Broadcast, 2, bytes, &slow_rings);
                assert_eq!(pick, "shm_read", "{bytes} B, alpha {alpha}, slow rings");
            }
        }
        // From 8 MiB the chains' messages are read in place too, and the
        // single read wins (every AMD tune run had shm_read ahead there by
        // 8-30%, beyond the noise, docs/tuning-data/2vcpu-dev-vm-amd-ahead-*).
        for bytes in [16 << 20, 64 << 20] {
            for ring_gbs in [3.0, 31.0] {
                let p = one_host(1e-6, ring_gbs, 12.8);
                let pick = cheapest(Collective::Broadcast, 2, bytes, &p);
                assert_eq!(pick, "shm_read", "{bytes} B, rings at {ring_gbs} GB/s");
            }
        }
        // At 4 MiB the chains' messages go through the rings, and with
        // fast rings binomial's pipeline beats scatter_allgather (137
        // against 238 us that day).
        let fast_rings = one_host(1e-6, 31.0, 12.8);
        let pick = cheapest(Collective::Broadcast, 2, 4 << 20, &fast_rings);
        assert_ne!(pick, "scatter_allgather");
        // Within a slot the read is plain loads, whatever the syscall costs.
        for ring_gbs in [3.0, 25.0] {
            let p = one_host(1e-6, ring_gbs, 12.0);
            assert_eq!(cheapest(Collective::Broadcast, 2, 1 << 10, &p), "shm_read");
        }
    }

    /// One-host broadcasts of 16 and 64 MiB at 8 and 16 ranks (16-core
    /// machine, issue 31, 2026-11-28; forced algorithms, ms): binomial 4.2
    /// against pipelined_chain's 5.5 and scatter_allgather's 6.8 (8 ranks,
    /// 16 MiB); 7.1 against 9.6 and 14.5 (16 ranks, 16 MiB); 35.2 against
    /// pipelined_chain's 55.8 (16 ranks, 64 MiB). Calibration there put the
    /// model at about 2-3 us and 4-5 GB/s. Priced as `log2 p` copies of the
    /// whole buffer, binomial lost the model to both; its pieces flow down
    /// the tree, and siblings read their parent's memory at once.
    #[test]
    fn large_one_host_broadcasts_go_down_the_pipelined_binomial_tree() {
        for (alpha, gbs) in [(2e-6, 4.0), (3e-6, 5.0), (1e-6, 8.0)] {
            let p = calibrated(alpha, gbs);
            for world in [8, 16] {
                for bytes in [16 << 20, 64 << 20] {
                    let pick = cheapest(Collective::Broadcast, world, bytes, &p);
                    assert_eq!(
                        pick, "binomial",
                        "{world} ranks, {bytes} B, {alpha} s, {gbs} GB/s"
                    );
                }
            }
        }
    }

    /// The model alone, at 2 and 4 ranks and every size: the slots (a copy
    /// and plain loads, in cache) win allreduce while a call fits them
    /// (measured: shm_flat 4.5 us at 8 B against 8.7 us for the model's
    /// earlier pick, 2 ranks, issue 27), the message algorithms above.
    #[test]
    fn the_model_alone_picks_the_slots_for_small_allreduces_and_messages_above() {
        let sizes = [
            8,
            64,
            1 << 10,
            4 << 10,
            16 << 10,
            64 << 10,
            1 << 20,
            16 << 20,
            64 << 20,
        ];
        for world in [2, 4] {
            let picks: Vec<&str> = sizes
                .iter()
                .map(|&b| cheapest(Collective::Allreduce, world, b, &VM))
                .collect();
            for (&bytes, pick) in sizes.iter().zip(&picks) {
                if bytes <= 4 << 10 {
                    assert_eq!(*pick, "shm_flat", "{world} ranks, {bytes} B: {picks:?}");
                }
                // From 64 KiB: a message algorithm, or shm_sharded, whose
                // second phase is a plain read of what its owner just wrote
                // (measured quiet at 2 ranks: within 11% of the fastest at
                // every size from 64 KiB, the fastest at 1, 2 and 16 MiB),
                // never shm_flat beyond its slot (1.46x slower at 64 KiB).
                if bytes >= 64 << 10 {
                    assert!(
                        ["ring", "rabenseifner", "shm_sharded"].contains(pick),
                        "{world} ranks, {bytes} B: {picks:?}"
                    );
                }
            }
        }
    }
}
