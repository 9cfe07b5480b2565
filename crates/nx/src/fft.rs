//! Discrete Fourier transforms (`nx::fft`), numpy's `numpy.fft` API: `fft
//! ifft rfft irfft` along one axis, `fftn ifftn rfftn irfftn fft2 ifft2`
//! along several, `fftfreq rfftfreq` (sample frequencies), `fftshift
//! ifftshift`.
//!
//! Every transform is one `Prim::Fft` (JAX's `fft_p`) over trailing axes:
//! the requested axes are moved last (in the given order) and back, the
//! input is cropped or zero-padded to the requested lengths first, and the
//! normalization is a real scalar multiply after (the kernel's inverse
//! transforms already divide by the product of the lengths, as XLA's).
//!
//! Conventions (numpy's unless said):
//! - `n` / `s` crop or zero-pad the input along the axis before the
//!   transform; `irfft`'s default `n` is `2 * (m - 1)` for `m` input points,
//!   and its input is cropped or padded to `n / 2 + 1` points.
//! - Empty `axes` means "not given": the last `s.len()` axes when `s` is
//!   given, else every axis (`fft2`/`ifft2`: the last two).
//! - Repeated axes panic (as JAX; numpy transforms twice).
//! - dtypes: complex inputs stay (`C64`, `C128`); `fft`, `ifft`, `irfft`
//!   (and their n-d forms) cast a real float input to complex (`F32` ->
//!   `C64`, `F64` -> `C128`, `F16`/`BF16` -> `C64`, as JAX); `rfft`/`rfftn`
//!   take a real float (`F16`/`BF16` computed in `F32`); integer and bool
//!   inputs panic (cast them first; numpy computes them in f64). f32 data is
//!   transformed in f32, f64 in f64.
//! - The imaginary parts of `irfft`'s zero-frequency entry (and, for even
//!   `n`, the Nyquist entry) are ignored, as numpy's.
//!
//! The transforms run eagerly: inside `rune::jit`/`pmap` each one raises a
//! `JitError` naming it (`fft::rfft`, ...). `fftfreq`, `rfftfreq` and the
//! shifts are ordinary tensor operations (constants and rolls) and are
//! staged like any other.
//!
//! ```
//! use nx::fft::{self, FftNorm};
//! use nx::{Complex, Tensor};
//! let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[4]);
//! let f = fft::rfft(&x, None, -1, FftNorm::Backward);
//! assert_eq!(f.to_vec::<Complex<f64>>()[0], Complex::new(10.0, 0.0));
//! let back = fft::irfft(&f, Some(4), -1, FftNorm::Backward);
//! assert!(back.to_vec::<f64>().iter().zip([1.0, 2.0, 3.0, 4.0]).all(|(a, b)| (a - b).abs() < 1e-12));
//! ```

use crate::prim::{FftKind, Prim};
use crate::shape::normalize_axis;
use crate::tensor::Tensor;
use crate::trace::{bind, notify_eager_only};
use crate::DType;

/// numpy's `norm` argument: which direction carries the `1/n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftNorm {
    /// Forward unscaled, inverse scaled by `1/n` (numpy's default).
    Backward,
    /// Both scaled by `1/sqrt(n)` (unitary).
    Ortho,
    /// Forward scaled by `1/n`, inverse unscaled.
    Forward,
}

/// The 1-D transform of `x` along `axis`, `n` points (cropped or
/// zero-padded; default the axis's size).
///
/// ```
/// use nx::fft::{fft, FftNorm};
/// use nx::{Complex, Tensor};
/// let x = Tensor::from_slice(&[Complex::new(1.0f32, 0.0), Complex::new(0.0, 0.0)], &[2]);
/// assert_eq!(fft(&x, None, -1, FftNorm::Backward).to_vec::<Complex<f32>>(), vec![Complex::new(1.0, 0.0); 2]);
/// ```
pub fn fft(x: &Tensor, n: Option<usize>, axis: isize, norm: FftNorm) -> Tensor {
    one_axis("fft::fft", FftKind::Fft, x, n, axis, norm)
}

/// The inverse of [`fft`] (`1/n` with `FftNorm::Backward`).
pub fn ifft(x: &Tensor, n: Option<usize>, axis: isize, norm: FftNorm) -> Tensor {
    one_axis("fft::ifft", FftKind::Ifft, x, n, axis, norm)
}

/// The transform of a real `x` along `axis`: the `n/2 + 1` non-negative
/// frequencies of [`fft`] (the rest are their conjugates).
pub fn rfft(x: &Tensor, n: Option<usize>, axis: isize, norm: FftNorm) -> Tensor {
    one_axis("fft::rfft", FftKind::Rfft, x, n, axis, norm)
}

/// The inverse of [`rfft`]: `n` real points (default `2 * (m - 1)` for `m`
/// input points) from the Hermitian half along `axis`.
pub fn irfft(x: &Tensor, n: Option<usize>, axis: isize, norm: FftNorm) -> Tensor {
    one_axis("fft::irfft", FftKind::Irfft, x, n, axis, norm)
}

