//! Flow engine: max-min fair shares and completion times on small networks
//! computed by hand.

use shoal_sim::flow::{Event, FlowEngine, FlowError};

const INF: f64 = f64::INFINITY;

/// Runs the engine dry; returns (tag, delivery time) in delivery order.
fn deliveries(engine: &mut FlowEngine) -> Vec<(u64, f64)> {
    let mut out = Vec::new();
    while let Some(event) = engine.next_event() {
        if let Event::Delivered { tag, time_s, .. } = event {
            out.push((tag, time_s));
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn dumbbell_shares_then_speeds_up() {
    // One 8 Mbit/s bottleneck (1 MB/s). 1 MB and 2 MB flows start together:
    // 0.5 MB/s each; the first ends at 2 s, the second then runs alone at
    // 1 MB/s and ends at 3 s. Each is delivered 1 ms later.
    let mut e = FlowEngine::new(&[8e6]).unwrap();
    e.start_flow(0.0, &[0], 1_000_000, 1e-3, INF, 1).unwrap();
    e.start_flow(0.0, &[0], 2_000_000, 1e-3, INF, 2).unwrap();
    let got = deliveries(&mut e);
    assert_eq!(got.len(), 2);
    assert!(close(got[0].1, 2.001) && got[0].0 == 1, "{got:?}");
    assert!(close(got[1].1, 3.001) && got[1].0 == 2, "{got:?}");
}

#[test]
fn parking_lot_is_max_min_fair() {
    // Links: L0 = 8 Mbit/s, L1 = 16 Mbit/s. Long flow over L0+L1, flow A on
    // L0, flows B and C on L1. L0 saturates first at 4 Mbit/s each (long,
    // A); L1 has 12 Mbit/s left for B and C: 6 Mbit/s each.
    let mut e = FlowEngine::new(&[8e6, 16e6]).unwrap();
    let long = e.start_flow(0.0, &[0, 1], 10_000_000, 0.0, INF, 0).unwrap();
    let a = e.start_flow(0.0, &[0], 10_000_000, 0.0, INF, 1).unwrap();
    let b = e.start_flow(0.0, &[1], 10_000_000, 0.0, INF, 2).unwrap();
    let c = e.start_flow(0.0, &[1], 750_000, 0.0, INF, 3).unwrap();
    e.timer(0.5, 99);
    assert_eq!(
        e.next_event(),
        Some(Event::Timer {
            token: 99,
            time_s: 0.5
        })
    );
    assert_eq!(
        [
            e.rate_bps(long),
            e.rate_bps(a),
            e.rate_bps(b),
            e.rate_bps(c)
        ],
        [4e6, 4e6, 6e6, 6e6]
    );
    // C (6 Mbit) ends at 1 s; then B gets 16 - 4 = 12 Mbit/s. Its last
    // byte leaves (Sent) and, with no latency, arrives at once.
    match e.next_event() {
        Some(Event::Sent { tag: 3, time_s }) => assert!(close(time_s, 1.0)),
        other => panic!("{other:?}"),
    }
    match e.next_event() {
        Some(Event::Delivered { tag: 3, time_s, .. }) => assert!(close(time_s, 1.0)),
        other => panic!("{other:?}"),
    }
    e.timer(1.5, 7);
    e.next_event();
    assert_eq!(
        [e.rate_bps(long), e.rate_bps(a), e.rate_bps(b)],
        [4e6, 4e6, 12e6]
    );
}

#[test]
fn rate_caps_free_bandwidth_for_others() {
    // A flow capped at 2 Mbit/s leaves 8 of 10 Mbit/s to the other one.
    let mut e = FlowEngine::new(&[10e6]).unwrap();
    let capped = e.start_flow(0.0, &[0], 1_000_000, 0.0, 2e6, 0).unwrap();
    let free = e.start_flow(0.0, &[0], 1_000_000, 0.0, INF, 1).unwrap();
    e.timer(0.1, 0);
    e.next_event();
    assert_eq!((e.rate_bps(capped), e.rate_bps(free)), (2e6, 8e6));
    // Lowering the cap mid-flow is applied before time advances.
    e.set_cap(capped, 1e6);
    e.timer(0.2, 0);
    e.next_event();
    assert_eq!((e.rate_bps(capped), e.rate_bps(free)), (1e6, 9e6));
}

#[test]
fn every_byte_sent_is_carried_and_counted() {
    // Conservation: each link carries exactly the bytes of the flows that
    // crossed it.
    let mut e = FlowEngine::new(&[1e9, 1e9, 1e9]).unwrap();
    e.start_flow(0.0, &[0, 1], 5_000, 0.0, INF, 0).unwrap();
    e.start_flow(0.001, &[1, 2], 7_000, 0.0, INF, 1).unwrap();
    e.start_flow(0.0, &[], 3, 1e-6, INF, 2).unwrap();
    assert_eq!(deliveries(&mut e).len(), 3);
    assert_eq!(e.link_bytes(), vec![5_000.0, 12_000.0, 7_000.0]);
}

#[test]
fn bad_input_is_refused() {
    let err = FlowEngine::new(&[0.0]).err().unwrap();
    assert_eq!(err, FlowError::Capacity { link: 0, bps: 0.0 });
    assert_eq!(err.to_string(), "link 0 has non-positive capacity 0 bit/s");
    let mut e = FlowEngine::new(&[1.0]).unwrap();
    let err = e.start_flow(0.0, &[3], 1, 0.0, INF, 0).unwrap_err();
    assert_eq!(err, FlowError::NoSuchLink { link: 3, links: 1 });
    assert_eq!(
        err.to_string(),
        "flow path names link 3, but there are 1 links"
    );
    let err = e.start_flow(0.0, &[0], 1, -1.0, INF, 0).unwrap_err();
    assert!(matches!(err, FlowError::CapOrLatency { latency_s, .. } if latency_s == -1.0));
}

#[test]
fn weights_split_a_link_in_proportion() {
    // Weight 3 vs 1 on 8 Mbit/s: 6 and 2 Mbit/s; a third flow on a second
    // link with the weighted one does not change that (it gets 10 - 6).
    let mut e = FlowEngine::new(&[8e6, 10e6]).unwrap();
    let heavy = e.start_flow(0.0, &[0, 1], 1_000_000, 0.0, INF, 0).unwrap();
    e.set_weight(heavy, 3.0);
    let light = e.start_flow(0.0, &[0], 1_000_000, 0.0, INF, 1).unwrap();
    let other = e.start_flow(0.0, &[1], 1_000_000, 0.0, INF, 2).unwrap();
    e.timer(0.01, 0);
    e.next_event();
    assert_eq!(
        [e.rate_bps(heavy), e.rate_bps(light), e.rate_bps(other)],
        [6e6, 2e6, 4e6]
    );
}

#[test]
fn long_link_sets_are_supported() {
    // An aggregation tree as one flow over 12 links, one of them shared.
    let mut e = FlowEngine::new(&[10e6; 12]).unwrap();
    let path: Vec<u32> = (0..12).collect();
    let tree = e.start_flow(0.0, &path, 1_000_000, 0.0, INF, 0).unwrap();
    let other = e.start_flow(0.0, &[11], 1_000_000, 0.0, INF, 1).unwrap();
    e.timer(0.01, 0);
    e.next_event();
    assert_eq!((e.rate_bps(tree), e.rate_bps(other)), (5e6, 5e6));
    assert_eq!(deliveries(&mut e).len(), 2);
    assert_eq!(e.link_bytes()[0], 1_000_000.0);
}

#[test]
fn an_end_that_leaves_its_links_idle_recomputes_nothing() {
    // Two flows one after the other on one link: each start needs its
    // rate; the first end frees the link for the second, which waits.
    // The second end leaves the link idle: nothing is recomputed for it.
    let mut e = FlowEngine::new(&[8e6]).unwrap();
    e.start_flow(0.0, &[0], 1_000_000, 0.0, INF, 1).unwrap();
    e.start_flow(0.5, &[0], 1_000_000, 0.0, INF, 2).unwrap();
    let got = deliveries(&mut e);
    assert!(close(got[0].1, 1.5) && close(got[1].1, 2.0), "{got:?}");
    // At 0: flow 1 alone; at 0.5: flow 2 joins; at 1.5: flow 1 ends and
    // flow 2 speeds up. Flow 2's end at 2 would have been a fourth.
    assert_eq!(e.recomputes(), 3);
}
