//! Rune: composable function transformations over `nx` tensors and
//! parameter trees, after JAX.
//!
//! ```
//! use rune::prelude::*;
//!
//! // grad: the gradient of a scalar function, in the input's structure.
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
//! let g = grad(|x: &Tensor| (x * x).sum_all(), &x);
//! assert_eq!(g.to_vec::<f32>(), vec![2.0, 4.0, 6.0]);
//!
//! // vmap: a function of one example, mapped over a batch axis.
//! let xs = Tensor::from_slice(&[3.0f32, 4.0, 6.0, 8.0], &[2, 2]);
//! let norms = vmap(|v: &Tensor| (v * v).sum_all().sqrt(), &xs);
//! assert_eq!(norms.to_vec::<f32>(), vec![5.0, 10.0]);
//!
//! // jit: traced once per input signature, compiled to fused C kernels
//! // (elementwise work gives eager's results bit for bit).
//! let f = jit(|x: &Tensor| (x * 2.0).exp() + 1.0);
//! assert_eq!(f.call(&x).to_vec::<f32>(), ((&x * 2.0).exp() + 1.0).to_vec::<f32>());
//!
//! // A model: a parameter tree, a loss, and a compiled training step.
//! #[derive(Ptree, Clone)]
//! struct Linear { w: Tensor, b: Tensor }
//!
//! fn predict(p: &Linear, x: &Tensor) -> Tensor { x.matmul(&p.w) + &p.b }
//!
//! let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0], &[4, 1]);
//! let y = &x * 2.0 + 1.0; // targets on the line 2x + 1
//! let mut p = Linear { w: Tensor::zeros(&[1, 1], DType::F32), b: Tensor::zeros(&[1], DType::F32) };
//! let step = jit(|(p, x, y): &(Linear, Tensor, Tensor)| {
//!     let loss = |p: &Linear| (predict(p, x) - y).square().mean_all();
//!     let (l, g) = value_and_grad(loss, p);
//!     (p.map2_leaves(&g, &mut |w, g| w - g * 0.1), l) // SGD
//! });
//! let mut losses = Vec::new();
//! for _ in 0..300 {
//!     let (next, loss) = step.call(&(p, x.clone(), y.clone()));
//!     p = next;
//!     losses.push(loss.item::<f32>());
//! }
//! assert!(losses[0] > 1.0 && losses[299] < 1e-6);
//! assert!((p.w.to_vec::<f32>()[0] - 2.0).abs() < 1e-2 && (p.b.item::<f32>() - 1.0).abs() < 1e-2);
//! ```
//!
//! # Map
//!
//! - Differentiation: [`grad`], [`value_and_grad`], [`value_and_grad_aux`]
//!   (reverse mode over any [`Ptree`](nx::Ptree)); [`vjp`], [`vjp_fun`]
//!   (with its [`Pullback`]); [`jvp`], [`jvp_aux`] (forward mode); [`hvp`]
//!   (Hessian-vector products); [`check_grads`], [`check_grads_with`]
//!   ([`CheckGradsOpts`]): numerical checks of derivatives.
//! - Custom rules and memory: [`custom_vjp`], [`custom_jvp`], [`remat`]
//!   (recompute in the backward pass instead of storing).
//! - Gradient control: [`detach`], [`no_grad`].
//! - Vectorization: [`vmap`], [`vmap_with`] ([`VmapOpts`]: mapped axes in
//!   and out); the Jacobians built on it: [`jacfwd`], [`jacrev`],
//!   [`hessian`].
//! - Control flow: [`scan`], [`cond`], [`while_loop`].
//! - Compilation: [`jit`], [`jit_with`] ([`JitOpts`]) give a [`Jit`];
//!   [`make_graph`] shows the staged program; [`JitError`]: why a function
//!   cannot be compiled; [`jit_stats`], [`reset_jit_stats`] ([`JitStats`]).
//! - Devices: [`pmap`], [`pmap_with`] ([`PmapOpts`]) give a [`Pmap`] that
//!   shards its inputs across host devices `CPU:1`, `CPU:2`, ...
//! - Across processes (cargo feature `mpi`): `distributed` — MPI's world
//!   (`distributed::init`), collectives over parameter trees, and pmap over
//!   `world.devices()` (one device per process).
//! - [`nn`]: layers (`Linear`, `Conv`, norms, attention, ...), losses and
//!   initializers, as parameter trees.
//! - [`rng`]: explicit PRNG keys (threefry) and samplers.
//! - [`optim`]: optimizers after Optax (`adam`, `adamw`, `sgd`, ...,
//!   `chain`, clipping, schedules) whose state is a parameter tree.
//! - Logging: [`with_debug`], [`with_debug_to`].
//! - [`prelude`]: tensors, dtypes, parameter trees and the transformations
//!   in one `use`; [`nx`] and [`tolk`] are re-exported.
//!
//! # Derivatives at kinks
//!
//! Where a function is not differentiable, rune gives the value JAX gives
//! (each is tested against JAX in `tests/no_silent_wrong_grads.rs`):
//!
//! | function | derivative there | as JAX's rule |
//! |---|---|---|
//! | `abs` at 0 and -0.0 | 1 (-1 below 0 and at NaN) | `select(x >= 0, 1, -1)` |
//! | `relu` at 0 | 0 | `select(x > 0, 1, 0)` (`jax.nn.relu`) |
//! | `maximum`/`minimum` on a tie | 1/2 to each operand | `lax.max`/`lax.min`'s balanced rule |
//! | `clamp` at a bound | 1/2 | `jnp.clip` (maximum, then minimum) |
//! | `max`/`min` reductions on ties | shared evenly among the tied elements | `reduce_max`'s chooser rule |
//! | `sqrt` at 0 (-0.0) | +inf (-inf) | `0.5 / sqrt(x)` |
//! | `pow(x, y)` in `x` at `x = 0` | `y * 0^(y-1)`: 0 for `y > 1`, 1 for `y = 1`, inf for `0 < y < 1`, NaN for `y = 0` | `y * x^(y-1)` (float exponent) |
//! | `pow(x, y)` in `y` at `x = 0` | 0 | `log(x == 0 ? 1 : x) * x^y` |
//! | `floor`, `ceil`, `round`, `trunc`, `sign` | 0 everywhere, steps included | zero derivative |
//! | `softplus` at 0 | 1/2 (`sigmoid(x)` everywhere) | `jax.nn.softplus` |
//!
//! # Mutation and recorded values
//!
//! Reverse mode keeps some values for the backward pass (an operand of a
//! product, a result of `exp`, a `where_` condition, a `take` index). Each
//! records its storage's version (`nx::Tensor::version`, bumped by every
//! `assign`/`blit`); a backward pass (`Pullback::call`, or the second half
//! of `grad`) over a value written since panics, naming the operation that
//! kept it, rather than differentiating at the new value. Differentiate at
//! (or capture) a `.copy()` of a tensor that changes while a pullback is
//! alive. `custom_vjp` residuals are the rule's own business and are not
//! checked; `remat` checks its inputs.
//!
//! Every function that differentiates with respect to its input (`grad`,
//! `value_and_grad(_aux)`, `hvp`, `jacfwd`, `jacrev`, `hessian`,
//! `check_grads`) refuses integer and boolean inputs with a panic naming
//! itself, as JAX raises; `vjp`, `vjp_fun` and `jvp` accept such leaves (as
//! JAX does with `float0`), and `vjp` gives them zero cotangents.
//!
//! Each transformation is a trace (`nx::Trace`) in a file of its own
//! (`jvp.rs`, `vjp.rs`, `batch.rs`) with one rule per primitive; the functions users
//! call live in `differentiate.rs`, `custom.rs`, `check_grads.rs` and
//! `gradient_control.rs`.
//!
//! ```
//! use rune::prelude::*;
//! let x = Tensor::scalar(2.0f64);
//! // d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x = 4: no perturbation confusion.
//! let g = rune::grad(|x: &Tensor| x * rune::grad(|y: &Tensor| x * y, &Tensor::scalar(1.0f64)), &x);
//! assert_eq!(g.item::<f64>(), 4.0);
//! ```

