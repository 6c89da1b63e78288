//! End-to-end tests: thread workers, real UDP switches on loopback.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use half::{bf16, f16};
use shoal_bootstrap::auth::Key;
use shoal_ina::control::handshake::{self, Session};
use shoal_ina::control::{read_msg, write_msg, AdmitReq, CtrlMsg, ErrCode, CONTROL_VERSION};
use shoal_ina::mac::PacketKey;
use shoal_ina::proto::{slot_of, Header, Kind, WireOp, WireType, HEADER_LEN};
use shoal_ina::switch::{ControlLimits, DropReason, Refused};
use shoal_ina::{InaClient, InaDType, InaError, InaOp, LeafSpec, Partial, TreeSpec};

#[test]
fn flat_f32_sum_2_4_8_workers() {
    for n in [2, 4, 8] {
        let sw = switch_with(|_| {});
        run_ranks(
            n,
            flat(&sw),
            |_| {},
            move |rank, c| {
                for elems in [1, 359, 360, 361, 50_003] {
                    check_f32_sum(c, rank, n, elems);
                }
            },
        );
        assert_eq!(sw.metrics.total_drops(), 0);
        assert_eq!(
            sw.metrics.jobs_released.load(Relaxed),
            1,
            "close releases the job"
        );
    }
}

#[test]
fn avg_min_max() {
    let sw = switch_with(|_| {});
    let n = 4;
    run_ranks(
        n,
        flat(&sw),
        |_| {},
        move |rank, c| {
            let elems = 2000;
            let mine: Vec<f32> = (0..elems).map(|i| value(rank, i)).collect();
            for (op, f) in [
                (
                    InaOp::Avg,
                    (|v: &[f32]| v.iter().sum::<f32>() / 4.0) as fn(&[f32]) -> f32,
                ),
                (InaOp::Min, |v: &[f32]| {
                    v.iter().cloned().fold(f32::MAX, f32::min)
                }),
                (InaOp::Max, |v: &[f32]| {
                    v.iter().cloned().fold(f32::MIN, f32::max)
                }),
            ] {
                let mut buf = f32_bytes(&mine);
                c.allreduce(&mut buf, InaDType::F32, op).unwrap();
                for (i, g) in f32s(&buf).into_iter().enumerate() {
                    let all: Vec<f32> = (0..n).map(|r| value(r, i)).collect();
                    assert_eq!(g, f(&all), "{op:?} element {i}");
                }
            }
        },
    );
}

#[test]
fn f16_and_bf16_exact() {
    let sw = switch_with(|_| {});
    let n = 5;
    run_ranks(
        n,
        flat(&sw),
        |_| {},
        move |rank, c| {
            let elems = 3001;
            let v = |r: usize, i: usize| ((r * 13 + i * 7) % 64) as f32 * 0.5 - 16.0;
            let want: Vec<f32> = (0..elems).map(|i| (0..n).map(|r| v(r, i)).sum()).collect();
            let mut h: Vec<u8> = (0..elems)
                .flat_map(|i| f16::from_f32(v(rank, i)).to_le_bytes())
                .collect();
            c.allreduce(&mut h, InaDType::F16, InaOp::Sum).unwrap();
            let mut b: Vec<u8> = (0..elems)
                .flat_map(|i| bf16::from_f32(v(rank, i)).to_le_bytes())
                .collect();
            c.allreduce(&mut b, InaDType::Bf16, InaOp::Sum).unwrap();
            for i in 0..elems {
                let gh = f16::from_le_bytes([h[2 * i], h[2 * i + 1]]).to_f32();
                let gb = bf16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
                assert_eq!(gh, want[i]);
                assert_eq!(gb, bf16::from_f32(want[i]).to_f32());
            }
        },
    );
}

