//! Who runs a call: every provider's pricing (`crate::provider`) is listed
//! in `provider_for`, and every provider's running half (its `RunCall`,
//! in its own file beside this one) in `runner`.

use shoal_plan::{CallShape, Collective};

use super::{hierarchical_switch, plans, switch, CollArgs, Communicator, RunCall};
use crate::error::{Error, Result};
use crate::provider::{self, HierarchicalSwitch, PlanExecutor, ProviderId, Switch};
use crate::select::PlanSource;
use crate::{ina, registry};

impl Communicator {
    /// Who runs a call. The switch runs allreduce only: when asked for
    /// (`algorithm="ina"`, `SHOAL_ALGO=allreduce:ina`), or when it is usable,
    /// can aggregate the dtype and op, and costs less than the cheapest plan
    /// algorithm. Naming a host algorithm (`algorithm=`) keeps the plans.
    pub(super) fn provider_for(
        &self,
        args: &CollArgs,
        shape: &CallShape,
        source: Option<&dyn PlanSource>,
    ) -> Result<ProviderId> {
        if args.collective != Collective::Allreduce {
            return match args.algorithm.as_deref() {
                Some(a) if registry::is_switch_algorithm(a) => Err(Error::invalid(format!(
                    "algorithm '{a}' is for allreduce only, not {}",
                    args.collective
                ))),
                _ => Ok(ProviderId::Plans),
            };
        }
        match args.algorithm.as_deref() {
            Some(name) => return Ok(ProviderId::named(name)),
            None => {
                if let Some(name) = self.engine.selector.switch_forced() {
                    return Ok(ProviderId::named(name));
                }
            }
        }
        let plans = PlanExecutor {
            selector: &self.engine.selector,
            source,
        };
        let switch = Switch {
            usable: self.ina().is_ok_and(|i| i.unusable().is_none())
                && ina::wire_types(args.dtype, args.op).is_some(),
            per_link: self.busiest_host,
            plans: &plans,
        };
        let hierarchical = HierarchicalSwitch(&switch);
        // Listed plans first: a tie keeps the host algorithms.
        let cheapest =
            provider::cheapest(&[&plans, &switch, &hierarchical], shape, args.dtype.size())?;
        Ok(cheapest.unwrap_or(ProviderId::Plans))
    }

    /// How `provider` runs a call of `shape`: every provider's running half
    /// is registered here, its pricing half in `provider_for`.
    pub(super) fn runner(
        &self,
        provider: ProviderId,
        shape: &CallShape,
    ) -> Result<Box<dyn RunCall>> {
        Ok(match provider {
            ProviderId::Plans => Box::new(plans::RunPlan),
            ProviderId::Switch => Box::new(switch::ViaSwitch::default()),
            ProviderId::HierarchicalSwitch => {
                Box::new(hierarchical_switch::HostsAndSwitch::new(self, shape)?)
            }
        })
    }
}
