//! Explicit splittable PRNG keys (JAX's `jax.random`).
//!
//! A key is an ordinary `[2]` `U32` tensor; every sampler is a pure function
//! of its key written as tensor operations, so draws trace, differentiate
//! (reparameterized samples such as `mu + sigma * normal(key)` carry
//! gradients to `mu` and `sigma`) and vectorize: under [`crate::vmap`] a
//! stack of keys (`split(&key, n)`) gives each lane its own draws, while a
//! key the mapped function closes over is a constant of the map and gives
//! every lane the same draws.
//!
//! The generator is Threefry-2x32 with 20 rounds (`nx::Prim::Threefry2x32`),
//! and the streams are JAX's default `threefry2x32` PRNG in partitionable
//! mode (`jax_threefry_partitionable`, the default since JAX 0.5):
//!
//! - `key(seed)` is `[seed >> 32, seed & 0xffffffff]` (JAX's `PRNGKey` with
//!   `jax_enable_x64` for seeds of 2^32 and more);
//! - `split(key, n)[i]` and `fold_in(key, i)` are both the hash of the
//!   counter pair `(0, i)` under `key`;
//! - `bits(key, shape)` hashes the counter pair `(i >> 32, i & 0xffffffff)`
//!   for each row-major flat index `i` of `shape` and XORs the two output
//!   words (64-bit draws, for `F64`, concatenate them instead);
//! - `uniform` keeps the top mantissa-many bits of the draw as the fraction
//!   of a float in [1, 2) and subtracts 1 (so [0, 1) exactly, never 1.0);
//! - `normal` is `sqrt(2) * erf_inv(u)` with `u` uniform in
//!   `(nextafter(-1, 0), 1)` and XLA's erf_inv polynomials (Giles 2010).
//!
//! `key`, `split`, `fold_in`, `bits` and `F32` `uniform` match JAX bit for
//! bit. `F32` `normal` is promised within 2 ulp and is in practice bit for
//! bit with JAX on x86 CPUs: erf_inv is evaluated as XLA's CPU code does it,
//! with its `log1p` and its fused multiply-adds emulated (a correctly rounded
//! `log1p` alone lands up to 3 ulp away). `randint`, `permutation`/`shuffle`,
//! `bernoulli` and `categorical` follow JAX's algorithms too and agree with
//! it on the fixture's draws; `gumbel` and `truncated_normal` go through
//! this crate's `log` and `erf` and agree to a few ulp.
//!
//! Eager draws larger than 16K elements run tile by tile on every core (see
//! `sample`), which makes them several times faster than whole-tensor
//! passes; under a transformation a draw is one expression over the whole
//! tensor. Both give the same numbers.

use nx::{DType, Prim, Tensor};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Threefry's counter pairs for the row-major flat indices `first ..
/// first + len` of a draw, as JAX's `iota_2x32_shape`: `[len, 2]` holding
/// `(i >> 32, i & 0xffffffff)`.
fn counters(first: u64, len: usize) -> Tensor {
    if first + len as u64 <= 1 << 32 {
        // Flat position p of the [len, 2] result holds 0 (p even) or
        // first + p / 2 (p odd): contiguous operations only.
        let p = Tensor::iota(&[2 * len], 0, DType::U32);
        let one = Tensor::ones(&[], DType::U32);
        let i = p.shift_right(&one);
        let i = if first == 0 { i } else { i + first as f64 };
        let odd = p.bitwise_and(&one).equal(&one);
        Tensor::where_(&odd, &i, &Tensor::zeros(&[], DType::U32)).reshape(&[len, 2])
    } else {
        let i = Tensor::iota(&[len], 0, DType::U64) + first as f64;
        let hi = i.shift_right(&i.scalar_like(32.0)).cast(DType::U32);
        Tensor::stack(&[hi, i.cast(DType::U32)], -1)
    }
}

/// Elements per tile of an eager draw (see [`sample`]): the temporaries of
/// a tile (f64 ones too) stay in a core's L2 cache.
const TILE: usize = 1 << 14;

/// A draw of `shape` whose flat elements `first .. first + len` are
/// `part(key, first, len)` (a `[len]` tensor; every sampler is elementwise
/// in the flat index, whose counter it hashes).
///
/// Eager draws (a concrete key, no transformation tracing this thread)
/// larger than a tile run tile by tile on every core: each tile's
/// operations then work on cache-resident tensors, several times faster
/// than whole-tensor passes through memory. The result is the same either
/// way; under a transformation the draw is one `part` over the whole range.
fn sample(
    key: &Tensor,
    shape: &[usize],
    part: impl Fn(&Tensor, u64, usize) -> Tensor + Sync,
) -> Tensor {
    let n: usize = shape.iter().product();
    let eager = nx::trace::depth() == 0 && !key.is_traced();
    if !eager || n <= TILE {
        return part(key, 0, n).reshape(shape);
    }
    let tiles = n.div_ceil(TILE);
    let threads = std::thread::available_parallelism()
        .map_or(1, |t| t.get())
        .min(tiles);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tiles {
                break done;
            }
            let first = t * TILE;
            done.push((t, part(key, first as u64, TILE.min(n - first))));
        }
    };
    let mut parts: Vec<(usize, Tensor)> = std::thread::scope(|s| {
        let helpers: Vec<_> = (1..threads).map(|_| s.spawn(work)).collect();
        let mut parts = work();
        for h in helpers {
            parts.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        parts
    });
    parts.sort_by_key(|(t, _)| *t);
    let parts: Vec<Tensor> = parts.into_iter().map(|(_, p)| p).collect();
    Tensor::concatenate(&parts, 0).reshape(shape)
}

