//! The implicit random generator behind `Tensor::rand`, `randn` and
//! `randint`: one global xoshiro256** state (seeded through splitmix64, as
//! its authors recommend) behind a mutex. The default seed is 0, so a program
//! draws the same numbers on every run; `nx::seed` restarts the stream.
//!
//! Draws are row-major and sequential: with one seed, the same calls in the
//! same order give the same tensors. These are concrete tensors made on the
//! host, not primitives; for randomness under transformations use explicit
//! keys.

use crate::dtype::{DType, Element};
use crate::tensor::Tensor;
use std::sync::{Mutex, MutexGuard};

/// xoshiro256** (Blackman and Vigna, 2018).
struct Xoshiro256 {
    s: [u64; 4],
}

impl Xoshiro256 {
    /// The state filled by four outputs of splitmix64 started at `seed`.
    const fn from_seed(seed: u64) -> Xoshiro256 {
        let mut x = seed;
        let mut s = [0u64; 4];
        let mut i = 0;
        while i < 4 {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            s[i] = z ^ (z >> 31);
            i += 1;
        }
        Xoshiro256 { s }
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let out = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        out
    }

    /// Uniform on `[0, 1)` with `bits` random bits: `k / 2^bits`.
    fn unit(&mut self, bits: u32) -> f64 {
        (self.next_u64() >> (64 - bits)) as f64 * (-(bits as f64)).exp2()
    }

    /// Uniform on `0..range` without bias (Lemire's multiply-and-reject);
    /// `range` is at most 2^64.
    fn below(&mut self, range: u128) -> u64 {
        if range == 1 << 64 {
            return self.next_u64();
        }
        let r = range as u64;
        let threshold = r.wrapping_neg() % r;
        loop {
            let m = self.next_u64() as u128 * r as u128;
            if m as u64 >= threshold {
                return (m >> 64) as u64;
            }
        }
    }
}

static STATE: Mutex<Xoshiro256> = Mutex::new(Xoshiro256::from_seed(0));

fn state() -> MutexGuard<'static, Xoshiro256> {
    // The state is always valid, even if a holder panicked.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Restarts the implicit generator from `seed` (the default is 0).
///
/// ```
/// use nx::{Tensor, DType};
/// nx::seed(42);
/// let a = Tensor::rand(&[3], DType::F32);
/// nx::seed(42);
/// assert_eq!(a.to_vec::<f32>(), Tensor::rand(&[3], DType::F32).to_vec::<f32>());
/// ```
pub fn seed(seed: u64) {
    *state() = Xoshiro256::from_seed(seed);
}

/// Significand bits of a float dtype (the implicit leading bit included).
fn mantissa_bits(dtype: DType) -> u32 {
    match dtype {
        DType::F16 => 11,
        DType::BF16 => 8,
        DType::F32 => 24,
        _ => 53,
    }
}

fn build<T: Element>(n: usize, mut draw: impl FnMut() -> f64, shape: &[usize]) -> Tensor {
    let data: Vec<T> = (0..n).map(|_| T::from_f64(draw())).collect();
    Tensor::from_vec(data, shape)
}

impl Tensor {
    /// Uniform samples on `[0, 1)` from the implicit generator; float dtypes
    /// only. Each is `k / 2^p` for a random `p`-bit `k`, `p` the dtype's
    /// significand bits, so it is exact in the dtype and never rounds up to 1.
    pub fn rand(shape: &[usize], dtype: DType) -> Tensor {
        if !dtype.is_float() {
            panic!("rand: expects a float dtype, got {dtype}");
        }
        crate::trace::notify_implicit_random("rand");
        let bits = mantissa_bits(dtype);
        let n = crate::shape::numel(shape);
        let mut g = state();
        crate::with_dtype!(dtype, T => build::<T>(n, || g.unit(bits), shape))
    }

    /// Standard normal samples from the implicit generator (Box-Muller in
    /// f64, rounded to the dtype); float dtypes only.
    pub fn randn(shape: &[usize], dtype: DType) -> Tensor {
        if !dtype.is_float() {
            panic!("randn: expects a float dtype, got {dtype}");
        }
        crate::trace::notify_implicit_random("randn");
        let n = crate::shape::numel(shape);
        let mut g = state();
        let mut spare: Option<f64> = None;
        let mut draw = || {
            if let Some(z) = spare.take() {
                return z;
            }
            // u1 in (0, 1] keeps the logarithm finite.
            let u1 = 1.0 - g.unit(53);
            let u2 = g.unit(53);
            let r = (-2.0 * u1.ln()).sqrt();
            let t = std::f64::consts::TAU * u2;
            spare = Some(r * t.sin());
            r * t.cos()
        };
        crate::with_dtype!(dtype, T => build::<T>(n, &mut draw, shape))
    }

    /// Integers drawn uniformly from `low..high` by the implicit generator;
    /// integer dtypes only, and both ends must fit the dtype.
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let d = Tensor::randint(1, 7, &[100], DType::I32).to_vec::<i32>();
    /// assert!(d.iter().all(|v| (1..7).contains(v)));
    /// ```
    pub fn randint(low: i64, high: i64, shape: &[usize], dtype: DType) -> Tensor {
        if !dtype.is_int() {
            panic!("randint: expects an integer dtype, got {dtype}");
        }
        if low >= high {
            panic!("randint: needs low < high, got low={low}, high={high}");
        }
        let bits = 8 * dtype.size_in_bytes() as u32;
        let (min, max) = if dtype.is_signed_int() {
            (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
        } else {
            (0i128, (1i128 << bits) - 1)
        };
        if (low as i128) < min || (high as i128 - 1) > max {
            panic!("randint: the range [{low}, {high}) does not fit in {dtype} (which holds {min}..={max})");
        }
        crate::trace::notify_implicit_random("randint");
        let range = (high as i128 - low as i128) as u128;
        let n = crate::shape::numel(shape);
        let mut g = state();
        crate::with_dtype!(dtype, T => {
            let data: Vec<T> = (0..n)
                .map(|_| T::from_i128(low as i128 + g.below(range) as i128))
                .collect();
            Tensor::from_vec(data, shape)
        })
    }
}
