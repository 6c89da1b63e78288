//! Reduction kernels: `dst = dst (op) src` over raw bytes of one dtype.
//!
//! The loops are written over typed slices so the compiler vectorises them;
//! half-precision types are widened to f32 in small blocks, combined, and
//! rounded back, which is what frameworks do on CPUs without native f16 math.

use crate::dtype::{DType, ReduceOp};
use half::{bf16, f16};

/// Elements per block when a slow path (unaligned memory, half precision)
/// stages data through stack buffers.
const BLOCK: usize = 256;

/// Element types with the arithmetic the ops need.
trait Elem: Copy + Default + PartialOrd {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn bitwise(self, o: Self, op: ReduceOp) -> Self;
}

macro_rules! float_elem {
    ($t:ty) => {
        impl Elem for $t {
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn bitwise(self, _: Self, _: ReduceOp) -> Self {
                unreachable!("bitwise ops are rejected for floats before reaching a kernel")
            }
        }
    };
}

macro_rules! int_elem {
    ($t:ty) => {
        impl Elem for $t {
            // Integers wrap on overflow, like numpy and MPI implementations.
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn bitwise(self, o: Self, op: ReduceOp) -> Self {
                match op {
                    ReduceOp::Band => self & o,
                    ReduceOp::Bor => self | o,
                    _ => self ^ o,
                }
            }
        }
    };
}

float_elem!(f32);
float_elem!(f64);
int_elem!(i8);
int_elem!(u8);
int_elem!(i32);
int_elem!(i64);

/// One loop per op so each body is a single vectorisable expression.
fn combine<T: Elem>(op: ReduceOp, dst: &mut [T], src: &[T]) {
    let pairs = dst.iter_mut().zip(src);
    match op.combining() {
        ReduceOp::Sum => pairs.for_each(|(d, &s)| *d = d.add(s)),
        ReduceOp::Prod => pairs.for_each(|(d, &s)| *d = d.mul(s)),
        ReduceOp::Min => pairs.for_each(|(d, &s)| {
            if s < *d {
                *d = s
            }
        }),
        ReduceOp::Max => pairs.for_each(|(d, &s)| {
            if s > *d {
                *d = s
            }
        }),
        bit => pairs.for_each(|(d, &s)| *d = d.bitwise(s, bit)),
    }
}

/// Runs `f` over `dst`/`src` viewed as `[T]`, staging through aligned blocks
/// when either pointer is not aligned for `T`.
fn with_typed<T: Elem>(dst: &mut [u8], src: &[u8], f: impl Fn(&mut [T], &[T])) {
    let size = std::mem::size_of::<T>();
    let n = dst.len() / size;
    let aligned = |p: *const u8| (p as usize).is_multiple_of(std::mem::align_of::<T>());
    if aligned(dst.as_ptr()) && aligned(src.as_ptr()) {
        // SAFETY: both pointers are aligned for T and hold n*size bytes; every bit
        // pattern is a valid value of the numeric types used here.
        let (d, s) = unsafe {
            (
                std::slice::from_raw_parts_mut(dst.as_mut_ptr() as *mut T, n),
                std::slice::from_raw_parts(src.as_ptr() as *const T, n),
            )
        };
        return f(d, s);
    }
    let mut d = [T::default(); BLOCK];
    let mut s = [T::default(); BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let bytes = start * size..(start + len) * size;
        // SAFETY: the byte ranges hold exactly len values of T; copies are unaligned-safe.
        unsafe {
            copy_bytes(&dst[bytes.clone()], d.as_mut_ptr() as *mut u8);
            copy_bytes(&src[bytes.clone()], s.as_mut_ptr() as *mut u8);
        }
        f(&mut d[..len], &s[..len]);
        // SAFETY: d holds len initialised values, the destination range len*size bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                d.as_ptr() as *const u8,
                dst[bytes].as_mut_ptr(),
                len * size,
            )
        };
    }
}

