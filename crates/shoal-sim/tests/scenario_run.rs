//! Scenarios end to end on the flow engine.

use shoal_sim::scenario::{run, ScenarioConfig};

fn config(pairs: &[(&str, &str)]) -> ScenarioConfig {
    ScenarioConfig::from_pairs(pairs).unwrap()
}

#[test]
fn tiny_scenario_reports_everything() {
    let cfg = config(&[
        ("topology", "fattree:k=4"),
        ("duration", "3s"),
        ("background.load", "0.2"),
        ("jobs.0.workers", "4"),
        ("jobs.0.model", "resnet50"),
        ("jobs.0.algorithm", "ring"),
        ("jobs.1.workers", "4"),
        ("jobs.1.model", "vgg16"),
        ("jobs.1.algorithm", "panama"),
        ("jobs.1.trees", "2"),
    ]);
    let mut calls = 0;
    let r = run(&cfg, &mut |_| calls += 1).unwrap();
    let json = r.to_json();
    eprintln!("{json}");
    assert!(calls > 10, "progress reported");
    assert!(r.flows.len() > 100, "{} background flows", r.flows.len());
    // Every job finished iterations no faster than compute + line rate.
    for (job, its) in r.jobs.iter().zip(&r.iterations) {
        assert!(
            !its.is_empty(),
            "{} made no progress",
            job.config.model.name
        );
        let g = job.config.model.gradient_bytes() as f64 * 8.0 / 10e9;
        assert!(
            its.iter()
                .all(|&t| t > job.config.model.compute_s + g * 0.99),
            "{its:?}"
        );
    }
    assert_eq!(r.jobs[1].algorithm_name(), "panama");
    assert!(json.contains("\"short\"") && json.contains("long_throughput_bps"));
    let short = r.short_fct();
    assert!(short.count > 0 && short.p99 >= short.p50 && short.p50 > 0.0);
}

#[test]
fn bad_config_keys_are_named() {
    let bad = |k: &str, v: &str| ScenarioConfig::from_pairs(&[(k, v)]).unwrap_err();
    assert!(bad("topolgy", "x").contains("topolgy"));
    assert!(bad("background.load", "2").contains("between 0 and 1"));
    assert!(bad("jobs.0.model", "gpt").contains("unknown model"));
    assert!(bad("background.distribution", "cache").contains("websearch"));
}
