//! Rune: composable function transformations over `nx` tensors and
//! parameter trees.
//!
//! Differentiation: [`grad`], [`value_and_grad`], [`value_and_grad_aux`],
//! [`vjp`], [`vjp_fun`], [`jvp`], [`jvp_aux`], [`hvp`], custom rules
//! ([`custom_vjp`], [`custom_jvp`]), [`remat`], [`check_grads`], and
//! gradient control ([`detach`], [`no_grad`]). Vectorization: [`vmap`],
//! [`vmap_with`], and the Jacobians built on it ([`jacfwd`], [`jacrev`],
//! [`hessian`]). Control flow: [`scan`], [`cond`], [`while_loop`].
//! Logging: [`with_debug`], [`with_debug_to`].
//!
//! Each transformation is a trace (`nx::Trace`) in a file of its own
//! (`jvp.rs`, `vjp.rs`, `batch.rs`) with one rule per primitive; the functions users
//! call live in `autodiff.rs`, `custom.rs`, `check_grads.rs` and
//! `gradient_control.rs`.
//!
//! ```
//! use rune::prelude::*;
//! let x = Tensor::scalar(2.0f64);
//! // d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x = 4: no perturbation confusion.
//! let g = rune::grad(|x: &Tensor| x * rune::grad(|y: &Tensor| x * y, &Tensor::scalar(1.0f64)), &x);
//! assert_eq!(g.item::<f64>(), 4.0);
//! ```

pub use nx;

mod autodiff;
mod batch;
mod check_grads;
mod control;
mod custom;
mod debug;
mod gradient_control;
mod jacobian;
mod jit;
mod jvp;
pub mod rng;
mod rules;
mod stage;
mod vjp;
mod vmap;

pub use autodiff::{
    grad, hvp, jvp, jvp_aux, value_and_grad, value_and_grad_aux, vjp, vjp_fun, Pullback,
};
pub use check_grads::{check_grads, check_grads_with, CheckGradsOpts};
pub use control::{cond, scan, while_loop};
pub use custom::{custom_jvp, custom_vjp, remat};
pub use debug::{with_debug, with_debug_to};
pub use gradient_control::{detach, no_grad};
pub use jacobian::{hessian, jacfwd, jacrev};
pub use jit::{jit, jit_stats, jit_with, make_graph, reset_jit_stats, Jit, JitOpts, JitStats};
pub use stage::JitError;
pub use tolk;
pub use vmap::{vmap, vmap_with, VmapOpts};

/// `use rune::prelude::*;` brings tensors, dtypes and parameter trees into scope.
pub mod prelude {
    pub use nx::{DType, Ptree, Slice, Tensor, Tree};
}
