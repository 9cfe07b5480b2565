//! Reductions (sum, mean, max, min, prod, var, std, all, any, argmax, argmin,
//! logsumexp), softmax, log_softmax, cumsum, cumprod.
//!
//! Axes are `isize` (negative counts from the end), checked and sorted by
//! `shape::normalize_axes` (out of range and repeated axes panic). An empty
//! `axes` slice reduces nothing, as numpy's `axis=()`: the result has
//! `self`'s values and shape; `sum_all`/`mean_all` reduce every axis.
//! `keepdims` keeps each reduced axis with size 1 (a reshape of the result).

use super::{require_float, require_inexact, require_numeric};
use crate::prim::{drop_axes, ArgOp, CumOp, Prim, ReduceOp};
use crate::shape::{normalize_axes, normalize_axis};
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

/// `shape` with the reduced axes kept as size 1.
fn kept_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .map(|(i, &n)| if axes.contains(&i) { 1 } else { n })
        .collect()
}

/// Binds `Reduce` over normalized `axes` (none: `x` unchanged).
fn reduce_axes(x: &Tensor, op: ReduceOp, axes: &[usize], keepdims: bool) -> Tensor {
    if axes.is_empty() {
        return x.clone();
    }
    let out = bind(
        Prim::Reduce {
            op,
            axes: axes.to_vec(),
        },
        &[x],
    );
    if keepdims {
        out.reshape(&kept_shape(x.shape(), axes))
    } else {
        out
    }
}

/// Panics naming `op` if one of `axes` has size 0 (no identity to return).
fn require_nonempty_axes(op: &str, x: &Tensor, axes: &[usize]) {
    for &a in axes {
        if x.shape()[a] == 0 {
            panic!(
                "{op}: cannot reduce an empty axis (axis {a} of shape {:?})",
                x.shape()
            );
        }
    }
}

/// Runs `f` in f32 for f16/bf16 (and rounds the result back once), so that
/// means, variances and exponentials neither overflow nor lose digits in the
/// narrow type; other dtypes run as they are.
fn in_f32(x: &Tensor, f: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    match x.dtype() {
        DType::F16 | DType::BF16 => f(&x.cast(DType::F32)).cast(x.dtype()),
        _ => f(x),
    }
}

fn sum_axes(op: &str, x: &Tensor, axes: &[isize], keepdims: bool) -> Tensor {
    require_numeric(op, x);
    let axes = normalize_axes(op, axes, x.ndim());
    reduce_axes(x, ReduceOp::Sum, &axes, keepdims)
}

/// Mean over normalized `axes`, in `x`'s dtype (a float).
fn mean_norm(x: &Tensor, axes: &[usize], keepdims: bool) -> Tensor {
    let count: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let s = reduce_axes(x, ReduceOp::Sum, axes, keepdims);
    if axes.is_empty() {
        s
    } else {
        s / count as f64
    }
}

fn mean_axes(op: &str, x: &Tensor, axes: &[isize], keepdims: bool) -> Tensor {
    // Complex means divide by the (real) count like floats.
    require_inexact(op, x);
    let axes = normalize_axes(op, axes, x.ndim());
    in_f32(x, |x| mean_norm(x, &axes, keepdims))
}

/// Variance (ddof 0) over normalized `axes`, in `x`'s dtype.
fn var_norm(x: &Tensor, axes: &[usize], keepdims: bool) -> Tensor {
    let d = x - &mean_norm(x, axes, true);
    mean_norm(&(&d * &d), axes, keepdims)
}

fn arg_reduce(op_name: &str, x: &Tensor, op: ArgOp, axis: isize, keepdims: bool) -> Tensor {
    let a = normalize_axis(op_name, axis, x.ndim());
    require_nonempty_axes(op_name, x, &[a]);
    let out = bind(Prim::ArgReduce { op, axis: a }, &[x]);
    if keepdims {
        out.reshape(&kept_shape(x.shape(), &[a]))
    } else {
        out
    }
}

fn cumulative(op_name: &str, x: &Tensor, op: CumOp, axis: isize) -> Tensor {
    require_numeric(op_name, x);
    let a = normalize_axis(op_name, axis, x.ndim());
    bind(Prim::Cumulative { op, axis: a }, &[x])
}

