//! Test helpers: an in-memory store, switches on loopback, thread workers.
#![allow(dead_code)]

use std::sync::Arc;
use std::thread;

use shoal_bootstrap::auth::Key;
pub use shoal_bootstrap::store::MemStore;
use shoal_ina::switch::{self, SwitchConfig, SwitchHandle};
use shoal_ina::{InaClient, InaConfig, InaKeys, TreeSpec};

/// The secret the test switches run with.
pub fn switch_secret() -> Key {
    Key::from_material(b"the test switch secret")
}

/// A job's keys, as a rank derives them from its job secret.
pub fn keys() -> InaKeys {
    InaKeys {
        job: Key::from_material(b"the test job secret").derive("ina/test"),
        switch: switch_secret(),
    }
}

/// A rank's config for a job on `trees`.
pub fn config(rank: usize, world: usize, trees: Vec<TreeSpec>) -> InaConfig {
    InaConfig::new(rank, world, trees, keys())
}

pub fn switch_with(f: impl FnOnce(&mut SwitchConfig)) -> SwitchHandle {
    let mut cfg = SwitchConfig::loopback(switch_secret());
    cfg.memory = 16 << 20;
    f(&mut cfg);
    switch::spawn(cfg).expect("switch starts")
}

pub fn flat(sw: &SwitchHandle) -> Vec<TreeSpec> {
    vec![TreeSpec::flat(sw.control_addr)]
}

/// Runs `body` on `n` thread ranks of one job; returns each rank's output.
pub fn run_ranks<R: Send + 'static>(
    n: usize,
    trees: Vec<TreeSpec>,
    tune: impl Fn(&mut InaConfig) + Send + Sync + 'static,
    body: impl Fn(usize, &mut InaClient) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let store = Arc::new(MemStore::default());
    let (tune, body) = (Arc::new(tune), Arc::new(body));
    let handles: Vec<_> = (0..n)
        .map(|rank| {
            let (store, trees, tune, body) =
                (store.clone(), trees.clone(), tune.clone(), body.clone());
            thread::spawn(move || {
                let mut cfg = config(rank, n, trees);
                tune(&mut cfg);
                let mut c = InaClient::join(&cfg, &*store).expect("join");
                let r = body(rank, &mut c);
                c.close(&*store).expect("close");
                r
            })
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("rank thread"))
        .collect()
}

/// Exactly representable test data: multiples of 0.25 in [-64, 64), so every
/// partial sum of up to 8 ranks is exact in f32 and in the order-free reference.
pub fn value(rank: usize, i: usize) -> f32 {
    (((rank * 7919 + i * 31 + (i >> 7)) % 512) as f32 - 256.0) * 0.25
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|e| f32::from_le_bytes([e[0], e[1], e[2], e[3]]))
        .collect()
}

/// Reference sum over ranks, in f64.
pub fn ref_sum(n: usize, elems: usize) -> Vec<f64> {
    (0..elems)
        .map(|i| (0..n).map(|r| value(r, i) as f64).sum())
        .collect()
}

/// One f32 sum allreduce of `elems` values per rank; asserts exactness.
pub fn check_f32_sum(c: &mut InaClient, rank: usize, n: usize, elems: usize) {
    let mut buf = f32_bytes(&(0..elems).map(|i| value(rank, i)).collect::<Vec<_>>());
    c.allreduce(&mut buf, shoal_ina::InaDType::F32, shoal_ina::InaOp::Sum)
        .expect("allreduce");
    let want = ref_sum(n, elems);
    let got = f32s(&buf);
    for i in 0..elems {
        assert_eq!(got[i] as f64, want[i], "rank {rank} element {i}");
    }
}
