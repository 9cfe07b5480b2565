//! Optimizers after Optax: an [`Optimizer`] is a value with `init` and
//! `update`, its [`OptState`] a parameter tree, so a whole training step
//! (gradient, clipping, schedule, update) compiles once under `jit`, maps
//! over an ensemble under `vmap`, differentiates, and saves with the model.
//!
//! This file owns the `Optimizer` type (checking gradients against the
//! state, stepping the count) and [`apply_updates`]. The rest:
//! `schedule.rs` ([`Schedule`]s), `state.rs` ([`OptState`] and its layout),
//! `transform.rs` (the building blocks), `clipping.rs`, `combine.rs`
//! (`chain`, `masked`, `multi_steps`), `alias.rs` (`sgd`, `adam`, ...).
//! Formulas, defaults and hyper-parameter names are Optax's (0.2).
//!
//! ```
//! use rune::prelude::*;
//! use rune::optim;
//!
//! #[derive(Ptree, Clone)]
//! struct Line { w: Tensor, b: Tensor }
//!
//! let x = Tensor::from_slice(&[0.0f32, 1.0, 2.0, 3.0], &[4]);
//! let y = &x * 2.0 + 1.0;
//! let opt = optim::chain(vec![
//!     optim::clip_by_global_norm(10.0),
//!     optim::adamw(optim::warmup_cosine_decay(0.0, 0.1, 10, 500, 1e-3),
//!                  optim::AdamWOpts { weight_decay: 1e-4, mask: Some(optim::mask(|p: &str| p == "w")), ..Default::default() }),
//! ]);
//! let mut params = Line { w: Tensor::scalar(0.0f32), b: Tensor::scalar(0.0f32) };
//! let mut state = opt.init(&params);
//! let step = jit(|(p, s): &(Line, optim::OptState)| {
//!     let (loss, g) = value_and_grad(|p: &Line| (&x * &p.w + &p.b - &y).square().mean_all(), p);
//!     let (u, s) = opt.update(&g, s, p);
//!     (loss, optim::apply_updates(p, &u), s)
//! });
//! let mut loss = Tensor::scalar(0.0f32);
//! for _ in 0..500 {
//!     (loss, params, state) = step.call(&(params, state));
//! }
//! assert!(loss.item::<f32>() < 1e-3);
//! assert_eq!(state.count().item::<i32>(), 500);
//! ```

mod alias;
mod clipping;
mod combine;
mod schedule;
mod state;
mod transform;

pub use alias::{
    adagrad, adam, adamw, lion, rmsprop, sgd, AdagradOpts, AdamWOpts, LionOpts, RmsPropOpts,
    SgdOpts,
};
pub use clipping::{clip, clip_by_global_norm};
pub use combine::{chain, mask, masked, multi_steps, Mask};
pub use schedule::{
    constant, cosine_decay, exponential_decay, linear_schedule, piecewise_constant,
    warmup_cosine_decay, Schedule,
};
pub use state::OptState;
pub use transform::{
    add_decayed_weights, scale, scale_by_adam, scale_by_learning_rate, scale_by_lion, scale_by_rms,
    scale_by_rss, scale_by_stddev, trace, AdamOpts,
};

use nx::{Ptree, Tensor};
use state::Leaves;
use std::fmt;
use std::sync::Arc;
use transform::Transform;

/// A gradient transformation (Optax's `GradientTransformation`): `init`
/// makes its state for a parameter tree, `update` turns gradients into
/// updates (descent sign included) and the next state. Cheap to clone
/// (shared), `Send + Sync`.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let params = (Tensor::ones(&[2], DType::F32), Tensor::scalar(3.0f32));
/// let opt = optim::sgd(0.5, optim::SgdOpts::default());
/// let state = opt.init(&params);
/// let grads = (Tensor::ones(&[2], DType::F32), Tensor::scalar(2.0f32));
/// let (updates, state) = opt.update(&grads, &state, &params);
/// let params = optim::apply_updates(&params, &updates);
/// assert_eq!((params.0.to_vec::<f32>(), params.1.item::<f32>()), (vec![0.5, 0.5], 2.0));
/// assert_eq!(state.count().item::<i32>(), 1);
/// ```
#[derive(Clone)]
pub struct Optimizer {
    transform: Arc<dyn Transform>,
}

impl fmt::Debug for Optimizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.transform.fmt(f)
    }
}

impl Optimizer {
    pub(crate) fn new(transform: impl Transform + 'static) -> Optimizer {
        Optimizer {
            transform: Arc::new(transform),
        }
    }

    /// The state for `params`: the count 0 and each transformation's
    /// tensors (zeros, or Optax's initial values), one per parameter leaf.
    ///
    /// ```
    /// use rune::prelude::*;
    /// let p = vec![Tensor::ones(&[3], DType::F32)];
    /// let s = rune::optim::adagrad(0.1, Default::default()).init(&p);
    /// assert_eq!(s.count().item::<i32>(), 0);
    /// assert_eq!(s.leaves()[1].to_vec::<f32>(), vec![0.1; 3]); // the initial accumulator
    /// ```
    pub fn init<P: Ptree>(&self, params: &P) -> OptState {
        let paths = params.leaf_paths();
        let tensors = params.leaves();
        let transforms = self.transform.init(&Leaves {
            paths: &paths,
            tensors: &tensors,
        });
        OptState::new(
            Tensor::scalar(0i32),
            transforms,
            self.transform.kind().into(),
            paths.into(),
        )
    }

