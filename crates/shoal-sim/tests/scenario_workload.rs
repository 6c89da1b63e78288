//! Workloads: CDF sampling, Poisson load, models, placement.

use shoal_sim::workload::background::TrafficError;
use shoal_sim::workload::cdf::{CdfError, TableProblem};
use shoal_sim::workload::models::{MixError, ModelMix};
use shoal_sim::workload::{models, place_close, FlowSizeCdf, PoissonTraffic, Rng};
use shoal_sim::SimError;

fn sample_mean(cdf: &FlowSizeCdf, n: usize, seed: u64) -> f64 {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| cdf.sample(&mut rng) as f64).sum::<f64>() / n as f64
}

#[test]
fn cdf_means_are_the_tables_means() {
    // Hand-computed from the tables (packets x 1460 B): web search 1141.0
    // packets, data mining 5116.6 packets.
    let web = FlowSizeCdf::web_search();
    let mining = FlowSizeCdf::data_mining();
    assert!(
        (web.mean_bytes() / 1460.0 - 1141.0).abs() < 1.0,
        "{}",
        web.mean_bytes() / 1460.0
    );
    assert!(
        (mining.mean_bytes() / 1460.0 - 5116.6).abs() < 1.0,
        "{}",
        mining.mean_bytes() / 1460.0
    );
    // Sampling matches within 3% (heavy tails: many samples).
    for cdf in [&web, &mining] {
        let mean = sample_mean(cdf, 2_000_000, 7);
        let err = (mean - cdf.mean_bytes()).abs() / cdf.mean_bytes();
        assert!(
            err < 0.03,
            "{}: sampled mean {mean} vs {} ({err})",
            cdf.name(),
            cdf.mean_bytes()
        );
    }
}

#[test]
fn cdf_sampling_follows_the_table_quantiles() {
    let web = FlowSizeCdf::web_search();
    let mut rng = Rng::new(3);
    let n = 200_000;
    let sizes: Vec<u64> = (0..n).map(|_| web.sample(&mut rng)).collect();
    // P[size <= 53 packets] = 0.53 in the table.
    let below = sizes.iter().filter(|&&s| s <= 53 * 1460).count() as f64 / n as f64;
    assert!((below - 0.53).abs() < 0.01, "{below}");
    assert!(sizes
        .iter()
        .all(|&s| (6 * 1460..=20000 * 1460).contains(&s)));
}

#[test]
fn bad_cdf_tables_are_rejected() {
    let err = FlowSizeCdf::new("x", vec![(10.0, 0.0), (5.0, 1.0)]).unwrap_err();
    assert_eq!(
        err,
        CdfError::BadTable {
            name: "x".into(),
            problem: TableProblem::Decreasing((10.0, 0.0), (5.0, 1.0))
        }
    );
    assert_eq!(
        err.to_string(),
        "flow-size CDF x: points must be non-decreasing, got (10, 0) then (5, 1)"
    );
    let err = FlowSizeCdf::new("x", vec![(10.0, 0.0), (20.0, 0.9)]).unwrap_err();
    assert!(matches!(
        err,
        CdfError::BadTable {
            problem: TableProblem::OutOfRange,
            ..
        }
    ));
    let err = FlowSizeCdf::by_name("nope").unwrap_err();
    assert_eq!(err, CdfError::UnknownDistribution("nope".into()));
    assert_eq!(
        err.to_string(),
        "unknown flow-size distribution \"nope\" (known: websearch, datamining)"
    );
}

#[test]
fn poisson_traffic_offers_the_target_load() {
    let hosts = 128;
    let bps = 10e9;
    for (load, cdf) in [
        (0.2, FlowSizeCdf::web_search()),
        (0.5, FlowSizeCdf::data_mining()),
    ] {
        let traffic = PoissonTraffic::new(hosts, bps, load, cdf).unwrap();
        let duration = 4.0;
        let flows = traffic.generate(duration, &mut Rng::new(11));
        let bytes: f64 = flows.iter().map(|f| f.bytes as f64).sum();
        let offered = bytes * 8.0 / (duration * hosts as f64 * bps);
        assert!(
            (offered - load).abs() / load < 0.05,
            "offered {offered} for target {load}"
        );
        // Arrival count is Poisson: within 3 sigma of the mean.
        let expected = traffic.arrivals_per_s() * duration;
        assert!((flows.len() as f64 - expected).abs() < 3.0 * expected.sqrt() + 1.0);
        assert!(flows
            .iter()
            .all(|f| f.src != f.dst && f.src < hosts && f.dst < hosts));
        assert!(flows.windows(2).all(|w| w[0].start_s <= w[1].start_s));
    }
    let err = PoissonTraffic::new(16, 10e9, 1.5, FlowSizeCdf::web_search()).unwrap_err();
    assert_eq!(err, TrafficError::Load(1.5));
    assert_eq!(
        err.to_string(),
        "background load must be in (0, 1], got 1.5"
    );
}

