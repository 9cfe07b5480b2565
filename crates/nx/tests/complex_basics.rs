//! Complex tensors at the level of storage and elementwise kernels: creation,
//! parts, casts, arithmetic and functions against `num_complex` itself,
//! equality, Display, and the refusals (ordering, complex-to-real casts).

use nx::{Complex, DType, Tensor};

fn samples() -> Vec<Complex<f64>> {
    let mut v = Vec::new();
    for &re in &[-2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 3.0] {
        for &im in &[-1.5, -0.2, 0.0, 0.7, 2.0] {
            v.push(Complex::new(re, im));
        }
    }
    v
}

#[test]
fn creation_parts_and_complex_round_trip() {
    let z = samples();
    let t = Tensor::from_slice(&z, &[z.len()]);
    assert_eq!(t.dtype(), DType::C128);
    assert_eq!(DType::C128.size_in_bytes(), 16);
    assert_eq!(t.real().dtype(), DType::F64);
    assert_eq!(
        t.real().to_vec::<f64>(),
        z.iter().map(|c| c.re).collect::<Vec<_>>()
    );
    assert_eq!(
        t.imag().to_vec::<f64>(),
        z.iter().map(|c| c.im).collect::<Vec<_>>()
    );
    assert_eq!(
        t.conj().to_vec::<Complex<f64>>(),
        z.iter().map(|c| c.conj()).collect::<Vec<_>>()
    );
    assert_eq!(
        t.angle().to_vec::<f64>(),
        z.iter().map(|c| c.arg()).collect::<Vec<_>>()
    );
    assert_eq!(t.abs().dtype(), DType::F64);
    assert_eq!(
        t.abs().to_vec::<f64>(),
        z.iter().map(|c| c.norm()).collect::<Vec<_>>()
    );
    let back = Tensor::complex(&t.real(), &t.imag());
    assert_eq!(back.to_vec::<Complex<f64>>(), z);
    let f = Tensor::from_slice(&[1.5f32], &[1]);
    let c = Tensor::complex(&f, &f.neg());
    assert_eq!(c.dtype(), DType::C64);
    assert_eq!(c.to_vec::<Complex<f32>>(), vec![Complex::new(1.5, -1.5)]);
    // real inputs: numpy's results
    let r = Tensor::from_slice(&[2.0f64, -3.0], &[2]);
    assert_eq!(r.real().to_vec::<f64>(), vec![2.0, -3.0]);
    assert_eq!(r.imag().to_vec::<f64>(), vec![0.0, 0.0]);
    assert_eq!(r.angle().to_vec::<f64>(), vec![0.0, std::f64::consts::PI]);
}

#[test]
fn arithmetic_and_functions_match_num_complex() {
    let z = samples();
    let n = z.len();
    let w: Vec<Complex<f64>> = z
        .iter()
        .rev()
        .map(|c| c * Complex::new(0.5, -0.25) + 0.1)
        .collect();
    let (a, b) = (Tensor::from_slice(&z, &[n]), Tensor::from_slice(&w, &[n]));
    type B = fn(Complex<f64>, Complex<f64>) -> Complex<f64>;
    let bins: [(&str, Tensor, B); 5] = [
        ("add", a.add(&b), |x, y| x + y),
        ("sub", a.sub(&b), |x, y| x - y),
        ("mul", a.mul(&b), |x, y| x * y),
        ("div", a.div(&b), |x, y| x / y),
        ("pow", a.pow(&b), |x, y| x.powc(y)),
    ];
    for (name, got, f) in bins {
        let got = got.to_vec::<Complex<f64>>();
        for k in 0..n {
            let want = f(z[k], w[k]);
            assert!(
                got[k] == want || (got[k].re.is_nan() && want.re.is_nan()),
                "{name}({}, {}): {} vs {want}",
                z[k],
                w[k],
                got[k]
            );
        }
    }
    type U = fn(Complex<f64>) -> Complex<f64>;
    let uns: [(&str, Tensor, U); 8] = [
        ("exp", a.exp(), |x| x.exp()),
        ("log", a.log(), |x| x.ln()),
        ("sqrt", a.sqrt(), |x| x.sqrt()),
        ("sin", a.sin(), |x| x.sin()),
        ("cos", a.cos(), |x| x.cos()),
        ("tanh", a.tanh(), |x| x.tanh()),
        ("neg", a.neg(), |x| -x),
        ("recip", a.recip(), |x| Complex::new(1.0, 0.0) / x),
    ];
    for (name, got, f) in uns {
        let got = got.to_vec::<Complex<f64>>();
        for k in 0..n {
            let want = f(z[k]);
            let same = |p: f64, q: f64| p == q || (p.is_nan() && q.is_nan());
            assert!(
                same(got[k].re, want.re) && same(got[k].im, want.im),
                "{name}({}): {} vs {want}",
                z[k],
                got[k]
            );
        }
    }
    // scalars enter as real values of the complex dtype
    let s = (&a * 2.0).to_vec::<Complex<f64>>();
    assert_eq!(s, z.iter().map(|c| c * 2.0).collect::<Vec<_>>());
    // equality only
    let eq = a.equal(&a).to_vec::<bool>();
    assert!(eq.iter().all(|&e| e));
    let ne = a.not_equal(&a.conj()).to_vec::<bool>();
    assert_eq!(ne, z.iter().map(|c| c.im != 0.0).collect::<Vec<_>>());
}

