//! Reduction kernels: sum/prod/max/min over any set of axes, argmax/argmin,
//! cumulative sum/product.
//!
//! A reduction is a `Fold`: elements fold into *lane* accumulators (many
//! independent ones, so the compiler vectorizes the contiguous loop and float
//! sums stay accurate), lanes merge into a *total* of a wider type per block
//! of elements (f64 for every float sum, a two-level pairwise scheme), and the
//! total rounds back to the element type at the end. f16/bf16 fold in f32.
//! Integer sums and products wrap; float max/min propagate NaN.
//!
//! Layouts are first reduced to a plan: the kept axes (in output order) and
//! the reduced axes (any order: reversed strides are flipped, the axes sorted
//! by stride and merged where contiguous, so a transposed or flipped input
//! reduces like a contiguous one). Three loops then cover every case:
//! - contiguous full reduction: one pass with vector lanes, split across
//!   cores above `PAR_MIN` elements;
//! - horizontal: for each output element, fold the reduced elements (rows of
//!   the innermost reduced axis; contiguous rows use the vector fold);
//! - vertical: when the innermost kept axis is the densest (column sums,
//!   reducing leading axes), accumulate whole input rows elementwise into a
//!   row of accumulators.

use super::dispatch::{self, Kernel};
use super::pool::{self, PAR_MIN, REDUCE_PAR_CHUNK};
use crate::dtype::{DType, Element};
use crate::layout::{merge_dims, Layout};
use crate::prim::{drop_axes, ArgOp, CumOp, ReduceOp};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use half::{bf16, f16};
use num_traits::{Bounded, Float, One, WrappingAdd, WrappingMul, Zero};
use std::marker::PhantomData;

/// The contiguous fold keeps `NV` vectors of `VW` independent lane
/// accumulators (in registers: every index into them is a constant).
const VW: usize = 8;
const NV: usize = 8;
const LANES: usize = VW * NV;
/// Elements per block of the contiguous fold: each lane sums `BLOCK / LANES`
/// elements, then the block's result joins the wide total.
const BLOCK: usize = 4096;
/// Elements per block of the strided fold (four lanes).
const SBLOCK: usize = 1024;
/// Reduced positions per block of the vertical loop.
const VBLOCK: usize = 128;
/// Output columns per task of the vertical loop (its accumulators stay in L1).
const CW: usize = 1024;

/// One reduction, in three levels: element -> lane -> total -> element.
trait Fold: Copy + Send + Sync {
    type In: Element;
    type Lane: Copy + Send + Sync;
    type Total: Copy + Send + Sync;
    fn lane0(self) -> Self::Lane;
    fn step(self, a: Self::Lane, x: Self::In) -> Self::Lane;
    fn merge(self, a: Self::Lane, b: Self::Lane) -> Self::Lane;
    fn total0(self) -> Self::Total;
    fn absorb(self, t: Self::Total, l: Self::Lane) -> Self::Total;
    fn join(self, a: Self::Total, b: Self::Total) -> Self::Total;
    fn finish(self, t: Self::Total) -> Self::In;
}

/// Float element types and the float type their lanes accumulate in (f32
/// for f16 and bf16).
trait FloatElement: Element {
    type Lane: Float + Into<f64> + Send + Sync;
    fn up(self) -> Self::Lane;
    fn from_lane(l: Self::Lane) -> Self;
    fn from_total(t: f64) -> Self;
}

impl FloatElement for f32 {
    type Lane = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_lane(l: f32) -> Self {
        l
    }
    #[inline(always)]
    fn from_total(t: f64) -> Self {
        t as f32
    }
}

impl FloatElement for f64 {
    type Lane = f64;
    #[inline(always)]
    fn up(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_lane(l: f64) -> Self {
        l
    }
    #[inline(always)]
    fn from_total(t: f64) -> Self {
        t
    }
}

macro_rules! half_float_element {
    ($($t:ty),*) => {$(
        impl FloatElement for $t {
            type Lane = f32;
            #[inline(always)]
            fn up(self) -> f32 { self.to_f32() }
            #[inline(always)]
            fn from_lane(l: f32) -> Self { <$t>::from_f32(l) }
            #[inline(always)]
            fn from_total(t: f64) -> Self { <$t>::from_f64(t) }
        }
    )*};
}
half_float_element!(f16, bf16);

/// NaN-propagating maximum (NaN is sticky once in the accumulator).
#[inline(always)]
fn nan_max<L: Float>(a: L, b: L) -> L {
    if b > a || b.is_nan() {
        b
    } else {
        a
    }
}

#[inline(always)]
fn nan_min<L: Float>(a: L, b: L) -> L {
    if b < a || b.is_nan() {
        b
    } else {
        a
    }
}

macro_rules! fold_struct {
    ($($name:ident),*) => {$(
        struct $name<T>(PhantomData<T>);
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                *self
            }
        }
        impl<T> Copy for $name<T> {}
        impl<T> $name<T> {
            fn new() -> Self {
                $name(PhantomData)
            }
        }
    )*};
}
fold_struct!(FSum, FProd, FMax, FMin, ISum, IProd, IMax, IMin);

