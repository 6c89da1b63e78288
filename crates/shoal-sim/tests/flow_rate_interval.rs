//! `FlowEngine::set_rate_interval`: rates recomputed at most every
//! interval; each start and end takes effect at most one interval late.

use shoal_sim::flow::{Event, FlowEngine};

/// Two 1 Gbit flows on one 10 Gb/s link, the second starting at 3 ms;
/// returns their delivery times.
fn two_flows(interval_s: f64) -> Vec<f64> {
    let mut engine = FlowEngine::new(&[10e9]).unwrap();
    engine.set_rate_interval(interval_s);
    let bytes = 125_000_000; // 1 Gbit: 0.1 s alone
    engine
        .start_flow(0.0, &[0], bytes, 0.0, f64::INFINITY, 0)
        .unwrap();
    engine
        .start_flow(0.003, &[0], bytes, 0.0, f64::INFINITY, 1)
        .unwrap();
    let mut done = vec![0.0; 2];
    while let Some(event) = engine.next_event() {
        if let Event::Delivered { tag, time_s, .. } = event {
            done[tag as usize] = time_s;
        }
    }
    done
}

#[test]
fn exact_by_default_and_at_most_one_interval_late_otherwise() {
    // Exact: flow 0 sends 0.03 Gbit alone, then both share 5 Gb/s each:
    // flow 0 ends at 0.003 + 0.97 / 5 = 0.197 s, flow 1 at 0.2 s.
    let exact = two_flows(0.0);
    assert!((exact[0] - 0.197).abs() < 1e-12, "{exact:?}");
    assert!((exact[1] - 0.2).abs() < 1e-12, "{exact:?}");
    // Rates at most every 7 ms: the first recompute was at 0 s, so flow 1
    // waits until 7 ms (4 ms late) while flow 0 keeps the whole link:
    // flow 0 ends at 0.007 + 0.93 / 5 = 0.193 s. Sparse events (flow 0's
    // end) are handled at once: the interval bounds how often, not when.
    let lagged = two_flows(0.007);
    assert!((lagged[0] - 0.193).abs() < 1e-12, "{lagged:?}");
    for (l, e) in lagged.iter().zip(&exact) {
        assert!((l - e).abs() <= 0.007 + 1e-12, "{lagged:?} vs {exact:?}");
    }
    // Work is conserved: the link is never idle while a flow has bytes,
    // so the last delivery is still at 0.2 s.
    assert!((lagged[1] - 0.2).abs() < 1e-12, "{lagged:?}");
}

fn scenario(interval: &str) -> shoal_sim::scenario::ScenarioResult {
    let pairs = [
        ("topology", "fattree:k=4"),
        ("background.load", "0.5"),
        ("duration", "50ms"),
        ("rate_interval", interval),
    ];
    let cfg = shoal_sim::scenario::ScenarioConfig::from_pairs(&pairs).unwrap();
    shoal_sim::scenario::run(&cfg, &mut |_| {}).unwrap()
}

#[test]
fn scenario_rate_interval_shifts_fcts_by_at_most_a_few_intervals() {
    let exact = scenario("0us");
    let lagged = scenario("20us");
    assert_eq!(exact.flows.len(), lagged.flows.len(), "same flows finish");
    let (e, l) = (exact.short_fct().p99, lagged.short_fct().p99);
    // A flow's start and its neighbours' ends each take effect <= 20 us late.
    assert!(
        l >= e - 1e-4 && l <= e + 1e-4,
        "p99 short FCT {e} s exact, {l} s lagged"
    );
    let err = shoal_sim::scenario::ScenarioConfig::from_pairs(&[(
        "rate_interval".to_string(),
        "soon".to_string(),
    )])
    .unwrap_err();
    assert_eq!(err.key(), Some("rate_interval"));
    assert_eq!(
        err.to_string(),
        "rate_interval: 'soon' does not start with a number"
    );
}
