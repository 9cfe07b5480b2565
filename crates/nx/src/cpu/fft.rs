//! `Prim::Fft`: complex and real discrete Fourier transforms over the
//! trailing axes, through `rustfft` (complex) and `realfft` (real input or
//! output), f32 in f32 and f64 in f64.
//!
//! A multi-axis transform is one 1-D pass per axis (numpy's order: the
//! real axis of `Rfft` first, of `Irfft` last). A pass runs over contiguous
//! rows: an axis that is not last is moved last by a strided copy and moved
//! back after (nx's copy kernel, so no hand-written strided loops here).
//! Rows are split across nx's pool once there is enough work; each part
//! keeps its own scratch. Plans are made once per (length, direction) and
//! dtype in a process-wide planner (rustfft's planners cache them).

use super::movement::{copy, permute};
use super::pool;
use crate::dtype::{Complex, DType, Element};
use crate::prim::FftKind;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use realfft::{ComplexToReal, FftError, RealFftPlanner, RealToComplex};
use rustfft::{Fft, FftDirection, FftNum, FftPlanner};
use std::sync::{Arc, Mutex, OnceLock};

/// The planners of one float type (each caches the plans it made).
struct Planners<T: FftNum> {
    complex: Mutex<FftPlanner<T>>,
    real: Mutex<RealFftPlanner<T>>,
}

impl<T: FftNum> Planners<T> {
    fn new() -> Self {
        Planners {
            complex: Mutex::new(FftPlanner::new()),
            real: Mutex::new(RealFftPlanner::new()),
        }
    }
}

/// The float types the kernels run in.
trait Float: FftNum + Element {
    const COMPLEX: DType;
    fn planners() -> &'static Planners<Self>;
}

impl Float for f32 {
    const COMPLEX: DType = DType::C64;
    fn planners() -> &'static Planners<f32> {
        static P: OnceLock<Planners<f32>> = OnceLock::new();
        P.get_or_init(Planners::new)
    }
}

impl Float for f64 {
    const COMPLEX: DType = DType::C128;
    fn planners() -> &'static Planners<f64> {
        static P: OnceLock<Planners<f64>> = OnceLock::new();
        P.get_or_init(Planners::new)
    }
}

fn plan_complex<T: Float>(n: usize, inverse: bool) -> Arc<dyn Fft<T>> {
    let dir = if inverse {
        FftDirection::Inverse
    } else {
        FftDirection::Forward
    };
    let mut p = T::planners()
        .complex
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    p.plan_fft(n, dir)
}

fn plan_r2c<T: Float>(n: usize) -> Arc<dyn RealToComplex<T>> {
    let mut p = T::planners().real.lock().unwrap_or_else(|e| e.into_inner());
    p.plan_fft_forward(n)
}

fn plan_c2r<T: Float>(n: usize) -> Arc<dyn ComplexToReal<T>> {
    let mut p = T::planners().real.lock().unwrap_or_else(|e| e.into_inner());
    p.plan_fft_inverse(n)
}

fn zero<T: Float>() -> Complex<T> {
    Complex::new(<T as Element>::from_f64(0.0), <T as Element>::from_f64(0.0))
}

/// Rows per part of the pool: all of them when the whole is under 32K
/// elements (a pool round trip costs more than such a transform), else
/// about four parts per thread.
fn rows_per_part(rows: usize, len: usize) -> usize {
    if rows <= 1 || rows * len < 1 << 15 {
        return rows.max(1);
    }
    rows.div_ceil((pool::threads() * 4).min(rows))
}

/// `Prim::Fft` on a concrete input (dtypes checked by the public operations).
pub(crate) fn fft(x: &Value, kind: FftKind, lengths: &[usize]) -> Tensor {
    match (kind, x.dtype) {
        (FftKind::Fft | FftKind::Ifft, DType::C64) => c2c::<f32>(x, kind, lengths),
        (FftKind::Fft | FftKind::Ifft, DType::C128) => c2c::<f64>(x, kind, lengths),
        (FftKind::Rfft, DType::F32) => rfft::<f32>(x, lengths),
        (FftKind::Rfft, DType::F64) => rfft::<f64>(x, lengths),
        (FftKind::Irfft, DType::C64) => irfft::<f32>(x, lengths),
        (FftKind::Irfft, DType::C128) => irfft::<f64>(x, lengths),
        (_, d) => super::unsupported(&format!("fft ({kind:?})"), d),
    }
}

