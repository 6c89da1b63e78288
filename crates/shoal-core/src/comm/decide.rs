//! Who runs a call, and with which algorithm: decided once per call shape
//! on each communicator and kept as a [`Decision`], which preparing a call,
//! `choose_algorithm` and `plan_steps` all read, so they cannot disagree.
//! The providers are asked through the table of `comm/mod.rs`
//! (`providers.rs`): none is named here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, Weak};

use shoal_plan::{CallShape, Collective};

use super::adapt::Adapt;
use super::providers;
use super::{CollArgs, CommState, Communicator, RunCall};
use crate::dtype::{DType, ReduceOp};
use crate::error::{Error, Result};
use crate::exec::CompiledPlan;
use crate::lru::Lru;
use crate::provider::{self, Market, Named, Provider, ProviderId, SwitchState};
use crate::registry::Choice;
use crate::select::PlanSource;

/// Decisions a communicator remembers (a few dozen bytes each: the plans
/// they name stay bounded by the plan cache, `SHOAL_PLAN_CACHE`).
const DECISIONS_CACHED: usize = 4096;

/// Everything a decision depends on, but the selector's state (see
/// [`Decision::made_under`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct DecisionKey {
    pub shape: CallShape,
    pub dtype: DType,
    /// `Sum` for the collectives that do not reduce.
    pub op: ReduceOp,
    /// The algorithm the caller named, if any.
    pub named: Option<Named>,
    pub switch: SwitchState,
}

/// How the calls of one [`DecisionKey`] run.
#[derive(Clone)]
pub(super) struct Decision {
    pub provider: ProviderId,
    /// The host algorithm: the plan's (through the switch, its fallback's).
    pub choice: Choice,
    /// Its id, the plan cache's and the first-use agreement's key.
    pub plan_id: u32,
    /// The algorithm id the call's messages carry: the provider's own,
    /// else the plan's.
    pub sig_algo: u32,
    /// The algorithm run, as logs and errors name it.
    pub name: &'static str,
    /// The plan, while the plan cache holds it: a decision does not keep a
    /// plan alive past the cache's bound (but for the last one read, see
    /// [`Decisions`]).
    plan: Weak<CompiledPlan>,
    /// The selector's generation it was made under: it holds while that is
    /// unchanged (no new cost, tables or registrations).
    made_under: (usize, usize),
    /// The algorithms its calls measure as they run, `choice` first
    /// (`adapt.rs`); `None` where they all run `choice`.
    contenders: Option<Arc<[Choice]>>,
}

/// The measurements of a communicator's adapting shapes, touched only by
/// the calls made (not by inspection), so every member keeps and forgets
/// alike.
pub(super) struct Adapting(Lru<DecisionKey, Arc<Adapt>>);

impl Default for Adapting {
    fn default() -> Adapting {
        Adapting(Lru::new(DECISIONS_CACHED))
    }
}

impl Adapting {
    /// The measurements of `key`'s calls, if any, left where they are in
    /// the order of forgetting (inspection must not change it).
    pub(super) fn peek(&self, key: &DecisionKey) -> Option<&Arc<Adapt>> {
        self.0.peek(key)
    }

    /// The measurements of `key`'s calls among `contenders`: kept while the
    /// decision names the same ones (a new cost or table may name others).
    pub(super) fn of(&mut self, key: &DecisionKey, contenders: &Arc<[Choice]>) -> Arc<Adapt> {
        if let Some(adapt) = self.0.get(key) {
            if adapt.contenders[..] == contenders[..] {
                return adapt;
            }
        }
        let adapt = Arc::new(Adapt::new(contenders.clone()));
        self.0.insert(key.clone(), adapt.clone());
        adapt
    }
}

impl Decision {
    /// The decision for a call its shape's measurements give to another of
    /// its contenders (`adapt.rs`: only the plans' calls have several).
    pub(super) fn run_by(&mut self, choice: Choice) {
        self.choice = choice;
        self.plan_id = choice.id();
        self.sig_algo = self.plan_id;
        self.name = choice.name();
    }
}

/// A call's decision as preparing it needs it (`Communicator::decided`).
pub(super) struct Decided {
    pub decision: Decision,
    pub cp: Arc<CompiledPlan>,
    /// How its provider runs it.
    pub runs: Box<dyn RunCall>,
    /// The call's shape (its key's).
    pub shape: CallShape,
    /// Its shape's measurements, where its calls choose as they run.
    pub adapt: Option<Arc<Adapt>>,
}

