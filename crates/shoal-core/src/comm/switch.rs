//! The switch (in-network aggregation, allreduce only) as a provider: its
//! price, a communicator's membership in a switch job, the retry while the
//! switch is away, the allreduce through it, the ranks' agreement on its
//! outcome and the fallback to the host plan.

use shoal_plan::{CallShape, Collective};
use shoal_transport::CallSig;

use super::providers::CallProvider;
use super::{CollArgs, CommState, Communicator, Prepared, RunCall};
use crate::dtype::{DType, ReduceOp};
use crate::error::Result;
use crate::exec::CallBuffers;
use crate::ina::{self, Ina, SwitchCallError, Unavailable};
use crate::provider::{Market, Named, Provider, SwitchState};
use crate::registry::{self, Choice};

/// The switch, for one allreduce at a time.
pub(super) struct Switch;

pub(super) static SWITCH: Switch = Switch;

impl Provider for Switch {
    /// When this rank's membership works and the switch can aggregate the
    /// call's dtype and op.
    fn can_run(&self, market: &Market, _: &CallShape, _: usize) -> bool {
        market.switch == SwitchState::Usable
    }
    /// One message each way plus the bytes times the ranks sharing the
    /// busiest host link, plus the agreement.
    fn cost(&self, market: &Market, shape: &CallShape, elem_size: usize) -> Result<f64> {
        let bytes = shape.count * elem_size;
        let params = market.selector.cost();
        Ok(ina::cost(bytes, market.per_link, &params) + agreement_cost(market, shape)?)
    }
}

impl CallProvider for Switch {
    fn algorithm(&self) -> Option<(&'static str, u32)> {
        Some((registry::INA, registry::INA_ALGO_ID))
    }
    fn insists(&self, switch: SwitchState) -> bool {
        switch == SwitchState::Retry
    }
    fn runner(&self, _: &Communicator, _: &CallShape) -> Result<Box<dyn RunCall>> {
        Ok(Box::new(ViaSwitch::default()))
    }
}

/// Every switch allreduce ends with the ranks agreeing on its outcome: a
/// one-byte host allreduce, which decides for small messages.
pub(super) fn agreement_cost(market: &Market, shape: &CallShape) -> Result<f64> {
    let agreement = CallShape {
        count: 1,
        ..shape.clone()
    };
    market.plan_cost(&agreement, 1)
}

/// A call through the switch, with the sequence number reserved for the
/// ranks' agreement on whether it worked (the call's own runs the host plan
/// if it did not).
#[derive(Default)]
struct ViaSwitch {
    agree_seq: u32,
}

impl RunCall for ViaSwitch {
    fn reserve(&mut self, st: &mut CommState) {
        self.agree_seq = st.next_seq();
    }
    fn run(&self, comm: &Communicator, p: &Prepared, bufs: CallBuffers) -> Result<()> {
        comm.run_via_switch(p, self.agree_seq, bufs)
    }
}

impl Communicator {
    /// This communicator's switch membership: the world's, joined at init,
    /// or a sub-group's own job (`join_group_switch`); else why there is none.
    pub(super) fn ina(&self) -> std::result::Result<&Ina, &Unavailable> {
        const NOT_JOINED: &Unavailable = &Unavailable::GroupNotJoined;
        if self.id == 0 {
            return self.engine.ina.as_ref();
        }
        match self.group_ina.get() {
            Some(membership) => membership.as_ref(),
            None => Err(NOT_JOINED),
        }
    }

    /// What the switch offers a call. A sub-group joins a switch job of its
    /// own members at its first call made that could use the switch: every
    /// member makes that call, so all join together (collective, like the
    /// world's join at init). A call made that could use the switch while
    /// it is away counts towards its retry (ina.rs).
    pub(super) fn switch_offer(&self, args: &CollArgs, made: bool) -> SwitchState {
        if !switch_eligible(args) {
            return SwitchState::Away;
        }
        if made {
            self.join_group_switch();
        }
        match self.ina() {
            Ok(ina) if made && ina.retry_due() => SwitchState::Retry,
            Ok(ina) if ina.usable() => SwitchState::Usable,
            _ => SwitchState::Away,
        }
    }

    /// A sub-group's first call that could use the switch joins its job.
    fn join_group_switch(&self) {
        if self.id == 0 || self.group_ina.get().is_some() {
            return;
        }
        if let Ok(world) = &self.engine.ina {
            let membership = world.join_group(self.id, self.rank, self.size());
            let _ = self.group_ina.set(membership);
        }
    }