fn check_key(op: &str, key: &Tensor) {
    if key.dtype() != DType::U32 || key.shape() != [2] {
        panic!(
            "rng::{op}: a key is a [2] u32 tensor (rng::key, rng::split), got shape {:?} and dtype {}",
            key.shape(),
            key.dtype()
        );
    }
}

fn check_float(op: &str, dtype: DType) {
    if !dtype.is_float() {
        panic!("rng::{op}: expects a float dtype, got {dtype}");
    }
}

/// The raw generator: Threefry-2x32 (20 rounds) of the `counter` pairs under
/// `key`. `key` is `[2]` (or any shape broadcasting to `counter`'s with a
/// last axis of 2), `counter` is `[..., 2]`, both `U32`; the result is
/// shaped like `counter`. Known answer (Random123): key `(0, 0)`, counter
/// `(0, 0)` gives `(0x6b200159, 0x99ba4efe)`.
pub fn threefry2x32(key: &Tensor, counter: &Tensor) -> Tensor {
    if key.dtype() != DType::U32 || counter.dtype() != DType::U32 {
        panic!(
            "rng::threefry2x32: key and counter must be u32, got {} and {}",
            key.dtype(),
            counter.dtype()
        );
    }
    if key.shape().last() != Some(&2) || counter.shape().last() != Some(&2) {
        panic!(
            "rng::threefry2x32: key and counter need a last axis of 2 (a pair), got shapes {:?} and {:?}",
            key.shape(),
            counter.shape()
        );
    }
    let k = if key.shape() == counter.shape() {
        key.clone()
    } else {
        let shape = nx::shape::broadcast_shapes("rng::threefry2x32", key.shape(), counter.shape());
        if shape != counter.shape() {
            panic!(
                "rng::threefry2x32: key shape {:?} does not broadcast to the counter's {:?}",
                key.shape(),
                counter.shape()
            );
        }
        key.broadcast_to(counter.shape())
    };
    nx::bind(Prim::Threefry2x32, &[&k, counter])
}

/// The two hash words of the flat indices `first .. first + len` under
/// `key`, each `[len]`.
fn hashed(key: &Tensor, first: u64, len: usize) -> (Tensor, Tensor) {
    let out = threefry2x32(key, &counters(first, len));
    (
        out.narrow(-1, 0, 1).squeeze(-1),
        out.narrow(-1, 1, 1).squeeze(-1),
    )
}

/// A key from a seed: `[seed >> 32, seed & 0xffffffff]` (JAX's
/// `jax.random.PRNGKey(seed)`; for seeds of 2^32 and more, with
/// `jax_enable_x64`).
pub fn key(seed: u64) -> Tensor {
    Tensor::from_slice(&[(seed >> 32) as u32, seed as u32], &[2])
}

/// `n` new keys, `[n, 2]`: row `i` is the hash of the counter `(0, i)`
/// (`split(&k, n).get(i)` equals `fold_in(&k, i)`).
pub fn split(key: &Tensor, n: usize) -> Tensor {
    check_key("split", key);
    threefry2x32(key, &counters(0, n))
}

/// A new key derived from `key` and `data`: the hash of the counter
/// `(0, data)`.
pub fn fold_in(key: &Tensor, data: u32) -> Tensor {
    check_key("fold_in", key);
    threefry2x32(key, &Tensor::from_slice(&[0u32, data], &[2]))
}

/// [`fold_in`] with the data a 0-d `I32` or `U32` tensor, which may be
/// traced: inside `shard_map`, `fold_in_index(&key,
/// &sharding::axis_index("data"))` gives each device its own key, equal to
/// `fold_in(&key, i)` on device `i`.
///
/// ```
/// use rune::prelude::*;
/// use rune::rng;
/// let k = rng::key(0);
/// let i = Tensor::scalar(3i32);
/// assert_eq!(rng::fold_in_index(&k, &i).to_vec::<u32>(), rng::fold_in(&k, 3).to_vec::<u32>());
/// ```
pub fn fold_in_index(key: &Tensor, index: &Tensor) -> Tensor {
    check_key("fold_in_index", key);
    if !index.shape().is_empty() || !matches!(index.dtype(), DType::I32 | DType::U32) {
        panic!(
            "fold_in_index: the index must be a 0-d I32 or U32 tensor, got {:?} of shape {:?}",
            index.dtype(),
            index.shape()
        );
    }
    let zero = Tensor::from_slice(&[0u32], &[1]);
    let data = Tensor::concatenate(&[zero, index.cast(DType::U32).reshape(&[1])], 0);
    threefry2x32(key, &data)
}

