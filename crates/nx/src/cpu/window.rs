//! Window reductions (`Prim::ReduceWindow`, sum and max) and the first
//! maximum of each window (`Prim::WindowArgmax`, for max's derivatives).
//!
//! The input is made contiguous (a copy when it is a strided view). Leading
//! axes with window 1, stride 1 and no padding are *planes*, reduced
//! independently; within a plane the output is walked row by row (a row =
//! the last axis), each row computed from the input rows its windows cover:
//! for every window offset over the other axes (in row-major order) whose
//! input row is in bounds, then every offset along the last axis. A window
//! visits its elements in row-major window order, which `WindowArgmax`
//! relies on (the first maximum wins). Rows are split across the pool.

use super::dispatch::{self, Kernel};
use super::movement::copy;
use super::pool::{self, PAR_MIN};
use crate::dtype::{DType, Element};
use crate::prim::{window_out_shape, ReduceOp};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};

/// The geometry of one window reduction, planes split off.
struct Geom {
    /// Input sizes of the axes after the planes (at least one).
    ins: Vec<usize>,
    /// Output sizes of those axes.
    outs: Vec<usize>,
    window: Vec<usize>,
    strides: Vec<usize>,
    lo: Vec<usize>,
    /// Input and output elements per plane.
    plane_in: usize,
    plane_out: usize,
}

impl Geom {
    fn new(shape: &[usize], window: &[usize], strides: &[usize], pad: &[(usize, usize)]) -> Geom {
        let out = window_out_shape(shape, window, strides, pad);
        let trivial = |d: usize| window[d] == 1 && strides[d] == 1 && pad[d] == (0, 0);
        // At least the last axis stays, so a row always exists.
        let lead = (0..shape.len().saturating_sub(1))
            .take_while(|&d| trivial(d))
            .count();
        let ins = shape[lead..].to_vec();
        let outs = out[lead..].to_vec();
        Geom {
            plane_in: ins.iter().product(),
            plane_out: outs.iter().product(),
            ins,
            outs,
            window: window[lead..].to_vec(),
            strides: strides[lead..].to_vec(),
            lo: pad[lead..].iter().map(|p| p.0).collect(),
        }
    }

    /// Output rows (all planes), and their length.
    fn rows(&self, planes: usize) -> (usize, usize) {
        let len = *self.outs.last().unwrap();
        (planes * self.plane_out / len.max(1), len)
    }

    /// Calls `row(base)` for every window offset over the axes before the
    /// last, in row-major order, of output row `r` within its plane: `base`
    /// is the input row's offset within the plane, or None when that row
    /// lies in the padding.
    fn for_window_rows(
        &self,
        r: usize,
        o: &mut [usize],
        w: &mut [usize],
        mut row: impl FnMut(Option<usize>),
    ) {
        let k = self.ins.len() - 1;
        // Output coordinates of the row (axes 0..k).
        let mut rest = r;
        for d in (0..k).rev() {
            o[d] = rest % self.outs[d];
            rest /= self.outs[d];
        }
        w.fill(0);
        let count: usize = self.window[..k].iter().product();
        for _ in 0..count {
            let mut base = Some(0usize);
            for d in 0..k {
                let i = (o[d] * self.strides[d] + w[d]) as isize - self.lo[d] as isize;
                if i < 0 || i as usize >= self.ins[d] {
                    base = None;
                    break;
                }
                base = base.map(|b| b * self.ins[d] + i as usize);
            }
            row(base.map(|b| b * self.ins[k]));
            // Next offset, row-major.
            for d in (0..k).rev() {
                w[d] += 1;
                if w[d] < self.window[d] {
                    break;
                }
                w[d] = 0;
            }
        }
    }

    /// The in-bounds window offsets `wx` along the last axis for output
    /// column `ox`, as a range, and the input column of offset 0.
    #[inline(always)]
    fn last_range(&self, ox: usize) -> (usize, usize, isize) {
        let k = self.ins.len() - 1;
        window_range(ox, self.window[k], self.strides[k], self.lo[k], self.ins[k])
    }
}