#[test]
fn int32_exponent_mode_and_plain_i32() {
    let sw = switch_with(|c| c.int_only = true);
    let n = 6;
    run_ranks(
        n,
        flat(&sw),
        |c| c.f32_as_int32 = true,
        move |rank, c| {
            let elems = 20_000;
            let v = |r: usize, i: usize| {
                ((r as f32 + 1.0) * (i as f32 * 0.37).sin()) * 10f32.powi((i % 7) as i32 - 3)
            };
            let mut buf = f32_bytes(&(0..elems).map(|i| v(rank, i)).collect::<Vec<_>>());
            c.allreduce(&mut buf, InaDType::F32, InaOp::Sum).unwrap();
            let got = f32s(&buf);
            for (blk, chunk) in got.chunks(360).enumerate() {
                let base = blk * 360;
                let max_abs = (0..chunk.len())
                    .flat_map(|j| (0..n).map(move |r| v(r, base + j).abs() as f64))
                    .fold(0f64, f64::max);
                // n roundings of at most one quantum each; quantum = max|x| * 2^(h-30+1)
                let tol = n as f64 * max_abs * 2f64.powi(3 - 29) + 1e-30;
                for (j, g) in chunk.iter().enumerate() {
                    let want: f64 = (0..n).map(|r| v(r, base + j) as f64).sum();
                    // plus the final rounding to f32
                    let tol = tol + want.abs() * f32::EPSILON as f64;
                    assert!(
                        (*g as f64 - want).abs() <= tol,
                        "element {}: {g} vs {want}",
                        base + j
                    );
                }
            }
            let mut ints: Vec<u8> = (0..1000i32)
                .flat_map(|i| (i * (rank as i32 + 1) - 500).to_le_bytes())
                .collect();
            c.allreduce(&mut ints, InaDType::I32, InaOp::Sum).unwrap();
            for (i, e) in ints.chunks_exact(4).enumerate() {
                let want: i32 = (0..n as i32).map(|r| i as i32 * (r + 1) - 500).sum();
                assert_eq!(i32::from_le_bytes([e[0], e[1], e[2], e[3]]), want);
            }
            assert!(matches!(
                c.allreduce(&mut [0u8; 8], InaDType::F16, InaOp::Sum),
                Err(InaError::Protocol(_))
            ));
        },
    );
}

#[test]
fn int_only_switch_refuses_float_jobs() {
    let sw = switch_with(|c| c.int_only = true);
    let store = MemStore::default();
    let cfg = config(0, 1, flat(&sw));
    match InaClient::join(&cfg, &store) {
        Err(InaError::Refused(r)) => assert!(r.contains("int32"), "{r}"),
        other => panic!("expected Refused, got {:?}", other.err()),
    }
}

#[test]
fn two_concurrent_jobs_on_one_switch() {
    let sw = Arc::new(switch_with(|_| {}));
    let jobs: Vec<_> = [3usize, 4]
        .into_iter()
        .map(|n| {
            let trees = flat(&sw);
            thread::spawn(move || {
                run_ranks(
                    n,
                    trees,
                    |_| {},
                    move |rank, c| {
                        for _ in 0..3 {
                            check_f32_sum(c, rank, n, 40_000);
                        }
                    },
                )
            })
        })
        .collect();
    for j in jobs {
        j.join().unwrap();
    }
    assert_eq!(sw.metrics.jobs_admitted.load(Relaxed), 2);
    assert_eq!(sw.metrics.total_drops(), 0);
}

#[test]
fn two_trees_on_two_switches() {
    let (a, b) = (switch_with(|_| {}), switch_with(|_| {}));
    let trees = vec![
        TreeSpec::flat(a.control_addr),
        TreeSpec::flat(b.control_addr),
    ];
    run_ranks(
        4,
        trees,
        |_| {},
        |rank, c| {
            assert_eq!(c.tree_count(), 2);
            for elems in [1, 361, 100_001] {
                check_f32_sum(c, rank, 4, elems);
            }
        },
    );
    let aggs = |s: &shoal_ina::switch::SwitchHandle| s.metrics.total(|c| &c.aggregations);
    assert!(
        aggs(&a) > 100 && aggs(&b) > 100,
        "{} {}",
        aggs(&a),
        aggs(&b)
    );
}

