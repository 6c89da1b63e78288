//! Flow-size distributions as CDF tables, sampled by inverse transform with
//! linear interpolation between the table's points.
//!
//! The two tables of the PANAMA evaluation (its section 7 cites both):
//!
//! * **web search** — Alizadeh et al., "Data Center TCP (DCTCP)",
//!   SIGCOMM 2010, Fig. 4 (query + background traffic of a production
//!   cluster), in the tabulation the pFabric simulations use (Alizadeh et
//!   al., SIGCOMM 2013): sizes in 1460-byte packets, 6 .. 20 000 packets,
//!   mean about 1.7 MB.
//! * **data mining** — Greenberg et al., "VL2: A Scalable and Flexible Data
//!   Center Network", SIGCOMM 2009, Fig. 2, in the same pFabric
//!   tabulation: 1 .. 666 667 packets, half the flows one packet, mean
//!   about 7.5 MB.

use std::fmt;

use super::rng::Rng;

/// Bytes per packet in the pFabric tabulation of both tables.
const TABLE_PACKET_BYTES: f64 = 1460.0;

/// (packets, cumulative probability) — DCTCP paper's web search workload.
const WEB_SEARCH: [(f64, f64); 12] = [
    (6.0, 0.0),
    (6.0, 0.15),
    (13.0, 0.2),
    (19.0, 0.3),
    (33.0, 0.4),
    (53.0, 0.53),
    (133.0, 0.6),
    (667.0, 0.7),
    (1333.0, 0.8),
    (3333.0, 0.9),
    (6667.0, 0.97),
    (20000.0, 1.0),
];

/// (packets, cumulative probability) — VL2 paper's data mining workload.
const DATA_MINING: [(f64, f64); 9] = [
    (1.0, 0.0),
    (1.0, 0.5),
    (2.0, 0.6),
    (3.0, 0.7),
    (7.0, 0.8),
    (267.0, 0.9),
    (2107.0, 0.95),
    (66667.0, 0.99),
    (666667.0, 1.0),
];

/// A flow-size distribution: points (bytes, P[size <= bytes]), sizes
/// non-decreasing, probabilities non-decreasing from >= 0 to exactly 1.
#[derive(Clone, Debug, PartialEq)]
pub struct FlowSizeCdf {
    name: String,
    points: Vec<(f64, f64)>,
}

impl FlowSizeCdf {
    /// Checks the table and builds the distribution.
    pub fn new(name: &str, points: Vec<(f64, f64)>) -> Result<Self, CdfError> {
        let bad = |problem| CdfError::BadTable {
            name: name.to_string(),
            problem,
        };
        if points.len() < 2 {
            return Err(bad(TableProblem::TooFewPoints));
        }
        for pair in points.windows(2) {
            let ((x0, p0), (x1, p1)) = (pair[0], pair[1]);
            if x1 < x0 || p1 < p0 {
                return Err(bad(TableProblem::Decreasing(pair[0], pair[1])));
            }
        }
        let (first_size, first_p) = points[0];
        let last_p = points[points.len() - 1].1;
        if first_size < 1.0 || !(0.0..=1.0).contains(&first_p) || (last_p - 1.0).abs() > 1e-9 {
            return Err(bad(TableProblem::OutOfRange));
        }
        Ok(FlowSizeCdf {
            name: name.to_string(),
            points,
        })
    }

    fn from_packet_table(name: &str, table: &[(f64, f64)]) -> Self {
        let points = table
            .iter()
            .map(|&(packets, p)| (packets * TABLE_PACKET_BYTES, p))
            .collect();
        FlowSizeCdf::new(name, points).expect("built-in CDF tables are valid")
    }

    /// Web search (DCTCP, SIGCOMM 2010).
    pub fn web_search() -> Self {
        Self::from_packet_table("websearch", &WEB_SEARCH)
    }

    /// Data mining (VL2, SIGCOMM 2009).
    pub fn data_mining() -> Self {
        Self::from_packet_table("datamining", &DATA_MINING)
    }

    /// The built-in table called `name` ("websearch" or "datamining").
    pub fn by_name(name: &str) -> Result<Self, CdfError> {
        match name {
            "websearch" | "web_search" => Ok(Self::web_search()),
            "datamining" | "data_mining" => Ok(Self::data_mining()),
            other => Err(CdfError::UnknownDistribution(other.to_string())),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The exact mean of the piecewise-linear distribution, in bytes: the
    /// mass at the first point plus each segment's mass times its midpoint.
    pub fn mean_bytes(&self) -> f64 {
        let (x0, p0) = self.points[0];
        let segments: f64 = self
            .points
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) * (w[0].0 + w[1].0) / 2.0)
            .sum();
        p0 * x0 + segments
    }

    /// One flow size in bytes (at least 1).
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let (x0, p0) = self.points[0];
        if u <= p0 {
            return x0.round().max(1.0) as u64;
        }
        // First point whose cumulative probability reaches u.
        let i = self
            .points
            .partition_point(|&(_, p)| p < u)
            .min(self.points.len() - 1);
        let (xa, pa) = self.points[i - 1];
        let (xb, pb) = self.points[i];
        let size = if pb > pa {
            xa + (xb - xa) * (u - pa) / (pb - pa)
        } else {
            xb
        };
        size.round().max(1.0) as u64
    }
}

/// A flow-size distribution that cannot be had: a bad table, or a name
/// that is no built-in one.
#[derive(Clone, Debug, PartialEq)]
pub enum CdfError {
    /// The table called `name` breaks a rule of a CDF.
    BadTable { name: String, problem: TableProblem },
    /// A name other than websearch and datamining.
    UnknownDistribution(String),
}

/// The rule of a CDF table that a table breaks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TableProblem {
    /// Fewer than two points.
    TooFewPoints,
    /// A point below the one before it, (size, probability) each.
    Decreasing((f64, f64), (f64, f64)),
    /// A size under 1 byte, or probabilities that do not end at exactly 1.
    OutOfRange,
}

impl fmt::Display for CdfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CdfError::BadTable { name, problem } => {
                write!(f, "flow-size CDF {name}: ")?;
                match problem {
                    TableProblem::TooFewPoints => write!(f, "needs at least two points"),
                    TableProblem::Decreasing((x0, p0), (x1, p1)) => write!(
                        f,
                        "points must be non-decreasing, got ({x0}, {p0}) then ({x1}, {p1})"
                    ),
                    TableProblem::OutOfRange => write!(
                        f,
                        "sizes must be >= 1 byte and probabilities run up to exactly 1"
                    ),
                }
            }
            CdfError::UnknownDistribution(name) => write!(
                f,
                "unknown flow-size distribution {name:?} (known: websearch, datamining)"
            ),
        }
    }
}

impl std::error::Error for CdfError {}
