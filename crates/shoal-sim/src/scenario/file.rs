//! A scenario file (TOML), read in Rust for `shoal-sim run`: the same file
//! `shoal sim run` reads, flattened into the same dotted pairs Python's
//! `shoal.sim.run.flatten` makes (tables as `a.b`, arrays of tables
//! numbered `jobs.0.model`, arrays of values comma-joined), so both front
//! ends parse it with [`ScenarioConfig::from_pairs`].

use std::fmt;
use std::io;
use std::path::Path;

use shoal_bootstrap::small_file::read_text;

use super::config::{ConfigError, ScenarioConfig};

/// The largest scenario file read (a scenario is a page of settings).
pub const MAX_SCENARIO_BYTES: u64 = 16 << 20;

/// Reads and parses the scenario in `path`; a `background.trace` is named
/// relative to the file's folder.
pub fn read(path: &Path) -> Result<ScenarioConfig, ScenarioFileError> {
    let in_file = |problem| ScenarioFileError {
        file: path.display().to_string(),
        problem,
    };
    let text = read_text(path, MAX_SCENARIO_BYTES).map_err(|e| in_file(FileProblem::Read(e)))?;
    let mut pairs = pairs(&text).map_err(|e| in_file(FileProblem::Toml(Box::new(e))))?;
    let folder = path.parent().unwrap_or(Path::new(""));
    for (key, value) in &mut pairs {
        if key == "background.trace" {
            *value = folder.join(&*value).display().to_string();
        }
    }
    ScenarioConfig::from_pairs(&pairs).map_err(|e| in_file(FileProblem::Config(e)))
}

/// A scenario file that does not make a scenario, naming the file (and,
/// for TOML that does not parse, the line: toml's message has it).
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
    /// Not TOML.
    Toml(Box<toml::de::Error>),
    /// TOML whose keys are not a scenario.
    Config(ConfigError),
}

impl fmt::Display for ScenarioFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.file)?;
        match &self.problem {
            FileProblem::Read(e) => write!(f, "{e}"),
            FileProblem::Toml(e) => write!(f, "{e}"),
            FileProblem::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ScenarioFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.problem {
            FileProblem::Read(e) => Some(e),
            FileProblem::Toml(e) => Some(e),
            FileProblem::Config(e) => Some(e),
        }
    }
}

/// The dotted pairs of a scenario's TOML text.
pub fn pairs(text: &str) -> Result<Vec<(String, String)>, toml::de::Error> {
    let table: toml::Table = text.parse()?;
    let mut out = Vec::new();
    flatten(&table, "", &mut out);
    Ok(out)
}

fn flatten(table: &toml::Table, prefix: &str, out: &mut Vec<(String, String)>) {
    for (key, value) in table {
        let name = format!("{prefix}{key}");
        match value {
            toml::Value::Table(t) => flatten(t, &format!("{name}."), out),
            toml::Value::Array(items)
                if !items.is_empty() && items.iter().all(toml::Value::is_table) =>
            {
                for (i, item) in items.iter().enumerate() {
                    if let toml::Value::Table(t) = item {
                        flatten(t, &format!("{name}.{i}."), out);
                    }
                }
            }
            toml::Value::Array(items) => {
                let joined: Vec<String> = items.iter().map(scalar).collect();
                out.push((name, joined.join(",")));
            }
            other => out.push((name, scalar(other))),
        }
    }
}

/// A value as Python's `str` writes it (strings bare).
fn scalar(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Boolean(b) => b.to_string(),
        toml::Value::Integer(i) => i.to_string(),
        toml::Value::Float(f) => format!("{f:?}"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_flattens_as_python_flattens_it() {
        let text = "topology = \"fattree:k=4\"\nseed = 3\n[background]\nload = 0.2\n\
                    distribution = [\"websearch\", \"datamining\"]\n\
                    [[jobs]]\nworkers = 4\nmodel = \"vgg16\"\n[[jobs]]\nworkers = 8\nalgorithm = \"panama\"\n";
        let want = [
            ("topology", "fattree:k=4"),
            ("seed", "3"),
            ("background.load", "0.2"),
            ("background.distribution", "websearch,datamining"),
            ("jobs.0.workers", "4"),
            ("jobs.0.model", "vgg16"),
            ("jobs.1.workers", "8"),
            ("jobs.1.algorithm", "panama"),
        ];
        let mut got = pairs(text).unwrap();
        let mut want: Vec<_> = want
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        got.sort();
        want.sort();
        assert_eq!(got, want);
        let err = pairs("topology = \n").unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
