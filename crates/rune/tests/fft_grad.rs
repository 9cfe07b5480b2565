//! Derivatives, batching and jit refusal of `nx::fft`: the JVP of a
//! transform is the transform of the tangent; reverse against forward mode
//! through the pairing JAX's transposes satisfy; `check_grads` (f64, real
//! and complex leaves) on real-valued losses built from real()/imag(), including the
//! Hermitian halves of rfft/irfft for even and odd n; `vmap` against a loop;
//! each transform inside `jit`/`pmap` is a `JitError` naming it.

mod common;

use common::check_refused;
use rune::nx::fft::{self, FftNorm};
use rune::nx::{Complex, FftKind, Prim};
use rune::prelude::*;

type C = Complex<f64>;

/// Deterministic uniform values in [-1, 1) (splitmix64).
fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

fn rand(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::from_slice(&uniform(seed, shape.iter().product()), shape)
}

fn crand(seed: u64, shape: &[usize]) -> Tensor {
    Tensor::complex(&rand(seed, shape), &rand(seed + 500, shape))
}

/// The real pairing under which JAX's transposes are transposes:
/// `Re sum(a * b)` (bilinear; for complex values `re*re - im*im`). A
/// cotangent `g` of a complex value stands for the real gradient
/// `(Re g, -Im g)` (JAX's convention: `grad` returns the conjugate of the
/// ascent direction), so the sesquilinear `re*re + im*im` does not hold;
/// this one does, and for real values it is the ordinary dot product.
fn pair(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    if a.dtype().is_complex() {
        let (a, b) = (a.to_vec::<C>(), b.to_vec::<C>());
        a.iter()
            .zip(&b)
            .map(|(x, y)| x.re * y.re - x.im * y.im)
            .sum()
    } else {
        let (a, b) = (a.to_vec::<f64>(), b.to_vec::<f64>());
        a.iter().zip(&b).map(|(x, y)| x * y).sum()
    }
}

/// A named linear map and an input of its domain.
type Case = (String, Box<dyn Fn(&Tensor) -> Tensor>, Tensor);

fn cases() -> Vec<Case> {
    let mut v: Vec<Case> = Vec::new();
    for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
        for n in [1usize, 7, 8] {
            v.push((
                format!("fft {n} {norm:?}"),
                Box::new(move |x| fft::fft(x, None, -1, norm)),
                crand(1, &[2, n]),
            ));
            v.push((
                format!("ifft {n} {norm:?}"),
                Box::new(move |x| fft::ifft(x, None, -1, norm)),
                crand(2, &[2, n]),
            ));
            v.push((
                format!("rfft {n} {norm:?}"),
                Box::new(move |x| fft::rfft(x, None, -1, norm)),
                rand(3, &[2, n]),
            ));
            // A half that is not Hermitian at DC / Nyquist (ignored there).
            v.push((
                format!("irfft {n} {norm:?}"),
                Box::new(move |x| fft::irfft(x, Some(n), -1, norm)),
                crand(4, &[2, n / 2 + 1]),
            ));
        }
        v.push((
            format!("fftn 2-D {norm:?}"),
            Box::new(move |x| fft::fftn(x, None, &[0, 1], norm)),
            crand(5, &[4, 6]),
        ));
        v.push((
            format!("rfftn 3-D axes (0, 2) {norm:?}"),
            Box::new(move |x| fft::rfftn(x, None, &[0, 2], norm)),
            rand(6, &[5, 2, 7]),
        ));
        v.push((
            format!("irfftn 2-D odd {norm:?}"),
            Box::new(move |x| fft::irfftn(x, Some(&[4, 5]), &[], norm)),
            crand(7, &[4, 3]),
        ));
        v.push((
            format!("irfftn 2-D even {norm:?}"),
            Box::new(move |x| fft::irfftn(x, Some(&[3, 6]), &[], norm)),
            crand(8, &[3, 4]),
        ));
    }
    v.push((
        "fft axis 0, n padded".into(),
        Box::new(|x| fft::fft(x, Some(9), 0, FftNorm::Backward)),
        crand(9, &[6, 3]),
    ));
    v.push((
        "rfft axis 0, n cropped".into(),
        Box::new(|x| fft::rfft(x, Some(4), 0, FftNorm::Backward)),
        rand(10, &[6, 3]),
    ));
    v.push((
        "irfft, n/2+1 cropping the input".into(),
        Box::new(|x| fft::irfft(x, Some(5), -1, FftNorm::Backward)),
        crand(11, &[2, 6]),
    ));
    v.push((
        "fft2 with s".into(),
        Box::new(|x| fft::fft2(x, Some(&[3, 7]), &[], FftNorm::Ortho)),
        crand(12, &[2, 4, 5]),
    ));
    v
}