/// Along one axis of `n` input elements, windows of `w` at stride `s`
/// starting `lo` before the input: the in-bounds offsets `k0..k1` of
/// output `j`'s window, and the input index of its offset 0.
#[inline(always)]
fn window_range(j: usize, w: usize, s: usize, lo: usize, n: usize) -> (usize, usize, isize) {
    let start = (j * s) as isize - lo as isize;
    let k0 = (-start).max(0) as usize;
    let k1 = (n as isize - start).clamp(0, w as isize) as usize;
    (k0, k1.max(k0), start)
}

/// The outputs (of `n_out`) whose whole window lies inside the input, in
/// [`window_range`]'s terms: the rest are cut by padding.
fn interior(w: usize, s: usize, lo: usize, n: usize, n_out: usize) -> std::ops::Range<usize> {
    let first = lo.div_ceil(s);
    let end = if n + lo >= w {
        ((n + lo - w) / s + 1).min(n_out)
    } else {
        0
    };
    first.min(end)..end
}

/// The input as a contiguous slice source (a copy when it is a view).
fn contiguous(x: &Value) -> Tensor {
    if x.layout.is_contiguous() {
        Tensor::from_value(x.dtype, x.layout.clone(), x.storage.clone())
    } else {
        copy(x)
    }
}

/// Splits `out` (rows of `len`) across the pool, about PAR_MIN elements of
/// work per task, calling `body(first_row, chunk)`.
fn split_rows<U: Send>(
    out: &mut [U],
    len: usize,
    work: usize,
    body: &(dyn Fn(usize, &mut [U]) + Sync),
) {
    if out.is_empty() || len == 0 {
        return;
    }
    let rows = out.len() / len;
    let per_row = (work / rows.max(1)).max(1);
    if work < PAR_MIN || rows < 2 {
        return body(0, out);
    }
    let rows_per = PAR_MIN
        .div_ceil(per_row)
        .clamp(1, rows.div_ceil(pool::threads() * 4).max(1));
    pool::chunks_mut(out, rows_per * len, &|c, o| body(c * rows_per, o));
}

/// What both window passes set up: the output's shape and size, the
/// geometry, the input as a contiguous tensor, the output rows of `len`
/// elements (`rows_per_plane` per plane), the last window axis `k`, and the
/// work (output elements times window size) that decides the split.
struct Pass {
    out_shape: Vec<usize>,
    total: usize,
    g: Geom,
    xc: Tensor,
    len: usize,
    rows_per_plane: usize,
    k: usize,
    work: usize,
}

impl Pass {
    /// `Err(out_shape)` for an empty output.
    fn new(
        x: &Value,
        window: &[usize],
        strides: &[usize],
        pad: &[(usize, usize)],
    ) -> Result<Pass, Vec<usize>> {
        let shape = &x.layout.shape;
        let out_shape = window_out_shape(shape, window, strides, pad);
        let total: usize = out_shape.iter().product();
        if total == 0 {
            return Err(out_shape);
        }
        let g = Geom::new(shape, window, strides, pad);
        let (_, len) = g.rows(total / g.plane_out.max(1));
        let rows_per_plane = g.plane_out / len;
        let k = g.ins.len() - 1;
        Ok(Pass {
            out_shape,
            total,
            xc: contiguous(x),
            len,
            rows_per_plane,
            k,
            work: total * window.iter().product::<usize>(),
            g,
        })
    }
}

