//! The switch behind the hosts' shared memory as a provider
//! (`hierarchical_ina`, allreduce only): its price, then the host
//! reduce-scatter, each shard through its own switch job, the host
//! allgather, then the agreement and fallback of the switch (`switch.rs`).

use std::sync::Arc;

use shoal_plan::algorithms::allreduce::hierarchical_ina;
use shoal_plan::{CallShape, Collective};

use super::providers::CallProvider;
use super::switch::agreement_cost;
use super::{CommState, Communicator, Prepared, RunCall};
use crate::error::Result;
use crate::exec::{CallBuffers, CompiledPlan};
use crate::ina::{self, SwitchCallError, Unavailable};
use crate::provider::{Market, Provider, SwitchState};
use crate::reduce::divide;
use crate::registry;

/// The switch as the inter-host step of hierarchical allreduce.
pub(super) struct HierarchicalSwitch;

pub(super) static HIERARCHICAL_SWITCH: HierarchicalSwitch = HierarchicalSwitch;

impl Provider for HierarchicalSwitch {
    /// Where the switch runs and the members sit on several hosts in equal
    /// blocks of more than one rank (with one rank per host it is the
    /// switch's call plus nothing; on one host the switch has nothing to
    /// add up).
    fn can_run(&self, market: &Market, shape: &CallShape, _: usize) -> bool {
        let (hosts, local) = shape.layout();
        market.switch == SwitchState::Usable && hosts > 1 && local > 1
    }
    /// The host phases, one switch call of a shard with every local rank
    /// sharing the host's link, and the agreement.
    fn cost(&self, market: &Market, shape: &CallShape, elem_size: usize) -> Result<f64> {
        let bytes = shape.count * elem_size;
        let (_, local) = shape.layout();
        let params = market.selector.cost();
        Ok(ina::hierarchical_cost(bytes, local, &params) + agreement_cost(market, shape)?)
    }
}

impl CallProvider for HierarchicalSwitch {
    fn algorithm(&self) -> Option<(&'static str, u32)> {
        Some((registry::HIERARCHICAL_INA, registry::HIERARCHICAL_INA_ALGO_ID))
    }
    fn runner(&self, comm: &Communicator, shape: &CallShape) -> Result<Box<dyn RunCall>> {
        Ok(Box::new(HostsAndSwitch::new(comm, shape)?))
    }
}

/// A `hierarchical_ina` call: its host phases and the sequence number
/// reserved for the agreement on the switch's outcome.
struct HostsAndSwitch {
    phases: HostPhases,
    agree_seq: u32,
}

impl HostsAndSwitch {
    /// Fetches or builds the host phases' plans of a call (before the
    /// sequence numbers are taken; built-in plans, so no Python runs under
    /// the state's lock that preparing holds).
    fn new(comm: &Communicator, shape: &CallShape) -> Result<HostsAndSwitch> {
        let (rs, ag, shard, job) = comm.host_phases(shape)?;
        Ok(HostsAndSwitch {
            phases: HostPhases {
                reduce_scatter: (rs, 0),
                allgather: (ag, 0),
                shard,
                job,
            },
            agree_seq: 0,
        })
    }
}

impl RunCall for HostsAndSwitch {
    fn reserve(&mut self, st: &mut CommState) {
        self.phases.reduce_scatter.1 = st.next_seq();
        self.phases.allgather.1 = st.next_seq();
        self.agree_seq = st.next_seq();
    }
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        comm.run_hierarchical_switch(p, &self.phases, self.agree_seq, bufs)
    }
}

/// The host phases of `hierarchical_ina` for one call: reduce-scatter into
/// this rank's shard, then (after the switch summed it over the hosts)
/// allgather, each with a sequence number of its own.
struct HostPhases {
    reduce_scatter: (Arc<CompiledPlan>, u32),
    allgather: (Arc<CompiledPlan>, u32),
    /// This rank's shard of the output, in elements.
    shard: (usize, usize),
    /// (shard index = local rank, host index, hosts): the shard's switch job.
    job: (usize, usize, usize),
}

impl Communicator {
    /// The host phases of `hierarchical_ina` for a call: their plans, this
    /// rank's shard, and its shard's switch job (local rank, host, hosts).
    #[allow(clippy::type_complexity)]
    fn host_phases(
        &self,
        shape: &CallShape,
    ) -> Result<(
        Arc<CompiledPlan>,
        Arc<CompiledPlan>,
        (usize, usize),
        (usize, usize, usize),
    )> {
        use shoal_plan::algorithms::algorithm_id;
        let phase = |name| algorithm_id(Collective::Allreduce, name);
        let rank = self.rank;
        let rs = self.cached_plan(
            shape.clone(),
            phase("hierarchical_ina/reduce_scatter"),
            |s| Ok(hierarchical_ina::reduce_scatter(s, rank)),
        )?;
        let ag = self.cached_plan(shape.clone(), phase("hierarchical_ina/allgather"), |s| {
            Ok(hierarchical_ina::allgather(s, rank))
        })?;
        let (hosts, local) = shape.layout();
        let j = rank % local;
        Ok((
            rs,
            ag,
            hierarchical_ina::shard(shape, j),
            (j, rank / local, hosts),
        ))
    }

