//! shm transport (to be written).
