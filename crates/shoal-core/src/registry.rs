//! Every algorithm a call can name, and the names behind the ids that
//! messages carry: the built-in ones (`shoal_plan::algorithms`), the ones
//! registered at run time ([`register`], from `shoal.algo.register` in
//! Python), the switch's two (`ina`, `hierarchical_ina`) and the agreements'
//! fixed allgather.
//!
//! A leaf: the selector, the tuning tables, the configuration's checks and
//! the error messages all look names up here, and it looks up nothing of
//! theirs.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use shoal_plan::algorithms::{self, Algorithm};
use shoal_plan::{CallShape, Collective};

/// The switch's allreduce, as users force it: `algorithm="ina"`,
/// `SHOAL_ALGO=allreduce:ina`.
pub const INA: &str = "ina";
/// Its algorithm id in message signatures, made like the plan algorithms'.
pub const INA_ALGO_ID: u32 = algorithms::algorithm_id(Collective::Allreduce, INA);

/// Hierarchical allreduce with the switch as the inter-host step:
/// `algorithm="hierarchical_ina"`, `SHOAL_ALGO=allreduce:hierarchical_ina`.
pub const HIERARCHICAL_INA: &str = algorithms::allreduce::hierarchical_ina::NAME;
/// Its id in message signatures (its host phases and its fallback's agreement).
pub const HIERARCHICAL_INA_ALGO_ID: u32 =
    algorithms::algorithm_id(Collective::Allreduce, HIERARCHICAL_INA);

/// Whether `name` is one of the algorithms the switch runs.
pub fn is_switch_algorithm(name: &str) -> bool {
    name == INA || name == HIERARCHICAL_INA
}

/// The algorithm agreements run under in signatures (`allgather_bytes`, the
/// first use of a call shape): a fixed built-in allgather, so a rank in an
/// agreement and a rank in a call are told apart. Not an identifier, so no
/// registered algorithm has the name.
pub const AGREEMENT: &str = "(agreement)";
pub const AGREEMENT_ALGO_ID: u32 = algorithms::algorithm_id(Collective::Allgather, AGREEMENT);

/// A name that does not resolve, or a registration that is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RegistryError {
    /// No collective has the name.
    UnknownCollective { name: String },
    /// The collective has no algorithm of the name; `valid` lists those it has.
    UnknownAlgorithm {
        collective: Collective,
        name: String,
        valid: Vec<&'static str>,
    },
    /// A registration under a built-in algorithm's (or alias's) name.
    BuiltinName {
        collective: Collective,
        name: String,
    },
    /// A second registration of one name.
    AlreadyRegistered {
        collective: Collective,
        name: String,
    },
    /// A name whose 32-bit id another algorithm of the collective has.
    IdTaken {
        collective: Collective,
        name: String,
        id: u32,
    },
}

impl fmt::Display for RegistryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistryError::UnknownCollective { name } => {
                let valid: Vec<&str> = Collective::ALL.iter().map(|c| c.name()).collect();
                write!(f, "unknown collective '{name}'; valid: {}", valid.join(", "))
            }
            RegistryError::UnknownAlgorithm {
                collective,
                name,
                valid,
            } => write!(
                f,
                "unknown {collective} algorithm '{name}'; valid: {}",
                valid.join(", ")
            ),
            RegistryError::BuiltinName { collective, name } => {
                write!(f, "{collective} already has a built-in algorithm '{name}'")
            }
            RegistryError::AlreadyRegistered { collective, name } => {
                write!(f, "{collective} algorithm '{name}' is already registered")
            }
            RegistryError::IdTaken {
                collective,
                name,
                id,
            } => write!(
                f,
                "{collective} algorithm '{name}' has the same id ({id:#010x}) as an existing one; choose another name"
            ),
        }
    }
}

impl std::error::Error for RegistryError {}

/// The collective `name`.
pub fn parse_collective(name: &str) -> Result<Collective, RegistryError> {
    Collective::from_name(name).ok_or_else(|| RegistryError::UnknownCollective {
        name: name.to_string(),
    })
}

/// An algorithm registered at run time: the core knows its name, a
/// `PlanSource` (`select.rs`) supplies its plans and cost. Names are leaked
/// once per registration (there is no unregistering), so choices stay `Copy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Registered {
    pub collective: Collective,
    pub name: &'static str,
    /// Its id in message signatures ([`algorithms::algorithm_id`] of the
    /// name), computed once at registration.
    pub id: u32,
}

/// Every registered algorithm, in registration order (which matters for
/// nothing: ids are hashes of names, and ties in cost go to built-ins, then
/// to the first name in sort order).
static REGISTERED: RwLock<Vec<Registered>> = RwLock::new(Vec::new());

/// Registrations so far: a selector whose choices predate the latest one
/// forgets them, so a newly registered algorithm is priced too.
static REGISTRATIONS: AtomicUsize = AtomicUsize::new(0);

/// How many registrations there have been (see `REGISTRATIONS`).
pub fn registrations() -> usize {
    REGISTRATIONS.load(Ordering::Acquire)
}