/// The n-dimensional transform over `axes` (empty: the last `s.len()`
/// axes, or all), with lengths `s` (default the axes' sizes).
pub fn fftn(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes("fft::fftn", FftKind::Fft, x, s, axes, None, norm)
}

/// The inverse of [`fftn`].
pub fn ifftn(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes("fft::ifftn", FftKind::Ifft, x, s, axes, None, norm)
}

/// The n-dimensional transform of a real `x`: the last of `axes` is the
/// real one (halved to `s/2 + 1`), the others complex.
pub fn rfftn(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes("fft::rfftn", FftKind::Rfft, x, s, axes, None, norm)
}

/// The inverse of [`rfftn`]: the last of `axes` gives `s`'s last length of
/// real points (default `2 * (m - 1)`).
pub fn irfftn(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes("fft::irfftn", FftKind::Irfft, x, s, axes, None, norm)
}

/// [`fftn`] with numpy's `fft2` default axes `[-2, -1]` when `axes` is empty.
pub fn fft2(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes("fft::fft2", FftKind::Fft, x, s, axes, Some(&[-2, -1]), norm)
}

/// [`ifftn`] with numpy's `ifft2` default axes `[-2, -1]` when `axes` is empty.
pub fn ifft2(x: &Tensor, s: Option<&[usize]>, axes: &[isize], norm: FftNorm) -> Tensor {
    n_axes(
        "fft::ifft2",
        FftKind::Ifft,
        x,
        s,
        axes,
        Some(&[-2, -1]),
        norm,
    )
}

/// numpy's `fftfreq`: the `n` sample frequencies `[0, 1, ..., (n-1)/2,
/// -(n/2), ..., -1] / (d n)` of a transform of `n` points spaced `d` apart,
/// as a float `dtype`.
///
/// ```
/// use nx::{fft::fftfreq, DType};
/// assert_eq!(fftfreq(4, 0.5, DType::F64).to_vec::<f64>(), vec![0.0, 0.5, -1.0, -0.5]);
/// ```
pub fn fftfreq(n: usize, d: f64, dtype: DType) -> Tensor {
    freq_check("fft::fftfreq", n, dtype);
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let k = if i < n.div_ceil(2) {
                i as f64
            } else {
                i as f64 - n as f64
            };
            k / (d * n as f64)
        })
        .collect();
    Tensor::from_slice(&v, &[n]).cast(dtype)
}

/// numpy's `rfftfreq`: the `n/2 + 1` non-negative frequencies `[0, 1, ...,
/// n/2] / (d n)` of [`rfft`]'s output, as a float `dtype`.
pub fn rfftfreq(n: usize, d: f64, dtype: DType) -> Tensor {
    freq_check("fft::rfftfreq", n, dtype);
    let v: Vec<f64> = (0..n / 2 + 1).map(|i| i as f64 / (d * n as f64)).collect();
    Tensor::from_slice(&v, &[n / 2 + 1]).cast(dtype)
}

/// numpy's `fftshift`: rolls each of `axes` (empty: every axis) by half
/// its size so that the zero frequency is in the middle.
///
/// ```
/// use nx::{fft::{fftfreq, fftshift}, DType};
/// let f = fftshift(&fftfreq(5, 1.0, DType::F64), &[]);
/// assert_eq!(f.to_vec::<f64>(), vec![-0.4, -0.2, 0.0, 0.2, 0.4]);
/// ```
pub fn fftshift(x: &Tensor, axes: &[isize]) -> Tensor {
    shift("fft::fftshift", x, axes, false)
}

/// numpy's `ifftshift`: the inverse of [`fftshift`] (they differ for odd sizes).
pub fn ifftshift(x: &Tensor, axes: &[isize]) -> Tensor {
    shift("fft::ifftshift", x, axes, true)
}

fn freq_check(op: &str, n: usize, dtype: DType) {
    if n == 0 {
        panic!("{op}: n must be at least 1");
    }
    if !dtype.is_float() {
        panic!("{op}: dtype must be a float dtype, got {dtype}");
    }
}

fn shift(op: &str, x: &Tensor, axes: &[isize], inverse: bool) -> Tensor {
    let nd = x.ndim();
    let axes: Vec<usize> = if axes.is_empty() {
        (0..nd).collect()
    } else {
        axes.iter().map(|&a| normalize_axis(op, a, nd)).collect()
    };
    let mut out = x.clone();
    for a in axes {
        let half = (x.shape()[a] / 2) as isize;
        out = out.roll(if inverse { -half } else { half }, a as isize);
    }
    out
}

fn one_axis(
    op: &str,
    kind: FftKind,
    x: &Tensor,
    n: Option<usize>,
    axis: isize,
    norm: FftNorm,
) -> Tensor {
    let s = n.map(|n| [n]);
    n_axes(op, kind, x, s.as_ref().map(|s| &s[..]), &[axis], None, norm)
}