    /// `hierarchical_ina`: the host reduce-scatter, the shard through its
    /// switch job, the host allgather; then, like `run_via_switch`, the
    /// ranks agree whether the switch worked for all of them, and if not
    /// redo the call with the host plan from the saved contribution and
    /// stop using the switch. The host phases run whatever the switch did
    /// (a rank whose switch call failed gathers a shard the agreement will
    /// discard), so no rank waits for a phase another skipped.
    fn run_hierarchical_switch(
        &self,
        p: &Prepared,
        phases: &HostPhases,
        agree_seq: u32,
        bufs: CallBuffers,
    ) -> Result<()> {
        let mut contribution = self.engine.ina_backup.lock().unwrap();
        contribution.clear();
        // SAFETY: the input buffer was validated by prepare.
        contribution
            .extend_from_slice(unsafe { std::slice::from_raw_parts(bufs.input, bufs.input_bytes) });
        let saved = CallBuffers {
            input: contribution.as_ptr(),
            input_bytes: contribution.len(),
            ..bufs
        };
        let (rs, rs_seq) = &phases.reduce_scatter;
        self.run_phase(p, rs, *rs_seq, saved)?;
        let esize = p.dtype.size();
        let (offset, len) = phases.shard;
        // SAFETY: the output buffer was validated by prepare; the shard lies in it.
        let shard =
            unsafe { std::slice::from_raw_parts_mut(bufs.output.add(offset * esize), len * esize) };
        let recorder = self.engine.tracing.recorder();
        let started = recorder.map(|r| r.now());
        let outcome = self.shard_allreduce(shard, p, phases.job);
        if let (Some(r), Some(start)) = (recorder, started) {
            r.ina(
                start,
                shard.len(),
                outcome.is_ok(),
                self.shard_job.last_call(),
            );
        }
        let (ag, ag_seq) = &phases.allgather;
        self.run_phase(p, ag, *ag_seq, bufs)?;
        if self.agree(outcome.is_ok(), agree_seq, p.sig.history)? {
            if let Ok(ina) = self.ina() {
                ina.succeeded();
            }
            if let Some(n) = p.divide_by {
                // SAFETY: as above.
                let out = unsafe { std::slice::from_raw_parts_mut(bufs.output, bufs.output_bytes) };
                divide(p.dtype, out, n);
            }
            return Ok(());
        }
        let reason = outcome.err().map_or_else(
            || "another rank could not use the switch".to_string(),
            |e| e.to_string(),
        );
        self.shard_job.reset();
        if let Ok(ina) = self.ina() {
            ina.disable(&reason);
        }
        ina::warn(&format!(
            "allreduce falls back to host algorithms: {reason}"
        ));
        self.run_plan(p, saved)
    }

    /// This rank's shard summed over the hosts through its shard's switch job.
    fn shard_allreduce(
        &self,
        shard: &mut [u8],
        p: &Prepared,
        job: (usize, usize, usize),
    ) -> std::result::Result<(), SwitchCallError> {
        let ina = self.ina().map_err(Unavailable::clone)?;
        if let Some(reason) = ina.unusable() {
            return Err(SwitchCallError::Away(reason));
        }
        self.shard_job
            .allreduce(ina, job, shard, p.dtype, p.op, &|| self.progress_peers())
    }

    /// Runs one host phase of a call (its own plan and sequence number).
    fn run_phase(
        &self,
        p: &Prepared,
        cp: &CompiledPlan,
        seq: u32,
        bufs: CallBuffers,
    ) -> Result<()> {
        let describe = || p.describe();
        let ctx = self.call_context(seq, p.sig, p.dtype, p.op, &describe);
        self.engine.run(cp, &ctx, bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::super::switch::SWITCH;
    use super::*;
    use crate::provider::tests::market;
    use crate::provider::{cheapest, ProviderId};
    use crate::select::tests::shape;
    use crate::select::Selector;

    #[test]
    fn hierarchical_switch_runs_with_several_ranks_per_host_and_wins_large_calls() {
        let selector = Selector::new("", crate::select::TCP_COST).unwrap();
        let market = market(&selector, SwitchState::Usable, 2);
        let plans = &super::super::plans::PLANS;
        let (switch, hierarchical) = (&SWITCH, &HIERARCHICAL_SWITCH);
        let [p, s, h] = [0, 1, 2].map(ProviderId::at);
        let all: [(ProviderId, &dyn Provider); 3] = [(p, plans), (s, switch), (h, hierarchical)];
        let two_per_host = |count| CallShape {
            ranks_per_host: 2,
            ..shape(count)
        };
        // 16 MiB of float32 on 2 hosts x 2 ranks: the host link carries the
        // buffer once (not twice, as with flat ina).
        let big = two_per_host(4 << 20);
        assert!(hierarchical.can_run(&market, &big, 4));
        assert!(
            hierarchical.cost(&market, &big, 4).unwrap() < switch.cost(&market, &big, 4).unwrap()
        );
        assert_eq!(cheapest(&all, &market, &big, 4).unwrap(), Some(h));
        // One rank per host: nothing to reduce inside a host.
        assert!(!hierarchical.can_run(&market, &shape(4 << 20), 4));
        // Small calls stay on host algorithms (latency decides).
        assert_eq!(
            cheapest(&all, &market, &two_per_host(8), 4).unwrap(),
            Some(p)
        );
        // Neither runs where the switch is away.
        let away = Market {
            switch: SwitchState::Away,
            ..market
        };
        assert!(!switch.can_run(&away, &big, 4));
        assert!(!hierarchical.can_run(&away, &big, 4));
    }
}
