//! Gather (take_along_axis) and its transpose, scatter-add.
//!
//! Both walk the index tensor's shape in row-major order together with the
//! data operand, whose stride along `axis` is replaced by 0: the index read
//! at each position then picks the element along `axis`. Indices may be
//! negative (counting from the end, as numpy); anything outside `[-n, n)`
//! panics naming the operation, the index and the axis size, since only the
//! kernel sees the data.

use super::dot::OutPtr;
use super::pool::{self, PAR_CHUNK, PAR_MIN};
use super::strided::Walk;
use crate::dtype::{DType, Element};
use crate::shape::contiguous_strides;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use std::ops::Range;

/// `i` resolved against an axis of size `n`, or a panic naming `op`.
#[inline(always)]
fn resolve(op: &str, i: i64, n: usize, axis: usize) -> isize {
    let n = n as i64;
    if i < -n || i >= n {
        panic!("{op}: index {i} is out of bounds for axis {axis} of size {n}");
    }
    (if i < 0 { i + n } else { i }) as isize
}

/// The first element of the integer tensor `t` (I32 or I64) out of
/// `[-len, len)`, in row-major order; `None` when all are in range. Dims
/// along which `t`'s layout does not move (a broadcast) are visited once:
/// the first failure is still the one a walk over every element meets
/// first.
pub(crate) fn first_out_of_range(t: &Tensor, len: usize) -> Option<i64> {
    let v = t.value();
    match v.dtype {
        DType::I32 => first_out_of_bounds(&v.storage.read::<i32>(), v, len),
        DType::I64 => first_out_of_bounds(&v.storage.read::<i64>(), v, len),
        d => panic!("nx: indices must be I32 or I64, got {d}"),
    }
}

/// `x`'s strides with the one along `axis` set to 0.
fn strides_off_axis(strides: &[isize], axis: usize) -> Vec<isize> {
    let mut s = strides.to_vec();
    s[axis] = 0;
    s
}

fn gather_typed<T: Element, I: Element>(x: &Value, idx: &Value, axis: usize) -> Tensor {
    let shape = &idx.layout.shape;
    let total = idx.layout.numel();
    let n = x.layout.shape[axis];
    let xs = x.layout.strides[axis];
    let mut out = Storage::new(T::DTYPE, total);
    {
        let o = &mut out.as_mut_slice::<T>()[..total];
        let (xd, id) = (x.storage.read::<T>(), idx.storage.read::<I>());
        let xstrides = strides_off_axis(&x.layout.strides, axis);
        let walk = Walk::new(
            shape,
            [&idx.layout.strides, &xstrides],
            [idx.layout.offset, x.layout.offset],
        );
        let len = walk.row_len();
        let [si, sx] = walk.row_strides();
        let rows = |r0: usize, o: &mut [T]| {
            let r1 = r0 + o.len() / len.max(1);
            walk.for_rows(r0, r1, |r, [oi, ox]| {
                let o = &mut o[(r - r0) * len..(r - r0 + 1) * len];
                for (j, o) in o.iter_mut().enumerate() {
                    let j = j as isize;
                    let i = id[(oi + j * si) as usize].to_i128() as i64;
                    let i = resolve("gather", i, n, axis);
                    *o = xd[(ox + j * sx + i * xs) as usize];
                }
            });
        };
        if total >= PAR_MIN && len > 0 {
            // Whole rows per task, about PAR_MIN elements each.
            let per = PAR_MIN.div_ceil(len) * len;
            pool::chunks_mut(o, per, &|c, o| rows(c * per / len, o));
        } else if len > 0 {
            rows(0, o);
        }
    }
    Tensor::from_storage(T::DTYPE, shape, out)
}

/// `take_along_axis`: `out[p] = x[p with p[axis] = idx[p]]`; out has `idx`'s shape.
pub(crate) fn gather(x: &Value, idx: &Value, axis: usize) -> Tensor {
    match idx.dtype {
        DType::I32 => crate::with_any_dtype!(x.dtype, T => gather_typed::<T, i32>(x, idx, axis)),
        DType::I64 => crate::with_any_dtype!(x.dtype, T => gather_typed::<T, i64>(x, idx, axis)),
        d => unreachable!("gather: index dtype {d} is rejected by the op"),
    }
}

