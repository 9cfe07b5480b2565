//! Gather (take_along_axis) and its transpose, scatter-add.

use crate::tensor::{Tensor, Value};

pub(crate) fn gather(x: &Value, idx: &Value, axis: usize) -> Tensor {
    todo!("gather {axis} {:?} {:?}", x.dtype, idx.dtype)
}

pub(crate) fn scatter_add(x: &Value, idx: &Value, updates: &Value, axis: usize) -> Tensor {
    todo!(
        "scatter_add {axis} {:?} {:?} {:?}",
        x.dtype,
        idx.dtype,
        updates.dtype
    )
}