/// Uniform random `U32` bits of `shape` (JAX's `jax.random.bits`).
pub fn bits(key: &Tensor, shape: &[usize]) -> Tensor {
    check_key("bits", key);
    sample(key, shape, bits32)
}

/// 32 random bits per flat index: the two hash words XORed.
fn bits32(key: &Tensor, first: u64, len: usize) -> Tensor {
    let (a, b) = hashed(key, first, len);
    a.bitwise_xor(&b)
}

/// 64 random bits per flat index (`U64`): the two hash words concatenated
/// (JAX's 64-bit draws).
fn bits64(key: &Tensor, first: u64, len: usize) -> Tensor {
    let (a, b) = hashed(key, first, len);
    let a = a.cast(DType::U64);
    a.shift_left(&a.scalar_like(32.0))
        .bitwise_or(&b.cast(DType::U64))
}

/// Total bits and explicit mantissa bits of a float dtype.
fn float_format(dtype: DType) -> (u32, u32) {
    match dtype {
        DType::F16 => (16, 10),
        DType::BF16 => (16, 7),
        DType::F32 => (32, 23),
        DType::F64 => (64, 52),
        _ => unreachable!("float_format of {dtype}"),
    }
}

/// How many random bits `uniform` draws per element of `dtype`: the width
/// of the dtype, or 8 for formats with fewer than 8 mantissa bits (bf16).
fn draw_bits(dtype: DType) -> u32 {
    let (nbits, nmant) = float_format(dtype);
    if nmant < 8 {
        8
    } else {
        nbits
    }
}

/// The floats in [0, 1) that `uniform` makes of random bits: the top
/// mantissa-many bits of each draw become the fraction of a float in [1, 2),
/// minus 1 (computed exactly as `m * 2^-mantissa_bits`). `bits` is `U64` for
/// `F64` and `U32` otherwise, of which `F16` uses the low 16 bits and `BF16`
/// the low 8 (JAX draws 16 and 8 bits there). The largest draw gives
/// `1 - 2^-mantissa_bits`, never 1.0.
pub fn float_from_bits(bits: &Tensor, dtype: DType) -> Tensor {
    check_float("float_from_bits", dtype);
    let want = if dtype == DType::F64 {
        DType::U64
    } else {
        DType::U32
    };
    if bits.dtype() != want {
        panic!(
            "rng::float_from_bits: {dtype} is made from {want} bits, got {}",
            bits.dtype()
        );
    }
    let (_, nmant) = float_format(dtype);
    let width = draw_bits(dtype);
    let mut b = bits.clone();
    if width < 32 {
        b = b.bitwise_and(&b.scalar_like(((1u64 << width) - 1) as f64));
    }
    let m = b.shift_right(&b.scalar_like((width - nmant) as f64));
    m.cast(dtype) * (-(nmant as f64)).exp2()
}

/// `[0, 1)` floats of `dtype` for the flat indices `first .. first + len`.
fn unit(key: &Tensor, first: u64, len: usize, dtype: DType) -> Tensor {
    let b = if dtype == DType::F64 {
        bits64(key, first, len)
    } else {
        bits32(key, first, len)
    };
    float_from_bits(&b, dtype)
}

/// JAX's `uniform(key, shape, dtype, minval, maxval)` on a range of flat
/// indices: `u * (hi - lo) + lo`; `lo` and `hi` are 0-d tensors of
/// `dtype` with `lo <= hi`. (JAX also takes the maximum with `lo`, a no-op
/// then: `u >= 0` and rounding is monotone.)
fn uniform_range(
    key: &Tensor,
    first: u64,
    len: usize,
    dtype: DType,
    lo: &Tensor,
    hi: &Tensor,
) -> Tensor {
    let u = unit(key, first, len, dtype);
    u * (hi - lo) + lo
}

/// Uniform floats in [0, 1) of `shape` and `dtype` (JAX's
/// `jax.random.uniform`; bit for bit in `F32`). Never exactly 1.0, in any
/// float dtype: the largest value is `1 - 2^-mantissa_bits`.
pub fn uniform(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    check_key("uniform", key);
    check_float("uniform", dtype);
    sample(key, shape, |k, first, len| unit(k, first, len, dtype))
}

fn scalar(value: f64, dtype: DType) -> Tensor {
    Tensor::full(&[], value, dtype)
}

