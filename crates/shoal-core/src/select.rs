//! Algorithm selection: a user override (the call's `algorithm=` argument,
//! else `SHOAL_ALGO`) wins; otherwise the cheapest algorithm under the
//! alpha-beta-gamma cost model of the transport in use.

use std::collections::HashMap;
use std::sync::Mutex;

use shoal_plan::algorithms::{self, Algorithm, CostParams};
use shoal_plan::{CallShape, Collective};

use crate::error::{Error, Result};
use crate::lru::Lru;

/// Algorithm choices remembered (a few dozen bytes each).
const CHOICES_CACHED: usize = 4096;

/// Cost parameters for shared memory between ranks of one host.
pub const SHM_COST: CostParams = CostParams {
    alpha: 2e-6,
    beta: 1.0 / 4e9,
    gamma: 1.0 / 4e9,
    alpha_local: 2e-6,
    beta_local: 1.0 / 4e9,
};
/// Cost parameters for TCP (loopback or a LAN).
pub const TCP_COST: CostParams = CostParams {
    alpha: 30e-6,
    beta: 1.0 / 1.5e9,
    gamma: 1.0 / 4e9,
    alpha_local: 2e-6,
    beta_local: 1.0 / 4e9,
};

pub struct Selector {
    overrides: HashMap<Collective, &'static Algorithm>,
    /// `SHOAL_ALGO=allreduce:ina`: allreduce goes through the switch.
    ina_forced: bool,
    /// Replaced once by the calibration at init; read on every call.
    cost: Mutex<CostParams>,
    /// The cheapest algorithm per call shape and element size, so repeated
    /// calls do not price every algorithm again; cleared when the cost
    /// changes, bounded because a program may use endless distinct counts.
    cheapest: Mutex<Lru<(CallShape, usize), &'static Algorithm>>,
}

impl Selector {
    /// `spec` is the `SHOAL_ALGO` syntax: `collective:algorithm` pairs separated by commas.
    pub fn new(spec: &str, cost: CostParams) -> Result<Selector> {
        let mut overrides = HashMap::new();
        let mut ina_forced = false;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (coll, algo) = item.split_once(':').ok_or_else(|| {
                Error::invalid(format!(
                    "SHOAL_ALGO entry {item:?} is not 'collective:algorithm' (e.g. allreduce:ring)"
                ))
            })?;
            let collective = parse_collective(coll.trim())?;
            if collective == Collective::Allreduce && algo.trim() == crate::ina::INA {
                ina_forced = true;
                continue;
            }
            let alg = algorithms::find(collective, algo.trim()).map_err(Error::invalid)?;
            overrides.insert(collective, alg);
        }
        Ok(Selector {
            overrides,
            ina_forced,
            cost: Mutex::new(cost),
            cheapest: Mutex::new(Lru::new(CHOICES_CACHED)),
        })
    }

    /// The algorithm for one call, and its id (carried in message signatures
    /// so ranks that chose differently are caught; see `Algorithm::id`).
    pub fn choose(
        &self,
        shape: &CallShape,
        elem_size: usize,
        explicit: Option<&str>,
    ) -> Result<(u32, &'static Algorithm)> {
        let alg = match explicit {
            Some(name) => {
                let alg = algorithms::find(shape.collective, name).map_err(Error::invalid)?;
                if !alg.handles(shape) {
                    return Err(Error::invalid(format!(
                        "{} algorithm '{}' takes no per-rank counts; {}",
                        shape.collective,
                        alg.name,
                        counts_takers(shape)
                    )));
                }
                alg
            }
            // A SHOAL_ALGO choice that cannot run the call leaves it to the cost model.
            None => match self.overrides.get(&shape.collective) {
                Some(alg) if alg.handles(shape) => alg,
                _ => self.cheapest(shape, elem_size)?,
            },
        };
        Ok((alg.id(), alg))
    }

    /// Whether `SHOAL_ALGO` sends allreduce through the switch.
    pub fn ina_forced(&self) -> bool {
        self.ina_forced
    }

    /// The estimated time of the cheapest plan algorithm for a call.
    pub fn best_cost(&self, shape: &CallShape, elem_size: usize) -> Result<f64> {
        let alg = self.cheapest(shape, elem_size)?;
        Ok((alg.cost)(shape, elem_size, &self.cost()))
    }

    /// The cost parameters in use.
    pub fn cost(&self) -> CostParams {
        *self.cost.lock().unwrap()
    }

    /// Replaces the cost parameters (every rank must set the same ones).
    pub fn set_cost(&self, cost: CostParams) {
        *self.cost.lock().unwrap() = cost;
        self.cheapest.lock().unwrap().clear();
    }

    fn cheapest(&self, shape: &CallShape, elem_size: usize) -> Result<&'static Algorithm> {
        let key = (shape.clone(), elem_size);
        if let Some(alg) = self.cheapest.lock().unwrap().get(&key) {
            return Ok(alg);
        }
        let cost = self.cost();
        let alg = algorithms::for_collective(shape.collective)
            .filter(|a| a.handles(shape))
            .map(|a| ((a.cost)(shape, elem_size, &cost), a))
            .min_by(|x, y| x.0.total_cmp(&y.0))
            .map(|(_, a)| a)
            .ok_or_else(|| {
                Error::runtime(format!("no algorithm implements {}", shape.collective))
            })?;
        self.cheapest.lock().unwrap().insert(key, alg);
        Ok(alg)
    }
}

/// Names the algorithms that can run a call of `shape` (with per-rank counts).
fn counts_takers(shape: &CallShape) -> String {
    let names: Vec<&str> = algorithms::for_collective(shape.collective)
        .filter(|a| a.handles(shape))
        .map(|a| a.name)
        .collect();
    format!("those that do: {}", names.join(", "))
}

pub fn parse_collective(name: &str) -> Result<Collective> {
    Collective::from_name(name).ok_or_else(|| {
        let valid: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
        Error::invalid(format!(
            "unknown collective '{name}'; valid: {}",
            valid.join(", ")
        ))
    })
}
