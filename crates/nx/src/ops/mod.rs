//! The public operations, as methods on `Tensor`. Each validates its inputs
//! (panicking with a message that names the operation, what it expected and
//! what it got), normalizes its parameters and binds primitives; none touches
//! data directly. Grouped by kind, one file each.

mod arith;
mod complex;
mod conv;
mod creation;
mod einsum;
mod elementwise;
mod index;
mod linalg;
mod movement;
mod padding;
mod reduce;
mod sort;
mod window;

pub use conv::ConvOpts;
pub use einsum::einsum;
pub use index::segment_sum;
pub use movement::Slice;
pub use padding::Padding;

use crate::prim::Prim;
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

/// Panics unless both operands have one dtype (there is no implicit promotion).
pub(crate) fn check_same_dtype(op: &str, a: &Tensor, b: &Tensor) {
    if a.dtype() != b.dtype() {
        panic!(
            "{op}: dtype mismatch: {} and {} (no implicit promotion; cast one operand first)",
            a.dtype(),
            b.dtype()
        );
    }
}

pub(crate) fn require_float(op: &str, x: &Tensor) {
    if !x.dtype().is_float() {
        panic!("{op}: expects a float tensor, got {}", x.dtype());
    }
}

/// A real float or a complex tensor.
pub(crate) fn require_inexact(op: &str, x: &Tensor) {
    if !x.dtype().is_inexact() {
        panic!("{op}: expects a float tensor, got {}", x.dtype());
    }
}

/// Any dtype but `Bool` and the complex ones (arithmetic that needs an order).
pub(crate) fn require_real(op: &str, x: &Tensor) {
    require_numeric(op, x);
    require_ordered(op, x);
}

/// Any dtype but the complex ones (`Bool` is ordered: false < true).
pub(crate) fn require_ordered(op: &str, x: &Tensor) {
    if x.dtype().is_complex() {
        panic!(
            "{op}: expects a real tensor, got {} (use real(), imag() or abs() first)",
            x.dtype()
        );
    }
}

pub(crate) fn require_numeric(op: &str, x: &Tensor) {
    if x.dtype() == DType::Bool {
        panic!("{op}: expects a numeric tensor, got bool");
    }
}

pub(crate) fn require_index(op: &str, idx: &Tensor) {
    if !matches!(idx.dtype(), DType::I32 | DType::I64) {
        panic!("{op}: indices must be i32 or i64, got {}", idx.dtype());
    }
}

/// The two operands broadcast to their common shape (views, no copies).
pub(crate) fn broadcast_pair(op: &str, a: &Tensor, b: &Tensor) -> (Tensor, Tensor) {
    check_same_dtype(op, a, b);
    if a.shape() == b.shape() {
        return (a.clone(), b.clone());
    }
    let shape = crate::shape::broadcast_shapes(op, a.shape(), b.shape());
    (a.broadcast_unchecked(&shape), b.broadcast_unchecked(&shape))
}

impl Tensor {
    /// A 0-d tensor of `self`'s dtype holding `value` (how `f64` scalars enter
    /// binary operations).
    pub fn scalar_like(&self, value: f64) -> Tensor {
        bind(
            Prim::Full {
                shape: vec![],
                dtype: self.dtype(),
                value: value.into(),
            },
            &[],
        )
    }

    /// Broadcast to a shape already known to be compatible.
    pub(crate) fn broadcast_unchecked(&self, shape: &[usize]) -> Tensor {
        if self.shape() == shape {
            self.clone()
        } else {
            bind(
                Prim::Broadcast {
                    shape: shape.to_vec(),
                },
                &[self],
            )
        }
    }
}