fn two_level(root_drop: f64, leaf_drop: f64) {
    let root = switch_with(|c| c.drop_rate = root_drop);
    let leaf = |seed| {
        let parent = root.data_addr;
        switch_with(move |c| {
            c.parent = Some(parent);
            c.drop_rate = leaf_drop;
            c.seed = seed;
        })
    };
    let (l1, l2) = (leaf(7), leaf(8));
    let tree = TreeSpec {
        root: root.control_addr,
        leaves: vec![
            LeafSpec {
                control: l1.control_addr,
                ranks: vec![0, 1],
            },
            LeafSpec {
                control: l2.control_addr,
                ranks: vec![2, 3, 4],
            },
        ],
    };
    run_ranks(
        5,
        vec![tree],
        |_| {},
        |rank, c| {
            for elems in [7, 100_000] {
                check_f32_sum(c, rank, 5, elems);
            }
            let mut buf = f32_bytes(&vec![1.0; 1000]);
            c.allreduce(&mut buf, InaDType::F32, InaOp::Avg).unwrap();
            assert!(
                f32s(&buf).iter().all(|v| *v == 1.0),
                "Avg divides by all 5 workers"
            );
        },
    );
    assert!(root.metrics.total(|c| &c.aggregations) > 100);
    assert!(l1.metrics.total(|c| &c.aggregations) > 100);
}

#[test]
fn two_level_switch_tree() {
    two_level(0.0, 0.0);
}

#[test]
fn two_level_switch_tree_with_loss() {
    two_level(0.02, 0.02);
}

fn lossy(rate: f64) {
    let sw = switch_with(|c| {
        c.drop_rate = rate;
        c.seed = 42;
    });
    run_ranks(
        4,
        flat(&sw),
        |_| {},
        |rank, c| {
            for elems in [1000, 120_000] {
                check_f32_sum(c, rank, 4, elems);
            }
        },
    );
    assert!(sw.metrics.drops(DropReason::Injected) > 0);
    assert!(sw.metrics.total(|c| &c.retransmissions) > 0);
    assert_eq!(
        sw.metrics.total_drops(),
        sw.metrics.drops(DropReason::Injected) + sw.metrics.drops(DropReason::Stale)
    );
}

#[test]
fn loss_1_percent() {
    lossy(0.01);
}

#[test]
fn loss_10_percent() {
    lossy(0.10);
}

#[test]
fn duplicates_and_reordering() {
    let sw = switch_with(|_| {});
    run_ranks(
        4,
        flat(&sw),
        |c| {
            c.faults.duplicate = 0.05;
            c.faults.reorder = 0.05;
            c.faults.seed = 1000 + c.rank as u64;
        },
        |rank, c| {
            for _ in 0..3 {
                check_f32_sum(c, rank, 4, 60_000);
            }
        },
    );
    assert!(sw.metrics.total(|c| &c.duplicates) + sw.metrics.total(|c| &c.results_resent) > 0);
}

