//! Algorithm selection: a user override (the call's `algorithm=` argument,
//! else `SHOAL_ALGO`) wins; otherwise the first row of the tuning tables
//! that matches the call ([`crate::tune`]: `SHOAL_TUNE_FILE`'s, then the
//! built-in one); otherwise the cheapest algorithm under the
//! alpha-beta-gamma cost model of the transport in use.
//!
//! The candidates are the built-in algorithms and those registered at run
//! time ([`register`], from `shoal.algo.register` in Python). A registered
//! algorithm's plans and cost factors come from a [`PlanSource`] that the
//! binding passes in on the calling thread, and only when a cache misses:
//! the selector asks for the cost factors once per group size, the plan
//! cache for a plan once per call shape.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use shoal_plan::algorithms::{self, CostParams};
use shoal_plan::{CallShape, Collective, Plan};

use crate::error::{Error, Result};
use crate::lru::{FastMap, Lru};
use crate::registry::{find, handles, parse_collective, registered_for, Choice, Registered};
use crate::tune::Tables;

/// Registers algorithm `name` of `collective` (see [`crate::registry::register`]).
pub fn register(collective: Collective, name: &str) -> Result<Registered> {
    Ok(crate::registry::register(collective, name)?)
}

/// Algorithm choices remembered (a few dozen bytes each).
const CHOICES_CACHED: usize = 4096;

/// How much dearer than the cheapest algorithm, by the cost model, a
/// contender may be and still be measured while a job runs
/// (`comm/adapt.rs`): the model has priced a read in place 3.5 times too
/// fast before now, and a host's speed of moving data between cores can
/// change fivefold within seconds (docs/benchmarks.md).
const CONTENDER_SPREAD: f64 = 4.0;
/// The most contenders a call measures (`comm/adapt.rs`).
pub const MAX_CONTENDERS: usize = 4;

/// Cost parameters for shared memory between ranks of one host.
pub const SHM_COST: CostParams = CostParams {
    alpha: 2e-6,
    beta: 1.0 / 4e9,
    gamma: 1.0 / 4e9,
    alpha_local: 2e-6,
    beta_local: 1.0 / 4e9,
    beta_read: 1.0 / 4e9,
};
/// Cost parameters for TCP (loopback or a LAN).
pub const TCP_COST: CostParams = CostParams {
    alpha: 30e-6,
    beta: 1.0 / 1.5e9,
    gamma: 1.0 / 4e9,
    alpha_local: 2e-6,
    beta_local: 1.0 / 4e9,
    beta_read: 1.0 / 4e9,
};

/// Where registered algorithms' plans and costs come from. The binding
/// implements it on the thread that makes the call (the Python one while it
/// holds the GIL), so the core never calls into an interpreter from a thread
/// of its own.
pub trait PlanSource {
    /// The plan of `rank` for a call of `shape`.
    fn plan(&self, alg: Registered, shape: &CallShape, rank: usize) -> Result<Plan>;
    /// The cost factors for a group of `world` ranks, or `None` when the
    /// algorithm is to be chosen by name only.
    fn cost(&self, alg: Registered, world: usize) -> Result<Option<CostFactors>>;
    /// A digest of the algorithm's definition for calls of `shape`, which
    /// the ranks compare at the shape's first use (`agree::first_use`):
    /// definitions that make different plans for any rank must differ.
    /// Asked after `plan` for the same shape, so a source may reuse the
    /// plans it built then.
    fn digest(&self, alg: Registered, shape: &CallShape) -> Result<u64>;
}

/// A registered algorithm's cost, in the terms of the alpha-beta-gamma
/// model: the estimate is `messages * alpha + bytes * n * beta + reduced * n
/// * gamma` for a per-rank buffer of `n` bytes (docs/algorithms.md).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostFactors {
    /// Messages in sequence on the busiest rank.
    pub messages: f64,
    /// Bytes through the busiest rank's link, in units of the per-rank buffer.
    pub bytes: f64,
    /// Bytes reduced locally, in units of the per-rank buffer.
    pub reduced: f64,
}

