//! Branch-free f32 elementary functions (exp, tanh, ln, ln_1p, sin, cos, atan, erf) written so that a loop
//! calling them vectorizes (no libm calls, no data-dependent branches, no table lookups).
//!
//! Each takes `const FMA: bool`, whether `mla` fuses: the dispatch level's
//! choice (`dispatch::Kernel::run`), so that the bits match tolk's C, which
//! fuses when the host has FMA.
//!
//! `exp_f32` follows the Cephes/Sleef scheme: `n = round(x·log2 e)`,
//! `r = x − n·ln 2` in two parts (Cody–Waite), a degree-6 polynomial for
//! `e^r` on `|r| ≤ ln2/2`, then a scale by `2^n` built from exponent bits.
//! The scale is applied as two factors `2^(n>>1)·2^(n−(n>>1))`, each a normal
//! float, so results that overflow become `inf` and results in the subnormal
//! range are rounded once, by the last multiplication, and `exp(x)` for
//! `x < −103.97` (below half the smallest subnormal) becomes 0. NaN stays NaN.
//! Max error ≤ 2 ulp against `f64::exp` over the whole range (tested in
//! `tests/internals.rs`, as are the bounds below).
//!
//! `tanh_f32` is XLA's / Eigen's rational approximation (a [13/6] minimax
//! fit on |x| ≤ 7.905, the input clamped there; ±1 from |x| = 9; `x` itself
//! below |x| = 4e-4, so ±0 and subnormals are exact). Max error 4.90 ulp with
//! FMA, 6.88 without, against `f64::tanh`, measured over every f32 bit
//! pattern (the ignored `exhaustive_tanh` test; a 1/97 sample runs by default).
//!
//! `ln_f32` reduces `x = 2^k·m`, `m` in [√½, √2) from the bits as musl's logf
//! does (subnormals scaled by 2^23 first), then Cephes' logf polynomial
//! `f − f²/2 + f³·P(f)` in `f = m − 1` with `k·ln 2` added in two parts.
//! ln(±0) = −inf, ln(x < 0) = NaN, ln(inf) = inf, NaN stays (same bits).
//! Max error 0.83 ulp against `f64::ln` over every f32 bit pattern (FMA and
//! not; `exhaustive_ln`).
//!
//! `sin_f32`/`cos_f32`: `n = round(x·2/π)` (the magic-number trick), a
//! Cody–Waite reduction `r = x − n·π/2` with π/2 in four parts (SLEEF's
//! `PI_A..D` halved; the first three have ≤ 9 significant bits, so every
//! `n·part` is exact without FMA while `|n| < 2^15`), then on `|r| ≤ π/4`
//! musl's degree-9 sin polynomial `r + r·z·S(z)` and Cephes' cos polynomial
//! `1 − z/2 + z²·C(z)` (coefficients in f32), both computed and one chosen
//! by bit 0 of the quadrant `n mod 4` (read from the rounding's bits), the
//! sign flipped by bit 1. sin(±0) = ±0, cos(0) = 1 exactly, tiny inputs
//! give `x` and 1. Max error 2.44 ulp (sin, at 12126.673) and 2.36 ulp (cos,
//! at 27342.6) against `f64::sin`/`cos` over every f32 with
//! `|x| ≤ TRIG_BOUND = 32768`, with FMA and without (`exhaustive_sin_cos`;
//! the error grows with |x| through the reduction). Beyond the bound, ±inf and NaN take libm's `sinf`/`cosf` (glibc, the same bits as
//! Rust's `f32::sin` and tolk's C): `sin_f32_slice`/`cos_f32_slice` compute
//! the polynomial for every element in a loop that vectorizes, noting
//! whether any input was out of range, and only then fix those elements up
//! in a second, scalar pass; tolk's kernels re-run themselves with the
//! per-element form in that case (`tolk::codegen::c::unary_vectorized`).

