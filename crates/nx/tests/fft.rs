//! nx::fft against a naive O(n^2) DFT in f64 written here (odd, even and
//! prime lengths), numpy's definitions of n/s cropping and padding, the
//! norms, axes, the n-d transforms as successive 1-D DFTs, round trips,
//! Parseval, fftfreq/rfftfreq/fftshift, f32 against f64, and the errors.

use nx::fft::{self, FftNorm};
use nx::{Complex, DType, Tensor};
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

type C = Complex<f64>;

const LENGTHS: [usize; 8] = [1, 2, 7, 8, 12, 17, 64, 97];

/// Deterministic values in [-1, 1) (an LCG; the tests need no RNG crate).
fn data(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn cdata(len: usize, seed: u64) -> Vec<C> {
    let re = data(len, seed);
    let im = data(len, seed + 1000);
    re.into_iter().zip(im).map(|(r, i)| C::new(r, i)).collect()
}

/// The unnormalized DFT, `sign` -1 (forward) or +1 (inverse).
fn dft(x: &[C], sign: f64) -> Vec<C> {
    let n = x.len();
    (0..n)
        .map(|k| {
            let mut acc = C::new(0.0, 0.0);
            for (j, &v) in x.iter().enumerate() {
                // Reduce j*k mod n first: exact angles for long signals.
                let ang = sign * 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
                acc += v * C::new(ang.cos(), ang.sin());
            }
            acc
        })
        .collect()
}

/// The unnormalized DFT along `axis` of row-major `x` of `shape`.
fn dft_axis(x: &[C], shape: &[usize], axis: usize, sign: f64) -> Vec<C> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = x.to_vec();
    for o in 0..outer {
        for i in 0..inner {
            let idx = |j: usize| (o * n + j) * inner + i;
            let line: Vec<C> = (0..n).map(|j| x[idx(j)]).collect();
            for (j, v) in dft(&line, sign).into_iter().enumerate() {
                out[idx(j)] = v;
            }
        }
    }
    out
}

fn real(x: &[f64]) -> Vec<C> {
    x.iter().map(|&r| C::new(r, 0.0)).collect()
}

fn ct(x: &[C], shape: &[usize]) -> Tensor {
    Tensor::from_slice(x, shape)
}