/// `a * b + c` rounded once to `F32`, as the fused multiply-adds XLA's CPU
/// code contracts its multiply-add pairs into: the product (exact) and the
/// sum in `F64`, then one rounding to `F32` (this double rounding differs
/// from a fused one only when the `F64` sum lands exactly halfway between
/// two `F32` values, about once in 2^29).
fn fma32(a: &Tensor, b: &Tensor, c: &Tensor) -> Tensor {
    (a.cast(DType::F64) * b.cast(DType::F64) + c.cast(DType::F64)).cast(DType::F32)
}

/// A 0-d `F64` constant holding the `F32` whose bits are `b`.
fn f32c(b: u32) -> Tensor {
    scalar(f32::from_bits(b) as f64, DType::F64)
}

/// The magnitude below which XLA's `log1p` uses its rational
/// approximation: `sqrt(2) - 1` in `F32`.
const LOG1P_SMALL: u32 = 0x3ED4_13CD;

/// `log1p(x)` for `F32` `x` in (-1, 0] exactly as XLA's CPU backend
/// computes it (so that `normal` draws JAX's numbers): below
/// `sqrt(2) - 1` in magnitude [`log1p_small`], above [`log1p_large`].
/// A correctly rounded log1p differs from this by up to 2 ulp, which
/// erf_inv amplifies past 2 ulp near `|u| = 0.65`.
fn log1p_xla(x: &Tensor) -> Tensor {
    let small = x
        .abs()
        .less(&scalar(f32::from_bits(LOG1P_SMALL) as f64, DType::F32));
    Tensor::where_(&small, &log1p_small(x), &log1p_large(x))
}

/// XLA's `log1p` for `|x| < sqrt(2) - 1`: Cephes' rational approximation
/// `x - x²/2 + x³ P(x)/Q(x)`, every multiply-add pair that LLVM fuses a
/// [`fma32`].
fn log1p_small(x: &Tensor) -> Tensor {
    const DEN: [u32; 6] = [
        0x4171_01AD,
        0x42A6_185B,
        0x435D_C32D,
        0x439A_8CA3,
        0x4358_6D8A,
        0x4270_7982,
    ];
    const NUM: [u32; 6] = [
        0x3EFF_40C5,
        0x40D2_84FA,
        0x41EF_4B9C,
        0x4273_CC76,
        0x4264_73AD,
        0x41A0_5101,
    ];
    let x64 = x.cast(DType::F64);
    let mut den = x + f32::from_bits(DEN[0]) as f64; // fma(1, x, c): one rounding
    for &c in &DEN[1..] {
        den = fma32(&den, &x64, &f32c(c));
    }
    let mut num = fma32(
        &scalar(4.527e-05f32 as f64, DType::F64),
        &x64,
        &f32c(NUM[0]),
    );
    for &c in &NUM[1..] {
        num = fma32(&num, &x64, &f32c(c));
    }
    let x2 = x * x;
    // fma(x², -1/2, x³ P/Q): the product by -1/2 is exact.
    x + ((&x2 * -0.5) + (x * &x2) * (num / den))
}

/// XLA's `log1p` for `|x| >= sqrt(2) - 1`, `x <= 0`: Cephes' `logf` of
/// `y = 1 + x` (`y = m 2^e` with `m` in [0.5, 1), found here by scaling
/// with powers of two, then a polynomial in `m - 1`), every multiply-add
/// pair that LLVM fuses a [`fma32`].
fn log1p_large(x: &Tensor) -> Tensor {
    let f = |v: f32| scalar(v as f64, DType::F32);
    let y = (x + 1.0).maximum(&f(f32::MIN_POSITIVE));
    let (mut m, mut e) = (y.clone(), y.zeros_like());
    for s in [16, 8, 4, 2, 1] {
        // y <= 1: scale up while below 2^-s; m ends in [0.5, 1] for y down
        // to 2^-31 (erf_inv's y = 1 - u² is at least 2^-23 for |u| < 1;
        // |u| = 1 is answered without the logarithm).
        let low = m.less(&f((-(s as f32)).exp2()));
        m = Tensor::where_(&low, &(&m * (s as f64).exp2()), &m);
        e = Tensor::where_(&low, &(&e - s as f64), &e);
    }
    let top = m.equal(&f(1.0));
    let m = Tensor::where_(&top, &f(0.5), &m);
    let e = Tensor::where_(&top, &(&e + 1.0), &e);
    let below = m.less(&f(f32::from_bits(0x3F35_04F3))); // sqrt(1/2)
    let e = &e - Tensor::where_(&below, &f(1.0), &f(0.0));
    let t = (&m - 1.0) + Tensor::where_(&below, &m, &f(0.0));
    let z = &t * &t;
    let t3 = &z * &t;
    let (t64, t364) = (t.cast(DType::F64), t3.cast(DType::F64));
    let p = fma32(
        &fma32(&t64, &f32c(0x3D90_21BB), &f32c(0xBDEB_D1B8)),
        &t64,
        &f32c(0x3DEF_251A),
    );
    let q = fma32(
        &fma32(&t64, &f32c(0xBDFE_5D4F), &f32c(0x3E11_E9BF)),
        &t64,
        &f32c(0xBE2A_AE50),
    );
    let r = fma32(
        &fma32(&t64, &f32c(0x3E4C_CEAC), &f32c(0xBE7F_FFFC)),
        &t64,
        &f32c(0x3EAA_AAAA),
    );
    let poly = fma32(&fma32(&p, &t364, &q), &t364, &r);
    let tail = fma32(&poly, &t364, &(&e * f32::from_bits(0xB95E_8083) as f64));
    // e * ln2_hi is exact, so its fused add is one f32 addition.
    (&t - (&z * 0.5)) + tail + (&e * f32::from_bits(0x3F31_8000) as f64)
}

