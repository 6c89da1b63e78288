//! PANAMA Fig. 9 in small: one 8-worker job on a k=4 fat-tree with long
//! flows between the other hosts. With `tree_share = each` (every tree its
//! own window, as PANAMA's) four trees spread over the core switches beat
//! every single tree (`jobs.0.tree`), as in the paper; with the default
//! `split` the four trees together hold one share and do not.

use shoal_sim::scenario::{run, ScenarioConfig};
use shoal_sim::SimError;

/// Mean communication time per iteration of the job.
fn comm_s(long_flows: usize, tree_share: &str, only_tree: Option<usize>) -> f64 {
    let mut pairs: Vec<(String, String)> = [
        ("topology", "fattree:k=4"),
        ("duration", "8s"),
        ("seed", "1"),
        ("jobs.0.workers", "8"),
        ("jobs.0.model", "vgg16"),
        ("jobs.0.algorithm", "panama"),
        ("jobs.0.trees", "4"),
        ("jobs.0.placement", "random"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    pairs.push(("long_flows".into(), long_flows.to_string()));
    pairs.push(("tree_share".into(), tree_share.into()));
    if let Some(t) = only_tree {
        pairs.push(("jobs.0.tree".into(), t.to_string()));
    }
    let cfg = ScenarioConfig::from_pairs(&pairs).unwrap();
    let r = run(&cfg, &mut |_| {}).unwrap();
    let its = &r.iterations[0];
    assert!(!its.is_empty(), "the job iterates");
    its.iter().sum::<f64>() / its.len() as f64 - r.jobs[0].config.model.compute_s
}

#[test]
fn four_trees_beat_one_under_long_flows_when_each_tree_has_its_share() {
    let four = comm_s(8, "each", None);
    let ones: Vec<f64> = (0..4).map(|t| comm_s(8, "each", Some(t))).collect();
    let best_one = ones.iter().copied().fold(f64::INFINITY, f64::min);
    eprintln!("8 long flows, each: 4 trees {four:.3} s, single trees {ones:.3?}");
    assert!(
        four < 0.8 * best_one,
        "4 trees {four} s, best single tree {best_one} s"
    );
    // Without long flows the NIC is the bottleneck: trees do not matter.
    let (four0, one0) = (comm_s(0, "each", None), comm_s(0, "each", Some(0)));
    assert!((four0 - one0).abs() < 0.05 * one0, "{four0} vs {one0}");
}

#[test]
fn split_share_gives_no_gain_and_bad_values_are_named() {
    let four = comm_s(8, "split", None);
    let best_one = (0..4)
        .map(|t| comm_s(8, "split", Some(t)))
        .fold(f64::INFINITY, f64::min);
    eprintln!("8 long flows, split: 4 trees {four:.3} s, best single tree {best_one:.3} s");
    assert!(
        four > best_one,
        "split: 4 trees {four} s, best single {best_one} s"
    );
    let cfg = ScenarioConfig::from_pairs(&[
        ("jobs.0.workers", "8"),
        ("jobs.0.model", "vgg16"),
        ("jobs.0.algorithm", "panama"),
        ("jobs.0.tree", "9"),
    ])
    .unwrap();
    let err = run(&cfg, &mut |_| {}).map(|_| ()).unwrap_err();
    assert!(
        matches!(err, SimError::TreeOutside { tree: 9, trees: 4 }),
        "{err}"
    );
    assert_eq!(err.to_string(), "tree 9 asked for, but the job has 4 trees");
    let err = ScenarioConfig::from_pairs(&[("tree_share", "half")]).unwrap_err();
    assert_eq!(err.key(), Some("tree_share"));
    assert_eq!(
        err.to_string(),
        "tree_share: unknown variant `half`, expected `split` or `each`"
    );
}