/// `a + b` in `T`: float sums round once (f32 and f64 add natively, the
/// same bits as adding exactly and rounding once; f16 and bf16 exactly in
/// f64, then to `T`), complex likewise per part, integers wrap, bools or.
#[inline(always)]
fn add<T: Element>(a: T, b: T) -> T {
    /// `v` as `B`, which is `A` (checked by the callers' dtype tests).
    #[inline(always)]
    fn same<A: Copy, B: Copy>(v: A) -> B {
        debug_assert_eq!(std::mem::size_of::<A>(), std::mem::size_of::<B>());
        // SAFETY: called only where `A` and `B` are one type (an Element's
        // DTYPE names its type: F32 is f32, F64 is f64).
        unsafe { std::mem::transmute_copy(&v) }
    }
    if T::DTYPE == DType::F32 {
        same::<f32, T>(same::<T, f32>(a) + same::<T, f32>(b))
    } else if T::DTYPE == DType::F64 {
        same::<f64, T>(same::<T, f64>(a) + same::<T, f64>(b))
    } else if T::DTYPE.is_complex() {
        T::from_c128(a.to_c128() + b.to_c128())
    } else if T::DTYPE.is_float() {
        T::from_f64(a.to_f64() + b.to_f64())
    } else {
        T::from_i128(a.to_i128() + b.to_i128())
    }
}

/// The first index of `idx` (row-major order) outside `[-n, n)`, or `None`.
/// Dims along which `idx` does not move (broadcasts) are visited once: the
/// first failure is the one a walk over every position meets first.
fn first_out_of_bounds<I: Element>(id: &[I], idx: &Value, n: usize) -> Option<i64> {
    let l = &idx.layout;
    if l.numel() == 0 {
        return None;
    }
    let (shape, strides): (Vec<usize>, Vec<isize>) = l
        .shape
        .iter()
        .zip(&l.strides)
        .filter(|&(_, &s)| s != 0)
        .map(|(&d, &s)| (d, s))
        .unzip();
    let walk = Walk::new(&shape, [&strides], [l.offset]);
    let (len, [s]) = (walk.row_len() as isize, walk.row_strides());
    let n = n as i64;
    // `i` outside `[-n, n)`, as one unsigned comparison.
    let out = |i: I| (i.to_i128() as i64).wrapping_add(n) as u64 >= 2 * n as u64;
    let mut bad = None;
    walk.for_rows(0, walk.rows(), |_, [o]| {
        if bad.is_some() {
            return;
        }
        // A branch-free pass over the row first (it vectorizes when the
        // row is contiguous), then the search only in a row that fails.
        let any = if s == 1 {
            let row = &id[o as usize..(o + len) as usize];
            row.iter().fold(false, |b, &i| b | out(i))
        } else {
            (0..len).fold(false, |b, j| b | out(id[(o + j * s) as usize]))
        };
        if any {
            bad = (0..len)
                .map(|j| id[(o + j * s) as usize])
                .find(|&i| out(i))
                .map(|i| i.to_i128() as i64);
        }
    });
    bad
}

/// Dims merged for the three operands of a scatter-add (indices, updates,
/// output), with a flat position's offsets.
struct Dims {
    shape: Vec<usize>,
    strides: [Vec<isize>; 3],
}

impl Dims {
    fn new(shape: &[usize], strides: [&[isize]; 3]) -> Dims {
        let m = crate::layout::merge_dims(shape, &strides);
        let mut st = m.strides.into_iter();
        Dims {
            shape: m.shape,
            strides: std::array::from_fn(|_| st.next().expect("three operands")),
        }
    }

    fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Calls `f(offsets)` for the flat positions `r` (row-major), each
    /// operand's offset added to `base`.
    fn for_range(&self, r: Range<usize>, base: [isize; 3], mut f: impl FnMut([isize; 3])) {
        let nd = self.shape.len();
        let mut at = vec![0usize; nd];
        let mut rem = r.start;
        for d in (0..nd).rev() {
            at[d] = rem % self.shape[d];
            rem /= self.shape[d];
        }
        let mut offs: [isize; 3] = std::array::from_fn(|k| {
            base[k]
                + (0..nd)
                    .map(|d| at[d] as isize * self.strides[k][d])
                    .sum::<isize>()
        });
        for _ in r {
            f(offs);
            for d in (0..nd).rev() {
                at[d] += 1;
                for (o, s) in offs.iter_mut().zip(&self.strides) {
                    *o += s[d];
                }
                if at[d] < self.shape[d] {
                    break;
                }
                for (o, s) in offs.iter_mut().zip(&self.strides) {
                    *o -= s[d] * self.shape[d] as isize;
                }
                at[d] = 0;
            }
        }
    }
}

