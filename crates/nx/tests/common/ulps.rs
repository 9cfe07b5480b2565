//! Error in f32 ulps, for the accuracy tests of the f32 math (included with
//! `#[path = "common/ulps.rs"] mod ulps;`, without the rest of `common`).

/// The error of `got` in ulps of `want`'s binade (subnormal spacing below
/// the normal range). Infinities must match exactly (an f32 overflow of
/// `want` counts as infinity); a NaN `want` needs a NaN.
pub fn ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    let overflows = want.abs() >= 2f64.powi(128) - 2f64.powi(103);
    if overflows || got.is_infinite() {
        return if got.is_infinite() && overflows && (got > 0.0) == (want > 0.0) {
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