#![warn(missing_docs)]

pub use nx;

mod autodiff;
mod batch;
mod check_grads;
mod control;
mod custom;
mod debug;
mod device;
mod differentiate;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod export;
mod gradient_control;
mod jacobian;
mod jit;
mod jvp;
mod linalg_derivatives;
mod loops;
mod lower;
pub mod nn;
mod on_device;
mod on_devices;
pub mod optim;
mod placed;
mod pmap;
mod resident;
pub mod rng;
mod rules;
mod scope;
pub mod sharding;
mod signatures;
mod stage;
mod vjp;
mod vmap;

pub use check_grads::{check_grads, check_grads_with, CheckGradsOpts};
pub use control::{cond, scan, scan_with, while_loop, ScanOpts};
pub use custom::{custom_jvp, custom_vjp, remat};
pub use debug::{with_debug, with_debug_to};
pub use device::{jit_stats, reset_jit_stats, JitStats};
pub use differentiate::{
    grad, hvp, jvp, jvp_aux, value_and_grad, value_and_grad_aux, vjp, vjp_fun, Pullback,
};
pub use export::{ExportError, ExportInfo, ExportOpts, Exported, LeafSpec};
pub use gradient_control::{detach, no_grad};
pub use jacobian::{hessian, jacfwd, jacrev};
pub use jit::{device_kernels, jit, jit_with, make_graph, Jit, JitOpts};
pub use lower::{Compiled, CostAnalysis, Lowered};
pub use pmap::{pmap, pmap_with, Pmap, PmapOpts};
pub use stage::JitError;
pub use tolk;
pub use vmap::{vmap, vmap_with, VmapOpts};

/// `use rune::prelude::*;` brings tensors, dtypes, parameter trees and the
/// transformations (with their option structs) into scope.
pub mod prelude {
    pub use crate::{
        check_grads, check_grads_with, cond, custom_jvp, custom_vjp, detach, grad, hessian, hvp,
        jacfwd, jacrev, jit, jit_stats, jit_with, jvp, jvp_aux, make_graph, no_grad, pmap,
        pmap_with, remat, reset_jit_stats, scan, scan_with, value_and_grad, value_and_grad_aux,
        vjp, vjp_fun, vmap, vmap_with, while_loop, with_debug, with_debug_to, CheckGradsOpts,
        JitError, JitOpts, JitStats, PmapOpts, ScanOpts, VmapOpts,
    };
    pub use nx::{DType, Ptree, Slice, Tensor, Tree};
}

/// The README's example, compiled and run as a doctest so that it never rots.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
