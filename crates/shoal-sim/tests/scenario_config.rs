//! Scenario TOML to configuration: a file with every key parses to the
//! configuration written out here field by field (written against the old
//! flat-pairs parser, so the serde parser that replaced it reads every key
//! the same way), and a key at fault is named with its line.

use shoal_sim::engine::Engine;
use shoal_sim::packet::PfcConfig;
use shoal_sim::scenario::config::{Algorithm, JobConfig, RandomJobs};
use shoal_sim::scenario::ina::InaMode;
use shoal_sim::scenario::{file, ConfigError, ScenarioConfig};
use shoal_sim::topology::LinkSpec;
use shoal_sim::units::{Rate, PS_PER_US};
use shoal_sim::workload::models::{self, ModelMix};
use shoal_sim::workload::{BackgroundFlow, FlowSizeCdf};

/// Every key a scenario takes, written as a user would.
const FULL: &str = r#"
topology = "leafspine:leaves=4,spines=2,hosts=4"
link = "25gbit"
tier_rates = ["25gbit", "100gbit"]
latency = "2us"
buffer = "1MB"
ecn_k = 60
switch_memory = "32MB"
ina_min_bytes = "10MiB"
fallback = "rabenseifner"
slots_per_host = 2
chunk_bytes = "512KiB"
duration = "30ms"
seed = 7
rate_interval = "5us"
tree_share = "each"
long_flows = 3
engine = "packet"
warmup = "2ms"

[background]
load = 0.25
distribution = ["datamining", "websearch"]
trace = "flows.csv"

[[jobs]]
workers = 8
model = "resnet50"
algorithm = "panama-0.88"
trees = 2
tree = 1
placement = "random"

[[jobs]]
workers = 4
algorithm = "ring"

[random_jobs]
load = 0.5
algorithm = "switchml"
trees = 3
model_weights = { vgg16 = 3, alexnet = 1.5 }

[pfc]
enabled = true
xoff = "200KB"
"#;

fn expected(trace: BackgroundFlow) -> ScenarioConfig {
    ScenarioConfig {
        topology: "leafspine:leaves=4,spines=2,hosts=4".into(),
        link: LinkSpec {
            rate: Rate::gbit(25),
            latency: 2 * PS_PER_US,
            buffer: 1_000_000,
        },
        tier_rates: vec![Rate::gbit(25), Rate::gbit(100)],
        ecn_k: 60,
        switch_memory: 32_000_000,
        ina_min_bytes: 10 << 20,
        fallback: "rabenseifner".into(),
        background_load: 0.25,
        distributions: vec![FlowSizeCdf::data_mining(), FlowSizeCdf::web_search()],
        trace: vec![trace],
        jobs: vec![
            JobConfig {
                workers: 8,
                model: models::by_name("resnet50").unwrap(),
                algorithm: Algorithm::Ina(InaMode {
                    congestion_control: true,
                    quorum: 0.88,
                }),
                trees: 2,
                close: false,
                only_tree: Some(1),
            },
            JobConfig {
                workers: 4,
                model: models::MODELS[0],
                algorithm: Algorithm::Plan("ring".into()),
                trees: 4,
                close: true,
                only_tree: None,
            },
        ],
        random_jobs: Some(RandomJobs {
            load: 0.5,
            algorithm: Algorithm::Ina(InaMode::SWITCHML),
            trees: 3,
            models: ModelMix::Weighted([3.0, 1.5, 0.0, 0.0, 0.0, 0.0]),
        }),
        long_flows: 3,
        slots_per_host: 2,
        chunk_bytes: 512 << 10,
        duration_s: 0.03,
        seed: 7,
        rate_interval_s: 5e-6,
        tree_share_each: true,
        engine: Engine::Packet,
        warmup_s: 0.002,
        // xon keeps its distance (two full packets) below the given xoff.
        pfc: Some(PfcConfig {
            xoff: 200_000,
            xon: 197_000,
        }),
    }
}

