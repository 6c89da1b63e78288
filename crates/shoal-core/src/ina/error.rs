//! Why a switch job cannot be used, why a call through it failed, and why
//! there is no switch secret. The first two are reasons to fall back to
//! host algorithms (a warning, not an error); their words are the ones the
//! warnings and the fallback print.

use std::fmt;
use std::path::PathBuf;

use shoal_ina::InaError;

use crate::dtype::{DType, ReduceOp};
use crate::secret::SecretError;

/// Which switch job a membership is of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobOf {
    /// The world's, joined at init.
    World,
    /// A sub-group's (its id).
    Group(u32),
    /// A shard job of hierarchical allreduce, joined at its `attempt`.
    Shard { shard: usize, attempt: u32 },
}

/// Why allreduce cannot use a switch job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// `SHOAL_SWITCH` is not set.
    NotConfigured,
    /// The switch settings name no switch to use.
    NoSwitch,
    /// Joining the job failed.
    JoinFailed { job: JobOf, error: InaError },
    /// A sub-group that has not joined a job of its own (yet).
    GroupNotJoined,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotConfigured => {
                write!(f, "no aggregation switch configured (set SHOAL_SWITCH)")
            }
            Unavailable::NoSwitch => write!(f, "no aggregation switch configured"),
            Unavailable::JoinFailed { job, error } => {
                write!(f, "in-network aggregation unavailable")?;
                match job {
                    JobOf::World => {}
                    JobOf::Group(id) => write!(f, " to group {id}")?,
                    JobOf::Shard { shard, attempt } => write!(
                        f,
                        " to shard {shard} attempt {attempt} of hierarchical allreduce"
                    )?,
                }
                write!(f, ": {error}")
            }
            Unavailable::GroupNotJoined => write!(f, "this group has not joined a switch job"),
        }
    }
}

impl std::error::Error for Unavailable {}

/// Why an allreduce through the switch did not happen or failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SwitchCallError {
    /// The switch cannot aggregate the call's dtype with its op.
    Unsupported { dtype: DType, op: ReduceOp },
    /// No switch job to use.
    Unavailable(Unavailable),
    /// The switch is away, for this reason (see `Ina::disable`).
    Away(String),
    /// Joining the job again at a retry failed.
    Readmission(InaError),
    /// The call through the switch failed.
    Failed(InaError),
}

impl fmt::Display for SwitchCallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchCallError::Unsupported { dtype, op } => write!(
                f,
                "the switch cannot aggregate {dtype} with op {op} (float32/float16/bfloat16/int32 with sum/avg/min/max)"
            ),
            SwitchCallError::Unavailable(why) => write!(f, "{why}"),
            SwitchCallError::Away(reason) => write!(f, "{reason}"),
            SwitchCallError::Readmission(e) => {
                write!(f, "in-network aggregation re-admission failed: {e}")
            }
            SwitchCallError::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SwitchCallError {}

impl From<Unavailable> for SwitchCallError {
    fn from(why: Unavailable) -> SwitchCallError {
        SwitchCallError::Unavailable(why)
    }
}

/// Why there is no switch secret; `what` names where it was to come from.
#[derive(Debug)]
pub enum SwitchSecretError {
    Unreadable {
        what: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Every user may read or write the shared secret file.
    OpenToEveryone {
        what: String,
        path: PathBuf,
        mode: u32,
    },
    /// The secret itself is refused (too short); it names its source.
    Key(SecretError),
    /// None was configured and the per-user file is unusable.
    NoSecret(SecretError),
}

impl fmt::Display for SwitchSecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SwitchSecretError::Unreadable { what, path, source } => {
                write!(f, "{what}: cannot read {}: {source}", path.display())
            }
            SwitchSecretError::OpenToEveryone { what, path, mode } => write!(
                f,
                "{what}: {} is readable or writable by every user (mode {mode:o}); \
                 let only the switch's tenants read it (e.g. chmod 640 and a tenants' group)",
                path.display()
            ),
            SwitchSecretError::Key(e) => write!(f, "{e}"),
            SwitchSecretError::NoSecret(e) => write!(
                f,
                "no switch secret (set SHOAL_SWITCH_SECRET or SHOAL_SWITCH_SECRET_FILE): {e}"
            ),
        }
    }
}

impl std::error::Error for SwitchSecretError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_keep_the_words_the_warnings_print() {
        let full = || InaError::Full("no slots".into());
        let cases = [
            (
                Unavailable::JoinFailed {
                    job: JobOf::World,
                    error: full(),
                },
                "in-network aggregation unavailable: aggregation switch full: no slots",
            ),
            (
                Unavailable::JoinFailed {
                    job: JobOf::Group(3),
                    error: full(),
                },
                "in-network aggregation unavailable to group 3: aggregation switch full: no slots",
            ),
            (
                Unavailable::JoinFailed {
                    job: JobOf::Shard {
                        shard: 1,
                        attempt: 2,
                    },
                    error: full(),
                },
                "in-network aggregation unavailable to shard 1 attempt 2 of hierarchical allreduce: \
                 aggregation switch full: no slots",
            ),
            (
                Unavailable::NotConfigured,
                "no aggregation switch configured (set SHOAL_SWITCH)",
            ),
        ];
        for (why, words) in cases {
            assert_eq!(why.to_string(), words);
            assert_eq!(SwitchCallError::from(why).to_string(), words);
        }
        let unsupported = SwitchCallError::Unsupported {
            dtype: DType::F64,
            op: ReduceOp::Sum,
        };
        assert!(
            unsupported
                .to_string()
                .starts_with("the switch cannot aggregate float64 with op sum"),
            "{unsupported}"
        );
        assert_eq!(
            SwitchCallError::Readmission(full()).to_string(),
            "in-network aggregation re-admission failed: aggregation switch full: no slots"
        );
    }
}
