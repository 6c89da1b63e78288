//! PANAMA's directions on a reduced configuration (k=8 fat-tree, 128
//! hosts): at high load PANAMA's training time and long-flow throughput
//! beat ring allreduce's; Fig. 10's fairness. (The p99 short-flow FCT
//! direction is not reproduced by the flow model once a ring sends its
//! messages to a peer one after another: docs/sim.md, "PANAMA".)

use shoal_sim::panama::{fig10, fig8_point, Variant};
use shoal_sim::scenario::ScenarioConfig;

fn reduced() -> ScenarioConfig {
    let pairs = [
        ("topology", "fattree:k=8"),
        ("duration", "1.5s"),
        ("background.load", "0.2"),
        ("slots_per_host", "2"),
        ("chunk_bytes", "64MiB"),
        ("random_jobs.trees", "4"),
        ("seed", "5"),
    ];
    ScenarioConfig::from_pairs(&pairs).unwrap()
}

#[test]
fn panama_trains_faster_than_ring_at_high_load() {
    let base = reduced();
    let ring = fig8_point(&base, Variant::Ring, 0.8).unwrap();
    let panama = fig8_point(&base, Variant::Panama, 0.8).unwrap();
    eprintln!("ring   {}", ring.to_json());
    eprintln!("panama {}", panama.to_json());
    assert_eq!(ring.jobs, panama.jobs, "same jobs for both");
    assert!(ring.total_load > 0.6, "load reached: {}", ring.total_load);
    assert!(panama.mean_iteration_s < ring.mean_iteration_s);
    assert!(panama.long_throughput_bps > ring.long_throughput_bps);
}

#[test]
fn random_jobs_draw_from_the_model_weights() {
    // PANAMA aggregates every model's gradient but GoogLeNet's (27 MB <
    // 40 MB): a mix of GoogLeNet alone draws no aggregated job, VGG16 alone
    // only aggregated ones (the base's mix reaches Fig. 8's jobs).
    let aggregated = |weights: &[(&str, &str)]| {
        let mut pairs = vec![
            ("topology", "fattree:k=4"),
            ("duration", "50ms"),
            ("slots_per_host", "2"),
            ("chunk_bytes", "64MiB"),
            ("seed", "3"),
        ];
        pairs.extend_from_slice(weights);
        let base = ScenarioConfig::from_pairs(&pairs).unwrap();
        fig8_point(&base, Variant::Panama, 1.0)
            .unwrap()
            .job_aggregated
    };
    let only_googlenet = aggregated(&[("random_jobs.model_weights.googlenet", "1")]);
    let only_vgg16 = aggregated(&[("random_jobs.model_weights.vgg16", "1")]);
    eprintln!("googlenet {only_googlenet:?}, vgg16 {only_vgg16:?}");
    assert!(!only_googlenet.is_empty() && only_googlenet.iter().all(|&a| !a));
    assert!(!only_vgg16.is_empty() && only_vgg16.iter().all(|&a| a));
}

#[test]
fn aggregation_shares_fairly_only_with_congestion_control() {
    let fair = fig10(true).unwrap();
    let unfair = fig10(false).unwrap();
    // Before 0.25 s the background flow has the link; after, half (PANAMA)
    // or 1/(1 + NO_CC_WEIGHT) of it (no congestion control).
    let at = |s: &shoal_sim::panama::Fig10Series, t: f64| {
        let i = s.time_s.iter().position(|&x| (x - t).abs() < 1e-9).unwrap();
        (s.background_bps[i], s.aggregation_bps[i])
    };
    assert_eq!(at(&fair, 0.2), (10e9, 0.0));
    assert_eq!(at(&fair, 0.5), (5e9, 5e9));
    let (bg, agg) = at(&unfair, 0.5);
    assert!(bg < 1e9 && agg > 9e9, "{bg} {agg}");
}