impl<T: FloatElement> Fold for FSum<T> {
    type In = T;
    type Lane = T::Lane;
    type Total = f64;
    #[inline(always)]
    fn lane0(self) -> T::Lane {
        T::Lane::zero()
    }
    #[inline(always)]
    fn step(self, a: T::Lane, x: T) -> T::Lane {
        a + x.up()
    }
    #[inline(always)]
    fn merge(self, a: T::Lane, b: T::Lane) -> T::Lane {
        a + b
    }
    #[inline(always)]
    fn total0(self) -> f64 {
        0.0
    }
    #[inline(always)]
    fn absorb(self, t: f64, l: T::Lane) -> f64 {
        t + l.into()
    }
    #[inline(always)]
    fn join(self, a: f64, b: f64) -> f64 {
        a + b
    }
    #[inline(always)]
    fn finish(self, t: f64) -> T {
        T::from_total(t)
    }
}

impl<T: FloatElement> Fold for FProd<T> {
    type In = T;
    type Lane = T::Lane;
    type Total = f64;
    #[inline(always)]
    fn lane0(self) -> T::Lane {
        T::Lane::one()
    }
    #[inline(always)]
    fn step(self, a: T::Lane, x: T) -> T::Lane {
        a * x.up()
    }
    #[inline(always)]
    fn merge(self, a: T::Lane, b: T::Lane) -> T::Lane {
        a * b
    }
    #[inline(always)]
    fn total0(self) -> f64 {
        1.0
    }
    #[inline(always)]
    fn absorb(self, t: f64, l: T::Lane) -> f64 {
        t * l.into()
    }
    #[inline(always)]
    fn join(self, a: f64, b: f64) -> f64 {
        a * b
    }
    #[inline(always)]
    fn finish(self, t: f64) -> T {
        T::from_total(t)
    }
}

macro_rules! float_extreme {
    ($name:ident, $pick:ident, $init:ident) => {
        impl<T: FloatElement> Fold for $name<T> {
            type In = T;
            type Lane = T::Lane;
            type Total = T::Lane;
            #[inline(always)]
            fn lane0(self) -> T::Lane {
                T::Lane::$init()
            }
            #[inline(always)]
            fn step(self, a: T::Lane, x: T) -> T::Lane {
                $pick(a, x.up())
            }
            #[inline(always)]
            fn merge(self, a: T::Lane, b: T::Lane) -> T::Lane {
                $pick(a, b)
            }
            #[inline(always)]
            fn total0(self) -> T::Lane {
                T::Lane::$init()
            }
            #[inline(always)]
            fn absorb(self, t: T::Lane, l: T::Lane) -> T::Lane {
                $pick(t, l)
            }
            #[inline(always)]
            fn join(self, a: T::Lane, b: T::Lane) -> T::Lane {
                $pick(a, b)
            }
            #[inline(always)]
            fn finish(self, t: T::Lane) -> T {
                T::from_lane(t)
            }
        }
    };
}
float_extreme!(FMax, nan_max, neg_infinity);
float_extreme!(FMin, nan_min, infinity);

/// Integer element types.
trait Int: Element + Ord + Bounded + WrappingAdd + WrappingMul + Zero + One {}
impl<T: Element + Ord + Bounded + WrappingAdd + WrappingMul + Zero + One> Int for T {}

macro_rules! int_fold {
    ($name:ident, $init:expr, |$a:ident, $b:ident| $combine:expr) => {
        impl<T: Int> Fold for $name<T> {
            type In = T;
            type Lane = T;
            type Total = T;
            #[inline(always)]
            fn lane0(self) -> T {
                $init
            }
            #[inline(always)]
            fn step(self, $a: T, $b: T) -> T {
                $combine
            }
            #[inline(always)]
            fn merge(self, $a: T, $b: T) -> T {
                $combine
            }
            #[inline(always)]
            fn total0(self) -> T {
                $init
            }
            #[inline(always)]
            fn absorb(self, $a: T, $b: T) -> T {
                $combine
            }
            #[inline(always)]
            fn join(self, $a: T, $b: T) -> T {
                $combine
            }
            #[inline(always)]
            fn finish(self, t: T) -> T {
                t
            }
        }
    };
}
int_fold!(ISum, T::zero(), |a, b| a.wrapping_add(&b));
int_fold!(IProd, T::one(), |a, b| a.wrapping_mul(&b));
int_fold!(IMax, T::min_value(), |a, b| a.max(b));
int_fold!(IMin, T::max_value(), |a, b| a.min(b));

/// `Bool`: any (max, and sum as logical or) or all (min, and prod as logical and).
#[derive(Clone, Copy)]
struct BoolFold {
    all: bool,
}

impl Fold for BoolFold {
    type In = bool;
    type Lane = bool;
    type Total = bool;
    #[inline(always)]
    fn lane0(self) -> bool {
        self.all
    }
    #[inline(always)]
    fn step(self, a: bool, x: bool) -> bool {
        if self.all {
            a & x
        } else {
            a | x
        }
    }
    #[inline(always)]
    fn merge(self, a: bool, b: bool) -> bool {
        self.step(a, b)
    }
    #[inline(always)]
    fn total0(self) -> bool {
        self.all
    }
    #[inline(always)]
    fn absorb(self, t: bool, l: bool) -> bool {
        self.step(t, l)
    }
    #[inline(always)]
    fn join(self, a: bool, b: bool) -> bool {
        self.step(a, b)
    }
    #[inline(always)]
    fn finish(self, t: bool) -> bool {
        t
    }
}

// ---------------------------------------------------------------------------
// The folds over one run of elements.