fn close(got: &[C], want: &[C], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).norm() <= tol * (1.0 + w.norm()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn close_re(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn scaled(x: &[C], s: f64) -> Vec<C> {
    x.iter().map(|v| v * s).collect()
}

/// `x` cropped or zero-padded to `n`.
fn resized(x: &[C], n: usize) -> Vec<C> {
    (0..n)
        .map(|i| x.get(i).copied().unwrap_or(C::new(0.0, 0.0)))
        .collect()
}

/// numpy's irfft reference: the Hermitian extension of the half `x`
/// (cropped/padded to n/2 + 1) to n points, inverse DFT / n, real part.
fn irfft_ref(x: &[C], n: usize) -> Vec<f64> {
    let h = resized(x, n / 2 + 1);
    let full: Vec<C> = (0..n)
        .map(|k| if k < h.len() { h[k] } else { h[n - k].conj() })
        .collect();
    dft(&full, 1.0).iter().map(|v| v.re / n as f64).collect()
}

const TOL: f64 = 1e-10;

#[test]
fn fft_and_ifft_match_the_naive_dft() {
    for (s, &n) in LENGTHS.iter().enumerate() {
        let x = cdata(n, s as u64);
        let t = ct(&x, &[n]);
        let f = fft::fft(&t, None, -1, FftNorm::Backward);
        assert_eq!((f.shape(), f.dtype()), (&[n][..], DType::C128));
        close(&f.to_vec::<C>(), &dft(&x, -1.0), TOL, &format!("fft {n}"));
        let i = fft::ifft(&t, None, 0, FftNorm::Backward);
        close(
            &i.to_vec::<C>(),
            &scaled(&dft(&x, 1.0), 1.0 / n as f64),
            TOL,
            &format!("ifft {n}"),
        );
    }
}

#[test]
fn rfft_is_the_first_half_of_the_dft_of_a_real_input() {
    for (s, &n) in LENGTHS.iter().enumerate() {
        let x = data(n, 10 + s as u64);
        let t = Tensor::from_slice(&x, &[n]);
        let r = fft::rfft(&t, None, -1, FftNorm::Backward);
        assert_eq!((r.shape(), r.dtype()), (&[n / 2 + 1][..], DType::C128));
        let want = dft(&real(&x), -1.0);
        close(
            &r.to_vec::<C>(),
            &want[..n / 2 + 1],
            TOL,
            &format!("rfft {n}"),
        );
        // ... and of nx's own complex fft of the same input
        let f = fft::fft(&t, None, -1, FftNorm::Backward).to_vec::<C>();
        close(
            &r.to_vec::<C>(),
            &f[..n / 2 + 1],
            TOL,
            &format!("rfft vs fft {n}"),
        );
    }
}

#[test]
fn irfft_matches_the_hermitian_reference_for_every_n() {
    for (s, &n) in LENGTHS.iter().enumerate() {
        // A half that is not exactly Hermitian: the imaginary parts of the
        // zero and Nyquist entries are ignored, as numpy's.
        let h = n / 2 + 1;
        let x = cdata(h, 20 + s as u64);
        let y = fft::irfft(&ct(&x, &[h]), Some(n), -1, FftNorm::Backward);
        assert_eq!((y.shape(), y.dtype()), (&[n][..], DType::F64));
        close_re(
            &y.to_vec::<f64>(),
            &irfft_ref(&x, n),
            TOL,
            &format!("irfft {n}"),
        );
    }
    // the default n is 2 (m - 1)
    let x = cdata(5, 3);
    let y = fft::irfft(&ct(&x, &[5]), None, -1, FftNorm::Backward);
    assert_eq!(y.shape(), &[8]);
    close_re(
        &y.to_vec::<f64>(),
        &irfft_ref(&x, 8),
        TOL,
        "irfft default n",
    );
    // n crops (n/2 + 1 < m) and pads (n/2 + 1 > m) the input
    for n in [3, 4, 15, 16] {
        let y = fft::irfft(&ct(&x, &[5]), Some(n), -1, FftNorm::Backward);
        close_re(
            &y.to_vec::<f64>(),
            &irfft_ref(&x, n),
            TOL,
            &format!("irfft n={n} of 5"),
        );
    }
}

#[test]
fn n_crops_or_zero_pads_before_the_transform() {
    let x = cdata(8, 4);
    let t = ct(&x, &[8]);
    for n in [1, 5, 8, 12, 17] {
        let f = fft::fft(&t, Some(n), -1, FftNorm::Backward);
        close(
            &f.to_vec::<C>(),
            &dft(&resized(&x, n), -1.0),
            TOL,
            &format!("fft n={n}"),
        );
        let i = fft::ifft(&t, Some(n), -1, FftNorm::Backward);
        let want = scaled(&dft(&resized(&x, n), 1.0), 1.0 / n as f64);
        close(&i.to_vec::<C>(), &want, TOL, &format!("ifft n={n}"));
    }
    let r = data(8, 5);
    for n in [3, 8, 11] {
        let f = fft::rfft(
            &Tensor::from_slice(&r, &[8]),
            Some(n),
            -1,
            FftNorm::Backward,
        );
        let want = dft(&resized(&real(&r), n), -1.0);
        close(
            &f.to_vec::<C>(),
            &want[..n / 2 + 1],
            TOL,
            &format!("rfft n={n}"),
        );
    }
}

#[test]
fn every_norm_follows_numpy() {
    for n in [7usize, 8] {
        let x = cdata(n, 6);
        let t = ct(&x, &[n]);
        let fwd = dft(&x, -1.0);
        let inv = dft(&x, 1.0);
        let nf = n as f64;
        let cases = [
            (FftNorm::Backward, 1.0, 1.0 / nf),
            (FftNorm::Ortho, 1.0 / nf.sqrt(), 1.0 / nf.sqrt()),
            (FftNorm::Forward, 1.0 / nf, 1.0),
        ];
        for (norm, f_scale, i_scale) in cases {
            let what = format!("{norm:?} {n}");
            close(
                &fft::fft(&t, None, -1, norm).to_vec::<C>(),
                &scaled(&fwd, f_scale),
                TOL,
                &what,
            );
            close(
                &fft::ifft(&t, None, -1, norm).to_vec::<C>(),
                &scaled(&inv, i_scale),
                TOL,
                &what,
            );
            let r = data(n, 7);
            let rt = Tensor::from_slice(&r, &[n]);
            let rf = dft(&real(&r), -1.0);
            close(
                &fft::rfft(&rt, None, -1, norm).to_vec::<C>(),
                &scaled(&rf[..n / 2 + 1], f_scale),
                TOL,
                &what,
            );
            let h = cdata(n / 2 + 1, 8);
            let want: Vec<f64> = irfft_ref(&h, n).iter().map(|v| v * nf * i_scale).collect();
            let got = fft::irfft(&ct(&h, &[n / 2 + 1]), Some(n), -1, norm).to_vec::<f64>();
            close_re(&got, &want, TOL, &what);
            // fftn's n is the product of the lengths
            let x2 = cdata(n * 3, 9);
            let s2 = [n, 3];
            let mut want = dft_axis(&x2, &s2, 1, -1.0);
            want = dft_axis(&want, &s2, 0, -1.0);
            let got = fft::fftn(&ct(&x2, &s2), None, &[0, 1], norm).to_vec::<C>();
            let total = 3.0 * nf;
            let scale = match norm {
                FftNorm::Backward => 1.0,
                FftNorm::Ortho => 1.0 / total.sqrt(),
                FftNorm::Forward => 1.0 / total,
            };
            close(&got, &scaled(&want, scale), TOL, &format!("fftn {what}"));
        }
    }
}

#[test]
fn axes_other_than_the_last() {
    let shape = [5usize, 6, 3];
    let x = cdata(90, 11);
    let t = ct(&x, &shape);
    for axis in [0isize, 1, -3, -2] {
        let a = axis.rem_euclid(3) as usize;
        let f = fft::fft(&t, None, axis, FftNorm::Backward);
        close(
            &f.to_vec::<C>(),
            &dft_axis(&x, &shape, a, -1.0),
            TOL,
            &format!("fft axis {axis}"),
        );
    }
    // rfft along axis 0 of a real [7, 4]: [4, 4]
    let r = data(28, 12);
    let f = fft::rfft(&Tensor::from_slice(&r, &[7, 4]), None, 0, FftNorm::Backward);
    assert_eq!(f.shape(), &[4, 4]);
    let full = dft_axis(&real(&r), &[7, 4], 0, -1.0);
    close(&f.to_vec::<C>(), &full[..16], TOL, "rfft axis 0");
    // irfft along axis 0 inverts it
    let back = fft::irfft(&f, Some(7), 0, FftNorm::Backward);
    close_re(&back.to_vec::<f64>(), &r, TOL, "irfft axis 0");
    // a strided (transposed) input
    let tt = t.swapaxes(0, 2);
    let f = fft::fft(&tt, None, 1, FftNorm::Backward);
    let want = fft::fft(&tt.contiguous(), None, 1, FftNorm::Backward);
    close(&f.to_vec::<C>(), &want.to_vec::<C>(), TOL, "strided input");
}

#[test]
fn fftn_is_successive_one_dimensional_dfts() {
    // 2-D
    let s2 = [6usize, 7];
    let x2 = cdata(42, 13);
    let want = dft_axis(&dft_axis(&x2, &s2, 1, -1.0), &s2, 0, -1.0);
    let t2 = ct(&x2, &s2);
    close(
        &fft::fftn(&t2, None, &[], FftNorm::Backward).to_vec::<C>(),
        &want,
        TOL,
        "fftn 2-D",
    );
    close(
        &fft::fft2(&t2, None, &[], FftNorm::Backward).to_vec::<C>(),
        &want,
        TOL,
        "fft2",
    );
    close(
        &fft::fft2(&t2, None, &[-2, -1], FftNorm::Backward).to_vec::<C>(),
        &want,
        TOL,
        "fft2 axes",
    );
    let inv = scaled(
        &dft_axis(&dft_axis(&x2, &s2, 1, 1.0), &s2, 0, 1.0),
        1.0 / 42.0,
    );
    close(
        &fft::ifft2(&t2, None, &[], FftNorm::Backward).to_vec::<C>(),
        &inv,
        TOL,
        "ifft2",
    );
    close(
        &fft::ifftn(&t2, None, &[0, 1], FftNorm::Backward).to_vec::<C>(),
        &inv,
        TOL,
        "ifftn",
    );
    // 3-D, all axes and a subset in a different order
    let s3 = [4usize, 5, 3];
    let x3 = cdata(60, 14);
    let t3 = ct(&x3, &s3);
    let mut want = x3.clone();
    for a in 0..3 {
        want = dft_axis(&want, &s3, a, -1.0);
    }
    close(
        &fft::fftn(&t3, None, &[], FftNorm::Backward).to_vec::<C>(),
        &want,
        TOL,
        "fftn 3-D",
    );
    let want02 = dft_axis(&dft_axis(&x3, &s3, 0, -1.0), &s3, 2, -1.0);
    close(
        &fft::fftn(&t3, None, &[2, 0], FftNorm::Backward).to_vec::<C>(),
        &want02,
        TOL,
        "fftn axes [2, 0]",
    );
    // fft2 over axes (0, 2) of a 3-D tensor
    close(
        &fft::fft2(&t3, None, &[0, 2], FftNorm::Backward).to_vec::<C>(),
        &want02,
        TOL,
        "fft2 axes (0, 2)",
    );
    // s crops one axis and pads another: [4, 5, 3] -> axes (0, 1) to (3, 8)
    let sized: Vec<C> = (0..3 * 8 * 3)
        .map(|i| {
            let (a, b, c) = (i / 24, (i / 3) % 8, i % 3);
            if b < 5 {
                x3[(a * 5 + b) * 3 + c]
            } else {
                C::new(0.0, 0.0)
            }
        })
        .collect();
    let ss = [3usize, 8, 3];
    let want = dft_axis(&dft_axis(&sized, &ss, 1, -1.0), &ss, 0, -1.0);
    let got = fft::fftn(&t3, Some(&[3, 8]), &[0, 1], FftNorm::Backward);
    assert_eq!(got.shape(), &ss);
    close(&got.to_vec::<C>(), &want, TOL, "fftn with s");
    // s without axes: the last len(s) axes
    let got = fft::fftn(&t3, Some(&[5, 3]), &[], FftNorm::Backward);
    let want = dft_axis(&dft_axis(&x3, &s3, 2, -1.0), &s3, 1, -1.0);
    close(&got.to_vec::<C>(), &want, TOL, "fftn s only");
}

#[test]
fn rfftn_and_irfftn() {
    for s3 in [[4usize, 5, 6], [3, 4, 7]] {
        let n: usize = s3.iter().product();
        let r = data(n, 15);
        let t = Tensor::from_slice(&r, &s3);
        let mut full = real(&r);
        for a in 0..3 {
            full = dft_axis(&full, &s3, a, -1.0);
        }
        let h = s3[2] / 2 + 1;
        let half: Vec<C> = (0..s3[0] * s3[1] * h)
            .map(|i| full[(i / h) * s3[2] + i % h])
            .collect();
        let f = fft::rfftn(&t, None, &[], FftNorm::Backward);
        assert_eq!(f.shape(), &[s3[0], s3[1], h]);
        close(&f.to_vec::<C>(), &half, TOL, "rfftn");
        // round trip with the real axis' length given
        let back = fft::irfftn(&f, Some(&s3), &[0, 1, 2], FftNorm::Backward);
        close_re(&back.to_vec::<f64>(), &r, TOL, "irfftn(rfftn)");
        // the last of axes is the real one: rfftn over (2, 0) halves axis 0
        let f = fft::rfftn(&t, None, &[2, 0], FftNorm::Ortho);
        assert_eq!(f.shape(), &[s3[0] / 2 + 1, s3[1], s3[2]]);
        let back = fft::irfftn(&f, Some(&[s3[2], s3[0]]), &[2, 0], FftNorm::Ortho);
        close_re(&back.to_vec::<f64>(), &r, TOL, "irfftn(rfftn) axes (2, 0)");
    }
}

#[test]
fn round_trips() {
    for (s, &n) in LENGTHS.iter().enumerate() {
        let x = cdata(3 * n, 30 + s as u64);
        let t = ct(&x, &[3, n]);
        for norm in [FftNorm::Backward, FftNorm::Ortho, FftNorm::Forward] {
            let back = fft::ifft(&fft::fft(&t, None, -1, norm), None, -1, norm);
            close(&back.to_vec::<C>(), &x, TOL, &format!("ifft(fft) {n}"));
            let r = data(3 * n, 40 + s as u64);
            let rt = Tensor::from_slice(&r, &[3, n]);
            let back = fft::irfft(&fft::rfft(&rt, None, -1, norm), Some(n), -1, norm);
            close_re(&back.to_vec::<f64>(), &r, TOL, &format!("irfft(rfft) {n}"));
        }
    }
}

#[test]
fn parseval() {
    for (s, &n) in LENGTHS.iter().enumerate() {
        let x = cdata(n, 50 + s as u64);
        let f = fft::fft(&ct(&x, &[n]), None, -1, FftNorm::Backward).to_vec::<C>();
        let ex: f64 = x.iter().map(|v| v.norm_sqr()).sum();
        let ef: f64 = f.iter().map(|v| v.norm_sqr()).sum::<f64>() / n as f64;
        assert!((ex - ef).abs() <= 1e-10 * ex.max(1.0), "{n}: {ex} vs {ef}");
        // ortho is unitary
        let o = fft::fft(&ct(&x, &[n]), None, -1, FftNorm::Ortho).to_vec::<C>();
        let eo: f64 = o.iter().map(|v| v.norm_sqr()).sum();
        assert!((ex - eo).abs() <= 1e-10 * ex.max(1.0), "{n} ortho");
    }
}

#[test]
fn fftfreq_rfftfreq_and_the_shifts_follow_numpy() {
    for n in [1usize, 2, 7, 8] {
        let d = 0.1;
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let k = if i <= (n - 1) / 2 {
                    i as f64
                } else {
                    i as f64 - n as f64
                };
                k / (d * n as f64)
            })
            .collect();
        close_re(
            &fft::fftfreq(n, d, DType::F64).to_vec::<f64>(),
            &want,
            1e-15,
            "fftfreq",
        );
        let f32s = fft::fftfreq(n, d, DType::F32);
        assert_eq!(f32s.dtype(), DType::F32);
        let want: Vec<f64> = (0..=n / 2).map(|i| i as f64 / (d * n as f64)).collect();
        close_re(
            &fft::rfftfreq(n, d, DType::F64).to_vec::<f64>(),
            &want,
            1e-15,
            "rfftfreq",
        );
    }
    // numpy.fft.fftfreq(8) = [0, .125, .25, .375, -.5, -.375, -.25, -.125]
    assert_eq!(
        fft::fftfreq(8, 1.0, DType::F64).to_vec::<f64>(),
        vec![0.0, 0.125, 0.25, 0.375, -0.5, -0.375, -0.25, -0.125]
    );
    let a5 = Tensor::arange(0.0, 5.0, 1.0, DType::F64);
    assert_eq!(
        fft::fftshift(&a5, &[]).to_vec::<f64>(),
        vec![3.0, 4.0, 0.0, 1.0, 2.0]
    );
    assert_eq!(
        fft::ifftshift(&a5, &[-1]).to_vec::<f64>(),
        vec![2.0, 3.0, 4.0, 0.0, 1.0]
    );
    let a6 = Tensor::arange(0.0, 6.0, 1.0, DType::F64);
    assert_eq!(
        fft::fftshift(&a6, &[0]).to_vec::<f64>(),
        vec![3.0, 4.0, 5.0, 0.0, 1.0, 2.0]
    );
    // 2-D: numpy.fft.fftshift(arange(6).reshape(2, 3)) = [[5, 3, 4], [2, 0, 1]]
    let m = a6.reshape(&[2, 3]);
    assert_eq!(
        fft::fftshift(&m, &[]).to_vec::<f64>(),
        vec![5.0, 3.0, 4.0, 2.0, 0.0, 1.0]
    );
    assert_eq!(
        fft::fftshift(&m, &[1]).to_vec::<f64>(),
        vec![2.0, 0.0, 1.0, 5.0, 3.0, 4.0]
    );
    assert_eq!(
        fft::ifftshift(&fft::fftshift(&m, &[]), &[]).to_vec::<f64>(),
        m.to_vec::<f64>()
    );
}

