//! The agreement at the first use of a call shape on a communicator: before
//! the call runs, every rank contributes a record of what it is about to
//! run (the shape, the algorithm chosen, and for a registered algorithm a
//! digest of its definition), and all compare the gathered records.
//!
//! A message names an algorithm only by a hash of its name, so without this
//! ranks that register different functions under one name, or choose
//! different algorithms whose messages happen to fit (other `SHOAL_ALGO`,
//! tuning tables or registered costs), would return wrong results with no
//! error. Built-in algorithms contribute no digest: the build agreement at
//! init ([`super::version`]) covers them.
//!
//! The communicator keeps the agreed keys in a bounded LRU of its own (all
//! members make the same calls in the same order, so their LRUs evolve
//! alike); see `Communicator::first_use` for where it runs.

use shoal_plan::{CallShape, Collective};

use super::{groups, ranks_text};
use crate::error::{Error, ErrorKind, Result};
use crate::fnv::Fnv64;
use crate::registry::{HIERARCHICAL_INA, HIERARCHICAL_INA_ALGO_ID, INA, INA_ALGO_ID};

/// Bytes of the algorithm's name in a record (a longer one is cut).
const NAME_BYTES: usize = 40;
/// Bytes of one rank's record.
pub const RECORD: usize = 24 + NAME_BYTES;

/// What one rank is about to run at the first use of a call shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// [`shape_digest`] of the call's shape.
    pub shape: u64,
    /// Who runs it, as in the call's signature: the plan's algorithm, or
    /// the switch's pseudo-algorithm.
    pub runs: u32,
    /// The host algorithm's id: the plan that runs (or the switch's fallback).
    pub host: u32,
    /// A registered host algorithm's definition digest
    /// (`PlanSource::digest`); 0 for a built-in one.
    pub definition: u64,
    /// The host algorithm's name (so every rank can name it, registered
    /// there or not).
    pub name: &'a str,
}

impl<'a> Record<'a> {
    pub fn encode(&self) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[..8].copy_from_slice(&self.shape.to_le_bytes());
        r[8..12].copy_from_slice(&self.runs.to_le_bytes());
        r[12..16].copy_from_slice(&self.host.to_le_bytes());
        r[16..24].copy_from_slice(&self.definition.to_le_bytes());
        let mut n = self.name.len().min(NAME_BYTES);
        while !self.name.is_char_boundary(n) {
            n -= 1;
        }
        r[24..24 + n].copy_from_slice(&self.name.as_bytes()[..n]);
        r
    }

    fn decode(r: &'a [u8]) -> Record<'a> {
        let u64_at = |i: usize| u64::from_le_bytes(r[i..i + 8].try_into().unwrap());
        let u32_at = |i: usize| u32::from_le_bytes(r[i..i + 4].try_into().unwrap());
        let name = &r[24..RECORD];
        let end = name.iter().position(|&b| b == 0).unwrap_or(NAME_BYTES);
        Record {
            shape: u64_at(0),
            runs: u32_at(8),
            host: u32_at(12),
            definition: u64_at(16),
            name: std::str::from_utf8(&name[..end]).unwrap_or("?"),
        }
    }

    /// The algorithm that runs, in words: `'ring'`, or `'ina' (falling back to 'ring')`.
    fn running(&self) -> String {
        let switch = match self.runs {
            id if id == self.host => return format!("'{}'", self.name),
            INA_ALGO_ID => INA,
            HIERARCHICAL_INA_ALGO_ID => HIERARCHICAL_INA,
            _ => "?",
        };
        format!("'{switch}' (falling back to '{}')", self.name)
    }
}

/// A hash of a call shape that every build and rank computes alike.
pub fn shape_digest(shape: &CallShape) -> u64 {
    let mut h = Fnv64::new();
    h.write(shape.collective.name().as_bytes());
    for v in [
        shape.world,
        shape.count,
        shape.root,
        shape.chunk,
        shape.ranks_per_host,
    ] {
        h.write(&(v as u64).to_le_bytes());
    }
    if let Some(counts) = &shape.counts {
        h.write(&(counts.len() as u64).to_le_bytes());
        for &c in counts.iter() {
            h.write(&(c as u64).to_le_bytes());
        }
    }
    h.finish()
}

/// The verdict on every rank's record (`all`, in group order; `members`
/// their global ranks) for the call described by `call` (its arguments,
/// which the ranks' signatures already showed to be equal): `Ok` when all
/// records are equal, else a mismatch that names the ranks of each side,
/// the same on every rank.
pub fn verdict(all: &[u8], members: &[usize], collective: Collective, call: &str) -> Result<()> {
    if groups(all, RECORD, |r| r).len() == 1 {
        return Ok(());
    }
    let head = format!("{call} at its first use on this communicator");
    let mismatch = |text: String| Err(Error::new(ErrorKind::Mismatch, text));
    let shapes = groups(all, RECORD, |r| Record::decode(r).shape);
    if shapes.len() > 1 {
        return mismatch(format!(
            "mismatched collectives: {head}: the ranks' call shapes differ \
             (do their SHOAL_CHUNK_BYTES differ?): {}",
            sides(&shapes, members, "")
        ));
    }
    let choices = groups(all, RECORD, |r| {
        let rec = Record::decode(r);
        (rec.runs, rec.host, rec.name)
    });
    if choices.len() > 1 {
        let each: Vec<String> = choices
            .iter()
            .map(|(_, ranks)| {
                let rec = Record::decode(&all[ranks[0] * RECORD..(ranks[0] + 1) * RECORD]);
                format!("{} run {}", ranks_text(ranks, members), rec.running())
            })
            .collect();
        return mismatch(format!(
            "mismatched collectives: {head}: the ranks chose different algorithms: {} \
             (do their algorithm= arguments, SHOAL_ALGO, tuning tables or registered algorithms differ?)",
            each.join(", ")
        ));
    }
    let name = Record::decode(&all[..RECORD]).name;
    let definitions = groups(all, RECORD, |r| Record::decode(r).definition);
    mismatch(format!(
        "mismatched algorithm definitions: {collective} algorithm '{name}' differs between \
         ranks: {} (compared at the first use of {call} on this communicator; every rank must \
         register the same function)",
        sides(&definitions, members, " define it")
    ))
}

