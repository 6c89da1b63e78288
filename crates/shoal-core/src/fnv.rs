//! FNV-1a, 64-bit, for values the ranks compare (call signatures, tuning
//! tables): shoal-bootstrap's, the one hash of every crate.

pub(crate) use shoal_bootstrap::fnv::Fnv64;
