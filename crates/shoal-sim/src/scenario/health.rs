//! Whether a run measured what it was meant to: a run in which no job
//! finished an iteration, or whose network carried far less background
//! traffic than was offered, still prints numbers; these checks say why
//! they are not a result (a warning in the output and in `report.json`).

use super::run::ScenarioResult;

/// Carried below this fraction of the offered background load is "far below".
pub const CARRIED_FRACTION: f64 = 0.5;

/// The background load the network carried: bytes of the finished flows
/// over the capacity of the hosts' links for the run after the warm-up
/// (the flows that start in it are not recorded).
pub fn carried_background_load(r: &ScenarioResult) -> f64 {
    let s = &r.link_samples;
    let host_capacity: f64 = s
        .ends
        .iter()
        .zip(&s.rates_bps)
        .filter(|((from, _), _)| *from < s.hosts)
        .map(|(_, rate)| rate)
        .sum();
    let bits: f64 = r.flows.iter().map(|f| f.bytes as f64 * 8.0).sum();
    let measured_s = r.duration_s - r.warmup_s;
    if host_capacity == 0.0 || measured_s <= 0.0 {
        return 0.0;
    }
    bits / (host_capacity * measured_s)
}

/// What makes the run degenerate, one sentence each; empty when nothing does.
pub fn warnings(r: &ScenarioResult) -> Vec<String> {
    let mut out = Vec::new();
    if !r.jobs.is_empty() && r.iterations.iter().all(Vec::is_empty) {
        out.push(format!(
            "no job finished an iteration in {} s{}: the training-time figures are empty (run longer)",
            r.duration_s,
            if r.warmup_s > 0.0 {
                format!(" after a {} s warm-up", r.warmup_s)
            } else {
                String::new()
            }
        ));
    }
    let carried = carried_background_load(r);
    if r.background_load > 0.0 && carried < CARRIED_FRACTION * r.background_load {
        out.push(format!(
            "the network carried a background load of {carried:.3}, far below the {:.3} offered \
             ({} of {} flows unfinished): the run is too short or the network saturated",
            r.background_load,
            r.unfinished_flows,
            r.flows.len() + r.unfinished_flows
        ));
    }
    out
}
