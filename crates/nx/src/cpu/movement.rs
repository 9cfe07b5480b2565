//! Movement kernels. Reshape (where strides allow), broadcast, permute, slice
//! and flip are views: a new `Layout` over the same storage. Copy, pad and
//! concatenate write fresh buffers; assign writes in place.

use super::elementwise::map1;
use super::strided::Walk;
use crate::dtype::Element;
use crate::layout::Layout;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use std::sync::Arc;

fn view(x: &Value, layout: Layout) -> Tensor {
    Tensor::from_value(x.dtype, layout, Arc::clone(&x.storage))
}

/// A fresh contiguous copy.
pub(crate) fn copy(x: &Value) -> Tensor {
    crate::with_any_dtype!(x.dtype, T => map1(x, |v: T| v))
}

pub(crate) fn reshape(x: &Value, shape: &[usize]) -> Tensor {
    match x.layout.reshape(shape) {
        Some(layout) => view(x, layout),
        None => {
            let c = copy(x);
            let v = c.value();
            view(v, Layout::contiguous(shape))
        }
    }
}

pub(crate) fn broadcast(x: &Value, shape: &[usize]) -> Tensor {
    view(x, x.layout.broadcast(shape))
}

pub(crate) fn permute(x: &Value, perm: &[usize]) -> Tensor {
    view(x, x.layout.permute(perm))
}

pub(crate) fn slice(x: &Value, start: &[usize], end: &[usize], step: &[usize]) -> Tensor {
    view(x, x.layout.slice(start, end, step))
}

pub(crate) fn flip(x: &Value, axes: &[usize]) -> Tensor {
    view(x, x.layout.flip(axes))
}

/// Copies `src` (any layout) into `dst` (any layout) of the same shape, both
/// in storages the caller holds (`dst_data` is writable).
fn copy_into<T: Element>(dst_data: &mut [T], dst: &Layout, src_data: &[T], src: &Layout) {
    let walk = Walk::new(
        &dst.shape,
        [&dst.strides, &src.strides],
        [dst.offset, src.offset],
    );
    let len = walk.row_len();
    let [sd, ss] = walk.row_strides();
    walk.for_rows(0, walk.rows(), |_, [od, os]| {
        for i in 0..len as isize {
            dst_data[(od + i * sd) as usize] = src_data[(os + i * ss) as usize];
        }
    });
}

fn pad_typed<T: Element>(x: &Value, lo: &[usize], hi: &[usize], value: f64) -> Tensor {
    let shape: Vec<usize> = (0..lo.len())
        .map(|i| lo[i] + x.layout.shape[i] + hi[i])
        .collect();
    let out_layout = Layout::contiguous(&shape);
    let n = out_layout.numel();
    let mut out = Storage::new(T::DTYPE, n);
    {
        let o = out.as_mut_slice::<T>();
        o[..n].fill(T::from_f64(value));
        let inner = out_layout.slice(
            lo,
            &(0..lo.len())
                .map(|i| lo[i] + x.layout.shape[i])
                .collect::<Vec<_>>(),
            &vec![1; lo.len()],
        );
        copy_into(o, &inner, &x.storage.read::<T>(), &x.layout);
    }
    Tensor::from_storage(T::DTYPE, &shape, out)
}

pub(crate) fn pad(x: &Value, lo: &[usize], hi: &[usize], value: f64) -> Tensor {
    crate::with_any_dtype!(x.dtype, T => pad_typed::<T>(x, lo, hi, value))
}

fn concat_typed<T: Element>(xs: &[&Value], axis: usize) -> Tensor {
    let mut shape = xs[0].layout.shape.clone();
    shape[axis] = xs.iter().map(|x| x.layout.shape[axis]).sum();
    let out_layout = Layout::contiguous(&shape);
    let mut out = Storage::new(T::DTYPE, out_layout.numel());
    {
        let o = out.as_mut_slice::<T>();
        let mut at = 0;
        for x in xs {
            let k = x.layout.shape[axis];
            let mut start = vec![0; shape.len()];
            let mut end = shape.clone();
            start[axis] = at;
            end[axis] = at + k;
            let part = out_layout.slice(&start, &end, &vec![1; shape.len()]);
            copy_into(o, &part, &x.storage.read::<T>(), &x.layout);
            at += k;
        }
    }
    Tensor::from_storage(T::DTYPE, &shape, out)
}

pub(crate) fn concat(xs: &[&Value], axis: usize) -> Tensor {
    crate::with_any_dtype!(xs[0].dtype, T => concat_typed::<T>(xs, axis))
}

fn assign_typed<T: Element>(dst: &Value, src: &Value) {
    if Arc::ptr_eq(&dst.storage, &src.storage) {
        // Overlap (x.assign(&x.flip(..))): read the source out first.
        let tmp = copy(src);
        let tv = tmp.value();
        let s = tv.storage.read::<T>();
        copy_into(&mut dst.storage.write::<T>(), &dst.layout, &s, &tv.layout);
        return;
    }
    // Take the two locks in address order, so that `a.assign(&b)` and
    // `b.assign(&a)` on two threads cannot deadlock.
    if dst.storage.addr() < src.storage.addr() {
        let mut d = dst.storage.write::<T>();
        let s = src.storage.read::<T>();
        copy_into(&mut d, &dst.layout, &s, &src.layout);
    } else {
        let s = src.storage.read::<T>();
        let mut d = dst.storage.write::<T>();
        copy_into(&mut d, &dst.layout, &s, &src.layout);
    }
}

/// Writes `src` into `dst`'s storage through `dst`'s layout; returns `dst`.
pub(crate) fn assign(dst: &Tensor, src: &Value) -> Tensor {
    let d = dst.value();
    crate::with_any_dtype!(d.dtype, T => assign_typed::<T>(d, src));
    dst.clone()
}
