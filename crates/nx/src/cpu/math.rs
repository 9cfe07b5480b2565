//! Branch-free f32 elementary functions (exp, tanh, ln, sin, cos) written so that a loop
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
//! Max error ≤ 2 ulp against `f64::exp` over the whole range (tested).
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
pub(crate) fn exp_f32<const FMA: bool>(x: f32) -> f32 {
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
pub(crate) fn tanh_f32<const FMA: bool>(x: f32) -> f32 {
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
pub(crate) fn ln_f32<const FMA: bool>(x: f32) -> f32 {
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
pub(crate) fn ln_1p_f32<const FMA: bool>(x: f32) -> f32 {
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

/// Up to this magnitude `sin_f32`/`cos_f32` use the polynomial; above it (and
/// for ±inf and NaN) libm's `sinf`/`cosf` (the same glibc functions tolk's C
/// calls). The four-part split of π/2 below keeps every `n·PIO2_*` product
/// exact (without FMA) while `|n| < 2^15`, i.e. `|x| < 51471`; the bound
/// leaves a margin and keeps the measured error ≤ 2.5 ulp.
pub(crate) const TRIG_BOUND: f32 = 32768.0;
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
pub(crate) fn trig_big(x: f32) -> bool {
    !(x.abs() <= TRIG_BOUND)
}

/// `sin(x)` in f32 for one element: the polynomial, or libm beyond
/// `TRIG_BOUND`. Equal to what `sin_f32_slice` writes.
#[inline(always)]
pub(crate) fn sin_f32<const FMA: bool>(x: f32) -> f32 {
    if trig_big(x) {
        x.sin()
    } else {
        sincos_f32_impl::<FMA, false>(x)
    }
}

/// `cos(x)` in f32 for one element (see `sin_f32`).
#[inline(always)]
pub(crate) fn cos_f32<const FMA: bool>(x: f32) -> f32 {
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
pub(crate) fn sin_f32_slice<const FMA: bool>(xs: &[f32], out: &mut [f32]) {
    sincos_f32_slice::<FMA, false>(xs, out)
}

/// `out[i] = cos(xs[i])` (`cos_f32` per element), vectorized.
#[inline(always)]
pub(crate) fn cos_f32_slice<const FMA: bool>(xs: &[f32], out: &mut [f32]) {
    sincos_f32_slice::<FMA, true>(xs, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place of f32 between `got` and the exact
    /// value `want` (an f64), with the ulp taken at `want`'s binade (subnormal
    /// spacing 2^-149 below the normal range).
    fn ulp_err(got: f32, want: f64) -> f64 {
        if want.is_infinite() || got.is_infinite() {
            return if (got as f64) == want {
                0.0
            } else {
                f64::INFINITY
            };
        }
        let a = want.abs();
        let ulp = if a < f32::MIN_POSITIVE as f64 {
            2f64.powi(-149)
        } else {
            2f64.powi(a.log2().floor() as i32 - 23)
        };
        ((got as f64) - want).abs() / ulp
    }

    /// The exact f32 result: round the f64 value (with its own tiny error,
    /// far below f32's resolution) and saturate as f32 does.
    fn want(x: f32) -> f64 {
        let w = (x as f64).exp();
        // f32::MAX + half an ulp (a tie, which rounds to even: up) and beyond.
        if w >= 2f64.powi(128) - 2f64.powi(103) {
            f64::INFINITY
        } else {
            w
        }
    }

    fn check_range<const FMA: bool>(lo: f32, hi: f32, n: usize, max_seen: &mut f64) {
        let step = (hi as f64 - lo as f64) / n as f64;
        for i in 0..=n {
            let x = (lo as f64 + step * i as f64) as f32;
            let got = exp_f32_impl::<FMA>(x);
            let e = ulp_err(got, want(x));
            assert!(
                e <= 2.0,
                "exp({x:e}) = {got:e}, want {:e} ({e} ulp, fma={FMA})",
                want(x)
            );
            *max_seen = max_seen.max(e);
        }
    }

    fn sweep<const FMA: bool>() -> f64 {
        let mut m = 0.0f64;
        // Whole finite range of interest, densely: ~1e7 samples.
        check_range::<FMA>(-110.0, 90.0, 6_000_000, &mut m);
        // The subnormal-output range, more densely.
        check_range::<FMA>(-104.5, -87.0, 2_000_000, &mut m);
        // The overflow boundary and the region around 0.
        check_range::<FMA>(88.0, 89.5, 500_000, &mut m);
        check_range::<FMA>(-1.0, 1.0, 1_000_000, &mut m);
        // Every float in a few small neighbourhoods, bit by bit.
        for start in [0.0f32, -0.0, 1e-30, -1e-30, 88.72283, -87.33654, -103.27893] {
            let mut b = start.to_bits();
            for _ in 0..20_000 {
                let x = f32::from_bits(b);
                let e = ulp_err(exp_f32_impl::<FMA>(x), want(x));
                assert!(e <= 2.0, "exp({x:e}): {e} ulp (fma={FMA})");
                m = m.max(e);
                b += 1;
            }
        }
        m
    }

    #[test]
    fn exp_is_within_2_ulp_with_fma() {
        let m = sweep::<true>();
        eprintln!("exp_f32 (fma): max error {m:.3} ulp");
        assert!(m < 2.0, "max error {m} ulp");
    }

    #[test]
    fn exp_is_within_2_ulp_without_fma() {
        let m = sweep::<false>();
        eprintln!("exp_f32 (no fma): max error {m:.3} ulp");
        assert!(m < 2.0, "max error {m} ulp");
    }

    #[test]
    fn exp_special_values() {
        for f in [exp_f32::<true>, exp_f32::<false>] {
            assert_eq!(f(0.0), 1.0);
            assert_eq!(f(-0.0), 1.0);
            assert_eq!(f(1.0), std::f32::consts::E);
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert_eq!(f(f32::NEG_INFINITY), 0.0);
            assert!(f(f32::NAN).is_nan());
            assert!(f(-f32::NAN).is_nan());
            assert_eq!(f(88.73), f32::INFINITY);
            assert_eq!(f(1000.0), f32::INFINITY);
            assert_eq!(f(f32::MAX), f32::INFINITY);
            assert_eq!(f(-104.0), 0.0);
            assert_eq!(f(-1000.0), 0.0);
            assert_eq!(f(f32::MIN), 0.0);
            // Largest finite result, and results in the subnormal range.
            assert!(f(88.72283).is_finite() && f(88.72283) > 3.4e38);
            let tiny = f(-100.0);
            assert!(tiny > 0.0 && tiny < f32::MIN_POSITIVE, "{tiny:e}");
            assert_eq!(f(-103.279), f32::from_bits(1)); // ≈ 2^-149
        }
    }

    /// The largest ulp error of `f` against `reference` (f64) over the f32
    /// bit patterns `b ≡ 0 (mod step)` (every pattern when `step` is 1), NaN
    /// inputs skipped; on two threads. Returns (max error, worst input).
    fn scan(f: fn(f32) -> f32, reference: fn(f64) -> f64, step: u64) -> (f64, f32) {
        let worker = |lo: u64, hi: u64| {
            let mut worst = (0.0f64, 0.0f32);
            let mut b = lo.div_ceil(step) * step;
            while b < hi {
                let x = f32::from_bits(b as u32);
                if !x.is_nan() {
                    let want = reference(x as f64);
                    let got = f(x);
                    let e = if want.is_nan() {
                        if got.is_nan() {
                            0.0
                        } else {
                            f64::INFINITY
                        }
                    } else {
                        ulp_err(got, want)
                    };
                    if e > worst.0 {
                        worst = (e, x);
                    }
                }
                b += step;
            }
            worst
        };
        let half = 1u64 << 31;
        let (a, b) = std::thread::scope(|s| {
            let h = s.spawn(move || worker(0, half));
            let b = worker(half, 1 << 32);
            (h.join().unwrap(), b)
        });
        if a.0 >= b.0 {
            a
        } else {
            b
        }
    }

    /// f64 reference rounded as f32 saturates (for tanh/ln/sin/cos the exact
    /// value never overflows f32 except ln(inf) = inf).
    fn tanh64(x: f64) -> f64 {
        x.tanh()
    }
    fn ln64(x: f64) -> f64 {
        x.ln()
    }

    /// Sampled sweep run by default: every 97th bit pattern (44M inputs)
    /// over the whole f32 range. `exhaustive_*` (ignored: about a minute
    /// each) check every pattern; the bounds below are their results.
    #[test]
    fn tanh_error_sampled() {
        for f in [tanh_f32_impl::<true>, tanh_f32_impl::<false>] {
            let (e, x) = scan(f, tanh64, 97);
            eprintln!("tanh_f32: max error {e:.3} ulp at {x:e}");
            assert!(e <= TANH_ULP, "tanh({x:e}): {e} ulp");
        }
    }

    #[test]
    fn tanh_ln_special_values() {
        for f in [tanh_f32::<true>, tanh_f32::<false>] {
            assert_eq!(f(0.0).to_bits(), 0.0f32.to_bits());
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(f(1e-30), 1e-30);
            assert_eq!(f(-f32::from_bits(1)), -f32::from_bits(1));
            assert_eq!(f(f32::INFINITY), 1.0);
            assert_eq!(f(f32::NEG_INFINITY), -1.0);
            assert_eq!(f(9.0), 1.0);
            assert_eq!(f(f32::MIN), -1.0);
            assert!(f(f32::NAN).is_nan());
        }
        for f in [ln_f32::<true>, ln_f32::<false>] {
            assert_eq!(f(1.0).to_bits(), 0);
            assert_eq!(f(0.0), f32::NEG_INFINITY);
            assert_eq!(f(-0.0), f32::NEG_INFINITY);
            assert!(f(-1.0).is_nan() && f(f32::NEG_INFINITY).is_nan() && f(-1e-40).is_nan());
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!(f(f32::NAN).is_nan());
            let b = 0x7fa0_0001u32; // a signaling NaN keeps its bits
            assert_eq!(f(f32::from_bits(b)).to_bits(), b);
            assert!((f(f32::from_bits(1)) as f64 - (-149.0 * 2f64.ln())).abs() < 1e-5);
            assert!((f(f32::MAX) as f64 - 88.72283905206835).abs() < 1e-5);
        }
    }

    #[test]
    fn ln_error_sampled() {
        for f in [ln_f32_impl::<true>, ln_f32_impl::<false>] {
            let (e, x) = scan(f, ln64, 97);
            eprintln!("ln_f32: max error {e:.3} ulp at {x:e}");
            assert!(e <= LN_ULP, "ln({x:e}): {e} ulp");
        }
    }

    fn ln1p64(x: f64) -> f64 {
        x.ln_1p()
    }

    #[test]
    fn ln_1p_error_sampled_and_special_values() {
        for f in [ln_1p_f32::<true>, ln_1p_f32::<false>] {
            let (e, x) = scan(f, ln1p64, 97);
            eprintln!("ln_1p_f32: max error {e:.3} ulp at {x:e}");
            assert!(e <= LN1P_ULP, "ln_1p({x:e}): {e} ulp");
            assert_eq!(f(0.0).to_bits(), 0.0f32.to_bits());
            assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
            assert_eq!(f(1e-30), 1e-30);
            assert_eq!(f(-1.0), f32::NEG_INFINITY);
            assert!(f(-2.0).is_nan() && f(f32::NEG_INFINITY).is_nan() && f(f32::NAN).is_nan());
            assert_eq!(f(f32::INFINITY), f32::INFINITY);
            assert!((f(f32::MAX) as f64 - 88.72283905206835).abs() < 1e-5);
        }
    }

    #[test]
    #[ignore = "exhaustive: run with --ignored --release"]
    fn exhaustive_ln_1p() {
        for f in [ln_1p_f32::<true>, ln_1p_f32::<false>] {
            let (e, x) = scan(f, ln1p64, 1);
            eprintln!("ln_1p_f32 exhaustive: max error {e:.3} ulp at {x:e}");
            assert!(e <= LN1P_ULP, "ln_1p({x:e}): {e} ulp");
        }
    }

    #[test]
    #[ignore = "exhaustive: run with --ignored --release"]
    fn exhaustive_tanh() {
        for f in [tanh_f32_impl::<true>, tanh_f32_impl::<false>] {
            let (e, x) = scan(f, tanh64, 1);
            eprintln!("tanh_f32 exhaustive: max error {e:.3} ulp at {x:e}");
            assert!(e <= TANH_ULP, "tanh({x:e}): {e} ulp");
        }
    }

    #[test]
    #[ignore = "exhaustive: run with --ignored --release"]
    fn exhaustive_ln() {
        for f in [ln_f32_impl::<true>, ln_f32_impl::<false>] {
            let (e, x) = scan(f, ln64, 1);
            eprintln!("ln_f32 exhaustive: max error {e:.3} ulp at {x:e}");
            assert!(e <= LN_ULP, "ln({x:e}): {e} ulp");
        }
    }

    fn sin64(x: f64) -> f64 {
        x.sin()
    }
    fn cos64(x: f64) -> f64 {
        x.cos()
    }
    type Trig = (&'static str, fn(f32) -> f32, fn(f64) -> f64);
    const TRIG: [Trig; 4] = [
        ("sin (fma)", sin_f32::<true>, sin64),
        ("sin (no fma)", sin_f32::<false>, sin64),
        ("cos (fma)", cos_f32::<true>, cos64),
        ("cos (no fma)", cos_f32::<false>, cos64),
    ];

    /// Where Cody–Waite loses most: the floats nearest each multiple of π/2
    /// up to the bound (the results closest to 0), `k` patterns either side.
    fn near_multiples(f: fn(f32) -> f32, reference: fn(f64) -> f64, k: u32) -> (f64, f32) {
        let mut worst = (0.0f64, 0.0f32);
        let mut n = 1u32;
        loop {
            let c = (n as f64 * std::f64::consts::FRAC_PI_2) as f32;
            if c > TRIG_BOUND {
                break;
            }
            for b in c.to_bits() - k..=c.to_bits() + k {
                for x in [f32::from_bits(b), -f32::from_bits(b)] {
                    let e = ulp_err(f(x), reference(x as f64));
                    if e > worst.0 {
                        worst = (e, x);
                    }
                }
            }
            n += 1;
        }
        worst
    }

    #[test]
    fn sin_cos_error_sampled() {
        for (name, f, reference) in TRIG {
            let (e, x) = scan(f, reference, 97);
            eprintln!("{name}: max error {e:.3} ulp at {x:e} (every 97th pattern)");
            assert!(e <= TRIG_ULP, "{name}({x:e}): {e} ulp");
            let (e, x) = near_multiples(f, reference, 64);
            eprintln!("{name}: max error {e:.3} ulp at {x:e} (near multiples of pi/2)");
            assert!(e <= TRIG_ULP, "{name}({x:e}): {e} ulp");
        }
    }

    #[test]
    fn sin_cos_special_values() {
        for (name, f, _) in TRIG {
            let is_sin = name.starts_with("sin");
            // ±0: sin keeps the zero's sign, cos is exactly 1.
            for z in [0.0f32, -0.0] {
                let want = if is_sin { z } else { 1.0 };
                assert_eq!(f(z).to_bits(), want.to_bits(), "{name}({z})");
            }
            assert!(
                f(f32::INFINITY).is_nan() && f(f32::NEG_INFINITY).is_nan(),
                "{name}"
            );
            assert!(f(f32::NAN).is_nan() && f(-f32::NAN).is_nan(), "{name}");
            // Tiny inputs: sin x = x (subnormals included), cos x = 1.
            for x in [
                1e-30f32,
                -1e-30,
                f32::from_bits(1),
                -f32::from_bits(1),
                1e-5,
                -1e-4,
            ] {
                let want = if is_sin { x } else { 1.0 };
                assert_eq!(f(x).to_bits(), want.to_bits(), "{name}({x:e})");
            }
            // Odd / even.
            for x in [
                0.5f32, 1.0, 2.0, 3.0, 100.0, 1234.5, 32767.0, 32768.0, 40000.0,
            ] {
                let (a, b) = (f(x), f(-x));
                let want = if is_sin { -a } else { a };
                assert_eq!(b.to_bits(), want.to_bits(), "{name}(±{x})");
            }
        }
        // Beyond the bound: libm's value exactly (and at the bound itself, the
        // polynomial).
        for x in [32768.5f32, -32769.0, 1e5, -3.0e6, 1e20, f32::MAX, f32::MIN] {
            for (name, f, _) in TRIG {
                let want = if name.starts_with("sin") {
                    x.sin()
                } else {
                    x.cos()
                };
                assert_eq!(f(x).to_bits(), want.to_bits(), "{name}({x:e})");
            }
        }
        assert!(!trig_big(TRIG_BOUND) && trig_big(f32::from_bits(TRIG_BOUND.to_bits() + 1)));
        type F = fn(f32) -> f32;
        for (sin, cos) in [
            (sin_f32::<true> as F, cos_f32::<true> as F),
            (sin_f32::<false>, cos_f32::<false>),
        ] {
            assert_eq!(sin(std::f32::consts::FRAC_PI_2), 1.0);
            assert_eq!(cos(std::f32::consts::PI), -1.0);
        }
    }

    /// The slice kernels (polynomial pass, then the libm fix-up of big
    /// elements) write what the per-element functions return, bit for bit.
    #[test]
    fn sin_cos_slices_equal_per_element() {
        let mut xs: Vec<f32> = (0..4099).map(|i| (i as f32 - 2000.0) * 0.37).collect();
        let mut st = 0x9e37_79b9u32;
        for _ in 0..4000 {
            st ^= st << 13;
            st ^= st >> 17;
            st ^= st << 5;
            xs.push(f32::from_bits(st)); // any pattern: NaNs, infinities, huge
        }
        xs.extend([0.0, -0.0, f32::INFINITY, f32::NAN, 32768.0, 32768.004, 1e9]);
        for only_small in [true, false] {
            let xs: Vec<f32> = xs
                .iter()
                .copied()
                .filter(|x| !only_small || !trig_big(*x))
                .collect();
            let mut out = vec![0.0f32; xs.len()];
            sin_f32_slice::<true>(&xs, &mut out);
            for (&x, &o) in xs.iter().zip(&out) {
                assert_eq!(o.to_bits(), sin_f32::<true>(x).to_bits(), "sin({x:e})");
            }
            cos_f32_slice::<false>(&xs, &mut out);
            for (&x, &o) in xs.iter().zip(&out) {
                assert_eq!(o.to_bits(), cos_f32::<false>(x).to_bits(), "cos({x:e})");
            }
        }
    }

    /// Every f32 with |x| ≤ TRIG_BOUND (positive ones: the algorithm is
    /// exactly odd/even, which `sin_cos_special_values` spot-checks and the
    /// sampled scan covers), for each of sin/cos with and without FMA.
    #[test]
    #[ignore = "exhaustive: run with --ignored --release"]
    fn exhaustive_sin_cos() {
        for (name, f, reference) in TRIG {
            let top = TRIG_BOUND.to_bits() as u64 + 1;
            let worker = |lo: u64, hi: u64| {
                let mut worst = (0.0f64, 0.0f32);
                for b in lo..hi {
                    let x = f32::from_bits(b as u32);
                    let e = ulp_err(f(x), reference(x as f64));
                    if e > worst.0 {
                        worst = (e, x);
                    }
                }
                worst
            };
            let (a, b) = std::thread::scope(|s| {
                let h = s.spawn(move || worker(0, top / 2));
                let b = worker(top / 2, top);
                (h.join().unwrap(), b)
            });
            let (e, x) = if a.0 >= b.0 { a } else { b };
            eprintln!("{name} exhaustive to {TRIG_BOUND}: max error {e:.3} ulp at {x:e}");
            assert!(e <= TRIG_ULP, "{name}({x:e}): {e} ulp");
        }
    }

    /// Exhaustive results: tanh 4.896 ulp with FMA (at 5.126039), 6.882
    /// without (at 5.827876); ln 0.827 with FMA, 0.834 without.
    const TANH_ULP: f64 = 7.0;
    const LN_ULP: f64 = 1.0;
    const LN1P_ULP: f64 = 3.0;
    /// sin/cos: see `exhaustive_sin_cos` (results in the module docs).
    const TRIG_ULP: f64 = 3.0;
}
