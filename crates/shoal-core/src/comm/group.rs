//! Sub-communicators: `new_group`, with the id every member derives alike.

use super::Communicator;
use crate::error::{Error, Result};

impl Communicator {
    /// Makes a sub-communicator of the given group ranks (in group order).
    ///
    /// Without a `key`, every rank of this communicator calls it with the
    /// same list (like torch's `new_group`); non-members get `None`. With a
    /// `key`, only the members call it, with the same key: the group's id
    /// comes from the key, the members and how many groups this rank made
    /// before with that key and those members, all of which the members
    /// agree on without the other ranks (torch's members-only group creation).
    pub fn new_group(&self, ranks: &[usize], key: Option<&str>) -> Result<Option<Communicator>> {
        self.check_group_ranks(ranks)?;
        // Every caller counts the group, members or not, so that all number alike.
        let name = {
            let mut st = self.state.lock().unwrap();
            match key {
                None => {
                    st.groups_made += 1;
                    GroupName::Numbered(st.groups_made)
                }
                Some(key) => {
                    let made = st.keyed_made.entry((key.to_string(), ranks.to_vec()));
                    let k = made.or_insert(0);
                    *k += 1;
                    GroupName::Keyed(key, *k)
                }
            }
        };
        let Some(rank) = ranks.iter().position(|&r| r == self.rank) else {
            return Ok(None);
        };
        let id = group_id(self.id, name, ranks);
        let members = ranks.iter().map(|&r| self.members[r]).collect();
        Ok(Some(Communicator::with_members(
            self.engine.clone(),
            members,
            rank,
            id,
        )))
    }

    fn check_group_ranks(&self, ranks: &[usize]) -> Result<()> {
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != ranks.len() || sorted.is_empty() {
            return Err(Error::invalid(format!(
                "new_group: ranks {ranks:?} must be distinct and non-empty"
            )));
        }
        if let Some(bad) = ranks.iter().find(|&&r| r >= self.size()) {
            return Err(Error::invalid(format!(
                "new_group: rank {bad} is not in this group of {}",
                self.size()
            )));
        }
        Ok(())
    }
}

/// How a group is told apart from its parent's other groups with the same members.
#[derive(Clone, Copy, Debug)]
enum GroupName<'a> {
    /// The parent's `k`-th group made by all of its ranks.
    Numbered(u32),
    /// The `k`-th group made with this key and these members.
    Keyed(&'a str, u32),
}

/// A communicator id every member derives alike, without messages: a hash of
/// the parent's id, the group's name and the members.
fn group_id(parent: u32, name: GroupName<'_>, ranks: &[usize]) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut mix = |v: u64| {
        h ^= v;
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    mix(parent as u64);
    match name {
        GroupName::Numbered(k) => mix(k as u64),
        GroupName::Keyed(key, k) => {
            // A marker no count reaches keeps the two kinds of name apart.
            mix(u64::MAX);
            mix(key.len() as u64);
            key.bytes().for_each(|b| mix(b as u64));
            mix(k as u64);
        }
    }
    ranks.iter().for_each(|&r| mix(r as u64));
    // Id 0 is the world's.
    ((h ^ (h >> 32)) as u32).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_group_ids_differ_by_key_count_and_members_and_from_numbered_ones() {
        let ids = [
            group_id(0, GroupName::Numbered(1), &[0, 1]),
            group_id(0, GroupName::Keyed("a", 1), &[0, 1]),
            group_id(0, GroupName::Keyed("a", 2), &[0, 1]),
            group_id(0, GroupName::Keyed("b", 1), &[0, 1]),
            group_id(0, GroupName::Keyed("a", 1), &[1, 0]),
            group_id(7, GroupName::Keyed("a", 1), &[0, 1]),
        ];
        for (i, a) in ids.iter().enumerate() {
            assert!(ids[i + 1..].iter().all(|b| a != b), "{ids:?}");
        }
        assert_eq!(ids[1], group_id(0, GroupName::Keyed("a", 1), &[0, 1]));
    }
}