/// Complex transforms along each of the trailing `lengths.len()` axes.
fn c2c<T: Float>(x: &Value, kind: FftKind, lengths: &[usize]) -> Tensor
where
    Complex<T>: Element,
{
    let inverse = kind == FftKind::Ifft;
    let mut t = copy(x);
    let nd = x.layout.shape.len();
    for a in (nd - lengths.len()..nd).rev() {
        t = along_axis(&t, a, &|data, n| c2c_rows::<T>(data, n, inverse));
    }
    if inverse {
        scale::<T>(&t, lengths);
    }
    t
}

/// The real transform along the last axis, then complex ones along the
/// other transformed axes.
fn rfft<T: Float>(x: &Value, lengths: &[usize]) -> Tensor
where
    Complex<T>: Element,
{
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let h = n / 2 + 1;
    let mut out_shape = shape.clone();
    out_shape[nd - 1] = h;
    let rows = if n == 0 { 0 } else { x.layout.numel() / n };
    let mut out = Storage::new(T::COMPLEX, rows * h);
    {
        let src = if x.layout.is_contiguous() {
            None
        } else {
            Some(copy(x))
        };
        let v = src.as_ref().map_or(x, |c| c.value());
        let data = v.storage.read::<T>();
        let input = &data[v.layout.offset..v.layout.offset + rows * n];
        r2c_rows(input, &mut out.as_mut_slice::<Complex<T>>()[..rows * h], n);
    }
    let mut t = Tensor::from_storage(T::COMPLEX, &out_shape, out);
    for a in (nd - lengths.len()..nd - 1).rev() {
        t = along_axis(&t, a, &|data, n| c2c_rows::<T>(data, n, false));
    }
    t
}

/// Inverse complex transforms along the transformed axes but the last,
/// then the real inverse along the last, scaled by one over the product of
/// the lengths.
fn irfft<T: Float>(x: &Value, lengths: &[usize]) -> Tensor
where
    Complex<T>: Element,
{
    let nd = x.layout.shape.len();
    let mut t = copy(x);
    for a in (nd - lengths.len()..nd - 1).rev() {
        t = along_axis(&t, a, &|data, n| c2c_rows::<T>(data, n, true));
    }
    let h = x.layout.shape[nd - 1];
    let n = lengths[lengths.len() - 1];
    let rows = if h == 0 { 0 } else { x.layout.numel() / h };
    let mut out_shape = x.layout.shape.clone();
    out_shape[nd - 1] = n;
    let mut out = Storage::new(T::DTYPE, rows * n);
    {
        let v = t.value();
        let data = v.storage.read::<Complex<T>>();
        c2r_rows(
            &data[..rows * h],
            &mut out.as_mut_slice::<T>()[..rows * n],
            n,
        );
    }
    let out = Tensor::from_storage(T::DTYPE, &out_shape, out);
    scale::<T>(&out, lengths);
    out
}

/// Runs `pass(rows, len)` over the lines of contiguous `t` along axis `a`
/// (moved last and back when it is not last); returns the result (`t`
/// itself, written in place, when `a` is last).
fn along_axis<U: Element>(t: &Tensor, a: usize, pass: &dyn Fn(&mut [U], usize)) -> Tensor {
    let nd = t.ndim();
    let len = t.shape()[a];
    if a + 1 == nd {
        let v = t.value();
        let numel = v.layout.numel();
        pass(&mut v.storage.write::<U>()[..numel], len);
        return t.clone();
    }
    let mut to_last: Vec<usize> = (0..nd).filter(|&i| i != a).collect();
    to_last.push(a);
    let moved = copy(permute(t.value(), &to_last).value());
    {
        let v = moved.value();
        let numel = v.layout.numel();
        pass(&mut v.storage.write::<U>()[..numel], len);
    }
    let mut back: Vec<usize> = (0..nd - 1).collect();
    back.insert(a, nd - 1);
    copy(permute(moved.value(), &back).value())
}

