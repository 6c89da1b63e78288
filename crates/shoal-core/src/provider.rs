//! Providers of collectives: who runs a call. Three exist: the plan executor
//! (built-in algorithms and those registered from Python, chosen among by
//! the [`Selector`]), the switch (in-network aggregation, allreduce only)
//! and the switch behind the hosts' shared memory (hierarchical allreduce
//! with the switch as its inter-host step). Each one says whether it can run a call and what the call would
//! cost; [`cheapest`] merges their estimates per call shape, UCC-style, so a
//! provider wins exactly the sizes where it is cheapest.
//!
//! This is the pricing half. Pricing borrows what it needs for one call (the
//! selector, the binding's plan source), so it is a trait on short-lived
//! values; running happens later, possibly on another thread, by the
//! provider's running half (a `RunCall` in its own file under `comm/`,
//! registered in `comm/decide.rs` by its [`ProviderId`]). An algorithm a
//! caller names is resolved once, where the call is described, to a
//! [`Named`]: a provider's own algorithm or a host algorithm of the registry.

use shoal_plan::algorithms::CostParams;
use shoal_plan::{CallShape, Collective};

use crate::error::Result;
use crate::registry::{Choice, RegistryError};
use crate::select::{PlanSource, Selector};
use crate::{ina, registry};

/// Which provider runs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProviderId {
    /// The plan executor, running the selector's algorithm.
    Plans,
    /// The switch; the ranks then agree on its outcome.
    Switch,
    /// Host reduce-scatter, the switch per shard, host allgather
    /// (`hierarchical_ina`); the ranks then agree on its outcome.
    HierarchicalSwitch,
}

impl ProviderId {
    /// Every provider, in the order that breaks ties in [`cheapest`].
    pub const ALL: [ProviderId; 3] = [
        ProviderId::Plans,
        ProviderId::Switch,
        ProviderId::HierarchicalSwitch,
    ];

    /// The algorithm a provider runs every call as, when it has one of its
    /// own: its name (for `algorithm=` and `SHOAL_ALGO`) and its id in the
    /// call's signature. The plan executor runs the selector's choice.
    pub fn algorithm(self) -> Option<(&'static str, u32)> {
        match self {
            ProviderId::Plans => None,
            ProviderId::Switch => Some((registry::INA, registry::INA_ALGO_ID)),
            ProviderId::HierarchicalSwitch => Some((
                registry::HIERARCHICAL_INA,
                registry::HIERARCHICAL_INA_ALGO_ID,
            )),
        }
    }

    /// The provider an algorithm's name picks: the one whose algorithm it
    /// is, else the plan executor (any host algorithm).
    pub fn named(name: &str) -> ProviderId {
        ProviderId::ALL
            .into_iter()
            .find(|p| p.algorithm().is_some_and(|(own, _)| own == name))
            .unwrap_or(ProviderId::Plans)
    }

    /// What runs the call when this provider fails in the middle of it: a
    /// switch allreduce is redone with host algorithms (and the switch is
    /// not used again); a plan's failure is the call's.
    pub fn fallback(self) -> Option<ProviderId> {
        match self {
            ProviderId::Switch | ProviderId::HierarchicalSwitch => Some(ProviderId::Plans),
            ProviderId::Plans => None,
        }
    }
}

/// An algorithm a caller names (`algorithm=`), resolved once where the
/// call is described (the binding's `Call`), so calls carry it typed and
/// never look a name up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Named {
    /// A host algorithm (built-in or registered), run by the plan executor.
    Plan(Choice),
    /// A provider's own algorithm: the switch's `ina` or `hierarchical_ina`
    /// (for allreduce only: another collective refuses it when called).
    Provider(ProviderId),
}

