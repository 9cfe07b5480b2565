//! Shared test support: reference arrays (plain `Vec`s with their own index
//! math, computing in f64 for floats and exactly in i128 for integers),
//! tensor builders, dtype-aware comparison, and the op table.
//!
//! Use from a test file with `mod common;`. The op table is
//! `common::table::all_cases()`; every public operation of nx has entries
//! there, with inputs of each dtype it takes and an independent reference.

#![allow(dead_code)]

pub mod refs;
pub mod table;

use half::{bf16, f16};
use nx::{DType, Element, Tensor};

/// Float dtypes, widest last.
pub const FLOATS: [DType; 4] = [DType::F16, DType::BF16, DType::F32, DType::F64];
pub const SIGNED: [DType; 4] = [DType::I8, DType::I16, DType::I32, DType::I64];
pub const UNSIGNED: [DType; 4] = [DType::U8, DType::U16, DType::U32, DType::U64];
pub const INTS: [DType; 8] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
];
/// Every numeric (non-bool) dtype.
pub const NUMERIC: [DType; 12] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U16,
    DType::U32,
    DType::U64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

/// The elements of a reference array: floats as f64, integers and bools
/// (0/1) exactly as i128.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    F(Vec<f64>),
    I(Vec<i128>),
}

/// A reference array: a dtype tag, a shape and row-major data.
#[derive(Clone, Debug, PartialEq)]
pub struct RefArray {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: Data,
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major strides (in elements) of `shape`.
pub fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// The multi-index of flat position `k` in `shape`.
pub fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for i in (0..shape.len()).rev() {
        let n = shape[i];
        idx[i] = k % n;
        k /= n;
    }
    idx
}

/// The flat position of `idx` in `shape`.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    assert_eq!(idx.len(), shape.len());
    let mut k = 0;
    for (i, &n) in idx.iter().zip(shape) {
        assert!(*i < n, "ravel: index {idx:?} out of shape {shape:?}");
        k = k * n + i;
    }
    k
}

/// Every multi-index of `shape` in row-major order.
pub fn all_indices(shape: &[usize]) -> Vec<Vec<usize>> {
    (0..numel(shape)).map(|k| unravel(k, shape)).collect()
}

/// The number of bits of an integer dtype (1 for bool).
pub fn int_bits(dtype: DType) -> u32 {
    match dtype {
        DType::Bool => 1,
        DType::I8 | DType::U8 => 8,
        DType::I16 | DType::U16 => 16,
        DType::I32 | DType::U32 => 32,
        DType::I64 | DType::U64 => 64,
        d => panic!("int_bits: {d} is not an integer dtype"),
    }
}

/// `v` reduced into the range of integer dtype `dtype` by two's-complement
/// wrapping (bool: non-zero is 1).
pub fn wrap_int(v: i128, dtype: DType) -> i128 {
    if dtype == DType::Bool {
        return (v != 0) as i128;
    }
    let bits = int_bits(dtype);
    let m = 1i128 << bits;
    let mut r = v.rem_euclid(m);
    if dtype.is_signed_int() && r >= m / 2 {
        r -= m;
    }
    r
}

