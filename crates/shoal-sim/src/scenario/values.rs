//! serde deserializers for the values a scenario's keys take as users
//! write them: sizes, rates and durations ("64MiB", "10gbit", "1ms")
//! through [`crate::units`]' parsers, fractions, and the names of models,
//! distributions, engines and algorithms through their own parsers. Each
//! refusal is that parser's message; serde_path_to_error adds the key.
//!
//! Each is used as `#[serde(default, deserialize_with = "...")]` on an
//! `Option` field (absent: the scenario's default).

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::config::Algorithm;
use crate::engine::Engine;
use crate::units::{parse_bytes, parse_rate, parse_time, seconds, Rate, Time};
use crate::workload::models::{self, Model, ModelMix};
use crate::workload::FlowSizeCdf;

/// A value as text: a string, or a number as written (a size may be a
/// bare number of bytes, `buffer = 600000`; a number where a unit is
/// needed gets the unit parser's "no unit" message).
struct Text;

impl Visitor<'_> for Text {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a string or a number")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

/// The text of one value, parsed by `parse`; its error is the message.
fn parsed<'de, D, T, E>(d: D, parse: impl Fn(&str) -> Result<T, E>) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    E: fmt::Display,
{
    let text = d.deserialize_any(Text)?;
    parse(&text).map(Some).map_err(de::Error::custom)
}

/// A list, as a TOML array or a comma-separated string (`"10gbit,40gbit"`,
/// as an override is written), each item parsed by `parse`.
struct List<T, P>(P, PhantomData<T>);

impl<'de, T, E, P> Visitor<'de> for List<T, P>
where
    P: Fn(&str) -> Result<T, E>,
    E: fmt::Display,
{
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a list or a comma-separated string")
    }

    fn visit_str<Er: de::Error>(self, v: &str) -> Result<Vec<T>, Er> {
        v.split(',')
            .map(|item| (self.0)(item.trim()).map_err(Er::custom))
            .collect()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(text) = seq.next_element_seed(TextSeed)? {
            items.push((self.0)(text.trim()).map_err(de::Error::custom)?);
        }
        Ok(items)
    }
}

/// [`Text`] as a list's element.
struct TextSeed;

impl<'de> de::DeserializeSeed<'de> for TextSeed {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_any(Text)
    }
}

fn list<'de, D, T, E>(
    d: D,
    parse: impl Fn(&str) -> Result<T, E>,
) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    E: fmt::Display,
{
    d.deserialize_any(List(parse, PhantomData)).map(Some)
}

/// Free text (a topology spec, an algorithm's name, a file name): numbers
/// are taken as written, so an override's `"2"` is still text.
pub fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_any(Text).map(Some)
}

/// A size in bytes: "64MiB", "600KB", 1500.
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    parsed(d, parse_bytes)
}

/// A link rate: "10gbit", "400gbps".
pub fn rate<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Rate>, D::Error> {
    parsed(d, parse_rate)
}

/// Rates, one per tier: `["10gbit", "40gbit"]` or `"10gbit,40gbit"`.
pub fn rates<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Rate>>, D::Error> {
    list(d, parse_rate)
}

/// A duration in picoseconds: "1us", "2ms".
pub fn time<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
    parsed(d, parse_time)
}

/// A duration in seconds (the reports' unit): "100ms", "3s".
pub fn seconds_of<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    parsed(d, |s| parse_time(s).map(seconds))
}

/// A fraction of capacity, 0 to 1.
pub fn fraction<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    let x = d.deserialize_any(Number)?;
    if !(0.0..=1.0).contains(&x) {
        return Err(de::Error::custom(format!("{x} must be between 0 and 1")));
    }
    Ok(Some(x))
}

/// A number as f64, whether TOML wrote it as an integer (`load = 1`) or a
/// float.
struct Number;

impl Visitor<'_> for Number {
    type Value = f64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a number")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
}

/// Flow-size distributions by name: `["websearch", "datamining"]`.
pub fn distributions<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<FlowSizeCdf>>, D::Error> {
    list(d, FlowSizeCdf::by_name)
}

/// A training model by name ("vgg16").
pub fn model<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Model>, D::Error> {
    parsed(d, models::by_name)
}

/// Random jobs' model weights by name: `{ vgg16 = 2, alexnet = 1 }`.
pub fn model_weights<'de, D: Deserializer<'de>>(d: D) -> Result<Option<ModelMix>, D::Error> {
    let weights = BTreeMap::<String, f64>::deserialize(d)?;
    ModelMix::weighted(weights.iter().map(|(name, &w)| (name.as_str(), w)))
        .map(Some)
        .map_err(de::Error::custom)
}

/// How a job reduces: "ring", "panama", "panama-0.88", "switchml", ...
pub fn algorithm<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Algorithm>, D::Error> {
    parsed(d, Algorithm::parse)
}

/// The engine: "flow" or "packet".
pub fn engine<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Engine>, D::Error> {
    parsed(d, |s| Engine::parse(s.trim()))
}