#[test]
fn casts_widen_into_complex_and_between_complex() {
    let x = Tensor::from_slice(&[1i32, -7, 1 << 30], &[3]);
    let c = x.cast(DType::C64).to_vec::<Complex<f32>>();
    assert_eq!(
        c,
        vec![
            Complex::new(1.0, 0.0),
            Complex::new(-7.0, 0.0),
            Complex::new((1u32 << 30) as f32, 0.0)
        ]
    );
    let z = Tensor::from_slice(&[Complex::new(0.1f64, -0.3)], &[1]);
    let lo = z.cast(DType::C64).to_vec::<Complex<f32>>();
    assert_eq!(lo, vec![Complex::new(0.1f64 as f32, -0.3f64 as f32)]);
    let hi = z
        .cast(DType::C64)
        .cast(DType::C128)
        .to_vec::<Complex<f64>>();
    assert_eq!(hi, vec![Complex::new(0.1f32 as f64, -0.3f32 as f64)]);
    assert_eq!(DType::F64.complex_dtype(), DType::C128);
    assert_eq!(DType::F32.complex_dtype(), DType::C64);
    assert_eq!(DType::C64.real_dtype(), DType::F32);
}

#[test]
fn movement_and_selection_work_on_complex() {
    let z = samples();
    let t = Tensor::from_slice(&z[..35], &[5, 7]);
    let tt = t.transpose().to_vec::<Complex<f64>>();
    for r in 0..7 {
        for c in 0..5 {
            assert_eq!(tt[r * 5 + c], z[c * 7 + r]);
        }
    }
    let cond = Tensor::from_slice(&[true, false], &[2]);
    let a = Tensor::from_slice(&[Complex::new(1.0f32, 1.0), Complex::new(2.0, 2.0)], &[2]);
    let w = Tensor::where_(&cond, &a, &a.conj()).to_vec::<Complex<f32>>();
    assert_eq!(w, vec![Complex::new(1.0, 1.0), Complex::new(2.0, -2.0)]);
    assert_eq!(
        Tensor::zeros(&[2], DType::C64).to_vec::<Complex<f32>>(),
        vec![Complex::new(0.0, 0.0); 2]
    );
}

#[test]
fn display_is_numpy_like() {
    let a = Tensor::from_slice(&[Complex::new(1.0f64, 2.0), Complex::new(-3.5, -4.0)], &[2]);
    let s = format!("{a}");
    assert!(s.contains("1. ") || s.contains("1.+"), "{s}");
    assert!(
        s.contains("+2.j") && s.contains("-4.j") && s.contains("c128"),
        "{s}"
    );
}