/// Giles' single-precision erf_inv coefficients, for `w < 5` and `w >= 5`
/// (as published and as XLA spells them; the f32 rounding is the value).
#[allow(clippy::excessive_precision)]
const ERF_INV_LT5: [f32; 9] = [
    2.810_226_36e-08,
    3.432_739_39e-07,
    -3.523_387_7e-06,
    -4.391_506_54e-06,
    0.000_218_580_87,
    -0.001_253_725_03,
    -0.004_177_681_64,
    0.246_640_727,
    1.501_409_41,
];
#[allow(clippy::excessive_precision)]
const ERF_INV_GE5: [f32; 9] = [
    -0.000_200_214_257,
    0.000_100_950_558,
    0.001_349_343_22,
    -0.003_673_428_44,
    0.005_739_507_73,
    -0.007_622_461_3,
    0.009_438_870_47,
    1.001_674_06,
    2.832_976_82,
];

/// XLA's single-precision erf_inv (chlo.erf_inv; Giles, "Approximating the
/// erfinv function", GPU Computing Gems 2010) on an `F32` tensor in
/// [-1, 1], as operations and as XLA's CPU code evaluates it:
/// `w = -log1p(-x²)` ([`log1p_xla`]), a degree-8 polynomial (fused
/// multiply-adds) in `w - 2.5` (`w < 5`) or `sqrt(w) - 3`, times `x`;
/// `±1` give `±inf`.
fn erf_inv_f32(x: &Tensor) -> Tensor {
    let f = |v: f32| scalar(v as f64, DType::F32);
    let l = log1p_xla(&(x * x.neg()));
    let lt = l.greater(&f(-5.0)); // w = -l < 5
    let w = Tensor::where_(&lt, &(-2.5 - &l), &(l.neg().sqrt() - 3.0));
    let w64 = w.cast(DType::F64);
    let coef = |i: usize| {
        Tensor::where_(
            &lt,
            &scalar(ERF_INV_LT5[i] as f64, DType::F64),
            &scalar(ERF_INV_GE5[i] as f64, DType::F64),
        )
    };
    let mut p = Tensor::where_(&lt, &f(ERF_INV_LT5[0]), &f(ERF_INV_GE5[0]));
    for i in 1..ERF_INV_LT5.len() {
        p = fma32(&p, &w64, &coef(i));
    }
    x * Tensor::where_(&x.abs().equal(&f(1.0)), &f(f32::INFINITY), &p)
}