fn reduce_typed<T: Element, A: Copy + Send + Sync>(
    x: &Value,
    window: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
    init: A,
    load: impl Fn(T) -> A + Sync,
    comb: impl Fn(A, A) -> A + Sync,
    store: impl Fn(A) -> T + Sync,
) -> Tensor {
    let p = match Pass::new(x, window, strides, pad) {
        Ok(p) => p,
        Err(empty) => return Tensor::from_storage(T::DTYPE, &empty, Storage::new(T::DTYPE, 0)),
    };
    let (g, len, rows_per_plane, k) = (&p.g, p.len, p.rows_per_plane, p.k);
    let mut out = Storage::new(T::DTYPE, p.total);
    let xv = p.xc.value();
    let data = xv.storage.read::<T>();
    let data = &data[xv.layout.offset..];
    let o = &mut out.as_mut_slice::<T>()[..p.total];
    // Windows that tile the last axis (stride = window, no padding there):
    // each window offset along it is one pass over the whole output row,
    // which vectorizes (a 2x2 pool's windows are two elements wide). Each
    // output still combines its elements in row-major window order.
    let last = window.len() - 1;
    let tiled_last = strides[last] == window[last] && pad[last] == (0, 0);
    // Otherwise the outputs whose window lies inside the row along the
    // last axis (`inner`) take one strided pass per window offset, in
    // offset order (so each output's order is unchanged); the edges, where
    // padding cuts the window, go element by element.
    let (w, st, lo) = (window[last], strides[last], g.lo[k] as isize);
    let inner = interior(w, st, g.lo[k], g.ins[k], len);
    split_rows(o, len, p.work, &|r0, o| {
        let mut acc = vec![init; len];
        let (mut oc, mut wc) = (vec![0; k], vec![0; k]);
        for (j, orow) in o.chunks_mut(len).enumerate() {
            let r = r0 + j;
            let (plane, rr) = (r / rows_per_plane, r % rows_per_plane);
            let src = &data[plane * g.plane_in..(plane + 1) * g.plane_in];
            acc.fill(init);
            g.for_window_rows(rr, &mut oc, &mut wc, |base| {
                let Some(base) = base else { return };
                let row = &src[base..base + g.ins[k]];
                if tiled_last {
                    let w = window[last];
                    if w == 2 {
                        // The common pool, unrolled so that it vectorizes.
                        for (a, pair) in acc.iter_mut().zip(row.chunks_exact(2)) {
                            *a = comb(comb(*a, load(pair[0])), load(pair[1]));
                        }
                    } else {
                        for (a, win) in acc.iter_mut().zip(row.chunks_exact(w)) {
                            for &e in win {
                                *a = comb(*a, load(e));
                            }
                        }
                    }
                    return;
                }
                for j in 0..w {
                    let off = (inner.start * st) as isize + j as isize - lo;
                    if inner.is_empty() {
                        break;
                    }
                    let src = &row[off as usize..];
                    for (a, c) in acc[inner.clone()].iter_mut().zip(src.chunks(st)) {
                        *a = comb(*a, load(c[0]));
                    }
                }
                for (ox, a) in acc.iter_mut().enumerate() {
                    if inner.contains(&ox) {
                        continue;
                    }
                    let (w0, w1, start) = g.last_range(ox);
                    let s = (start + w0 as isize) as usize;
                    let mut v = *a;
                    for &e in &row[s..s + (w1 - w0)] {
                        v = comb(v, load(e));
                    }
                    *a = v;
                }
            });
            for (o, &a) in orow.iter_mut().zip(&acc) {
                *o = store(a);
            }
        }
    });
    Tensor::from_storage(T::DTYPE, &p.out_shape, out)
}

/// NaN-propagating maximum (a NaN operand wins, as `BinaryOp::Max`).
#[inline(always)]
fn max_nan<T: PartialOrd + Copy>(a: T, v: T) -> T {
    // Non-short-circuit operators: a select, not a branch (random data
    // would mispredict it half the time).
    #[allow(clippy::eq_op)]
    let take = (v > a) | (v != v);
    if take {
        v
    } else {
        a
    }
}

