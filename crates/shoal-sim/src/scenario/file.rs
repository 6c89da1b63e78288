//! A scenario's TOML made into its configuration: text (with overrides)
//! or a file, the one parser both `shoal-sim run` and Python's `shoal sim
//! run` use. The text is deserialized into [`ScenarioFile`] with serde;
//! an error names the key's dotted path (`jobs.0.model`) and, for a key
//! of the text, its line.

use std::fmt;
use std::io;
use std::path::Path;

use serde::Deserializer;
use serde_path_to_error::Segment;
use shoal_bootstrap::small_file::read_text;

use super::config::{ConfigError, ScenarioConfig};
use super::overrides;
use super::schema::ScenarioFile;

/// The largest scenario file read (a scenario is a page of settings).
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// Reads and parses the scenario in `path`, with `overrides` over it
/// ([`overrides::apply`]); a `background.trace` the file names is
/// relative to the file's folder.
pub fn read_with(
    path: &Path,
    overrides: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Result<ScenarioConfig, ScenarioFileError> {
    let in_file = |problem| ScenarioFileError {
        file: path.display().to_string(),
        problem,
    };
    let text = read_text(path, MAX_SCENARIO_BYTES).map_err(|e| in_file(FileProblem::Read(e)))?;
    let folder = path.parent().unwrap_or(Path::new(""));
    parse_in(&text, overrides, folder).map_err(|e| in_file(FileProblem::Config(e)))
}

/// Reads and parses the scenario in `path` as it is.
pub fn read(path: &Path) -> Result<ScenarioConfig, ScenarioFileError> {
    read_with(path, &[] as &[(&str, &str)])
}

/// Parses the scenario in TOML `text`, with `overrides` over it; a
/// `background.trace` is relative to the working directory.
pub fn parse(
    text: &str,
    overrides: &[(impl AsRef<str>, impl AsRef<str>)],
) -> Result<ScenarioConfig, ConfigError> {
    parse_in(text, overrides, Path::new(""))
}

fn parse_in(
    text: &str,
    overrides: &[(impl AsRef<str>, impl AsRef<str>)],
    folder: &Path,
) -> Result<ScenarioConfig, ConfigError> {
    let mut table: toml::Table = text.parse().map_err(|e| ConfigError::Toml(Box::new(e)))?;
    // The text alone first, from its characters: toml's error then has the
    // span of the key at fault, so the error can name its line.
    shape(toml::Deserializer::new(text), text)?;
    if let Some(trace) = table.get_mut("background").and_then(|b| b.get_mut("trace")) {
        if let Some(name) = trace.as_str() {
            *trace = folder.join(name).display().to_string().into();
        }
    }
    overrides::apply(&mut table, overrides)?;
    let file = shape(toml::Value::Table(table), text)?;
    ScenarioConfig::from_file(file)
}

/// `de` deserialized as a [`ScenarioFile`]; an error names the key's path
/// and, where toml gives a span into `text`, its line.
fn shape<'de, D>(de: D, text: &str) -> Result<ScenarioFile, ConfigError>
where
    D: Deserializer<'de, Error = toml::de::Error>,
{
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = dotted(e.path());
        let line = e.inner().span().map(|span| line_of(text, span.start));
        let message = e.inner().message().to_string();
        // serde's words for a key a struct does not have
        // (`deny_unknown_fields`); the path already ends with the key.
        if message.starts_with("unknown field `") {
            ConfigError::UnknownKey { key, line }
        } else {
            ConfigError::Value { key, line, message }
        }
    })
}

/// A key's path as the scenario's keys are written: `jobs.0.model`.
fn dotted(path: &serde_path_to_error::Path) -> String {
    let parts: Vec<String> = path
        .iter()
        .map(|segment| match segment {
            Segment::Seq { index } => index.to_string(),
            Segment::Map { key } => key.clone(),
            Segment::Enum { variant } => variant.clone(),
            Segment::Unknown => "?".to_string(),
        })
        .collect();
    parts.join(".")
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let before = &text.as_bytes()[..offset.min(text.len())];
    before.iter().filter(|&&b| b == b'\n').count() + 1
}

/// A scenario file that does not make a scenario, naming the file (and
/// the line: [`ConfigError`]'s).
#[derive(Debug)]
pub struct ScenarioFileError {
    pub file: String,
    pub problem: FileProblem,
}

/// What is wrong with a scenario file.
#[derive(Debug)]
pub enum FileProblem {
    /// Missing, not a regular file, or too large.
    Read(io::Error),
    /// Not TOML, or TOML whose keys are not a scenario.
    Config(ConfigError),
}

impl fmt::Display for ScenarioFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        match &self.problem {
            FileProblem::Read(e) => write!(f, "{e}"),
            FileProblem::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ScenarioFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            FileProblem::Read(e) => Some(e),
            FileProblem::Config(e) => Some(e),
        }
    }
}