/// XLA's double-precision erf_inv (Giles' three ranges: `w < 6.25`,
/// `w < 16`, beyond), on an `F64` tensor.
#[allow(clippy::excessive_precision)] // Giles' published coefficients, verbatim
fn erf_inv_f64(x: &Tensor) -> Tensor {
    const C1: [f64; 23] = [
        -3.644_412_064_017_819_699_6e-21,
        -1.685_059_138_182_016_589e-19,
        1.285_848_071_525_640_016_7e-18,
        1.115_787_767_802_518_096e-17,
        -1.333_171_662_854_620_906e-16,
        2.097_276_787_596_856_163_7e-17,
        6.637_638_134_358_323_832_5e-15,
        -4.054_566_272_975_206_863_9e-14,
        -8.151_934_197_605_472_152_2e-14,
        2.633_509_315_308_232_297_7e-12,
        -1.297_513_325_345_353_249_8e-11,
        -5.415_412_054_294_627_931_7e-11,
        1.051_212_273_321_532_285e-09,
        -4.112_633_980_346_983_697_6e-09,
        -2.907_036_995_788_200_508_6e-08,
        4.234_787_782_793_240_351_8e-07,
        -1.365_469_200_083_467_864_5e-06,
        -1.388_252_336_278_646_871_9e-05,
        0.000_186_734_208_034_057_135_2,
        -0.000_740_702_534_166_266_975_12,
        -0.006_033_670_871_430_149_053_3,
        0.240_158_182_425_589_616_93,
        1.653_654_562_683_102_735_6,
    ];
    const C2: [f64; 19] = [
        2.213_737_692_177_578_704_9e-09,
        9.075_656_193_888_539_097_9e-08,
        -2.751_740_629_706_454_542_8e-07,
        1.823_962_921_438_922_775_5e-08,
        1.502_740_396_890_982_762_7e-06,
        -4.013_867_526_981_545_969e-06,
        2.923_444_908_995_544_604_4e-06,
        1.247_530_448_167_177_872_3e-05,
        -4.731_822_900_905_573_398_1e-05,
        6.828_485_145_957_317_544_8e-05,
        2.403_111_038_709_789_399_9e-05,
        -0.000_355_037_520_362_847_479_6,
        0.000_953_289_379_737_380_497_03,
        -0.001_688_275_556_023_504_731_3,
        0.002_491_442_096_107_850_806_6,
        -0.003_751_208_507_569_241_210_7,
        0.005_370_914_553_590_063_617,
        1.005_258_967_694_159_233_4,
        3.083_885_610_492_220_763_5,
    ];
    const C3: [f64; 17] = [
        -2.710_992_061_643_857_324_3e-11,
        -2.555_641_816_996_525_205_5e-10,
        1.507_657_269_350_054_808_3e-09,
        -3.789_465_440_126_736_993_7e-09,
        7.615_701_208_078_339_380_4e-09,
        -1.496_002_662_714_924_047_8e-08,
        2.914_795_345_090_108_082_6e-08,
        -6.771_199_775_845_233_949_8e-08,
        2.290_048_222_802_665_471_7e-07,
        -9.929_827_294_231_700_253_9e-07,
        4.526_062_597_223_153_703_9e-06,
        -1.968_177_810_553_167_056_7e-05,
        7.599_527_703_001_776_113_9e-05,
        -0.000_215_030_119_300_444_773_47,
        -0.000_138_719_318_336_231_220_26,
        1.010_300_464_864_534_397_7,
        4.849_906_401_408_584_422_1,
    ];
    let f = |v: f64| scalar(v, DType::F64);
    let w = -(x * x.neg()).log1p();
    let horner = |c: &[f64], t: &Tensor| {
        let mut p = f(c[0]);
        for &ci in &c[1..] {
            p = p * t + ci;
        }
        p
    };
    let s = w.sqrt();
    let p1 = horner(&C1, &(&w - 3.125));
    let p2 = horner(&C2, &(&s - 3.25));
    let p3 = horner(&C3, &(&s - 5.0));
    let p = Tensor::where_(
        &w.less(&f(6.25)),
        &p1,
        &Tensor::where_(&w.less(&f(16.0)), &p2, &p3),
    );
    let result = p * x;
    Tensor::where_(&x.abs().equal(&f(1.0)), &(x * f64::INFINITY), &result)
}

/// The inverse error function in `x`'s float dtype (half types computed in
/// `F32`, as XLA does).
fn erf_inv(x: &Tensor) -> Tensor {
    match x.dtype() {
        DType::F32 => erf_inv_f32(x),
        DType::F64 => erf_inv_f64(x),
        d => erf_inv_f32(&x.cast(DType::F32)).cast(d),
    }
}

/// `nextafter(-1, 0)` in `dtype`: the largest float above -1.
fn above_minus_one(dtype: DType) -> f64 {
    let (_, nmant) = float_format(dtype);
    -(1.0 - (-(nmant as f64) - 1.0).exp2())
}

/// Standard normal floats of `shape` and `dtype` (JAX's
/// `jax.random.normal`: `sqrt(2) * erf_inv(u)`, `u` uniform in
/// `(nextafter(-1, 0), 1)`; within 2 ulp of JAX in `F32`, bit for bit in
/// practice). Differentiable
/// reparameterizations: `mu + sigma * normal(key, ..)`.
pub fn normal(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    check_key("normal", key);
    check_float("normal", dtype);
    sample(key, shape, |k, first, len| {
        let lo = scalar(above_minus_one(dtype), dtype);
        let u = uniform_range(k, first, len, dtype, &lo, &scalar(1.0, dtype));
        erf_inv(&u) * std::f64::consts::SQRT_2
    })
}

/// `true` with probability `p` (JAX's `jax.random.bernoulli`: an `F32`
/// uniform draw below `p`); `p <= 0` gives all `false`, `p >= 1` all `true`.
pub fn bernoulli(key: &Tensor, p: f64, shape: &[usize]) -> Tensor {
    check_key("bernoulli", key);
    sample(key, shape, |k, first, len| {
        unit(k, first, len, DType::F32).less(&scalar(p, DType::F32))
    })
}

