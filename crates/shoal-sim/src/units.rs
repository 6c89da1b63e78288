//! Units of the model: integer time in picoseconds, rates in bit/s, sizes in
//! bytes, and the parsers for the strings users write ("10gbit", "1us",
//! "64MiB").
//!
//! Time is a `u64` count of **picoseconds** ([`Time`]): one 1500-byte packet
//! takes 1_200_000 ps on a 10 Gb/s link and 30_000 ps at 400 Gb/s, so
//! serialisation times stay exact integers at every common rate, and `u64`
//! still spans 213 days of simulated time. Integer time keeps event order
//! exact and runs deterministic (no float rounding differences).

use std::fmt;

/// Simulated time or a duration, in picoseconds.
pub type Time = u64;

pub const PS_PER_NS: Time = 1_000;
pub const PS_PER_US: Time = 1_000_000;
pub const PS_PER_MS: Time = 1_000_000_000;
pub const PS_PER_S: Time = 1_000_000_000_000;

/// A link rate in bits per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(pub u64);

impl Rate {
    pub fn gbit(g: u64) -> Rate {
        Rate(g * 1_000_000_000)
    }

    /// Time to put `bytes` on the wire at this rate, rounded up to a whole
    /// picosecond (so a link is never faster than its rate).
    pub fn serialize(self, bytes: u64) -> Time {
        let bits = bytes as u128 * 8 * PS_PER_S as u128;
        bits.div_ceil(self.0 as u128) as Time
    }

    pub fn bits_per_s(self) -> f64 {
        self.0 as f64
    }
}

/// Seconds as a float, for reports.
pub fn seconds(t: Time) -> f64 {
    t as f64 / PS_PER_S as f64
}

/// What a unit string was meant to be, for [`UnitError`]'s message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quantity {
    Rate,
    Duration,
    Size,
}

impl Quantity {
    fn noun(self) -> &'static str {
        match self {
            Quantity::Rate => "rate",
            Quantity::Duration => "duration",
            Quantity::Size => "size",
        }
    }

    /// The units the parser knows, as the message lists them.
    fn known_units(self) -> &'static str {
        match self {
            Quantity::Rate => "bit, kbit, mbit, gbit or tbit",
            Quantity::Duration => "ps, ns, us, ms or s",
            Quantity::Size => "B, KB, MB, GB, KiB, MiB or GiB",
        }
    }
}

/// A rate, duration or size a user wrote that does not parse; each names
/// the text as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UnitError {
    /// No number at the start ("fast").
    NotANumber { text: String },
    /// A number that is infinite or negative.
    OutOfRange { text: String },
    /// A number without a unit where one is needed ("10" for a rate).
    NoUnit { quantity: Quantity, text: String },
    /// A unit the parser does not know ("10gbyte").
    UnknownUnit {
        quantity: Quantity,
        text: String,
        unit: String,
    },
    /// A rate that rounds to 0 bit/s.
    RateBelowOneBit { text: String },
}

impl UnitError {
    /// The text that did not parse.
    pub fn text(&self) -> &str {
        match self {
            UnitError::NotANumber { text }
            | UnitError::OutOfRange { text }
            | UnitError::NoUnit { text, .. }
            | UnitError::UnknownUnit { text, .. }
            | UnitError::RateBelowOneBit { text } => text,
        }
    }
}

impl fmt::Display for UnitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnitError::NotANumber { text } => write!(f, "'{text}' does not start with a number"),
            UnitError::OutOfRange { text } => {
                write!(f, "'{text}': the number must be finite and >= 0")
            }
            UnitError::NoUnit { quantity, text } => {
                let example = match quantity {
                    Quantity::Rate => "10gbit or 100mbit",
                    Quantity::Duration => "1us or 500ns",
                    Quantity::Size => "64MiB or 1500B",
                };
                write!(
                    f,
                    "{} '{text}' has no unit; write e.g. {example}",
                    quantity.noun()
                )
            }
            UnitError::UnknownUnit {
                quantity,
                text,
                unit,
            } => write!(
                f,
                "{} '{text}': unknown unit '{unit}'; use {}",
                quantity.noun(),
                quantity.known_units()
            ),
            UnitError::RateBelowOneBit { text } => {
                write!(f, "rate '{text}' must be at least 1 bit/s")
            }
        }
    }
}

impl std::error::Error for UnitError {}

/// Splits "10gbit" into (10.0, "gbit"); the number may have a fraction.
fn split_number(s: &str) -> Result<(f64, String), UnitError> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let value: f64 = num.parse().map_err(|_| UnitError::NotANumber {
        text: s.to_string(),
    })?;
    if !value.is_finite() || value < 0.0 {
        return Err(UnitError::OutOfRange {
            text: s.to_string(),
        });
    }
    Ok((value, unit.trim().to_ascii_lowercase()))
}

