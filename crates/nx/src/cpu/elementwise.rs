//! Elementwise kernels: unary math, binary arithmetic, comparisons, `where`
//! and casts. `map1`/`map2`/`map3` own the iteration (contiguous fast paths
//! the compiler vectorizes, a broadcast-scalar path, the general strided
//! path, the thread pool above `PAR_MIN` elements); the per-dtype math is
//! a closure handed to them.

use super::dispatch::{self, Kernel};
use super::pool::{self, PAR_CHUNK, PAR_MIN};
use super::strided::Walk;
use crate::dtype::{Complex, DType, Element, I4, U4};
use crate::prim::{BinaryOp, CmpOp, UnaryOp};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use half::{bf16, f16};
use num_traits::Float;

/// Whether every stride of a non-empty value is zero (a broadcast scalar, whose
/// one element sits at `layout.offset`). Looks at the layout only: the caller
/// already holds the storage's read guard (taking a second one on the same
/// thread could deadlock behind a waiting writer).
fn is_broadcast_scalar(v: &Value) -> bool {
    v.layout.strides.iter().all(|&s| s == 0) && v.layout.numel() > 0
}

fn contiguous_slice<'a, T: Element>(v: &Value, data: &'a [T]) -> Option<&'a [T]> {
    if v.layout.numel() == 0 {
        // The offset of an empty view may lie past the end of its storage.
        return Some(&data[..0]);
    }
    v.layout
        .is_contiguous()
        .then(|| &data[v.layout.offset..v.layout.offset + v.layout.numel()])
}

/// Runs `body(start, out_chunk)` over `out`, in parallel when it is large.
///
/// The kernels' closures are `move` closures: captured constants (the scalar
/// of a broadcast operand, `T::one()`) are then copied into the closure, so
/// LLVM can hoist them out of the loop and vectorize it. Captured by
/// reference, they are re-loaded on every element behind a possible alias of
/// the output (the f32 sigmoid loop stayed scalar that way, 10x slower).
fn fill_chunks<U: Send>(out: &mut [U], body: impl Fn(usize, &mut [U]) + Sync + Send) {
    if out.len() >= PAR_MIN {
        pool::chunks_mut(out, PAR_CHUNK, &|i, c| body(i * PAR_CHUNK, c));
    } else {
        body(0, out);
    }
}

/// Runs `body(offsets, out_part)` over `walk`'s rows, where `offsets` are
/// each operand's element offset of `out_part[0]` (parts follow rows, and
/// long rows are split); in parallel blocks when the output is large. The
/// body is a `dyn` so that the pool's scaffolding is compiled once per
/// output type, not once per operation.
fn walk_rows<U: Send, const K: usize>(
    walk: &Walk<K>,
    out: &mut [U],
    body: &(dyn Fn([isize; K], &mut [U]) + Sync),
) {
    let (len, rows) = (walk.row_len(), walk.rows());
    if len == 0 || rows == 0 {
        return;
    }
    if out.len() < PAR_MIN {
        walk.for_rows(0, rows, |r, offs| {
            body(offs, &mut out[r * len..(r + 1) * len])
        });
    } else if len >= PAR_CHUNK {
        let strides = walk.row_strides();
        let mut starts = Vec::with_capacity(rows);
        walk.for_rows(0, rows, |_, offs| starts.push(offs));
        pool::row_pieces_mut(out, len, PAR_CHUNK, &|r, s, part| {
            let first = (s * PAR_CHUNK) as isize;
            body(
                std::array::from_fn(|k| starts[r][k] + first * strides[k]),
                part,
            );
        });
    } else {
        let per = PAR_CHUNK / len;
        pool::chunks_mut(out, per * len, &|c, block| {
            let r0 = c * per;
            walk.for_rows(r0, (r0 + per).min(rows), |r, offs| {
                body(offs, &mut block[(r - r0) * len..(r - r0 + 1) * len])
            });
        });
    }
}

/// The `n` elements from `off` (a unit-stride run of an operand).
#[inline(always)]
fn run<T>(data: &[T], off: isize, n: usize) -> &[T] {
    &data[off as usize..off as usize + n]
}

/// A per-element function of `map1`. Every `Fn(T) -> U` closure is one;
/// math whose bits depend on fusing (`math::mla`: f32 exp, log, tanh,
/// sigmoid) implements it directly, to take the dispatch level's `FMA`.
pub(crate) trait ElemFn<T, U>: Sync + Send {
    fn call<const FMA: bool>(&self, x: T) -> U;
}

impl<T, U, F: Fn(T) -> U + Sync + Send> ElemFn<T, U> for F {
    #[inline(always)]
    fn call<const FMA: bool>(&self, x: T) -> U {
        self(x)
    }
}

/// Math written a run at a time (`map1_rows`): `row` fills `out` from the
/// unit-stride run `xs`, `elem` computes one element; both the same function.
pub(crate) trait RowFn<T, U>: Sync + Send {
    fn row<const FMA: bool>(&self, xs: &[T], out: &mut [U]);
    fn elem<const FMA: bool>(&self, x: T) -> U;
}

/// One operand of a row: its storage, the offset of the row's first
/// element and the step between elements (0: a broadcast scalar).
#[derive(Clone, Copy)]
struct Src<'a, T> {
    data: &'a [T],
    off: isize,
    step: isize,
}