/// Uniform integers in `[low, high)`, as `I32` (the dtype of index results,
/// as JAX's default `randint`). JAX's algorithm: two independent 32-bit
/// draws `hi`, `lo` (from `split(key, 2)`) combined as
/// `(hi mod span * (2^32 mod span) + lo mod span) mod span` in wrapping
/// `u32` arithmetic: the bounds are exact, and for spans up to 2^16 this is
/// `(hi * 2^32 + lo) mod span`, whose bias is below `span / 2^64` (above
/// 2^16 the products wrap, as in JAX). `low` may be negative. Panics unless `low < high` and both bounds fit `I32`
/// (`high` up to `2^31`).
pub fn randint(key: &Tensor, low: i64, high: i64, shape: &[usize]) -> Tensor {
    check_key("randint", key);
    if low >= high {
        panic!("rng::randint: needs low < high, got [{low}, {high})");
    }
    if low < i32::MIN as i64 || high > i32::MAX as i64 + 1 {
        panic!(
            "rng::randint: the result is i32, so the range [{low}, {high}) must lie within [{}, {}]",
            i32::MIN,
            i32::MAX as i64 + 1
        );
    }
    let span = (high - low) as u64;
    sample(key, shape, |k, first, len| {
        let ks = split(k, 2);
        let higher = bits32(&ks.get(0), first, len);
        let lower = bits32(&ks.get(1), first, len);
        let offset = if span == 1 << 32 {
            // JAX's span wraps to 0 there and the remainders leave `lower`.
            lower
        } else {
            let span = span as u32;
            let m = (65536u64 % span as u64) as u32;
            let multiplier = m.wrapping_mul(m) % span;
            let r = (higher % span as f64) * multiplier as f64 + (lower % span as f64);
            r % span as f64
        };
        (offset.cast(DType::I64) + low as f64).cast(DType::I32)
    })
}

/// Gumbel(0, 1) floats of `shape` and `dtype` (JAX's `jax.random.gumbel`,
/// low-dynamic-range mode: `-log(-log(u))`, `u` uniform in `[tiny, 1)`).
pub fn gumbel(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    check_key("gumbel", key);
    check_float("gumbel", dtype);
    let tiny = match dtype {
        DType::F16 => (-14.0f64).exp2(),
        DType::F64 => f64::MIN_POSITIVE,
        _ => f32::MIN_POSITIVE as f64,
    };
    sample(key, shape, |k, first, len| {
        let u = uniform_range(
            k,
            first,
            len,
            dtype,
            &scalar(tiny, dtype),
            &scalar(1.0, dtype),
        );
        -(-u.log()).log()
    })
}

/// Samples indices (`I32`) from the categorical distributions whose
/// unnormalized log-probabilities lie along `axis` of `logits` (which
/// disappears): the Gumbel-max trick, `argmax(logits + gumbel, axis)`, as
/// JAX's `jax.random.categorical`.
pub fn categorical(key: &Tensor, logits: &Tensor, axis: isize) -> Tensor {
    check_key("categorical", key);
    check_float("categorical", logits.dtype());
    let a = nx::shape::normalize_axis("rng::categorical", axis, logits.ndim());
    if logits.shape()[a] == 0 {
        panic!("rng::categorical: axis {axis} of the logits is empty");
    }
    let g = gumbel(key, logits.shape(), logits.dtype());
    (g + logits).argmax(a as isize, false)
}

/// `vals` ([n]) reordered by a stable ascending sort on `keys` ([n]
/// `U32`): nx's `argsort` (stable, as JAX's sort), then a gather.
fn sort_by_keys(keys: &Tensor, vals: &Tensor) -> Tensor {
    vals.take(&keys.argsort(0, false), 0)
}

/// A random permutation of `0..n` (`I32`), JAX's `jax.random.permutation(key,
/// n)`: `ceil(3 ln n / ln(2^32 - 1))` rounds, each a stable sort of the
/// current order by fresh 32-bit keys (`bits` of the second half of
/// `split(key, 2)`, the first half carrying on).
pub fn permutation(key: &Tensor, n: usize) -> Tensor {
    check_key("permutation", key);
    if n > i32::MAX as usize {
        panic!("rng::permutation: n = {n} does not fit the i32 result");
    }
    let rounds = (3.0 * (n.max(1) as f64).ln() / (u32::MAX as f64).ln()).ceil() as usize;
    let mut x = Tensor::iota(&[n], 0, DType::I32);
    let mut key = key.clone();
    for _ in 0..rounds {
        let ks = split(&key, 2);
        key = ks.get(0);
        let sort_keys = bits(&ks.get(1), &[n]);
        x = sort_by_keys(&sort_keys, &x);
    }
    x
}

/// `x` with its slices along `axis` in a random order: `x.take(permutation(key,
/// n), axis)` (JAX's `jax.random.permutation(key, x, axis)`). Differentiable
/// in `x`.
pub fn shuffle(key: &Tensor, x: &Tensor, axis: isize) -> Tensor {
    check_key("shuffle", key);
    if x.ndim() == 0 {
        panic!("rng::shuffle: cannot shuffle a 0-d tensor");
    }
    let a = nx::shape::normalize_axis("rng::shuffle", axis, x.ndim());
    x.take(&permutation(key, x.shape()[a]), a as isize)
}