#[test]
fn jvp_is_the_transform_of_the_tangent() {
    for (what, f, x) in cases() {
        let t = if x.dtype().is_complex() {
            crand(99, x.shape())
        } else {
            rand(99, x.shape())
        };
        let (y, ty) = rune::jvp(|x: &Tensor| f(x), &x, &t);
        let want = f(&t);
        assert_eq!(ty.dtype(), want.dtype(), "{what}");
        assert_eq!(ty.shape(), want.shape(), "{what}");
        assert!(
            pair(&(&ty - &want), &(&ty - &want)).abs() == 0.0,
            "{what}: jvp differs from the transform of the tangent"
        );
        assert_eq!(pair(&y, &y), pair(&f(&x), &f(&x)), "{what}: primal");
    }
}

#[test]
fn vjp_is_the_transpose_of_jvp() {
    for (what, f, x) in cases() {
        let t = if x.dtype().is_complex() {
            crand(98, x.shape())
        } else {
            rand(98, x.shape())
        };
        let y = f(&x);
        let ct = if y.dtype().is_complex() {
            crand(97, y.shape())
        } else {
            rand(97, y.shape())
        };
        let (_, jt) = rune::jvp(|x: &Tensor| f(x), &x, &t);
        let (_, jct) = rune::vjp(|x: &Tensor| f(x), &x, &ct);
        assert_eq!(jct.dtype(), x.dtype(), "{what}: cotangent dtype");
        let (lhs, rhs) = (pair(&ct, &jt), pair(&jct, &t));
        assert!(
            (lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()),
            "{what}: <ct, J t> = {lhs} but <J^T ct, t> = {rhs}"
        );
    }
}

/// `sum(real(z) * w1) + sum(imag(z) * w2)`: a real loss seeing every entry.
fn weigh(z: &Tensor, seed: u64) -> Tensor {
    if z.dtype().is_complex() {
        (z.real() * rand(seed, z.shape())).sum_all()
            + (z.imag() * rand(seed + 1, z.shape())).sum_all()
    } else {
        (z * &rand(seed, z.shape())).sum_all()
    }
}