/// `Prim::ReduceWindow`: sum (f16/bf16 and f32 accumulate in f32, f64 in
/// f64, integers wrap) or max (padding is the lowest value).
pub(crate) fn reduce_window(
    op: ReduceOp,
    x: &Value,
    window: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
) -> Tensor {
    match op {
        ReduceOp::Sum => match x.dtype {
            DType::F64 => {
                reduce_typed::<f64, f64>(x, window, strides, pad, 0.0, |v| v, |a, b| a + b, |a| a)
            }
            DType::F32 | DType::F16 | DType::BF16 => crate::with_dtype!(x.dtype, T => {
                reduce_typed::<T, f32>(
                    x,
                    window,
                    strides,
                    pad,
                    0.0,
                    |v| v.to_f64() as f32,
                    |a, b| a + b,
                    |a| T::from_f64(a as f64),
                )
            }),
            _ => crate::with_dtype!(x.dtype, T => {
                reduce_typed::<T, i128>(
                    x,
                    window,
                    strides,
                    pad,
                    0,
                    |v| v.to_i128(),
                    |a, b| a.wrapping_add(b),
                    |a| T::from_i128(a),
                )
            }),
        },
        ReduceOp::Max => crate::with_dtype!(x.dtype, T => {
            // Windows tiling the last axis (a 2x2/2 pool) fold whole
            // windows row by row, already vectorized (0.53 ms over
            // [32, 64, 32, 32] f32 against 1.2 ms one axis at a time).
            let last = window.len() - 1;
            if strides[last] == window[last] && pad[last] == (0, 0) {
                let lowest = T::from_f64(f64::NEG_INFINITY);
                reduce_typed::<T, T>(x, window, strides, pad, lowest, |v| v, max_nan, |a| a)
            } else {
                max_separable::<T>(x, window, strides, pad)
            }
        }),
        op => unreachable!("reduce_window: {op:?} is not a window reduction"),
    }
}

/// A max window reduction one axis at a time, innermost first: a pass
/// along an axis takes each output's window along that axis only (3 loads
/// per output of a 3x3 window each pass, not 9), and every pass but the
/// innermost folds whole contiguous rows, which vectorizes. The same bits
/// as folding each window in row-major order from the lowest value
/// (`max_nan` keeps the first of equal values and the last NaN, and both
/// choices compose axis by axis: the first maximum in row-major order is
/// the first along the last axis within the first row holding a maximum);
/// a window with no element inside the input, along any axis, is the
/// lowest value either way. Each task reduces whole planes (the leading
/// axes the window leaves alone), in batches of planes, through two
/// scratch buffers it keeps. (3x3/2 SAME over [32, 64, 32, 32] f32: 3.4 ms
/// folding whole windows, 2-vCPU AMD EPYC; one axis at a time a plane at a
/// time 2.46 ms on one thread of a 2-vCPU Intel Xeon, batched with rows
/// end to end and the phases split by shuffles 1.56 ms.)
fn max_separable<T: Element + PartialOrd>(
    x: &Value,
    window: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
) -> Tensor {
    let p = match Pass::new(x, window, strides, pad) {
        Ok(p) => p,
        Err(empty) => return Tensor::from_storage(T::DTYPE, &empty, Storage::new(T::DTYPE, 0)),
    };
    let g = &p.g;
    let mut out = Storage::new(T::DTYPE, p.total);
    let xv = p.xc.value();
    let data = xv.storage.read::<T>();
    let data = &data[xv.layout.offset..];
    let o = &mut out.as_mut_slice::<T>()[..p.total];
    // The axes with a window to take, innermost first.
    let nd = g.ins.len();
    let axes: Vec<usize> = (0..nd)
        .rev()
        .filter(|&d| g.window[d] != 1 || g.strides[d] != 1 || g.lo[d] != 0 || g.ins[d] != g.outs[d])
        .collect();
    // The largest intermediate plane: axes already passed have their
    // output size, the others their input size.
    let mut shape = g.ins.clone();
    let mut scratch = 0;
    for &d in &axes {
        shape[d] = g.outs[d];
        scratch = scratch.max(shape.iter().product::<usize>());
    }
    let planes = p.total / g.plane_out;
    let per_plane = (p.work / planes).max(1);
    let planes_per = PAR_MIN
        .div_ceil(per_plane)
        .clamp(1, planes.div_ceil(pool::threads() * 4).max(1));
    let lowest = T::from_f64(f64::NEG_INFINITY);
    // Planes go through the passes in batches of about 16K input elements
    // (64 KiB of f32: the scratch stays in L2), as one tensor with a
    // leading batch axis, so that each pass runs long loops over many
    // rows rather than one small plane at a time.
    let batch = (16 << 10) / g.plane_in.max(1);
    let batch = batch.clamp(1, planes_per);
    pool::chunks_mut(o, planes_per * g.plane_out, &|c, o| {
        let mut bufs = [vec![lowest; batch * scratch], vec![lowest; batch * scratch]];
        let mut phases = Vec::new();
        let first_plane = c * planes_per;
        for (b, dst_planes) in o.chunks_mut(batch * g.plane_out).enumerate() {
            let k = dst_planes.len() / g.plane_out;
            let first = (first_plane + b * batch) * g.plane_in;
            let input = &data[first..first + k * g.plane_in];
            if axes.is_empty() {
                dst_planes.copy_from_slice(input);
                continue;
            }
            // The batch's shape: `k` planes, then the plane's axes (pass
            // axis `d` is axis `d + 1` here).
            let mut shape: Vec<usize> = std::iter::once(k).chain(g.ins.iter().copied()).collect();
            for (i, &d) in axes.iter().enumerate() {
                let n_in: usize = shape.iter().product();
                let mut out_shape = shape.clone();
                out_shape[d + 1] = g.outs[d];
                let n_out: usize = out_shape.iter().product();
                // Pass i reads what pass i - 1 wrote (the input first) and
                // writes the other scratch buffer (the output last).
                let [even, odd] = &mut bufs;
                let (read, write) = if i % 2 == 0 { (odd, even) } else { (even, odd) };
                let src: &[T] = if i == 0 { input } else { &read[..n_in] };
                let dst: &mut [T] = if i + 1 == axes.len() {
                    &mut *dst_planes
                } else {
                    &mut write[..n_out]
                };
                let (w, s, lo) = (g.window[d], g.strides[d], g.lo[d]);
                dispatch::run(MaxAlong {
                    src,
                    shape: &shape,
                    d: d + 1,
                    w,
                    s,
                    lo,
                    n_out: g.outs[d],
                    dst,
                    lowest,
                    phases: &mut phases,
                });
                shape = out_shape;
            }
        }
    });
    Tensor::from_storage(T::DTYPE, &p.out_shape, out)
}