#[test]
#[should_panic(expected = "complex numbers have no order")]
fn ordering_comparisons_are_refused() {
    let a = Tensor::from_slice(&[Complex::new(1.0f32, 2.0)], &[1]);
    let _ = a.less(&a);
}

#[test]
#[should_panic(expected = "would drop the imaginary part")]
fn casting_complex_to_real_panics() {
    let a = Tensor::from_slice(&[Complex::new(1.0f32, 2.0)], &[1]);
    let _ = a.cast(DType::F32);
}

#[test]
#[should_panic(expected = "expects a real tensor")]
fn maximum_is_refused() {
    let a = Tensor::from_slice(&[Complex::new(1.0f32, 2.0)], &[1]);
    let _ = a.maximum(&a);
}

/// A deterministic complex matrix of `shape` (values in about [-2, 2]).
fn cmat(seed: u64, n: usize) -> Vec<Complex<f64>> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    };
    (0..n).map(|_| Complex::new(next(), next())).collect()
}

fn close(a: Complex<f64>, b: Complex<f64>, tol: f64) -> bool {
    (a - b).norm() <= tol * (1.0 + b.norm())
}

#[test]
fn reductions_match_a_loop_in_complex_f64() {
    let (r, c) = (4, 5);
    let z = cmat(1, r * c);
    let t = Tensor::from_slice(&z, &[r, c]);
    let zero = Complex::new(0.0, 0.0);
    let one = Complex::new(1.0, 0.0);
    // over axis 0, axis 1, all
    let s0 = t.sum(&[0], false).to_vec::<Complex<f64>>();
    let p1 = t.prod(&[1], false).to_vec::<Complex<f64>>();
    let m0 = t.mean(&[0], true);
    assert_eq!(m0.shape(), &[1, c]);
    let m0 = m0.to_vec::<Complex<f64>>();
    for j in 0..c {
        let want: Complex<f64> = (0..r).fold(zero, |a, i| a + z[i * c + j]);
        assert!(close(s0[j], want, 1e-14), "sum[{j}] {} vs {want}", s0[j]);
        assert!(close(m0[j], want / r as f64, 1e-14));
    }
    for i in 0..r {
        let want: Complex<f64> = (0..c).fold(one, |a, j| a * z[i * c + j]);
        assert!(close(p1[i], want, 1e-13), "prod[{i}] {} vs {want}", p1[i]);
    }
    let all: Complex<f64> = z.iter().sum();
    assert!(close(t.sum_all().item::<Complex<f64>>(), all, 1e-14));
    assert!(close(
        t.mean_all().item::<Complex<f64>>(),
        all / (r * c) as f64,
        1e-14
    ));
    // a transposed (strided) view reduces the same
    let st = t.transpose().sum(&[1], false).to_vec::<Complex<f64>>();
    for j in 0..c {
        let want: Complex<f64> = (0..r).fold(zero, |a, i| a + z[i * c + j]);
        assert!(close(st[j], want, 1e-14));
    }
    // running sums and products along axis 1
    let cs = t.cumsum(1).to_vec::<Complex<f64>>();
    let cp = t.cumprod(1).to_vec::<Complex<f64>>();
    for i in 0..r {
        let (mut s, mut p) = (zero, one);
        for j in 0..c {
            s += z[i * c + j];
            p *= z[i * c + j];
            assert!(close(cs[i * c + j], s, 1e-14));
            assert!(close(cp[i * c + j], p, 1e-13));
        }
    }
    // C64 sums accumulate in Complex<f64>: within a few f32 ulps of C128's
    let t32 = t.cast(DType::C64);
    let s32 = t32.sum_all().item::<Complex<f32>>();
    let s64 = t32.cast(DType::C128).sum_all().item::<Complex<f64>>();
    assert!((Complex::new(s32.re as f64, s32.im as f64) - s64).norm() <= 1e-6 * (1.0 + s64.norm()));
    // empty reductions: 0 and 1
    let e = Tensor::zeros(&[0, 3], DType::C64);
    assert_eq!(
        e.sum(&[0], false).to_vec::<Complex<f32>>(),
        vec![Complex::new(0.0, 0.0); 3]
    );
    assert_eq!(
        e.prod(&[0], false).to_vec::<Complex<f32>>(),
        vec![Complex::new(1.0, 0.0); 3]
    );
}