#[test]
fn switch_killed_mid_allreduce_gives_switch_died() {
    let sw = switch_with(|_| {});
    let store = Arc::new(MemStore::default());
    let trees = flat(&sw);
    let ranks: Vec<_> = (0..2)
        .map(|rank| {
            let (store, trees) = (store.clone(), trees.clone());
            thread::spawn(move || {
                let mut cfg = config(rank, 2, trees);
                cfg.dead_timeout = Duration::from_secs(1);
                let mut c = InaClient::join(&cfg, &*store).unwrap();
                if rank == 1 {
                    thread::sleep(Duration::from_millis(400));
                }
                let mut buf = f32_bytes(&vec![1.0; 100_000]);
                let t = Instant::now();
                (
                    c.allreduce(&mut buf, InaDType::F32, InaOp::Sum),
                    t.elapsed(),
                )
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(150));
    let killed = Instant::now();
    sw.stop();
    for r in ranks {
        let (res, _) = r.join().unwrap();
        assert!(matches!(res, Err(InaError::SwitchDied(_))), "{res:?}");
    }
    assert!(
        killed.elapsed() < Duration::from_millis(2500),
        "{:?}",
        killed.elapsed()
    );
}

#[test]
fn admission_errors_are_distinguishable() {
    let free = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = MemStore::default();
    let cfg = config(0, 1, vec![TreeSpec::flat(free)]);
    assert!(matches!(
        InaClient::join(&cfg, &store),
        Err(InaError::Unreachable(_))
    ));

    let sw = switch_with(|c| c.max_jobs = 1);
    let store = MemStore::default();
    let cfg = config(0, 1, flat(&sw));
    let first = InaClient::join(&cfg, &store).unwrap();
    let store2 = MemStore::default();
    assert!(matches!(
        InaClient::join(&cfg, &store2),
        Err(InaError::Full(_))
    ));
    drop(first); // the lease closes: the job is released
    let t = Instant::now();
    while sw.metrics.jobs_released.load(Relaxed) == 0 && t.elapsed() < Duration::from_secs(2) {
        thread::sleep(Duration::from_millis(5));
    }
    assert!(InaClient::join(&cfg, &MemStore::default()).is_ok());
}

#[test]
fn partial_aggregation_by_fraction_and_deadline() {
    for partial in [
        Partial {
            fraction: 0.75,
            deadline: None,
        },
        Partial {
            fraction: 1.0,
            deadline: Some(Duration::from_millis(30)),
        },
    ] {
        let sw = switch_with(|_| {});
        run_ranks(
            4,
            flat(&sw),
            move |c| c.partial = Some(partial),
            |rank, c| {
                if rank == 3 {
                    return; // the straggler never contributes
                }
                let elems = 2000;
                let mut buf = f32_bytes(&(0..elems).map(|i| value(rank, i)).collect::<Vec<_>>());
                c.allreduce(&mut buf, InaDType::F32, InaOp::Avg).unwrap();
                for (i, g) in f32s(&buf).into_iter().enumerate() {
                    let s: f32 = (0..3).map(|r| value(r, i)).sum();
                    assert_eq!(g, s / 3.0, "element {i}");
                }
            },
        );
        assert!(sw.metrics.total(|c| &c.partial_aggregations) > 0);
    }
}

/// A control connection authenticated with `secret`, as any tenant of the
/// switch could open.
fn tenant(ctl: SocketAddr, secret: &Key) -> Result<(TcpStream, Session), InaError> {
    let mut s = TcpStream::connect(ctl).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    handshake::client(&mut s, secret, deadline).map(|session| (s, session))
}

/// Admits a job with packet key `key` on an authenticated connection.
fn admit_on(s: &mut TcpStream, session: &mut Session, members: u16, key: PacketKey) -> CtrlMsg {
    let mut req = AdmitReq {
        tree: 0,
        members,
        slots: 16,
        wire_mask: 1,
        partial_min: 0,
        deadline_us: 0,
        key,
        uplink: None,
    };
    session.crypt_admit(&mut req);
    write_msg(s, &CtrlMsg::Admit(req)).unwrap();
    read_msg(s).unwrap()
}

/// A tenant's own job: (its lease, id, slots).
fn admit_raw(ctl: SocketAddr, members: u16, key: PacketKey) -> (TcpStream, u32, u16) {
    let (mut s, mut session) = tenant(ctl, &switch_secret()).unwrap();
    match admit_on(&mut s, &mut session, members, key) {
        CtrlMsg::AdmitOk(ok) => (s, ok.job, ok.slots),
        other => panic!("{other:?}"),
    }
}

fn data_packet(
    job: u32,
    key: &PacketKey,
    member: u16,
    seq: u32,
    slots: u16,
    count: u16,
) -> Vec<u8> {
    let (slot, shadow) = slot_of(seq, slots);
    let h = Header {
        kind: Kind::Data,
        flags: 0,
        wire: WireType::F32,
        op: WireOp::Sum,
        exponent: 0,
        job,
        tree: 0,
        member,
        seq,
        slot,
        shadow,
        count,
        contributors: 1,
        cwnd_cap: u16::MAX,
    };
    let mut p = vec![0x41u8; HEADER_LEN + count as usize * 4];
    h.encode(&mut p, key);
    p
}

/// The same packet in the layout of protocol version 1, with a token.
fn version_1(job: u32, token: u32, member: u16, seq: u32, slots: u16) -> Vec<u8> {
    let (slot, shadow) = slot_of(seq, slots);
    let mut p = vec![0x41u8; 32 + 40];
    p[0..2].copy_from_slice(&0x5348u16.to_be_bytes());
    p[2] = 1;
    p[3..8].fill(0);
    p[8..12].copy_from_slice(&job.to_be_bytes());
    p[12..16].copy_from_slice(&token.to_be_bytes());
    p[16..18].fill(0);
    p[18..20].copy_from_slice(&member.to_be_bytes());
    p[20..24].copy_from_slice(&seq.to_be_bytes());
    p[24..26].copy_from_slice(&(slot | if shadow { 0x8000 } else { 0 }).to_be_bytes());
    p[26..28].copy_from_slice(&10u16.to_be_bytes());
    p[28..32].copy_from_slice(&[0, 1, 0xFF, 0xFF]);
    p
}

fn bad_slot(mut p: Vec<u8>, key: &PacketKey) -> Vec<u8> {
    p[20] ^= 0x80;
    shoal_ina::proto::seal(&mut p, key);
    p
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// A stranger knows the real job's id (switch job ids are sequential, and
/// the metrics name them) and has a job of its own on the switch: nothing it
/// sends reaches the real job's sums, and every such packet is counted.
#[test]
fn garbage_and_forged_packets_are_dropped_and_counted() {
    // One data-plane thread: every forged packet reaches the real job's
    // thread through the one data port (each thread runs the same checks).
    let sw = Arc::new(switch_with(|c| {
        c.metrics = Some("127.0.0.1:0".parse().unwrap());
        c.threads = 1;
    }));
    let own_key = PacketKey::from_bytes(*b"attacker");
    let (_lease, own, slots) = admit_raw(sw.control_addr, 2, own_key);
    let real = own + 1; // the next admission
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (sw2, done2) = (sw.clone(), done.clone());
    let attacker = thread::spawn(move || {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s2 = UdpSocket::bind("127.0.0.1:0").unwrap();
        let guess = PacketKey::from_bytes(*b"guessed!");
        wait_until("the real job", || {
            sw2.metrics.jobs_admitted.load(Relaxed) >= 2
        });
        let mut i = 0u32;
        while !done2.load(Relaxed) {
            let mut pkts = vec![
                vec![0xAB; 64],                                                  // malformed
                data_packet(real, &own_key, 0, i, 256, 10), // the real job, the stranger's key
                data_packet(real, &guess, (i % 4) as u16, i, 256, 10), // the real job, a guessed key
                data_packet(9999, &own_key, 0, i, slots, 10),          // unknown job
                data_packet(own, &own_key, 7, i, slots, 10),           // not a member
                bad_slot(data_packet(own, &own_key, 1, i, slots, 10), &own_key), // wrong shadow copy
                data_packet(own, &own_key, 1, i, slots, 400), // over the payload budget
                version_1(real, 0xBAD, 0, i, 256),            // the old format with a token
                data_packet(own, &own_key, 0, i, slots, 10),  // binds member 0 to `s`
            ];
            let mut tampered = data_packet(real, &guess, 0, i, 256, 10);
            tampered[14] ^= 1; // another member, same tag
            pkts.push(tampered);
            for p in &pkts {
                s.send_to(p, sw2.data_addr).unwrap();
            }
            // Member 0 of the stranger's own job is bound to `s`: the same
            // packet from another address cannot claim it.
            s2.send_to(&data_packet(own, &own_key, 0, i, slots, 10), sw2.data_addr)
                .unwrap();
            i += 1;
            thread::sleep(Duration::from_micros(200));
        }
    });
    run_ranks(
        4,
        flat(&sw),
        |_| {},
        |rank, c| {
            for _ in 0..10 {
                check_f32_sum(c, rank, 4, 50_000);
                thread::sleep(Duration::from_millis(20)); // the attack goes on between calls too
            }
        },
    );
    done.store(true, Relaxed);
    attacker.join().unwrap();
    let m = &sw.metrics;
    for r in [
        DropReason::Malformed,
        DropReason::Version,
        DropReason::BadTag,
        DropReason::UnknownJob,
        DropReason::BadMember,
        DropReason::BadSlot,
        DropReason::BadCount,
        DropReason::BadSource,
    ] {
        assert!(m.drops(r) >= 20, "{:?}: {}", r, m.drops(r));
    }
    let mut http = TcpStream::connect(sw.metrics_addr.unwrap()).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    http.read_to_string(&mut text).unwrap();
    assert!(
        text.contains("shoal_switch_drops_total{reason=\"bad_tag\"}"),
        "{text}"
    );
    assert!(text.contains("shoal_switch_control_refused_total{reason=\"unauthorized\"} 0"));
    assert!(text.contains("shoal_switch_aggregations_total"));
}

/// Only the connection that admitted a job may release it: not a stranger
/// without the switch secret, not another tenant with it.
#[test]
fn strangers_and_other_tenants_cannot_release_a_job() {
    let sw = switch_with(|_| {});
    let ctl = sw.control_addr;
    run_ranks(
        3,
        flat(&sw),
        |_| {},
        move |rank, c| {
            check_f32_sum(c, rank, 3, 10_000);
            if rank == 0 {
                // The only job: switch job ids start at 1.
                let job: u32 = 1;
                // Protocol version 1's RELEASE: refused before the handshake.
                let mut s = TcpStream::connect(ctl).unwrap();
                let mut v1 = vec![0, 0, 0, 9, 3];
                v1.extend(job.to_be_bytes());
                v1.extend(0x1234u32.to_be_bytes());
                s.write_all(&v1).unwrap();
                match read_msg(&mut s) {
                    Ok(CtrlMsg::Error { code, .. }) => assert_eq!(code, ErrCode::Protocol),
                    other => panic!("{other:?}"),
                }
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap(); // the switch closed it (FIN)
                                                   // A wrong secret does not get through the handshake (the
                                                   // bytes it sees: a_wrong_secret_is_refused_before_the_switch_proves_itself).
                let wrong = Key::from_material(b"not the switch secret");
                assert!(matches!(
                    tenant(ctl, &wrong),
                    Err(InaError::Unauthenticated(_))
                ));
                // Another tenant cannot release a job it does not lease.
                let (mut s, _) = tenant(ctl, &switch_secret()).unwrap();
                write_msg(&mut s, &CtrlMsg::Release { job }).unwrap();
                match read_msg(&mut s).unwrap() {
                    CtrlMsg::Error { code, .. } => assert_eq!(code, ErrCode::UnknownJob),
                    other => panic!("{other:?}"),
                }
            }
            check_f32_sum(c, rank, 3, 10_000);
        },
    );
    assert_eq!(sw.metrics.jobs_released.load(Relaxed), 1);
    assert!(sw.metrics.refusals(Refused::Unauthorized) >= 1);
}

#[test]
fn a_job_and_a_switch_with_different_secrets_do_not_work_together() {
    let sw = switch_with(|_| {});
    let mut cfg = config(0, 1, flat(&sw));
    cfg.keys.switch = Key::from_material(b"another switch's secret");
    match InaClient::join(&cfg, &MemStore::default()) {
        Err(InaError::Unauthenticated(r)) => assert!(r.contains("SHOAL_SWITCH_SECRET"), "{r}"),
        other => panic!("{:?}", other.err()),
    }
    assert_eq!(sw.metrics.jobs_admitted.load(Relaxed), 0);
}

/// One control frame's body, read raw so that nothing about it is assumed.
fn raw_frame(s: &mut TcpStream) -> Vec<u8> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).unwrap();
    body
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A stranger's `HELLO` with its chosen `nonce`: the connection and the
/// body of the switch's reply.
fn stranger_hello(ctl: SocketAddr, nonce: [u8; 32]) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(ctl).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let version = CONTROL_VERSION;
    write_msg(&mut s, &CtrlMsg::Hello { version, nonce }).unwrap();
    let reply = raw_frame(&mut s);
    (s, reply)
}

/// A stranger must learn nothing that it could test guesses of the switch
/// secret against offline: switches with different secrets answer the same
/// `HELLO` with a `CHALLENGE` that is a fresh nonce and nothing else, no MAC
/// over the stranger's nonce.
#[test]
fn a_strangers_hello_gets_nothing_derived_from_the_switch_secret() {
    let nonce = [0x5a; 32];
    let mut replies = Vec::new();
    for secret in [
        switch_secret(),
        Key::from_material(b"another switch's secret"),
    ] {
        let sw = switch_with(|c| c.secret = secret.clone());
        for _ in 0..2 {
            let (_, reply) = stranger_hello(sw.control_addr, nonce);
            for role in ["shoal ina switch", "shoal ina client"] {
                let mac = secret.prove(role, &nonce);
                assert!(!contains(&reply, &mac), "a MAC over the stranger's nonce");
            }
            replies.push(reply);
        }
    }
    for r in &replies {
        assert_eq!(
            (r[0], r.len()),
            (7, 1 + 32),
            "CHALLENGE, nonce and no more: {r:?}"
        );
    }
    let nonces: std::collections::HashSet<&[u8]> = replies.iter().map(|r| &r[1..]).collect();
    assert_eq!(nonces.len(), replies.len(), "a switch nonce repeats");
}

/// The client proves first: one with a wrong secret is refused without ever
/// receiving the switch's proof over its nonce.
#[test]
fn a_wrong_secret_is_refused_before_the_switch_proves_itself() {
    let sw = switch_with(|_| {});
    let nonce = [0x3c; 32];
    let (mut s, challenge) = stranger_hello(sw.control_addr, nonce);
    let theirs: [u8; 32] = challenge[1..33].try_into().unwrap();
    let proof = Key::from_material(b"not the switch secret").prove("shoal ina client", &theirs);
    write_msg(&mut s, &CtrlMsg::Proof { proof }).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap(); // the refusal, then the switch's FIN
    let switch_proof = switch_secret().prove("shoal ina switch", &nonce);
    assert!(
        !contains(&challenge, &switch_proof) && !contains(&rest, &switch_proof),
        "the switch proved itself to a client that did not"
    );
    match read_msg(&mut &rest[..]) {
        Ok(CtrlMsg::Error { code, .. }) => assert_eq!(code, ErrCode::Unauthorized),
        other => panic!("{other:?}"),
    }
    assert_eq!(sw.metrics.refusals(Refused::Unauthorized), 1);
}

#[test]
fn control_connections_are_bounded_per_client_and_in_time() {
    let sw = switch_with(|c| {
        c.limits = ControlLimits {
            handshake_timeout: Duration::from_millis(300),
            idle_timeout: Duration::from_millis(300),
            max_per_client: 2,
            max_pending: 4,
        }
    });
    let ctl = sw.control_addr;
    // Strangers that never authenticate: the oldest make room for newcomers,
    // the rest are closed at the handshake timeout.
    let idle: Vec<TcpStream> = (0..10).map(|_| TcpStream::connect(ctl).unwrap()).collect();
    wait_until("evictions", || sw.metrics.refusals(Refused::Evicted) >= 6);
    run_ranks(
        2,
        flat(&sw),
        |_| {},
        |rank, c| check_f32_sum(c, rank, 2, 1000),
    );
    for mut s in idle {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest); // EOF (or reset after eviction), never a hang
    }
    // An authenticated connection without a job is closed when idle.
    let (mut s, _) = tenant(ctl, &switch_secret()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    match read_msg(&mut s) {
        Ok(CtrlMsg::Error { code, reason }) => {
            assert_eq!(code, ErrCode::Busy);
            assert!(reason.contains("idle"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    drop(s);
    // Two leases per client here; the third is refused until one closes.
    let key = PacketKey::from_bytes(*b"tenantky");
    let a = admit_raw(ctl, 1, key);
    let _b = admit_raw(ctl, 1, key);
    match tenant(ctl, &switch_secret()) {
        Err(InaError::Full(r)) => assert!(r.contains("--max-conns-per-client"), "{r}"),
        other => panic!("{:?}", other.err()),
    }
    drop(a);
    wait_until("the lease to close", || {
        sw.metrics.jobs_released.load(Relaxed) >= 2
    });
    let _c = admit_raw(ctl, 1, key);
    assert!(sw.metrics.refusals(Refused::Timeout) >= 2);
    assert!(sw.metrics.refusals(Refused::Busy) >= 1);
}

#[test]
fn the_peer_check_ends_a_wait_for_a_dead_rank() {
    let sw = switch_with(|_| {});
    let dead = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let results = run_ranks(
        2,
        flat(&sw),
        |_| {},
        move |rank, c| {
            if rank == 1 {
                thread::sleep(Duration::from_millis(300));
                dead.store(true, Relaxed); // dies without ever contributing
                return None;
            }
            let mut buf = f32_bytes(&vec![1.0; 100_000]);
            let t = Instant::now();
            let check = || {
                if dead.load(Relaxed) {
                    Err("rank 1 died".into())
                } else {
                    Ok(())
                }
            };
            let res = c.allreduce_checked(&mut buf, InaDType::F32, InaOp::Sum, &check);
            Some((res, t.elapsed()))
        },
    );
    let (res, took) = results[0].clone().unwrap();
    assert!(
        matches!(res, Err(InaError::PeerFailed(ref r)) if r.contains("rank 1")),
        "{res:?}"
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
}