/// One axis of [`max_separable`]: `dst` (the shape with axis `d` of size
/// `n_out`) takes, along `d`, the max of each window of `w` elements at
/// stride `s` starting `lo` before the input (elements outside it skipped).
/// A [`Kernel`] so that its loops vectorize for the machine's level.
struct MaxAlong<'a, T> {
    src: &'a [T],
    shape: &'a [usize],
    d: usize,
    w: usize,
    s: usize,
    lo: usize,
    n_out: usize,
    dst: &'a mut [T],
    lowest: T,
    /// Scratch for [`fold_phases`].
    phases: &'a mut Vec<T>,
}

impl<T: Element + PartialOrd> Kernel for MaxAlong<'_, T> {
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[T::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        max_along(self)
    }
}

#[inline(always)]
fn max_along<T: Element + PartialOrd>(k: MaxAlong<'_, T>) {
    let MaxAlong {
        src,
        shape,
        d,
        w,
        s,
        lo,
        n_out,
        dst,
        lowest,
        phases,
    } = k;
    let n = shape[d];
    let inner: usize = shape[d + 1..].iter().product();
    let outer: usize = shape[..d].iter().product();
    // The `outer` rows laid end to end, when every row is `n_out` windows
    // of stride `s` long: flat output `J = r * n_out + j` then starts its
    // window at flat input `J * s - lo`, which for an output inside its
    // row is that row's window. Every flat output whose window lies in
    // `src` is folded in one long pass; the outputs a row's padding cuts
    // are then written again from their row alone. Otherwise row by row.
    let (rows, row_in, row_out) = if n == n_out * s {
        (1, outer * n, outer * n_out)
    } else {
        (outer, n, n_out)
    };
    for r in 0..rows {
        let src = &src[r * row_in * inner..(r + 1) * row_in * inner];
        let dst = &mut dst[r * row_out * inner..(r + 1) * row_out * inner];
        let inside = interior(w, s, lo, row_in, row_out);
        if !inside.is_empty() {
            let from = &src[(inside.start * s - lo) * inner..];
            let acc = &mut dst[inside.start * inner..inside.end * inner];
            if inner == 1 {
                fold_strided(acc, w, s, from, phases);
            } else {
                for (j, acc) in acc.chunks_exact_mut(inner).enumerate() {
                    fold_offsets(acc, w, |k| &from[(j * s + k) * inner..]);
                }
            }
        }
    }
    // The outputs cut by padding, row by row: the max of their window's
    // rows inside the input (the lowest value when there are none).
    let inside = interior(w, s, lo, n, n_out);
    let edges = (0..inside.start).chain(inside.end..n_out);
    if edges.clone().next().is_none() {
        return;
    }
    for r in 0..outer {
        let src = &src[r * n * inner..(r + 1) * n * inner];
        let dst = &mut dst[r * n_out * inner..(r + 1) * n_out * inner];
        for j in edges.clone() {
            let acc = &mut dst[j * inner..(j + 1) * inner];
            let (k0, k1, start) = window_range(j, w, s, lo, n);
            if k0 == k1 {
                acc.fill(lowest);
                continue;
            }
            // The first element in bounds is the max so far: folding it
            // into the lowest value gives its own bits.
            let at = |k: usize| (start + k as isize) as usize * inner;
            fold_offsets(acc, k1 - k0, |k| &src[at(k0 + k)..]);
        }
    }
}