impl Tensor {
    /// Sum over `axes`. Integers wrap; `Bool` is rejected (cast it first).
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// assert_eq!(x.sum(&[0], false).to_vec::<f32>(), vec![5.0, 7.0, 9.0]);
    /// assert_eq!(x.sum(&[-1], true).shape(), &[2, 1]);
    /// assert_eq!(x.sum(&[], false).shape(), &[2, 3]); // reduces nothing
    /// assert_eq!(x.sum_all().item::<f32>(), 21.0);
    /// ```
    pub fn sum(&self, axes: &[isize], keepdims: bool) -> Tensor {
        sum_axes("sum", self, axes, keepdims)
    }

    /// Sum of every element, as a 0-d tensor of the same dtype.
    pub fn sum_all(&self) -> Tensor {
        let all: Vec<isize> = (0..self.ndim() as isize).collect();
        sum_axes("sum_all", self, &all, false)
    }

    /// Arithmetic mean over `axes` (negative axes count from the end; `&[]`
    /// reduces nothing). An empty axis gives NaN. f16/bf16 are averaged in
    /// f32 and rounded back once.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// assert_eq!(x.mean(&[1], false).to_vec::<f64>(), vec![2.0, 5.0]);
    /// assert_eq!(x.mean(&[0], true).to_vec::<f64>(), vec![2.5, 3.5, 4.5]);
    /// assert_eq!(x.mean(&[0], true).shape(), &[1, 3]);
    /// assert_eq!(x.mean_all().item::<f64>(), 3.5);
    /// ```
    ///
    /// # Panics
    ///
    /// On integer and bool tensors (cast first), and on an axis out of range
    /// or repeated.
    pub fn mean(&self, axes: &[isize], keepdims: bool) -> Tensor {
        mean_axes("mean", self, axes, keepdims)
    }

    /// Mean of every element, as a 0-d tensor of the same (float or complex) dtype.
    pub fn mean_all(&self) -> Tensor {
        let all: Vec<isize> = (0..self.ndim() as isize).collect();
        mean_axes("mean_all", self, &all, false)
    }

    /// Product over `axes` (1 over an empty axis). Integers wrap; `Bool` is rejected.
    pub fn prod(&self, axes: &[isize], keepdims: bool) -> Tensor {
        require_numeric("prod", self);
        let axes = normalize_axes("prod", axes, self.ndim());
        reduce_axes(self, ReduceOp::Prod, &axes, keepdims)
    }

    /// Maximum over `axes`; NaN propagates; on `Bool` it is "any".
    /// Panics on an empty axis.
    pub fn max(&self, axes: &[isize], keepdims: bool) -> Tensor {
        let axes = normalize_axes("max", axes, self.ndim());
        require_nonempty_axes("max", self, &axes);
        reduce_axes(self, ReduceOp::Max, &axes, keepdims)
    }

    /// Minimum over `axes`; NaN propagates; on `Bool` it is "all".
    /// Panics on an empty axis.
    pub fn min(&self, axes: &[isize], keepdims: bool) -> Tensor {
        let axes = normalize_axes("min", axes, self.ndim());
        require_nonempty_axes("min", self, &axes);
        reduce_axes(self, ReduceOp::Min, &axes, keepdims)
    }

    /// Population variance (ddof 0): `mean((x - mean(x))^2)` over `axes`.
    pub fn var(&self, axes: &[isize], keepdims: bool) -> Tensor {
        require_float("var", self);
        let axes = normalize_axes("var", axes, self.ndim());
        in_f32(self, |x| var_norm(x, &axes, keepdims))
    }

    /// Population standard deviation (ddof 0): `sqrt(var)`.
    pub fn std(&self, axes: &[isize], keepdims: bool) -> Tensor {
        require_float("std", self);
        let axes = normalize_axes("std", axes, self.ndim());
        in_f32(self, |x| var_norm(x, &axes, keepdims).sqrt())
    }

