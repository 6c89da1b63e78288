//! `shoal-sim run CONFIG.toml --out DIR` (a scenario, the TOML `shoal sim
//! run` reads) and `shoal-sim plan COLLECTIVE --algo NAME --ranks N --size BYTES
//! --topology T [--link R] [--latency L] [--buffer B] [--engine E]
//! [--ranks-per-host N] [--seed S] [--json]` or `shoal-sim plan --plan
//! FILE.json --topology T ...` (a plan document): the Rust twin of
//! `shoal sim plan`, for timing the engine without Python
//! (`cargo run --release -p shoal-sim -- plan allreduce ...`).

use std::fmt;
use std::io;
use std::path::Path;
use std::process::ExitCode;

use shoal_plan::json::PlanJsonError;
use shoal_plan::CallPlans;
use shoal_sim::plan::PlanRequest;
use shoal_sim::scenario::{file, health, records, run};
use shoal_sim::SimError;

const USAGE: &str = "usage: shoal-sim plan (COLLECTIVE --algo NAME --ranks N --size BYTES | \
--plan FILE.json) --topology T [--link RATE] [--latency TIME] [--buffer BYTES] [--tier-rates R0,R1,..] [--engine packet|flow] \
[--ranks-per-host N] [--seed S] [--host-overhead TIME] [--json]";

fn parse(args: &[String]) -> Result<(PlanRequest, bool), ArgsError> {
    let mut req = PlanRequest::default();
    let mut json = false;
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("plan") => {}
        _ => return Err(ArgsError::Usage(USAGE)),
    }
    let mut it = it.peekable();
    if let Some(collective) = it.next_if(|a| !a.starts_with("--")) {
        req.collective = collective.clone();
    }
    while let Some(flag) = it.next() {
        if flag == "--json" {
            json = true;
            continue;
        }
        let value = it
            .next()
            .ok_or_else(|| ArgsError::NeedsValue(flag.clone()))?
            .clone();
        let number = |v: &str| {
            v.parse::<u64>().map_err(|_| ArgsError::NotWholeNumber {
                flag: flag.clone(),
                value: v.to_string(),
            })
        };
        match flag.as_str() {
            "--algo" => req.algo = value,
            "--ranks" => req.ranks = number(&value)? as usize,
            "--size" => req.size = value,
            "--topology" => req.topology = value,
            "--link" => req.link = Some(value),
            "--latency" => req.latency = Some(value),
            "--buffer" => req.buffer = Some(value),
            "--tier-rates" => req.tier_rates = Some(value),
            "--engine" => req.engine = value,
            "--ranks-per-host" => req.ranks_per_host = number(&value)? as usize,
            "--seed" => req.seed = number(&value)?,
            "--host-overhead" => req.host_overhead = Some(value),
            "--plan" => req.document = Some(read_document(&value)?),
            other => return Err(ArgsError::UnknownOption(other.to_string())),
        }
    }
    Ok((req, json))
}

/// The plan document in `path` (`shoal-plan/1`, `shoal.algo.plan_json`).
fn read_document(path: &str) -> Result<CallPlans, ArgsError> {
    let path = path.to_string();
    match std::fs::read_to_string(&path) {
        Err(error) => Err(ArgsError::ReadDocument { path, error }),
        Ok(text) => {
            CallPlans::from_json(&text).map_err(|error| ArgsError::Document { path, error })
        }
    }
}

/// A command line that names no run: each the message printed before exit
/// status 2.
#[derive(Debug)]
enum ArgsError {
    /// No subcommand, or a malformed one: its usage line.
    Usage(&'static str),
    NeedsValue(String),
    NotWholeNumber {
        flag: String,
        value: String,
    },
    UnknownOption(String),
    /// A `--plan` file that cannot be read.
    ReadDocument {
        path: String,
        error: io::Error,
    },
    /// A `--plan` file that is no plan document.
    Document {
        path: String,
        error: PlanJsonError,
    },
}

impl fmt::Display for ArgsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgsError::Usage(usage) => write!(f, "{usage}"),
            ArgsError::NeedsValue(flag) => write!(f, "{flag} needs a value"),
            ArgsError::NotWholeNumber { flag, value } => {
                write!(f, "{flag} {value}: not a whole number")
            }
            ArgsError::UnknownOption(option) => write!(f, "unknown option {option}\n{USAGE}"),
            ArgsError::ReadDocument { path, error } => write!(f, "--plan {path}: {error}"),
            ArgsError::Document { path, error } => write!(f, "--plan {path}: {error}"),
        }
    }
}

/// Why `shoal-sim run` failed: its arguments, or the run.
enum RunFailure {
    Usage,
    Sim(SimError),
}

impl<E: Into<SimError>> From<E> for RunFailure {
    fn from(e: E) -> RunFailure {
        RunFailure::Sim(e.into())
    }
}

impl fmt::Display for RunFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunFailure::Usage => write!(f, "{RUN_USAGE}"),
            RunFailure::Sim(e) => write!(f, "{e}"),
        }
    }
}

/// The error of writing `path`.
fn writing(path: &Path) -> impl FnOnce(io::Error) -> SimError + '_ {
    move |error| SimError::Write {
        path: path.display().to_string(),
        error,
    }
}

/// `shoal-sim run CONFIG.toml --out DIR`: the scenario as `shoal sim run`
/// runs it (same TOML, same report.json and CSV records; no plots).
fn run_scenario(args: &[String]) -> Result<(), RunFailure> {
    let [config, flag, out] = args else {
        return Err(RunFailure::Usage);
    };
    if flag != "--out" {
        return Err(RunFailure::Usage);
    }
    let cfg = file::read(Path::new(config))?;
    let result = run(&cfg, &mut |_| {})?;
    let out = Path::new(out);
    records::write(&result, out).map_err(writing(out))?;
    let report = out.join("report.json");
    std::fs::write(&report, result.to_json() + "\n").map_err(writing(&report))?;
    for warning in health::warnings(&result) {
        eprintln!("shoal-sim run: warning: {warning}");
    }
    println!(
        "{} background flows, {} jobs; report in {}",
        result.flows.len() + result.unfinished_flows,
        result.jobs.len(),
        report.display()
    );
    Ok(())
}

const RUN_USAGE: &str = "usage: shoal-sim run CONFIG.toml --out DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("run") {
        return match run_scenario(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("shoal-sim: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let (req, json) = match parse(&args) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("shoal-sim: {e}");
            return ExitCode::from(2);
        }
    };
    match req.run() {
        Ok(report) => {
            println!(
                "{}",
                if json {
                    report.to_json()
                } else {
                    report.summary()
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("shoal-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