unsafe fn copy_bytes(from: &[u8], to: *mut u8) {
    std::ptr::copy_nonoverlapping(from.as_ptr(), to, from.len());
}

/// Half-precision types combined in f32 and rounded back once per step.
trait Half: Copy + Default {
    fn widen(self) -> f32;
    fn narrow(v: f32) -> Self;
}
impl Half for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> Self {
        f16::from_f32(v)
    }
}
impl Half for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

fn combine_half<H: Half>(op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    let n = dst.len() / 2;
    let mut d = [0f32; BLOCK];
    let mut s = [0f32; BLOCK];
    for start in (0..n).step_by(BLOCK) {
        let len = BLOCK.min(n - start);
        let bytes = 2 * start..2 * (start + len);
        let pairs = dst[bytes.clone()]
            .chunks_exact(2)
            .zip(src[bytes.clone()].chunks_exact(2));
        for ((dv, sv), (db, sb)) in d.iter_mut().zip(s.iter_mut()).zip(pairs) {
            *dv = load_half::<H>(db).widen();
            *sv = load_half::<H>(sb).widen();
        }
        combine(op, &mut d[..len], &s[..len]);
        for (v, b) in d[..len].iter().zip(dst[bytes].chunks_exact_mut(2)) {
            store_half(H::narrow(*v), b);
        }
    }
}

fn load_half<H: Half>(b: &[u8]) -> H {
    // SAFETY: b has 2 bytes; f16/bf16 are 2-byte plain values.
    unsafe { std::ptr::read_unaligned(b.as_ptr() as *const H) }
}

fn store_half<H: Half>(v: H, b: &mut [u8]) {
    // SAFETY: b has 2 bytes.
    unsafe { std::ptr::write_unaligned(b.as_mut_ptr() as *mut H, v) }
}

/// `dst = dst (op) src`, element-wise. Both slices must have the same length,
/// a multiple of the element size. `op` must be valid for `dtype`
/// (see [`ReduceOp::check`]); avg combines as sum.
pub fn reduce_into(dtype: DType, op: ReduceOp, dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "reduce_into: length mismatch");
    assert_eq!(dst.len() % dtype.size(), 0, "reduce_into: partial element");
    match dtype {
        DType::F32 => with_typed::<f32>(dst, src, |d, s| combine(op, d, s)),
        DType::F64 => with_typed::<f64>(dst, src, |d, s| combine(op, d, s)),
        DType::I8 => with_typed::<i8>(dst, src, |d, s| combine(op, d, s)),
        DType::U8 => with_typed::<u8>(dst, src, |d, s| combine(op, d, s)),
        DType::I32 => with_typed::<i32>(dst, src, |d, s| combine(op, d, s)),
        DType::I64 => with_typed::<i64>(dst, src, |d, s| combine(op, d, s)),
        DType::F16 => combine_half::<f16>(op, dst, src),
        DType::BF16 => combine_half::<bf16>(op, dst, src),
    }
}

/// Divides every element by `divisor` (the last step of avg; floats only).
pub fn divide(dtype: DType, buf: &mut [u8], divisor: usize) {
    let q = divisor as f64;
    match dtype {
        DType::F32 => map_typed::<f32>(buf, |v| (v as f64 / q) as f32),
        DType::F64 => map_typed::<f64>(buf, |v| v / q),
        DType::F16 => map_half::<f16>(buf, |v| (v as f64 / q) as f32),
        DType::BF16 => map_half::<bf16>(buf, |v| (v as f64 / q) as f32),
        other => panic!("divide: {other} is not a floating-point dtype"),
    }
}

fn map_typed<T: Copy>(buf: &mut [u8], f: impl Fn(T) -> T) {
    let size = std::mem::size_of::<T>();
    for chunk in buf.chunks_exact_mut(size) {
        // SAFETY: chunk has size_of::<T>() bytes; unaligned access is used.
        unsafe {
            let p = chunk.as_mut_ptr() as *mut T;
            p.write_unaligned(f(p.read_unaligned()));
        }
    }
}

