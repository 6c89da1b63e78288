//! Deterministic randomized test standing in for a fuzzer: millions of
//! mutated packets through the header parser and the switch's packet
//! handler. Nothing may panic, everything the switch emits must parse, and
//! nothing without the job's tag may be summed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use shoal_ina::control::{AdmitReq, CtrlMsg};
use shoal_ina::mac::PacketKey;
use shoal_ina::proto::{
    flags, slot_of, tag_ok, Header, Kind, WireOp, WireType, HEADER_LEN, TAGGED_LEN,
};
use shoal_ina::rng::Rng;
use shoal_ina::switch::core::{Sink, SwitchCore};
use shoal_ina::switch::{Metrics, SwitchConfig};

const KEY: PacketKey = PacketKey::from_bytes(*b"fuzz key");

fn template(rng: &mut Rng, job: u32, slots: u16) -> Vec<u8> {
    // Type, op and count follow from seq so that unmutated packets of the
    // three members agree and really aggregate.
    let seq = (rng.next_u64() % 64) as u32;
    let wire = [WireType::F32, WireType::I32, WireType::F16, WireType::Bf16][seq as usize % 4];
    let count = 1 + (seq * 37 % 300) as u16;
    let (slot, shadow) = slot_of(seq, slots);
    let h = Header {
        kind: if rng.chance(0.1) {
            Kind::Result
        } else {
            Kind::Data
        },
        flags: (rng.next_u64() as u8) & flags::ALL,
        wire,
        op: [WireOp::Sum, WireOp::Min, WireOp::Max][seq as usize / 4 % 3],
        exponent: rng.next_u64() as i8,
        job,
        tree: 0,
        member: (rng.next_u64() % 3) as u16,
        seq,
        slot,
        shadow,
        count,
        contributors: 1,
        cwnd_cap: u16::MAX,
    };
    let mut p = vec![0u8; HEADER_LEN + h.payload_len()];
    for b in p.iter_mut() {
        *b = rng.next_u64() as u8;
    }
    h.encode(&mut p, &KEY);
    p
}

fn mutate(rng: &mut Rng, p: &mut Vec<u8>) {
    for _ in 0..1 + rng.next_u64() % 4 {
        match rng.next_u64() % 6 {
            0 | 1 => {
                let i = rng.next_u64() as usize % HEADER_LEN.min(p.len().max(1));
                if i < p.len() {
                    p[i] = rng.next_u64() as u8;
                }
            }
            2 => {
                let i = rng.next_u64() as usize % p.len().max(1);
                if i < p.len() {
                    p[i] ^= 1 << (rng.next_u64() % 8);
                }
            }
            3 => p.truncate(rng.next_u64() as usize % (p.len() + 1)),
            4 => p.extend((0..rng.next_u64() % 8).map(|_| rng.next_u64() as u8)),
            _ => {}
        }
    }
}

#[test]
fn parser_never_panics_and_roundtrips() {
    let mut rng = Rng::new(0x5EED);
    let mut ok = 0usize;
    for _ in 0..2_000_000 {
        let mut p = template(&mut rng, 1, 16);
        mutate(&mut rng, &mut p);
        if let Ok((h, payload)) = Header::decode(&p) {
            ok += 1;
            assert_eq!(payload.len(), h.payload_len());
            let mut q = p.clone();
            h.encode(&mut q, &KEY);
            // Identity on the fields; the tag only where it was valid.
            assert_eq!(
                q[..TAGGED_LEN],
                p[..TAGGED_LEN],
                "decode/encode must keep every field"
            );
            assert_eq!(q == p, tag_ok(&p, &KEY));
        }
    }
    assert!(
        ok > 100_000,
        "mutations should keep some packets valid ({ok})"
    );
}

struct Capture(Vec<(Vec<u8>, SocketAddr)>);

impl Sink for Capture {
    fn send(&mut self, pkt: &[u8], to: SocketAddr) {
        self.0.push((pkt.to_vec(), to));
    }
}

#[test]
fn switch_core_survives_mutated_packets() {
    let metrics = Arc::new(Metrics::default());
    let cfg = SwitchConfig {
        memory: 1 << 20,
        ..SwitchConfig::loopback(shoal_bootstrap::auth::Key::from_material(b"fuzz"))
    };
    let mut core = SwitchCore::new(&cfg, 9800, metrics.clone());
    let req = AdmitReq {
        tree: 0,
        members: 3,
        slots: 16,
        wire_mask: 0x0F,
        partial_min: 0,
        deadline_us: 0,
        key: KEY,
        uplink: None,
    };
    let CtrlMsg::AdmitOk(ok) = core.control(CtrlMsg::Admit(req), 1) else {
        panic!("admit")
    };
    let mut rng = Rng::new(7);
    let mut out = Capture(Vec::new());
    let from: SocketAddr = "127.0.0.1:5000".parse().unwrap();
    let now = Instant::now();
    for _ in 0..1_000_000 {
        let mut p = template(&mut rng, ok.job, ok.slots);
        if rng.chance(0.7) {
            mutate(&mut rng, &mut p);
        }
        let forged = !tag_ok(&p, &KEY);
        let before = metrics.total(|c| &c.aggregations) + metrics.total(|c| &c.duplicates);
        out.0.clear();
        core.on_datagram(&p, from, now, &mut out);
        if forged {
            let after = metrics.total(|c| &c.aggregations) + metrics.total(|c| &c.duplicates);
            assert_eq!(before, after, "a packet without the tag was processed");
            assert!(out.0.is_empty());
        }
        for (pkt, _) in &out.0 {
            Header::decode(pkt).expect("the switch emits only well-formed packets");
        }
    }
    assert!(
        metrics.total(|c| &c.aggregations) > 0,
        "valid packets still aggregate"
    );
    assert!(metrics.total_drops() > 100_000);
}
