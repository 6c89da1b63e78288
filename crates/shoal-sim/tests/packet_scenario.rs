//! Scenarios on the packet engine, PFC, and the PANAMA paper's metric
//! definitions (flow-size buckets, warm-up, carried load).

use shoal_sim::packet::{PacketConfig, PacketSim, PfcConfig};
use shoal_sim::scenario::packet_run::run_inspected;
use shoal_sim::scenario::report::{is_short, LONG_MIN_BYTES};
use shoal_sim::scenario::run::Comm;
use shoal_sim::scenario::{run, ConfigError, ScenarioConfig};
use shoal_sim::topology::{LinkSpec, Node, Topology};
use shoal_sim::units::{Rate, PS_PER_MS, PS_PER_US};
use shoal_sim::SimError;

fn config(pairs: &[(&str, &str)]) -> ScenarioConfig {
    ScenarioConfig::from_pairs(pairs).unwrap()
}

#[test]
fn buckets_are_the_papers() {
    // Section 7: "short flows (< 40MB)"; long and aggregation flows above.
    assert_eq!(LONG_MIN_BYTES, 40_000_000);
    assert!(is_short(39_999_999));
    assert!(!is_short(40_000_000));
    assert!(is_short(100_001) && is_short(10_000_001)); // short before: < 100 KB
}

/// Every switch passes on what reached it: bytes that arrived on its input
/// links = bytes it sent + bytes still in its output queues (no drops:
/// PFC). Aggregation packets are merged in switches, so only plan
/// allreduces and flows run here.
fn switches_conserve_bytes(sim: &PacketSim, topo: &Topology) {
    let sent = sim.link_bytes();
    let backlog = sim.link_backlog();
    let mut checked = 0;
    for (node, kind) in topo.nodes.iter().enumerate() {
        if *kind == Node::Host {
            continue;
        }
        let arrived: u64 = (0..topo.links.len())
            .filter(|&l| topo.links[l].to == node)
            .map(|l| sent[l] - backlog[l].1)
            .sum();
        let out = topo.out_links(node);
        let left: u64 = out.iter().map(|&l| sent[l]).sum();
        let queued: u64 = out.iter().map(|&l| backlog[l].0).sum();
        assert_eq!(arrived, left + queued, "switch {node}");
        checked += arrived;
    }
    assert!(
        checked > 100_000_000,
        "only {checked} bytes through switches"
    );
}

#[test]
fn packet_scenario_conserves_bytes() {
    let cfg = config(&[
        ("topology", "fattree:k=4"),
        ("engine", "packet"),
        ("duration", "60ms"),
        ("warmup", "10ms"),
        ("background.load", "0.5"),
        ("jobs.0.workers", "8"),
        ("jobs.0.model", "googlenet"),
        ("jobs.0.algorithm", "ring"),
        ("chunk_bytes", "4MiB"),
        ("pfc.enabled", "true"),
    ]);
    let mut delivered = 0;
    let r = run_inspected(&cfg, &mut |_| {}, &mut |sim, topo| {
        switches_conserve_bytes(sim, topo);
        delivered = sim.stats().delivered_bytes;
        assert_eq!(sim.stats().drops, 0);
    })
    .unwrap();
    // Every flow recorded started after the warm-up and delivered its bytes.
    let recorded: u64 = r.flows.iter().map(|f| f.bytes).sum();
    assert!(r.flows.len() > 50, "{} flows", r.flows.len());
    assert!(recorded <= delivered, "{recorded} > {delivered}");
    assert!(
        r.carried_load > 0.1 && r.carried_load < 1.0,
        "{}",
        r.carried_load
    );
    let json = r.to_json();
    assert!(json.contains("\"engine\": \"packet\"") && json.contains("pfc_pauses"));
}