/// A communicator's decisions, bounded like the selector's choices, and
/// the last one read with its plan: a program that repeats one call (a
/// training loop's) finds it by comparing keys, without hashing one.
pub(super) struct Decisions {
    cached: Lru<DecisionKey, Decision>,
    last: Option<(DecisionKey, Decision, Arc<CompiledPlan>)>,
}

impl Decisions {
    pub(super) fn len(&self) -> usize {
        self.cached.len()
    }

    /// The decision of `key` made under `generation`, and its plan.
    fn get(
        &mut self,
        key: &DecisionKey,
        generation: (usize, usize),
    ) -> Option<(Decision, Arc<CompiledPlan>)> {
        if let Some((k, d, plan)) = &self.last {
            if k == key && d.made_under == generation {
                return Some((d.clone(), plan.clone()));
            }
        }
        let decision = self.cached.get(key)?;
        if decision.made_under != generation {
            return None;
        }
        let plan = decision.plan.upgrade()?;
        self.last = Some((key.clone(), decision.clone(), plan.clone()));
        Some((decision, plan))
    }

    fn insert(&mut self, key: DecisionKey, decision: Decision) {
        self.cached.insert(key, decision);
    }
}

impl Default for Decisions {
    fn default() -> Decisions {
        Decisions {
            cached: Lru::new(DECISIONS_CACHED),
            last: None,
        }
    }
}

impl Communicator {
    /// How a call made (not inspected) runs: its decision, remembered or
    /// made, its plan and its provider's runner; returned with the
    /// communicator's state locked, for the sequence numbers preparing the
    /// call takes next (a known call reads its decision under that lock).
    pub(super) fn decided(
        &self,
        args: &CollArgs,
        shape: CallShape,
        op: ReduceOp,
        source: Option<&dyn PlanSource>,
    ) -> Result<(Decided, MutexGuard<'_, CommState>)> {
        let key = self.decision_key(args, shape, op, true);
        let mut st = self.state.lock().unwrap();
        let (decision, cp) = match self.known_decision(&mut st, &key) {
            Some(known) => known,
            None => {
                drop(st);
                let made = self.decide(&key, source)?;
                st = self.state.lock().unwrap();
                made
            }
        };
        let runs = self.runner(decision.provider, &key.shape)?;
        let adapt = (decision.contenders.as_ref()).map(|c| st.adapting.of(&key, c));
        let shape = key.shape;
        Ok((
            Decided {
                decision,
                cp,
                runs,
                shape,
                adapt,
            },
            st,
        ))
    }

    /// The key of a call's decision. `made`: the call is made, not
    /// inspected (it may join the switch and counts towards its retry).
    pub(super) fn decision_key(
        &self,
        args: &CollArgs,
        shape: CallShape,
        op: ReduceOp,
        made: bool,
    ) -> DecisionKey {
        DecisionKey {
            shape,
            dtype: args.dtype,
            op,
            named: args.algorithm,
            switch: self.switch_offer(args, made),
        }
    }

    /// The remembered decision of `key` and its plan, if both are still
    /// good (read under the state's lock, which preparing a call holds).
    fn known_decision(
        &self,
        st: &mut CommState,
        key: &DecisionKey,
    ) -> Option<(Decision, Arc<CompiledPlan>)> {
        st.decisions.get(key, self.engine.selector.generation())
    }

    /// The decision of `key` and its plan: remembered, else made and
    /// remembered.
    pub(super) fn decision(
        &self,
        key: &DecisionKey,
        source: Option<&dyn PlanSource>,
    ) -> Result<(Decision, Arc<CompiledPlan>)> {
        if let Some(known) = self.known_decision(&mut self.state.lock().unwrap(), key) {
            return Ok(known);
        }
        self.decide(key, source)
    }

