//! A flow trace replayed as background traffic: three hand-written flows on
//! a 4-host star at 10 Gb/s, 1 us per link, ECN K = 85, with their flow
//! completion times computed by hand from the flow engine's model
//! (docs/sim.md, "Flow engine").

use shoal_sim::scenario::file::FileProblem;
use shoal_sim::scenario::{run, ScenarioConfig};
use shoal_sim::workload::trace::{self, TraceError};
use shoal_sim::SimError;

#[test]
fn a_three_flow_trace_replays_with_hand_computed_fcts() {
    let path = std::env::temp_dir().join(format!("shoal-trace-{}.csv", std::process::id()));
    // A: host 0 -> 1 at 0, B: host 2 -> 1 at 0.6 ms (sharing the switch's
    // link to host 1 with A), C: host 3 -> 0 at 1 ms (links no one else uses).
    // 1 460 000 B = 1000 packets of 1460 B payload: 1 500 000 B on the wire.
    let trace = "start_s,src,dst,bytes\n0,0,1,1460000\n0.0006,2,1,1460000\n0.001,3,0,146000\n";
    std::fs::write(&path, trace).unwrap();
    let pairs = [
        ("topology", "star:hosts=4"),
        ("duration", "10ms"),
        ("background.trace", path.to_str().unwrap()),
    ];
    let cfg = ScenarioConfig::from_pairs(&pairs).unwrap();
    let r = run(&cfg, &mut |_| {}).unwrap();
    std::fs::remove_file(&path).unwrap();

    let rate = 10e9;
    let path_delay = 2.0 * 1e-6 + 1500.0 * 8.0 / rate; // two links + one store-and-forward
    let standing_queue = 85.0 * 1500.0 * 8.0 / rate; // B meets A's busy link: 102 us
    let bits = 1_500_000.0 * 8.0;
    // A alone for 0.6 ms (half its bits), then half the link with B until
    // its other half is sent (1.2 ms more): last bit out at 1.8 ms.
    let a = 0.0006 + (bits - 0.0006 * rate) / (rate / 2.0) + path_delay;
    // B: 1.2 ms at half rate, then the rest alone, then the queue.
    let b_sent_shared = 0.0012 * rate / 2.0;
    let b = 0.0012 + (bits - b_sent_shared) / rate + path_delay + standing_queue;
    // C: 150 000 B on the wire on idle links.
    let c = 150_000.0 * 8.0 / rate + path_delay;

    let fct = |src: u32, dst: u32| {
        let f = r
            .flows
            .iter()
            .find(|f| (f.src, f.dst) == (src, dst))
            .unwrap();
        f.fct_s
    };
    assert_eq!(r.flows.len(), 3);
    assert_eq!(r.unfinished_flows, 0);
    for (got, want, name) in [
        (fct(0, 1), a, "A"),
        (fct(2, 1), b, "B"),
        (fct(3, 0), c, "C"),
    ] {
        assert!(
            (got - want).abs() < 1e-9,
            "flow {name}: {got} s, by hand {want} s"
        );
    }
    assert_eq!(r.flows.iter().find(|f| f.src == 2).unwrap().start_s, 0.0006);
}

#[test]
fn a_trace_naming_a_host_the_topology_lacks_is_refused() {
    let path = std::env::temp_dir().join(format!("shoal-trace-bad-{}.csv", std::process::id()));
    std::fs::write(&path, "start_s,src,dst,bytes\n0,0,9,1000\n").unwrap();
    let pairs = [
        ("topology", "star:hosts=4"),
        ("background.trace", path.to_str().unwrap()),
    ];
    let cfg = ScenarioConfig::from_pairs(&pairs).unwrap();
    let err = run(&cfg, &mut |_| {}).err().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(
        matches!(
            err,
            SimError::TraceOutside {
                src: 0,
                dst: 9,
                hosts: 4,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "background.trace: a flow from host 0 to 9, but star:hosts=4 has 4 hosts"
    );
}

/// One traced flow of 1 500 000 wire bytes from host 0 to host 2 across the
/// spine of a 2-leaf, 1-spine, 2-hosts-per-leaf leaf-spine; its FCT.
fn one_flow_across_the_spine(topology: &str, tier_rates: Option<&str>) -> f64 {
    let path = std::env::temp_dir().join(format!(
        "shoal-trace-spine-{}-{}.csv",
        std::process::id(),
        tier_rates.is_some()
    ));
    std::fs::write(&path, "start_s,src,dst,bytes\n0,0,2,1460000\n").unwrap();
    let mut pairs = vec![
        ("topology".to_string(), topology.to_string()),
        ("duration".to_string(), "20ms".to_string()),
        (
            "background.trace".to_string(),
            path.to_str().unwrap().to_string(),
        ),
    ];
    if let Some(rates) = tier_rates {
        pairs.push(("tier_rates".to_string(), rates.to_string()));
    }
    let cfg = ScenarioConfig::from_pairs(&pairs).unwrap();
    let r = run(&cfg, &mut |_| {}).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(r.flows.len(), 1);
    r.flows[0].fct_s
}

#[test]
fn oversubscription_and_tier_rates_slow_the_uplinks() {
    let bits = 1_500_000.0 * 8.0;
    let packet = 1500.0 * 8.0;
    // Four links of 1 us; store-and-forward at the leaf and the spine at the
    // uplink rate, at the far leaf at the host rate.
    let fct = |uplink: f64| bits / uplink + 4e-6 + 2.0 * packet / uplink + packet / 10e9;
    // 2 hosts x 10 Gb/s over 1 spine at 4:1: 5 Gb/s uplinks.
    let got = one_flow_across_the_spine("leafspine:leaves=2,spines=1,hosts=2,oversub=4", None);
    assert!((got - fct(5e9)).abs() < 1e-9, "{got} vs {}", fct(5e9));
    let got = one_flow_across_the_spine(
        "leafspine:leaves=2,spines=1,hosts=2",
        Some("10gbit,2.5gbit"),
    );
    assert!((got - fct(2.5e9)).abs() < 1e-9, "{got} vs {}", fct(2.5e9));
}

#[test]
fn a_trace_or_scenario_that_is_a_fifo_is_refused_not_waited_on() {
    // A FIFO has length 0, so a size check passes it; reading it then waits
    // for a writer forever. Both readers go through small_file::read_text.
    let dir = std::env::temp_dir().join(format!("shoal-sim-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("flows.csv");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let trace = trace::read(&path).map(|_| ());
        let scenario = shoal_sim::scenario::file::read(&path).map(|_| ());
        tx.send((trace, scenario)).unwrap();
    });
    let (trace, scenario) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("reading a FIFO blocked");
    let trace = trace.unwrap_err();
    assert!(matches!(trace, TraceError::Read { .. }));
    let scenario = scenario.unwrap_err();
    assert!(matches!(scenario.problem, FileProblem::Read(_)));
    for refused in [trace.to_string(), scenario.to_string()] {
        assert!(
            refused.contains("flows.csv") && refused.contains("a FIFO"),
            "{refused}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