/// Smallest and largest value of an integer dtype.
pub fn int_range(dtype: DType) -> (i128, i128) {
    if dtype == DType::Bool {
        return (0, 1);
    }
    let bits = int_bits(dtype);
    if dtype.is_signed_int() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

impl RefArray {
    /// A float array; the values are kept exactly (comparison rounds them to `dtype`).
    pub fn floats(dtype: DType, shape: &[usize], data: Vec<f64>) -> RefArray {
        assert!(dtype.is_float(), "RefArray::floats with {dtype}");
        assert_eq!(
            data.len(),
            numel(shape),
            "RefArray::floats: length vs shape {shape:?}"
        );
        RefArray {
            dtype,
            shape: shape.to_vec(),
            data: Data::F(data),
        }
    }

    /// An integer or bool array; values wrap into the dtype's range.
    pub fn ints(dtype: DType, shape: &[usize], data: Vec<i128>) -> RefArray {
        assert!(!dtype.is_float(), "RefArray::ints with {dtype}");
        assert_eq!(
            data.len(),
            numel(shape),
            "RefArray::ints: length vs shape {shape:?}"
        );
        RefArray {
            dtype,
            shape: shape.to_vec(),
            data: Data::I(data.into_iter().map(|v| wrap_int(v, dtype)).collect()),
        }
    }

    pub fn bools(shape: &[usize], data: Vec<bool>) -> RefArray {
        RefArray::ints(
            DType::Bool,
            shape,
            data.into_iter().map(|b| b as i128).collect(),
        )
    }

    /// Values given as f64 in any dtype: floats kept, integers must be integral
    /// (then wrapped), bools are `!= 0`.
    pub fn from_f64s(dtype: DType, shape: &[usize], data: Vec<f64>) -> RefArray {
        if dtype.is_float() {
            RefArray::floats(dtype, shape, data)
        } else if dtype == DType::Bool {
            RefArray::bools(shape, data.into_iter().map(|v| v != 0.0).collect())
        } else {
            let ints = data
                .into_iter()
                .map(|v| {
                    assert!(v.fract() == 0.0, "from_f64s: {v} is not an integer");
                    v as i128
                })
                .collect();
            RefArray::ints(dtype, shape, ints)
        }
    }

    /// Reads a tensor's elements (exactly).
    pub fn from_tensor(t: &Tensor) -> RefArray {
        fn read<T: Element>(t: &Tensor) -> RefArray {
            let v = t.to_vec::<T>();
            if T::DTYPE.is_float() {
                RefArray::floats(T::DTYPE, t.shape(), v.iter().map(|x| x.to_f64()).collect())
            } else {
                RefArray::ints(T::DTYPE, t.shape(), v.iter().map(|x| x.to_i128()).collect())
            }
        }
        nx::with_dtype!(t.dtype(), T => read::<T>(t))
    }

    /// A tensor holding these elements (built element by element with the
    /// `half` crate and Rust's own conversions).
    pub fn to_tensor(&self) -> Tensor {
        match &self.data {
            Data::F(v) => make_float(self.dtype, &self.shape, v),
            Data::I(v) => make_int(self.dtype, &self.shape, v),
        }
    }

    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    pub fn is_float(&self) -> bool {
        matches!(self.data, Data::F(_))
    }

    /// The float data (panics on an integer array).
    pub fn f(&self) -> &[f64] {
        match &self.data {
            Data::F(v) => v,
            Data::I(_) => panic!("RefArray::f on a {} array", self.dtype),
        }
    }

    /// The integer data (panics on a float array).
    pub fn i(&self) -> &[i128] {
        match &self.data {
            Data::I(v) => v,
            Data::F(_) => panic!("RefArray::i on a {} array", self.dtype),
        }
    }

    /// Element `k` as f64 (integers converted).
    pub fn get_f64(&self, k: usize) -> f64 {
        match &self.data {
            Data::F(v) => v[k],
            Data::I(v) => v[k] as f64,
        }
    }

    /// All elements as f64.
    pub fn as_f64(&self) -> Vec<f64> {
        (0..self.numel()).map(|k| self.get_f64(k)).collect()
    }

    /// Element at a multi-index, as f64.
    pub fn at(&self, idx: &[usize]) -> f64 {
        self.get_f64(ravel(idx, &self.shape))
    }

    /// A new array of `shape`, element `idx` taken from flat position `src(idx)`
    /// of `self` (or `None`: the fill value `fill`, given as f64).
    pub fn select_or(
        &self,
        shape: &[usize],
        fill: f64,
        src: impl Fn(&[usize]) -> Option<usize>,
    ) -> RefArray {
        let idxs = all_indices(shape);
        match &self.data {
            Data::F(v) => RefArray::floats(
                self.dtype,
                shape,
                idxs.iter().map(|i| src(i).map_or(fill, |k| v[k])).collect(),
            ),
            Data::I(v) => {
                let fill_i = if self.dtype == DType::Bool {
                    (fill != 0.0) as i128
                } else {
                    fill as i128
                };
                RefArray::ints(
                    self.dtype,
                    shape,
                    idxs.iter()
                        .map(|i| src(i).map_or(fill_i, |k| v[k]))
                        .collect(),
                )
            }
        }
    }

    /// A new array of `shape`, element `idx` taken from flat position `src(idx)`.
    pub fn select(&self, shape: &[usize], src: impl Fn(&[usize]) -> usize) -> RefArray {
        self.select_or(shape, 0.0, |i| Some(src(i)))
    }

    /// The same data under a new shape.
    pub fn reshaped(&self, shape: &[usize]) -> RefArray {
        assert_eq!(numel(shape), self.numel());
        RefArray {
            dtype: self.dtype,
            shape: shape.to_vec(),
            data: self.data.clone(),
        }
    }

    /// The same data under another dtype tag of the same kind.
    pub fn retagged(&self, dtype: DType) -> RefArray {
        RefArray {
            dtype,
            shape: self.shape.clone(),
            data: self.data.clone(),
        }
    }
}

fn make_float(dtype: DType, shape: &[usize], v: &[f64]) -> Tensor {
    match dtype {
        DType::F64 => Tensor::from_vec(v.to_vec(), shape),
        DType::F32 => Tensor::from_vec(v.iter().map(|&x| x as f32).collect(), shape),
        DType::F16 => Tensor::from_vec(v.iter().map(|&x| round_f16(x)).collect(), shape),
        DType::BF16 => Tensor::from_vec(v.iter().map(|&x| round_bf16(x)).collect(), shape),
        d => panic!("make_float: {d}"),
    }
}

fn make_int(dtype: DType, shape: &[usize], v: &[i128]) -> Tensor {
    let w: Vec<i128> = v.iter().map(|&x| wrap_int(x, dtype)).collect();
    match dtype {
        DType::Bool => Tensor::from_vec(w.iter().map(|&x| x != 0).collect(), shape),
        DType::U8 => Tensor::from_vec(w.iter().map(|&x| x as u8).collect(), shape),
        DType::U16 => Tensor::from_vec(w.iter().map(|&x| x as u16).collect(), shape),
        DType::U32 => Tensor::from_vec(w.iter().map(|&x| x as u32).collect(), shape),
        DType::U64 => Tensor::from_vec(w.iter().map(|&x| x as u64).collect(), shape),
        DType::I8 => Tensor::from_vec(w.iter().map(|&x| x as i8).collect(), shape),
        DType::I16 => Tensor::from_vec(w.iter().map(|&x| x as i16).collect(), shape),
        DType::I32 => Tensor::from_vec(w.iter().map(|&x| x as i32).collect(), shape),
        DType::I64 => Tensor::from_vec(w.iter().map(|&x| x as i64).collect(), shape),
        d => panic!("make_int: {d}"),
    }
}

/// A tensor of `dtype` from f64 values: floats round to nearest even,
/// integers must be integral (they wrap), bools are `!= 0`.
pub fn tensor(dtype: DType, shape: &[usize], vals: &[f64]) -> Tensor {
    RefArray::from_f64s(dtype, shape, vals.to_vec()).to_tensor()
}

/// A tensor of integer (or bool) `dtype` from exact values (they wrap).
pub fn tensor_i(dtype: DType, shape: &[usize], vals: &[i128]) -> Tensor {
    RefArray::ints(dtype, shape, vals.to_vec()).to_tensor()
}

/// 1-D tensor.
pub fn vector(dtype: DType, vals: &[f64]) -> Tensor {
    tensor(dtype, &[vals.len()], vals)
}

/// `n` deterministic pseudo-random values in `[lo, hi)` (a small LCG, so that
/// test inputs do not depend on nx's generator).
pub fn pseudo_random(seed: u64, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (s >> 11) as f64 / (1u64 << 53) as f64;
            lo + (hi - lo) * u
        })
        .collect()
}