fn map_half<H: Half>(buf: &mut [u8], f: impl Fn(f32) -> f32) {
    for chunk in buf.chunks_exact_mut(2) {
        let v = load_half::<H>(chunk).widen();
        store_half(H::narrow(f(v)), chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
        let n = std::mem::size_of_val(v);
        // SAFETY: reading plain numeric values as bytes.
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n).to_vec() }
    }

    fn typed<T: Copy + Default>(b: &[u8]) -> Vec<T> {
        let mut out = vec![T::default(); b.len() / std::mem::size_of::<T>()];
        // SAFETY: out has exactly b.len() bytes.
        unsafe { copy_bytes(b, out.as_mut_ptr() as *mut u8) };
        out
    }

    #[test]
    fn f32_ops() {
        let a = [1.0f32, -2.0, 3.5, 7.0];
        let b = [2.0f32, 5.0, -1.0, 7.0];
        for (op, want) in [
            (ReduceOp::Sum, [3.0f32, 3.0, 2.5, 14.0]),
            (ReduceOp::Prod, [2.0, -10.0, -3.5, 49.0]),
            (ReduceOp::Min, [1.0, -2.0, -1.0, 7.0]),
            (ReduceOp::Max, [2.0, 5.0, 3.5, 7.0]),
        ] {
            let mut d = bytes(&a);
            reduce_into(DType::F32, op, &mut d, &bytes(&b));
            assert_eq!(typed::<f32>(&d), want, "{op}");
        }
    }

    #[test]
    fn unaligned_matches_aligned() {
        let a: Vec<i32> = (0..1000).collect();
        let b: Vec<i32> = (0..1000).map(|x| x * 3 - 7).collect();
        let mut d = vec![0u8; 4001];
        d[1..].copy_from_slice(&bytes(&a));
        let mut s = vec![0u8; 4001];
        s[1..].copy_from_slice(&bytes(&b));
        reduce_into(DType::I32, ReduceOp::Bxor, &mut d[1..], &s[1..]);
        let want: Vec<i32> = a.iter().zip(&b).map(|(x, y)| x ^ y).collect();
        assert_eq!(typed::<i32>(&d[1..]), want);
    }

    #[test]
    fn half_sums_in_f32() {
        let a: Vec<f16> = (0..600).map(|i| f16::from_f32(i as f32 * 0.5)).collect();
        let mut d = bytes(&a);
        reduce_into(DType::F16, ReduceOp::Sum, &mut d, &bytes(&a));
        let got = typed::<f16>(&d);
        for (i, v) in got.iter().enumerate() {
            assert_eq!(v.to_f32(), i as f32, "element {i}");
        }
    }

    #[test]
    fn integer_sum_wraps() {
        let mut d = bytes(&[250u8]);
        reduce_into(DType::U8, ReduceOp::Sum, &mut d, &bytes(&[10u8]));
        assert_eq!(d, [4]);
    }

    #[test]
    fn avg_divides() {
        let mut d = bytes(&[3.0f64, 9.0]);
        divide(DType::F64, &mut d, 3);
        assert_eq!(typed::<f64>(&d), [1.0, 3.0]);
    }

    /// `parts` reduced left to right: `((p0 op p1) op p2) ...`.
    fn folded(dtype: DType, op: ReduceOp, parts: &[&[u8]]) -> Vec<u8> {
        let mut acc = parts[0].to_vec();
        for p in &parts[1..] {
            reduce_into(dtype, op, &mut acc, p);
        }
        acc
    }

    /// `count` values of `dtype` from every bit pattern, but NaNs (an
    /// addition of two keeps either's payload): signed zeros, infinities
    /// and subnormals among them.
    fn any_values(dtype: DType, count: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        let mut out = Vec::with_capacity(count * dtype.size());
        for _ in 0..count {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let specials = [0u64, 1 << (dtype.size() * 8 - 1)]; // +0, -0
            let bits = if x.is_multiple_of(8) {
                specials[(x >> 3) as usize % 2]
            } else {
                x
            };
            let (le, zero) = (bits.to_le_bytes(), [0u8; 8]);
            let v = &le[..dtype.size()];
            let nan = match dtype {
                DType::F32 => f32::from_le_bytes(v.try_into().unwrap()).is_nan(),
                DType::F64 => f64::from_le_bytes(v.try_into().unwrap()).is_nan(),
                DType::F16 => f16::from_le_bytes(v.try_into().unwrap()).is_nan(),
                DType::BF16 => bf16::from_le_bytes(v.try_into().unwrap()).is_nan(),
                _ => false,
            };
            out.extend_from_slice(if nan { &zero[..dtype.size()] } else { v });
        }
        out
    }

    #[test]
    fn reductions_claimed_exact_give_the_same_bits_in_any_order() {
        for dtype in DType::ALL {
            let [a, b, c] = [1, 2, 3].map(|seed| any_values(dtype, 4096, seed * 0x9e37_79b9));
            for op in ReduceOp::ALL
                .into_iter()
                .filter(|op| op.check(dtype).is_ok())
            {
                if op.same_bits_in_any_order(dtype, 2) {
                    let ab = folded(dtype, op, &[&a, &b]);
                    assert_eq!(ab, folded(dtype, op, &[&b, &a]), "{op} of {dtype}, 2 ranks");
                }
                if op.same_bits_in_any_order(dtype, 3) {
                    let want = folded(dtype, op, &[&a, &b, &c]);
                    let bc = folded(dtype, op, &[&b, &c]);
                    for order in [
                        [&a, &c, &b],
                        [&b, &a, &c],
                        [&b, &c, &a],
                        [&c, &a, &b],
                        [&c, &b, &a],
                    ] {
                        let order = order.map(Vec::as_slice);
                        assert_eq!(want, folded(dtype, op, &order), "{op} of {dtype}, 3 ranks");
                    }
                    assert_eq!(
                        want,
                        folded(dtype, op, &[&a, &bc]),
                        "{op} of {dtype}, grouped"
                    );
                }
            }
        }
    }

    #[test]
    fn reductions_not_claimed_exact_do_change_with_the_order() {
        // Float min keeps whichever zero came first.
        let (pos, neg) = (bytes(&[0.0f32]), bytes(&[-0.0f32]));
        assert!(!ReduceOp::Min.same_bits_in_any_order(DType::F32, 2));
        assert_ne!(
            folded(DType::F32, ReduceOp::Min, &[&pos, &neg]),
            folded(DType::F32, ReduceOp::Min, &[&neg, &pos])
        );
        // A float sum of 3 rounds differently as it is grouped.
        let [big, minus_big, one] = [1e8f32, -1e8, 1.0].map(|v| bytes(&[v]));
        assert!(!ReduceOp::Sum.same_bits_in_any_order(DType::F32, 3));
        assert_ne!(
            folded(DType::F32, ReduceOp::Sum, &[&big, &minus_big, &one]),
            folded(DType::F32, ReduceOp::Sum, &[&big, &one, &minus_big])
        );
    }

    #[test]
    fn op_dtype_rules() {
        assert!(ReduceOp::Avg.check(DType::I32).is_err());
        assert!(ReduceOp::Band.check(DType::F32).is_err());
        assert!(ReduceOp::Bxor.check(DType::U8).is_ok());
        assert!(DType::from_name("complex64")
            .unwrap_err()
            .to_string()
            .contains("float32"));
        // The typed errors keep their messages.
        assert_eq!(
            ReduceOp::Avg.check(DType::I32).unwrap_err().to_string(),
            "op 'avg' needs a floating-point dtype, got int32"
        );
        assert_eq!(
            ReduceOp::Band.check(DType::F32).unwrap_err().to_string(),
            "op 'band' needs an integer dtype, got float32"
        );
        assert!(ReduceOp::from_name("mean")
            .unwrap_err()
            .to_string()
            .starts_with("unknown reduction op 'mean'; valid: sum, prod"));
    }
}
