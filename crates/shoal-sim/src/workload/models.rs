//! The training models of the PANAMA evaluation (section 7 draws jobs from
//! VGG16, AlexNet, ResNet152, ResNet50, InceptionV3 and GoogLeNet).
//!
//! Gradient size = parameter count x 4 bytes (fp32), parameter counts from
//! the models' papers / the Keras and torchvision model zoos.
//!
//! Compute time per iteration: the paper measured it on a P100 (section 2,
//! Fig. 1) but prints only the communication/total ratio (0.11-0.70 at
//! 10 Gb/s), not the times. We CHOSE the times below from TensorFlow's
//! published benchmark throughputs on one P100 (tf_cnn_benchmarks, the
//! suite and batch sizes the paper names: batch 64, AlexNet 512, GoogLeNet
//! 128) as batch / images-per-second; with the gradient sizes they give
//! ratios of 0.11 (GoogLeNet) .. 0.53 (AlexNet) at 10 Gb/s, inside the
//! paper's range.

use std::fmt;

use super::rng::Rng;

/// A data-parallel training job's model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    pub name: &'static str,
    pub params: u64,
    /// Forward + backward time of one iteration on one P100 (chosen, see
    /// the module comment).
    pub compute_s: f64,
}

impl Model {
    /// Bytes of fp32 gradient exchanged per iteration.
    pub fn gradient_bytes(&self) -> u64 {
        self.params * 4
    }
}

pub const MODELS: [Model; 6] = [
    Model {
        name: "vgg16",
        params: 138_357_544,
        compute_s: 0.444,
    },
    Model {
        name: "alexnet",
        params: 61_100_840,
        compute_s: 0.171,
    },
    Model {
        name: "resnet152",
        params: 60_192_808,
        compute_s: 0.703,
    },
    Model {
        name: "resnet50",
        params: 25_557_032,
        compute_s: 0.292,
    },
    Model {
        name: "inceptionv3",
        params: 23_851_784,
        compute_s: 0.451,
    },
    Model {
        name: "googlenet",
        params: 6_797_700,
        compute_s: 0.183,
    },
];

/// The model called `name` (case-insensitive).
pub fn by_name(name: &str) -> Result<Model, UnknownModel> {
    let wanted = name.to_ascii_lowercase();
    MODELS
        .iter()
        .copied()
        .find(|m| m.name == wanted)
        .ok_or_else(|| UnknownModel(name.to_string()))
}

/// A model name that is none of [`MODELS`], as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownModel(pub String);

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<&str> = MODELS.iter().map(|m| m.name).collect();
        write!(
            f,
            "unknown model {:?} (known: {})",
            self.0,
            known.join(", ")
        )
    }
}

impl std::error::Error for UnknownModel {}

/// A model drawn at random. The paper uses "a weighted random
/// distribution" without giving the weights; we CHOSE equal weights.
pub fn draw(rng: &mut Rng) -> Model {
    MODELS[rng.below(MODELS.len() as u64) as usize]
}

/// A job size drawn uniformly from the paper's 16..=96 workers.
pub fn draw_workers(rng: &mut Rng) -> u32 {
    16 + rng.below(96 - 16 + 1) as u32
}