#[test]
#[should_panic(expected = "reduce_max")]
fn max_of_complex_is_refused_naming_the_primitive() {
    let a = Tensor::from_slice(&[Complex::new(1.0f32, 2.0)], &[1]);
    let _ = a.max(&[0], false);
}

fn naive_matmul(
    a: &[Complex<f64>],
    b: &[Complex<f64>],
    m: usize,
    k: usize,
    n: usize,
) -> Vec<Complex<f64>> {
    let mut out = vec![Complex::new(0.0, 0.0); m * n];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                out[i * n + j] += a[i * k + l] * b[l * n + j];
            }
        }
    }
    out
}

#[test]
fn matmul_matches_a_naive_loop_without_conjugation() {
    // small and large enough for gemm's split paths (>= 128^3 multiply-adds)
    for &(m, k, n) in &[(3, 4, 2), (1, 7, 1), (130, 129, 131)] {
        let a = cmat(2 + m as u64, m * k);
        let b = cmat(3 + n as u64, k * n);
        let want = naive_matmul(&a, &b, m, k, n);
        let ta = Tensor::from_slice(&a, &[m, k]);
        let tb = Tensor::from_slice(&b, &[k, n]);
        let got = ta.matmul(&tb).to_vec::<Complex<f64>>();
        for (g, w) in got.iter().zip(&want) {
            assert!(close(*g, *w, 1e-12 * k as f64), "{m}x{k}x{n}: {g} vs {w}");
        }
        // transposed operands (strided views, no copy)
        let got_t = tb
            .transpose()
            .matmul(&ta.transpose())
            .transpose()
            .to_vec::<Complex<f64>>();
        for (g, w) in got_t.iter().zip(&want) {
            assert!(close(*g, *w, 1e-12 * k as f64));
        }
        // C64 within a stated bound of C128: |err| <= k * 2^-22 * (|a| |b|)
        let g32 = ta
            .cast(DType::C64)
            .matmul(&tb.cast(DType::C64))
            .cast(DType::C128)
            .to_vec::<Complex<f64>>();
        let bound = k as f64 * 8.0 * 2f64.powi(-24) * 8.0;
        for (g, w) in g32.iter().zip(&want) {
            assert!((g - w).norm() <= bound, "c64 {g} vs {w}");
        }
    }
    // 1-D · 1-D: the plain (unconjugated) sum of products, numpy's dot
    let u = cmat(9, 6);
    let v = cmat(10, 6);
    let d = Tensor::from_slice(&u, &[6])
        .dot(&Tensor::from_slice(&v, &[6]))
        .item::<Complex<f64>>();
    let want: Complex<f64> = u.iter().zip(&v).map(|(a, b)| a * b).sum();
    assert!(close(d, want, 1e-14));
    // batched
    let a = cmat(11, 2 * 3 * 4);
    let b = cmat(12, 2 * 4 * 5);
    let got = Tensor::from_slice(&a, &[2, 3, 4])
        .matmul(&Tensor::from_slice(&b, &[2, 4, 5]))
        .to_vec::<Complex<f64>>();
    for bi in 0..2 {
        let w = naive_matmul(
            &a[bi * 12..(bi + 1) * 12],
            &b[bi * 20..(bi + 1) * 20],
            3,
            4,
            5,
        );
        for (g, w) in got[bi * 15..(bi + 1) * 15].iter().zip(&w) {
            assert!(close(*g, *w, 1e-13));
        }
    }
}