impl CostFactors {
    fn estimate(&self, shape: &CallShape, elem_size: usize, p: &CostParams) -> f64 {
        let n = (shape.count * elem_size) as f64;
        self.messages * p.alpha + self.bytes * n * p.beta + self.reduced * n * p.gamma
    }
}

/// Parses `SHOAL_COST` (`alpha=2e-6,beta=2.5e-10,gamma=2.5e-10,alpha_local=..,beta_local=..,beta_read=..`;
/// missing keys keep `base`).
pub fn parse_cost(spec: &str, base: CostParams) -> Result<CostParams> {
    let mut cost = base;
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || {
            Error::invalid(format!(
                "SHOAL_COST entry {item:?} is not alpha=, beta=, gamma=, alpha_local=, beta_local= or beta_read=<seconds>"
            ))
        };
        let (key, value) = item.split_once('=').ok_or_else(bad)?;
        let value: f64 = value.trim().parse().map_err(|_| bad())?;
        // Costs are compared to pick algorithms: NaN, negative or infinite
        // figures would make every rank's choice arbitrary.
        if !(value.is_finite() && value >= 0.0) {
            return Err(Error::invalid(format!(
                "SHOAL_COST entry {item:?} must be a finite number >= 0"
            )));
        }
        match key.trim() {
            "alpha" => cost.alpha = value,
            "beta" => cost.beta = value,
            "gamma" => cost.gamma = value,
            "alpha_local" => cost.alpha_local = value,
            "beta_local" => cost.beta_local = value,
            "beta_read" => cost.beta_read = value,
            _ => return Err(bad()),
        }
    }
    Ok(cost)
}

pub struct Selector {
    /// `SHOAL_ALGO`'s choice per collective, indexed by `Collective as usize`
    /// (looked up on every call: no hashing).
    overrides: [Option<Choice>; Collective::ALL.len()],
    /// `SHOAL_ALGO=allreduce:ina` (or `hierarchical_ina`): allreduce goes
    /// through the switch, by that algorithm.
    switch_forced: Option<&'static str>,
    /// Replaced once by the calibration at init; read on every call.
    cost: Mutex<CostParams>,
    /// The automatic choice per call shape and element size (a tuning
    /// table's, else the cheapest), and its cost, so repeated calls neither
    /// search the tables nor price every algorithm again; cleared when the
    /// cost or the tables change, bounded because a program may use endless
    /// distinct counts.
    cheapest: Mutex<Lru<(CallShape, usize), (Choice, f64)>>,
    /// `REGISTRATIONS` when `cheapest` was last cleared.
    registrations: AtomicUsize,
    /// Whether the cost model may pick algorithms that read peers' memory
    /// (all ranks on one host over shm); set once at init.
    shared_memory: AtomicBool,
    /// Registered algorithms' cost factors per (id, group size), asked once.
    factors: Mutex<FastMap<(u32, usize), Option<CostFactors>>>,
    /// Measured choices, consulted before the cost model; set once at init
    /// (none before: `Config` validation builds a selector too).
    tables: RwLock<Option<Tables>>,
    /// Counts the changes to what choices depend on (the cost, the tables,
    /// shared memory): decisions made under an older one are made again.
    generation: AtomicUsize,
}

