//! A call's shape: built from its arguments and the members' layout on
//! their hosts, and checked (root, per-rank counts, buffer sizes); and the
//! parts of its signature that come from it.

use std::collections::HashMap;
use std::sync::Arc;

use shoal_plan::{Buf, CallShape, Collective};

use super::{CollArgs, Communicator};
use crate::buffers::CallBuffers;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::fnv::Fnv64;

impl Communicator {
    pub(super) fn shape(&self, args: &CollArgs) -> Result<CallShape> {
        let world = self.size();
        if args.collective.rooted() && args.root >= world {
            return Err(Error::invalid(format!(
                "{}: root {} is not a rank of this group of {world}",
                args.collective, args.root
            )));
        }
        let chunk = (self.engine.config.chunk_bytes / args.dtype.size()).max(1);
        let root = if args.collective.rooted() {
            args.root
        } else {
            0
        };
        Ok(CallShape {
            collective: args.collective,
            world,
            // With per-rank counts the single count means nothing.
            count: if args.counts.is_some() { 0 } else { args.count },
            root,
            chunk,
            ranks_per_host: self.ranks_per_host,
            counts: self.check_counts(args)?,
        })
    }

    /// The call's per-rank counts, if it has any, checked against the
    /// collective and the group size.
    pub(super) fn check_counts(&self, args: &CollArgs) -> Result<Option<Arc<[usize]>>> {
        let Some(counts) = &args.counts else {
            return Ok(None);
        };
        let world = self.size();
        let (expected, what) = match args.collective {
            Collective::Allgather | Collective::ReduceScatter => (world, "one per rank"),
            Collective::Alltoall => (world * world, "world x world, row s for rank s's sends"),
            c => {
                return Err(Error::invalid(format!(
                    "{c} takes no per-rank counts (allgather, reduce_scatter and alltoall do)"
                )))
            }
        };
        if counts.len() != expected {
            return Err(Error::invalid(format!(
                "{}: counts has {} entries, expected {expected} ({what}) in this group of {world}",
                args.collective,
                counts.len()
            )));
        }
        Ok(Some(counts.clone()))
    }

    pub(super) fn check_buffers(
        &self,
        shape: &CallShape,
        dtype: DType,
        bufs: &CallBuffers,
    ) -> Result<()> {
        let esize = dtype.size();
        for (buf, have, name) in [
            (Buf::Input, bufs.input_bytes, "input"),
            (Buf::Output, bufs.output_bytes, "output"),
        ] {
            let need = shape.buffer_len(self.rank, buf) * esize;
            if have != need {
                return Err(Error::invalid(format!(
                    "{}: {name} buffer has {} elements of {dtype}, expected {} on rank {} ({}, world={})",
                    shape.collective,
                    have / esize,
                    need / esize,
                    self.rank,
                    match &shape.counts {
                        Some(c) => format!("counts={c:?}"),
                        None => format!("count={}", shape.count),
                    },
                    shape.world
                )));
            }
        }
        Ok(())
    }
}

/// The `kind` of a collective's signatures: its index in `Collective::ALL`.
pub(super) fn kind_of(collective: Collective) -> u8 {
    Collective::ALL
        .iter()
        .position(|&c| c == collective)
        .unwrap() as u8
}

/// The `count` of a call's signature: its count, or with per-rank counts a
/// hash of them (FNV-1a 64 over each as a little-endian u64), so ranks that
/// pass different counts are caught like those that pass different counts.
pub(super) fn sig_count(shape: &CallShape) -> u64 {
    let Some(counts) = &shape.counts else {
        return shape.count as u64;
    };
    let mut h = Fnv64::new();
    for &c in counts.iter() {
        h.write(&(c as u64).to_le_bytes());
    }
    h.finish()
}

/// The most members any one host has.
pub(super) fn busiest_host(host_of: &[usize], members: &[usize]) -> usize {
    let mut per_host: HashMap<usize, usize> = HashMap::new();
    for &m in members {
        *per_host
            .entry(host_of.get(m).copied().unwrap_or(m))
            .or_default() += 1;
    }
    per_host.into_values().max().unwrap_or(1)
}

/// Ranks per host when the members (in group order) sit on their hosts in
/// equal contiguous blocks, each host once; 1 otherwise.
pub(super) fn block_layout(host_of: &[usize], members: &[usize]) -> usize {
    let hosts: Vec<usize> = members
        .iter()
        .map(|&m| host_of.get(m).copied().unwrap_or(m))
        .collect();
    let per_host = hosts.iter().take_while(|&&h| h == hosts[0]).count().max(1);
    let blocks: Vec<&[usize]> = hosts.chunks(per_host).collect();
    let regular = hosts.len().is_multiple_of(per_host)
        && blocks.iter().all(|b| b.iter().all(|&h| h == b[0]))
        && blocks
            .iter()
            .enumerate()
            .all(|(i, b)| blocks[..i].iter().all(|o| o[0] != b[0]));
    if regular {
        per_host
    } else {
        1
    }
}
