//! Element types and reduction operators, with the rules for which op is
//! valid on which type.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    U8,
    I32,
    I64,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I8,
        DType::U8,
        DType::I32,
        DType::I64,
    ];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
        }
    }

    /// The name used by the Python API (numpy's, plus `bfloat16`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "float32",
            DType::F64 => "float64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I8 => "int8",
            DType::U8 => "uint8",
            DType::I32 => "int32",
            DType::I64 => "int64",
        }
    }

    /// numpy's name for the type; None for bfloat16, which numpy lacks (a
    /// bfloat16 buffer is any 2-byte buffer passed with `dtype="bfloat16"`).
    pub fn numpy_name(self) -> Option<&'static str> {
        match self {
            DType::BF16 => None,
            d => Some(d.name()),
        }
    }

    pub fn from_name(name: &str) -> Result<DType, DTypeError> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| DTypeError::UnknownDType(name.to_string()))
    }

    /// The element type a PEP 3118 format of one native-order scalar names
    /// (`f`, `<f`, `=f`, `@f`...), as Python's `shoal._buffers.dtype_name` names the numpy
    /// dtype of such a buffer: integers by their size (`l` and `q` are int64 on
    /// LP64 platforms, int32 where they are 4 bytes). None for every other
    /// format, and where the item size is not the type's.
    pub fn of_buffer_format(format: &[u8], itemsize: usize) -> Option<DType> {
        let little_endian = cfg!(target_endian = "little");
        let code = match format {
            [c] | [b'@' | b'=', c] => *c,
            [b'<', c] if little_endian => *c,
            [b'>' | b'!', c] if !little_endian => *c,
            _ => return None,
        };
        let dtype = match (code, itemsize) {
            (b'f', _) => DType::F32,
            (b'd', _) => DType::F64,
            (b'e', _) => DType::F16,
            (b'b', _) => DType::I8,
            (b'B', _) => DType::U8,
            (b'i' | b'l' | b'q', 4) => DType::I32,
            (b'i' | b'l' | b'q', 8) => DType::I64,
            _ => return None,
        };
        (dtype.size() == itemsize).then_some(dtype)
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// Stable small index carried in message signatures.
    pub fn index(self) -> u8 {
        DType::ALL.iter().position(|&d| d == self).unwrap() as u8
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Prod,
    Min,
    Max,
    /// Sum, then divided by the number of ranks (floats only).
    Avg,
    Band,
    Bor,
    Bxor,
}

impl ReduceOp {
    pub const ALL: [ReduceOp; 8] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::Band,
        ReduceOp::Bor,
        ReduceOp::Bxor,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::Band => "band",
            ReduceOp::Bor => "bor",
            ReduceOp::Bxor => "bxor",
        }
    }

    pub fn from_name(name: &str) -> Result<ReduceOp, DTypeError> {
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == name)
            .ok_or_else(|| DTypeError::UnknownOp(name.to_string()))
    }

    pub fn index(self) -> u8 {
        ReduceOp::ALL.iter().position(|&o| o == self).unwrap() as u8
    }

    /// Rejects combinations that have no meaning (avg of integers, bitwise of floats).
    pub fn check(self, dtype: DType) -> Result<(), DTypeError> {
        let bitwise = matches!(self, ReduceOp::Band | ReduceOp::Bor | ReduceOp::Bxor);
        if (bitwise && dtype.is_float()) || (self == ReduceOp::Avg && !dtype.is_float()) {
            return Err(DTypeError::OpForDType { op: self, dtype });
        }
        Ok(())
    }

    /// Whether reducing `dtype` values of `ranks` ranks gives the same bits
    /// in any order and grouping, so that any algorithm gives the same
    /// result. Integers wrap, and wrapping sums and products, min, max and
    /// the bitwise ops are associative and commutative. Floats round at each
    /// step, so grouping matters from 3 ranks; at 2 every element is one
    /// operation of two values, and IEEE addition and multiplication
    /// commute (but for which of two NaNs' payloads survives). Float min and
    /// max do not: `min(+0, -0)` keeps whichever came first, as does a NaN
    /// against a number.
    pub fn same_bits_in_any_order(self, dtype: DType, ranks: usize) -> bool {
        !dtype.is_float()
            || (ranks <= 2 && matches!(self, ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Avg))
    }

    /// The op the pairwise kernels apply: avg combines by summing.
    pub fn combining(self) -> ReduceOp {
        if self == ReduceOp::Avg {
            ReduceOp::Sum
        } else {
            self
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A dtype or op name that does not parse, or an op that has no meaning
/// for a dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DTypeError {
    UnknownDType(String),
    UnknownOp(String),
    /// Avg of integers, or a bitwise op of floats.
    OpForDType {
        op: ReduceOp,
        dtype: DType,
    },
}

impl fmt::Display for DTypeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DTypeError::UnknownDType(name) => {
                let valid: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
                write!(
                    f,
                    "unsupported dtype '{name}'; supported: {}",
                    valid.join(", ")
                )
            }
            DTypeError::UnknownOp(name) => {
                let valid: Vec<&str> = ReduceOp::ALL.iter().map(|o| o.name()).collect();
                write!(
                    f,
                    "unknown reduction op '{name}'; valid: {}",
                    valid.join(", ")
                )
            }
            DTypeError::OpForDType {
                op: ReduceOp::Avg,
                dtype,
            } => write!(f, "op 'avg' needs a floating-point dtype, got {dtype}"),
            DTypeError::OpForDType { op, dtype } => {
                write!(f, "op '{op}' needs an integer dtype, got {dtype}")
            }
        }
    }
}

impl std::error::Error for DTypeError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_name_the_types_numpy_names() {
        let cases: [(&[u8], usize, Option<DType>); 14] = [
            (b"f", 4, Some(DType::F32)),
            (b"<f", 4, Some(DType::F32)),
            (b"=d", 8, Some(DType::F64)),
            (b"@e", 2, Some(DType::F16)),
            (b"b", 1, Some(DType::I8)),
            (b"B", 1, Some(DType::U8)),
            (b"i", 4, Some(DType::I32)),
            (b"l", 8, Some(DType::I64)),
            (b"q", 8, Some(DType::I64)),
            (b"l", 4, Some(DType::I32)),
            (b">f", 4, None), // not this machine's byte order
            (b"h", 2, None),  // int16: no such type in shoal
            (b"?", 1, None),  // bool
            (b"Zf", 8, None), // complex64
        ];
        for (format, itemsize, want) in cases {
            let text = String::from_utf8_lossy(format);
            assert_eq!(DType::of_buffer_format(format, itemsize), want, "{text}");
        }
        assert_eq!(
            DType::of_buffer_format(b"f", 8),
            None,
            "a size that is not the type's"
        );
    }
}