impl Selector {
    /// `spec` is the `SHOAL_ALGO` syntax: `collective:algorithm` pairs separated by commas.
    pub fn new(spec: &str, cost: CostParams) -> Result<Selector> {
        let mut overrides = [None; Collective::ALL.len()];
        let mut switch_forced = None;
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (coll, algo) = item.split_once(':').ok_or_else(|| {
                Error::invalid(format!(
                    "SHOAL_ALGO entry {item:?} is not 'collective:algorithm' (e.g. allreduce:ring)"
                ))
            })?;
            let collective = parse_collective(coll.trim())?;
            if collective == Collective::Allreduce
                && crate::registry::is_switch_algorithm(algo.trim())
            {
                switch_forced = [crate::registry::INA, crate::registry::HIERARCHICAL_INA]
                    .into_iter()
                    .find(|&a| a == algo.trim());
                continue;
            }
            overrides[collective as usize] = Some(find(collective, algo.trim())?);
        }
        Ok(Selector {
            overrides,
            switch_forced,
            cost: Mutex::new(cost),
            cheapest: Mutex::new(Lru::new(CHOICES_CACHED)),
            factors: Mutex::new(FastMap::default()),
            registrations: AtomicUsize::new(crate::registry::registrations()),
            tables: RwLock::new(None),
            shared_memory: AtomicBool::new(false),
            generation: AtomicUsize::new(0),
        })
    }

    /// What the selector's choices were made under: its own changes (cost,
    /// tables, shared memory) and the registrations. A choice remembered
    /// elsewhere (a communicator's decisions) holds while this is unchanged.
    pub fn generation(&self) -> (usize, usize) {
        (
            self.generation.load(Ordering::Acquire),
            crate::registry::registrations(),
        )
    }

    /// Forgets the choices made so far: something they depend on changed.
    fn forget_choices(&self) {
        self.cheapest.lock().unwrap().clear();
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Installs the tuning tables (every rank must install the same ones:
    /// init checks their digest).
    pub fn set_tables(&self, tables: Tables) {
        *self.tables.write().unwrap() = Some(tables);
        self.forget_choices();
    }

    /// The tuning tables in force, if installed.
    pub fn tables(&self) -> Option<Tables> {
        self.tables.read().unwrap().clone()
    }

    /// The algorithm for one call: `explicit`, the one the caller named, if
    /// it can run the call. Its id is carried in message signatures so ranks
    /// that chose differently are caught (see `Algorithm::id`). Registered
    /// algorithms are candidates only with a `source`.
    pub fn choose(
        &self,
        shape: &CallShape,
        elem_size: usize,
        explicit: Option<Choice>,
        source: Option<&dyn PlanSource>,
    ) -> Result<Choice> {
        match explicit {
            Some(choice) => {
                if let Choice::Builtin(a) = choice {
                    if let Some(why) = a.refuses(shape).filter(|_| shape.counts.is_none()) {
                        let (c, name) = (shape.collective, a.name);
                        return Err(Error::invalid(format!("{c} algorithm '{name}' {why}")));
                    }
                }
                if !handles(choice, shape) {
                    return Err(Error::invalid(format!(
                        "{} algorithm '{}' takes no per-rank counts; {}",
                        shape.collective,
                        choice.name(),
                        counts_takers(shape)
                    )));
                }
                Ok(choice)
            }
            // A SHOAL_ALGO choice that cannot run the call leaves it to the
            // tables and the cost model.
            None => match self.overrides[shape.collective as usize] {
                Some(choice) if handles(choice, shape) => Ok(choice),
                _ => Ok(self.cheapest(shape, elem_size, source)?.0),
            },
        }
    }

    /// The algorithms a call of `shape` may run while the job measures
    /// which is fastest (`comm/adapt.rs`): the automatic choice first, then
    /// by the cost model the cheapest two by messages and the cheapest by
    /// reads in place, of those it prices within [`CONTENDER_SPREAD`] of
    /// the cheapest of all (at most [`MAX_CONTENDERS`]). The two ways of
    /// moving data are the ones whose speeds part most when a host's state
    /// changes. Just the one choice where `SHOAL_ALGO` names it or it is a
    /// registered algorithm.
    pub fn contenders(
        &self,
        shape: &CallShape,
        elem_size: usize,
        source: Option<&dyn PlanSource>,
    ) -> Result<Vec<Choice>> {
        let first = self.choose(shape, elem_size, None, source)?;
        let overridden = self.overrides[shape.collective as usize].is_some_and(|c| c == first);
        if overridden || matches!(first, Choice::Registered(_)) {
            return Ok(vec![first]);
        }
        let cost = self.pricing();
        let shared = self.shared_memory.load(Ordering::Relaxed);
        let priced: Vec<(&'static algorithms::Algorithm, f64)> =
            algorithms::for_collective(shape.collective)
                .filter(|a| a.handles(shape))
                .filter(|a| !a.reads_peers() || shared)
                .map(|a| (a, (a.cost)(shape, elem_size, &cost)))
                .collect();
        let cheapest = priced.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        // The cheapest two by messages (whose speeds part among themselves
        // too: a chain and binomial, 33 against 422 us in one 1 MiB job)
        // and the cheapest read in place.
        let mut ranked: Vec<_> = priced
            .iter()
            .filter(|(_, e)| *e <= CONTENDER_SPREAD * cheapest)
            .collect();
        ranked.sort_by(|x, y| x.1.total_cmp(&y.1));
        let messages = ranked.iter().filter(|(a, _)| !a.reads_peers()).take(2);
        let reads = ranked.iter().filter(|(a, _)| a.reads_peers()).take(1);
        let mut contenders = vec![first];
        for (a, _) in messages.chain(reads) {
            let choice = Choice::Builtin(a);
            if !contenders.contains(&choice) && contenders.len() < MAX_CONTENDERS {
                contenders.push(choice);
            }
        }
        Ok(contenders)
    }

    /// The switch algorithm `SHOAL_ALGO` sends allreduce through, if any.
    pub fn switch_forced(&self) -> Option<&'static str> {
        self.switch_forced
    }

    /// The estimated time of the cheapest plan algorithm for a call.
    pub fn best_cost(
        &self,
        shape: &CallShape,
        elem_size: usize,
        source: Option<&dyn PlanSource>,
    ) -> Result<f64> {
        Ok(self.cheapest(shape, elem_size, source)?.1)
    }

    /// Whether the shared-memory (`shm_`) algorithms, which read peers'
    /// memory, can run: every rank on one host over shm, with
    /// `process_vm_readv` permitted (set at init).
    pub fn shared_memory_allowed(&self) -> bool {
        self.shared_memory.load(Ordering::Relaxed)
    }

    /// Lets the cost model pick the shared-memory (`shm_`) algorithms.
    pub fn allow_shared_memory(&self, on: bool) {
        self.shared_memory.store(on, Ordering::Relaxed);
        self.forget_choices();
    }

    /// The cost parameters in use.
    pub fn cost(&self) -> CostParams {
        *self.cost.lock().unwrap()
    }

    /// The cost parameters algorithms are priced by: where this world's
    /// ranks may not read each other's memory (TCP forced, the kernel
    /// refusing, several hosts), nothing is read in place, so reads cost
    /// what the host's messages do.
    fn pricing(&self) -> CostParams {
        let cost = self.cost();
        if self.shared_memory.load(Ordering::Relaxed) {
            cost
        } else {
            CostParams {
                beta_read: cost.beta_local,
                ..cost
            }
        }
    }

    /// Replaces the cost parameters (every rank must set the same ones).
    pub fn set_cost(&self, cost: CostParams) {
        *self.cost.lock().unwrap() = cost;
        self.forget_choices();
    }

    fn cheapest(
        &self,
        shape: &CallShape,
        elem_size: usize,
        source: Option<&dyn PlanSource>,
    ) -> Result<(Choice, f64)> {
        let key = (shape.clone(), elem_size);
        let registrations = crate::registry::registrations();
        if self.registrations.load(Ordering::Relaxed) != registrations {
            self.registrations.store(registrations, Ordering::Relaxed);
            self.cheapest.lock().unwrap().clear();
        }
        if let Some(found) = self.cheapest.lock().unwrap().get(&key) {
            return Ok(found);
        }
        let cost = self.pricing();
        let builtin = algorithms::for_collective(shape.collective)
            .filter(|a| a.handles(shape))
            .filter(|a| !a.reads_peers() || self.shared_memory.load(Ordering::Relaxed))
            .map(|a| (Choice::Builtin(a), (a.cost)(shape, elem_size, &cost)))
            .min_by(|x, y| x.1.total_cmp(&y.1));
        let mut best = builtin.ok_or_else(|| {
            Error::runtime(format!("no algorithm implements {}", shape.collective))
        })?;
        let registered = registered_for(shape.collective);
        // Registered algorithms take no per-rank counts.
        if shape.counts.is_none() {
            for alg in &registered {
                let Some(source) = source else { break };
                if let Some(factors) = self.factors(*alg, shape.world, source)? {
                    let estimate = factors.estimate(shape, elem_size, &cost);
                    if estimate < best.1 {
                        best = (Choice::Registered(*alg), estimate);
                    }
                }
            }
        }
        // A tuning table's row overrides the model: measured beats estimated.
        // Its cost (what the switch is compared with) is the model's
        // estimate of that algorithm, or the best estimate for an unpriced one.
        let tabled = self.tables.read().unwrap().as_ref().and_then(|t| {
            t.choose(
                shape,
                elem_size,
                self.shared_memory.load(Ordering::Relaxed),
                Some(best.0.name()),
            )
        });
        if let Some(choice) = tabled {
            let estimate = match choice {
                Choice::Builtin(a) => (a.cost)(shape, elem_size, &cost),
                Choice::Registered(alg) => match source {
                    Some(source) => self
                        .factors(alg, shape.world, source)?
                        .map_or(best.1, |f| f.estimate(shape, elem_size, &cost)),
                    None => best.1,
                },
            };
            best = (choice, estimate);
        }
        // Without a source the registered ones were not priced: not the answer to keep.
        if source.is_some() || registered.is_empty() {
            self.cheapest.lock().unwrap().insert(key, best);
        }
        Ok(best)
    }

    /// A registered algorithm's cost factors for a group size, asked of
    /// `source` once (outside the lock: the source runs the user's code).
    fn factors(
        &self,
        alg: Registered,
        world: usize,
        source: &dyn PlanSource,
    ) -> Result<Option<CostFactors>> {
        let key = (Choice::Registered(alg).id(), world);
        if let Some(&known) = self.factors.lock().unwrap().get(&key) {
            return Ok(known);
        }
        let factors = source.cost(alg, world)?;
        self.factors.lock().unwrap().insert(key, factors);
        Ok(factors)
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Serves registered algorithms with the built-in ring's plans, at a
    /// fixed cost, counting what it is asked.
    struct RingSource {
        factors: Option<CostFactors>,
        asked: std::cell::Cell<usize>,
    }

    impl PlanSource for RingSource {
        fn plan(&self, _: Registered, shape: &CallShape, rank: usize) -> Result<Plan> {
            Ok((algorithms::find(Collective::Allreduce, "ring")
                .unwrap()
                .generate)(shape, rank))
        }
        fn cost(&self, _: Registered, _: usize) -> Result<Option<CostFactors>> {
            self.asked.set(self.asked.get() + 1);
            Ok(self.factors)
        }
        fn digest(&self, _: Registered, _: &CallShape) -> Result<u64> {
            Ok(0)
        }
    }

    /// An allreduce of `count` elements on 4 ranks (for the crate's tests).
    pub(crate) fn shape(count: usize) -> CallShape {
        CallShape {
            collective: Collective::Allreduce,
            world: 4,
            count,
            root: 0,
            chunk: 1 << 20,
            ranks_per_host: 1,
            counts: None,
        }
    }

    #[test]
    fn registered_algorithms_are_named_chosen_and_priced() {
        let c = Collective::Allreduce;
        let err = register(c, "ring").unwrap_err();
        assert!(err
            .message
            .contains("already has a built-in algorithm 'ring'"));
        assert!(register(c, "ina").is_err());
        assert!(register(c, "hierarchical_ina").is_err());
        let alg = register(c, "test_free").unwrap();
        assert!(register(c, "test_free")
            .unwrap_err()
            .message
            .contains("already registered"));
        assert_eq!(
            Choice::Registered(alg).id(),
            algorithms::algorithm_id(c, "test_free"),
            "the id is the hash of the name, like a built-in's"
        );
        let selector = Selector::new("", SHM_COST).unwrap();
        // By name, with or without a source (the plan needs one, not the choice).
        let by_name = selector
            .choose(&shape(8), 4, Some(find(c, "test_free").unwrap()), None)
            .unwrap();
        assert_eq!(by_name.name(), "test_free");
        // Without cost factors the selector never picks it...
        let unpriced = RingSource {
            factors: None,
            asked: 0.into(),
        };
        let auto = selector
            .choose(&shape(8), 4, None, Some(&unpriced))
            .unwrap();
        assert!(matches!(auto, Choice::Builtin(_)));
        // ...with a cost of nothing it wins, asked once per group size.
        let selector = Selector::new("allgather:ring", SHM_COST).unwrap();
        let free = RingSource {
            factors: Some(CostFactors {
                messages: 0.0,
                bytes: 0.0,
                reduced: 0.0,
            }),
            asked: 0.into(),
        };
        for count in [8, 9, 10] {
            let auto = selector
                .choose(&shape(count), 4, None, Some(&free))
                .unwrap();
            assert_eq!(auto.name(), "test_free");
        }
        assert_eq!(free.asked.get(), 1);
        // Without a source it is not priced, and that answer is not cached.
        let auto = selector.choose(&shape(11), 4, None, None).unwrap();
        assert!(matches!(auto, Choice::Builtin(_)));
        let auto = selector.choose(&shape(11), 4, None, Some(&free)).unwrap();
        assert_eq!(auto.name(), "test_free");
        // SHOAL_ALGO may name it; per-rank counts it does not take.
        let forced = Selector::new("allreduce:test_free", SHM_COST).unwrap();
        assert_eq!(
            forced.choose(&shape(8), 4, None, None).unwrap().name(),
            "test_free"
        );
        assert!(find(c, "nope")
            .unwrap_err()
            .to_string()
            .contains("test_free"));
    }

    #[test]
    fn reads_cost_what_messages_do_where_nothing_is_read_in_place() {
        let calibrated = CostParams {
            beta_local: 1.0 / 31e9,
            beta_read: 1.0 / 12.8e9,
            ..SHM_COST
        };
        let selector = Selector::new("", calibrated).unwrap();
        // TCP forced, the kernel refusing, or several hosts.
        assert_eq!(selector.pricing().beta_read, calibrated.beta_local);
        selector.allow_shared_memory(true);
        assert_eq!(selector.pricing(), calibrated);
    }

    #[test]
    fn contenders_are_the_choice_then_the_cheapest_of_each_way_of_moving_data() {
        let broadcast = CallShape {
            collective: Collective::Broadcast,
            world: 2,
            ranks_per_host: 2,
            ..shape(1 << 18)
        };
        let selector = Selector::new("", SHM_COST).unwrap();
        selector.allow_shared_memory(true);
        let found = selector.contenders(&broadcast, 4, None).unwrap();
        assert_eq!(
            found[0],
            selector.choose(&broadcast, 4, None, None).unwrap()
        );
        let reads: Vec<bool> = found
            .iter()
            .map(|c| matches!(c, Choice::Builtin(a) if a.reads_peers()))
            .collect();
        assert!(reads.contains(&true) && reads.contains(&false), "{found:?}");
        assert!(
            found.len() >= 2 && found.len() <= MAX_CONTENDERS,
            "{found:?}"
        );
        // Without shared memory nothing reads in place.
        let apart = Selector::new("", SHM_COST).unwrap();
        let found = apart.contenders(&broadcast, 4, None).unwrap();
        assert!(found
            .iter()
            .all(|c| matches!(c, Choice::Builtin(a) if !a.reads_peers())));
        // A read priced far dearer than a message is not tried.
        let dear = Selector::new(
            "",
            CostParams {
                beta_read: 100.0 * SHM_COST.beta_local,
                ..SHM_COST
            },
        )
        .unwrap();
        dear.allow_shared_memory(true);
        let found = dear.contenders(&broadcast, 4, None).unwrap();
        assert!(found
            .iter()
            .all(|c| matches!(c, Choice::Builtin(a) if !a.reads_peers())));
        // SHOAL_ALGO's choice is the only one.
        let named = Selector::new("broadcast:binomial", SHM_COST).unwrap();
        named.allow_shared_memory(true);
        let found = named.contenders(&broadcast, 4, None).unwrap();
        assert_eq!(
            found.iter().map(|c| c.name()).collect::<Vec<_>>(),
            ["binomial"]
        );
    }

    #[test]
    fn registered_algorithms_are_listed_by_name_whatever_the_order() {
        // Ties in cost go to the first listed, so every rank must list alike.
        register(Collective::Gather, "test_b").unwrap();
        register(Collective::Gather, "test_a").unwrap();
        let names: Vec<&str> = registered_for(Collective::Gather)
            .iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["test_a", "test_b"]);
    }
}
