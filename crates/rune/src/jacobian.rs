//! Jacobians and Hessians, built on `vmap` over the standard basis:
//! `jacfwd` is one vmapped `jvp`, `jacrev` one forward pass and a vmapped
//! pullback, `hessian` is `jacfwd` of `grad`. Each calls `f` exactly once.

use crate::differentiate::require_float_input;
use crate::{grad, jvp, vjp_fun, vmap};
use nx::Tensor;

/// `n` basis vectors of `shape` (identity rows), stacked: `[n, shape...]`.
fn basis(shape: &[usize], dtype: nx::DType) -> Tensor {
    let n: usize = shape.iter().product();
    let mut full = vec![n];
    full.extend_from_slice(shape);
    Tensor::eye(n, dtype).reshape(&full)
}

/// The Jacobian of `f` at `x`, shaped `f(x).shape ++ x.shape`, column by
/// column in forward mode (one vectorized pass). Prefer it when the input
/// is smaller than the output. Panics if `x` is not a float tensor.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
/// let j = rune::jacfwd(|x: &Tensor| x.square() * 3.0, &x);
/// assert_eq!(j.shape(), &[2, 2]);
/// assert_eq!(j.to_vec::<f64>(), vec![6.0, 0.0, 0.0, 12.0]);
/// ```
pub fn jacfwd(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    require_float_input("jacfwd", x);
    let cols = vmap(|t: &Tensor| jvp(&f, x, t).1, &basis(x.shape(), x.dtype()));
    // cols: [n, out...] -> [out..., n] -> [out..., x...]
    let n = x.numel();
    let out_shape = cols.shape()[1..].to_vec();
    let m: usize = out_shape.iter().product();
    let mut shape = out_shape;
    shape.extend_from_slice(x.shape());
    cols.reshape(&[n, m]).transpose().reshape(&shape)
}

/// The Jacobian of `f` at `x`, shaped `f(x).shape ++ x.shape`, row by row
/// in reverse mode (one forward pass, one vectorized backward pass). Prefer
/// it when the output is smaller than the input. Panics if `x` is not a
/// float tensor.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3]);
/// let j = rune::jacrev(|x: &Tensor| x.sum_all() * x.get(0), &x);
/// assert_eq!(j.shape(), &[3]);
/// assert_eq!(j.to_vec::<f64>(), vec![7.0, 1.0, 1.0]);
/// ```
pub fn jacrev(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    require_float_input("jacrev", x);
    let (y, pullback) = vjp_fun(f, x);
    let rows = vmap(
        |ct: &Tensor| pullback.call(ct),
        &basis(y.shape(), y.dtype()),
    );
    let mut shape = y.shape().to_vec();
    shape.extend_from_slice(x.shape());
    rows.reshape(&shape)
}

/// The Hessian of the scalar objective `f` at `x`, shaped `x.shape ++
/// x.shape` (forward over reverse: `jacfwd` of `grad`). Panics if `x` is
/// not a float tensor.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
/// // f = x0^2 x1: H = [[2 x1, 2 x0], [2 x0, 0]]
/// let h = rune::hessian(|x: &Tensor| x.get(0).square() * x.get(1), &x);
/// assert_eq!(h.to_vec::<f64>(), vec![4.0, 2.0, 2.0, 0.0]);
/// ```
pub fn hessian(f: impl Fn(&Tensor) -> Tensor, x: &Tensor) -> Tensor {
    require_float_input("hessian", x);
    jacfwd(|x: &Tensor| grad(&f, x), x)
}