/// One block of a contiguous run, folded in `LANES` independent lanes.
#[inline(always)]
fn fold_block<F: Fold>(f: F, xs: &[F::In]) -> F::Lane {
    let mut acc = [[f.lane0(); VW]; NV];
    let mut chunks = xs.chunks_exact(LANES);
    for c in &mut chunks {
        let c: &[F::In; LANES] = c.try_into().unwrap();
        for (k, a) in acc.iter_mut().enumerate() {
            for (i, a) in a.iter_mut().enumerate() {
                *a = f.step(*a, c[k * VW + i]);
            }
        }
    }
    // The remainder goes to a separate accumulator: indexing the lanes with
    // a runtime index would keep them in memory instead of registers.
    let mut tail = f.lane0();
    for &x in chunks.remainder() {
        tail = f.step(tail, x);
    }
    let mut v = acc[0];
    for a in &acc[1..] {
        for (v, &a) in v.iter_mut().zip(a) {
            *v = f.merge(*v, a);
        }
    }
    v.iter().fold(tail, |t, &l| f.merge(t, l))
}

/// A contiguous run on the calling thread.
fn fold_contig<F: Fold>(f: F, xs: &[F::In]) -> F::Total {
    dispatch::run(FoldContig(f, xs))
}

struct FoldContig<'a, F: Fold>(F, &'a [F::In]);

impl<F: Fold> Kernel for FoldContig<'_, F> {
    type Output = F::Total;
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[F::In::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) -> F::Total {
        fold_contig_loop(self.0, self.1)
    }
}

#[inline(always)]
fn fold_contig_loop<F: Fold>(f: F, xs: &[F::In]) -> F::Total {
    if xs.len() < 2 * LANES {
        let mut a = f.lane0();
        for &x in xs {
            a = f.step(a, x);
        }
        return f.absorb(f.total0(), a);
    }
    let mut t = f.total0();
    for b in xs.chunks(BLOCK) {
        t = f.absorb(t, fold_block(f, b));
    }
    t
}

/// A contiguous run, split across cores when large. Chunk boundaries do not
/// depend on the thread count, and the chunk totals join in order, so the
/// result is deterministic.
fn fold_contig_par<F: Fold>(f: F, xs: &[F::In]) -> F::Total {
    if xs.len() < 2 * PAR_MIN {
        return fold_contig(f, xs);
    }
    let mut parts = vec![f.total0(); xs.len().div_ceil(REDUCE_PAR_CHUNK)];
    par_chunks(&mut parts, 1, &|i, t| {
        t[0] = fold_contig(
            f,
            &xs[i * REDUCE_PAR_CHUNK..((i + 1) * REDUCE_PAR_CHUNK).min(xs.len())],
        )
    });
    parts.into_iter().fold(f.total0(), |a, b| f.join(a, b))
}

/// `n` elements from `data[off]` by `stride`, in four lanes.
fn fold_strided<F: Fold>(f: F, data: &[F::In], off: isize, n: usize, stride: isize) -> F::Total {
    dispatch::run(FoldStrided {
        f,
        data,
        off,
        n,
        stride,
    })
}

struct FoldStrided<'a, F: Fold> {
    f: F,
    data: &'a [F::In],
    off: isize,
    n: usize,
    stride: isize,
}

impl<F: Fold> Kernel for FoldStrided<'_, F> {
    type Output = F::Total;
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[F::In::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) -> F::Total {
        fold_strided_loop(self.f, self.data, self.off, self.n, self.stride)
    }
}

#[inline(always)]
fn fold_strided_loop<F: Fold>(
    f: F,
    data: &[F::In],
    off: isize,
    n: usize,
    stride: isize,
) -> F::Total {
    let at = |i: usize| data[(off + i as isize * stride) as usize];
    let mut t = f.total0();
    let mut i = 0;
    while i < n {
        let end = (i + SBLOCK).min(n);
        let mut a = [f.lane0(); 4];
        while i + 4 <= end {
            for (l, a) in a.iter_mut().enumerate() {
                *a = f.step(*a, at(i + l));
            }
            i += 4;
        }
        while i < end {
            a[0] = f.step(a[0], at(i));
            i += 1;
        }
        t = f.absorb(t, f.merge(f.merge(a[0], a[1]), f.merge(a[2], a[3])));
    }
    t
}

// ---------------------------------------------------------------------------
// Iteration over strided dimensions.

/// Row-major odometer over `(size, stride)` dimensions, tracking the storage
/// offset of the current position. No dimension has size 0.
struct Odometer {
    dims: Vec<(usize, isize)>,
    idx: Vec<usize>,
    off: isize,
}

impl Odometer {
    fn new(dims: &[(usize, isize)]) -> Odometer {
        Odometer {
            dims: dims.to_vec(),
            idx: vec![0; dims.len()],
            off: 0,
        }
    }

    /// Moves to flat position `flat`, relative to storage offset `base`.
    fn seek(&mut self, base: isize, mut flat: usize) {
        self.off = base;
        for d in (0..self.dims.len()).rev() {
            let (n, s) = self.dims[d];
            self.idx[d] = flat % n;
            flat /= n;
            self.off += self.idx[d] as isize * s;
        }
    }

    #[inline]
    fn next(&mut self) {
        for d in (0..self.dims.len()).rev() {
            let (n, s) = self.dims[d];
            self.idx[d] += 1;
            self.off += s;
            if self.idx[d] < n {
                return;
            }
            self.idx[d] = 0;
            self.off -= s * n as isize;
        }
    }
}

