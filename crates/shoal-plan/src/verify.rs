//! The plan verifier (to be written).