#[test]
fn check_grads_on_real_losses() {
    for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
        for n in [1usize, 2, 7, 8] {
            let x = rand(20, &[3, n]);
            rune::check_grads(|x: &Tensor| weigh(&fft::fft(x, None, -1, norm), 21), &x)
                .unwrap_or_else(|e| panic!("fft {n}: {e}"));
            rune::check_grads(|x: &Tensor| weigh(&fft::ifft(x, None, 0, norm), 22), &x)
                .unwrap_or_else(|e| panic!("ifft axis 0 {n}: {e}"));
            // the Hermitian half of rfft: each entry weighed once
            rune::check_grads(|x: &Tensor| weigh(&fft::rfft(x, None, -1, norm), 23), &x)
                .unwrap_or_else(|e| panic!("rfft {n}: {e}"));
            // irfft from a half built of two real leaves: the imaginary parts
            // at DC (and Nyquist for even n) have zero derivative
            let h = n / 2 + 1;
            let parts = (rand(24, &[3, h]), rand(25, &[3, h]));
            rune::check_grads(
                |(a, b): &(Tensor, Tensor)| {
                    weigh(&fft::irfft(&Tensor::complex(a, b), Some(n), -1, norm), 26)
                },
                &parts,
            )
            .unwrap_or_else(|e| panic!("irfft {n}: {e}"));
            // a spectral filter with real operations only: irfft(rfft(x) * c)
            let c = Tensor::complex(&rand(27, &[h]), &Tensor::zeros(&[h], DType::F64));
            rune::check_grads(
                |x: &Tensor| {
                    weigh(
                        &fft::irfft(&(fft::rfft(x, None, -1, norm) * &c), Some(n), -1, norm),
                        28,
                    )
                },
                &x,
            )
            .unwrap_or_else(|e| panic!("irfft(rfft * c) {n}: {e}"));
        }
    }
    let x = rand(30, &[4, 5, 3]);
    rune::check_grads(
        |x: &Tensor| weigh(&fft::fftn(x, Some(&[3, 6]), &[0, 2], FftNorm::Ortho), 31),
        &x,
    )
    .unwrap_or_else(|e| panic!("fftn: {e}"));
    rune::check_grads(
        |x: &Tensor| weigh(&fft::rfftn(x, None, &[], FftNorm::Backward), 32),
        &x,
    )
    .unwrap_or_else(|e| panic!("rfftn: {e}"));
    rune::check_grads(
        |x: &Tensor| {
            weigh(
                &fft::irfftn(
                    &fft::rfftn(x, None, &[1, 2], FftNorm::Backward),
                    Some(&[5, 3]),
                    &[1, 2],
                    FftNorm::Backward,
                ),
                33,
            )
        },
        &x,
    )
    .unwrap_or_else(|e| panic!("irfftn(rfftn): {e}"));
    // Parseval as a loss: d/dx sum|fft(x)|^2 / n = 2x
    let x = rand(34, &[8]);
    let g = rune::grad(
        |x: &Tensor| {
            let f = fft::fft(x, None, -1, FftNorm::Backward);
            (f.real().square() + f.imag().square()).sum_all() / 8.0
        },
        &x,
    );
    let (g, x) = (g.to_vec::<f64>(), x.to_vec::<f64>());
    for (g, x) in g.iter().zip(&x) {
        assert!(
            (g - 2.0 * x).abs() < 1e-12,
            "Parseval gradient: {g} vs {}",
            2.0 * x
        );
    }
}

#[test]
fn second_order_through_fft() {
    // hvp of a quadratic loss through rfft is a linear map: check_grads of grad
    let x = rand(40, &[7]);
    let loss = |x: &Tensor| {
        let f = fft::rfft(x, None, -1, FftNorm::Ortho);
        (f.real().square() * rand(41, f.shape())).sum_all() + (f.imag().square()).sum_all()
    };
    rune::check_grads(|x: &Tensor| weigh(&rune::grad(loss, x), 42), &x)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn vmap_equals_the_loop_over_lanes() {
    let fs: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor>, Tensor)> = vec![
        (
            "fft",
            Box::new(|x| fft::fft(x, None, -1, FftNorm::Ortho)),
            crand(50, &[3, 4, 6]),
        ),
        (
            "ifft axis 0",
            Box::new(|x| fft::ifft(x, Some(5), 0, FftNorm::Backward)),
            crand(51, &[3, 4, 6]),
        ),
        (
            "rfft",
            Box::new(|x| fft::rfft(x, None, -1, FftNorm::Backward)),
            rand(52, &[3, 4, 7]),
        ),
        (
            "irfft",
            Box::new(|x| fft::irfft(x, Some(6), -1, FftNorm::Forward)),
            crand(53, &[3, 4, 4]),
        ),
        (
            "fft2",
            Box::new(|x| fft::fft2(x, None, &[], FftNorm::Backward)),
            crand(54, &[3, 4, 6]),
        ),
        (
            "rfftn axes (1, 0)",
            Box::new(|x| fft::rfftn(x, None, &[1, 0], FftNorm::Backward)),
            rand(55, &[3, 4, 6]),
        ),
        (
            "fftshift",
            Box::new(|x| fft::fftshift(x, &[])),
            rand(56, &[3, 4, 5]),
        ),
    ];
    for (what, f, x) in fs {
        let got = rune::vmap(|x: &Tensor| f(x), &x);
        let lanes: Vec<Tensor> = (0..x.shape()[0]).map(|i| f(&x.get(i))).collect();
        let want = Tensor::stack(&lanes, 0);
        assert_eq!(got.shape(), want.shape(), "{what}");
        assert_eq!(got.dtype(), want.dtype(), "{what}");
        let d = &got - &want;
        let err = pair(&d, &d).abs().sqrt();
        assert!(err < 1e-12, "{what}: vmap differs from the loop by {err:e}");
    }
    // vmap of grad equals per-lane grads
    let x = rand(57, &[3, 8]);
    let loss = |x: &Tensor| weigh(&fft::rfft(x, None, -1, FftNorm::Backward), 58);
    let got = rune::vmap(|x: &Tensor| rune::grad(loss, x), &x);
    let want = Tensor::stack(
        &(0..3)
            .map(|i| rune::grad(loss, &x.get(i)))
            .collect::<Vec<_>>(),
        0,
    );
    let d = &got - &want;
    assert!(pair(&d, &d).sqrt() < 1e-12, "vmap of grad");
}

