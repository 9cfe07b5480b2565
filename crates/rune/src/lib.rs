//! Rune: composable function transformations (grad, jvp, vjp, vmap, jit, ...)
//! over `nx` tensors and parameter trees.
//!
//! For now it re-exports `nx`; the transformations arrive issue by issue.

pub use nx;

/// `use rune::prelude::*;` brings tensors, dtypes and parameter trees into scope.
pub mod prelude {
    pub use nx::{DType, Ptree, Slice, Tensor, Tree};
}