/// `acc[j]` = the max of the `w` elements of `from` from `j * s` on (a
/// window at stride `s` along one row), in offset order.
#[inline(always)]
fn fold_strided<T: PartialOrd + Copy>(
    acc: &mut [T],
    w: usize,
    s: usize,
    from: &[T],
    phases: &mut Vec<T>,
) {
    match s {
        1 => fold_offsets(acc, w, |k| &from[k..]),
        2 => fold_phases::<T, 2>(acc, w, from, phases),
        3 => fold_phases::<T, 3>(acc, w, from, phases),
        _ => {
            for (j, a) in acc.iter_mut().enumerate() {
                let win = &from[j * s..j * s + w];
                *a = win[1..].iter().fold(win[0], |a, &v| max_nan(a, v));
            }
        }
    }
}

/// `acc[j]` = the max over window offsets `k < w` of `at(k)[j]`, in
/// offset order: one pass over contiguous slices per offset, which
/// vectorizes.
#[inline(always)]
fn fold_offsets<'a, T: PartialOrd + Copy + 'a>(
    acc: &mut [T],
    w: usize,
    at: impl Fn(usize) -> &'a [T],
) {
    let n = acc.len();
    acc.copy_from_slice(&at(0)[..n]);
    for k in 1..w {
        for (a, &v) in acc.iter_mut().zip(&at(k)[..n]) {
            *a = max_nan(*a, v);
        }
    }
}

/// [`fold_offsets`] for windows at stride `S` along a row: the row is
/// first split into its `S` phases (every `S`th element from `r`), so that
/// offset `k = q * S + r` of window `j` is element `j + q` of phase `r`, a
/// contiguous run (strided loads do not vectorize).
#[inline(always)]
fn fold_phases<T: PartialOrd + Copy, const S: usize>(
    acc: &mut [T],
    w: usize,
    from: &[T],
    phases: &mut Vec<T>,
) {
    let m = acc.len() + (w - 1) / S;
    if phases.len() < S * m {
        phases.resize(S * m, from[0]);
    }
    let whole = (from.len() / S).min(m);
    // All phases in one loop over whole groups: the compiler turns a
    // group of loads that uses every member into vector shuffles (a phase
    // at a time, it gathers, 4x slower).
    let ph = &mut phases[..S * m];
    match S {
        2 => {
            let (p0, p1) = ph.split_at_mut(m);
            for ((c, a), b) in from
                .chunks_exact(2)
                .zip(&mut p0[..whole])
                .zip(&mut p1[..whole])
            {
                *a = c[0];
                *b = c[1];
            }
        }
        3 => {
            let (p0, p12) = ph.split_at_mut(m);
            let (p1, p2) = p12.split_at_mut(m);
            let groups = from.chunks_exact(3).zip(&mut p0[..whole]);
            for (((c, a), b), d) in groups.zip(&mut p1[..whole]).zip(&mut p2[..whole]) {
                *a = c[0];
                *b = c[1];
                *d = c[2];
            }
        }
        _ => {
            for (i, c) in from[..whole * S].chunks_exact(S).enumerate() {
                for (r, &v) in c.iter().enumerate() {
                    ph[r * m + i] = v;
                }
            }
        }
    }
    // The tail: each phase's elements past the last whole group.
    for (r, phase) in ph.chunks_exact_mut(m).enumerate() {
        for (i, p) in phase.iter_mut().enumerate().skip(whole) {
            if let Some(&v) = from.get(i * S + r) {
                *p = v;
            }
        }
    }
    let phases = &phases[..S * m];
    fold_offsets(acc, w, |k| &phases[k % S * m + k / S..]);
}