/// `n` deterministic pseudo-random integers in `[lo, hi]`.
pub fn pseudo_random_ints(seed: u64, n: usize, lo: i64, hi: i64) -> Vec<f64> {
    pseudo_random(seed, n, 0.0, 1.0)
        .into_iter()
        .map(|u| (lo as f64 + (u * (hi - lo + 1) as f64).floor()).min(hi as f64))
        .collect()
}

// ---------------------------------------------------------------------------
// Rounding to the narrow float types, written here from the IEEE definitions
// (integer arithmetic on the f64 bits), independent of the `half` crate.

/// Rounds `x` to the nearest value with `mant` explicit mantissa bits,
/// minimum normal exponent `emin` and maximum finite exponent `emax`
/// (ties to even, subnormals kept, overflow to infinity). Returns the result as f64.
pub fn round_to_format(x: f64, mant: u32, emin: i32, emax: i32) -> f64 {
    if x.is_nan() || x.is_infinite() || x == 0.0 {
        return x;
    }
    let sign = if x < 0.0 { -1.0 } else { 1.0 };
    let a = x.abs();
    // Exponent of `a` (a = m * 2^e with 1 <= m < 2), exact via the bits.
    let bits = a.to_bits();
    let raw_exp = ((bits >> 52) & 0x7ff) as i32;
    let e = if raw_exp == 0 {
        // f64 subnormal: far below any narrow format's range.
        -1075
    } else {
        raw_exp - 1023
    };
    // Quantum (ulp) of the target format at this exponent.
    let q_exp = e.max(emin) - mant as i32;
    // a / 2^q_exp as an exact integer plus remainder: work with the f64
    // mantissa as an integer.
    let (m_int, m_exp) = if raw_exp == 0 {
        (bits & ((1u64 << 52) - 1), -1074)
    } else {
        ((bits & ((1u64 << 52) - 1)) | (1u64 << 52), raw_exp - 1075)
    };
    // a = m_int * 2^m_exp; we want round(a / 2^q_exp).
    let shift = q_exp - m_exp;
    let rounded: u128 = if shift <= 0 {
        (m_int as u128) << (-shift) as u32
    } else if shift >= 120 {
        0
    } else {
        let m = m_int as u128;
        let s = shift as u32;
        let q = m >> s;
        let rem = m & ((1u128 << s) - 1);
        let half = 1u128 << (s - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    let r = rounded as f64 * 2f64.powi(q_exp);
    let max = (2.0 - 2f64.powi(-(mant as i32))) * 2f64.powi(emax);
    if r > max {
        return sign * f64::INFINITY;
    }
    sign * r
}

/// Round to nearest even into f16's value set (as f64).
pub fn round_to_f16(x: f64) -> f64 {
    round_to_format(x, 10, -14, 15)
}

/// Round to nearest even into bf16's value set (as f64).
pub fn round_to_bf16(x: f64) -> f64 {
    round_to_format(x, 7, -126, 127)
}

/// Round to nearest even into f32's value set (as f64).
pub fn round_to_f32(x: f64) -> f64 {
    round_to_format(x, 23, -126, 127)
}

/// An `f16` holding `x` rounded to nearest even (via this file's rounding;
/// the result is exactly representable, so the `half` conversion is exact).
pub fn round_f16(x: f64) -> f16 {
    let r = round_to_f16(x);
    let h = f16::from_f64(r);
    if !r.is_nan() {
        assert_eq!(h.to_f64(), r, "round_f16: {x} -> {r} is not exact in f16");
    }
    h
}

pub fn round_bf16(x: f64) -> bf16 {
    let r = round_to_bf16(x);
    let h = bf16::from_f64(r);
    if !r.is_nan() {
        assert_eq!(h.to_f64(), r, "round_bf16: {x} -> {r} is not exact in bf16");
    }
    h
}

/// `x` rounded into `dtype`'s value set (floats only).
pub fn round_to_dtype(x: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F64 => x,
        DType::F32 => round_to_f32(x),
        DType::F16 => round_to_f16(x),
        DType::BF16 => round_to_bf16(x),
        d => panic!("round_to_dtype: {d}"),
    }
}

/// Position of `x` on the ordered line of `dtype`'s values (so that the
/// difference of two is their distance in ulps). `x` must be in the value set.
pub fn ulp_index(x: f64, dtype: DType) -> i128 {
    let (mant, emin) = match dtype {
        DType::F64 => (52, -1022),
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        DType::BF16 => (7, -126),
        d => panic!("ulp_index: {d}"),
    };
    if x.is_infinite() {
        // One step past the largest finite value.
        let emax: i32 = match dtype {
            DType::F64 => 1023,
            DType::F32 | DType::BF16 => 127,
            _ => 15,
        };
        let max = (2.0 - 2f64.powi(-mant)) * 2f64.powi(emax);
        let i = ulp_index(max, dtype) + 1;
        return if x > 0.0 { i } else { -i };
    }
    if dtype == DType::F64 {
        let b = x.abs().to_bits() as i128;
        return if x < 0.0 { -b } else { b };
    }
    let a = x.abs();
    // Count: subnormal steps are 2^(emin - mant); each binade has 2^mant steps.
    let sub_q = 2f64.powi(emin - mant);
    let idx: i128 = if a < 2f64.powi(emin) {
        (a / sub_q) as i128
    } else {
        let e = a.log2().floor() as i32;
        let e = if 2f64.powi(e) > a {
            e - 1
        } else if 2f64.powi(e + 1) <= a {
            e + 1
        } else {
            e
        };
        let base = ((e - emin + 1) as i128) << mant;
        let frac = ((a / 2f64.powi(e) - 1.0) * 2f64.powi(mant)) as i128;
        base + frac
    };
    if x < 0.0 {
        -idx
    } else {
        idx
    }
}

// ---------------------------------------------------------------------------
// Comparison.

/// How close a float result must be to the reference: it passes when within
/// `ulps` units in the last place of its dtype (after rounding the reference
/// to that dtype), or within `rtol * |expected|`, or within `atol`.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub ulps: f64,
    pub rtol: f64,
    pub atol: f64,
    /// `+0` and `-0` must match.
    pub signed_zeros: bool,
}