#[test]
fn both_engines_run_the_same_jobs() {
    let pairs = [
        ("topology", "fattree:k=4"),
        ("duration", "1.5s"),
        ("warmup", "200ms"),
        ("background.load", "0.1"),
        ("background.distribution", "websearch"),
        ("jobs.0.workers", "4"),
        ("jobs.0.model", "googlenet"),
        ("jobs.0.algorithm", "ring"),
        ("jobs.1.workers", "4"),
        ("jobs.1.model", "inceptionv3"),
        ("jobs.1.algorithm", "panama"),
        ("jobs.2.workers", "4"),
        ("jobs.2.model", "alexnet"),
        ("jobs.2.algorithm", "switchml"),
    ];
    let flow = run(&config(&pairs), &mut |_| {}).unwrap();
    let mut with_packet = pairs.to_vec();
    with_packet.push(("engine", "packet"));
    let packet = run(&config(&with_packet), &mut |_| {}).unwrap();
    assert_eq!(flow.jobs.len(), packet.jobs.len());
    for (j, (f, p)) in flow
        .job_iteration_s()
        .iter()
        .zip(packet.job_iteration_s())
        .enumerate()
    {
        let (f, p) = (f.unwrap(), p.unwrap());
        assert_eq!(flow.jobs[j].hosts, packet.jobs[j].hosts);
        // Same compute, similar communication: within 25%.
        assert!(
            (p - f).abs() / f < 0.25,
            "job {j}: flow {f} s, packet {p} s"
        );
    }
    assert_eq!(packet.job_aggregated(), vec![false, true, true]);
    // Nothing recorded from the warm-up.
    assert!(packet.flows.len() < flow.flows.len() + 50);
}

/// An incast on a k=4 fat-tree with small switch buffers; `pfc` on or off.
fn incast(pfc: Option<PfcConfig>) -> (PacketSim, Topology) {
    let spec = LinkSpec {
        rate: Rate::gbit(10),
        latency: PS_PER_US,
        buffer: 60_000,
    };
    let topo = Topology::parse("fattree:k=4", spec).unwrap();
    let cfg = PacketConfig {
        pfc,
        ..PacketConfig::default()
    };
    let mut sim = PacketSim::new(&topo, cfg);
    // Eight senders in other pods to host 0: the ToR's port to host 0 is
    // the bottleneck; DCTCP's K (85 packets) is above the buffer, so only
    // the buffer (or PFC) holds them back.
    for src in 4..12 {
        sim.add_flow(src, 0, 2_000_000, 0);
    }
    sim.run_until(50 * PS_PER_MS);
    (sim, topo)
}

#[test]
fn pfc_never_drops_and_pauses_upstream() {
    let (lossy, _) = incast(None);
    assert!(
        lossy.stats().drops > 0,
        "the incast must overflow drop-tail"
    );
    let pfc = PfcConfig {
        xoff: 30_000,
        xon: 27_000,
    };
    let (sim, topo) = incast(Some(pfc));
    let stats = sim.stats();
    assert_eq!(stats.drops, 0);
    assert_eq!(stats.delivered_bytes, 8 * 2_000_000, "every byte arrives");
    let paused = sim.link_paused_time();
    let is_switch = |n: usize| topo.nodes[n] != Node::Host;
    // The ToR pauses the aggregation switches feeding it, and the pause
    // spreads a hop further up (congestion spreading): links into
    // aggregation switches, whose sources are core switches or hosts.
    let tor = topo.links[topo.out_links(0)[0]].to;
    let into_tor =
        (0..topo.links.len()).filter(|&l| topo.links[l].to == tor && is_switch(topo.links[l].from));
    assert!(
        into_tor.clone().any(|l| paused[l] > 0),
        "ToR's uplinks never paused"
    );
    let further: Vec<usize> = (0..topo.links.len())
        .filter(|&l| paused[l] > 0 && topo.links[l].to != tor)
        .collect();
    assert!(!further.is_empty(), "the pause did not spread upstream");
    // The ingress count stays within xoff plus one round trip of a link
    // (the PAUSE takes one latency to arrive, a packet may be on the wire).
    let headroom = 2 * 1250 + 3 * 1500;
    for (l, &peak) in sim.ingress_peak().iter().enumerate() {
        assert!(peak <= pfc.xoff + headroom, "link {l}: {peak} bytes");
    }
    assert!(sim.pfc_stats().pauses > 0);
}

