//! Payload element conversions: the switch's accumulators and the client's
//! encoding of user buffers. One place knows how each wire type is laid out.
//!
//! Accumulators are `u32` words: f32 bits for the float wires (f16 and bf16
//! are summed in f32, as PANAMA's float aggregation does) and i32 bits for the
//! int32 wire, whose block exponent travels beside the words.

use half::{bf16, f16};

use crate::proto::{WireOp, WireType};
use crate::InaDType;

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le16(b: &[u8]) -> u16 {
    u16::from_le_bytes([b[0], b[1]])
}

fn f16_word(e: &[u8]) -> u32 {
    f16::from_bits(le16(e)).to_f32().to_bits()
}

fn bf16_word(e: &[u8]) -> u32 {
    bf16::from_bits(le16(e)).to_f32().to_bits()
}

/// Starts an accumulator from the first contribution. One loop per wire
/// type (no per-element dispatch) so that the compiler vectorizes it.
pub fn load(acc: &mut Vec<u32>, payload: &[u8], wire: WireType) {
    let n = payload.len() / wire.size();
    acc.clear();
    acc.resize(n, 0);
    match wire {
        WireType::F32 | WireType::I32 => {
            for (a, e) in acc.iter_mut().zip(payload.chunks_exact(4)) {
                *a = le32(e);
            }
        }
        WireType::F16 => {
            for (a, e) in acc.iter_mut().zip(payload.chunks_exact(2)) {
                *a = f16_word(e);
            }
        }
        WireType::Bf16 => {
            for (a, e) in acc.iter_mut().zip(payload.chunks_exact(2)) {
                *a = bf16_word(e);
            }
        }
    }
}

/// Rounds `v / 2^s` to nearest; shifting by 32 or more leaves nothing.
fn shift_round(v: i32, s: u32) -> i32 {
    match s {
        0 => v,
        1..=31 => ((v as i64 + (1i64 << (s - 1))) >> s) as i32,
        _ => 0,
    }
}

/// Combines a contribution into an accumulator. For the int32 wire the two
/// sides are first aligned to the larger exponent (the finer one is shifted
/// right, rounding), so members may choose their exponents independently.
/// Returns true when an int32 sum saturated.
pub fn combine(
    acc: &mut [u32],
    acc_exp: &mut i8,
    payload: &[u8],
    exp: i8,
    wire: WireType,
    op: WireOp,
) -> bool {
    match wire {
        WireType::I32 => return combine_i32(acc, acc_exp, payload, exp, op),
        WireType::F32 => combine_f32::<4>(acc, payload, le32, op),
        WireType::F16 => combine_f32::<2>(acc, payload, f16_word, op),
        WireType::Bf16 => combine_f32::<2>(acc, payload, bf16_word, op),
    }
    false
}

/// Combines `N`-byte elements, read as f32 words by `word`, into f32
/// accumulators. The op is chosen once per packet, not per element, so that
/// each loop vectorizes.
#[inline(always)]
fn combine_f32<const N: usize>(
    acc: &mut [u32],
    payload: &[u8],
    word: impl Fn(&[u8]) -> u32 + Copy,
    op: WireOp,
) {
    #[inline(always)]
    fn apply<const N: usize>(
        acc: &mut [u32],
        payload: &[u8],
        word: impl Fn(&[u8]) -> u32,
        f: impl Fn(f32, f32) -> f32,
    ) {
        for (a, e) in acc.iter_mut().zip(payload.chunks_exact(N)) {
            *a = f(f32::from_bits(*a), f32::from_bits(word(e))).to_bits();
        }
    }
    match op {
        WireOp::Sum => apply::<N>(acc, payload, word, |x, y| x + y),
        WireOp::Min => apply::<N>(acc, payload, word, f32::min),
        WireOp::Max => apply::<N>(acc, payload, word, f32::max),
    }
}

fn combine_i32(acc: &mut [u32], acc_exp: &mut i8, payload: &[u8], exp: i8, op: WireOp) -> bool {
    if exp > *acc_exp {
        let s = (exp as i32 - *acc_exp as i32) as u32;
        for a in acc.iter_mut() {
            *a = shift_round(*a as i32, s) as u32;
        }
        *acc_exp = exp;
    }
    let s = (*acc_exp as i32 - exp as i32) as u32;
    let mut overflow = false;
    for (a, e) in acc.iter_mut().zip(payload.chunks_exact(4)) {
        let (x, y) = (*a as i32, shift_round(le32(e) as i32, s));
        let r = match op {
            WireOp::Sum => x.checked_add(y).unwrap_or_else(|| {
                overflow = true;
                x.saturating_add(y)
            }),
            WireOp::Min => x.min(y),
            WireOp::Max => x.max(y),
        };
        *a = r as u32;
    }
    overflow
}

