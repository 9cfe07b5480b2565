//! Gather (take_along_axis) and its transpose, scatter-add.
//!
//! Both walk the index tensor's shape in row-major order together with the
//! data operand, whose stride along `axis` is replaced by 0: the index read
//! at each position then picks the element along `axis`. Indices may be
//! negative (counting from the end, as numpy); anything outside `[-n, n)`
//! panics naming the operation, the index and the axis size, since only the
//! kernel sees the data.

use super::pool::{self, PAR_MIN};
use super::strided::Walk;
use crate::dtype::{DType, Element};
use crate::shape::contiguous_strides;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};

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
    if v.layout.numel() == 0 {
        return None;
    }
    let dims: Vec<(usize, isize)> = v
        .layout
        .shape
        .iter()
        .zip(&v.layout.strides)
        .filter(|&(&n, &s)| n != 1 && s != 0)
        .map(|(&n, &s)| (n, s))
        .collect();
    fn walk<I: Element>(
        data: &[I],
        mut addr: isize,
        dims: &[(usize, isize)],
        len: i64,
    ) -> Option<i64> {
        // Contiguous indices (the common case): the bounds of the run, in
        // a loop that vectorizes; the walk below only finds the first
        // failure.
        if let [(n, 1)] = dims {
            let run = &data[addr as usize..addr as usize + n];
            let (lo, hi) = run.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &i| {
                let i = i.to_i128() as i64;
                (lo.min(i), hi.max(i))
            });
            if lo >= -len && hi < len {
                return None;
            }
        }
        let mut at = vec![0usize; dims.len()];
        loop {
            let i = data[addr as usize].to_i128() as i64;
            if i < -len || i >= len {
                return Some(i);
            }
            // Row-major odometer over `dims`.
            let mut d = dims.len();
            loop {
                if d == 0 {
                    return None;
                }
                d -= 1;
                at[d] += 1;
                addr += dims[d].1;
                if at[d] < dims[d].0 {
                    break;
                }
                addr -= dims[d].1 * dims[d].0 as isize;
                at[d] = 0;
            }
        }
    }
    let base = v.layout.offset as isize;
    match v.dtype {
        DType::I32 => walk(&v.storage.read::<i32>(), base, &dims, len as i64),
        DType::I64 => walk(&v.storage.read::<i64>(), base, &dims, len as i64),
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

/// `a + b` in `T`: float sums round once (exact in f64, then to `T`),
/// complex likewise per part, integers wrap, bools or.
#[inline(always)]
fn add<T: Element>(a: T, b: T) -> T {
    if T::DTYPE.is_complex() {
        T::from_c128(a.to_c128() + b.to_c128())
    } else if T::DTYPE.is_float() {
        T::from_f64(a.to_f64() + b.to_f64())
    } else {
        T::from_i128(a.to_i128() + b.to_i128())
    }
}

fn scatter_add_typed<T: Element, I: Element>(
    x: &Value,
    idx: &Value,
    updates: &Value,
    axis: usize,
) -> Tensor {
    let shape = &x.layout.shape;
    let total = x.layout.numel();
    let n = shape[axis];
    let ostrides = contiguous_strides(shape);
    let os = ostrides[axis];
    // A fresh copy of `x`, then the updates added in row-major order of `idx`
    // (sequentially: repeated indices add into one element).
    let out = super::movement::copy(x);
    {
        let ov = out.value();
        // Nobody else holds this fresh buffer; the write guard is uncontended.
        let mut og = ov.storage.write::<T>();
        let o = &mut og[..total];
        let (id, ud) = (idx.storage.read::<I>(), updates.storage.read::<T>());
        let ostrides = strides_off_axis(&ostrides, axis);
        let walk = Walk::new(
            &idx.layout.shape,
            [&idx.layout.strides, &updates.layout.strides, &ostrides],
            [idx.layout.offset, updates.layout.offset, 0],
        );
        let len = walk.row_len() as isize;
        let [si, su, so] = walk.row_strides();
        walk.for_rows(0, walk.rows(), |_, [oi, ou, oo]| {
            for j in 0..len {
                let i = id[(oi + j * si) as usize].to_i128() as i64;
                let i = resolve("scatter_add", i, n, axis);
                let at = (oo + j * so + i * os) as usize;
                o[at] = add(o[at], ud[(ou + j * su) as usize]);
            }
        });
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