/// In-place complex transforms of the rows of `n` elements of `data`.
fn c2c_rows<T: Float>(data: &mut [Complex<T>], n: usize, inverse: bool)
where
    Complex<T>: Element,
{
    if data.is_empty() || n <= 1 {
        return;
    }
    let plan = plan_complex::<T>(n, inverse);
    let per = rows_per_part(data.len() / n, n);
    pool::chunks_mut(data, per * n, &|_, chunk| {
        let mut scratch = vec![zero::<T>(); plan.get_inplace_scratch_len()];
        plan.process_with_scratch(chunk, &mut scratch);
    });
}

/// Real-to-complex transforms: rows of `n` reals in `input` to rows of
/// `n/2 + 1` in `out`.
fn r2c_rows<T: Float>(input: &[T], out: &mut [Complex<T>], n: usize)
where
    Complex<T>: Element,
{
    let h = n / 2 + 1;
    if out.is_empty() {
        return;
    }
    let plan = plan_r2c::<T>(n);
    let per = rows_per_part(out.len() / h, n);
    pool::chunks_mut(out, per * h, &|c, chunk| {
        // realfft uses its input as scratch, so each row is copied first.
        let mut buf = plan.make_input_vec();
        let mut scratch = plan.make_scratch_vec();
        for (j, row) in chunk.chunks_mut(h).enumerate() {
            let r = c * per + j;
            buf.copy_from_slice(&input[r * n..(r + 1) * n]);
            plan.process_with_scratch(&mut buf, row, &mut scratch)
                .expect("fft::rfft: realfft rejected a buffer length (internal error)");
        }
    });
}

/// Complex-to-real transforms (unnormalized): rows of `n/2 + 1` in `input`
/// to rows of `n` reals in `out`. The imaginary parts realfft wants zero
/// (zero frequency; Nyquist for even `n`) are ignored, as numpy's pocketfft
/// ignores them; realfft reports them but computes the same.
fn c2r_rows<T: Float>(input: &[Complex<T>], out: &mut [T], n: usize)
where
    Complex<T>: Element,
{
    let h = n / 2 + 1;
    if out.is_empty() {
        return;
    }
    let plan = plan_c2r::<T>(n);
    let per = rows_per_part(out.len() / n, n);
    pool::chunks_mut(out, per * n, &|c, chunk| {
        let mut buf = plan.make_input_vec();
        let mut scratch = plan.make_scratch_vec();
        for (j, row) in chunk.chunks_mut(n).enumerate() {
            let r = c * per + j;
            buf.copy_from_slice(&input[r * h..(r + 1) * h]);
            match plan.process_with_scratch(&mut buf, row, &mut scratch) {
                Ok(()) | Err(FftError::InputValues(..)) => {}
                Err(e) => panic!("fft::irfft: realfft failed (internal error): {e}"),
            }
        }
    });
}

/// Multiplies fresh contiguous `t` (of `T` or `Complex<T>`) in place by one
/// over the product of `lengths`.
fn scale<T: Float>(t: &Tensor, lengths: &[usize])
where
    Complex<T>: Element,
{
    let total: usize = lengths.iter().product();
    if total <= 1 {
        return;
    }
    let s = <T as Element>::from_f64(1.0 / total as f64);
    let v = t.value();
    let numel = v.layout.numel();
    // A complex element is two reals, scaled alike.
    let reals = if t.dtype().is_complex() {
        2 * numel
    } else {
        numel
    };
    let mut guard = v.storage.write::<T>();
    pool::chunks_mut(&mut guard[..reals], 1 << 16, &|_, c| {
        c.iter_mut().for_each(|e| *e = *e * s)
    });
}