    /// Decides `key`: prices the providers, chooses the host algorithm,
    /// fetches or builds its plan (unlocked: a registered algorithm's cost
    /// and plan run Python), and remembers the decision.
    pub(super) fn decide(
        &self,
        key: &DecisionKey,
        source: Option<&dyn PlanSource>,
    ) -> Result<(Decision, Arc<CompiledPlan>)> {
        let selector = &self.engine.selector;
        let made_under = selector.generation();
        let provider = self.provider_for(key, source)?;
        let shape = &key.shape;
        let choice = selector.choose(shape, key.dtype.size(), Named::host(key.named), source)?;
        let plan_id = choice.id();
        let cp = self.plan(shape.clone(), choice, source)?;
        let contenders = self.contenders(key, provider, source)?;
        let (name, sig_algo) = providers::provider(provider)
            .algorithm()
            .unwrap_or((choice.name(), plan_id));
        let decision = Decision {
            provider,
            choice,
            plan_id,
            sig_algo,
            name,
            plan: Arc::downgrade(&cp),
            made_under,
            contenders,
        };
        // Without a source registered algorithms were not priced: not a
        // decision to keep (the selector keeps no such choice either).
        if source.is_some() || made_under.1 == 0 {
            let mut st = self.state.lock().unwrap();
            st.decisions.insert(key.clone(), decision.clone());
        }
        Ok((decision, cp))
    }

    /// The algorithms the calls of `key` measure as they run (`adapt.rs`):
    /// where `SHOAL_ADAPT` covers the call, the call is the plans'
    /// and the selector's to decide, without per-rank counts, its per-rank
    /// block at least `SHOAL_ADAPT_BYTES`, no host of the job runs more ranks
    /// than it has CPUs, and the selector names several.
    fn contenders(
        &self,
        key: &DecisionKey,
        provider: ProviderId,
        source: Option<&dyn PlanSource>,
    ) -> Result<Option<Arc<[Choice]>>> {
        let config = &self.engine.config;
        let shape = &key.shape;
        let bytes = shape.count * key.dtype.size();
        let adapts = config
            .adapt
            .covers(shape.collective, key.dtype, key.op, shape.world)
            && provider == ProviderId::PLANS
            && key.named.is_none()
            && self.size() > 1
            && shape.counts.is_none()
            && bytes > 0
            && bytes >= config.adapt_bytes
            && !self.engine.oversubscribed_somewhere.load(Ordering::Relaxed);
        if !adapts {
            return Ok(None);
        }
        let all = self
            .engine
            .selector
            .contenders(shape, key.dtype.size(), source)?;
        Ok((all.len() > 1).then(|| all.into()))
    }

    /// Who runs a call. A provider that insists runs it (the switch, when
    /// its retry is due); else the one whose algorithm was asked for
    /// (`algorithm="ina"`, `SHOAL_ALGO=allreduce:ina`), the plans for a host
    /// algorithm named; else the cheapest that can run it. Only the plans
    /// run collectives other than allreduce.
    fn provider_for(
        &self,
        key: &DecisionKey,
        source: Option<&dyn PlanSource>,
    ) -> Result<ProviderId> {
        let collective = key.shape.collective;
        if collective != Collective::Allreduce {
            return match key.named {
                Some(named @ Named::Provider(_)) => Err(Error::invalid(format!(
                    "algorithm '{}' is for allreduce only, not {collective}",
                    named.name()
                ))),
                _ => Ok(ProviderId::PLANS),
            };
        }
        if let Some((id, _)) = providers::all().find(|(_, p)| p.insists(key.switch)) {
            return Ok(id);
        }
        match key.named {
            Some(Named::Provider(id)) => return Ok(id),
            Some(Named::Plan(_)) => return Ok(ProviderId::PLANS),
            None => {}
        }
        if let Some(name) = self.engine.selector.switch_forced() {
            return Ok(providers::by_algorithm(name).unwrap_or(ProviderId::PLANS));
        }
        let market = Market {
            selector: &self.engine.selector,
            source,
            switch: key.switch,
            per_link: self.busiest_host,
        };
        let offers: Vec<(ProviderId, &dyn Provider)> = providers::all()
            .map(|(id, p)| (id, p as &dyn Provider))
            .collect();
        let cheapest = provider::cheapest(&offers, &market, &key.shape, key.dtype.size())?;
        Ok(cheapest.unwrap_or(ProviderId::PLANS))
    }

    /// How `provider` runs a call of `shape` (on every call: no look-up,
    /// the id is the provider's place in the table).
    fn runner(&self, provider: ProviderId, shape: &CallShape) -> Result<Box<dyn RunCall>> {
        providers::provider(provider).runner(self, shape)
    }
}