#[test]
fn einsum_and_scatter_add_take_complex() {
    let a = cmat(20, 6);
    let b = cmat(21, 6);
    let ta = Tensor::from_slice(&a, &[2, 3]);
    let tb = Tensor::from_slice(&b, &[3, 2]);
    let got = nx::einsum("ij,jk->ik", &[&ta, &tb]).to_vec::<Complex<f64>>();
    let want = naive_matmul(&a, &b, 2, 3, 2);
    for (g, w) in got.iter().zip(&want) {
        assert!(close(*g, *w, 1e-14));
    }
    let x = Tensor::zeros(&[3], DType::C128);
    let i = Tensor::from_slice(&[0i32, 2, 0], &[3]);
    let s = Tensor::from_slice(&a[..3], &[3]);
    let out = x.scatter_add(0, &i, &s).to_vec::<Complex<f64>>();
    assert_eq!(out, vec![a[0] + a[2], Complex::new(0.0, 0.0), a[1]]);
    let g = ta
        .take(&Tensor::from_slice(&[2i64, 0], &[2]), 1)
        .to_vec::<Complex<f64>>();
    assert_eq!(g, vec![a[2], a[0], a[5], a[3]]);
}

#[test]
fn display_follows_numpy_exactly() {
    // numpy: np.array([1+2j, -3.5-4.25j]) -> array([ 1. +2.j  , -3.5-4.25j])
    let a = Tensor::from_slice(
        &[Complex::new(1.0f64, 2.0), Complex::new(-3.5, -4.25)],
        &[2],
    );
    assert_eq!(
        a.to_string(),
        "tensor([ 1. +2.j  , -3.5-4.25j], shape=[2], dtype=c128)"
    );
    // numpy: np.array([1+2j, 3-10j]) -> array([1. +2.j, 3.-10.j])
    let b = Tensor::from_slice(&[Complex::new(1.0f32, 2.0), Complex::new(3.0, -10.0)], &[2]);
    assert_eq!(
        b.to_string(),
        "tensor([1. +2.j, 3.-10.j], shape=[2], dtype=c64)"
    );
    // numpy: np.array([[0j, 1j]]) -> array([[0.+0.j, 0.+1.j]])
    let c = Tensor::from_slice(
        &[Complex::new(0.0f64, 0.0), Complex::new(0.0, 1.0)],
        &[1, 2],
    );
    assert_eq!(
        c.to_string(),
        "tensor([[0.+0.j, 0.+1.j]], shape=[1, 2], dtype=c128)"
    );
    // numpy: np.array([complex(np.nan, -np.inf)]) -> array([nan-infj])
    let d = Tensor::from_slice(&[Complex::new(f64::NAN, f64::NEG_INFINITY)], &[1]);
    assert_eq!(d.to_string(), "tensor([nan-infj], shape=[1], dtype=c128)");
}

#[test]
fn real_tensors_cast_into_complex() {
    let x = Tensor::from_slice(&[0.5f64, -2.0], &[2]);
    assert_eq!(
        x.cast(DType::C64).to_vec::<Complex<f32>>(),
        vec![Complex::new(0.5, 0.0), Complex::new(-2.0, 0.0)]
    );
    assert_eq!(
        x.cast(DType::C128).to_vec::<Complex<f64>>(),
        vec![Complex::new(0.5, 0.0), Complex::new(-2.0, 0.0)]
    );
    let b = Tensor::from_slice(&[true, false], &[2]);
    assert_eq!(
        b.cast(DType::C64).to_vec::<Complex<f32>>(),
        vec![Complex::new(1.0, 0.0), Complex::new(0.0, 0.0)]
    );
}

#[test]
#[should_panic(expected = "would drop the imaginary part")]
fn casting_c128_to_f64_panics() {
    let a = Tensor::from_slice(&[Complex::new(1.0f64, 0.0)], &[1]);
    let _ = a.cast(DType::F64);
}

#[test]
#[should_panic(expected = "angle: expects a float or complex tensor")]
fn angle_of_an_integer_tensor_panics() {
    let a = Tensor::from_slice(&[1i32, -2], &[2]);
    let _ = a.angle();
}

#[test]
#[should_panic(expected = "complex: the parts must be f32 or f64")]
fn complex_of_half_parts_panics() {
    let re = Tensor::zeros(&[2], DType::F16);
    let _ = Tensor::complex(&re, &re);
}