impl<'a, T: Copy> Src<'a, T> {
    /// A contiguous operand's elements from `start`.
    fn contiguous(xs: &'a [T], start: usize) -> Self {
        Src {
            data: xs,
            off: start as isize,
            step: 1,
        }
    }

    /// A broadcast scalar operand (`is_broadcast_scalar`).
    fn scalar(v: &Value, data: &'a [T]) -> Self {
        Src {
            data,
            off: v.layout.offset as isize,
            step: 0,
        }
    }

    #[inline(always)]
    fn at(&self, i: usize) -> T {
        self.data[(self.off + i as isize * self.step) as usize]
    }
}

/// `out[i] = f(a[i], b[i])` over one row (the dispatched loop of `map2`).
struct Row2<'a, A, B, U, F> {
    out: &'a mut [U],
    a: Src<'a, A>,
    b: Src<'a, B>,
    f: &'a F,
}

impl<A: Element, B: Element, U: Element, F: Fn(A, B) -> U> Kernel for Row2<'_, A, B, U, F> {
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[A::DTYPE, B::DTYPE, U::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        row2(self.out, self.a, self.b, self.f)
    }
}

#[inline(always)]
fn row2<A: Element, B: Element, U: Element>(
    out: &mut [U],
    a: Src<A>,
    b: Src<B>,
    f: &impl Fn(A, B) -> U,
) {
    let n = out.len();
    // Unit-stride runs and broadcast scalars (a bias row, `x * 2`) get loops
    // the compiler vectorizes; any other step reads element by element.
    match (a.step, b.step) {
        (1, 1) => {
            for ((o, &u), &v) in out
                .iter_mut()
                .zip(run(a.data, a.off, n))
                .zip(run(b.data, b.off, n))
            {
                *o = f(u, v);
            }
        }
        (1, 0) => {
            let v = b.at(0);
            for (o, &u) in out.iter_mut().zip(run(a.data, a.off, n)) {
                *o = f(u, v);
            }
        }
        (0, 1) => {
            let u = a.at(0);
            for (o, &v) in out.iter_mut().zip(run(b.data, b.off, n)) {
                *o = f(u, v);
            }
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a.at(i), b.at(i));
            }
        }
    }
}

/// `out[i] = f(a[i], b[i], c[i])` over one row (the dispatched loop of `map3`).
struct Row3<'a, A, B, C, U, F> {
    out: &'a mut [U],
    a: Src<'a, A>,
    b: Src<'a, B>,
    c: Src<'a, C>,
    f: &'a F,
}

impl<A: Element, B: Element, C: Element, U: Element, F: Fn(A, B, C) -> U> Kernel
    for Row3<'_, A, B, C, U, F>
{
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[A::DTYPE, B::DTYPE, C::DTYPE, U::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        row3(self.out, self.a, self.b, self.c, self.f)
    }
}

#[inline(always)]
fn row3<A: Element, B: Element, C: Element, U: Element>(
    out: &mut [U],
    a: Src<A>,
    b: Src<B>,
    c: Src<C>,
    f: &impl Fn(A, B, C) -> U,
) {
    let n = out.len();
    match (a.step, b.step, c.step) {
        (1, 1, 1) => {
            let abc = run(a.data, a.off, n)
                .iter()
                .zip(run(b.data, b.off, n))
                .zip(run(c.data, c.off, n));
            for (o, ((&x, &y), &z)) in out.iter_mut().zip(abc) {
                *o = f(x, y, z);
            }
        }
        (1, 1, 0) => {
            let z = c.at(0);
            let xy = run(a.data, a.off, n).iter().zip(run(b.data, b.off, n));
            for (o, (&x, &y)) in out.iter_mut().zip(xy) {
                *o = f(x, y, z);
            }
        }
        (1, 0, 0) => {
            // where(c, constant, constant): a select between two scalars
            let (y, z) = (b.at(0), c.at(0));
            for (o, &x) in out.iter_mut().zip(run(a.data, a.off, n)) {
                *o = f(x, y, z);
            }
        }
        _ => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = f(a.at(i), b.at(i), c.at(i));
            }
        }
    }
}

/// `map1_rows`' dispatched loop over one row.
struct Rows<'a, T, U, R> {
    out: &'a mut [U],
    x: Src<'a, T>,
    r: &'a R,
}

impl<T: Element, U: Element, R: RowFn<T, U>> Kernel for Rows<'_, T, U, R> {
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[T::DTYPE, U::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        rows::<FMA, T, U, R>(self.out, self.x, self.r)
    }
}

#[inline(always)]
fn rows<const FMA: bool, T: Element, U: Element, R: RowFn<T, U>>(out: &mut [U], x: Src<T>, r: &R) {
    if x.step == 1 {
        r.row::<FMA>(run(x.data, x.off, out.len()), out);
    } else {
        for (i, o) in out.iter_mut().enumerate() {
            *o = r.elem::<FMA>(x.at(i));
        }
    }
}

/// `out[i] = f(x[i])`, into a fresh contiguous tensor.
pub(crate) fn map1<T: Element, U: Element>(x: &Value, f: impl ElemFn<T, U>) -> Tensor {
    map1_rows(x, PerElem(f))
}

/// An `ElemFn` as a `RowFn`: a run is a loop over its elements.
struct PerElem<F>(F);