#[test]
fn models_have_fp32_gradients_and_paper_range_ratios() {
    let vgg = models::by_name("VGG16").unwrap();
    assert_eq!(vgg.gradient_bytes(), 138_357_544 * 4);
    for m in models::MODELS {
        // Communication / (communication + compute) at 10 Gb/s: the paper's
        // Fig. 1a puts the P100 values in 0.11 .. 0.70.
        let comm = m.gradient_bytes() as f64 * 8.0 / 10e9;
        let ratio = comm / (comm + m.compute_s);
        assert!((0.10..=0.70).contains(&ratio), "{}: {ratio}", m.name);
    }
    let err = models::by_name("gpt").unwrap_err();
    assert_eq!(err, models::UnknownModel("gpt".into()));
    assert!(err
        .to_string()
        .starts_with("unknown model \"gpt\" (known: vgg16, "));
    let mut rng = Rng::new(1);
    assert!((0..1000)
        .map(|_| models::draw_workers(&mut rng))
        .all(|w| (16..=96).contains(&w)));
}

/// The share of each of `models::MODELS` in `n` draws from `mix`.
fn drawn_shares(mix: &ModelMix, n: usize) -> Vec<f64> {
    let mut rng = Rng::new(11);
    let mut counts = [0usize; models::MODELS.len()];
    for _ in 0..n {
        let model = mix.draw(&mut rng);
        counts[models::MODELS.iter().position(|m| *m == model).unwrap()] += 1;
    }
    counts.iter().map(|&c| c as f64 / n as f64).collect()
}

#[test]
fn model_weights_set_the_draw() {
    // vgg16 : alexnet : resnet152 = 3 : 1 : 0.5, the others not named (0).
    let mix = ModelMix::weighted([("vgg16", 3.0), ("AlexNet", 1.0), ("resnet152", 0.5)]).unwrap();
    let want = [3.0 / 4.5, 1.0 / 4.5, 0.5 / 4.5, 0.0, 0.0, 0.0];
    // 200 000 draws: a share's standard error is under 0.0011.
    for (got, want) in drawn_shares(&mix, 200_000).iter().zip(want) {
        assert!((got - want).abs() < 0.005, "{got} vs {want}");
    }
    // The default draws each model alike, and naming equal weights is the default.
    for got in drawn_shares(&ModelMix::Equal, 200_000) {
        assert!((got - 1.0 / 6.0).abs() < 0.005, "{got}");
    }
    let equal = models::MODELS.map(|m| (m.name, 2.0));
    assert_eq!(ModelMix::weighted(equal).unwrap(), ModelMix::Equal);
    // Refused: an unknown model, a negative weight, a model twice, nothing to draw.
    let err = ModelMix::weighted([("gpt", 1.0)]).unwrap_err();
    assert_eq!(err, MixError::Unknown(models::UnknownModel("gpt".into())));
    let err = ModelMix::weighted([("vgg16", -1.0)]).unwrap_err();
    assert_eq!(err.to_string(), "vgg16: weight -1 must be a number >= 0");
    let err = ModelMix::weighted([("vgg16", 1.0), ("VGG16", 1.0)]).unwrap_err();
    assert_eq!(err, MixError::Twice("vgg16"));
    assert_eq!(
        ModelMix::weighted([("alexnet", 0.0)]).unwrap_err(),
        MixError::AllZero
    );
}

#[test]
fn placement_is_as_close_as_possible() {
    let mut free = vec![true; 64];
    // Occupy hosts 3 and 20: a 16-worker job should take 4..=19 (span 15).
    free[3] = false;
    free[20] = false;
    let job = place_close(&mut free, 16).unwrap();
    assert_eq!(job, (4..20).collect::<Vec<u32>>());
    assert!(job.iter().all(|&h| !free[h as usize]));
    // Next job: the 43 free ids left are 0..=2 and 21..=63; 40 fit in 21..=60.
    let next = place_close(&mut free, 40).unwrap();
    assert_eq!(next, (21..61).collect::<Vec<u32>>());
    let err = place_close(&mut free, 10).unwrap_err();
    assert!(matches!(
        err,
        SimError::TooFewFree {
            workers: 10,
            free: 6,
            ..
        }
    ));
    assert!(err.to_string().contains("only 6"), "{err}");
}