#[test]
fn a_scenario_file_with_every_key_parses_to_the_same_config() {
    let dir = std::env::temp_dir().join(format!("shoal-scenario-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The trace is named relative to the scenario file.
    std::fs::write(
        dir.join("flows.csv"),
        "start_s,src,dst,bytes\n0.001,0,5,150000\n",
    )
    .unwrap();
    let path = dir.join("scenario.toml");
    std::fs::write(&path, FULL).unwrap();
    let got = file::read(&path);
    std::fs::remove_dir_all(&dir).unwrap();
    let want = expected(BackgroundFlow {
        start_s: 0.001,
        src: 0,
        dst: 5,
        bytes: 150_000,
    });
    assert_eq!(got.unwrap(), want);
}

#[test]
fn an_empty_scenario_is_the_default() {
    assert_eq!(
        ScenarioConfig::from_pairs(&[] as &[(&str, &str)]).unwrap(),
        ScenarioConfig::default()
    );
}

#[test]
fn a_misspelt_key_names_itself_and_its_line() {
    let text = "topology = \"star:hosts=4\"\n\n[[jobs]]\nworkers = 4\nmodle = \"vgg16\"\n";
    let err = file::parse(text, &[] as &[(&str, &str)]).unwrap_err();
    assert!(
        matches!(&err, ConfigError::UnknownKey { key, line: Some(5) } if key == "jobs.0.modle"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "line 5: unknown scenario key \"jobs.0.modle\""
    );
    let err = file::parse("[background]\nlaod = 0.2\n", &[] as &[(&str, &str)]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 2: unknown scenario key \"background.laod\""
    );
}

#[test]
fn a_bad_unit_names_its_key_and_its_line() {
    let text = "seed = 2\n[pfc]\nenabled = true\nxoff = \"300 parsecs\"\n";
    let err = file::parse(text, &[] as &[(&str, &str)]).unwrap_err();
    assert_eq!(err.key(), Some("pfc.xoff"));
    assert_eq!(err.line(), Some(4));
    assert_eq!(
        err.to_string(),
        "line 4: pfc.xoff: size '300 parsecs': unknown unit 'parsecs'; use B, KB, MB, GB, KiB, MiB or GiB"
    );
    // A duration needs its unit; a rate too.
    let err = file::parse("duration = 2\n", &[] as &[(&str, &str)]).unwrap_err();
    assert_eq!(err.key(), Some("duration"));
    assert!(err.to_string().starts_with("line 1: duration: "), "{err}");
    let err = file::parse(
        "tier_rates = [\"10gbit\", \"fast\"]\n",
        &[] as &[(&str, &str)],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "line 1: tier_rates: 'fast' does not start with a number"
    );
    // A model weight names its key; serde_path_to_error stops at the table.
    let err = file::parse(
        "[random_jobs]\nmodel_weights = { gpt = 1 }\n",
        &[] as &[(&str, &str)],
    )
    .unwrap_err();
    assert_eq!(err.key(), Some("random_jobs.model_weights"));
    assert!(err.to_string().contains("unknown model \"gpt\""), "{err}");
    // A value of the wrong type is named too.
    let err = file::parse("[[jobs]]\nworkers = \"eight\"\n", &[] as &[(&str, &str)]).unwrap_err();
    assert_eq!(err.key(), Some("jobs.0.workers"));
    assert_eq!(err.line(), Some(2));
}

#[test]
fn overrides_are_set_over_the_text_and_named_without_a_line() {
    let text = "engine = \"packet\"\nduration = \"30ms\"\n[[jobs]]\nworkers = 4\n";
    let overrides = [
        ("engine", "flow"),
        ("jobs.0.model", "alexnet"),
        ("jobs.1.workers", "8"),
        ("background.distribution", "websearch"),
        ("tier_rates", "10gbit,40gbit"),
    ];
    let cfg = file::parse(text, &overrides).unwrap();
    assert_eq!(cfg.engine, Engine::Flow);
    assert_eq!(cfg.duration_s, 0.03);
    assert_eq!(cfg.jobs.len(), 2);
    assert_eq!(cfg.jobs[0].model.name, "alexnet");
    assert_eq!(cfg.jobs[1].workers, 8);
    assert_eq!(cfg.distributions, vec![FlowSizeCdf::web_search()]);
    assert_eq!(cfg.tier_rates, vec![Rate::gbit(10), Rate::gbit(40)]);
    let err = file::parse(text, &[("jobs.0.trees", "many")]).unwrap_err();
    assert_eq!(err.key(), Some("jobs.0.trees"));
    assert_eq!(err.line(), None);
    // The text's own mistakes are found first, with their line.
    let err = file::parse("engine = \"warp\"\n", &[("engine", "flow")]).unwrap_err();
    assert_eq!(err.line(), Some(1));
    // Not TOML at all: toml's message names the line.
    let err = file::parse("duration = \n", &[] as &[(&str, &str)]).unwrap_err();
    assert!(matches!(err, ConfigError::Toml(_)));
    assert!(err.to_string().contains("line 1"), "{err}");
}