// ----------------------------------------------------------------------- jit

#[test]
fn every_transform_is_refused_by_jit_naming_it() {
    let x = rand(60, &[4, 6]);
    let b = FftNorm::Backward;
    check_refused(
        &rune::jit(|x: &Tensor| fft::fft(x, None, -1, b).real()),
        &x,
        "fft::fft",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::ifft(x, None, -1, b).real()),
        &x,
        "fft::ifft",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::rfft(x, None, -1, b).real()),
        &x,
        "fft::rfft",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::irfft(x, None, -1, b)),
        &x,
        "fft::irfft",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::fftn(x, None, &[], b).real()),
        &x,
        "fft::fftn",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::ifftn(x, None, &[], b).real()),
        &x,
        "fft::ifftn",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::rfftn(x, None, &[], b).real()),
        &x,
        "fft::rfftn",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::irfftn(x, None, &[], b)),
        &x,
        "fft::irfftn",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::fft2(x, None, &[], b).real()),
        &x,
        "fft::fft2",
    );
    check_refused(
        &rune::jit(|x: &Tensor| fft::ifft2(x, None, &[], b).real()),
        &x,
        "fft::ifft2",
    );
    // the primitive bound directly reaches staging's own refusal
    check_refused(
        &rune::jit(|x: &Tensor| {
            rune::nx::bind(
                Prim::Fft {
                    kind: FftKind::Rfft,
                    lengths: vec![6],
                },
                &[x],
            )
            .real()
        }),
        &x,
        "fft::rfft",
    );
    // under grad inside jit too
    check_refused(
        &rune::jit(|x: &Tensor| rune::grad(|x: &Tensor| weigh(&fft::rfft(x, None, -1, b), 61), x)),
        &x,
        "fft::rfft",
    );
    // the same functions run eagerly
    assert_eq!(fft::rfft(&x, None, -1, b).shape(), &[4, 4]);
}

#[test]
fn pmap_refuses_transforms_too() {
    let x = rand(62, &[2, 8]);
    let f = rune::pmap_with(
        |x: &Tensor| fft::rfft(x, None, -1, FftNorm::Backward).real(),
        rune::PmapOpts {
            devices: vec!["CPU:1".into(), "CPU:2".into()],
            ..Default::default()
        },
    );
    let m = match f.try_call(&x) {
        Ok(_) => panic!("expected a JitError"),
        Err(e) => e.message().to_string(),
    };
    assert!(
        m.contains("fft::rfft") && m.contains("runs eagerly outside jit"),
        "{m}"
    );
}

#[test]
fn frequencies_and_shifts_compile_under_jit() {
    let x = rand(63, &[8]);
    let f = rune::jit(|x: &Tensor| {
        fft::fftshift(&(x * &fft::fftfreq(8, 0.5, DType::F64)), &[])
            + fft::rfftfreq(14, 1.0, DType::F64).narrow(0, 0, 8)
    });
    let got = f.call(&x).to_vec::<f64>();
    let want = (fft::fftshift(&(&x * &fft::fftfreq(8, 0.5, DType::F64)), &[])
        + fft::rfftfreq(14, 1.0, DType::F64).narrow(0, 0, 8))
    .to_vec::<f64>();
    assert_eq!(got, want);
}

