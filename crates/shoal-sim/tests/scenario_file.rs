//! `shoal-sim run CONFIG.toml --out DIR`: the binary reads the TOML that
//! `shoal sim run` reads and writes the same report and records.

use std::process::Command;

use shoal_sim::scenario::{file, run};

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
    let report = std::fs::read_to_string(out.join("report.json")).unwrap();
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
    assert!(err.contains("bad.toml") && err.contains("line 2"), "{err}");
    std::fs::write(&config, "topolgy = \"fattree:k=4\"\n").unwrap();
    let err = file::read(&config).unwrap_err();
    assert!(err.contains("unknown scenario key \"topolgy\""), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