#[test]
fn f32_is_computed_in_f32_within_a_stated_bound() {
    // |X32 - X64| <= 1e-5 * sqrt(n) * sum|x| (rounding in f32 through
    // log2(n) butterfly stages; measured errors are far below).
    for (s, &n) in LENGTHS.iter().enumerate() {
        let x = cdata(n, 60 + s as u64);
        let x32: Vec<Complex<f32>> = x
            .iter()
            .map(|v| Complex::new(v.re as f32, v.im as f32))
            .collect();
        let f32s = fft::fft(&Tensor::from_slice(&x32, &[n]), None, -1, FftNorm::Backward);
        assert_eq!(f32s.dtype(), DType::C64);
        let exact = dft(
            &x32.iter()
                .map(|v| C::new(v.re as f64, v.im as f64))
                .collect::<Vec<_>>(),
            -1.0,
        );
        let bound = 1e-5 * (n as f64).sqrt() * x.iter().map(|v| v.norm()).sum::<f64>();
        for (g, w) in f32s.to_vec::<Complex<f32>>().iter().zip(&exact) {
            let g = C::new(g.re as f64, g.im as f64);
            assert!((g - w).norm() <= bound, "{n}: {g} vs {w}");
        }
        let r: Vec<f32> = data(n, 70 + s as u64).iter().map(|&v| v as f32).collect();
        let rf = fft::rfft(&Tensor::from_slice(&r, &[n]), None, -1, FftNorm::Backward);
        assert_eq!(rf.dtype(), DType::C64);
        let exact = dft(
            &r.iter().map(|&v| C::new(v as f64, 0.0)).collect::<Vec<_>>(),
            -1.0,
        );
        let bound = 1e-5 * (n as f64).sqrt() * r.iter().map(|v| v.abs() as f64).sum::<f64>();
        for (g, w) in rf.to_vec::<Complex<f32>>().iter().zip(&exact) {
            let g = C::new(g.re as f64, g.im as f64);
            assert!((g - w).norm() <= bound, "rfft {n}: {g} vs {w}");
        }
        let back = fft::irfft(&rf, Some(n), -1, FftNorm::Backward);
        assert_eq!(back.dtype(), DType::F32);
        for (g, w) in back.to_vec::<f32>().iter().zip(&r) {
            assert!((g - w).abs() <= 1e-5 * (n as f32).sqrt(), "irfft {n}");
        }
    }
}