impl Tol {
    /// The default tolerance of `dtype`, scaled by `scale`.
    pub fn for_dtype(dtype: DType, scale: f64) -> Tol {
        let (ulps, rtol, atol) = match dtype {
            DType::F64 => (8.0, 1e-12, 1e-300),
            DType::F32 => (4.0, 1e-6, 1e-38),
            DType::F16 => (2.0, 0.0, 0.0),
            DType::BF16 => (2.0, 0.0, 0.0),
            _ => (0.0, 0.0, 0.0),
        };
        Tol {
            ulps: ulps * scale,
            rtol: rtol * scale,
            atol: atol * scale,
            signed_zeros: false,
        }
    }
}

/// Checks one float element; `None` when it passes, else a reason.
pub fn check_float(got: f64, expected: f64, dtype: DType, tol: &Tol) -> Option<String> {
    if expected.is_nan() {
        return (!got.is_nan()).then(|| "expected NaN".to_string());
    }
    if got.is_nan() {
        return Some("got NaN".to_string());
    }
    let exp_r = round_to_dtype(expected, dtype);
    if got == exp_r {
        if tol.signed_zeros && got == 0.0 && got.is_sign_negative() != exp_r.is_sign_negative() {
            return Some("sign of zero differs".to_string());
        }
        return None;
    }
    if exp_r.is_infinite() || got.is_infinite() {
        // Infinity is one ulp past the largest finite value.
        let d = (ulp_index(got, dtype) - ulp_index(exp_r, dtype)).abs() as f64;
        return (d > tol.ulps).then(|| format!("{d} ulps (infinity)"));
    }
    let diff = (got - expected).abs();
    if diff <= tol.atol || diff <= tol.rtol * expected.abs() {
        return None;
    }
    let d = (ulp_index(got, dtype) - ulp_index(exp_r, dtype)).abs() as f64;
    if d <= tol.ulps {
        return None;
    }
    Some(format!(
        "off by {d} ulps (rel {:.3e})",
        diff / expected.abs().max(f64::MIN_POSITIVE)
    ))
}