/// `ranks [0, 2]{verb} one way, ranks [1] another, ...`.
fn sides<K>(groups: &[(K, Vec<usize>)], members: &[usize], verb: &str) -> String {
    groups
        .iter()
        .enumerate()
        .map(|(i, (_, ranks))| {
            let who = ranks_text(ranks, members);
            match i {
                0 => format!("{who}{verb} one way"),
                _ => format!("{who} another"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = "allreduce(count=12, dtype=float32, op=sum)";

    fn record(runs: &str, definition: u64) -> [u8; RECORD] {
        let id = shoal_plan::algorithms::algorithm_id(Collective::Allreduce, runs);
        Record {
            shape: 42,
            runs: id,
            host: id,
            definition,
            name: runs,
        }
        .encode()
    }

    fn check(records: &[[u8; RECORD]], members: &[usize]) -> Result<()> {
        let all: Vec<u8> = records.iter().flatten().copied().collect();
        verdict(&all, members, Collective::Allreduce, CALL)
    }

    #[test]
    fn equal_records_agree() {
        let r = record("halves", 7);
        check(&[r, r, r], &[0, 1, 2]).unwrap();
        check(&[r], &[0]).unwrap();
    }

    #[test]
    fn different_definitions_name_the_algorithm_and_both_sides() {
        let (a, b) = (record("halves", 7), record("halves", 8));
        let e = check(&[a, b, a, b], &[0, 1, 2, 3]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        assert_eq!(
            e.message,
            "mismatched algorithm definitions: allreduce algorithm 'halves' differs between ranks: \
             ranks [0, 2] define it one way, ranks [1, 3] another (compared at the first use of \
             allreduce(count=12, dtype=float32, op=sum) on this communicator; every rank must \
             register the same function)"
        );
        let c = record("halves", 9);
        let e = check(&[a, b, c], &[4, 5, 6]).unwrap_err();
        assert!(
            e.message
                .contains("ranks [4] define it one way, ranks [5] another, ranks [6] another"),
            "{}",
            e.message
        );
    }

    #[test]
    fn different_choices_name_each_algorithm_even_unregistered_ones() {
        let (a, b) = (record("ring", 0), record("halves", 3));
        let e = check(&[a, a, b], &[0, 1, 2]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        assert!(e.message.starts_with(
            "mismatched collectives: allreduce(count=12, dtype=float32, op=sum) at its first use \
             on this communicator: the ranks chose different algorithms: ranks [0, 1] run 'ring', \
             ranks [2] run 'halves' (do their"
        ), "{}", e.message);
        let mut via_switch = Record::decode(&a);
        via_switch.runs = INA_ALGO_ID;
        let e = check(&[via_switch.encode(), a], &[0, 1]).unwrap_err();
        assert!(
            e.message
                .contains("ranks [0] run 'ina' (falling back to 'ring'), ranks [1] run 'ring'"),
            "{}",
            e.message
        );
    }

    #[test]
    fn different_shapes_are_named_before_anything_else() {
        let a = record("ring", 0);
        let mut b = Record::decode(&a);
        b.shape = 43;
        let e = check(&[a, b.encode()], &[0, 1]).unwrap_err();
        assert!(e.message.contains("the ranks' call shapes differ (do their SHOAL_CHUNK_BYTES differ?): ranks [0] one way, ranks [1] another"), "{}", e.message);
    }

    #[test]
    fn records_round_trip_and_cut_long_names_on_a_char_boundary() {
        let r = Record {
            shape: 1,
            runs: 2,
            host: 3,
            definition: 4,
            name: "halves",
        };
        assert_eq!(Record::decode(&r.encode()), r);
        let long = "é".repeat(NAME_BYTES);
        let cut = Record { name: &long, ..r }.encode();
        assert_eq!(Record::decode(&cut).name, "é".repeat(NAME_BYTES / 2));
    }

    #[test]
    fn shape_digests_tell_chunks_and_counts_apart() {
        let s = CallShape::new(Collective::Allgather, 3, 10, 4);
        let other_chunk = CallShape::new(Collective::Allgather, 3, 10, 5);
        let counts = CallShape {
            counts: Some(vec![1, 2, 3].into()),
            ..s.clone()
        };
        let d = [
            shape_digest(&s),
            shape_digest(&other_chunk),
            shape_digest(&counts),
        ];
        assert!(d[0] != d[1] && d[0] != d[2] && d[1] != d[2], "{d:?}");
        assert_eq!(shape_digest(&s), shape_digest(&s.clone()));
    }
}