impl<T: Element, U: Element, F: ElemFn<T, U>> RowFn<T, U> for PerElem<F> {
    #[inline(always)]
    fn row<const FMA: bool>(&self, xs: &[T], out: &mut [U]) {
        for (o, &v) in out.iter_mut().zip(xs) {
            *o = self.0.call::<FMA>(v);
        }
    }
    #[inline(always)]
    fn elem<const FMA: bool>(&self, x: T) -> U {
        self.0.call::<FMA>(x)
    }
}

/// `map1` for math written a run at a time (`RowFn`): `row` on the
/// contiguous chunks and on the rows of a strided view that steps by one,
/// `elem` on the elements of any other view.
pub(crate) fn map1_rows<T: Element, U: Element>(x: &Value, r: impl RowFn<T, U>) -> Tensor {
    let shape = &x.layout.shape;
    let n = x.layout.numel();
    let mut out = Storage::new(U::DTYPE, n);
    {
        let o = &mut out.as_mut_slice::<U>()[..n];
        let data = x.storage.read::<T>();
        let r = &r;
        if let Some(xs) = contiguous_slice(x, &data) {
            fill_chunks(o, move |start, out| {
                let x = Src::contiguous(xs, start);
                dispatch::run(Rows { out, x, r })
            });
        } else {
            let walk = Walk::new(shape, [&x.layout.strides], [x.layout.offset]);
            let [step] = walk.row_strides();
            let data: &[T] = &data;
            walk_rows(&walk, o, &|[off], out| {
                let x = Src { data, off, step };
                dispatch::run(Rows { out, x, r })
            });
        }
    }
    Tensor::from_storage(U::DTYPE, shape, out)
}

/// `out[i] = f(a[i], b[i])` for two values of one shape.
pub(crate) fn map2<A: Element, B: Element, U: Element>(
    a: &Value,
    b: &Value,
    f: impl Fn(A, B) -> U + Sync + Send,
) -> Tensor {
    let shape = &a.layout.shape;
    let n = a.layout.numel();
    let mut out = Storage::new(U::DTYPE, n);
    {
        let o = &mut out.as_mut_slice::<U>()[..n];
        let da = a.storage.read::<A>();
        let db = b.storage.read::<B>();
        let f = &f;
        let contiguous = match (contiguous_slice(a, &da), contiguous_slice(b, &db)) {
            (Some(xa), Some(xb)) => Some((Src::contiguous(xa, 0), Src::contiguous(xb, 0))),
            (Some(xa), None) if is_broadcast_scalar(b) => {
                Some((Src::contiguous(xa, 0), Src::scalar(b, &db)))
            }
            (None, Some(xb)) if is_broadcast_scalar(a) => {
                Some((Src::scalar(a, &da), Src::contiguous(xb, 0)))
            }
            _ => None,
        };
        if let Some((sa, sb)) = contiguous {
            fill_chunks(o, move |start, out| {
                let a = Src {
                    off: sa.off + sa.step * start as isize,
                    ..sa
                };
                let b = Src {
                    off: sb.off + sb.step * start as isize,
                    ..sb
                };
                dispatch::run(Row2 { out, a, b, f })
            });
        } else {
            let walk = Walk::new(
                shape,
                [&a.layout.strides, &b.layout.strides],
                [a.layout.offset, b.layout.offset],
            );
            let [sa, sb] = walk.row_strides();
            let (da, db): (&[A], &[B]) = (&da, &db);
            walk_rows(&walk, o, &|[oa, ob], out| {
                let a = Src {
                    data: da,
                    off: oa,
                    step: sa,
                };
                let b = Src {
                    data: db,
                    off: ob,
                    step: sb,
                };
                dispatch::run(Row2 { out, a, b, f })
            });
        }
    }
    Tensor::from_storage(U::DTYPE, shape, out)
}

/// `out[i] = f(a[i], b[i], c[i])` for three values of one shape.
pub(crate) fn map3<A: Element, B: Element, C: Element, U: Element>(
    a: &Value,
    b: &Value,
    c: &Value,
    f: impl Fn(A, B, C) -> U + Sync + Send,
) -> Tensor {
    let shape = &a.layout.shape;
    let n = a.layout.numel();
    let mut out = Storage::new(U::DTYPE, n);
    {
        let o = &mut out.as_mut_slice::<U>()[..n];
        let (da, db, dc) = (
            a.storage.read::<A>(),
            b.storage.read::<B>(),
            c.storage.read::<C>(),
        );
        let walk = Walk::new(
            shape,
            [&a.layout.strides, &b.layout.strides, &c.layout.strides],
            [a.layout.offset, b.layout.offset, c.layout.offset],
        );
        let [sa, sb, sc] = walk.row_strides();
        let (da, db, dc): (&[A], &[B], &[C]) = (&da, &db, &dc);
        let f = &f;
        walk_rows(&walk, o, &|[oa, ob, oc], out| {
            let a = Src {
                data: da,
                off: oa,
                step: sa,
            };
            let b = Src {
                data: db,
                off: ob,
                step: sb,
            };
            let c = Src {
                data: dc,
                off: oc,
                step: sc,
            };
            dispatch::run(Row3 { out, a, b, c, f })
        });
    }
    Tensor::from_storage(U::DTYPE, shape, out)
}

