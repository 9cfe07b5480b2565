//! The f32 `exp` and `sigmoid` kernels (the vectorized polynomial exp of
//! `cpu/math.rs`) through the public operations, on every kernel path:
//! contiguous parallel (above the thread-pool threshold), contiguous serial, and
//! strided views; checked against f64 references computed here.

#[path = "common/ulps.rs"]
mod ulps;
use nx::Tensor;
use ulps::ulps;

/// Inputs spanning exp's whole range: underflow to 0, subnormal results,
/// normal results, overflow to inf, and the special values.
fn inputs(n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n)
        .map(|i| -110.0 + 200.0 * i as f32 / n as f32)
        .collect();
    v.extend([
        0.0,
        -0.0,
        1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        88.72283,
        88.7229,
        -103.0,
        -104.0,
    ]);
    v
}

fn check_exp(x: &[f32], got: &[f32]) {
    assert_eq!(x.len(), got.len());
    for (&x, &g) in x.iter().zip(got) {
        let want = (x as f64).exp();
        let e = ulps(g, want);
        assert!(e <= 2.0, "exp({x:e}) = {g:e}, want {want:e} ({e} ulp)");
    }
}

#[test]
fn exp_f32_is_within_2_ulp_on_the_parallel_path() {
    let x = inputs(300_000); // above the parallel threshold
    let t = Tensor::from_slice(&x, &[x.len()]);
    check_exp(&x, &t.exp().to_vec::<f32>());
}

#[test]
fn exp_f32_is_within_2_ulp_on_the_serial_path() {
    let x = inputs(1000);
    let t = Tensor::from_slice(&x, &[x.len()]);
    check_exp(&x, &t.exp().to_vec::<f32>());
}

#[test]
fn exp_f32_nan_stays_nan() {
    let t = Tensor::from_slice(&[f32::NAN, 1.0, -f32::NAN], &[3]);
    let y = t.exp().to_vec::<f32>();
    assert!(y[0].is_nan() && y[2].is_nan());
    assert_eq!(y[1], std::f32::consts::E);
}

#[test]
fn exp_f32_on_strided_views() {
    let x = inputs(20_000);
    let n = x.len() / 2 * 2;
    let t = Tensor::from_slice(&x[..n], &[n / 2, 2]).transpose(); // [2, n/2], strided
    assert!(!t.is_contiguous());
    let got = t.exp().to_vec::<f32>();
    let want_x = t.to_vec::<f32>();
    check_exp(&want_x, &got);
}

#[test]
fn sigmoid_f32_matches_the_f64_formula_including_the_subnormal_tail() {
    let mut x: Vec<f32> = (0..200_000)
        .map(|i| -120.0 + 240.0 * i as f32 / 200_000.0)
        .collect();
    x.extend([0.0, f32::INFINITY, f32::NEG_INFINITY]);
    let t = Tensor::from_slice(&x, &[x.len()]);
    let got = t.sigmoid().to_vec::<f32>();
    for (&x, &g) in x.iter().zip(&got) {
        let want = 1.0 / (1.0 + (-(x as f64)).exp());
        // exp's ≤ 2 ulp plus the roundings of the add, the division and the
        // product; in the subnormal range, a couple of f32's absolute spacing.
        let tol = 4.0 * f32::EPSILON as f64 * want.abs() + 2.0 * 2f64.powi(-149);
        assert!(
            ((g as f64) - want).abs() <= tol,
            "sigmoid({x}) = {g:e}, want {want:e}"
        );
    }
    assert_eq!(got[got.len() - 3], 0.5);
    assert_eq!(got[got.len() - 2], 1.0);
    assert_eq!(got[got.len() - 1], 0.0);
    assert!(Tensor::from_slice(&[f32::NAN], &[1])
        .sigmoid()
        .to_vec::<f32>()[0]
        .is_nan());
}
