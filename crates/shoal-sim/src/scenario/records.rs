//! The records of a run as CSV files a researcher analyses (formats in
//! docs/sim.md, "Files"): every background flow, every iteration of every
//! job, and the utilisation over time of the most loaded links. The JSON
//! report holds the summaries of the same records.

use std::fmt::Write as _;
use std::path::Path;

use super::run::ScenarioResult;

/// Links written to `links.csv`: the most loaded over the whole run.
pub const TOP_LINKS: usize = 10;

/// `start_s,bytes,fct_s,src,dst`: every finished background flow, in the
/// order they finished (unfinished ones are counted in the report only).
pub fn flows_csv(r: &ScenarioResult) -> String {
    let mut out = String::from("start_s,bytes,fct_s,src,dst\n");
    for f in &r.flows {
        let _ = writeln!(
            out,
            "{:e},{},{:e},{},{}",
            f.start_s, f.bytes, f.fct_s, f.src, f.dst
        );
    }
    out
}

/// `job,model,workers,algorithm,iteration,start_s,time_s`: every completed
/// iteration (compute, then the allreduce) of every job.
pub fn iterations_csv(r: &ScenarioResult) -> String {
    let mut out = String::from("job,model,workers,algorithm,iteration,start_s,time_s\n");
    for (j, job) in r.jobs.iter().enumerate() {
        let (algorithm, model) = (job.algorithm_name(), job.config.model.name);
        for (i, (start, time)) in r.iteration_starts[j]
            .iter()
            .zip(&r.iterations[j])
            .enumerate()
        {
            let workers = job.hosts.len();
            let _ = writeln!(
                out,
                "{j},{model},{workers},{algorithm},{i},{start:e},{time:e}"
            );
        }
    }
    out
}

/// `link,from,to,start_s,end_s,utilisation`: the [`TOP_LINKS`] links that
/// carried the most bytes, each over every sampling interval of the run
/// (bits carried in the interval / (rate x interval)).
pub fn links_csv(r: &ScenarioResult) -> String {
    let s = &r.link_samples;
    let mut out = String::from("link,from,to,start_s,end_s,utilisation\n");
    let Some(last) = s.bytes.last() else {
        return out;
    };
    let mut busiest: Vec<usize> = (0..last.len()).collect();
    busiest.sort_by(|&a, &b| last[b].total_cmp(&last[a]).then(a.cmp(&b)));
    for &l in busiest.iter().take(TOP_LINKS) {
        let (from, to) = s.ends[l];
        let (mut t0, mut b0) = (0.0, 0.0);
        for (t, bytes) in s.times_s.iter().zip(&s.bytes) {
            let util = (bytes[l] - b0) * 8.0 / (s.rates_bps[l] * (t - t0));
            let _ = writeln!(out, "{l},{from},{to},{t0:e},{t:e},{util:e}");
            (t0, b0) = (*t, bytes[l]);
        }
    }
    out
}

/// Writes `flows.csv`, `iterations.csv` and `links.csv` into `dir`.
pub fn write(r: &ScenarioResult, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("flows.csv"), flows_csv(r))?;
    std::fs::write(dir.join("iterations.csv"), iterations_csv(r))?;
    std::fs::write(dir.join("links.csv"), links_csv(r))
}