/// Float math shared by f16, bf16, f32 and f64 (`num_traits::Float` plus erf).
/// The `_fast` functions take the dispatch level's `FMA` (see `ElemFn`).
pub(crate) trait FloatElem: Element + Float {
    /// f32: the vectorizable rational; the others the `libm` crate's.
    fn erf_fast<const FMA: bool>(self) -> Self;
    fn atan_fast<const FMA: bool>(self) -> Self {
        self.atan()
    }
    fn exp_fast<const FMA: bool>(self) -> Self {
        self.exp()
    }
    fn tanh_fast<const FMA: bool>(self) -> Self {
        self.tanh()
    }
    fn ln_fast<const FMA: bool>(self) -> Self {
        self.ln()
    }
    fn ln_1p_fast<const FMA: bool>(self) -> Self {
        self.ln_1p()
    }
    /// `sin` over a whole value (f32: the vectorizable polynomial).
    fn sin_kernel(x: &Value) -> Tensor {
        map1(x, move |v: Self| v.sin())
    }
    /// `cos` over a whole value (f32: the vectorizable polynomial).
    fn cos_kernel(x: &Value) -> Tensor {
        map1(x, move |v: Self| v.cos())
    }
}
impl FloatElem for f32 {
    /// Branch-free polynomial exp (≤ 2 ulp) that vectorizes, unlike libm's.
    #[inline(always)]
    fn exp_fast<const FMA: bool>(self) -> Self {
        super::math::exp_f32::<FMA>(self)
    }
    /// XLA's rational tanh (≤ 7 ulp), vectorizable.
    #[inline(always)]
    fn tanh_fast<const FMA: bool>(self) -> Self {
        super::math::tanh_f32::<FMA>(self)
    }
    /// XLA's rational erf, vectorizable.
    #[inline(always)]
    fn erf_fast<const FMA: bool>(self) -> Self {
        super::math::erf_f32::<FMA>(self)
    }
    /// Cephes' atanf, branch-free, vectorizable.
    #[inline(always)]
    fn atan_fast<const FMA: bool>(self) -> Self {
        super::math::atan_f32::<FMA>(self)
    }
    /// Cephes' logf polynomial (≤ 1 ulp), vectorizable.
    #[inline(always)]
    fn ln_fast<const FMA: bool>(self) -> Self {
        super::math::ln_f32::<FMA>(self)
    }
    /// `ln(u)·x/(u − 1)` over the polynomial log (≤ 3 ulp), vectorizable.
    #[inline(always)]
    fn ln_1p_fast<const FMA: bool>(self) -> Self {
        super::math::ln_1p_f32::<FMA>(self)
    }
    /// Cody–Waite reduction and minimax polynomials (≤ 2.5 ulp) up to
    /// |x| = 32768, libm's sinf beyond; vectorizable.
    fn sin_kernel(x: &Value) -> Tensor {
        map1_rows(x, SinF32)
    }
    fn cos_kernel(x: &Value) -> Tensor {
        map1_rows(x, CosF32)
    }
}

struct SinF32;
impl RowFn<f32, f32> for SinF32 {
    #[inline(always)]
    fn row<const FMA: bool>(&self, xs: &[f32], out: &mut [f32]) {
        super::math::sin_f32_slice::<FMA>(xs, out)
    }
    #[inline(always)]
    fn elem<const FMA: bool>(&self, x: f32) -> f32 {
        super::math::sin_f32::<FMA>(x)
    }
}

struct CosF32;
impl RowFn<f32, f32> for CosF32 {
    #[inline(always)]
    fn row<const FMA: bool>(&self, xs: &[f32], out: &mut [f32]) {
        super::math::cos_f32_slice::<FMA>(xs, out)
    }
    #[inline(always)]
    fn elem<const FMA: bool>(&self, x: f32) -> f32 {
        super::math::cos_f32::<FMA>(x)
    }
}

/// The unary ops whose f32 bits depend on the level's `FMA`: one `ElemFn`
/// per `FloatElem` method that takes it.
macro_rules! level_fns {
    ($($name:ident => $method:ident),* $(,)?) => {$(
        struct $name;
        impl<T: FloatElem> ElemFn<T, T> for $name {
            #[inline(always)]
            fn call<const FMA: bool>(&self, v: T) -> T {
                v.$method::<FMA>()
            }
        }
    )*};
}

level_fns! {
    Exp => exp_fast,
    Ln => ln_fast,
    Ln1p => ln_1p_fast,
    Tanh => tanh_fast,
    Erf => erf_fast,
    Atan => atan_fast,
}

/// 1 / (1 + e^-x), written with e = e^-|x| (which never overflows) so that
/// the negative tail keeps its tiny and subnormal results: x >= 0:
/// 1 / (1 + e); x < 0: e / (1 + e). NaN stays NaN.
struct Sigmoid;
impl<T: FloatElem> ElemFn<T, T> for Sigmoid {
    #[inline(always)]
    fn call<const FMA: bool>(&self, v: T) -> T {
        let e = (-v.abs()).exp_fast::<FMA>();
        let s = T::one() / (T::one() + e);
        if v < T::zero() {
            e * s
        } else {
            s
        }
    }
}
impl FloatElem for f64 {
    fn erf_fast<const FMA: bool>(self) -> Self {
        libm::erf(self)
    }
}
impl FloatElem for f16 {
    fn erf_fast<const FMA: bool>(self) -> Self {
        f16::from_f32(libm::erff(self.to_f32()))
    }
}
impl FloatElem for bf16 {
    fn erf_fast<const FMA: bool>(self) -> Self {
        bf16::from_f32(libm::erff(self.to_f32()))
    }
}

