//! API.md's "Numerics" section, call by call, in the exact forms it shows,
//! each checked against a closed form or an identity (so the contract both
//! compiles and means what it says).

use nx::fft;
use nx::linalg::{self, TriangularSolveOpts};
use nx::{Complex, DType, Element, Tensor, I4, U4};

fn close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (
        a.cast(DType::F64).to_vec::<f64>(),
        b.cast(DType::F64).to_vec::<f64>(),
    );
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn linear_algebra_forms() {
    // a symmetric positive definite matrix and a right-hand side
    let m = Tensor::from_slice(&[2.0f64, 1.0, 0.0, 1.0, 3.0, 1.0, 0.0, 1.0, 4.0], &[3, 3]);
    let a = m.clone();
    let b = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);

    let l = linalg::cholesky(&a); // lower
    close(&l.matmul(&l.transpose()), &a, 1e-12);
    let x = linalg::triangular_solve(
        &l,
        &b,
        TriangularSolveOpts {
            lower: true,
            left: true,
            transpose: false,
            unit_diagonal: false,
        },
    );
    close(&l.matmul(&x), &b, 1e-12);
    let x = linalg::solve(&a, &b);
    close(&a.matmul(&x), &b, 1e-12);
    let (inv, det) = (linalg::inv(&a), linalg::det(&a));
    close(&a.matmul(&inv), &Tensor::eye(3, DType::F64), 1e-12);
    // det by cofactors: 2(12 - 1) - 1(4 - 0) + 0 = 18
    assert!((det.item::<f64>() - 18.0).abs() < 1e-12);
    let (sign, logabsdet) = linalg::slogdet(&a);
    assert_eq!(sign.item::<f64>(), 1.0);
    assert!((logabsdet.item::<f64>() - 18f64.ln()).abs() < 1e-12);
    let (q, r) = linalg::qr(&a, false); // complete = false: reduced
    close(&q.matmul(&r), &a, 1e-12);
    let (w, v) = linalg::eigh(&a); // ascending eigenvalues, eigenvectors as columns
    let wv = w.to_vec::<f64>();
    assert!(wv[0] <= wv[1] && wv[1] <= wv[2]);
    close(&a.matmul(&v), &(&v * &w), 1e-12);
    let (u, s, vt) = linalg::svd(&a, false); // full_matrices = false; s descending
    let sv = s.to_vec::<f64>();
    assert!(sv[0] >= sv[1] && sv[1] >= sv[2]);
    close(&(&u * &s).matmul(&vt), &a, 1e-12);
    let x = linalg::lstsq(&a, &b);
    close(&a.matmul(&x), &b, 1e-12);
    let p = linalg::pinv(&a);
    close(&p, &inv, 1e-12);
    let n = linalg::norm(&a, linalg::Norm::Fro); // Fro | Nuc | One | Two | Inf | Vector(p: f64)
    let fro: f64 = m.to_vec::<f64>().iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((n.item::<f64>() - fro).abs() < 1e-12);
    // the other orders: columns' and rows' largest absolute sums, the
    // largest singular value and their sum, a vector p-norm of the last axis
    let ns = Tensor::from_slice(&[1.0f64, -2.0, 3.0, 4.0], &[2, 2]);
    let one = linalg::norm(&ns, linalg::Norm::One).item::<f64>();
    let inf = linalg::norm(&ns, linalg::Norm::Inf).item::<f64>();
    assert_eq!((one, inf), (6.0, 7.0));
    let two = linalg::norm(&a, linalg::Norm::Two).item::<f64>();
    let nuc = linalg::norm(&a, linalg::Norm::Nuc).item::<f64>();
    assert!((two - sv[0]).abs() < 1e-12 && (nuc - sv.iter().sum::<f64>()).abs() < 1e-12);
    let v1 = linalg::norm(&a, linalg::Norm::Vector(1.0)).to_vec::<f64>();
    assert_eq!(v1, vec![3.0, 5.0, 5.0]);
    // singular: det 0, slogdet (0, -inf)
    let sing = Tensor::from_slice(&[1.0f64, 2.0, 2.0, 4.0], &[2, 2]);
    assert_eq!(linalg::det(&sing).item::<f64>(), 0.0);
    let (s0, l0) = linalg::slogdet(&sing);
    assert_eq!(
        (s0.item::<f64>(), l0.item::<f64>()),
        (0.0, f64::NEG_INFINITY)
    );
    // batched over leading axes
    let ab = Tensor::stack(&[a.clone(), &a * 2.0], 0);
    let db = linalg::det(&ab).to_vec::<f64>();
    assert!((db[0] - 18.0).abs() < 1e-11 && (db[1] - 144.0).abs() < 1e-10);
}

