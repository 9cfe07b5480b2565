//! dot_general: batched matrix products through the `gemm` crate for floats,
//! plain loops for integers.

use crate::tensor::{Tensor, Value};

pub(crate) fn dot_general(
    lhs: &Value,
    rhs: &Value,
    lhs_batch: &[usize],
    rhs_batch: &[usize],
    lhs_contract: &[usize],
    rhs_contract: &[usize],
) -> Tensor {
    todo!(
        "dot_general {:?} {:?} {lhs_batch:?} {rhs_batch:?} {lhs_contract:?} {rhs_contract:?}",
        lhs.dtype,
        rhs.dtype
    )
}
