//! Branch-free elementary functions written so that a loop calling them
//! vectorizes (no libm calls, no data-dependent branches, no table lookups).
//!
//! `exp_f32` follows the Cephes/Sleef scheme: `n = round(x·log2 e)`,
//! `r = x − n·ln 2` in two parts (Cody–Waite), a degree-6 polynomial for
//! `e^r` on `|r| ≤ ln2/2`, then a scale by `2^n` built from exponent bits.
//! The scale is applied as two factors `2^(n>>1)·2^(n−(n>>1))`, each a normal
//! float, so results that overflow become `inf` and results in the subnormal
//! range are rounded once, by the last multiplication, and `exp(x)` for
//! `x < −103.97` (below half the smallest subnormal) becomes 0. NaN stays NaN.
//! Max error ≤ 2 ulp against `f64::exp` over the whole range (tested).

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

/// `e^x` in f32, ≤ 2 ulp, vectorizable.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    exp_f32_impl::<{ cfg!(target_feature = "fma") }>(x)
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
        for f in [exp_f32_impl::<true>, exp_f32_impl::<false>, exp_f32] {
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
}
