//! Providers of collectives: who runs a call. Each provider is one file
//! under `comm/` (it runs calls with the communicator's parts) and one line
//! in the `providers!` table of `comm/mod.rs`; this module holds what
//! deciding among them needs and nothing of any one of them: the pricing
//! half of the seam ([`Provider`]: can it run a call, what would it cost),
//! what pricing may read ([`Market`]), and [`cheapest`], which merges the
//! estimates per call shape, UCC-style, so a provider wins exactly the
//! sizes where it is cheapest.
//!
//! Pricing borrows what it needs for one call (the selector, the binding's
//! plan source) through the [`Market`]; running happens later, possibly on
//! another thread, by the provider's `RunCall`. An algorithm a caller names
//! is resolved once, where the call is described, to a [`Named`]: a
//! provider's own algorithm or a host algorithm of the registry.

use shoal_plan::CallShape;

use crate::error::Result;
use crate::registry::Choice;
use crate::select::{PlanSource, Selector};

/// Which provider runs a call: its place in the `providers!` table of
/// `comm/mod.rs`, which also orders them where prices tie.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProviderId(u8);

impl ProviderId {
    /// The plan executor, first in the table: it runs every call, so it is
    /// the provider of a call no other can or may run, and the fallback.
    pub const PLANS: ProviderId = ProviderId(0);

    /// The provider at `index` in the table.
    pub(crate) const fn at(index: usize) -> ProviderId {
        assert!(index <= u8::MAX as usize);
        ProviderId(index as u8)
    }

    /// Its place in the table.
    pub(crate) fn index(self) -> usize {
        self.0 as usize
    }
}

/// An algorithm a caller names (`algorithm=`), resolved once where the
/// call is described (the binding's `Call`, by `Named::resolve` in
/// `comm/providers.rs`, which knows every provider), so calls carry it
/// typed and never look a name up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Named {
    /// A host algorithm (built-in or registered), run by the plan executor.
    Plan(Choice),
    /// A provider's own algorithm, such as the switch's `ina` (for
    /// allreduce only: another collective refuses it when called).
    Provider(ProviderId),
}

impl Named {
    /// The host algorithm named, if it is one.
    pub fn host(named: Option<Named>) -> Option<Choice> {
        match named {
            Some(Named::Plan(choice)) => Some(choice),
            _ => None,
        }
    }
}

/// What the switch offers a call, as far as deciding it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwitchState {
    /// Nothing: no switch job, the switch is away, or the call is not one
    /// it runs (another collective, dtype or op; a host algorithm named).
    Away,
    /// Usable: priced against the plans.
    Usable,
    /// Away, and this call is the one its retry is due at: it goes through
    /// the switch (`Ina::retry_due`).
    Retry,
}

/// What pricing one call may read, borrowed for that call.
pub struct Market<'a> {
    pub selector: &'a Selector,
    /// Prices the algorithms registered from Python (none without it).
    pub source: Option<&'a dyn PlanSource>,
    /// What the switch offers the call.
    pub switch: SwitchState,
    /// The most ranks on one host: they share its link to the network.
    pub per_link: usize,
}

impl Market<'_> {
    /// The cost of the call run by the cheapest plan (built-in or
    /// registered): the plan executor's price, and a part of others'.
    pub fn plan_cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
        self.selector.best_cost(shape, elem_size, self.source)
    }
}

/// A provider's pricing: its offer for a call.
pub trait Provider: Sync {
    /// Whether it can run a call of `shape` at all.
    fn can_run(&self, market: &Market, shape: &CallShape, elem_size: usize) -> bool;
    /// The estimated time of the call, in seconds (asked only of providers
    /// that can run it).
    fn cost(&self, market: &Market, shape: &CallShape, elem_size: usize) -> Result<f64>;
}