    /// `log(sum(exp(x)))` over `axes`, computed stably: the (finite) maximum
    /// is subtracted before `exp` and added back after `log`.
    /// Panics on an empty axis.
    pub fn logsumexp(&self, axes: &[isize], keepdims: bool) -> Tensor {
        require_float("logsumexp", self);
        let axes = normalize_axes("logsumexp", axes, self.ndim());
        require_nonempty_axes("logsumexp", self, &axes);
        in_f32(self, |x| {
            let m = reduce_axes(x, ReduceOp::Max, &axes, true);
            // An infinite maximum (all -inf, or some +inf) would give inf - inf.
            let m = Tensor::where_(&m.isfinite(), &m, &m.scalar_like(0.0));
            let s = reduce_axes(&(x - &m).exp(), ReduceOp::Sum, &axes, true).log() + &m;
            if keepdims {
                s
            } else {
                s.reshape(&drop_axes(x.shape(), &axes))
            }
        })
    }

    /// True where every element over `axes` is non-zero (true over an empty axis).
    pub fn all(&self, axes: &[isize], keepdims: bool) -> Tensor {
        let axes = normalize_axes("all", axes, self.ndim());
        reduce_axes(&self.cast(DType::Bool), ReduceOp::Min, &axes, keepdims)
    }

    /// True where some element over `axes` is non-zero (false over an empty axis).
    pub fn any(&self, axes: &[isize], keepdims: bool) -> Tensor {
        let axes = normalize_axes("any", axes, self.ndim());
        reduce_axes(&self.cast(DType::Bool), ReduceOp::Max, &axes, keepdims)
    }

    /// Index (`I32`) of the maximum along `axis`: the first one on ties; a
    /// NaN counts as the maximum (the first NaN wins). Panics on an empty axis.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 3.0, 3.0, 0.0], &[4]);
    /// assert_eq!(x.argmax(0, false).item::<i32>(), 1);
    /// ```
    pub fn argmax(&self, axis: isize, keepdims: bool) -> Tensor {
        arg_reduce("argmax", self, ArgOp::Argmax, axis, keepdims)
    }

    /// Index (`I32`) of the minimum along `axis`: the first one on ties; a
    /// NaN counts as the minimum (the first NaN wins). Panics on an empty axis.
    pub fn argmin(&self, axis: isize, keepdims: bool) -> Tensor {
        arg_reduce("argmin", self, ArgOp::Argmin, axis, keepdims)
    }

    /// `exp(x) / sum(exp(x))` along `axis`, computed stably (the maximum
    /// along the axis is subtracted first).
    pub fn softmax(&self, axis: isize) -> Tensor {
        require_float("softmax", self);
        let a = normalize_axis("softmax", axis, self.ndim());
        if self.shape()[a] == 0 {
            return self.clone();
        }
        in_f32(self, |x| {
            let e = (x - &reduce_axes(x, ReduceOp::Max, &[a], true)).exp();
            let s = reduce_axes(&e, ReduceOp::Sum, &[a], true);
            e / s
        })
    }

    /// `x - logsumexp(x)` along `axis`, computed stably.
    pub fn log_softmax(&self, axis: isize) -> Tensor {
        require_float("log_softmax", self);
        let a = normalize_axis("log_softmax", axis, self.ndim());
        if self.shape()[a] == 0 {
            return self.clone();
        }
        in_f32(self, |x| {
            let z = x - &reduce_axes(x, ReduceOp::Max, &[a], true);
            let lse = reduce_axes(&z.exp(), ReduceOp::Sum, &[a], true).log();
            z - lse
        })
    }

    /// Inclusive running sum along `axis` (same shape). Integers wrap.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4], &[4]);
    /// assert_eq!(x.cumsum(0).to_vec::<i32>(), vec![1, 3, 6, 10]);
    /// ```
    pub fn cumsum(&self, axis: isize) -> Tensor {
        cumulative("cumsum", self, CumOp::Sum, axis)
    }

    /// Inclusive running product along `axis` (same shape). Integers wrap.
    pub fn cumprod(&self, axis: isize) -> Tensor {
        cumulative("cumprod", self, CumOp::Prod, axis)
    }
}