/// Asserts that `got` matches the reference `expected`: same dtype and shape,
/// integers and bools exactly, floats within `tol`.
pub fn assert_matches(got: &Tensor, expected: &RefArray, tol: &Tol, ctx: &str) {
    assert_eq!(
        got.dtype(),
        expected.dtype,
        "{ctx}: dtype {} but the reference has {}",
        got.dtype(),
        expected.dtype
    );
    assert_eq!(
        got.shape(),
        expected.shape.as_slice(),
        "{ctx}: shape {:?} but the reference has {:?}",
        got.shape(),
        expected.shape
    );
    let g = RefArray::from_tensor(got);
    let mut bad = vec![];
    match (&g.data, &expected.data) {
        (Data::I(a), Data::I(b)) => {
            for k in 0..a.len() {
                if a[k] != b[k] {
                    bad.push(format!(
                        "  at {:?}: got {}, expected {}",
                        unravel(k, &expected.shape),
                        a[k],
                        b[k]
                    ));
                }
            }
        }
        (Data::F(a), Data::F(b)) => {
            for k in 0..a.len() {
                if let Some(why) = check_float(a[k], b[k], expected.dtype, tol) {
                    bad.push(format!(
                        "  at {:?}: got {:e}, expected {:e} (rounded {:e}): {why}",
                        unravel(k, &expected.shape),
                        a[k],
                        b[k],
                        round_to_dtype(b[k], expected.dtype)
                    ));
                }
            }
        }
        _ => panic!("{ctx}: data kinds differ"),
    }
    if !bad.is_empty() {
        let n = bad.len();
        bad.truncate(12);
        panic!(
            "{ctx}: {n} of {} elements differ from the reference\n{}",
            expected.numel(),
            bad.join("\n")
        );
    }
}

/// A non-contiguous view with the same shape and elements as `x` (stride 2
/// along a hidden axis, then reversed twice so that strides are negative
/// where possible).
pub fn strided_copy(x: &Tensor) -> Tensor {
    let mut shape = x.shape().to_vec();
    shape.push(2);
    let wide = x.unsqueeze(-1).broadcast_to(&shape).copy();
    let v = wide.narrow(-1, 1, 1).squeeze(-1);
    if v.ndim() == 0 {
        return v;
    }
    let axes: Vec<isize> = (0..v.ndim() as isize).collect();
    v.flip(&axes).copy().flip(&axes)
}

/// A non-contiguous, stride-2 view equal to `x` (no flips).
pub fn gapped_copy(x: &Tensor) -> Tensor {
    let mut shape = x.shape().to_vec();
    shape.push(2);
    let wide = x.unsqueeze(-1).broadcast_to(&shape).copy();
    wide.narrow(-1, 0, 1).squeeze(-1)
}
