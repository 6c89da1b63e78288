//! Scenarios end to end on the flow engine.

use shoal_sim::scenario::{run, ConfigError, ScenarioConfig};

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
    let err = bad("topolgy", "x");
    assert!(matches!(&err, ConfigError::UnknownKey { key, line: None } if key == "topolgy"));
    assert_eq!(err.to_string(), "unknown scenario key \"topolgy\"");
    let err = bad("jobs.0.modle", "vgg16");
    assert_eq!(err.to_string(), "unknown scenario key \"jobs.0.modle\"");
    let err = bad("background.load", "2");
    assert!(matches!(&err, ConfigError::Value { key, .. } if key == "background.load"));
    assert_eq!(
        err.to_string(),
        "background.load: 2 must be between 0 and 1"
    );
    let err = bad("jobs.0.model", "gpt");
    assert_eq!(err.key(), Some("jobs.0.model"));
    assert!(
        err.to_string()
            .starts_with("jobs.0.model: unknown model \"gpt\""),
        "{err}"
    );
    let err = bad("background.distribution", "cache");
    assert_eq!(err.key(), Some("background.distribution"));
    assert!(err.to_string().contains("websearch"));
    // A size, rate or duration is named with its key.
    let err = bad("switch_memory", "3 parsecs");
    assert_eq!(
        err.to_string(),
        "switch_memory: size '3 parsecs': unknown unit 'parsecs'; use B, KB, MB, GB, KiB, MiB or GiB"
    );
    let err = bad("jobs.0.placement", "far");
    assert_eq!(
        err.to_string(),
        "jobs.0.placement: unknown variant `far`, expected `close` or `random`"
    );
    let err = bad("seed", "-1");
    assert_eq!(err.key(), Some("seed"));
    let err = bad("jobs.x", "1");
    assert!(matches!(err, ConfigError::ArrayKey(_)));
    assert_eq!(
        err.to_string(),
        "jobs.x: expected jobs.N.FIELD, N from 0 in order"
    );
    let err = bad("jobs.0.workers", "1");
    assert!(matches!(err, ConfigError::JobTooSmall(0)));
    let err = bad("warmup", "1s");
    assert!(matches!(err, ConfigError::WarmupTooLong));
    assert_eq!(err.to_string(), "warmup must be shorter than duration");
}
