//! What the ranks of a group check they run alike, so that nothing runs that
//! not every rank agreed to (docs/architecture.md, "Agreements").
//!
//! Both agreements gather a fixed-size record from every rank
//! ([`Communicator::allgather_bytes`](crate::comm::Communicator::allgather_bytes)
//! or the first-use exchange) and decide from the gathered bytes alone, so
//! every rank reaches the same verdict and raises the same error:
//! - [`version`], once at init: the build (crate version and a digest of the
//!   built-in algorithms' plans);
//! - [`first_use`], at the first use of a call shape on a communicator: the
//!   shape, the algorithm chosen, and a digest of a registered algorithm's
//!   definition.

pub mod first_use;
pub mod version;

/// The group ranks of `n` records of `len` bytes each in `all`, grouped by
/// `key` of their record, groups in the order of their first rank.
pub(crate) fn groups<'a, K: PartialEq>(
    all: &'a [u8],
    len: usize,
    key: impl Fn(&'a [u8]) -> K,
) -> Vec<(K, Vec<usize>)> {
    let mut found: Vec<(K, Vec<usize>)> = Vec::new();
    for (rank, record) in all.chunks_exact(len).enumerate() {
        let k = key(record);
        match found.iter_mut().find(|(g, _)| *g == k) {
            Some((_, ranks)) => ranks.push(rank),
            None => found.push((k, vec![rank])),
        }
    }
    found
}

/// `ranks [0, 2]`, in global ranks (`members[r]` for group rank `r`).
pub(crate) fn ranks_text(ranks: &[usize], members: &[usize]) -> String {
    let global: Vec<usize> = ranks.iter().map(|&r| members[r]).collect();
    format!("ranks {global:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_the_order_of_first_ranks() {
        let all = [1u8, 0, 2, 0, 1, 0, 3, 0];
        let g = groups(&all, 2, |r| r[0]);
        assert_eq!(g, vec![(1, vec![0, 2]), (2, vec![1]), (3, vec![3])]);
        assert_eq!(ranks_text(&g[0].1, &[4, 5, 6, 7]), "ranks [4, 6]");
    }
}
