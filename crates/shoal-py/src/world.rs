//! The communicators of one `shoal.init()`, so that `shoal.finalize()` ends
//! all of them, sub-groups included, however many references Python still
//! holds. Each Python communicator reaches its core communicator through a
//! [`Slot`] that finalize empties; the core communicators share one engine,
//! which drops with the last of them, and with it the transport (threads,
//! sockets, shared memory), the store server and the switch jobs.

use std::sync::{Arc, Mutex, RwLock, Weak};

use pyo3::exceptions::PyRuntimeError;
use pyo3::PyResult;

use shoal_core::comm::Communicator;

/// The communicators of one world.
#[derive(Default)]
pub struct World {
    state: Mutex<Members>,
}

#[derive(Default)]
struct Members {
    /// Weak: a group Python has dropped goes away as before.
    slots: Vec<Weak<Slot>>,
    finalized: bool,
}

/// One communicator of a world, until the world is finalized. What names the
/// group in errors is kept apart, so it outlives the communicator.
pub struct Slot {
    comm: RwLock<Option<Arc<Communicator>>>,
    rank: usize,
    members: Vec<usize>,
}

impl World {
    /// Takes `comm`, a communicator of this world, into a slot of it.
    pub fn adopt(&self, comm: Communicator) -> PyResult<Arc<Slot>> {
        let slot = Arc::new(Slot {
            rank: comm.rank(),
            members: comm.members().to_vec(),
            comm: RwLock::new(None),
        });
        let mut state = self.state.lock().unwrap();
        if state.finalized {
            // A group made by another thread while the world was finalized.
            return Err(slot.finalized());
        }
        *slot.comm.write().unwrap() = Some(Arc::new(comm));
        state.slots.retain(|s| s.strong_count() > 0);
        state.slots.push(Arc::downgrade(&slot));
        Ok(slot)
    }

    /// Ends every communicator of the world; using one afterwards raises.
    /// Call it without the GIL: dropping the engine joins its threads.
    pub fn finalize(&self) {
        let slots = {
            let mut state = self.state.lock().unwrap();
            state.finalized = true;
            std::mem::take(&mut state.slots)
        };
        let comms: Vec<Arc<Communicator>> = slots
            .iter()
            .filter_map(Weak::upgrade)
            .filter_map(|slot| slot.comm.write().unwrap().take())
            .collect();
        // Newest first: sub-groups leave their switch jobs before the world's
        // communicator takes the engine with it.
        for comm in comms.into_iter().rev() {
            drop(comm);
        }
    }
}

impl Slot {
    /// The communicator; a RuntimeError once its world is finalized.
    pub fn get(&self) -> PyResult<Arc<Communicator>> {
        self.comm
            .read()
            .unwrap()
            .clone()
            .ok_or_else(|| self.finalized())
    }

    pub fn is_finalized(&self) -> bool {
        self.comm.read().unwrap().is_none()
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn members(&self) -> &[usize] {
        &self.members
    }

    fn finalized(&self) -> pyo3::PyErr {
        // As Python's "shoal is not initialized" (a RuntimeError).
        PyRuntimeError::new_err(format!(
            "shoal is finalized: group of world ranks {:?} (rank {} here) belongs to a world \
             that was finalized; call shoal.init() and make the group again",
            self.members, self.rank
        ))
    }
}
