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

/// How random jobs draw their model (`[random_jobs] model_weights`). The
/// paper uses "a weighted random distribution" without giving the
/// weights; by default we CHOSE equal ones.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ModelMix {
    #[default]
    Equal,
    /// The weight of each of [`MODELS`], in its order (some positive).
    Weighted([f64; MODELS.len()]),
}

impl ModelMix {
    /// The mix of these `(model name, weight)` pairs; a model not named
    /// weighs 0. Equal weights over every model are [`ModelMix::Equal`],
    /// so that naming them draws the same jobs as the default.
    pub fn weighted<'a>(
        pairs: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Result<ModelMix, MixError> {
        let mut weights = [None; MODELS.len()];
        for (name, weight) in pairs {
            let model = by_name(name).map_err(MixError::Unknown)?;
            let index = MODELS.iter().position(|m| *m == model).expect("a model");
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(MixError::Weight(model.name, weight));
            }
            if weights[index].replace(weight).is_some() {
                return Err(MixError::Twice(model.name));
            }
        }
        let weights = weights.map(|w| w.unwrap_or(0.0));
        if weights.iter().all(|&w| w == 0.0) {
            return Err(MixError::AllZero);
        }
        if weights.iter().all(|&w| w == weights[0]) {
            return Ok(ModelMix::Equal);
        }
        Ok(ModelMix::Weighted(weights))
    }

    /// A model drawn from the mix: one draw of `rng`.
    pub fn draw(&self, rng: &mut Rng) -> Model {
        let weights = match self {
            ModelMix::Equal => return MODELS[rng.below(MODELS.len() as u64) as usize],
            ModelMix::Weighted(weights) => weights,
        };
        let mut left = rng.next_f64() * weights.iter().sum::<f64>();
        for (model, &weight) in MODELS.iter().zip(weights) {
            if left < weight {
                return *model;
            }
            left -= weight;
        }
        // Rounding left a sliver past the last weight: its model.
        let last = weights
            .iter()
            .rposition(|&w| w > 0.0)
            .expect("a positive weight");
        MODELS[last]
    }
}

/// Why model weights were refused.
#[derive(Clone, Debug, PartialEq)]
pub enum MixError {
    Unknown(UnknownModel),
    /// A weight that is not a finite number >= 0.
    Weight(&'static str, f64),
    /// A model named twice (names are case-insensitive).
    Twice(&'static str),
    AllZero,
}

impl fmt::Display for MixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MixError::Unknown(e) => e.fmt(f),
            MixError::Weight(name, w) => write!(f, "{name}: weight {w} must be a number >= 0"),
            MixError::Twice(name) => write!(f, "{name} is named twice"),
            MixError::AllZero => write!(f, "every weight is 0: no model could be drawn"),
        }
    }
}

impl std::error::Error for MixError {}

/// A job size drawn uniformly from the paper's 16..=96 workers.
pub fn draw_workers(rng: &mut Rng) -> u32 {
    16 + rng.below(96 - 16 + 1) as u32
}
