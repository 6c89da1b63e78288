//! Logging. shoal's crates record through `tracing`; this module installs
//! the process's subscriber, once, when the process learns who it is (a
//! rank at `init`, or the standalone switch):
//!
//! - `SHOAL_LOG` (`tracing`'s EnvFilter syntax: `info`, `shoal_core=debug`,
//!   ...; default `warn` for ranks, `info` for the switch daemon, which logs
//!   the jobs it admits and releases) decides which records are made at
//!   all, for every destination. A filter that does not parse is an error
//!   naming it.
//! - `SHOAL_LOG_FILE` (a path; `%r` becomes the rank, or `switch`) appends
//!   the lines to a file instead of stderr; without `%r` the ranks of a host
//!   share the file, each line written whole and naming its rank.
//! - A host language may take the records ([`forward`]): the Python package
//!   hands them to Python's `logging`.
//!
//! Every line names its process: `2026-11-23T12:36:19.123Z  WARN shoal[rank 1]
//! shoal_core::ina: ...`. A process that already has a global subscriber
//! (a Rust program embedding shoal) keeps it, and gets shoal's records there.

pub mod forward;
mod line;

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{EnvFilter, Layer};

use crate::error::{Error, Result};
pub use line::Record;
pub use tracing::Level;

/// What `SHOAL_LOG` is without a value in a rank: warnings and errors only.
pub const RANK_DEFAULT: &str = "warn";
/// ... and in the switch daemon: its life and its jobs' too.
pub const SWITCH_DEFAULT: &str = "info";

/// Who this process is, as its log lines say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who {
    Rank(usize),
    /// The standalone aggregation switch (`shoal switch`).
    Switch,
}

impl Who {
    /// How `%r` in `SHOAL_LOG_FILE` expands.
    fn file_part(self) -> String {
        match self {
            Who::Rank(r) => r.to_string(),
            Who::Switch => "switch".into(),
        }
    }

    /// The name in each line: `rank 3`, `switch`.
    pub fn label(self) -> String {
        match self {
            Who::Rank(r) => format!("rank {r}"),
            Who::Switch => "switch".into(),
        }
    }

    pub fn rank(self) -> Option<usize> {
        match self {
            Who::Rank(r) => Some(r),
            Who::Switch => None,
        }
    }
}

/// `SHOAL_LOG` and `SHOAL_LOG_FILE`, checked: read before rendezvous so a
/// bad value fails this rank before it keeps the others waiting.
pub struct Settings {
    filter: EnvFilter,
    /// The file pattern (`%r` not yet expanded).
    file: Option<String>,
}

impl Settings {
    /// `default` is the filter without `SHOAL_LOG` ([`RANK_DEFAULT`], [`SWITCH_DEFAULT`]).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>, default: &str) -> Result<Settings> {
        let spec = env("SHOAL_LOG").filter(|s| !s.trim().is_empty());
        let spec = spec.as_deref().unwrap_or(default);
        let filter = EnvFilter::builder().parse(spec).map_err(|e| {
            Error::invalid(format!(
                "SHOAL_LOG={spec:?} is not a log filter ({e}); use a level (error, warn, info, \
                 debug, trace) or target=level pairs, e.g. SHOAL_LOG=info,shoal_core=debug"
            ))
        })?;
        let file = env("SHOAL_LOG_FILE").filter(|s| !s.trim().is_empty());
        if let Some(pattern) = &file {
            check_directory(pattern)?;
        }
        Ok(Settings { filter, file })
    }

    pub fn from_process_env(default: &str) -> Result<Settings> {
        Settings::from_env(&|k| std::env::var(k).ok(), default)
    }
}

/// The process's identity in its lines; set by every `install`.
static WHO: Mutex<Option<Who>> = Mutex::new(None);
/// Set once the subscriber is installed (or another one was found).
static INSTALLED: OnceLock<()> = OnceLock::new();