impl Named {
    /// The algorithm `name` (or alias) of `collective`: a provider's own,
    /// else a host algorithm, built-in or registered.
    pub fn resolve(
        collective: Collective,
        name: &str,
    ) -> std::result::Result<Named, RegistryError> {
        match ProviderId::named(name) {
            ProviderId::Plans => Ok(Named::Plan(registry::find(collective, name)?)),
            provider => Ok(Named::Provider(provider)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Named::Plan(choice) => choice.name(),
            Named::Provider(p) => p.algorithm().map_or("?", |(name, _)| name),
        }
    }

    /// The host algorithm named, if it is one.
    pub fn host(named: Option<Named>) -> Option<Choice> {
        match named {
            Some(Named::Plan(choice)) => Some(choice),
            _ => None,
        }
    }
}

/// One provider's offer for a call.
pub trait Provider {
    fn id(&self) -> ProviderId;
    /// Whether it can run a call of `shape` at all.
    fn can_run(&self, shape: &CallShape, elem_size: usize) -> bool;
    /// The estimated time of the call, in seconds (asked only of providers
    /// that can run it).
    fn cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64>;
}

/// The provider with the cheapest estimate for a call; ties go to the one
/// listed first. A provider that alone can run the call wins unpriced: an
/// estimate may run the user's code (a registered algorithm's cost).
pub fn cheapest(
    providers: &[&dyn Provider],
    shape: &CallShape,
    elem_size: usize,
) -> Result<Option<ProviderId>> {
    let able: Vec<&dyn Provider> = providers
        .iter()
        .copied()
        .filter(|p| p.can_run(shape, elem_size))
        .collect();
    if able.len() <= 1 {
        return Ok(able.first().map(|p| p.id()));
    }
    let mut best: Option<(ProviderId, f64)> = None;
    for p in able {
        let estimate = p.cost(shape, elem_size)?;
        if best.is_none_or(|(_, b)| estimate < b) {
            best = Some((p.id(), estimate));
        }
    }
    Ok(best.map(|(id, _)| id))
}

/// The plan executor: runs every call, at the cost of the selector's
/// cheapest algorithm for it.
pub struct PlanExecutor<'a> {
    pub selector: &'a Selector,
    pub source: Option<&'a dyn PlanSource>,
}

impl Provider for PlanExecutor<'_> {
    fn id(&self) -> ProviderId {
        ProviderId::Plans
    }
    fn can_run(&self, _: &CallShape, _: usize) -> bool {
        true
    }
    fn cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
        self.selector.best_cost(shape, elem_size, self.source)
    }
}

/// The switch, for one allreduce: `usable` when this rank's membership works
/// and the switch can aggregate the call's dtype and op.
pub struct Switch<'a> {
    pub usable: bool,
    /// The most ranks on one host: they share its link to the switch.
    pub per_link: usize,
    /// Prices the agreement that ends every switch allreduce.
    pub plans: &'a PlanExecutor<'a>,
}

impl Switch<'_> {
    /// Every switch allreduce ends with the ranks agreeing on its outcome:
    /// a one-byte host allreduce, which decides for small messages.
    fn agreement(&self, shape: &CallShape) -> Result<f64> {
        let agreement = CallShape {
            count: 1,
            ..shape.clone()
        };
        self.plans.cost(&agreement, 1)
    }
}

impl Provider for Switch<'_> {
    fn id(&self) -> ProviderId {
        ProviderId::Switch
    }
    fn can_run(&self, _: &CallShape, _: usize) -> bool {
        self.usable
    }
    fn cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
        let params: CostParams = self.plans.selector.cost();
        let bytes = shape.count * elem_size;
        Ok(ina::cost(bytes, self.per_link, &params) + self.agreement(shape)?)
    }
}

/// The switch as the inter-host step of hierarchical allreduce: runs where
/// the switch does and the members sit on several hosts in equal blocks of
/// more than one rank (with one rank per host it is `Switch`'s call plus
/// nothing; on one host the switch has nothing to add up).
pub struct HierarchicalSwitch<'a>(pub &'a Switch<'a>);

