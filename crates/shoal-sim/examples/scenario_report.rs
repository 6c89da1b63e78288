//! A scenario from `key=value` arguments (the dotted keys of a scenario
//! TOML file, docs/sim.md "Scenarios"), without Python: prints the report's
//! JSON and the CPU seconds it took. For experiments and profiling:
//! `cargo run --release -p shoal-sim --example scenario_report -- engine=packet topology=fattree:k=8 ...`

use shoal_sim::scenario::{run, ScenarioConfig};

fn main() {
    let pairs: Result<Vec<(String, String)>, String> = std::env::args()
        .skip(1)
        .map(|a| {
            a.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{a:?}: expected key=value"))
        })
        .collect();
    let result = pairs
        .and_then(|p| ScenarioConfig::from_pairs(&p).map_err(|e| e.to_string()))
        .and_then(|cfg| {
            let c0 = shoal_sim::engine::thread_cpu_s();
            run(&cfg, &mut |_| {})
                .map(|r| (r, shoal_sim::engine::thread_cpu_s() - c0))
                .map_err(|e| e.to_string())
        });
    match result {
        Ok((r, cpu)) => println!("{}\ncpu_s {cpu:.2}", r.to_json()),
        Err(e) => {
            eprintln!("scenario_report: {e}");
            std::process::exit(2);
        }
    }
}