/// `dtype`'s neighbour of `v` (a value of `dtype`) toward `+inf` (`up`) or
/// `-inf`.
fn next_float(v: f64, up: bool, dtype: DType) -> f64 {
    use nx::half::{bf16, f16};
    fn step(bits: u64, neg: bool, up: bool) -> u64 {
        // Away from zero when moving in the sign's direction.
        if neg != up {
            bits + 1
        } else {
            bits - 1
        }
    }
    if v == 0.0 {
        let tiny = match dtype {
            DType::F16 => f16::from_bits(1).to_f64(),
            DType::BF16 => bf16::from_bits(1).to_f64(),
            DType::F32 => f32::from_bits(1) as f64,
            _ => f64::from_bits(1),
        };
        return if up { tiny } else { -tiny };
    }
    if v.is_nan() || (v.is_infinite() && (v > 0.0) == up) {
        return v;
    }
    let neg = v < 0.0;
    match dtype {
        DType::F16 => {
            let b = f16::from_f64(v).to_bits();
            let mag = step((b & 0x7fff) as u64, neg, up) as u16;
            f16::from_bits(mag | (b & 0x8000)).to_f64()
        }
        DType::BF16 => {
            let b = bf16::from_f64(v).to_bits();
            let mag = step((b & 0x7fff) as u64, neg, up) as u16;
            bf16::from_bits(mag | (b & 0x8000)).to_f64()
        }
        DType::F32 => {
            let b = (v as f32).to_bits();
            let mag = step((b & 0x7fff_ffff) as u64, neg, up) as u32;
            f32::from_bits(mag | (b & 0x8000_0000)) as f64
        }
        _ => {
            let b = v.to_bits();
            let mag = step(b & 0x7fff_ffff_ffff_ffff, neg, up);
            f64::from_bits(mag | (b & 0x8000_0000_0000_0000))
        }
    }
}

/// Standard normal floats truncated to `(lo, hi)` (JAX's
/// `jax.random.truncated_normal`: the inverse CDF of a uniform draw between
/// `erf(lo/√2)` and `erf(hi/√2)`, clamped strictly inside the bounds).
/// `lo` may be `-inf` and `hi` `+inf`. Panics unless `lo < hi`.
pub fn truncated_normal(key: &Tensor, lo: f64, hi: f64, shape: &[usize], dtype: DType) -> Tensor {
    check_key("truncated_normal", key);
    check_float("truncated_normal", dtype);
    if lo.is_nan() || hi.is_nan() || lo >= hi {
        panic!("rng::truncated_normal: needs lo < hi, got ({lo}, {hi})");
    }
    // The bounds as `dtype` rounds them, then one step inside.
    let lo_in = next_float(round_to(lo, dtype), true, dtype);
    let hi_in = next_float(round_to(hi, dtype), false, dtype);
    sample(key, shape, |k, first, len| {
        let sqrt2 = scalar(std::f64::consts::SQRT_2, dtype);
        let a = (scalar(lo, dtype) / &sqrt2).erf();
        let b = (scalar(hi, dtype) / &sqrt2).erf();
        let u = uniform_range(k, first, len, dtype, &a, &b);
        (erf_inv(&u) * &sqrt2)
            .maximum(&scalar(lo_in, dtype))
            .minimum(&scalar(hi_in, dtype))
    })
}

/// `v` rounded to `dtype` (nearest even), back as `f64`.
fn round_to(v: f64, dtype: DType) -> f64 {
    use nx::half::{bf16, f16};
    match dtype {
        DType::F16 => f16::from_f64(v).to_f64(),
        DType::BF16 => bf16::from_f64(v).to_f64(),
        DType::F32 => v as f32 as f64,
        _ => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_carry_into_the_high_word() {
        let c = counters((1 << 32) - 2, 4).to_vec::<u32>();
        assert_eq!(c, vec![0, u32::MAX - 1, 0, u32::MAX, 1, 0, 1, 1]);
        let c = counters(5, 3).to_vec::<u32>();
        assert_eq!(c, vec![0, 5, 0, 6, 0, 7]);
        // The hash words of a range are the generator on those counters.
        let k = key(9);
        let (a, b) = hashed(&k, (1 << 32) - 1, 2);
        let want =
            threefry2x32(&k, &Tensor::from_slice(&[0, u32::MAX, 1, 0], &[2, 2])).to_vec::<u32>();
        assert_eq!(a.to_vec::<u32>(), vec![want[0], want[2]]);
        assert_eq!(b.to_vec::<u32>(), vec![want[1], want[3]]);
    }

    #[test]
    fn log1p_xla_is_close_to_log1p() {
        // Not bit for bit against libm (XLA's rounding is the point), but
        // within 2 ulp over (-1, 0].
        let xs: Vec<f32> = (0..100_000)
            .map(|i| -(i as f32 + 0.5) / 100_000.0)
            .collect();
        let got = log1p_xla(&Tensor::from_slice(&xs, &[xs.len()])).to_vec::<f32>();
        for (x, g) in xs.iter().zip(got) {
            let want = (*x as f64).ln_1p() as f32;
            let ulps = (g.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 2, "log1p({x}) = {g}, want {want}");
        }
    }
}