impl Provider for HierarchicalSwitch<'_> {
    fn id(&self) -> ProviderId {
        ProviderId::HierarchicalSwitch
    }
    fn can_run(&self, shape: &CallShape, _: usize) -> bool {
        let (hosts, local) = shape.layout();
        self.0.usable && hosts > 1 && local > 1
    }
    fn cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
        let params: CostParams = self.0.plans.selector.cost();
        let bytes = shape.count * elem_size;
        let (_, local) = shape.layout();
        Ok(ina::hierarchical_cost(bytes, local, &params) + self.0.agreement(shape)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::tests::shape;
    use std::cell::Cell;

    /// A provider priced `fixed + per_byte * bytes`, counting how often.
    struct Linear {
        id: ProviderId,
        able: bool,
        fixed: f64,
        per_byte: f64,
        priced: Cell<usize>,
    }

    impl Linear {
        fn new(id: ProviderId, fixed: f64, per_byte: f64) -> Linear {
            Linear {
                id,
                able: true,
                fixed,
                per_byte,
                priced: Cell::new(0),
            }
        }
    }

    impl Provider for Linear {
        fn id(&self) -> ProviderId {
            self.id
        }
        fn can_run(&self, _: &CallShape, _: usize) -> bool {
            self.able
        }
        fn cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
            self.priced.set(self.priced.get() + 1);
            Ok(self.fixed + self.per_byte * (shape.count * elem_size) as f64)
        }
    }

    #[test]
    fn a_provider_cheaper_for_large_sizes_wins_only_there() {
        // Plans: cheap to start, dear per byte; the switch the other way
        // round. They cost the same (2100) at 1000 bytes.
        let plans = Linear::new(ProviderId::Plans, 100.0, 2.0);
        let switch = Linear::new(ProviderId::Switch, 1100.0, 1.0);
        let both: [&dyn Provider; 2] = [&plans, &switch];
        let pick = |bytes| cheapest(&both, &shape(bytes), 1).unwrap().unwrap();
        assert_eq!(pick(1), ProviderId::Plans);
        assert_eq!(pick(999), ProviderId::Plans);
        assert_eq!(pick(1000), ProviderId::Plans, "a tie goes to the first");
        assert_eq!(pick(1001), ProviderId::Switch);
        assert_eq!(pick(1 << 20), ProviderId::Switch);
    }

    #[test]
    fn a_provider_that_cannot_run_the_call_is_neither_chosen_nor_priced() {
        let plans = Linear::new(ProviderId::Plans, 1.0, 1.0);
        let mut switch = Linear::new(ProviderId::Switch, 0.0, 0.0);
        switch.able = false;
        let both: [&dyn Provider; 2] = [&plans, &switch];
        assert_eq!(
            cheapest(&both, &shape(8), 4).unwrap(),
            Some(ProviderId::Plans)
        );
        assert_eq!(switch.priced.get(), 0);
        assert_eq!(plans.priced.get(), 0, "a lone provider wins unpriced");
        let mut none = Linear::new(ProviderId::Plans, 0.0, 0.0);
        none.able = false;
        assert_eq!(cheapest(&[&none], &shape(8), 4).unwrap(), None);
    }

    #[test]
    fn hierarchical_switch_runs_with_several_ranks_per_host_and_wins_large_calls() {
        let selector = Selector::new("", crate::select::TCP_COST).unwrap();
        let plans = PlanExecutor {
            selector: &selector,
            source: None,
        };
        let switch = Switch {
            usable: true,
            per_link: 2,
            plans: &plans,
        };
        let hierarchical = HierarchicalSwitch(&switch);
        let all: [&dyn Provider; 3] = [&plans, &switch, &hierarchical];
        let two_per_host = |count| CallShape {
            ranks_per_host: 2,
            ..shape(count)
        };
        // 16 MiB of float32 on 2 hosts x 2 ranks: the host link carries the
        // buffer once (not twice, as with flat ina).
        let big = two_per_host(4 << 20);
        assert!(hierarchical.can_run(&big, 4));
        assert!(hierarchical.cost(&big, 4).unwrap() < switch.cost(&big, 4).unwrap());
        assert_eq!(
            cheapest(&all, &big, 4).unwrap(),
            Some(ProviderId::HierarchicalSwitch)
        );
        // One rank per host: nothing to reduce inside a host.
        assert!(!hierarchical.can_run(&shape(4 << 20), 4));
        // Small calls stay on host algorithms (latency decides).
        assert_eq!(
            cheapest(&all, &two_per_host(8), 4).unwrap(),
            Some(ProviderId::Plans)
        );
    }

    #[test]
    fn a_provider_is_named_by_its_own_algorithm_and_host_algorithms_by_the_plans() {
        for id in ProviderId::ALL {
            if let Some((name, _)) = id.algorithm() {
                assert_eq!(ProviderId::named(name), id);
            }
        }
        assert_eq!(ProviderId::named("ina"), ProviderId::Switch);
        assert_eq!(
            ProviderId::named("hierarchical_ina"),
            ProviderId::HierarchicalSwitch
        );
        assert_eq!(ProviderId::named("ring"), ProviderId::Plans);
    }

    #[test]
    fn only_the_switch_falls_back_and_to_the_plans() {
        assert_eq!(ProviderId::Switch.fallback(), Some(ProviderId::Plans));
        assert_eq!(
            ProviderId::HierarchicalSwitch.fallback(),
            Some(ProviderId::Plans)
        );
        assert_eq!(ProviderId::Plans.fallback(), None);
    }
}
