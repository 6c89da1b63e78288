//! Statistics of a run and its JSON report. Size buckets are the PANAMA
//! evaluation's (section 7: "short flows (< 40MB)", long flows and
//! aggregation flows above): short < 40 MB <= long.

use super::run::{FlowRecord, ScenarioResult};

/// Short flows are those under this; long flows the others.
pub const LONG_MIN_BYTES: u64 = 40_000_000;

/// Flows under this are also reported apart (`fct_s.small`): not a bucket
/// of the paper, but where head-of-line blocking (PFC) shows, since a
/// flow of a few packets has no time to share a link fairly.
pub const SMALL_MAX_BYTES: u64 = 100_000;

/// Whether a flow of `bytes` is short in PANAMA's sense.
pub fn is_short(bytes: u64) -> bool {
    bytes < LONG_MIN_BYTES
}

/// Mean, median and 99th percentile of a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
}

impl Summary {
    /// Nearest-rank percentiles; all zero for an empty sample.
    pub fn of(mut values: Vec<f64>) -> Summary {
        if values.is_empty() {
            return Summary::default();
        }
        values.sort_by(f64::total_cmp);
        let rank =
            |p: f64| values[((p * values.len() as f64).ceil() as usize).clamp(1, values.len()) - 1];
        Summary {
            count: values.len(),
            mean: values.iter().sum::<f64>() / values.len() as f64,
            p50: rank(0.5),
            p99: rank(0.99),
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"count\": {}, \"mean\": {:e}, \"p50\": {:e}, \"p99\": {:e}}}",
            self.count, self.mean, self.p50, self.p99
        )
    }
}

fn fcts(flows: &[FlowRecord], keep: impl Fn(u64) -> bool) -> Summary {
    Summary::of(
        flows
            .iter()
            .filter(|f| keep(f.bytes))
            .map(|f| f.fct_s)
            .collect(),
    )
}

impl ScenarioResult {
    pub fn short_fct(&self) -> Summary {
        fcts(&self.flows, is_short)
    }

    pub fn long_fct(&self) -> Summary {
        fcts(&self.flows, |b| !is_short(b))
    }

    /// Mean throughput of long flows, bit/s (bytes / FCT).
    pub fn long_throughput_bps(&self) -> f64 {
        let long: Vec<f64> = self
            .flows
            .iter()
            .filter(|f| !is_short(f.bytes))
            .map(|f| f.bytes as f64 * 8.0 / f.fct_s)
            .collect();
        if long.is_empty() {
            0.0
        } else {
            long.iter().sum::<f64>() / long.len() as f64
        }
    }

    /// Each job's mean iteration time after the warm-up (`None` if it
    /// finished none): the per-job training time the paper compares.
    pub fn job_iteration_s(&self) -> Vec<Option<f64>> {
        self.iterations
            .iter()
            .map(|its| (!its.is_empty()).then(|| its.iter().sum::<f64>() / its.len() as f64))
            .collect()
    }

    /// Whether each job's gradient is aggregated in the network by PANAMA.
    pub fn job_aggregated(&self) -> Vec<bool> {
        self.jobs
            .iter()
            .map(|j| j.aggregated(self.ina_min_bytes))
            .collect()
    }

    /// Mean iteration time over every completed iteration of every job.
    pub fn mean_iteration_s(&self) -> f64 {
        let all: Vec<f64> = self.iterations.iter().flatten().copied().collect();
        if all.is_empty() {
            0.0
        } else {
            all.iter().sum::<f64>() / all.len() as f64
        }
    }

    /// Offered load of the jobs (ring estimate) plus the background's.
    pub fn total_load(&self) -> f64 {
        self.background_load + self.jobs.iter().map(|j| j.offered_load).sum::<f64>()
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        let jobs: Vec<String> = self
            .jobs
            .iter()
            .zip(&self.iterations)
            .map(|(job, its)| {
                let mean = if its.is_empty() { 0.0 } else { its.iter().sum::<f64>() / its.len() as f64 };
                let comm = if its.is_empty() { 0.0 } else { mean - job.config.model.compute_s };
                let its: Vec<String> = its.iter().map(|t| format!("{t:e}")).collect();
                format!(
                    "{{\"model\": \"{}\", \"workers\": {}, \"algorithm\": \"{}\", \"offered_load\": {:e}, \
                     \"gradient_bytes\": {}, \"aggregated\": {}, \
                     \"mean_iteration_s\": {mean:e}, \"mean_comm_s\": {comm:e}, \"iterations_s\": [{}]}}",
                    job.config.model.name,
                    job.hosts.len(),
                    job.algorithm_name(),
                    job.offered_load,
                    job.config.model.gradient_bytes(),
                    job.aggregated(self.ina_min_bytes),
                    its.join(", ")
                )
            })
            .collect();
        let util = Summary::of(self.link_utilisation.clone());
        let max_util = self.link_utilisation.iter().copied().fold(0.0, f64::max);
        let counters: Vec<String> = self
            .counters
            .iter()
            .map(|(name, v)| format!("\"{name}\": {v:e}"))
            .collect();
        // Degenerate runs say so in the report too (`health.rs`).
        let warnings: Vec<String> = super::health::warnings(self)
            .iter()
            .map(|w| json_string(w))
            .collect();
        let engine = match self.engine {
            crate::engine::Engine::Packet => "packet",
            crate::engine::Engine::Flow => "flow",
        };
        format!(
            "{{\"engine\": \"{engine}\", \"warmup_s\": {:e}, \"carried_load\": {:e}, \"short_max_bytes\": {}, \
             \"counters\": {{{}}}, \
             \"duration_s\": {:e}, \"events\": {}, \"wall_s\": {:e}, \"background_load\": {:e}, \"total_load\": {:e}, \
             \"background\": {{\"flows\": {}, \"unfinished\": {}, \"fct_s\": {{\"all\": {}, \"short\": {}, \"long\": {}, \"small\": {}}}, \
             \"long_throughput_bps\": {:e}}}, \"mean_iteration_s\": {:e}, \"jobs\": [{}], \
             \"link_utilisation\": {{\"mean\": {:e}, \"p99\": {:e}, \"max\": {:e}}}, \"warnings\": [{}]}}",
            self.warmup_s,
            self.carried_load,
            LONG_MIN_BYTES - 1,
            counters.join(", "),
            self.duration_s,
            self.events,
            self.wall_s,
            self.background_load,
            self.total_load(),
            self.flows.len() + self.unfinished_flows,
            self.unfinished_flows,
            fcts(&self.flows, |_| true).json(),
            self.short_fct().json(),
            self.long_fct().json(),
            fcts(&self.flows, |b| b < SMALL_MAX_BYTES).json(),
            self.long_throughput_bps(),
            self.mean_iteration_s(),
            jobs.join(", "),
            util.mean,
            util.p99,
            max_util,
            warnings.join(", ")
        )
    }
}

/// `text` as a JSON string literal.
fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