#[test]
fn real_inputs_are_cast_to_complex_and_batches_are_rows() {
    let r = data(24, 80);
    let t = Tensor::from_slice(&r, &[4, 6]);
    let f = fft::fft(&t, None, -1, FftNorm::Backward);
    assert_eq!(f.dtype(), DType::C128);
    let want = dft_axis(&real(&r), &[4, 6], 1, -1.0);
    close(&f.to_vec::<C>(), &want, TOL, "real input");
    let f = fft::fft(&t.cast(DType::F32), None, -1, FftNorm::Backward);
    assert_eq!(f.dtype(), DType::C64);
    let f = fft::fft(&t.cast(DType::F16), None, -1, FftNorm::Backward);
    assert_eq!(f.dtype(), DType::C64);
    // a large batch (split across the pool) equals the naive rows
    let x = cdata(4096 * 16, 81);
    let f = fft::fft(&ct(&x, &[4096, 16]), None, -1, FftNorm::Backward);
    close(
        &f.to_vec::<C>(),
        &dft_axis(&x, &[4096, 16], 1, -1.0),
        TOL,
        "batched",
    );
    // empty batches
    let e = fft::fft(
        &Tensor::zeros(&[0, 8], DType::C64),
        None,
        -1,
        FftNorm::Backward,
    );
    assert_eq!(e.shape(), &[0, 8]);
    let e = fft::rfft(
        &Tensor::zeros(&[0, 8], DType::F32),
        None,
        -1,
        FftNorm::Backward,
    );
    assert_eq!(e.shape(), &[0, 5]);
}