#[test]
fn check_grads_on_complex_leaves() {
    for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
        for n in [1usize, 2, 7, 8] {
            let z = crand(40, &[2, n]);
            type F = Box<dyn Fn(&Tensor) -> Tensor>;
            let fs: [(&str, F); 4] = [
                (
                    "fft",
                    Box::new(move |z| fft::fft(z, None, -1, norm).abs().sum_all()),
                ),
                (
                    "ifft",
                    Box::new(move |z| weigh(&fft::ifft(z, None, 0, norm), 41)),
                ),
                (
                    "irfft",
                    Box::new(move |z| weigh(&fft::irfft(z, Some(2 * n - 1), -1, norm), 42)),
                ),
                // a complex objective: checked as its real and imaginary parts
                (
                    "fft sum",
                    Box::new(move |z| (fft::fft(z, None, -1, norm) * z).sum_all()),
                ),
            ];
            for (name, f) in fs {
                rune::check_grads(|z: &Tensor| f(z), &z)
                    .unwrap_or_else(|e| panic!("{name} {n} {norm:?}: {e}"));
            }
        }
    }
    let z = crand(43, &[3, 4, 2]);
    rune::check_grads(
        |z: &Tensor| weigh(&fft::fftn(z, Some(&[5, 2]), &[0, 1], FftNorm::Ortho), 44),
        &z,
    )
    .unwrap_or_else(|e| panic!("fftn: {e}"));
}

#[test]
fn parseval_on_complex_tensors_and_its_gradient() {
    // sum |fft(z)|^2 = n sum |z|^2, so in JAX's convention (grad of |z|^2 is
    // 2 conj(z)) the gradient of the left side is 2 n conj(z).
    let n = 12usize;
    let z = crand(50, &[n]);
    let energy = |z: &Tensor| z.abs().square().sum_all();
    let lhs = energy(&fft::fft(&z, None, -1, FftNorm::Backward)).item::<f64>();
    let rhs = energy(&z).item::<f64>() * n as f64;
    assert!((lhs - rhs).abs() < 1e-12 * rhs, "Parseval: {lhs} vs {rhs}");
    let ortho = energy(&fft::fft(&z, None, -1, FftNorm::Ortho)).item::<f64>();
    assert!(
        (ortho - rhs / n as f64).abs() < 1e-12 * rhs,
        "ortho keeps the energy"
    );
    let g = rune::grad(
        |z: &Tensor| energy(&fft::fft(z, None, -1, FftNorm::Backward)),
        &z,
    );
    let (g, z) = (g.to_vec::<C>(), z.to_vec::<C>());
    for (g, z) in g.iter().zip(&z) {
        let want = z.conj() * (2.0 * n as f64);
        assert!((g - want).norm() < 1e-11, "gradient {g} vs {want}");
    }
}

#[test]
fn vjp_of_complex_losses_through_mean_and_sum() {
    // mean(fft(z)) is z[0] (the DC term over n is the mean; the mean of the
    // spectrum is the first sample): its cotangent 1 lands on z[0] alone.
    let z = crand(60, &[6]);
    let one = Tensor::from_slice(&[Complex::new(1.0, 0.0)], &[]);
    let (out, ct) = rune::vjp(
        |z: &Tensor| fft::fft(z, None, -1, FftNorm::Backward).mean_all(),
        &z,
        &one,
    );
    let z0 = z.to_vec::<C>()[0];
    assert!(
        (out.item::<C>() - z0).norm() < 1e-12,
        "{} vs {z0}",
        out.item::<C>()
    );
    let ct = ct.to_vec::<C>();
    for (k, c) in ct.iter().enumerate() {
        let want = if k == 0 { 1.0 } else { 0.0 };
        assert!(
            (c - Complex::new(want, 0.0)).norm() < 1e-12,
            "ct[{k}] = {c}"
        );
    }
    // sum(ifft(z)) is z[0] too
    let s = fft::ifft(&z, None, -1, FftNorm::Backward)
        .sum_all()
        .item::<C>();
    assert!((s - z0).norm() < 1e-12);
}