fn argmax_typed<T: Element + PartialOrd>(
    x: &Value,
    window: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
    flat_from: usize,
) -> Tensor {
    let shape = &x.layout.shape;
    let p = match Pass::new(x, window, strides, pad) {
        Ok(p) => p,
        Err(empty) => return Tensor::from_storage(DType::I32, &empty, Storage::new(DType::I32, 0)),
    };
    let (g, len, rows_per_plane, k) = (&p.g, p.len, p.rows_per_plane, p.k);
    let mut out = Storage::new(DType::I32, p.total);
    let xv = p.xc.value();
    let data = xv.storage.read::<T>();
    let data = &data[xv.layout.offset..];
    // Flat indices count over axes `flat_from..`: the contiguous offset
    // modulo their size; that size itself marks a padding element.
    let span: usize = shape[flat_from..].iter().product();
    let sentinel = span as i64;
    // The usual case: a plane is exactly the flattened axes.
    let whole = span == g.plane_in;
    let lowest = T::from_f64(f64::NEG_INFINITY);
    let o = &mut out.as_mut_slice::<i32>()[..p.total];
    split_rows(o, len, p.work, &|r0, o| {
        // Best value and index per column; index -1 = nothing visited yet.
        let mut best = vec![(lowest, -1i64); len];
        let (mut oc, mut wc) = (vec![0; k], vec![0; k]);
        for (j, orow) in o.chunks_mut(len).enumerate() {
            let r = r0 + j;
            let (plane, rr) = (r / rows_per_plane, r % rows_per_plane);
            let src = &data[plane * g.plane_in..(plane + 1) * g.plane_in];
            let at = plane * g.plane_in;
            best.fill((lowest, -1));
            g.for_window_rows(rr, &mut oc, &mut wc, |base| {
                for (ox, b) in best.iter_mut().enumerate() {
                    let (w0, w1, start) = g.last_range(ox);
                    let Some(base) = base else {
                        // A row of padding: its first element is the
                        // candidate only if nothing came before.
                        if b.1 < 0 {
                            *b = (lowest, sentinel);
                        }
                        continue;
                    };
                    if w0 > 0 && b.1 < 0 {
                        *b = (lowest, sentinel);
                    }
                    for w in w0..w1 {
                        let c = (start + w as isize) as usize;
                        let v = src[base + c];
                        #[allow(clippy::eq_op)]
                        let better = (b.1 < 0) | (v > b.0) | ((v != v) & (b.0 == b.0));
                        let at = if whole {
                            (base + c) as i64
                        } else {
                            ((at + base + c) % span) as i64
                        };
                        // Selects, not branches (see `max_nan`).
                        b.0 = if better { v } else { b.0 };
                        b.1 = if better { at } else { b.1 };
                    }
                    if w1 < g.window[k] && b.1 < 0 {
                        *b = (lowest, sentinel);
                    }
                }
            });
            for (o, b) in orow.iter_mut().zip(&best) {
                *o = b.1 as i32;
            }
        }
    });
    Tensor::from_storage(DType::I32, &p.out_shape, out)
}

/// `Prim::WindowArgmax`: the first maximum of each max window, as a flat
/// index over the axes `flat_from..` (one past the end for padding).
pub(crate) fn window_argmax(
    x: &Value,
    window: &[usize],
    strides: &[usize],
    pad: &[(usize, usize)],
    flat_from: usize,
) -> Tensor {
    crate::with_dtype!(x.dtype, T => argmax_typed::<T>(x, window, strides, pad, flat_from))
}
