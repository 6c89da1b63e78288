//! Why a row of a tuning table is refused. `tune::parse` names the table
//! and the line around it; the words are the ones users read.

use std::fmt;

use crate::registry::RegistryError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowError {
    /// An unknown collective, or an algorithm its collective does not have.
    Name(RegistryError),
    /// A condition (`key=value`) after a size range.
    ConditionAfterRange {
        word: String,
    },
    /// A range that does not start at or above the end of the one before.
    RangesOutOfOrder {
        word: String,
    },
    /// A row with conditions only; `collective` as the row spells it.
    NoRanges {
        collective: String,
    },
    /// Measured ranges in a row that names no machine class (`cpus=` and
    /// `vendor=`).
    EvidenceWithoutMachine,
    /// `world=`, `ranks_per_host=` or `cpus=` not a whole number >= 1.
    NotPositive {
        key: String,
        value: String,
    },
    ConditionTwice {
        key: String,
    },
    UnknownTransport {
        value: String,
    },
    UnknownVendor {
        value: String,
    },
    UnknownCondition {
        key: String,
    },
    /// A word that is neither a condition nor a range.
    NotARange {
        word: String,
    },
    /// A range's start (`size`) that is not a size.
    NotASize {
        size: String,
        word: String,
    },
    /// A range's end (`size`) that is neither a size nor `inf`.
    NotAnEnd {
        size: String,
        word: String,
    },
    /// A range whose end is not above its start.
    EmptyRange {
        word: String,
    },
    /// A range's evidence that is not `,margin=M%,noise=N%`.
    BadEvidence {
        word: String,
    },
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowError::Name(e) => write!(f, "{e}"),
            RowError::ConditionAfterRange { word } => {
                write!(f, "condition '{word}' after a size range: conditions come first")
            }
            RowError::RangesOutOfOrder { word } => write!(
                f,
                "range '{word}' overlaps or precedes the one before it: ranges must increase and not overlap"
            ),
            RowError::NoRanges { collective } => write!(
                f,
                "no size ranges for {collective} (e.g. 0-64K:ring 64K-inf:rabenseifner)"
            ),
            RowError::EvidenceWithoutMachine => write!(
                f,
                "measured ranges (margin=, noise=) need the machine class they were measured on: add cpus=N and vendor=intel|amd|arm|other"
            ),
            RowError::NotPositive { key, value } => {
                write!(f, "{key}={value}: not a whole number >= 1")
            }
            RowError::ConditionTwice { key } => write!(f, "condition '{key}' given twice"),
            RowError::UnknownTransport { value } => {
                write!(f, "transport={value}: not shm, tcp or ucx")
            }
            RowError::UnknownVendor { value } => {
                write!(f, "vendor={value}: not intel, amd, arm or other")
            }
            RowError::UnknownCondition { key } => write!(
                f,
                "unknown condition '{key}'; valid: world, ranks_per_host, transport, cpus, vendor"
            ),
            RowError::NotARange { word } => write!(
                f,
                "'{word}' is not a condition (key=value) or a range LO-HI:algorithm (e.g. 0-64K:ring)"
            ),
            RowError::NotASize { size, word } => {
                write!(f, "'{size}' in '{word}' is not a size (e.g. 0, 4K, 16M)")
            }
            RowError::NotAnEnd { size, word } => {
                write!(f, "'{size}' in '{word}' is not a size or 'inf'")
            }
            RowError::EmptyRange { word } => {
                write!(f, "range '{word}' is empty: its end must be above its start")
            }
            RowError::BadEvidence { word } => write!(
                f,
                "'{word}': a measured range ends in ',margin=M%,noise=N%', then optionally ',beats=ALGO+ALGO' (percent, e.g. 0-4K:shm_flat,margin=40%,noise=6%)"
            ),
        }
    }
}

impl std::error::Error for RowError {}

impl From<RegistryError> for RowError {
    fn from(e: RegistryError) -> RowError {
        RowError::Name(e)
    }
}
