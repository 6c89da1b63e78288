//! One point of PANAMA's Fig. 8 with the setup of `shoal sim panama`
//! (python/shoal/sim/panama.py base_pairs), for timing and profiling
//! without Python:
//! `cargo run --release -p shoal-sim --example fig8_point -- K DURATION VARIANT LOAD RATE_INTERVAL`
//! e.g. `... -- 16 1s panama 0.8 50us`. Prints the point's JSON and the CPU seconds.

use shoal_sim::panama::{fig8_point, Variant};
use shoal_sim::scenario::ScenarioConfig;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    if a.len() != 6 {
        eprintln!("usage: fig8_point K DURATION VARIANT LOAD RATE_INTERVAL");
        std::process::exit(2);
    }
    let (k, dur, variant, load) = (&a[1], &a[2], &a[3], a[4].parse::<f64>().unwrap());
    let pairs: Vec<(String, String)> = [
        ("topology", format!("fattree:k={k}")),
        ("link", "10gbit".into()),
        ("latency", "1us".into()),
        ("ecn_k", "85".into()),
        ("switch_memory", "64MB".into()),
        ("ina_min_bytes", "40MB".into()),
        ("background.load", "0.2".into()),
        ("background.distribution", "websearch,datamining".into()),
        ("slots_per_host", "2".into()),
        ("chunk_bytes", "64MiB".into()),
        ("random_jobs.trees", "4".into()),
        ("duration", dur.clone()),
        ("seed", "1".into()),
        ("rate_interval", a[5].clone()),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b))
    .collect();
    let cfg = ScenarioConfig::from_pairs(&pairs).unwrap();
    let c0 = shoal_sim::engine::thread_cpu_s();
    let p = fig8_point(&cfg, Variant::parse(variant).unwrap(), load).unwrap();
    println!(
        "{} cpu {:.2}",
        p.to_json(),
        shoal_sim::engine::thread_cpu_s() - c0
    );
}
