//! The steps a plan step waits on ([`crate::Step::deps`]), as a list that
//! keeps up to two inline.
//!
//! Almost every step of the built-in plans waits on one or two others, and
//! a heap `Vec` per step (its allocation and its free) was a third of the
//! time to generate a plan: a 1024-rank ring allreduce is 4 M steps, which
//! the simulator generates in full. Reads go through `Deref<Target =
//! [usize]>`, so a `Deps` is used as a slice.

use std::fmt;
use std::ops::Deref;

/// Step indices, in the order given (see the module docs).
#[derive(Clone)]
pub struct Deps(Repr);

#[derive(Clone)]
enum Repr {
    Inline { len: u8, ids: [usize; 2] },
    Heap(Vec<usize>),
}

impl Deps {
    /// No dependencies.
    pub const fn new() -> Deps {
        Deps(Repr::Inline {
            len: 0,
            ids: [0; 2],
        })
    }

    /// Removes every dependency.
    pub fn clear(&mut self) {
        *self = Deps::new();
    }

    /// Appends `id`; past two the list moves to the heap.
    pub fn push(&mut self, id: usize) {
        match &mut self.0 {
            Repr::Inline { len, ids } if (*len as usize) < ids.len() => {
                ids[*len as usize] = id;
                *len += 1;
            }
            Repr::Inline { ids, .. } => {
                let mut heap = ids.to_vec();
                heap.push(id);
                self.0 = Repr::Heap(heap);
            }
            Repr::Heap(ids) => ids.push(id),
        }
    }
}

impl Default for Deps {
    fn default() -> Deps {
        Deps::new()
    }
}

impl Deref for Deps {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        match &self.0 {
            Repr::Inline { len, ids } => &ids[..*len as usize],
            Repr::Heap(ids) => ids,
        }
    }
}

impl From<&[usize]> for Deps {
    fn from(ids: &[usize]) -> Deps {
        match *ids {
            [] => Deps::new(),
            [a] => Deps(Repr::Inline {
                len: 1,
                ids: [a, 0],
            }),
            [a, b] => Deps(Repr::Inline {
                len: 2,
                ids: [a, b],
            }),
            _ => Deps(Repr::Heap(ids.to_vec())),
        }
    }
}

impl From<Vec<usize>> for Deps {
    fn from(ids: Vec<usize>) -> Deps {
        if ids.len() <= 2 {
            Deps::from(ids.as_slice())
        } else {
            Deps(Repr::Heap(ids))
        }
    }
}

impl<const N: usize> From<[usize; N]> for Deps {
    fn from(ids: [usize; N]) -> Deps {
        Deps::from(&ids[..])
    }
}

impl<'a> IntoIterator for &'a Deps {
    type Item = &'a usize;
    type IntoIter = std::slice::Iter<'a, usize>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl PartialEq for Deps {
    fn eq(&self, other: &Deps) -> bool {
        **self == **other
    }
}

impl Eq for Deps {}

/// As the list it holds (`[0, 2]`), whichever way it is stored.
impl fmt::Debug for Deps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_lists_read_and_compare_alike() {
        for ids in [vec![], vec![4], vec![4, 1], vec![4, 1, 7]] {
            let from_vec = Deps::from(ids.clone());
            let from_slice = Deps::from(ids.as_slice());
            assert_eq!(&*from_vec, ids.as_slice());
            assert_eq!(from_vec, from_slice);
            assert_eq!(format!("{from_vec:?}"), format!("{ids:?}"));
        }
        assert_ne!(Deps::from([1]), Deps::from([1, 2]));
        let mut d = Deps::from([3, 5, 8]);
        d.clear();
        assert!(d.is_empty());
    }

    #[test]
    fn pushed_lists_read_as_built_from_a_vec() {
        let mut d = Deps::new();
        for n in 1..=4 {
            d.push(n * 10);
            let ids: Vec<usize> = (1..=n).map(|i| i * 10).collect();
            assert_eq!(d, Deps::from(ids.clone()));
            assert_eq!(&*d, ids.as_slice());
        }
    }
}
