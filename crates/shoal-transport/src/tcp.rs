//! tcp transport (to be written).