    /// The updates for `grads` (to add to the parameters with
    /// [`apply_updates`]; the descent sign is included) and the next
    /// state, whose count is one more. `state` is left as it was. Schedules
    /// are evaluated on the state's count as a tensor, so under `jit` one
    /// trace serves every step.
    ///
    /// Panics, naming the leaf path, when `grads`' leaves differ from the
    /// parameters' the state was made for (paths, or shape and dtype against
    /// `params`), and with a message containing "optimizer" when `state` was
    /// made by another optimizer.
    ///
    /// ```
    /// use rune::prelude::*;
    /// use rune::optim;
    /// let p = vec![Tensor::ones(&[2], DType::F32)];
    /// let sgd = optim::sgd(0.1, optim::SgdOpts::default());
    /// let adam = optim::adam(0.1, optim::AdamOpts::default());
    /// let wrong = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| adam.update(&p, &sgd.init(&p), &p)));
    /// assert!(wrong.is_err());
    /// ```
    pub fn update<P: Ptree>(&self, grads: &P, state: &OptState, params: &P) -> (P, OptState) {
        let kind = self.transform.kind();
        if state.made_by() != kind {
            panic!(
                "optim::update: the state was made by another optimizer ({}), not by this \
                 optimizer ({kind})",
                state.made_by()
            );
        }
        let paths = grads.leaf_paths();
        let updates = grads.leaves();
        let param_values = params.leaves();
        check_grads_fit(&paths, &updates, state.param_paths(), &param_values);
        // Every transformation's per-step scalars first, then the leaves'
        // work (see `Transform::step_values`).
        let step_values = self.transform.step_values(&state.count());
        let (updates, transforms) = self.transform.update(
            updates,
            state.transforms(),
            &Leaves {
                paths: &paths,
                tensors: &param_values,
            },
            &step_values,
        );
        // Optax saturates the count at i32::MAX; 2^31 steps are out of reach.
        let next = OptState::new(
            state.count() + 1.0,
            transforms,
            state.made_by().into(),
            state.param_paths().into(),
        );
        (grads.with_leaves(&updates), next)
    }
}

/// Panics naming the first leaf where the gradients differ from the
/// parameters the state was made for (by path) or from `params` (by shape
/// or dtype).
fn check_grads_fit(paths: &[String], grads: &[Tensor], state_paths: &[String], params: &[Tensor]) {
    for (i, path) in paths.iter().enumerate() {
        match state_paths.get(i) {
            Some(expected) if expected == path => {}
            Some(expected) => panic!(
                "optim::update: grads leaf {path:?} is where the optimizer state has {expected:?}: \
                 the gradients' tree differs from the parameters' the state was made for"
            ),
            None => panic!(
                "optim::update: grads leaf {path:?} is beyond the {} leaves the optimizer state \
                 was made for",
                state_paths.len()
            ),
        }
    }
    if let Some(missing) = state_paths.get(paths.len()) {
        panic!(
            "optim::update: the gradients have no leaf {missing:?}, which the optimizer state was \
             made for ({} leaves, not {})",
            state_paths.len(),
            paths.len()
        );
    }
    if params.len() != grads.len() {
        panic!(
            "optim::update: the parameters have {} leaves but the gradients {}",
            params.len(),
            grads.len()
        );
    }
    for ((path, g), p) in paths.iter().zip(grads).zip(params) {
        if g.shape() != p.shape() || g.dtype() != p.dtype() {
            panic!(
                "optim::update: grads leaf {path:?} is {} {:?} but the parameter is {} {:?}",
                g.dtype(),
                g.shape(),
                p.dtype(),
                p.shape()
            );
        }
    }
}

/// `params + updates`, leaf by leaf, in each parameter's dtype (Optax's
/// `apply_updates`). Panics naming the leaf path when the trees' leaves
/// differ in path or shape.
///
/// ```
/// use rune::prelude::*;
/// let p = (Tensor::ones(&[2], DType::F32), Tensor::ones(&[], DType::F64));
/// let u = (Tensor::full(&[2], 0.5, DType::F32), Tensor::full(&[], 0.25, DType::F64));
/// let q = rune::optim::apply_updates(&p, &u);
/// assert_eq!((q.0.to_vec::<f32>(), q.1.item::<f64>()), (vec![1.5, 1.5], 1.25));
/// ```
pub fn apply_updates<P: Ptree>(params: &P, updates: &P) -> P {
    let values = params.leaves();
    let deltas = updates.leaves();
    let fits = values.len() == deltas.len()
        && values
            .iter()
            .zip(&deltas)
            .all(|(p, u)| p.shape() == u.shape());
    if !fits {
        // The paths are only built to name the culprit.
        let (p_paths, u_paths) = (params.leaf_paths(), updates.leaf_paths());
        for (i, path) in p_paths.iter().enumerate() {
            match (u_paths.get(i), deltas.get(i)) {
                (Some(u_path), _) if u_path != path => panic!(
                    "optim::apply_updates: updates leaf {u_path:?} is where the parameters have {path:?}"
                ),
                (Some(_), Some(u)) if u.shape() != values[i].shape() => panic!(
                    "optim::apply_updates: updates leaf {path:?} has shape {:?} but the parameter {:?}",
                    u.shape(),
                    values[i].shape()
                ),
                (None, _) => panic!("optim::apply_updates: the updates have no leaf {path:?}"),
                _ => {}
            }
        }
        panic!(
            "optim::apply_updates: the updates have {} leaves but the parameters {}",
            deltas.len(),
            values.len()
        );
    }
    let sums: Vec<Tensor> = values
        .iter()
        .zip(&deltas)
        .map(|(p, u)| p + &u.cast(p.dtype()))
        .collect();
    params.with_leaves(&sums)
}
