//! `shoal sim plan`: the simulated time of one collective call, from the
//! strings a user types to a JSON report. Shared by the Rust binary
//! (`cargo run --release -p shoal-sim -- plan ...`) and the Python binding.

use shoal_plan::{CallPlans, Collective};

use crate::dag::{build_with, BuiltinOnly, DagSpec, Document, PlanSource};
use crate::engine::{simulate_collective, simulate_ina, Engine, Options, Outcome};
use crate::error::SimError;
use crate::packet::InaJob;
use crate::topology::{LinkSpec, Topology};
use crate::units::{parse_bytes, parse_rate, parse_time, seconds};

/// One `shoal sim plan` request, as typed.
#[derive(Clone, Debug)]
pub struct PlanRequest {
    pub collective: String,
    pub algo: String,
    pub ranks: usize,
    /// Bytes per rank ("64MiB").
    pub size: String,
    pub topology: String,
    pub link: Option<String>,
    pub latency: Option<String>,
    pub buffer: Option<String>,
    /// Link rate per tier, comma-separated ("10gbit,40gbit"): hosts'
    /// links first ([`Topology::set_tier_rates`]).
    pub tier_rates: Option<String>,
    pub engine: String,
    pub ranks_per_host: usize,
    pub seed: u64,
    /// Host software time per message ("450us"; packet engine only, see
    /// `PacketConfig::host_overhead`).
    pub host_overhead: Option<String>,
    /// A plan document (`--plan FILE.json`) to simulate instead of a named
    /// algorithm: the collective, ranks, size and pieces come from it.
    pub document: Option<CallPlans>,
}

impl Default for PlanRequest {
    fn default() -> PlanRequest {
        PlanRequest {
            collective: "allreduce".into(),
            algo: "ring".into(),
            ranks: 8,
            size: "1MiB".into(),
            topology: "star:hosts=8".into(),
            link: None,
            latency: None,
            buffer: None,
            tier_rates: None,
            engine: "packet".into(),
            ranks_per_host: 1,
            seed: 0,
            host_overhead: None,
            document: None,
        }
    }
}

/// The request, run: the outcome and what it ran on.
#[derive(Clone, Debug)]
pub struct PlanReport {
    pub request: PlanRequest,
    pub topology: String,
    pub hosts: usize,
    pub outcome: Outcome,
}

impl PlanRequest {
    /// Runs a built-in algorithm or the plan document.
    pub fn run(&self) -> Result<PlanReport, SimError> {
        self.run_with(&BuiltinOnly)
    }

    /// Runs the request, with `source` supplying the algorithms the
    /// built-in registry does not have (those registered from Python).
    pub fn run_with(&self, source: &dyn PlanSource) -> Result<PlanReport, SimError> {
        match &self.document {
            Some(plans) => {
                let document = Document::new(plans.clone());
                let spec = document.spec()?;
                let request = PlanRequest {
                    collective: spec.collective.name().into(),
                    algo: spec.algorithm.clone(),
                    ranks: spec.world,
                    size: spec.bytes.to_string(),
                    ranks_per_host: spec.ranks_per_host,
                    document: None,
                    ..self.clone()
                };
                request.simulate(spec, &document)
            }
            None => {
                let collective = self.collective()?;
                let bytes = parse_bytes(&self.size)?;
                let mut spec = DagSpec::new(collective, &self.algo, self.ranks, bytes);
                spec.ranks_per_host = self.ranks_per_host.max(1);
                self.simulate(spec, source)
            }
        }
    }

    fn collective(&self) -> Result<Collective, SimError> {
        Collective::from_name(&self.collective)
            .ok_or_else(|| SimError::UnknownCollective(self.collective.clone()))
    }

