//! Creation: constants, ranges, identity matrices.

use crate::prim::Prim;
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

impl Tensor {
    /// A tensor of `shape` filled with `value`, converted to `dtype`.
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        bind(
            Prim::Full {
                shape: shape.to_vec(),
                dtype,
                value: value.into(),
            },
            &[],
        )
    }

    /// A tensor of `shape` filled with zeros.
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let z = Tensor::zeros(&[2, 3], DType::F32);
    /// assert_eq!(z.shape(), &[2, 3]);
    /// assert_eq!(z.to_vec::<f32>(), vec![0.0; 6]);
    /// ```
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 0.0, dtype)
    }

    /// A tensor of `shape` filled with ones (`true` for `Bool`).
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1.0, dtype)
    }

    /// Zeros of `self`'s shape and dtype.
    pub fn zeros_like(&self) -> Tensor {
        Tensor::zeros(self.shape(), self.dtype())
    }

    /// Ones of `self`'s shape and dtype.
    pub fn ones_like(&self) -> Tensor {
        Tensor::ones(self.shape(), self.dtype())
    }

    /// `value` (converted to `self`'s dtype) in `self`'s shape.
    pub fn full_like(&self, value: f64) -> Tensor {
        Tensor::full(self.shape(), value, self.dtype())
    }

    /// `start, start + step, ...` up to but excluding `end` (numpy's arange).
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let r = Tensor::arange(0.0, 5.0, 2.0, DType::I32);
    /// assert_eq!(r.to_vec::<i32>(), vec![0, 2, 4]);
    /// ```
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Tensor {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            panic!(
                "arange: needs finite start, end and a non-zero step, got {start}, {end}, {step}"
            );
        }
        let n = ((end - start) / step).ceil().max(0.0) as usize;
        let iota = Tensor::iota(&[n], 0, DType::F64);
        (iota * step + start).cast(dtype)
    }

    /// `n` evenly spaced values from `start` to `end`, both included.
    pub fn linspace(start: f64, end: f64, n: usize, dtype: DType) -> Tensor {
        if n == 1 {
            return Tensor::full(&[1], start, dtype);
        }
        let iota = Tensor::iota(&[n], 0, DType::F64);
        // Computed from both ends so that the last value is exactly `end`.
        let t = &iota * (1.0 / (n.max(2) - 1) as f64);
        let v = (1.0 - &t) * start + &t * end;
        v.cast(dtype)
    }

    /// The `n`×`n` identity matrix.
    pub fn eye(n: usize, dtype: DType) -> Tensor {
        let rows = Tensor::iota(&[n, n], 0, DType::I64);
        let cols = Tensor::iota(&[n, n], 1, DType::I64);
        rows.equal(&cols).cast(dtype)
    }

    /// `0, 1, 2, ...` along `axis` of `shape`, repeated over the other axes.
    pub fn iota(shape: &[usize], axis: usize, dtype: DType) -> Tensor {
        assert!(
            axis < shape.len(),
            "iota: axis {axis} is out of range for shape {shape:?}"
        );
        bind(
            Prim::Iota {
                shape: shape.to_vec(),
                axis,
                dtype,
            },
            &[],
        )
    }
}