fn unary_float<T: FloatElem>(op: UnaryOp, x: &Value) -> Tensor {
    let one = T::one();
    match op {
        UnaryOp::Neg => map1(x, move |v: T| -v),
        UnaryOp::Abs => map1(x, move |v: T| v.abs()),
        UnaryOp::Sign => map1(x, move |v: T| {
            if v > T::zero() {
                one
            } else if v < T::zero() {
                -one
            } else {
                v // keeps 0, -0 and NaN
            }
        }),
        UnaryOp::Sqrt => map1(x, move |v: T| v.sqrt()),
        UnaryOp::Rsqrt => map1(x, move |v: T| one / v.sqrt()),
        UnaryOp::Recip => map1(x, move |v: T| one / v),
        UnaryOp::Exp => map1::<T, T>(x, Exp),
        UnaryOp::Exp2 => map1(x, move |v: T| v.exp2()),
        UnaryOp::Log => map1::<T, T>(x, Ln),
        UnaryOp::Log2 => map1(x, move |v: T| v.log2()),
        UnaryOp::Log1p => map1::<T, T>(x, Ln1p),
        UnaryOp::Expm1 => map1(x, move |v: T| v.exp_m1()),
        UnaryOp::Sin => T::sin_kernel(x),
        UnaryOp::Cos => T::cos_kernel(x),
        UnaryOp::Tan => map1(x, move |v: T| v.tan()),
        UnaryOp::Asin => map1(x, move |v: T| v.asin()),
        UnaryOp::Acos => map1(x, move |v: T| v.acos()),
        UnaryOp::Atan => map1::<T, T>(x, Atan),
        UnaryOp::Sinh => map1(x, move |v: T| v.sinh()),
        UnaryOp::Cosh => map1(x, move |v: T| v.cosh()),
        UnaryOp::Tanh => map1::<T, T>(x, Tanh),
        UnaryOp::Asinh => map1(x, move |v: T| v.asinh()),
        UnaryOp::Acosh => map1(x, move |v: T| v.acosh()),
        UnaryOp::Atanh => map1(x, move |v: T| v.atanh()),
        UnaryOp::Erf => map1::<T, T>(x, Erf),
        UnaryOp::Sigmoid => map1::<T, T>(x, Sigmoid),
        UnaryOp::Floor => map1(x, move |v: T| v.floor()),
        UnaryOp::Ceil => map1(x, move |v: T| v.ceil()),
        UnaryOp::Round => map1(x, move |v: T| {
            // Half to even: round half away, then fix exact ties to the even neighbour.
            let r = v.round();
            if (v - v.trunc()).abs() == T::from(0.5).unwrap() {
                (v / T::from(2.0).unwrap()).round() * T::from(2.0).unwrap()
            } else {
                r
            }
        }),
        UnaryOp::Trunc => map1(x, move |v: T| v.trunc()),
        UnaryOp::Not | UnaryOp::Real | UnaryOp::Imag | UnaryOp::Conj | UnaryOp::Angle => {
            unreachable!("{op:?} on a real float tensor is rejected by the op")
        }
    }
}

/// Integer arithmetic with the project's conventions (wrapping, x/0 = 0).
pub(crate) trait IntElem: Element + Ord {
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    fn sign(self) -> Self;
    fn not(self) -> Self;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn div0(self, o: Self) -> Self;
    fn rem0(self, o: Self) -> Self;
    fn ipow(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn shl(self, o: Self) -> Self;
    fn shr(self, o: Self) -> Self;
}

macro_rules! int_elem {
    ($signed:expr; $($t:ty),*) => {$(
        impl IntElem for $t {
            #[inline(always)] fn wneg(self) -> Self { self.wrapping_neg() }
            #[inline(always)] fn wabs(self) -> Self { if $signed && self < (0 as $t) { self.wrapping_neg() } else { self } }
            #[inline(always)] fn sign(self) -> Self { if self > (0 as $t) { 1 as $t } else if self == (0 as $t) { 0 as $t } else { (0 as $t).wrapping_sub(1) } }
            #[inline(always)] fn not(self) -> Self { !self }
            #[inline(always)] fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn div0(self, o: Self) -> Self { if o == (0 as $t) { 0 as $t } else { self.wrapping_div(o) } }
            #[inline(always)] fn rem0(self, o: Self) -> Self { if o == (0 as $t) { 0 as $t } else { self.wrapping_rem(o) } }
            #[inline(always)] fn ipow(self, o: Self) -> Self {
                if $signed && o < (0 as $t) {
                    // Only 1 and -1 have integer reciprocals.
                    if self == (1 as $t) { 1 as $t }
                    else if $signed && self == (0 as $t).wrapping_sub(1) { if o.wrapping_rem(2 as $t) == (0 as $t) { 1 as $t } else { self } }
                    else { 0 as $t }
                } else {
                    // Square and multiply over the whole exponent (wrapping_pow
                    // takes a u32, and clamping the exponent changes the result).
                    let mut e = o as u128;
                    let mut b = self;
                    let mut r = 1 as $t;
                    while e > 0 {
                        if e & 1 == 1 {
                            r = r.wrapping_mul(b);
                        }
                        b = b.wrapping_mul(b);
                        e >>= 1;
                    }
                    r
                }
            }
            #[inline(always)] fn and(self, o: Self) -> Self { self & o }
            #[inline(always)] fn or(self, o: Self) -> Self { self | o }
            #[inline(always)] fn xor(self, o: Self) -> Self { self ^ o }
            #[inline(always)] fn shl(self, o: Self) -> Self {
                if ($signed && o < (0 as $t)) || (o as u128) >= <$t>::BITS as u128 { 0 as $t } else { self << (o as u32) }
            }
            #[inline(always)] fn shr(self, o: Self) -> Self {
                if ($signed && o < (0 as $t)) || (o as u128) >= <$t>::BITS as u128 {
                    if self < (0 as $t) { (0 as $t).wrapping_sub(1) } else { 0 as $t }
                } else { self >> (o as u32) }
            }
        }
    )*};
}
int_elem!(true; i8, i16, i32, i64);
int_elem!(false; u8, u16, u32, u64);