/// Storage offset of flat position `flat` of `dims`, from `base`.
fn offset_of(dims: &[(usize, isize)], base: isize, mut flat: usize) -> isize {
    let mut off = base;
    for &(n, s) in dims.iter().rev() {
        off += (flat % n) as isize * s;
        flat /= n;
    }
    off
}

/// `(size, stride)` dims, size-1 ones dropped and neighbours merged where
/// they walk memory as one (`crate::layout::merge_dims`).
fn merge_pairs(dims: impl IntoIterator<Item = (usize, isize)>) -> Vec<(usize, isize)> {
    let (sizes, strides): (Vec<usize>, Vec<isize>) = dims.into_iter().unzip();
    let merged = merge_dims(&sizes, &[&strides]);
    merged
        .shape
        .into_iter()
        .zip(merged.strides[0].iter().copied())
        .collect()
}

/// `(size, stride)` of `axes` of a layout, size-1 axes dropped, contiguous
/// neighbours merged.
fn simplify(l: &Layout, axes: std::ops::Range<usize>) -> Vec<(usize, isize)> {
    merge_pairs(axes.map(|i| (l.shape[i], l.strides[i])))
}

/// Runs `body(first, chunk)` on chunks of `cs` elements of `out`, in
/// parallel. The body is a trait object so that the pool's machinery is
/// instantiated once per element type, not once per kernel.
fn par_chunks<U: Send>(out: &mut [U], cs: usize, body: &(dyn Fn(usize, &mut [U]) + Sync)) {
    pool::chunks_mut(out, cs, &|i, c| body(i * cs, c));
}

/// Runs `body(first, chunk)` over `out`, in chunks of whole `unit`s and in
/// parallel when the work (`work` input elements per output element) is large.
fn split_out<U: Send>(
    out: &mut [U],
    unit: usize,
    work: usize,
    body: &(dyn Fn(usize, &mut [U]) + Sync),
) {
    let unit = unit.max(1);
    if out.len() * work < PAR_MIN || out.len() <= unit {
        body(0, out);
        return;
    }
    let cs = (REDUCE_PAR_CHUNK / (unit * work).max(1)).max(1) * unit;
    par_chunks(out, cs, body);
}

// ---------------------------------------------------------------------------
// Reduce.

/// A reduction's layout, simplified.
struct Plan {
    /// Kept axes in output order (size-1 dropped, contiguous runs merged).
    kept: Vec<(usize, isize)>,
    /// Reduced axes, strides made non-negative, sorted by decreasing stride
    /// (stride-0 axes first), merged; never empty.
    red: Vec<(usize, isize)>,
    base: isize,
    red_n: usize,
}

fn plan(l: &Layout, axes: &[usize]) -> Plan {
    let mut base = l.offset as isize;
    let mut kept = Vec::with_capacity(l.shape.len());
    let mut red = Vec::with_capacity(axes.len());
    for i in 0..l.shape.len() {
        let (n, s) = (l.shape[i], l.strides[i]);
        if n == 1 {
            continue;
        }
        if axes.binary_search(&i).is_ok() {
            // Reduction order does not matter: walk reversed axes forward.
            if s < 0 {
                base += (n as isize - 1) * s;
                red.push((n, -s));
            } else {
                red.push((n, s));
            }
        } else {
            kept.push((n, s));
        }
    }
    let kept = merge_pairs(kept);
    red.sort_by_key(|&(_, s)| std::cmp::Reverse(if s == 0 { isize::MAX } else { s }));
    let mut merged = merge_pairs(red);
    if merged.is_empty() {
        merged.push((1, 1));
    }
    let red_n = merged.iter().map(|d| d.0).product();
    Plan {
        kept,
        red: merged,
        base,
        red_n,
    }
}

/// Folds `rows` rows (positions of `outer` from `base`) of `rn` elements
/// by `rs`, rows joined in order.
fn fold_rows<F: Fold>(
    f: F,
    data: &[F::In],
    outer: &[(usize, isize)],
    base: isize,
    rows: std::ops::Range<usize>,
    (rn, rs): (usize, isize),
) -> F::Total {
    let mut ro = Odometer::new(outer);
    ro.seek(base, rows.start);
    let mut t = f.total0();
    for _ in rows {
        let off = ro.off;
        let part = if rs == 1 {
            fold_contig(f, &data[off as usize..off as usize + rn])
        } else {
            fold_strided(f, data, off, rn, rs)
        };
        t = f.join(t, part);
        ro.next();
    }
    t
}

/// A single output of a large non-contiguous reduction: the rows (or, for
/// one long strided row, pieces of it) are split across cores; the partial
/// totals join in order, so the result does not depend on the thread count.
fn fold_rows_par<F: Fold>(f: F, data: &[F::In], p: &Plan) -> F::Total {
    let (rn, rs) = *p.red.last().unwrap();
    let outer = &p.red[..p.red.len() - 1];
    let rows = p.red_n / rn;
    if rows == 1 {
        let mut parts = vec![f.total0(); rn.div_ceil(REDUCE_PAR_CHUNK)];
        par_chunks(&mut parts, 1, &|i, t| {
            let len = REDUCE_PAR_CHUNK.min(rn - i * REDUCE_PAR_CHUNK);
            t[0] = fold_strided(
                f,
                data,
                p.base + (i * REDUCE_PAR_CHUNK) as isize * rs,
                len,
                rs,
            );
        });
        return parts.into_iter().fold(f.total0(), |a, b| f.join(a, b));
    }
    let per = (REDUCE_PAR_CHUNK / rn).max(1);
    let mut parts = vec![f.total0(); rows.div_ceil(per)];
    par_chunks(&mut parts, 1, &|i, t| {
        let r = i * per..((i + 1) * per).min(rows);
        t[0] = fold_rows(f, data, outer, p.base, r, (rn, rs));
    });
    parts.into_iter().fold(f.total0(), |a, b| f.join(a, b))
}