/// The provider with the cheapest estimate for a call; ties go to the one
/// listed first. A provider that alone can run the call wins unpriced: an
/// estimate may run the user's code (a registered algorithm's cost).
pub fn cheapest(
    providers: &[(ProviderId, &dyn Provider)],
    market: &Market,
    shape: &CallShape,
    elem_size: usize,
) -> Result<Option<ProviderId>> {
    let able: Vec<&(ProviderId, &dyn Provider)> = providers
        .iter()
        .filter(|(_, p)| p.can_run(market, shape, elem_size))
        .collect();
    if able.len() <= 1 {
        return Ok(able.first().map(|(id, _)| *id));
    }
    let mut best: Option<(ProviderId, f64)> = None;
    for (id, p) in able {
        let estimate = p.cost(market, shape, elem_size)?;
        if best.is_none_or(|(_, b)| estimate < b) {
            best = Some((*id, estimate));
        }
    }
    Ok(best.map(|(id, _)| id))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::select::tests::shape;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A provider priced `fixed + per_byte * bytes`, counting how often.
    struct Linear {
        able: bool,
        fixed: f64,
        per_byte: f64,
        priced: AtomicUsize,
    }

    impl Linear {
        fn new(fixed: f64, per_byte: f64) -> Linear {
            Linear {
                able: true,
                fixed,
                per_byte,
                priced: AtomicUsize::new(0),
            }
        }
    }

    impl Provider for Linear {
        fn can_run(&self, _: &Market, _: &CallShape, _: usize) -> bool {
            self.able
        }
        fn cost(&self, _: &Market, shape: &CallShape, elem_size: usize) -> Result<f64> {
            self.priced.fetch_add(1, Ordering::Relaxed);
            Ok(self.fixed + self.per_byte * (shape.count * elem_size) as f64)
        }
    }

    /// A market of built-in plans only: no registered algorithms.
    pub(crate) fn market(selector: &Selector, switch: SwitchState, per_link: usize) -> Market<'_> {
        Market {
            selector,
            source: None,
            switch,
            per_link,
        }
    }

    const FIRST: ProviderId = ProviderId::at(0);
    const SECOND: ProviderId = ProviderId::at(1);

    #[test]
    fn a_provider_cheaper_for_large_sizes_wins_only_there() {
        // The first: cheap to start, dear per byte; the second the other
        // way round. They cost the same (2100) at 1000 bytes.
        let selector = Selector::new("", crate::select::TCP_COST).unwrap();
        let market = market(&selector, SwitchState::Away, 1);
        let plans = Linear::new(100.0, 2.0);
        let switch = Linear::new(1100.0, 1.0);
        let both: [(ProviderId, &dyn Provider); 2] = [(FIRST, &plans), (SECOND, &switch)];
        let pick = |bytes| cheapest(&both, &market, &shape(bytes), 1).unwrap().unwrap();
        assert_eq!(pick(1), FIRST);
        assert_eq!(pick(999), FIRST);
        assert_eq!(pick(1000), FIRST, "a tie goes to the first");
        assert_eq!(pick(1001), SECOND);
        assert_eq!(pick(1 << 20), SECOND);
    }

    #[test]
    fn a_provider_that_cannot_run_the_call_is_neither_chosen_nor_priced() {
        let selector = Selector::new("", crate::select::TCP_COST).unwrap();
        let market = market(&selector, SwitchState::Away, 1);
        let plans = Linear::new(1.0, 1.0);
        let mut switch = Linear::new(0.0, 0.0);
        switch.able = false;
        let both: [(ProviderId, &dyn Provider); 2] = [(FIRST, &plans), (SECOND, &switch)];
        assert_eq!(cheapest(&both, &market, &shape(8), 4).unwrap(), Some(FIRST));
        assert_eq!(switch.priced.load(Ordering::Relaxed), 0);
        assert_eq!(
            plans.priced.load(Ordering::Relaxed),
            0,
            "a lone provider wins unpriced"
        );
        let mut none = Linear::new(0.0, 0.0);
        none.able = false;
        assert_eq!(
            cheapest(&[(FIRST, &none)], &market, &shape(8), 4).unwrap(),
            None
        );
    }
}