/// 4-bit integers: the operation on the byte (the value itself), then its
/// low 4 bits kept (wrapping). Results mod 16 depend only on the operands
/// mod 16 for add, sub, mul and pow, and the byte operations cannot overflow
/// on values in -8..=15 except where they wrap mod 256, a multiple of 16.
macro_rules! nibble_elem {
    ($t:ident, $b:ty, $signed:expr) => {
        impl IntElem for $t {
            nibble_elem!(@unary $t; wneg, wabs, not);
            nibble_elem!(@binary $t; wadd, wsub, wmul, div0, rem0, ipow, and, or, xor);
            #[inline(always)]
            fn sign(self) -> Self {
                $t(self.0.sign())
            }
            #[inline(always)]
            fn shl(self, o: Self) -> Self {
                if ($signed && o.0 < (0 as $b)) || o.0 >= (4 as $b) {
                    $t(0)
                } else {
                    $t::wrapping(self.0 << o.0)
                }
            }
            #[inline(always)]
            fn shr(self, o: Self) -> Self {
                if ($signed && o.0 < (0 as $b)) || o.0 >= (4 as $b) {
                    if self.0 < (0 as $b) {
                        $t(-1i8 as $b)
                    } else {
                        $t(0)
                    }
                } else {
                    $t(self.0 >> o.0)
                }
            }
        }
    };
    // The byte's operation, then its low 4 bits (a no-op for and/or/xor/not
    // of normalized values, kept for uniformity).
    (@unary $t:ident; $($f:ident),*) => {$(
        #[inline(always)]
        fn $f(self) -> Self {
            $t::wrapping(IntElem::$f(self.0))
        }
    )*};
    (@binary $t:ident; $($f:ident),*) => {$(
        #[inline(always)]
        fn $f(self, o: Self) -> Self {
            $t::wrapping(IntElem::$f(self.0, o.0))
        }
    )*};
}
nibble_elem!(I4, i8, true);
nibble_elem!(U4, u8, false);

fn unary_int<T: IntElem>(op: UnaryOp, x: &Value) -> Tensor {
    match op {
        UnaryOp::Neg => map1(x, |v: T| v.wneg()),
        UnaryOp::Abs => map1(x, |v: T| v.wabs()),
        UnaryOp::Sign => map1(x, |v: T| v.sign()),
        UnaryOp::Not => map1(x, |v: T| v.not()),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => map1(x, |v: T| v),
        _ => unreachable!("{op:?} on an integer tensor is rejected by the op"),
    }
}

/// Complex math through `num_complex` (eager only: jit refuses complex).
fn unary_complex<T>(op: UnaryOp, x: &Value) -> Tensor
where
    T: num_traits::Float + Element,
    Complex<T>: Element,
{
    let one = Complex::new(T::one(), T::zero());
    match op {
        UnaryOp::Neg => map1(x, |v: Complex<T>| -v),
        UnaryOp::Abs => map1(x, |v: Complex<T>| v.norm()),
        UnaryOp::Sqrt => map1(x, |v: Complex<T>| v.sqrt()),
        UnaryOp::Rsqrt => map1(x, move |v: Complex<T>| one / v.sqrt()),
        UnaryOp::Recip => map1(x, move |v: Complex<T>| one / v),
        UnaryOp::Exp => map1(x, |v: Complex<T>| v.exp()),
        UnaryOp::Log => map1(x, |v: Complex<T>| v.ln()),
        UnaryOp::Sin => map1(x, |v: Complex<T>| v.sin()),
        UnaryOp::Cos => map1(x, |v: Complex<T>| v.cos()),
        UnaryOp::Tan => map1(x, |v: Complex<T>| v.tan()),
        UnaryOp::Sinh => map1(x, |v: Complex<T>| v.sinh()),
        UnaryOp::Cosh => map1(x, |v: Complex<T>| v.cosh()),
        UnaryOp::Tanh => map1(x, |v: Complex<T>| v.tanh()),
        UnaryOp::Real => map1(x, |v: Complex<T>| v.re),
        UnaryOp::Imag => map1(x, |v: Complex<T>| v.im),
        UnaryOp::Conj => map1(x, |v: Complex<T>| v.conj()),
        UnaryOp::Angle => map1(x, |v: Complex<T>| v.arg()),
        _ => unreachable!("{op:?} on a complex tensor is rejected by the op"),
    }
}