/// Writes an accumulator back in the wire type (f16/bf16 round to nearest).
pub fn store(acc: &[u32], wire: WireType, out: &mut [u8]) {
    match wire {
        WireType::F32 | WireType::I32 => {
            for (o, a) in out.chunks_exact_mut(4).zip(acc) {
                o.copy_from_slice(&a.to_le_bytes());
            }
        }
        WireType::F16 => {
            for (o, a) in out.chunks_exact_mut(2).zip(acc) {
                let h = f16::from_f32(f32::from_bits(*a));
                o.copy_from_slice(&h.to_bits().to_le_bytes());
            }
        }
        WireType::Bf16 => {
            for (o, a) in out.chunks_exact_mut(2).zip(acc) {
                let h = bf16::from_f32(f32::from_bits(*a));
                o.copy_from_slice(&h.to_bits().to_le_bytes());
            }
        }
    }
}

/// Headroom bits so that `members` int32 values of one block cannot overflow.
pub fn headroom_bits(members: usize) -> i32 {
    (usize::BITS - members.max(1).saturating_sub(1).leading_zeros()) as i32
}

/// Block exponent for f32 values with largest magnitude `max_abs`: values are
/// sent as `round(x / 2^e)` using at most `30 - headroom` bits.
fn block_exponent(max_abs: f32, headroom: i32) -> i8 {
    if max_abs == 0.0 || !max_abs.is_finite() {
        return 0;
    }
    // max_abs < 2^ceil_exp
    let ceil_exp = (max_abs.log2().floor() as i32) + 1;
    (ceil_exp - (30 - headroom)).clamp(i8::MIN as i32, i8::MAX as i32) as i8
}

/// Encodes user elements `src` (in `dtype`) into wire elements `out`;
/// returns the block exponent (0 except for f32 sent as int32).
pub fn encode(src: &[u8], dtype: InaDType, wire: WireType, headroom: i32, out: &mut [u8]) -> i8 {
    if dtype == InaDType::F32 && wire == WireType::I32 {
        let vals = src.chunks_exact(4).map(|e| f32::from_bits(le32(e)));
        let max_abs = vals.clone().fold(0f32, |m, v| m.max(v.abs()));
        let exp = block_exponent(max_abs, headroom);
        let scale = (-(exp as f64)).exp2();
        for (o, v) in out.chunks_exact_mut(4).zip(vals) {
            let q = (v as f64 * scale)
                .round()
                .clamp(i32::MIN as f64, i32::MAX as f64) as i32;
            o.copy_from_slice(&q.to_le_bytes());
        }
        return exp;
    }
    out[..src.len()].copy_from_slice(src);
    0
}

/// Decodes a result payload into user elements, dividing by `divisor` (Avg).
pub fn decode(
    payload: &[u8],
    wire: WireType,
    exp: i8,
    dtype: InaDType,
    divisor: Option<u32>,
    dst: &mut [u8],
) {
    match (dtype, wire, divisor) {
        (InaDType::F32, WireType::I32, _) => {
            let scale = (exp as f64).exp2() / divisor.unwrap_or(1) as f64;
            for (d, e) in dst.chunks_exact_mut(4).zip(payload.chunks_exact(4)) {
                let v = (le32(e) as i32) as f64 * scale;
                d.copy_from_slice(&(v as f32).to_le_bytes());
            }
        }
        (_, _, None) | (_, _, Some(1)) => dst.copy_from_slice(payload),
        (InaDType::I32, _, Some(n)) => {
            for (d, e) in dst.chunks_exact_mut(4).zip(payload.chunks_exact(4)) {
                d.copy_from_slice(&((le32(e) as i32) / n as i32).to_le_bytes());
            }
        }
        (_, _, Some(n)) => {
            let mut acc = Vec::new();
            load(&mut acc, payload, wire);
            for a in acc.iter_mut() {
                *a = (f32::from_bits(*a) / n as f32).to_bits();
            }
            store(&acc, wire, dst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int32_blocks_align_exponents() {
        let enc = |vals: &[f32]| {
            let src: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
            let mut out = vec![0u8; src.len()];
            let e = encode(&src, InaDType::F32, WireType::I32, 1, &mut out);
            (out, e)
        };
        let (a, ea) = enc(&[1.5, -2.25]);
        let (b, eb) = enc(&[1000.0, 0.125]);
        let mut acc = Vec::new();
        load(&mut acc, &a, WireType::I32);
        let mut exp = ea;
        assert!(!combine(
            &mut acc,
            &mut exp,
            &b,
            eb,
            WireType::I32,
            WireOp::Sum
        ));
        let mut bytes = vec![0u8; 8];
        store(&acc, WireType::I32, &mut bytes);
        let mut dst = vec![0u8; 8];
        decode(&bytes, WireType::I32, exp, InaDType::F32, None, &mut dst);
        let got: Vec<f32> = dst
            .chunks_exact(4)
            .map(|e| f32::from_bits(le32(e)))
            .collect();
        assert!((got[0] - 1001.5).abs() < 1e-3 && (got[1] + 2.125).abs() < 1e-3);
    }

    #[test]
    fn headroom() {
        assert_eq!(headroom_bits(1), 0);
        assert_eq!(headroom_bits(2), 1);
        assert_eq!(headroom_bits(8), 3);
        assert_eq!(headroom_bits(9), 4);
    }
}