/// Installs the subscriber with `settings` unless this process has one, and
/// records who the process is. Settings are taken from the first call only:
/// a later `init` in the same process keeps the first one's filter and file.
pub fn install(settings: Settings, who: Who) -> Result<()> {
    *WHO.lock().unwrap() = Some(who);
    if INSTALLED.get().is_some() {
        return Ok(());
    }
    let file = match &settings.file {
        Some(pattern) => Some(open_log_file(pattern, who)?),
        None => None,
    };
    let sink = Sink {
        file: file.map(Mutex::new),
    };
    let subscriber = tracing_subscriber::registry().with(sink.with_filter(settings.filter));
    // Err: the program installed its own subscriber, which then gets ours.
    let _ = tracing::subscriber::set_global_default(subscriber);
    let _ = INSTALLED.set(());
    Ok(())
}

/// The file is opened once the rank is known, after rendezvous; a missing
/// directory, the likely mistake, fails before the other ranks wait on this one.
fn check_directory(pattern: &str) -> Result<()> {
    let dir = Path::new(pattern)
        .parent()
        .filter(|d| !d.as_os_str().is_empty());
    match dir {
        Some(d) if !d.to_string_lossy().contains("%r") => {
            if d.is_dir() {
                Ok(())
            } else {
                Err(Error::invalid(format!(
                    "SHOAL_LOG_FILE={pattern:?}: {} is not a directory",
                    d.display()
                )))
            }
        }
        _ => Ok(()),
    }
}

fn open_log_file(pattern: &str, who: Who) -> Result<File> {
    let path = pattern.replace("%r", &who.file_part());
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| {
            Error::invalid(format!(
                "SHOAL_LOG_FILE={pattern:?}: cannot open {path}: {e}"
            ))
        })
}

/// The process's identity, if it has one yet.
pub fn who() -> Option<Who> {
    *WHO.lock().unwrap()
}

/// Whether `message` is new to this process: warnings that every call or
/// every communicator could repeat are shown once per process.
pub fn first_time(message: &str) -> bool {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    SEEN.lock()
        .unwrap()
        .get_or_insert_with(HashSet::new)
        .insert(message.to_string())
}

/// The layer that writes each record that passes the filter: to the log
/// file if there is one, then to a host language that takes records, else
/// (no file, nobody took it) to stderr.
struct Sink {
    file: Option<Mutex<File>>,
}

impl<S: Subscriber> Layer<S> for Sink {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let record = Record::of(event, who());
        let mut text = record.line();
        text.push('\n');
        // One write per line: with O_APPEND, ranks sharing a file never
        // split each other's lines.
        let written = self
            .file
            .as_ref()
            .is_some_and(|f| f.lock().unwrap().write_all(text.as_bytes()).is_ok());
        if forward::offer(record, written).is_err() && !written {
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::env_of;

    #[test]
    fn a_bad_filter_is_an_error_naming_shoal_log() {
        let err = Settings::from_env(
            &env_of(&[("SHOAL_LOG", "info,shoal_core=loud")]),
            RANK_DEFAULT,
        )
        .err()
        .unwrap();
        assert!(
            err.message.contains("SHOAL_LOG=\"info,shoal_core=loud\""),
            "{}",
            err.message
        );
        assert!(Settings::from_env(
            &env_of(&[("SHOAL_LOG", "info,shoal_core=debug")]),
            RANK_DEFAULT
        )
        .is_ok());
        assert!(Settings::from_env(&env_of(&[]), RANK_DEFAULT).is_ok());
        let env = env_of(&[("SHOAL_LOG_FILE", "/no/such/dir/shoal-%r.log")]);
        let err = Settings::from_env(&env, RANK_DEFAULT).err().unwrap();
        assert!(
            err.message.contains("/no/such/dir is not a directory"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_log_file_name_takes_the_rank() {
        let dir = std::env::temp_dir().join(format!("shoal-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pattern = dir.join("r%r.log").display().to_string();
        open_log_file(&pattern, Who::Rank(3)).unwrap();
        open_log_file(&pattern, Who::Switch).unwrap();
        assert!(dir.join("r3.log").exists() && dir.join("rswitch.log").exists());
        let missing = dir.join("no/such/dir/%r.log").display().to_string();
        let err = open_log_file(&missing, Who::Rank(0)).unwrap_err();
        assert!(
            err.message.starts_with("SHOAL_LOG_FILE="),
            "{}",
            err.message
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn warnings_are_new_once() {
        assert!(first_time("a warning seen in this test only"));
        assert!(!first_time("a warning seen in this test only"));
    }
}