pub(crate) fn unary(op: UnaryOp, x: &Value) -> Tensor {
    match x.dtype {
        DType::C64 => unary_complex::<f32>(op, x),
        DType::C128 => unary_complex::<f64>(op, x),
        DType::I4 => unary_int::<I4>(op, x),
        DType::U4 => unary_int::<U4>(op, x),
        DType::F16 => unary_float::<f16>(op, x),
        DType::BF16 => unary_float::<bf16>(op, x),
        DType::F32 => unary_float::<f32>(op, x),
        DType::F64 => unary_float::<f64>(op, x),
        DType::Bool => match op {
            UnaryOp::Not => map1(x, |v: bool| !v),
            _ => map1(x, |v: bool| v),
        },
        DType::U8 => unary_int::<u8>(op, x),
        DType::U16 => unary_int::<u16>(op, x),
        DType::U32 => unary_int::<u32>(op, x),
        DType::U64 => unary_int::<u64>(op, x),
        DType::I8 => unary_int::<i8>(op, x),
        DType::I16 => unary_int::<i16>(op, x),
        DType::I32 => unary_int::<i32>(op, x),
        DType::I64 => unary_int::<i64>(op, x),
    }
}

fn binary_float<T: FloatElem>(op: BinaryOp, a: &Value, b: &Value) -> Tensor {
    match op {
        BinaryOp::Add => map2(a, b, |x: T, y: T| x + y),
        BinaryOp::Sub => map2(a, b, |x: T, y: T| x - y),
        BinaryOp::Mul => map2(a, b, |x: T, y: T| x * y),
        BinaryOp::Div => map2(a, b, |x: T, y: T| x / y),
        BinaryOp::Rem => map2(a, b, |x: T, y: T| x % y),
        BinaryOp::Pow => map2(a, b, |x: T, y: T| x.powf(y)),
        BinaryOp::Max => map2(a, b, |x: T, y: T| {
            if x.is_nan() || x > y {
                x
            } else if y.is_nan() || y > x {
                y
            } else if x.is_sign_positive() {
                x
            } else {
                y
            }
        }),
        BinaryOp::Min => map2(a, b, |x: T, y: T| {
            if x.is_nan() || x < y {
                x
            } else if y.is_nan() || y < x {
                y
            } else if x.is_sign_negative() {
                x
            } else {
                y
            }
        }),
        BinaryOp::Atan2 => map2(a, b, |x: T, y: T| x.atan2(y)),
        BinaryOp::Complex => unreachable!("complex is dispatched by `binary`"),
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Shl | BinaryOp::Shr => {
            unreachable!("{op:?} on a float tensor is rejected by the op")
        }
    }
}

fn binary_complex<T>(op: BinaryOp, a: &Value, b: &Value) -> Tensor
where
    T: num_traits::Float + Element,
    Complex<T>: Element,
{
    match op {
        BinaryOp::Add => map2(a, b, |x: Complex<T>, y: Complex<T>| x + y),
        BinaryOp::Sub => map2(a, b, |x: Complex<T>, y: Complex<T>| x - y),
        BinaryOp::Mul => map2(a, b, |x: Complex<T>, y: Complex<T>| x * y),
        BinaryOp::Div => map2(a, b, |x: Complex<T>, y: Complex<T>| x / y),
        BinaryOp::Pow => map2(a, b, |x: Complex<T>, y: Complex<T>| x.powc(y)),
        _ => unreachable!("{op:?} on a complex tensor is rejected by the op"),
    }
}

fn binary_int<T: IntElem>(op: BinaryOp, a: &Value, b: &Value) -> Tensor {
    match op {
        BinaryOp::Add => map2(a, b, |x: T, y: T| x.wadd(y)),
        BinaryOp::Sub => map2(a, b, |x: T, y: T| x.wsub(y)),
        BinaryOp::Mul => map2(a, b, |x: T, y: T| x.wmul(y)),
        BinaryOp::Div => map2(a, b, |x: T, y: T| x.div0(y)),
        BinaryOp::Rem => map2(a, b, |x: T, y: T| x.rem0(y)),
        BinaryOp::Pow => map2(a, b, |x: T, y: T| x.ipow(y)),
        BinaryOp::Max => map2(a, b, |x: T, y: T| x.max(y)),
        BinaryOp::Min => map2(a, b, |x: T, y: T| x.min(y)),
        BinaryOp::And => map2(a, b, |x: T, y: T| x.and(y)),
        BinaryOp::Or => map2(a, b, |x: T, y: T| x.or(y)),
        BinaryOp::Xor => map2(a, b, |x: T, y: T| x.xor(y)),
        BinaryOp::Shl => map2(a, b, |x: T, y: T| x.shl(y)),
        BinaryOp::Shr => map2(a, b, |x: T, y: T| x.shr(y)),
        BinaryOp::Atan2 | BinaryOp::Complex => {
            unreachable!("{op:?} on an integer tensor is rejected by the op")
        }
    }
}