#[test]
fn pfc_keys_parse_and_default() {
    let cfg = config(&[("pfc.enabled", "true")]);
    let pfc = cfg.pfc.unwrap();
    assert_eq!((pfc.xoff, pfc.xon), (300_000, 297_000));
    assert!(config(&[("pfc.xoff", "100KB")]).pfc.is_none());
    let bad: Vec<(String, String)> = vec![
        ("pfc.xon".into(), "400KB".into()),
        ("pfc.enabled".into(), "true".into()),
    ];
    let err = ScenarioConfig::from_pairs(&bad).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::PfcThresholds {
            xon: 400_000,
            xoff: 300_000
        }
    ));
    assert_eq!(
        err.to_string(),
        "pfc: need 0 <= xon < xoff, got xon 400000 and xoff 300000"
    );
    let err = ScenarioConfig::from_pairs(&[("pfc.enabled", "yes")]).unwrap_err();
    assert_eq!(err.key(), Some("pfc.enabled"));
    assert_eq!(
        err.to_string(),
        "pfc.enabled: invalid type: string \"yes\", expected a boolean"
    );
    // The flow engine has no queues to pause.
    let err = run(&config(&[("pfc.enabled", "true")]), &mut |_| {})
        .err()
        .unwrap();
    assert!(matches!(err, SimError::PfcNeedsPacketEngine), "{err}");
}

#[test]
fn one_tree_is_the_flow_engines_tree_on_the_packet_engine() {
    // Fig. 9's Agg1..Agg4 (`jobs.0.tree`): the packet engine sends the
    // job's data through exactly the switches of the tree the flow
    // engine's runner built (nothing else runs, so every switch that
    // forwards a byte is the job's).
    let switches_used = |tree: &str| {
        let cfg = config(&[
            ("topology", "fattree:k=4"),
            ("duration", "1s"),
            ("seed", "1"),
            ("engine", "packet"),
            ("jobs.0.workers", "8"),
            ("jobs.0.model", "alexnet"),
            ("jobs.0.algorithm", "panama"),
            ("jobs.0.placement", "random"),
            ("jobs.0.tree", tree),
        ]);
        let mut used = Vec::new();
        let r = run_inspected(&cfg, &mut |_| {}, &mut |sim, topo| {
            let sent = sim.link_bytes();
            used = (topo.hosts()..topo.nodes.len())
                .filter(|&s| topo.out_links(s).iter().any(|&l| sent[l] > 0))
                .collect::<Vec<_>>();
        })
        .unwrap();
        assert!(!r.iterations[0].is_empty(), "tree {tree}: the job iterates");
        let Comm::Ina { trees, .. } = &r.jobs[0].comm else {
            panic!("an aggregated job")
        };
        let mut want = trees[0].switches.clone();
        want.sort_unstable();
        (used, want)
    };
    let mut roots_used = Vec::new();
    for tree in ["0", "1", "2", "3"] {
        let (used, want) = switches_used(tree);
        assert_eq!(used, want, "tree {tree}");
        roots_used.push(want);
    }
    roots_used.dedup();
    assert_eq!(roots_used.len(), 4, "four different trees");
    let too_far = config(&[
        ("engine", "packet"),
        ("jobs.0.workers", "8"),
        ("jobs.0.model", "vgg16"),
        ("jobs.0.algorithm", "panama"),
        ("jobs.0.tree", "4"),
    ]);
    let Err(err) = run(&too_far, &mut |_| {}) else {
        panic!("a fifth tree of four")
    };
    assert!(
        matches!(err, SimError::TreeOutside { tree: 4, trees: 4 }),
        "{err}"
    );
}
