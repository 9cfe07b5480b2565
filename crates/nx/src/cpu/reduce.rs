//! Reduction kernels: sum/prod/max/min over any set of axes, argmax/argmin,
//! cumulative sum/product.

use crate::prim::{ArgOp, CumOp, ReduceOp};
use crate::tensor::{Tensor, Value};

pub(crate) fn reduce(op: ReduceOp, x: &Value, axes: &[usize]) -> Tensor {
    todo!("reduce {op:?} {axes:?} {:?}", x.dtype)
}

pub(crate) fn arg_reduce(op: ArgOp, x: &Value, axis: usize) -> Tensor {
    todo!("arg_reduce {op:?} {axis} {:?}", x.dtype)
}

pub(crate) fn cumulative(op: CumOp, x: &Value, axis: usize) -> Tensor {
    todo!("cumulative {op:?} {axis} {:?}", x.dtype)
}
