//! routed transport (to be written).