fn binary_bool(op: BinaryOp, a: &Value, b: &Value) -> Tensor {
    match op {
        BinaryOp::And | BinaryOp::Min | BinaryOp::Mul => map2(a, b, |x: bool, y: bool| x & y),
        BinaryOp::Or | BinaryOp::Max | BinaryOp::Add => map2(a, b, |x: bool, y: bool| x | y),
        BinaryOp::Xor | BinaryOp::Sub => map2(a, b, |x: bool, y: bool| x ^ y),
        _ => unreachable!("{op:?} on a bool tensor is rejected by the op"),
    }
}

pub(crate) fn binary(op: BinaryOp, a: &Value, b: &Value) -> Tensor {
    if op == BinaryOp::Complex {
        return match a.dtype {
            DType::F32 => map2(a, b, |x: f32, y: f32| Complex::new(x, y)),
            DType::F64 => map2(a, b, |x: f64, y: f64| Complex::new(x, y)),
            d => unreachable!("complex of {d} is rejected by the op"),
        };
    }
    match a.dtype {
        DType::C64 => binary_complex::<f32>(op, a, b),
        DType::C128 => binary_complex::<f64>(op, a, b),
        DType::I4 => binary_int::<I4>(op, a, b),
        DType::U4 => binary_int::<U4>(op, a, b),
        DType::F16 => binary_float::<f16>(op, a, b),
        DType::BF16 => binary_float::<bf16>(op, a, b),
        DType::F32 => binary_float::<f32>(op, a, b),
        DType::F64 => binary_float::<f64>(op, a, b),
        DType::Bool => binary_bool(op, a, b),
        DType::U8 => binary_int::<u8>(op, a, b),
        DType::U16 => binary_int::<u16>(op, a, b),
        DType::U32 => binary_int::<u32>(op, a, b),
        DType::U64 => binary_int::<u64>(op, a, b),
        DType::I8 => binary_int::<i8>(op, a, b),
        DType::I16 => binary_int::<i16>(op, a, b),
        DType::I32 => binary_int::<i32>(op, a, b),
        DType::I64 => binary_int::<i64>(op, a, b),
    }
}

fn compare_typed<T: Element + PartialOrd>(op: CmpOp, a: &Value, b: &Value) -> Tensor {
    match op {
        CmpOp::Lt => map2(a, b, |x: T, y: T| x < y),
        CmpOp::Le => map2(a, b, |x: T, y: T| x <= y),
        CmpOp::Gt => map2(a, b, |x: T, y: T| x > y),
        CmpOp::Ge => map2(a, b, |x: T, y: T| x >= y),
        CmpOp::Eq => map2(a, b, |x: T, y: T| x == y),
        CmpOp::Ne => map2(a, b, |x: T, y: T| x != y),
    }
}

/// Complex numbers compare for equality only.
fn equality<T: Element>(op: CmpOp, a: &Value, b: &Value) -> Tensor {
    match op {
        CmpOp::Eq => map2(a, b, |x: T, y: T| x == y),
        CmpOp::Ne => map2(a, b, |x: T, y: T| x != y),
        _ => unreachable!("{op:?} on a complex tensor is rejected by the op"),
    }
}

pub(crate) fn compare(op: CmpOp, a: &Value, b: &Value) -> Tensor {
    match a.dtype {
        DType::C64 => equality::<Complex<f32>>(op, a, b),
        DType::C128 => equality::<Complex<f64>>(op, a, b),
        DType::I4 => compare_typed::<I4>(op, a, b),
        DType::U4 => compare_typed::<U4>(op, a, b),
        d => crate::with_dtype!(d, T => compare_typed::<T>(op, a, b)),
    }
}

pub(crate) fn where_(c: &Value, a: &Value, b: &Value) -> Tensor {
    crate::with_any_dtype!(a.dtype, T => map3(c, a, b, |c: bool, x: T, y: T| if c { x } else { y }))
}

/// A plain loop per (source, destination) pair: there are 289 of them, so
/// the heavier `map1` machinery (strided walk, pool) is kept out of it.
fn cast_slice<S: Element, U: Element>(src: &[S], shape: &[usize]) -> Tensor {
    let mut out = Storage::new(U::DTYPE, src.len());
    dispatch::run(Cast {
        src,
        out: out.as_mut_slice::<U>(),
    });
    Tensor::from_storage(U::DTYPE, shape, out)
}

/// `cast_slice`'s dispatched loop.
struct Cast<'a, S, U> {
    src: &'a [S],
    out: &'a mut [U],
}

impl<S: Element, U: Element> Kernel for Cast<'_, S, U> {
    type Output = ();
    const PER_LEVEL: bool = dispatch::gains_from_levels(&[S::DTYPE, U::DTYPE]);
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        cast_loop(self.src, self.out)
    }
}

#[inline(always)]
fn cast_loop<S: Element, U: Element>(src: &[S], out: &mut [U]) {
    for (o, &v) in out.iter_mut().zip(src) {
        *o = v.cast::<U>();
    }
}

pub(crate) fn cast(x: &Value, to: DType) -> Tensor {
    let contiguous;
    let x = if x.layout.is_contiguous() {
        x
    } else {
        contiguous = super::movement::copy(x);
        contiguous.value()
    };
    let n = x.layout.numel();
    // The offset of an empty view may lie past the end of its storage.
    let off = if n == 0 { 0 } else { x.layout.offset };
    crate::with_any_dtype!(x.dtype, S => {
        let data = x.storage.read::<S>();
        crate::with_any_dtype!(to, U => cast_slice::<S, U>(&data[off..off + n], &x.layout.shape))
    })
}