#[test]
fn fft_forms() {
    let n = 8usize;
    let x = Tensor::from_slice(
        &(0..n).map(|i| (i as f32 * 0.7).sin()).collect::<Vec<_>>(),
        &[n],
    );
    let f = fft::fft(&x, None, -1, fft::FftNorm::Backward); // (x, n, axis, norm)
    assert_eq!(f.dtype(), DType::C64);
    let r = fft::rfft(&x, None, -1, fft::FftNorm::Backward);
    assert_eq!(r.shape(), &[n / 2 + 1]);
    // rfft is the first half of fft
    let fh = f.narrow(0, 0, n / 2 + 1);
    close(&r.real(), &fh.real(), 1e-6);
    close(&r.imag(), &fh.imag(), 1e-6);
    let y = fft::irfft(&r, Some(n), -1, fft::FftNorm::Backward);
    close(&y, &x, 1e-6);
    let x2 = x.reshape(&[2, 4]);
    let f2 = fft::fftn(&x2, None, &[-2, -1], fft::FftNorm::Ortho); // also ifft, ifftn, rfftn, irfftn, fft2, ifft2
    let back = fft::ifftn(&f2, None, &[-2, -1], fft::FftNorm::Ortho);
    close(&back.real(), &x2, 1e-6);
    let g2 = fft::fft2(&x2, None, &[], fft::FftNorm::Ortho);
    close(&g2.real(), &f2.real(), 1e-6);
    close(
        &fft::ifft2(&g2, None, &[], fft::FftNorm::Ortho).real(),
        &x2,
        1e-6,
    );
    let rn = fft::rfftn(&x2, None, &[], fft::FftNorm::Backward);
    close(
        &fft::irfftn(&rn, Some(&[2, 4]), &[], fft::FftNorm::Backward),
        &x2,
        1e-6,
    );
    close(
        &fft::ifft(&f, None, -1, fft::FftNorm::Backward).real(),
        &x,
        1e-6,
    );
    let k = fft::fftfreq(n, 1.0, DType::F32);
    let s = fft::fftshift(&x, &[-1]);
    // numpy: fftfreq(8) = [0, 1, 2, 3, -4, -3, -2, -1] / 8
    assert_eq!(
        k.to_vec::<f32>(),
        vec![0.0, 0.125, 0.25, 0.375, -0.5, -0.375, -0.25, -0.125]
    );
    assert_eq!(
        fft::rfftfreq(n, 1.0, DType::F32).to_vec::<f32>(),
        vec![0.0, 0.125, 0.25, 0.375, 0.5]
    );
    let (xv, sv) = (x.to_vec::<f32>(), s.to_vec::<f32>());
    for i in 0..n {
        assert_eq!(sv[(i + n / 2) % n], xv[i]);
    }
}

#[test]
fn complex_and_4bit_forms() {
    let re = Tensor::from_slice(&[3.0f64, -1.0], &[2]);
    let im = Tensor::from_slice(&[4.0f64, 0.0], &[2]);
    let z = Tensor::complex(&re, &im);
    assert_eq!(z.dtype(), DType::C128);
    // real imag abs angle of C128 are F64 (C64: F32)
    for t in [z.real(), z.imag(), z.abs(), z.angle()] {
        assert_eq!(t.dtype(), DType::F64);
    }
    let z32 = z.cast(DType::C64);
    for t in [z32.real(), z32.imag(), z32.abs(), z32.angle()] {
        assert_eq!(t.dtype(), DType::F32);
    }
    assert_eq!(z.abs().to_vec::<f64>(), vec![5.0, 1.0]);
    assert_eq!(
        z.conj().to_vec::<Complex<f64>>(),
        vec![Complex::new(3.0, -4.0), Complex::new(-1.0, 0.0)]
    );
    assert_eq!(z.angle().to_vec::<f64>()[1], std::f64::consts::PI);
    // I4(pub i8), U4(pub u8): Copy + Debug + PartialEq, Element
    fn element<T: Element + Copy + std::fmt::Debug + PartialEq>(_: T) {}
    element(I4(-8));
    element(U4(15));
    let q = Tensor::from_slice(&[I4(-8), I4(7)], &[2]);
    assert_eq!(q.dtype(), DType::I4);
    assert_eq!(q.to_vec::<I4>(), vec![I4(-8), I4(7)]);
    assert_eq!(
        Tensor::from_slice(&[U4(15)], &[1])
            .cast(DType::I32)
            .to_vec::<i32>(),
        vec![15]
    );
}

#[test]
#[should_panic(expected = "would drop the imaginary part")]
fn casting_complex_to_real_panics() {
    let z = Tensor::complex(
        &Tensor::ones(&[1], DType::F32),
        &Tensor::ones(&[1], DType::F32),
    );
    let _ = z.cast(DType::F32);
}
