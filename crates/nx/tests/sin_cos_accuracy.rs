//! The f32 `sin` and `cos` kernels (the vectorized Cody–Waite + polynomial
//! of `cpu/math.rs`, libm beyond |x| = 32768) through the public operations,
//! on every kernel path: contiguous parallel (above the thread-pool
//! threshold), contiguous serial, strided rows that step by one, and other
//! strided views; checked against f64 references, and inputs beyond the
//! bound against libm's `sinf`/`cosf` bit for bit. f64, f16 and bf16 keep
//! libm.

#[path = "common/ulps.rs"]
mod ulps;
use half::{bf16, f16};
use nx::{Slice, Tensor};
use ulps::ulps;

/// The polynomial's bound (nx's `TRIG_BOUND`): beyond it, libm.
const BOUND: f32 = 32768.0;
/// The measured bound of the polynomial's error (see cpu/math.rs).
const MAX_ULP: f64 = 3.0;

/// A dense sweep of [-40, 40], pseudo-random values up to the bound and a
/// little beyond, random bit patterns (huge values, infinities, NaNs), the
/// floats next to multiples of π/2, and the special values.
fn inputs(n: usize) -> Vec<f32> {
    let mut v: Vec<f32> = (0..n).map(|i| -40.0 + 80.0 * i as f32 / n as f32).collect();
    let mut s = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for _ in 0..n / 4 {
        let u = (next() >> 11) as f64 / (1u64 << 53) as f64;
        v.push(((u * 2.0 - 1.0) * 40_000.0) as f32);
        v.push(f32::from_bits((next() >> 32) as u32));
    }
    for k in [1.0f64, 2.0, 3.0, 4.0, 100.0, 1001.0, 20_000.0, 20_861.0] {
        let c = (k * std::f64::consts::FRAC_PI_2) as f32;
        for d in -3i32..=3 {
            v.push(f32::from_bits((c.to_bits() as i32 + d) as u32));
        }
    }
    v.extend([
        0.0,
        -0.0,
        f32::from_bits(1),
        -1e-30,
        BOUND,
        -BOUND,
        f32::from_bits(BOUND.to_bits() + 1),
        1e10,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
    ]);
    v
}

/// sin or cos of `x` against the f64 reference (within `MAX_ULP`) or, beyond
/// the bound, libm's f32 function (same bits; NaN for inf and NaN).
fn check(cos: bool, x: &[f32], got: &[f32]) {
    assert_eq!(x.len(), got.len());
    let name = if cos { "cos" } else { "sin" };
    for (&x, &g) in x.iter().zip(got) {
        if !(x.abs() <= BOUND) {
            let want = if cos { x.cos() } else { x.sin() };
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "{name}({x:e}) = {g:e}, want libm's {want:e}"
            );
            continue;
        }
        let want = if cos {
            (x as f64).cos()
        } else {
            (x as f64).sin()
        };
        let e = ulps(g, want);
        assert!(
            e <= MAX_ULP,
            "{name}({x:e}) = {g:e}, want {want:e} ({e} ulp)"
        );
    }
}

fn both(x: &[f32], t: &Tensor) {
    check(false, x, &t.sin().to_vec::<f32>());
    check(true, x, &t.cos().to_vec::<f32>());
}

#[test]
fn sin_cos_f32_on_the_parallel_path() {
    let x = inputs(200_000); // 300K elements: above the parallel threshold
    both(&x, &Tensor::from_slice(&x, &[x.len()]));
}

#[test]
fn sin_cos_f32_on_the_serial_path() {
    let x = inputs(2_000);
    both(&x, &Tensor::from_slice(&x, &[x.len()]));
}

#[test]
fn sin_cos_f32_on_strided_views() {
    let x = inputs(20_000);
    let n = x.len() / 2 * 2;
    // Rows of stride 2 (the per-element path) ...
    let t = Tensor::from_slice(&x[..n], &[n / 2, 2]).transpose();
    assert!(!t.is_contiguous());
    both(&t.to_vec::<f32>(), &t);
    // ... and unit-stride rows of a non-contiguous view (the run path).
    let t = Tensor::from_slice(&x[..n], &[2, n / 2]).slice(&[Slice::all(), Slice::from(1..)]);
    assert!(!t.is_contiguous());
    both(&t.to_vec::<f32>(), &t);
}

/// Every path computes the same bits as the contiguous serial kernel.
#[test]
fn sin_cos_f32_paths_agree_bit_for_bit() {
    let x = inputs(100_000);
    let n = x.len() / 2 * 2;
    let flat = Tensor::from_slice(&x[..n], &[n]);
    let strided = Tensor::from_slice(&x[..n], &[n / 2, 2]).transpose();
    let order = strided.to_vec::<f32>();
    for cos in [false, true] {
        let f = |t: &Tensor| if cos { t.cos() } else { t.sin() };
        let serial: Vec<u32> = x[..n]
            .chunks(1000)
            .flat_map(|c| f(&Tensor::from_slice(c, &[c.len()])).to_vec::<f32>())
            .map(f32::to_bits)
            .collect();
        let par: Vec<u32> = f(&flat)
            .to_vec::<f32>()
            .into_iter()
            .map(f32::to_bits)
            .collect();
        assert_eq!(serial, par, "cos={cos}");
        let st = f(&strided).to_vec::<f32>();
        let one = f(&Tensor::from_slice(&order, &[n])).to_vec::<f32>();
        for (a, b) in st.iter().zip(&one) {
            assert_eq!(a.to_bits(), b.to_bits(), "cos={cos}");
        }
    }
}

#[test]
fn sin_cos_f32_special_values() {
    let t = Tensor::from_slice(
        &[0.0f32, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN],
        &[5],
    );
    let s = t.sin().to_vec::<f32>();
    let c = t.cos().to_vec::<f32>();
    assert_eq!(s[0].to_bits(), 0.0f32.to_bits());
    assert_eq!(s[1].to_bits(), (-0.0f32).to_bits());
    assert_eq!(c[0], 1.0);
    assert_eq!(c[1], 1.0);
    assert!(s[2..].iter().chain(&c[2..]).all(|v| v.is_nan()));
}

/// f64, f16 and bf16 are libm's (f16/bf16 through f32, as `half` does).
#[test]
fn sin_cos_other_float_dtypes_keep_libm() {
    let x = inputs(3_000);
    let x64: Vec<f64> = x.iter().map(|&v| v as f64 * 1.000_000_1).collect();
    let t = Tensor::from_slice(&x64, &[x64.len()]);
    for (got, f) in [(t.sin(), f64::sin as fn(f64) -> f64), (t.cos(), f64::cos)] {
        for (&v, g) in x64.iter().zip(got.to_vec::<f64>()) {
            let w = f(v);
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "f64 {v:e}"
            );
        }
    }
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
    let t = Tensor::from_slice(&h, &[h.len()]);
    for (got, f) in [(t.sin(), f32::sin as fn(f32) -> f32), (t.cos(), f32::cos)] {
        for (&v, g) in h.iter().zip(got.to_vec::<f16>()) {
            let w = f16::from_f32(f(v.to_f32()));
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "f16 {v}"
            );
        }
    }
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let t = Tensor::from_slice(&b, &[b.len()]);
    for (got, f) in [(t.sin(), f32::sin as fn(f32) -> f32), (t.cos(), f32::cos)] {
        for (&v, g) in b.iter().zip(got.to_vec::<bf16>()) {
            let w = bf16::from_f32(f(v.to_f32()));
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "bf16 {v}"
            );
        }
    }
}
