//! What a provider of collectives is to a communicator ([`CallProvider`]:
//! its pricing, its own algorithm if it has one, whether it insists on a
//! call, and how it runs a call, falling back as it sees fit), and the
//! look-ups over every provider, which are listed once, in the `providers!`
//! table of `comm/mod.rs`. Each provider is one file beside this one;
//! nothing outside it names it.

use shoal_plan::{CallShape, Collective};

use super::{Communicator, RunCall, PROVIDERS};
use crate::error::Result;
use crate::provider::{Named, Provider, ProviderId, SwitchState};
use crate::registry::{self, RegistryError};

/// A provider of collectives: everything about it but its line in the
/// table, in its own file. Its pricing half is [`Provider`].
pub(super) trait CallProvider: Provider {
    /// The algorithm it runs every call as, when it has one of its own (as
    /// the switch runs `ina`): its name (for `algorithm=` and `SHOAL_ALGO`)
    /// and its id in the call's signature. The plan executor runs the
    /// selector's choice instead.
    fn algorithm(&self) -> Option<(&'static str, u32)> {
        None
    }
    /// Whether it runs the call whatever the prices (the switch, when its
    /// retry is due).
    fn insists(&self, _switch: SwitchState) -> bool {
        false
    }
    /// How it runs a call of `shape`, and what it does if it fails in the
    /// middle of it (the switch redoes the call with the host plan): made
    /// when the call is prepared, on every call, under the communicator's
    /// state lock (before the call's sequence numbers are taken).
    fn runner(&self, comm: &Communicator, shape: &CallShape) -> Result<Box<dyn RunCall>>;
}

/// The provider `id` names.
pub(super) fn provider(id: ProviderId) -> &'static dyn CallProvider {
    PROVIDERS[id.index()]
}

/// Every provider with its id, in the table's order.
pub(super) fn all() -> impl Iterator<Item = (ProviderId, &'static dyn CallProvider)> {
    PROVIDERS
        .iter()
        .enumerate()
        .map(|(i, p)| (ProviderId::at(i), *p))
}

/// The provider whose own algorithm is `name`, if one is.
pub(super) fn by_algorithm(name: &str) -> Option<ProviderId> {
    all()
        .find(|(_, p)| p.algorithm().is_some_and(|(own, _)| own == name))
        .map(|(id, _)| id)
}

impl Named {
    /// The algorithm `name` (or alias) of `collective`: a provider's own,
    /// else a host algorithm, built-in or registered.
    pub fn resolve(
        collective: Collective,
        name: &str,
    ) -> std::result::Result<Named, RegistryError> {
        match by_algorithm(name) {
            Some(id) => Ok(Named::Provider(id)),
            None => Ok(Named::Plan(registry::find(collective, name)?)),
        }
    }

    /// The algorithm's name, as the caller wrote it (or its canonical name
    /// for an alias).
    pub fn name(self) -> &'static str {
        match self {
            Named::Plan(choice) => choice.name(),
            Named::Provider(id) => provider(id).algorithm().map_or("?", |(name, _)| name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gather_reduce::{self, GATHER_REDUCE};
    use super::*;
    use crate::dtype::DType;
    use crate::exec::CallBuffers;
    use crate::init::{init_world, InitArgs};
    use crate::provider::tests::market;
    use crate::select::tests::shape;
    use crate::select::Selector;

    #[test]
    fn a_provider_is_named_by_its_own_algorithm_and_host_algorithms_by_the_plans() {
        for (id, p) in all() {
            if let Some((name, _)) = p.algorithm() {
                assert_eq!(by_algorithm(name), Some(id));
            }
        }
        let ina = by_algorithm("ina").unwrap();
        assert_eq!(provider(ina).algorithm().unwrap().0, "ina");
        let hierarchical = by_algorithm("hierarchical_ina").unwrap();
        assert_ne!(ina, hierarchical);
        assert_eq!(by_algorithm("ring"), None);
        assert_eq!(
            Named::resolve(Collective::Allreduce, "ring").unwrap(),
            Named::Plan(registry::find(Collective::Allreduce, "ring").unwrap())
        );
        assert_eq!(
            Named::resolve(Collective::Allreduce, "ina").unwrap(),
            Named::Provider(ina)
        );
    }

    #[test]
    fn the_plans_come_first_and_run_every_call_as_the_selector_chooses() {
        let plans = provider(ProviderId::PLANS);
        assert_eq!(plans.algorithm(), None);
        let selector = Selector::new("", crate::select::TCP_COST).unwrap();
        let market = market(&selector, SwitchState::Usable, 1);
        assert!(plans.can_run(&market, &shape(8), 4));
        assert!(!plans.insists(SwitchState::Retry));
    }

    /// `data` allreduced (sum) on `world` with `algorithm=`, if named.
    fn allreduce(world: &Communicator, data: &mut [f32], algorithm: Option<Named>) -> Result<()> {
        let args = super::super::CollArgs {
            algorithm,
            ..super::super::CollArgs::new(Collective::Allreduce, data.len(), DType::F32)
        };
        world.collective(&args, CallBuffers::in_place(data))
    }

    #[test]
    fn a_provider_registered_by_its_line_is_priced_chosen_and_run() {
        let id = by_algorithm(gather_reduce::NAME).expect("registered by its line");
        assert!(std::ptr::addr_eq(provider(id), &GATHER_REDUCE));
        let world = init_world(&InitArgs {
            rank: Some(0),
            world_size: Some(1),
            addr: None,
        })
        .unwrap();
        let (f32_, allreduce_) = (DType::F32, Collective::Allreduce);

        // Offered, it is priced against the plans and wins (it is free).
        gather_reduce::open(true);
        let mut data = [1.0f32, 2.0];
        allreduce(&world, &mut data, None).unwrap();
        allreduce(&world, &mut data, None).unwrap();
        assert_eq!(data, [1.0, 2.0], "one rank sums itself");
        let (priced, run) = gather_reduce::counts();
        assert_eq!((priced, run), (1, 2), "decided once, run twice");
        let chosen = world.choose_algorithm(allreduce_, 2, f32_, 0, None, None);
        assert_eq!(chosen.unwrap(), gather_reduce::NAME);

        // Not offered, a new call shape is decided without it.
        gather_reduce::open(false);
        let mut three = [1.0f32; 3];
        allreduce(&world, &mut three, None).unwrap();
        assert_eq!(gather_reduce::counts(), (1, 2));
        let chosen = world.choose_algorithm(allreduce_, 3, f32_, 0, None, None);
        assert_ne!(chosen.unwrap(), gather_reduce::NAME);

        // Named, it runs unpriced; for another collective it is refused.
        let named = Named::resolve(allreduce_, gather_reduce::NAME).unwrap();
        assert_eq!(named, Named::Provider(id));
        allreduce(&world, &mut three, Some(named)).unwrap();
        assert_eq!(three, [1.0; 3]);
        assert_eq!(gather_reduce::counts(), (1, 3));
        let err = world
            .choose_algorithm(
                Collective::Broadcast,
                3,
                f32_,
                0,
                Some(gather_reduce::NAME),
                None,
            )
            .unwrap_err();
        assert!(
            err.message.contains("is for allreduce only, not broadcast"),
            "{}",
            err.message
        );
    }
}