#[test]
fn errors_name_the_operation() {
    let x = Tensor::zeros(&[4, 3], DType::C64);
    let r = Tensor::zeros(&[4, 3], DType::F32);
    let m = panic_message(|| {
        fft::fft(&x, None, 2, FftNorm::Backward);
    });
    assert!(
        m.contains("fft::fft") && m.contains("axis 2 is out of range"),
        "{m}"
    );
    let m = panic_message(|| {
        fft::ifft(&x, Some(0), -1, FftNorm::Backward);
    });
    assert!(m.contains("fft::ifft") && m.contains("(0)"), "{m}");
    let m = panic_message(|| {
        fft::irfft(
            &Tensor::zeros(&[1], DType::C64),
            None,
            -1,
            FftNorm::Backward,
        );
    });
    assert!(
        m.contains("fft::irfft") && m.contains("invalid number of FFT data points"),
        "{m}"
    );
    let m = panic_message(|| {
        fft::rfft(&x, None, -1, FftNorm::Backward);
    });
    assert!(m.contains("fft::rfft") && m.contains("real float"), "{m}");
    let m = panic_message(|| {
        fft::fft(
            &Tensor::zeros(&[4], DType::I32),
            None,
            -1,
            FftNorm::Backward,
        );
    });
    assert!(m.contains("fft::fft") && m.contains("i32"), "{m}");
    let m = panic_message(|| {
        fft::fftn(&r, None, &[0, -2], FftNorm::Backward);
    });
    assert!(m.contains("fft::fftn") && m.contains("repeated"), "{m}");
    let m = panic_message(|| {
        fft::rfftn(&r, Some(&[4]), &[0, 1], FftNorm::Backward);
    });
    assert!(
        m.contains("fft::rfftn") && m.contains("s has 1 lengths"),
        "{m}"
    );
    let m = panic_message(|| {
        fft::fft2(
            &Tensor::zeros(&[4], DType::C64),
            None,
            &[],
            FftNorm::Backward,
        );
    });
    assert!(m.contains("fft::fft2") && m.contains("out of range"), "{m}");
    let m = panic_message(|| {
        fft::fftfreq(0, 1.0, DType::F32);
    });
    assert!(m.contains("fft::fftfreq"), "{m}");
    let m = panic_message(|| {
        fft::rfftfreq(4, 1.0, DType::I32);
    });
    assert!(m.contains("fft::rfftfreq") && m.contains("float"), "{m}");
}
