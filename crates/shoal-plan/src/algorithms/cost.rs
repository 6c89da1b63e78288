//! Shared terms of the alpha-beta-gamma cost model (Thakur, Rabenseifner and
//! Gropp 2005; Chan et al. 2007). Chunked transfers pay one alpha per piece,
//! which is what makes small chunks lose on latency-bound calls.

use crate::algorithms::CostParams;
use crate::partition::piece_count;
use crate::plan::CallShape;

/// Cost terms for one call shape, element size and level of the machine.
pub struct Model {
    alpha: f64,
    beta: f64,
    gamma: f64,
    elem_size: f64,
    chunk: usize,
}

impl Model {
    /// Messages over the links between hosts (or the only level there is).
    pub fn new(shape: &CallShape, elem_size: usize, params: &CostParams) -> Model {
        Model {
            alpha: params.alpha,
            beta: params.beta,
            gamma: params.gamma,
            elem_size: elem_size as f64,
            chunk: shape.chunk,
        }
    }

    /// Messages between ranks of one host.
    pub fn local(shape: &CallShape, elem_size: usize, params: &CostParams) -> Model {
        Model {
            alpha: params.alpha_local,
            beta: params.beta_local,
            ..Model::new(shape, elem_size, params)
        }
    }

    /// One message of `elems` elements: alpha per piece plus beta per byte.
    pub fn msg(&self, elems: usize) -> f64 {
        self.latency(elems) + self.transfer(elems)
    }

    /// The alpha part of a message of `elems` elements.
    pub fn latency(&self, elems: usize) -> f64 {
        self.alpha * piece_count(elems, self.chunk).max(1) as f64
    }

    /// The alpha part of `k` messages of `elems` elements posted at once by
    /// one rank: the first message's latency, and half of it again for each
    /// other one, which is the sender's own work per message (system call,
    /// network stack) that concurrent sends cannot overlap.
    pub fn fan_latency(&self, k: usize, elems: usize) -> f64 {
        self.latency(elems) * (1.0 + k.saturating_sub(1) as f64 / 2.0)
    }

    /// The beta part of a message of `elems` elements.
    pub fn transfer(&self, elems: usize) -> f64 {
        self.beta * self.elem_size * elems as f64
    }

    /// Reducing `elems` elements locally.
    pub fn reduce(&self, elems: usize) -> f64 {
        self.gamma * self.elem_size * elems as f64
    }

    /// A pipeline of `stages` hops carrying `elems` elements in pieces: the
    /// first piece crosses every hop, the others follow one hop behind.
    pub fn pipeline(&self, stages: usize, elems: usize) -> f64 {
        if stages == 0 || elems == 0 {
            return 0.0;
        }
        let pieces = piece_count(elems, self.chunk);
        let piece = elems.min(self.chunk.max(1));
        (stages + pieces - 1) as f64 * self.msg(piece)
    }
}