/// Registers algorithm `name` of `collective`, to be chosen by name
/// (`algorithm=`, `SHOAL_ALGO`) or, given cost factors, by the cost model.
/// A name that a built-in algorithm (or alias) or an earlier registration
/// already has is refused, so a name means one algorithm on every rank.
pub fn register(collective: Collective, name: &str) -> Result<Registered, RegistryError> {
    let clash = algorithms::find(collective, name).is_ok()
        || (collective == Collective::Allreduce && is_switch_algorithm(name));
    let named = || name.to_string();
    if clash {
        return Err(RegistryError::BuiltinName {
            collective,
            name: named(),
        });
    }
    let mut all = REGISTERED.write().unwrap();
    if all
        .iter()
        .any(|r| r.collective == collective && r.name == name)
    {
        return Err(RegistryError::AlreadyRegistered {
            collective,
            name: named(),
        });
    }
    // Messages name algorithms by a 32-bit hash of the name: two names with
    // one id would be indistinguishable to the mismatch check and the traces.
    let id = algorithms::algorithm_id(collective, name);
    let taken = algorithms::by_id(collective, id).is_some() || all.iter().any(|r| r.id == id);
    if taken {
        return Err(RegistryError::IdTaken {
            collective,
            name: named(),
            id,
        });
    }
    let alg = Registered {
        collective,
        name: Box::leak(name.into()),
        id,
    };
    all.push(alg);
    REGISTRATIONS.fetch_add(1, Ordering::Release);
    Ok(alg)
}

/// The registered algorithm of `collective` whose id is `id`, if any.
pub fn registered_by_id(collective: Collective, id: u32) -> Option<Registered> {
    REGISTERED
        .read()
        .unwrap()
        .iter()
        .find(|r| r.collective == collective && r.id == id)
        .copied()
}

/// The registered algorithm `name` of `collective`, if any.
pub fn registered(collective: Collective, name: &str) -> Option<Registered> {
    registered_for(collective)
        .into_iter()
        .find(|r| r.name == name)
}

/// The registered algorithms of `collective`, by name: ranks may register
/// in different orders, and the selector must break ties alike on all.
pub fn registered_for(collective: Collective) -> Vec<Registered> {
    let all = REGISTERED.read().unwrap();
    let mut mine: Vec<Registered> = all
        .iter()
        .filter(|r| r.collective == collective)
        .copied()
        .collect();
    mine.sort_by_key(|r| r.name);
    mine
}

/// A plan algorithm: built-in, or registered at run time.
#[derive(Clone, Copy)]
pub enum Choice {
    Builtin(&'static Algorithm),
    Registered(Registered),
}

impl fmt::Debug for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Choice::Builtin(a) => write!(f, "Builtin({}/{})", a.collective, a.name),
            Choice::Registered(r) => write!(f, "Registered({}/{})", r.collective, r.name),
        }
    }
}

/// A choice is its algorithm: the same collective and name (built-in and
/// registered names never meet), wherever the reference came from.
impl PartialEq for Choice {
    fn eq(&self, other: &Choice) -> bool {
        self.collective() == other.collective() && self.name() == other.name()
    }
}

impl Eq for Choice {}

impl Hash for Choice {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.collective().hash(state);
        self.name().hash(state);
    }
}

impl Choice {
    /// The id in message signatures: a hash of `collective/name` either way
    /// (a registered algorithm's stored at registration). The call path
    /// reads it from its decision (`comm/decide.rs`), made once per shape.
    pub fn id(&self) -> u32 {
        match self {
            Choice::Builtin(a) => a.id(),
            Choice::Registered(r) => r.id,
        }
    }

    pub fn collective(&self) -> Collective {
        match self {
            Choice::Builtin(a) => a.collective,
            Choice::Registered(r) => r.collective,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Choice::Builtin(a) => a.name,
            Choice::Registered(r) => r.name,
        }
    }
}

/// The algorithm `name` (or alias) of `collective`: built-in, else registered.
pub fn find(collective: Collective, name: &str) -> Result<Choice, RegistryError> {
    if let Ok(alg) = algorithms::find(collective, name) {
        return Ok(Choice::Builtin(alg));
    }
    if let Some(alg) = registered(collective, name) {
        return Ok(Choice::Registered(alg));
    }
    let mut valid: Vec<&'static str> = algorithms::for_collective(collective)
        .map(|a| a.name)
        .collect();
    valid.extend(registered_for(collective).iter().map(|r| r.name));
    Err(RegistryError::UnknownAlgorithm {
        collective,
        name: name.to_string(),
        valid,
    })
}

/// Whether the algorithm can run a call of `shape` (registered ones take
/// no per-rank counts).
pub fn handles(choice: Choice, shape: &CallShape) -> bool {
    match choice {
        Choice::Builtin(a) => a.handles(shape),
        Choice::Registered(_) => shape.counts.is_none(),
    }
}

/// The name of the algorithm whose id a message of `collective` carries:
/// built-in, the switch's, the agreements', registered, or `?`.
pub fn name_of(collective: Collective, id: u32) -> &'static str {
    match algorithms::by_id(collective, id) {
        Some(a) => a.name,
        None if id == INA_ALGO_ID => INA,
        None if id == AGREEMENT_ALGO_ID => AGREEMENT,
        None => registered_by_id(collective, id).map_or("?", |r| r.name),
    }
}