/// For each output element, fold its reduced elements row by row.
fn horizontal<F: Fold>(f: F, data: &[F::In], p: &Plan, out: &mut [F::In]) {
    let (rn, rs) = *p.red.last().unwrap();
    let outer = &p.red[..p.red.len() - 1];
    let rows = p.red_n / rn;
    if out.len() == 1 && p.red_n >= 2 * PAR_MIN {
        out[0] = f.finish(fold_rows_par(f, data, p));
        return;
    }
    split_out(out, 1, p.red_n, &|start, chunk| {
        let mut ko = Odometer::new(&p.kept);
        ko.seek(p.base, start);
        for o in chunk.iter_mut() {
            *o = f.finish(fold_rows(f, data, outer, ko.off, 0..rows, (rn, rs)));
            ko.next();
        }
    });
}

/// Accumulators of one vertical task.
struct VerticalAccumulators<F: Fold> {
    acc: Vec<F::Lane>,
    tot: Vec<F::Total>,
}

impl<F: Fold> VerticalAccumulators<F> {
    fn new() -> Self {
        VerticalAccumulators {
            acc: Vec::new(),
            tot: Vec::new(),
        }
    }
}

/// Output columns `j0..j0 + out.len()` of output row `r`: accumulate the
/// input rows elementwise over every reduced position.
fn vertical_task<F: Fold>(
    f: F,
    data: &[F::In],
    p: &Plan,
    r: usize,
    j0: usize,
    out: &mut [F::In],
    bufs: &mut VerticalAccumulators<F>,
) {
    dispatch::run(VerticalTask {
        f,
        data,
        p,
        r,
        j0,
        out,
        bufs,
    })
}

struct VerticalTask<'a, F: Fold> {
    f: F,
    data: &'a [F::In],
    p: &'a Plan,
    r: usize,
    j0: usize,
    out: &'a mut [F::In],
    bufs: &'a mut VerticalAccumulators<F>,
}

impl<F: Fold> Kernel for VerticalTask<'_, F> {
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[F::In::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let VerticalTask {
            f,
            data,
            p,
            r,
            j0,
            out,
            bufs,
        } = self;
        vertical_task_loop(f, data, p, r, j0, out, bufs)
    }
}

#[inline(always)]
fn vertical_task_loop<F: Fold>(
    f: F,
    data: &[F::In],
    p: &Plan,
    r: usize,
    j0: usize,
    out: &mut [F::In],
    bufs: &mut VerticalAccumulators<F>,
) {
    let (_, ks) = *p.kept.last().unwrap();
    let row_dims = &p.kept[..p.kept.len() - 1];
    let w = out.len();
    let base = offset_of(row_dims, p.base, r) + j0 as isize * ks;
    let VerticalAccumulators { acc, tot } = bufs;
    acc.clear();
    acc.resize(w, f.lane0());
    tot.clear();
    tot.resize(w, f.total0());
    let mut ro = Odometer::new(&p.red);
    ro.seek(base, 0);
    let mut left = VBLOCK;
    for _ in 0..p.red_n {
        let off = ro.off;
        if ks == 1 {
            let row = &data[off as usize..off as usize + w];
            for (a, &x) in acc.iter_mut().zip(row) {
                *a = f.step(*a, x);
            }
        } else {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = f.step(*a, data[(off + j as isize * ks) as usize]);
            }
        }
        ro.next();
        left -= 1;
        if left == 0 {
            for (t, a) in tot.iter_mut().zip(acc.iter_mut()) {
                *t = f.absorb(*t, *a);
                *a = f.lane0();
            }
            left = VBLOCK;
        }
    }
    for ((o, &t), &a) in out.iter_mut().zip(tot.iter()).zip(acc.iter()) {
        *o = f.finish(f.absorb(t, a));
    }
}

/// Column sums: the innermost kept axis is the densest, so whole input rows
/// accumulate elementwise (vectorized) into a row of accumulators.
fn vertical<F: Fold>(f: F, data: &[F::In], p: &Plan, out: &mut [F::In]) {
    let (m, _) = *p.kept.last().unwrap();
    let rows = out.len() / m;
    let par = out.len() * p.red_n >= PAR_MIN;
    // Column block width: at most `CW`; with few output rows and enough
    // work, narrower blocks so that every core gets some.
    let cw = if par && rows < 4 {
        m.div_ceil(4).next_multiple_of(16).min(CW)
    } else {
        m.min(CW)
    };
    if cw < m {
        // Tasks are column blocks of one output row.
        if par {
            // Column blocks of every row, all in parallel.
            pool::row_pieces_mut(out, m, cw, &|r, j, ch| {
                vertical_task(f, data, p, r, j * cw, ch, &mut VerticalAccumulators::new())
            });
        } else {
            let mut bufs = VerticalAccumulators::new();
            for (r, row) in out.chunks_mut(m).enumerate() {
                for (c, ch) in row.chunks_mut(cw).enumerate() {
                    vertical_task(f, data, p, r, c * cw, ch, &mut bufs);
                }
            }
        }
    } else {
        // Tasks are groups of whole output rows.
        split_out(out, m, p.red_n, &|start, chunk| {
            let mut bufs = VerticalAccumulators::new();
            for (i, row) in chunk.chunks_mut(m).enumerate() {
                vertical_task(f, data, p, start / m + i, 0, row, &mut bufs);
            }
        });
    }
}