/// The error for a unit `quantity` does not know (or for none, where one
/// is needed).
fn bad_unit(quantity: Quantity, text: &str, unit: &str) -> UnitError {
    let text = text.to_string();
    if unit.is_empty() {
        UnitError::NoUnit { quantity, text }
    } else {
        UnitError::UnknownUnit {
            quantity,
            text,
            unit: unit.to_string(),
        }
    }
}

/// Parses a rate: "10gbit", "100Mbit", "400gbps", "1.5tbit", "9600bit".
pub fn parse_rate(s: &str) -> Result<Rate, UnitError> {
    let (value, unit) = split_number(s)?;
    let scale = match unit.as_str() {
        "bit" | "bps" | "bit/s" => 1.0,
        "kbit" | "kbps" | "kbit/s" => 1e3,
        "mbit" | "mbps" | "mbit/s" => 1e6,
        "gbit" | "gbps" | "gbit/s" => 1e9,
        "tbit" | "tbps" | "tbit/s" => 1e12,
        other => return Err(bad_unit(Quantity::Rate, s, other)),
    };
    let bps = (value * scale).round();
    if bps < 1.0 {
        return Err(UnitError::RateBelowOneBit {
            text: s.to_string(),
        });
    }
    Ok(Rate(bps as u64))
}

/// Parses a duration: "1us", "500ns", "2ms", "0.5s", "100ps" (also "µs").
pub fn parse_time(s: &str) -> Result<Time, UnitError> {
    let (value, unit) = split_number(s)?;
    let scale = match unit.as_str() {
        "ps" => 1,
        "ns" => PS_PER_NS,
        "us" | "µs" => PS_PER_US,
        "ms" => PS_PER_MS,
        "s" => PS_PER_S,
        other => return Err(bad_unit(Quantity::Duration, s, other)),
    };
    Ok((value * scale as f64).round() as Time)
}

/// Parses a size in bytes: "64MiB", "1500", "1500B", "64MB", "2GiB", "4KiB".
pub fn parse_bytes(s: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(s)?;
    let scale: u64 = match unit.as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        other => return Err(bad_unit(Quantity::Size, s, other)),
    };
    Ok((value * scale as f64).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rates_times_and_sizes() {
        assert_eq!(parse_rate("10gbit").unwrap(), Rate(10_000_000_000));
        assert_eq!(parse_rate("100Mbit").unwrap(), Rate(100_000_000));
        assert_eq!(parse_rate("1.5Gbps").unwrap(), Rate(1_500_000_000));
        assert_eq!(parse_time("1us").unwrap(), 1_000_000);
        assert_eq!(parse_time("500ns").unwrap(), 500_000);
        assert_eq!(parse_time("0.5ms").unwrap(), 500_000_000);
        assert_eq!(parse_bytes("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1500").unwrap(), 1500);
        assert_eq!(parse_bytes("64MB").unwrap(), 64_000_000);
    }

    #[test]
    fn rejects_bad_input_naming_the_problem() {
        let err = parse_rate("10").unwrap_err();
        assert!(matches!(
            err,
            UnitError::NoUnit {
                quantity: Quantity::Rate,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "rate '10' has no unit; write e.g. 10gbit or 100mbit"
        );
        let err = parse_rate("10gbyte").unwrap_err();
        assert!(matches!(&err, UnitError::UnknownUnit { unit, .. } if unit == "gbyte"));
        assert_eq!(
            err.to_string(),
            "rate '10gbyte': unknown unit 'gbyte'; use bit, kbit, mbit, gbit or tbit"
        );
        let err = parse_time("fast").unwrap_err();
        assert_eq!(
            err,
            UnitError::NotANumber {
                text: "fast".into()
            }
        );
        assert_eq!(err.to_string(), "'fast' does not start with a number");
        let err = parse_time("5").unwrap_err();
        assert_eq!(
            err.to_string(),
            "duration '5' has no unit; write e.g. 1us or 500ns"
        );
        let err = parse_bytes("3 parsecs").unwrap_err();
        assert_eq!(err.text(), "3 parsecs");
        assert_eq!(
            err.to_string(),
            "size '3 parsecs': unknown unit 'parsecs'; use B, KB, MB, GB, KiB, MiB or GiB"
        );
        let err = parse_rate("0gbit").unwrap_err();
        assert!(matches!(err, UnitError::RateBelowOneBit { .. }));
        assert_eq!(err.to_string(), "rate '0gbit' must be at least 1 bit/s");
    }

    #[test]
    fn serialization_is_exact_at_common_rates() {
        assert_eq!(Rate::gbit(10).serialize(1500), 1_200_000);
        assert_eq!(Rate::gbit(400).serialize(1500), 30_000);
        assert_eq!(Rate(3).serialize(1), 2_666_666_666_667); // rounded up
    }
}
