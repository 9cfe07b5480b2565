//! Kernels with no inputs: constant fills and iota.

use crate::dtype::{DType, Element};
use crate::layout::Layout;
use crate::storage::Storage;
use crate::tensor::Tensor;

fn full_typed<T: Element>(shape: &[usize], value: f64) -> Tensor {
    let n = Layout::contiguous(shape).numel();
    let mut s = Storage::new(T::DTYPE, n);
    s.as_mut_slice::<T>()[..n].fill(T::from_f64(value));
    Tensor::from_storage(T::DTYPE, shape, s)
}

pub(crate) fn full(shape: &[usize], dtype: DType, value: f64) -> Tensor {
    crate::with_any_dtype!(dtype, T => full_typed::<T>(shape, value))
}

fn iota_typed<T: Element>(shape: &[usize], axis: usize) -> Tensor {
    let n: usize = shape.iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let len = shape[axis];
    let mut s = Storage::new(T::DTYPE, n);
    if n > 0 {
        let out = &mut s.as_mut_slice::<T>()[..n];
        if inner == 1 {
            // `0, 1, ..., len - 1` repeated.
            for block in out.chunks_mut(len) {
                for (j, o) in block.iter_mut().enumerate() {
                    *o = T::from_i128(j as i128);
                }
            }
        } else {
            // Runs of `inner` equal values, `len` of them per outer index.
            for block in out.chunks_mut(len * inner) {
                for (j, run) in block.chunks_mut(inner).enumerate() {
                    run.fill(T::from_i128(j as i128));
                }
            }
        }
    }
    Tensor::from_storage(T::DTYPE, shape, s)
}

pub(crate) fn iota(shape: &[usize], axis: usize, dtype: DType) -> Tensor {
    crate::with_dtype!(dtype, T => iota_typed::<T>(shape, axis))
}