/// Complex sum or product (`prod` false: sum), accumulated in
/// `Complex<f64>` whatever the element type: complex has no order, so no
/// max/min.
#[derive(Clone, Copy)]
struct CFold<T> {
    prod: bool,
    _t: std::marker::PhantomData<T>,
}

impl<T: Element> Fold for CFold<T> {
    type In = T;
    type Lane = crate::Complex<f64>;
    type Total = crate::Complex<f64>;
    #[inline(always)]
    fn lane0(self) -> Self::Lane {
        crate::Complex::new(if self.prod { 1.0 } else { 0.0 }, 0.0)
    }
    #[inline(always)]
    fn step(self, a: Self::Lane, x: T) -> Self::Lane {
        self.merge(a, x.to_c128())
    }
    #[inline(always)]
    fn merge(self, a: Self::Lane, b: Self::Lane) -> Self::Lane {
        if self.prod {
            a * b
        } else {
            a + b
        }
    }
    #[inline(always)]
    fn total0(self) -> Self::Total {
        self.lane0()
    }
    #[inline(always)]
    fn absorb(self, t: Self::Total, l: Self::Lane) -> Self::Total {
        self.merge(t, l)
    }
    #[inline(always)]
    fn join(self, a: Self::Total, b: Self::Total) -> Self::Total {
        self.merge(a, b)
    }
    #[inline(always)]
    fn finish(self, t: Self::Total) -> T {
        T::from_c128(t)
    }
}

fn reduce_complex<T: Element>(op: ReduceOp, x: &Value, axes: &[usize]) -> Tensor {
    let prod = match op {
        ReduceOp::Sum => false,
        ReduceOp::Prod => true,
        _ => panic!(
            "reduce: {op:?} of {} tensors (complex numbers have no order)",
            x.dtype
        ),
    };
    reduce_with(
        CFold::<T> {
            prod,
            _t: std::marker::PhantomData,
        },
        x,
        axes,
    )
}

fn reduce_with<F: Fold>(f: F, x: &Value, axes: &[usize]) -> Tensor {
    let l = &x.layout;
    let full = axes.len() == l.shape.len();
    let out_shape = if full {
        Vec::new()
    } else {
        drop_axes(&l.shape, axes)
    };
    let out_n: usize = out_shape.iter().product();
    let red_n: usize = axes.iter().map(|&a| l.shape[a]).product();
    let mut storage = Storage::new(F::In::DTYPE, out_n);
    {
        let out = &mut storage.as_mut_slice::<F::In>()[..out_n];
        let data = x.storage.read::<F::In>();
        if out_n == 0 {
            // Nothing to compute.
        } else if red_n == 0 {
            out.fill(f.finish(f.total0()));
        } else if full && l.is_contiguous() {
            // The common full reduction: no planning, no allocation.
            out[0] = f.finish(fold_contig_par(f, &data[l.offset..l.offset + red_n]));
        } else {
            let p = plan(l, axes);
            let (_, rs) = *p.red.last().unwrap();
            if p.kept.is_empty() && p.red.len() == 1 && rs == 1 {
                let o = p.base as usize;
                out[0] = f.finish(fold_contig_par(f, &data[o..o + red_n]));
            } else if matches!(p.kept.last(), Some(&(kn, ks)) if kn > 1 && rs != 1 && ks.abs() < rs)
            {
                vertical(f, &data, &p, out);
            } else {
                horizontal(f, &data, &p, out);
            }
        }
    }
    Tensor::from_storage(F::In::DTYPE, &out_shape, storage)
}

fn reduce_float<T: FloatElement>(op: ReduceOp, x: &Value, axes: &[usize]) -> Tensor {
    match op {
        ReduceOp::Sum => reduce_with(FSum::<T>::new(), x, axes),
        ReduceOp::Prod => reduce_with(FProd::<T>::new(), x, axes),
        ReduceOp::Max => reduce_with(FMax::<T>::new(), x, axes),
        ReduceOp::Min => reduce_with(FMin::<T>::new(), x, axes),
    }
}

fn reduce_int<T: Int>(op: ReduceOp, x: &Value, axes: &[usize]) -> Tensor {
    match op {
        ReduceOp::Sum => reduce_with(ISum::<T>::new(), x, axes),
        ReduceOp::Prod => reduce_with(IProd::<T>::new(), x, axes),
        ReduceOp::Max => reduce_with(IMax::<T>::new(), x, axes),
        ReduceOp::Min => reduce_with(IMin::<T>::new(), x, axes),
    }
}

