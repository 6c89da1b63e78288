//! Why plans do not make a collective's DAG: a call the simulator cannot
//! build, an algorithm it cannot find or that refuses the call, a plan
//! source or document that has no plan, and plans whose sends and
//! receives do not match. Each names the rank, peer, tag or message at
//! fault.

use std::fmt;

use shoal_plan::algorithms::UnknownAlgorithm;
use shoal_plan::CallShape;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DagError {
    /// A world of 0 ranks.
    NoRanks,
    /// A root that is no rank of the world.
    RootOutside { root: usize, world: usize },
    /// A placement with an entry count other than the world's.
    Placement { entries: usize, world: usize },
    /// No built-in algorithm and no plan source of that name.
    UnknownAlgorithm(UnknownAlgorithm),
    /// A built-in algorithm that cannot serve the call, and why.
    Refused { algorithm: String, why: String },
    /// A plan source asked for an algorithm it has no plans for.
    NoPlans(String),
    /// A plan source's own failure, as it words it (a Python algorithm's
    /// exception).
    Source(String),
    /// A plan document with per-rank counts.
    DocumentCounts,
    /// A plan document asked for another call shape than its own.
    DocumentShape {
        document: Box<CallShape>,
        asked: Box<CallShape>,
    },
    /// A plan document without a plan for this rank.
    DocumentRank(usize),
    /// The worker generating this rank's plan stopped (it panicked).
    GeneratorFailed(usize),
    /// A shared-memory step in a plan that was taken for one of messages.
    SharedStep { rank: usize },
    /// A rank that sends the same tag to the same peer twice.
    SentTwice { rank: usize, peer: usize, tag: u32 },
    /// A receive with no matching send.
    NeverSent { rank: usize, peer: usize, tag: u32 },
    /// A message whose send and receive have different lengths.
    LengthsDiffer { message: usize },
    /// Sends no rank receives.
    NeverReceived { unreceived: usize, messages: usize },
    /// A read of a region its rank never exposes.
    NeverExposed {
        message: usize,
        peer: usize,
        flag: u32,
    },
    /// A dependency cycle: `stuck` of `messages` can never start.
    Cycle { stuck: usize, messages: usize },
}

impl fmt::Display for DagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DagError::NoRanks => write!(f, "a collective needs at least one rank"),
            DagError::RootOutside { root, world } => {
                write!(f, "root {root} is not a rank of {world}")
            }
            DagError::Placement { entries, world } => {
                write!(f, "placement has {entries} entries for {world} ranks")
            }
            DagError::UnknownAlgorithm(e) => write!(f, "{e}"),
            DagError::Refused { algorithm, why } => {
                write!(f, "{algorithm} cannot serve this call: {why}")
            }
            DagError::NoPlans(name) => write!(f, "no plans for algorithm '{name}'"),
            DagError::Source(message) => write!(f, "{message}"),
            DagError::DocumentCounts => {
                write!(f, "plan documents with per-rank counts are not simulated")
            }
            DagError::DocumentShape { document, asked } => {
                write!(f, "the plan document is for {document:?}, not {asked:?}")
            }
            DagError::DocumentRank(rank) => {
                write!(f, "the plan document has no plan for rank {rank}")
            }
            DagError::GeneratorFailed(rank) => {
                write!(f, "generating the plan of rank {rank} failed")
            }
            DagError::SharedStep { rank } => {
                write!(f, "rank {rank}: a shared-memory step in a plan of messages")
            }
            DagError::SentTwice { rank, peer, tag } => {
                write!(f, "plan of rank {rank} sends tag {tag} to {peer} twice")
            }
            DagError::NeverSent { rank, peer, tag } => write!(
                f,
                "rank {rank} receives tag {tag} from {peer}, which never sends it"
            ),
            DagError::LengthsDiffer { message } => {
                write!(f, "message {message}: send and receive lengths differ")
            }
            DagError::NeverReceived {
                unreceived,
                messages,
            } => write!(f, "{unreceived} of {messages} messages are never received"),
            DagError::NeverExposed {
                message,
                peer,
                flag,
            } => write!(
                f,
                "message {message} reads region {flag} of rank {peer}, which never exposes it"
            ),
            DagError::Cycle { stuck, messages } => write!(
                f,
                "the collective's DAG has a dependency cycle: {stuck} of {messages} messages can never start"
            ),
        }
    }
}

impl std::error::Error for DagError {}

impl From<UnknownAlgorithm> for DagError {
    fn from(e: UnknownAlgorithm) -> DagError {
        DagError::UnknownAlgorithm(e)
    }
}
