//! A scenario file with every key parses to the configuration written out
//! here field by field: this pinned what the old flat-pairs parser made of
//! it, so the serde parser that replaced it reads every key the same way.

use shoal_sim::engine::Engine;
use shoal_sim::packet::PfcConfig;
use shoal_sim::scenario::config::{Algorithm, JobConfig, RandomJobs};
use shoal_sim::scenario::ina::InaMode;
use shoal_sim::scenario::{file, ScenarioConfig};
use shoal_sim::topology::LinkSpec;
use shoal_sim::units::{Rate, PS_PER_US};
use shoal_sim::workload::models;
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