/// The shared body: validation, the dtype, crop/pad, axes moved last, one
/// `Prim::Fft`, normalization, axes moved back.
fn n_axes(
    op: &str,
    kind: FftKind,
    x: &Tensor,
    s: Option<&[usize]>,
    axes: &[isize],
    default_axes: Option<&[isize]>,
    norm: FftNorm,
) -> Tensor {
    let nd = x.ndim();
    let axes: Vec<usize> = match (axes.is_empty(), default_axes, s) {
        (false, ..) => axes.iter().map(|&a| normalize_axis(op, a, nd)).collect(),
        (true, Some(d), _) => d.iter().map(|&a| normalize_axis(op, a, nd)).collect(),
        (true, None, Some(s)) => {
            if s.len() > nd {
                panic!(
                    "{op}: s has {} lengths but the tensor has rank {nd}",
                    s.len()
                );
            }
            (nd - s.len()..nd).collect()
        }
        (true, None, None) => (0..nd).collect(),
    };
    if axes.is_empty() {
        panic!("{op}: needs at least one axis (the tensor has rank {nd})");
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].contains(a) {
            panic!("{op}: axis {a} is repeated in the axes {axes:?}");
        }
    }
    if let Some(s) = s {
        if s.len() != axes.len() {
            panic!(
                "{op}: s has {} lengths but there are {} axes ({axes:?})",
                s.len(),
                axes.len()
            );
        }
    }
    notify_eager_only(op);
    let x = input_dtype(op, kind, x);
    // The signal lengths, and the sizes the input is cropped/padded to.
    let last = axes.len() - 1;
    let lengths: Vec<usize> = match s {
        Some(s) => s.to_vec(),
        None => {
            let mut l: Vec<usize> = axes.iter().map(|&a| x.shape()[a]).collect();
            if kind == FftKind::Irfft {
                l[last] = 2 * l[last].saturating_sub(1);
            }
            l
        }
    };
    if let Some(i) = lengths.iter().position(|&n| n == 0) {
        panic!(
            "{op}: invalid number of FFT data points (0) along axis {}",
            axes[i]
        );
    }
    let mut sizes = lengths.clone();
    if kind == FftKind::Irfft {
        sizes[last] = lengths[last] / 2 + 1;
    }
    let mut y = x;
    for (&a, &want) in axes.iter().zip(&sizes) {
        let have = y.shape()[a];
        if want < have {
            y = y.narrow(a as isize, 0, want);
        } else if want > have {
            let mut pads = vec![(0, 0); nd];
            pads[a] = (0, want - have);
            y = y.pad(&pads, 0.0);
        }
    }
    // Axes moved last in the given order (the last one is the real axis of
    // rfftn/irfftn), the others keep theirs.
    let mut perm: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
    perm.extend(&axes);
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let to_isize = |p: &[usize]| p.iter().map(|&a| a as isize).collect::<Vec<_>>();
    if !identity {
        y = y.permute(&to_isize(&perm));
    }
    let mut out = bind(
        Prim::Fft {
            kind,
            lengths: lengths.clone(),
        },
        &[&y],
    );
    let total: f64 = lengths.iter().map(|&n| n as f64).product();
    let inverse = matches!(kind, FftKind::Ifft | FftKind::Irfft);
    let factor = match (norm, inverse) {
        (FftNorm::Backward, _) => 1.0,
        (FftNorm::Ortho, false) => 1.0 / total.sqrt(),
        (FftNorm::Ortho, true) => total.sqrt(),
        (FftNorm::Forward, false) => 1.0 / total,
        (FftNorm::Forward, true) => total,
    };
    if factor != 1.0 {
        out = &out * factor;
    }
    if !identity {
        let mut back = vec![0; nd];
        for (i, &p) in perm.iter().enumerate() {
            back[p] = i;
        }
        out = out.permute(&to_isize(&back));
    }
    out
}

/// The dtype the transform runs in (see the module's doc).
fn input_dtype(op: &str, kind: FftKind, x: &Tensor) -> Tensor {
    let d = x.dtype();
    if kind == FftKind::Rfft {
        return match d {
            DType::F32 | DType::F64 => x.clone(),
            DType::F16 | DType::BF16 => x.cast(DType::F32),
            _ if d.is_complex() => panic!(
                "{op}: expects a real float tensor, got {d} (use fft::fft/fftn for complex input)"
            ),
            _ => panic!("{op}: expects a real float tensor, got {d} (cast it to f32 or f64 first)"),
        };
    }
    match d {
        DType::C64 | DType::C128 => x.clone(),
        DType::F32 | DType::F16 | DType::BF16 => x.cast(DType::C64),
        DType::F64 => x.cast(DType::C128),
        _ => panic!(
            "{op}: expects a float or complex tensor, got {d} (cast it to f32, f64 or a complex dtype first)"
        ),
    }
}