/// Reduces `x` over `axes` (sorted, distinct), which disappear. An empty
/// reduction gives the identity (0, 1, -inf/min, +inf/max). On `Bool`, max
/// and sum are "any", min and prod are "all".
pub(crate) fn reduce(op: ReduceOp, x: &Value, axes: &[usize]) -> Tensor {
    match x.dtype {
        DType::F16 => reduce_float::<f16>(op, x, axes),
        DType::BF16 => reduce_float::<bf16>(op, x, axes),
        DType::F32 => reduce_float::<f32>(op, x, axes),
        DType::F64 => reduce_float::<f64>(op, x, axes),
        DType::U8 => reduce_int::<u8>(op, x, axes),
        DType::U16 => reduce_int::<u16>(op, x, axes),
        DType::U32 => reduce_int::<u32>(op, x, axes),
        DType::U64 => reduce_int::<u64>(op, x, axes),
        DType::I8 => reduce_int::<i8>(op, x, axes),
        DType::I16 => reduce_int::<i16>(op, x, axes),
        DType::I32 => reduce_int::<i32>(op, x, axes),
        DType::I64 => reduce_int::<i64>(op, x, axes),
        DType::Bool => {
            let all = matches!(op, ReduceOp::Min | ReduceOp::Prod);
            reduce_with(BoolFold { all }, x, axes)
        }
        DType::C64 => reduce_complex::<crate::Complex<f32>>(op, x, axes),
        DType::C128 => reduce_complex::<crate::Complex<f64>>(op, x, axes),
        d => super::unsupported("reduce", d),
    }
}

// ---------------------------------------------------------------------------
// Argmax / argmin.

/// Splits a layout around `axis`: the simplified dimensions before and after
/// it, with their element counts.
struct AxisSplit {
    outer: Vec<(usize, isize)>,
    inner: Vec<(usize, isize)>,
    inner_n: usize,
    len: usize,
    stride: isize,
}

fn split_axis(l: &Layout, axis: usize) -> AxisSplit {
    let nd = l.shape.len();
    AxisSplit {
        outer: simplify(l, 0..axis),
        inner: simplify(l, axis + 1..nd),
        inner_n: l.shape[axis + 1..].iter().product(),
        len: l.shape[axis],
        stride: l.strides[axis],
    }
}

fn arg_typed<T: Element + PartialOrd>(x: &Value, axis: usize, max: bool) -> Tensor {
    let l = &x.layout;
    let out_shape = drop_axes(&l.shape, &[axis]);
    let out_n: usize = out_shape.iter().product();
    let mut storage = Storage::new(DType::I32, out_n);
    {
        let out = &mut storage.as_mut_slice::<i32>()[..out_n];
        let data = x.storage.read::<T>();
        let sp = split_axis(l, axis);
        // `v` replaces the current best `b`: strictly better (ties keep the
        // first index), or the first NaN (NaN counts as the extreme).
        #[inline(always)]
        fn better<T: Element + PartialOrd>(max: bool, v: T, b: T) -> bool {
            #[allow(clippy::eq_op)]
            let nan = |t: T| t != t;
            (if max { v > b } else { v < b }) || (nan(v) && !nan(b))
        }
        if out_n > 0 && sp.len > 0 {
            let data = &*data;
            let (len, st) = (sp.len, sp.stride);
            if sp.inner_n == 1 {
                split_out(out, 1, len, &|start, chunk| {
                    let mut oo = Odometer::new(&sp.outer);
                    oo.seek(l.offset as isize, start);
                    for o in chunk.iter_mut() {
                        let base = oo.off;
                        let mut best = data[base as usize];
                        let mut bi = 0;
                        if st == 1 {
                            let row = &data[base as usize..base as usize + len];
                            for (i, &v) in row.iter().enumerate().skip(1) {
                                if better(max, v, best) {
                                    best = v;
                                    bi = i;
                                }
                            }
                        } else {
                            for i in 1..len {
                                let v = data[(base + i as isize * st) as usize];
                                if better(max, v, best) {
                                    best = v;
                                    bi = i;
                                }
                            }
                        }
                        *o = bi as i32;
                        oo.next();
                    }
                });
            } else {
                let inner_n = sp.inner_n;
                split_out(out, inner_n, len, &|start, chunk| {
                    let mut io = Odometer::new(&sp.inner);
                    let mut best: Vec<T> = vec![T::default(); inner_n];
                    for (k, idx) in chunk.chunks_mut(inner_n).enumerate() {
                        let base = offset_of(&sp.outer, l.offset as isize, start / inner_n + k);
                        io.seek(base, 0);
                        for (b, i) in best.iter_mut().zip(idx.iter_mut()) {
                            *b = data[io.off as usize];
                            *i = 0;
                            io.next();
                        }
                        for a in 1..len {
                            io.seek(base + a as isize * st, 0);
                            for (b, i) in best.iter_mut().zip(idx.iter_mut()) {
                                let v = data[io.off as usize];
                                if better(max, v, *b) {
                                    *b = v;
                                    *i = a as i32;
                                }
                                io.next();
                            }
                        }
                    }
                });
            }
        }
    }
    Tensor::from_storage(DType::I32, &out_shape, storage)
}

/// Index (`I32`) of the first extreme element along `axis`, which
/// disappears; NaN counts as the extreme. `axis` must not be empty.
pub(crate) fn arg_reduce(op: ArgOp, x: &Value, axis: usize) -> Tensor {
    let max = op == ArgOp::Argmax;
    crate::with_dtype!(x.dtype, T => arg_typed::<T>(x, axis, max))
}