    /// Allreduce through the switch; then the ranks agree (a one-byte host
    /// allreduce) whether every one of them got its result. If not, they all
    /// redo it with the host plan from the contribution saved beforehand, and
    /// stop using the switch (ATP's fallback; `CallProvider::fallback`).
    fn run_via_switch(&self, p: &Prepared, agree_seq: u32, bufs: CallBuffers) -> Result<()> {
        if !std::ptr::eq(bufs.input, bufs.output) {
            // SAFETY: both buffers were validated by prepare and are distinct.
            unsafe { std::ptr::copy_nonoverlapping(bufs.input, bufs.output, bufs.output_bytes) };
        }
        // SAFETY: the output buffer was validated by prepare.
        let out = unsafe { std::slice::from_raw_parts_mut(bufs.output, bufs.output_bytes) };
        // Kept for the fallback; the buffer is reused across calls because
        // fresh pages cost more than the copy.
        let mut contribution = self.engine.ina_backup.lock().unwrap();
        contribution.clear();
        contribution.extend_from_slice(out);
        let recorder = self.engine.tracing.recorder();
        let started = recorder.map(|r| r.now());
        let outcome = self.switch_allreduce(out, p);
        if let (Some(r), Some(start)) = (recorder, started) {
            let wire = self.ina().map(Ina::last_call).unwrap_or_default();
            r.ina(start, out.len(), outcome.is_ok(), wire);
        }
        if self.agree(outcome.is_ok(), agree_seq, p.sig.history)? {
            if let Ok(ina) = self.ina() {
                ina.succeeded();
            }
            return Ok(()); // the client already divided for avg
        }
        let reason = outcome.err().map_or_else(
            || "another rank could not use the switch".to_string(),
            |e| e.to_string(),
        );
        if let Ok(ina) = self.ina() {
            ina.disable(&reason);
        }
        ina::warn(&format!(
            "allreduce falls back to host algorithms: {reason}"
        ));
        let host = CallBuffers {
            input: contribution.as_ptr(),
            input_bytes: contribution.len(),
            ..bufs
        };
        self.run_plan(p, host)
    }

    fn switch_allreduce(
        &self,
        out: &mut [u8],
        p: &Prepared,
    ) -> std::result::Result<(), SwitchCallError> {
        let ina = self.ina().map_err(Unavailable::clone)?;
        ina.allreduce(out, p.dtype, p.op, &|| self.progress_peers())
    }

    /// Progresses the transport while a switch job waits: a rank that died
    /// never contributes, and the transport notices at once.
    pub(super) fn progress_peers(
        &self,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        self.engine
            .transport
            .progress()
            .map(drop)
            .map_err(Into::into)
    }

    /// Whether `ok` holds on every rank (a min-allreduce of one byte).
    pub(super) fn agree(&self, ok: bool, seq: u32, history: u32) -> Result<bool> {
        use shoal_plan::algorithms::allreduce::recursive_doubling::ALGORITHM as BY;
        const ID: u32 = BY.id();
        let mut flag = [ok as u8];
        let choice = Choice::Builtin(&BY);
        let args = CollArgs {
            op: ReduceOp::Min,
            algorithm: Some(Named::Plan(choice)),
            ..CollArgs::new(Collective::Allreduce, 1, DType::U8)
        };
        let shape = self.shape(&args)?;
        let choice = self.engine.selector.choose(&shape, 1, Some(choice), None)?;
        let cp = self.plan(shape, choice, None)?;
        let sig = CallSig {
            kind: 0,
            dtype: DType::U8.index(),
            op: ReduceOp::Min.index(),
            algo: ID,
            root: 0,
            count: 1,
            history,
        };
        let describe = || {
            format!(
                "agreement after an in-network allreduce on rank {}",
                self.members[self.rank]
            )
        };
        let ctx = self.call_context(seq, sig, DType::U8, ReduceOp::Min, &describe);
        self.engine.run(&cp, &ctx, CallBuffers::in_place(&mut flag))?;
        Ok(flag[0] == 1)
    }
}

/// An allreduce the switch could run: of its types, not forced onto a
/// host algorithm.
fn switch_eligible(args: &CollArgs) -> bool {
    args.collective == Collective::Allreduce
        && !matches!(args.algorithm, Some(Named::Plan(_)))
        && ina::wire_types(args.dtype, args.op).is_some()
}