/// One part of a scatter-add: the positions before the axis in `pre`, the
/// rows of the dims after it (all but the innermost) in `rows`, and the
/// innermost dim's `cols`. Parts never share a destination: they differ
/// off the scattered axis.
struct Part {
    pre: Range<usize>,
    rows: Range<usize>,
    cols: Range<usize>,
}

/// Adds the updates of `part` into `o` (the output, contiguous), walking
/// the axis in order for each destination. Indices are already checked.
///
/// SAFETY: `o` points to the output's elements, and no other part writes
/// a destination of this one (see `Part`).
unsafe fn scatter_part<T: Element, I: Element>(
    o: *mut T,
    id: &[I],
    ud: &[T],
    base: [isize; 3],
    (pre, k, sia, sua, n, os): (&Dims, usize, isize, isize, i64, isize),
    post: Option<(&Dims, usize, [isize; 3])>,
    part: &Part,
) {
    let at = |i: I| {
        let i = i.to_i128() as i64;
        (if i < 0 { i + n } else { i }) as isize * os
    };
    pre.for_range(part.pre.clone(), base, |[bi, bu, bo]| match post {
        // The axis is innermost: one element per index.
        None if sia == 1 && sua == 1 => {
            let (bi, bu) = (bi as usize, bu as usize);
            for (&i, &u) in id[bi..bi + k].iter().zip(&ud[bu..bu + k]) {
                let d = o.offset(bo + at(i));
                *d = add(*d, u);
            }
        }
        None => {
            for j in 0..k as isize {
                let d = o.offset(bo + at(id[(bi + j * sia) as usize]));
                *d = add(*d, ud[(bu + j * sua) as usize]);
            }
        }
        Some((rows, _, [qi, qu, qo])) => {
            let (c0, c1) = (part.cols.start as isize, part.cols.end as isize);
            for j in 0..k as isize {
                let (ji, ju) = (bi + j * sia, bu + j * sua);
                rows.for_range(part.rows.clone(), [ji, ju, bo], |[ri, ru, ro]| {
                    if qi == 0 {
                        // One index for the row (segment_sum, index_add).
                        let d = o.offset(ro + at(id[ri as usize]));
                        if qu == 1 && qo == 1 {
                            let dst =
                                std::slice::from_raw_parts_mut(d.offset(c0), (c1 - c0) as usize);
                            let src = &ud[(ru + c0) as usize..(ru + c1) as usize];
                            for (a, &b) in dst.iter_mut().zip(src) {
                                *a = add(*a, b);
                            }
                        } else {
                            for c in c0..c1 {
                                let d = d.offset(c * qo);
                                *d = add(*d, ud[(ru + c * qu) as usize]);
                            }
                        }
                    } else {
                        for c in c0..c1 {
                            let d = o.offset(ro + c * qo + at(id[(ri + c * qi) as usize]));
                            *d = add(*d, ud[(ru + c * qu) as usize]);
                        }
                    }
                });
            }
        }
    });
}

