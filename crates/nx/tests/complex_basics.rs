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
