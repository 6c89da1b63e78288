//! `shoal-sim run CONFIG.toml --out DIR`: the binary reads the TOML that
//! `shoal sim run` reads and writes the same report and records.

use std::path::Path;
use std::process::Command;

use shoal_sim::scenario::file::FileProblem;
use shoal_sim::scenario::{file, run, ConfigError};

const SCENARIO: &str = r#"
topology = "fattree:k=4"
duration = "500ms"
seed = 2

[background]
load = 0.2
distribution = ["websearch"]
trace = "trace.csv"

[[jobs]]
workers = 4
model = "resnet50"
algorithm = "ring"
"#;

/// `shoal-sim run CONFIG --out OUT`, which must succeed; its report.json.
fn run_binary(config: &Path, out: &Path) -> String {
    let status = Command::new(env!("CARGO_BIN_EXE_shoal-sim"))
        .args([
            "run",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(out.join("report.json")).unwrap()
}

#[test]
fn the_binary_runs_the_scenario_file_as_the_library_does() {
    let dir = std::env::temp_dir().join(format!("shoal-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("s.toml");
    std::fs::write(&config, SCENARIO).unwrap();
    // The trace is named relative to the scenario file.
    std::fs::write(
        dir.join("trace.csv"),
        "start_s,src,dst,bytes\n0.1,0,15,1000000\n",
    )
    .unwrap();
    let out = dir.join("out");
    let report = run_binary(&config, &out);
    let expected = run(&file::read(&config).unwrap(), &mut |_| {}).unwrap();
    let flows = expected.flows.len() + expected.unfinished_flows;
    assert!(report.contains(&format!("\"flows\": {flows}")), "{report}");
    assert!(expected
        .flows
        .iter()
        .any(|f| (f.src, f.dst, f.bytes) == (0, 15, 1_000_000)));
    let csv = std::fs::read_to_string(out.join("flows.csv")).unwrap();
    assert_eq!(csv.lines().count(), expected.flows.len() + 1);
    assert!(out.join("iterations.csv").exists() && out.join("links.csv").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bad_file_is_named_with_its_line() {
    let dir = std::env::temp_dir().join(format!("shoal-scenario-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("bad.toml");
    std::fs::write(&config, "topology = \"fattree:k=4\"\nduration = \n").unwrap();
    let err = file::read(&config).unwrap_err();
    assert!(
        matches!(err.problem, FileProblem::Config(ConfigError::Toml(_))),
        "{err}"
    );
    assert!(err.file.ends_with("bad.toml"), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("bad.toml") && message.contains("line 2"),
        "{message}"
    );
    std::fs::write(&config, "topolgy = \"fattree:k=4\"\n").unwrap();
    let err = file::read(&config).unwrap_err();
    assert!(
        matches!(
            &err.problem,
            FileProblem::Config(ConfigError::UnknownKey { key, line: Some(1) }) if key == "topolgy"
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .ends_with("bad.toml: line 1: unknown scenario key \"topolgy\""),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

const PACKET_SCENARIO: &str = r#"
topology = "fattree:k=4"
duration = "30ms"
warmup = "5ms"
engine = "packet"
seed = 3

[pfc]
enabled = true
xoff = 300000
xon = "290KB"

[background]
load = 0.3
distribution = ["websearch"]
"#;

#[test]
fn the_packet_engine_and_pfc_keys_parse_from_the_file_and_write_the_records() {
    let dir = std::env::temp_dir().join(format!("shoal-scenario-packet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("p.toml");
    std::fs::write(&config, PACKET_SCENARIO).unwrap();
    let cfg = file::read(&config).unwrap();
    assert_eq!(cfg.engine, shoal_sim::engine::Engine::Packet);
    assert!((cfg.warmup_s - 0.005).abs() < 1e-15);
    let pfc = cfg.pfc.expect("pfc.enabled = true");
    assert_eq!((pfc.xoff, pfc.xon), (300_000, 290_000));

    let out = dir.join("out");
    let report = run_binary(&config, &out);
    assert!(report.contains("\"engine\": \"packet\""), "{report}");
    assert!(report.contains("\"pfc_pauses\""), "{report}");
    assert!(report.contains("\"warnings\": ["), "{report}");
    // The packet engine keeps the flow engine's records: flows after the
    // warm-up, and the links sampled over the whole run.
    let expected = run(&cfg, &mut |_| {}).unwrap();
    assert!(!expected.flows.is_empty());
    assert!(expected.flows.iter().all(|f| f.start_s >= 0.005));
    let flows = std::fs::read_to_string(out.join("flows.csv")).unwrap();
    assert_eq!(flows.lines().count(), expected.flows.len() + 1);
    let samples = &expected.link_samples;
    assert_eq!(samples.times_s.len(), 100);
    assert!((samples.times_s[99] - 0.03).abs() < 1e-12);
    let links = std::fs::read_to_string(out.join("links.csv")).unwrap();
    assert_eq!(links.lines().count(), 1 + 10 * 100);
    std::fs::remove_dir_all(&dir).unwrap();
}