/// Below this, `exp(x)` rounds to 0 in f32 (`ln(2^-150) ≈ -103.97`).
const EXP_LO: f32 = -104.0;
/// Above this, `exp(x)` is `inf` in f32 (`ln(f32::MAX) ≈ 88.72`); clamping here
/// keeps `n` small enough for the exponent arithmetic while still overflowing.
const EXP_HI: f32 = 89.0;
const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in a high part with trailing zero bits (`n·LN2_HI` is exact for
/// `|n| ≤ 2^9`) and the rest, so `x − n·ln2` loses no bits without FMA.
const LN2_HI: f32 = 0.693_145_751_953_125;
const LN2_LO: f32 = 1.428_606_765_330_187e-6;
/// `1.5·2^23`: adding it rounds a float of magnitude < 2^22 to an integer
/// (ties to even) and leaves that integer in the low mantissa bits.
const ROUND_MAGIC: f32 = 12_582_912.0;

/// `a·b + c`, fused when the target has FMA (then one instruction); otherwise
/// two roundings (still within the error bound, and still vectorizable,
/// unlike a software `fmaf` call).
#[inline(always)]
fn mla<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[inline(always)]
fn exp_f32_impl<const FMA: bool>(x: f32) -> f32 {
    // Two plain selects (the vectorizer turns them into blends). Comparisons
    // with NaN are false, so NaN passes through unclamped.
    let xc = if x < EXP_LO { EXP_LO } else { x };
    let xc = if xc > EXP_HI { EXP_HI } else { xc };
    let t = mla::<FMA>(xc, LOG2E, ROUND_MAGIC);
    let n = t - ROUND_MAGIC; // round(x·log2 e), an integer in [-150, 129]
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let r = mla::<FMA>(n, -LN2_HI, xc);
    let r = mla::<FMA>(n, -LN2_LO, r);
    // e^r = 1 + r + r²·u(r), Sleef's minimax coefficients.
    let mut u = 1.985_276_2e-4f32;
    u = mla::<FMA>(u, r, 1.393_043_6e-3);
    u = mla::<FMA>(u, r, 8.333_361e-3);
    u = mla::<FMA>(u, r, 4.166_648_5e-2);
    u = mla::<FMA>(u, r, 0.166_666_67);
    u = mla::<FMA>(u, r, 0.5);
    let p = mla::<FMA>(r * r, u, r + 1.0);
    // 2^n as two normal factors (n in [-150, 129] → halves in [-75, 65]).
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    p * s1 * s2
}

/// `e^x` in f32, ≤ 2 ulp, vectorizable; `FMA`: whether `mla` fuses (the
/// dispatch level has FMA, see `dispatch`).
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn exp_f32<const FMA: bool>(x: f32) -> f32 {
    exp_f32_impl::<FMA>(x)
}

/// Beyond this magnitude `tanh_f32` evaluates the rational at the clamp
/// (Eigen/XLA's clamp), up to |x| = 9 where it returns ±1.
#[allow(clippy::excessive_precision)]
const TANH_CLAMP: f32 = 7.90531110763549805;
/// Below this magnitude `tanh(x)` rounds to `x` in f32... to within the
/// approximation's error; returning `x` keeps ±0, tiny and subnormal inputs
/// exact (Eigen/XLA use the same cut).
const TANH_TINY: f32 = 0.0004;

#[allow(clippy::excessive_precision)]
#[inline(always)]
fn tanh_f32_impl<const FMA: bool>(x: f32) -> f32 {
    // XLA's / Eigen's `generic_fast_tanh_float`: a [13/6] rational minimax
    // approximation on [-7.9053, 7.9053] (Eigen MathFunctionsImpl.h, used by
    // XLA's CPU and GPU backends). NaN passes the clamps (comparisons false).
    let xc = if x > TANH_CLAMP { TANH_CLAMP } else { x };
    let xc = if xc < -TANH_CLAMP { -TANH_CLAMP } else { xc };
    let x2 = xc * xc;
    let mut p = -2.76076847742355e-16f32;
    p = mla::<FMA>(x2, p, 2.00018790482477e-13);
    p = mla::<FMA>(x2, p, -8.60467152213735e-11);
    p = mla::<FMA>(x2, p, 5.12229709037114e-08);
    p = mla::<FMA>(x2, p, 1.48572235717979e-05);
    p = mla::<FMA>(x2, p, 6.37261928875436e-04);
    p = mla::<FMA>(x2, p, 4.89352455891786e-03);
    let p = xc * p;
    let mut q = 1.19825839466702e-06f32;
    q = mla::<FMA>(x2, q, 1.18534705686654e-04);
    q = mla::<FMA>(x2, q, 2.26843463243900e-03);
    q = mla::<FMA>(x2, q, 4.89352518554385e-03);
    let r = p / q;
    // The rational at the clamp is 1 − 4 ulp; tanh(x) rounds to ±1 (within
    // 1 ulp) from |x| = 9 on, so saturate there exactly (tanh(±inf) = ±1).
    let r = if x >= 9.0 { 1.0 } else { r };
    let r = if x <= -9.0 { -1.0 } else { r };
    if x.abs() < TANH_TINY {
        x
    } else {
        r
    }
}

/// `tanh(x)` in f32, vectorizable (see the module docs for the error bound).
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn tanh_f32<const FMA: bool>(x: f32) -> f32 {
    tanh_f32_impl::<FMA>(x)
}

#[allow(clippy::excessive_precision)]
#[inline(always)]
fn ln_f32_impl<const FMA: bool>(x: f32) -> f32 {
    // Reduction as in musl's logf: x = 2^k·m with m in [√½, √2) (a
    // subnormal is first scaled by 2^23), read from the bits.
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    let ix = xs.to_bits().wrapping_add(0x3f80_0000 - 0x3f35_04f3);
    let k = ((ix >> 23) as i32) - 0x7f - if tiny { 23 } else { 0 };
    let m = f32::from_bits((ix & 0x007f_ffff) + 0x3f35_04f3);
    let f = m - 1.0;
    let e = k as f32;
    // Cephes logf: ln(1+f) = f − f²/2 + f³·P(f), and k·ln2 in two parts.
    let mut p = 7.0376836292e-2f32;
    p = mla::<FMA>(p, f, -1.1514610310e-1);
    p = mla::<FMA>(p, f, 1.1676998740e-1);
    p = mla::<FMA>(p, f, -1.2420140846e-1);
    p = mla::<FMA>(p, f, 1.4249322787e-1);
    p = mla::<FMA>(p, f, -1.6668057665e-1);
    p = mla::<FMA>(p, f, 2.0000714765e-1);
    p = mla::<FMA>(p, f, -2.4999993993e-1);
    p = mla::<FMA>(p, f, 3.3333331174e-1);
    let z = f * f;
    let y = f * z * p;
    let y = mla::<FMA>(e, -2.12194440e-4, y);
    let y = mla::<FMA>(z, -0.5, y);
    let r = mla::<FMA>(e, 0.693_359_375, f + y);
    // Special values, as selects: ln(±0) = −inf, ln(x<0) = NaN, ln(inf) =
    // inf, NaN stays (the same bits).
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    let r = if x < 0.0 { f32::NAN } else { r };
    let r = if x == f32::INFINITY { x } else { r };
    if x != x {
        x
    } else {
        r
    }
}

/// `ln(x)` in f32, vectorizable (see the module docs for the error bound).
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn ln_f32<const FMA: bool>(x: f32) -> f32 {
    ln_f32_impl::<FMA>(x)
}

/// `ln(1 + x)` in f32, vectorizable (libm's `log1pf` is a call, which
/// keeps a loop from vectorizing): `u = 1 + x` rounded, then
/// `ln(u) · (x / (u − 1))`, which corrects `ln(u)` for the rounding of `u`
/// (Goldberg's formula); `x` itself where `u = 1` (|x| under half an ulp of
/// 1: `ln(1 + x) = x` in f32), `u` where it is +inf, NaN below -1 and
/// `x` itself for a NaN (its bits). Max error
/// 3 ulp (the tests' sampled bound; the log's own is 1).
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn ln_1p_f32<const FMA: bool>(x: f32) -> f32 {
    let u = 1.0 + x;
    let d = u - 1.0;
    let r = ln_f32_impl::<FMA>(u) * (x / d);
    let r = if d == 0.0 { x } else { r };
    let r = if u == f32::INFINITY { u } else { r };
    // NaNs chosen explicitly: which operand's NaN a product of two keeps
    // is the compiler's choice, and the C port must give the same bits.
    let r = if x < -1.0 { f32::NAN } else { r };
    if x != x {
        x
    } else {
        r
    }
}

/// tan(3π/8) and tan(π/8): `atan_f32`'s reduction boundaries.
const ATAN_BIG: f32 = 2.414_213_6;
const ATAN_MID: f32 = 0.414_213_57;
/// π/2 and π/4 as f32 plus the rest (musl's `atanhi`/`atanlo`).
const ATAN_PIO2_HI: f32 = std::f32::consts::FRAC_PI_2;
const ATAN_PIO2_LO: f32 = -4.371_139e-8;
const ATAN_PIO4_HI: f32 = std::f32::consts::FRAC_PI_4;
const ATAN_PIO4_LO: f32 = -2.185_569_5e-8;

/// `atan(x)` in f32, vectorizable (libm's `atanf` is a call, which keeps a
/// loop from vectorizing): Cephes' atanf. On `a = |x|`: beyond tan(3π/8)
/// `π/2 + atan(-1/a)`, beyond tan(π/8) `π/4 + atan((a-1)/(a+1))`, else
/// `atan(a)`, the reduced `t` (one division for all three) through the
/// degree-9 odd polynomial `t + t·z·P(z)`, `z = t²`, the offset added in two
/// parts, the sign copied from `x`. atan(±inf) = ±f32(π/2), ±0 stays, NaN
/// stays NaN (quieted, its sign kept). Max error 2.34 ulp against
/// `f64::atan` over every f32, FMA or not (`exhaustive_atan_erf`).
#[allow(clippy::excessive_precision)]
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn atan_f32<const FMA: bool>(x: f32) -> f32 {
    let a = x.abs();
    let big = a > ATAN_BIG;
    let mid = a > ATAN_MID;
    let num = if mid { a - 1.0 } else { a };
    let den = if mid { a + 1.0 } else { 1.0 };
    let num = if big { -1.0 } else { num };
    let den = if big { a } else { den };
    let hi = if mid { ATAN_PIO4_HI } else { 0.0 };
    let hi = if big { ATAN_PIO2_HI } else { hi };
    let lo = if mid { ATAN_PIO4_LO } else { 0.0 };
    let lo = if big { ATAN_PIO2_LO } else { lo };
    let t = num / den;
    let z = t * t;
    let mut p = 8.05374449538e-2f32;
    p = mla::<FMA>(p, z, -1.38776856032e-1);
    p = mla::<FMA>(p, z, 1.99777106478e-1);
    p = mla::<FMA>(p, z, -3.33329491539e-1);
    let p = mla::<FMA>(p * z, t, t);
    (hi + (p + lo)).copysign(x)
}

/// From this magnitude on `erf_f32` is ±1: erfinv(1 − 2^-23), slightly
/// below where erf rounds to 1, so the rational never exceeds 1.
#[allow(clippy::excessive_precision)]
const ERF_ONE: f32 = 3.832506856900711;

/// `erf(x)` in f32, vectorizable (the `libm` crate's `erff` branches per
/// element and is a call): the 9/12-degree rational of XLA's and Eigen's
/// `generic_fast_erf_float`, `x·P(x²)/Q(x²)` kept within ±1, and ±1 from
/// |x| = 3.8325.
/// erf(±inf) = ±1, ±0 stays, NaN stays NaN. Max error: `ERF_ULP` in the
/// tests, measured over every f32 (`exhaustive_atan_erf`).
#[allow(clippy::excessive_precision)]
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn erf_f32<const FMA: bool>(x: f32) -> f32 {
    let x2 = x * x;
    let mut p = 0.00022905065861350646f32;
    p = mla::<FMA>(x2, p, 0.0034082910107109506);
    p = mla::<FMA>(x2, p, 0.050955695062380861);
    p = mla::<FMA>(x2, p, 0.18520832239976145);
    p = mla::<FMA>(x2, p, 1.128379143519084);
    let p = x * p;
    let mut q = -1.1791602954361697e-7f32;
    q = mla::<FMA>(x2, q, 0.000023547966471313185);
    q = mla::<FMA>(x2, q, 0.0010179625278914885);
    q = mla::<FMA>(x2, q, 0.014070470171167667);
    q = mla::<FMA>(x2, q, 0.11098505178285362);
    q = mla::<FMA>(x2, q, 0.49746925110067538);
    q = mla::<FMA>(x2, q, 1.0);
    // The rational exceeds 1 by an ulp at places (3.7196): kept within ±1.
    let r = p / q;
    let r = if r > 1.0 { 1.0 } else { r };
    let r = if r < -1.0 { -1.0 } else { r };
    if x.abs() >= ERF_ONE {
        1f32.copysign(x)
    } else {
        r
    }
}

/// Up to this magnitude `sin_f32`/`cos_f32` use the polynomial; above it (and
/// for ±inf and NaN) libm's `sinf`/`cosf` (the same glibc functions tolk's C
/// calls). The four-part split of π/2 below keeps every `n·PIO2_*` product
/// exact (without FMA) while `|n| < 2^15`, i.e. `|x| < 51471`; the bound
/// leaves a margin and keeps the measured error ≤ 2.5 ulp.
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub const TRIG_BOUND: f32 = 32768.0;
/// f32(2/π).
const FRAC_2_PI: f32 = 0.636_619_75;
/// π/2 = PIO2_A + PIO2_B + PIO2_C + PIO2_D (+ 1.2e-18): SLEEF's four-part π
/// (`PI_Af..PI_Df`) halved. A has 8 significant bits, B and C 9, D is f32(rest).
const PIO2_A: f32 = 1.570_312_5;
const PIO2_B: f32 = 4.835_128_8e-4;
const PIO2_C: f32 = 3.138_557e-7;
const PIO2_D: f32 = 6.077_100_6e-11;

/// The polynomial path of `sin` (`COS = false`) or `cos`, accurate for
/// `|x| ≤ TRIG_BOUND` (beyond, the result is garbage but harmless: no UB, no
/// trap; the callers replace it).
#[inline(always)]
fn sincos_f32_impl<const FMA: bool, const COS: bool>(x: f32) -> f32 {
    // n = round(x·2/π) (ties to even) by the magic-number trick; its low
    // mantissa bits are n mod 2^22, so the quadrant is the low two bits of
    // t's bits (plus one for cos: cos x = sin(x + π/2)).
    let t = mla::<FMA>(x, FRAC_2_PI, ROUND_MAGIC);
    let n = t - ROUND_MAGIC;
    let q = t.to_bits().wrapping_add(COS as u32);
    // Cody–Waite: r = x − n·π/2 in four steps, r in about [−π/4, π/4].
    let r = mla::<FMA>(n, -PIO2_A, x);
    let r = mla::<FMA>(n, -PIO2_B, r);
    let r = mla::<FMA>(n, -PIO2_C, r);
    let r = mla::<FMA>(n, -PIO2_D, r);
    let z = r * r;
    // sin r = r + r·z·S(z): musl's __sindf coefficients (a minimax fit on
    // [−π/4, π/4]) rounded to f32.
    let mut s = 2.718_311_4e-6f32;
    s = mla::<FMA>(s, z, -1.983_933_5e-4);
    s = mla::<FMA>(s, z, 8.333_329e-3);
    s = mla::<FMA>(s, z, -0.166_666_67);
    let sv = mla::<FMA>(r * z, s, r);
    // cos r = 1 − z/2 + z²·C(z): Cephes' cosf coefficients.
    let mut c = 2.443_315_7e-5f32;
    c = mla::<FMA>(c, z, -1.388_731_6e-3);
    c = mla::<FMA>(c, z, 4.166_664_6e-2);
    let cv = mla::<FMA>(z * z, c, mla::<FMA>(z, -0.5, 1.0));
    // Quadrant q: sin r, cos r, −sin r, −cos r (selects and a sign flip).
    let v = if q & 1 != 0 { cv } else { sv };
    let v = f32::from_bits(v.to_bits() ^ ((q & 2) << 30));
    // sin(−0) = −0 (the polynomial gives +0 there).
    if !COS && x == 0.0 {
        x
    } else {
        v
    }
}

/// Whether `x` takes libm's path (`|x| > TRIG_BOUND`, ±inf, NaN: the
/// negated comparison is true for NaN).
#[allow(clippy::neg_cmp_op_on_partial_ord)]
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn trig_big(x: f32) -> bool {
    !(x.abs() <= TRIG_BOUND)
}

/// `sin(x)` in f32 for one element: the polynomial, or libm beyond
/// `TRIG_BOUND`. Equal to what `sin_f32_slice` writes.
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn sin_f32<const FMA: bool>(x: f32) -> f32 {
    if trig_big(x) {
        x.sin()
    } else {
        sincos_f32_impl::<FMA, false>(x)
    }
}

/// `cos(x)` in f32 for one element (see `sin_f32`).
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn cos_f32<const FMA: bool>(x: f32) -> f32 {
    if trig_big(x) {
        x.cos()
    } else {
        sincos_f32_impl::<FMA, true>(x)
    }
}

/// `out[i] = sin/cos(xs[i])`: the polynomial over every element (a loop that
/// vectorizes), noting whether any element is beyond `TRIG_BOUND`; only then
/// a second, scalar pass replaces those elements with libm's result.
#[inline(always)]
fn sincos_f32_slice<const FMA: bool, const COS: bool>(xs: &[f32], out: &mut [f32]) {
    let out = &mut out[..xs.len()];
    let mut big = false;
    for (o, &x) in out.iter_mut().zip(xs) {
        *o = sincos_f32_impl::<FMA, COS>(x);
        big |= trig_big(x);
    }
    if big {
        fix_big::<COS>(xs, out);
    }
}

#[cold]
#[inline(never)]
fn fix_big<const COS: bool>(xs: &[f32], out: &mut [f32]) {
    for (o, &x) in out.iter_mut().zip(xs) {
        if trig_big(x) {
            *o = if COS { x.cos() } else { x.sin() };
        }
    }
}

/// `out[i] = sin(xs[i])` (`sin_f32` per element), vectorized.
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn sin_f32_slice<const FMA: bool>(xs: &[f32], out: &mut [f32]) {
    sincos_f32_slice::<FMA, false>(xs, out)
}

/// `out[i] = cos(xs[i])` (`cos_f32` per element), vectorized.
#[inline(always)]
#[doc(hidden)] // public for nx's tests only (`nx::raw::internals`)
pub fn cos_f32_slice<const FMA: bool>(xs: &[f32], out: &mut [f32]) {
    sincos_f32_slice::<FMA, true>(xs, out)
}