fn scatter_add_typed<T: Element, I: Element>(
    x: &Value,
    idx: &Value,
    updates: &Value,
    axis: usize,
) -> Tensor {
    let shape = &x.layout.shape;
    let n = shape[axis];
    let (id, ud) = (idx.storage.read::<I>(), updates.storage.read::<T>());
    // Every index is checked before any is used, so that the parts below
    // run without a failure path and the first bad index (in row-major
    // order) is the one named, however the work is split.
    if let Some(i) = first_out_of_bounds(&id, idx, n) {
        panic!("scatter_add: index {i} is out of bounds for axis {axis} of size {n}");
    }
    // A fresh copy of `x`, then the updates added: for each destination,
    // in row-major order of `idx` (that is, in order along `axis`).
    let out = super::movement::copy(x);
    let total = idx.layout.numel();
    if total == 0 {
        return out;
    }
    let ostrides = contiguous_strides(shape);
    let ishape = &idx.layout.shape;
    let (is, us) = (&idx.layout.strides, &updates.layout.strides);
    let pre = Dims::new(
        &ishape[..axis],
        [&is[..axis], &us[..axis], &ostrides[..axis]],
    );
    let post = Dims::new(
        &ishape[axis + 1..],
        [&is[axis + 1..], &us[axis + 1..], &ostrides[axis + 1..]],
    );
    let k = ishape[axis];
    let axis_consts = (&pre, k, is[axis], us[axis], n as i64, ostrides[axis]);
    // The dims after the axis: their rows (all but the innermost dim) and
    // the innermost dim, its length and strides.
    let post_rows;
    let post_split = if post.shape.is_empty() {
        None
    } else {
        let last = post.shape.len() - 1;
        post_rows = Dims {
            shape: post.shape[..last].to_vec(),
            strides: std::array::from_fn(|q| post.strides[q][..last].to_vec()),
        };
        Some((
            &post_rows,
            post.shape[last],
            std::array::from_fn(|q| post.strides[q][last]),
        ))
    };
    let (npre, nrows, ncols) = match post_split {
        None => (pre.numel(), 1, 1),
        Some((r, len, _)) => (pre.numel(), r.numel(), len),
    };
    let base = [
        idx.layout.offset as isize,
        updates.layout.offset as isize,
        0,
    ];
    let threads = pool::threads();
    // The parts: split along the dims before the axis when they are many,
    // else along the rows after it, else along the innermost columns (in
    // blocks of 16, a cache line of f32); never along the axis.
    let parts: Vec<Part> = if total < PAR_MIN || threads == 1 {
        vec![Part {
            pre: 0..npre,
            rows: 0..nrows,
            cols: 0..ncols,
        }]
    } else if npre >= threads {
        let per_pre = total / npre;
        let per = (PAR_CHUNK / per_pre.max(1)).clamp(1, npre.div_ceil(threads));
        (0..npre.div_ceil(per))
            .map(|p| Part {
                pre: p * per..((p + 1) * per).min(npre),
                rows: 0..nrows,
                cols: 0..ncols,
            })
            .collect()
    } else if nrows >= threads {
        let per = nrows.div_ceil(threads);
        (0..nrows.div_ceil(per))
            .map(|r| Part {
                pre: 0..npre,
                rows: r * per..((r + 1) * per).min(nrows),
                cols: 0..ncols,
            })
            .collect()
    } else {
        let per = ncols.div_ceil(threads).next_multiple_of(16);
        (0..ncols.div_ceil(per))
            .map(|c| Part {
                pre: 0..npre,
                rows: 0..nrows,
                cols: c * per..((c + 1) * per).min(ncols),
            })
            .collect()
    };
    {
        let ov = out.value();
        // Nobody else holds this fresh buffer; the write guard is uncontended.
        let mut og = ov.storage.write::<T>();
        let o = OutPtr(og.as_mut_ptr());
        let (id, ud) = (&id[..], &ud[..]);
        let run = |p: usize| {
            // SAFETY: `o` is the output's buffer, alive while the parts
            // run; parts write disjoint destinations (`Part`), and every
            // index was checked to lie in `[-n, n)` above.
            unsafe { scatter_part(o.get(), id, ud, base, axis_consts, post_split, &parts[p]) }
        };
        if parts.len() == 1 {
            run(0);
        } else {
            pool::for_each(parts.len(), &run);
        }
    }
    out
}

/// The transpose of `gather`: a copy of `x` with `out[p with p[axis] = idx[p]] += updates[p]`.
pub(crate) fn scatter_add(x: &Value, idx: &Value, updates: &Value, axis: usize) -> Tensor {
    match idx.dtype {
        DType::I32 => {
            crate::with_any_dtype!(x.dtype, T => scatter_add_typed::<T, i32>(x, idx, updates, axis))
        }
        DType::I64 => {
            crate::with_any_dtype!(x.dtype, T => scatter_add_typed::<T, i64>(x, idx, updates, axis))
        }
        d => unreachable!("scatter_add: index dtype {d} is rejected by the op"),
    }
}