// ---------------------------------------------------------------------------
// Cumulative sum / product.

fn cum_typed<T: Element, A: Copy + Send + Sync>(
    x: &Value,
    axis: usize,
    init: A,
    step: impl Fn(A, T) -> A + Sync + Send,
    fin: impl Fn(A) -> T + Sync + Send,
) -> Tensor {
    let l = &x.layout;
    let n = l.numel();
    let mut storage = Storage::new(T::DTYPE, n);
    {
        let out = &mut storage.as_mut_slice::<T>()[..n];
        let data = x.storage.read::<T>();
        let data = &*data;
        let sp = split_axis(l, axis);
        let (len, st, inner_n) = (sp.len, sp.stride, sp.inner_n);
        let unit = len * inner_n;
        let contiguous_inner = sp.inner.len() == 1 && sp.inner[0].1 == 1;
        if n > 0 {
            split_out(out, unit, 1, &|start, chunk| {
                let mut io = Odometer::new(&sp.inner);
                let mut acc: Vec<A> = Vec::with_capacity(inner_n);
                for (k, block) in chunk.chunks_mut(unit).enumerate() {
                    let base = offset_of(&sp.outer, l.offset as isize, start / unit + k);
                    if inner_n == 1 {
                        // Scanning along the last (non-trivial) axis.
                        let mut s = init;
                        for (i, o) in block.iter_mut().enumerate() {
                            s = step(s, data[(base + i as isize * st) as usize]);
                            *o = fin(s);
                        }
                        continue;
                    }
                    acc.clear();
                    acc.resize(inner_n, init);
                    for (a, row) in block.chunks_mut(inner_n).enumerate() {
                        let off = base + a as isize * st;
                        if contiguous_inner {
                            // Whole input rows, elementwise (vectorizes).
                            let xs = &data[off as usize..off as usize + inner_n];
                            for ((o, s), &x) in row.iter_mut().zip(acc.iter_mut()).zip(xs) {
                                *s = step(*s, x);
                                *o = fin(*s);
                            }
                        } else {
                            io.seek(off, 0);
                            for (o, s) in row.iter_mut().zip(acc.iter_mut()) {
                                *s = step(*s, data[io.off as usize]);
                                *o = fin(*s);
                                io.next();
                            }
                        }
                    }
                }
            });
        }
    }
    Tensor::from_storage(T::DTYPE, &l.shape, storage)
}

fn cum_float<T: FloatElement>(op: CumOp, x: &Value, axis: usize) -> Tensor {
    // Running values in f64: accurate for every float type.
    let fin = |a: f64| T::from_total(a);
    match op {
        CumOp::Sum => cum_typed(x, axis, 0.0f64, |a, v: T| a + v.up().into(), fin),
        CumOp::Prod => cum_typed(x, axis, 1.0f64, |a, v: T| a * v.up().into(), fin),
    }
}

fn cum_complex<T: Element>(op: CumOp, x: &Value, axis: usize) -> Tensor {
    // Running values in Complex<f64>, like the floats' f64.
    let fin = |a: crate::Complex<f64>| T::from_c128(a);
    let c = |re: f64| crate::Complex::new(re, 0.0);
    match op {
        CumOp::Sum => cum_typed(x, axis, c(0.0), |a, v: T| a + v.to_c128(), fin),
        CumOp::Prod => cum_typed(x, axis, c(1.0), |a, v: T| a * v.to_c128(), fin),
    }
}

fn cum_int<T: Int>(op: CumOp, x: &Value, axis: usize) -> Tensor {
    match op {
        CumOp::Sum => cum_typed(x, axis, T::zero(), |a: T, v: T| a.wrapping_add(&v), |a| a),
        CumOp::Prod => cum_typed(x, axis, T::one(), |a: T, v: T| a.wrapping_mul(&v), |a| a),
    }
}

/// Inclusive running sum or product along `axis`; same shape. Integers
/// wrap; on `Bool` the sum is a running "any" and the product a running "all".
pub(crate) fn cumulative(op: CumOp, x: &Value, axis: usize) -> Tensor {
    match x.dtype {
        DType::F16 => cum_float::<f16>(op, x, axis),
        DType::BF16 => cum_float::<bf16>(op, x, axis),
        DType::F32 => cum_float::<f32>(op, x, axis),
        DType::F64 => cum_float::<f64>(op, x, axis),
        DType::U8 => cum_int::<u8>(op, x, axis),
        DType::U16 => cum_int::<u16>(op, x, axis),
        DType::U32 => cum_int::<u32>(op, x, axis),
        DType::U64 => cum_int::<u64>(op, x, axis),
        DType::I8 => cum_int::<i8>(op, x, axis),
        DType::I16 => cum_int::<i16>(op, x, axis),
        DType::I32 => cum_int::<i32>(op, x, axis),
        DType::I64 => cum_int::<i64>(op, x, axis),
        DType::Bool => match op {
            CumOp::Sum => cum_typed(x, axis, false, |a, v: bool| a | v, |a| a),
            CumOp::Prod => cum_typed(x, axis, true, |a, v: bool| a & v, |a| a),
        },
        DType::C64 => cum_complex::<crate::Complex<f32>>(op, x, axis),
        DType::C128 => cum_complex::<crate::Complex<f64>>(op, x, axis),
        d => super::unsupported("cumulative", d),
    }
}