    /// Simulates `spec` (its algorithm from the registry or `source`).
    fn simulate(&self, spec: DagSpec, source: &dyn PlanSource) -> Result<PlanReport, SimError> {
        let collective = spec.collective;
        let engine = Engine::parse(&self.engine)?;
        let link = LinkSpec::parse(
            self.link.as_deref(),
            self.latency.as_deref(),
            self.buffer.as_deref(),
        )?;
        let mut topo = Topology::parse(&self.topology, link)?;
        if let Some(rates) = &self.tier_rates {
            let rates = rates
                .split(',')
                .map(|r| parse_rate(r.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            topo.set_tier_rates(&rates)?;
        }
        let bytes = spec.bytes;
        let hosts_needed = self.ranks.div_ceil(spec.ranks_per_host);
        if hosts_needed > topo.hosts() {
            return Err(SimError::TooFewHosts {
                ranks: self.ranks,
                ranks_per_host: spec.ranks_per_host,
                needed: hosts_needed,
                topology: topo.name.clone(),
                hosts: topo.hosts(),
            });
        }
        let mut opts = Options::default();
        opts.packet.seed = self.seed;
        if let Some(o) = &self.host_overhead {
            if engine != Engine::Packet {
                return Err(SimError::HostOverheadNeedsPacketEngine);
            }
            opts.packet.host_overhead = parse_time(o)?;
        }
        let outcome = if self.algo == "ina" {
            if collective != Collective::Allreduce {
                return Err(SimError::InaNotAllreduce(self.collective.clone()));
            }
            // One worker per host: ranks of a host are summed locally first.
            let mut workers = spec.block_placement();
            workers.dedup();
            simulate_ina(&topo, InaJob::new(workers, bytes), engine, &opts)?
        } else {
            let dag = build_with(&spec, None, source)?;
            simulate_collective(&topo, dag, engine, &opts)?
        };
        Ok(PlanReport {
            request: self.clone(),
            topology: topo.name.clone(),
            hosts: topo.hosts(),
            outcome,
        })
    }
}

impl PlanReport {
    /// The report as one JSON object (`time_s`, `events`, `events_per_s`,
    /// `wall_s`, and what was simulated).
    pub fn to_json(&self) -> String {
        let o = &self.outcome;
        let r = &self.request;
        let mut s = String::from("{");
        let mut field = |k: &str, v: String| {
            if s.len() > 1 {
                s.push_str(", ");
            }
            s.push_str(&format!("\"{k}\": {v}"));
        };
        let q = |v: &str| {
            let mut out = String::new();
            shoal_plan::json::write_string(&mut out, v);
            out
        };
        field("collective", q(&r.collective));
        field("algo", q(&r.algo));
        field("ranks", r.ranks.to_string());
        field("bytes", parse_bytes(&r.size).unwrap_or(0).to_string());
        field("topology", q(&self.topology));
        field("hosts", self.hosts.to_string());
        field("engine", q(o.engine.name()));
        let overhead = r.host_overhead.as_deref().map_or(Ok(0), parse_time);
        field(
            "host_overhead_s",
            format!("{:e}", seconds(overhead.unwrap_or(0))),
        );
        field("time_s", format!("{:e}", o.time_s()));
        field("events", o.events.to_string());
        field("events_per_s", format!("{:.0}", o.events_per_s()));
        field("wall_s", format!("{:.6}", o.wall_s));
        field("cpu_s", format!("{:.6}", o.cpu_s));
        field("events_per_cpu_s", format!("{:.0}", o.events_per_cpu_s()));
        field("messages", o.messages.to_string());
        field("network_bytes", o.bytes.to_string());
        field("drops", o.packet.drops.to_string());
        field("ecn_marks", o.packet.ecn_marks.to_string());
        field("timeouts", o.packet.timeouts.to_string());
        if r.algo == "ina" {
            field("ina_results", o.packet.ina.results.to_string());
            field("ina_wrong_results", o.packet.ina.wrong_results.to_string());
        }
        s.push('}');
        s
    }

    /// One human-readable line.
    pub fn summary(&self) -> String {
        let o = &self.outcome;
        format!(
            "{} {} x{} {} on {} ({} engine): {:.6} s simulated, {} events in {:.3} s wall ({:.2} M events/s), {:.3} s CPU ({:.2} M events/CPU-s)",
            self.request.collective,
            self.request.algo,
            self.request.ranks,
            self.request.size,
            self.topology,
            o.engine.name(),
            o.time_s(),
            o.events,
            o.wall_s,
            o.events_per_s() / 1e6,
            o.cpu_s,
            o.events_per_cpu_s() / 1e6
        )
    }
}
