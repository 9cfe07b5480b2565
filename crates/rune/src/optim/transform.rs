//! The gradient transformations each optimizer is a chain of (Optax's
//! building blocks): `scale`, `scale_by_learning_rate`, `scale_by_adam`,
//! `scale_by_lion`, `scale_by_rms`, `scale_by_stddev`, `scale_by_rss`,
//! `trace`, `add_decayed_weights`, and the [`Transform`] trait they
//! implement. Clipping is in `clipping.rs`, the combinators (`chain`,
//! `masked`, `multi_steps`) in `combine.rs`.
//!
//! Each works on the flat list of leaves, one tensor operation per leaf and
//! term: under `jit` the compiler fuses a leaf's terms into one kernel, and
//! nothing reads a value back to the host, so one trace serves every step.

use super::schedule::Schedule;
use super::state::{empty, field, fields, per_leaf, per_leaf_tensors, Leaves};
use super::{masked, Mask, Optimizer};
use nx::{DType, Tensor, Tree};
use std::fmt::Debug;

/// One gradient transformation: Optax's `GradientTransformation`, over
/// the leaves of the parameter tree in traversal order.
pub(crate) trait Transform: Debug + Send + Sync {
    /// What it is, without its hyper-parameters (`"scale_by_adam"`,
    /// `"chain(clip, scale)"`): a state made by a transformation of another
    /// kind is refused by `update`.
    fn kind(&self) -> String;

    /// Its state for `params`; stateless transformations keep the default,
    /// an empty tree.
    fn init(&self, _params: &Leaves<'_>) -> Tree {
        empty()
    }

    /// The values of this step that depend on the count alone (a
    /// schedule's value, bias corrections), at `count` (the number of
    /// updates before this one: an `I32` tensor, 0-d outside `vmap`).
    ///
    /// Computed for every transformation before any leaf's update: under
    /// `jit`, tolk merges a leaf's elementwise passes (moments, update,
    /// parameter) into one loop only when every value they read exists
    /// before the first of them, so a schedule evaluated after Adam's
    /// moments would cost each leaf two more passes over memory.
    fn step_values(&self, _count: &Tensor) -> Tree {
        empty()
    }

    /// The transformed `updates` and the next state, given this step's
    /// `step_values`.
    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree);
}

/// Item `i` of a list of step values (made by the same transformation's
/// `step_values`).
pub(crate) fn step_value(values: &Tree, i: usize) -> &Tensor {
    values
        .at(i)
        .and_then(Tree::as_tensor)
        .expect("optim: step values are made by the transformation that reads them")
}

/// Zeros like each parameter leaf.
fn zeros_like_each(params: &Leaves<'_>) -> Tree {
    per_leaf(
        params.paths,
        params.tensors.iter().map(Tensor::zeros_like).collect(),
    )
}

/// `value` like each parameter leaf.
fn full_like_each(params: &Leaves<'_>, value: f64) -> Tree {
    per_leaf(
        params.paths,
        params.tensors.iter().map(|p| p.full_like(value)).collect(),
    )
}

/// Optax's `update_moment` (order 1): `(1 - decay)·g + decay·m`.
fn ema(g: &Tensor, m: &Tensor, decay: f64) -> Tensor {
    g * (1.0 - decay) + m * decay
}

/// Optax's `update_moment_per_elem_norm` (order 2, real): `(1 - decay)·g² + decay·v`.
fn ema_of_square(g: &Tensor, v: &Tensor, decay: f64) -> Tensor {
    g.square() * (1.0 - decay) + v * decay
}

/// `1 - decay^t` at the step after `count`, as an F32 tensor (Optax's
/// bias correction, with its count incremented first).
fn bias_correction(decay: f64, count: &Tensor) -> Tensor {
    let t = (count + 1.0).cast(DType::F32);
    1.0 - t.scalar_like(decay).pow(&t)
}

// ---------------------------------------------------------------------------
// Scaling
// ---------------------------------------------------------------------------

/// Multiplies every update by a number.
#[derive(Debug)]
struct Scale {
    factor: f64,
}

impl Transform for Scale {
    fn kind(&self) -> String {
        "scale".into()
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        _: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let scaled = updates.iter().map(|g| g * self.factor).collect();
        (scaled, state.clone())
    }
}

/// Every update times `factor` (Optax's `scale`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
/// let opt = optim::scale(-0.5);
/// let (u, _) = opt.update(&p, &opt.init(&p), &p);
/// assert_eq!(u.to_vec::<f32>(), vec![-0.5, -1.0]);
/// ```
pub fn scale(factor: f64) -> Optimizer {
    Optimizer::new(Scale { factor })
}

/// Multiplies every update by `-lr(count)`.
#[derive(Debug)]
struct ScaleByLearningRate {
    lr: Schedule,
}

impl Transform for ScaleByLearningRate {
    fn kind(&self) -> String {
        "scale_by_learning_rate".into()
    }

    fn step_values(&self, count: &Tensor) -> Tree {
        match self.lr.as_constant() {
            Some(_) => empty(),
            None => Tree::List(vec![Tree::Tensor(-self.lr.at_count(count))]),
        }
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        _: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let scaled = match self.lr.as_constant() {
            // Optax's `scale(-lr)`: the number in each leaf's dtype.
            Some(lr) => updates.iter().map(|g| g * -lr).collect(),
            // Optax's `scale_by_schedule`: the F32 value cast to each leaf's.
            None => {
                let step = step_value(step_values, 0);
                updates.iter().map(|g| g * &step.cast(g.dtype())).collect()
            }
        };
        (scaled, state.clone())
    }
}

/// Every update times `-lr` at the state's step count: descent by the
/// learning rate (Optax's `scale_by_learning_rate`). The schedule is
/// evaluated on the count as a tensor, so a compiled step serves every step.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::from_slice(&[2.0f32], &[1]);
/// let opt = optim::scale_by_learning_rate(optim::linear_schedule(1.0, 0.0, 4));
/// let s = opt.init(&p);
/// let (u0, s) = opt.update(&p, &s, &p);
/// let (u1, _) = opt.update(&p, &s, &p);
/// assert_eq!((u0.to_vec::<f32>(), u1.to_vec::<f32>()), (vec![-2.0], vec![-1.5]));
/// ```
pub fn scale_by_learning_rate(lr: impl Into<Schedule>) -> Optimizer {
    Optimizer::new(ScaleByLearningRate { lr: lr.into() })
}

// ---------------------------------------------------------------------------
// Moments
// ---------------------------------------------------------------------------

/// Adam's hyper-parameters (Optax's defaults), for [`adam`](super::adam)
/// and [`scale_by_adam`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamOpts {
    /// The first moment's decay (0.9).
    pub b1: f64,
    /// The second moment's decay (0.999).
    pub b2: f64,
    /// Added to the root of the second moment (1e-8; outside the sqrt).
    pub eps: f64,
}

impl Default for AdamOpts {
    fn default() -> Self {
        AdamOpts {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
        }
    }
}

#[derive(Debug)]
struct ScaleByAdam {
    opts: AdamOpts,
}

impl Transform for ScaleByAdam {
    fn kind(&self) -> String {
        "scale_by_adam".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![
            ("mu", zeros_like_each(params)),
            ("nu", zeros_like_each(params)),
        ])
    }

    fn step_values(&self, count: &Tensor) -> Tree {
        let AdamOpts { b1, b2, .. } = self.opts;
        Tree::List(vec![
            Tree::Tensor(bias_correction(b1, count)),
            Tree::Tensor(bias_correction(b2, count)),
        ])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        step_values: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let AdamOpts { b1, b2, eps } = self.opts;
        let owner = "scale_by_adam";
        let mu = per_leaf_tensors(field(state, "mu", owner), params.paths, owner);
        let nu = per_leaf_tensors(field(state, "nu", owner), params.paths, owner);
        let (correction1, correction2) = (step_value(step_values, 0), step_value(step_values, 1));
        let mut new_mu = Vec::with_capacity(updates.len());
        let mut new_nu = Vec::with_capacity(updates.len());
        let mut out = Vec::with_capacity(updates.len());
        for ((g, m), v) in updates.iter().zip(&mu).zip(&nu) {
            let m = ema(g, m, b1);
            let v = ema_of_square(g, v, b2);
            let m_hat = &m / &correction1.cast(g.dtype());
            let v_hat = &v / &correction2.cast(g.dtype());
            out.push(m_hat / (v_hat.sqrt() + eps));
            new_mu.push(m);
            new_nu.push(v);
        }
        let state = fields(vec![
            ("mu", per_leaf(params.paths, new_mu)),
            ("nu", per_leaf(params.paths, new_nu)),
        ]);
        (out, state)
    }
}

/// Adam's scaling without the learning rate: bias-corrected first moment
/// over the root of the bias-corrected second moment plus `eps` (Optax's
/// `scale_by_adam`; state `mu`, `nu`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[3.0f32, -0.5], &[2]);
/// let opt = optim::scale_by_adam(optim::AdamOpts::default());
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// // The first step is g / (|g| + eps): the sign (up to the F32 rounding
/// // of the bias correction 1 - 0.999).
/// assert!(u.to_vec::<f32>().iter().zip([1.0, -1.0]).all(|(a, b)| (a - b).abs() < 1e-4));
/// ```
pub fn scale_by_adam(opts: AdamOpts) -> Optimizer {
    Optimizer::new(ScaleByAdam { opts })
}

#[derive(Debug)]
struct ScaleByLion {
    b1: f64,
    b2: f64,
}

impl Transform for ScaleByLion {
    fn kind(&self) -> String {
        "scale_by_lion".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![("mu", zeros_like_each(params))])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "scale_by_lion";
        let mu = per_leaf_tensors(field(state, "mu", owner), params.paths, owner);
        let out = updates
            .iter()
            .zip(&mu)
            .map(|(g, m)| ema(g, m, self.b1).sign())
            .collect();
        let new_mu = updates
            .iter()
            .zip(&mu)
            .map(|(g, m)| ema(g, m, self.b2))
            .collect();
        (out, fields(vec![("mu", per_leaf(params.paths, new_mu))]))
    }
}

/// Lion's scaling without the learning rate: the sign of
/// `(1 - b1)·g + b1·mu`, then `mu` moves to `(1 - b2)·g + b2·mu` (Optax's
/// `scale_by_lion`; state `mu`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[0.2f32, -3.0, 0.0], &[3]);
/// let opt = optim::scale_by_lion(0.9, 0.99);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert_eq!(u.to_vec::<f32>(), vec![1.0, -1.0, 0.0]);
/// ```
pub fn scale_by_lion(b1: f64, b2: f64) -> Optimizer {
    Optimizer::new(ScaleByLion { b1, b2 })
}

#[derive(Debug)]
struct ScaleByRms {
    decay: f64,
    eps: f64,
}

impl Transform for ScaleByRms {
    fn kind(&self) -> String {
        "scale_by_rms".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![("nu", zeros_like_each(params))])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "scale_by_rms";
        let nu = per_leaf_tensors(field(state, "nu", owner), params.paths, owner);
        let new_nu: Vec<Tensor> = updates
            .iter()
            .zip(&nu)
            .map(|(g, v)| ema_of_square(g, v, self.decay))
            .collect();
        let out = updates
            .iter()
            .zip(&new_nu)
            .map(|(g, v)| (v + self.eps).rsqrt() * g)
            .collect();
        (out, fields(vec![("nu", per_leaf(params.paths, new_nu))]))
    }
}

/// RMSProp's scaling: `g / sqrt(nu + eps)` with `nu` the moving average of
/// `g²` (Optax's `scale_by_rms` with `initial_scale` 0 and `eps` inside the
/// root; state `nu`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[2.0f32], &[1]);
/// let opt = optim::scale_by_rms(0.75, 0.0);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert_eq!(u.to_vec::<f32>(), vec![2.0]); // g / sqrt(0.25 * g²)
/// ```
pub fn scale_by_rms(decay: f64, eps: f64) -> Optimizer {
    Optimizer::new(ScaleByRms { decay, eps })
}

#[derive(Debug)]
struct ScaleByStddev {
    decay: f64,
    eps: f64,
}

impl Transform for ScaleByStddev {
    fn kind(&self) -> String {
        "scale_by_stddev".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![
            ("mu", zeros_like_each(params)),
            ("nu", zeros_like_each(params)),
        ])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "scale_by_stddev";
        let mu = per_leaf_tensors(field(state, "mu", owner), params.paths, owner);
        let nu = per_leaf_tensors(field(state, "nu", owner), params.paths, owner);
        let new_mu: Vec<Tensor> = updates
            .iter()
            .zip(&mu)
            .map(|(g, m)| ema(g, m, self.decay))
            .collect();
        let new_nu: Vec<Tensor> = updates
            .iter()
            .zip(&nu)
            .map(|(g, v)| ema_of_square(g, v, self.decay))
            .collect();
        let out = updates
            .iter()
            .zip(new_mu.iter().zip(&new_nu))
            .map(|(g, (m, v))| (v - m.square() + self.eps).rsqrt() * g)
            .collect();
        let state = fields(vec![
            ("mu", per_leaf(params.paths, new_mu)),
            ("nu", per_leaf(params.paths, new_nu)),
        ]);
        (out, state)
    }
}

/// Centered RMSProp's scaling: `g / sqrt(nu - mu² + eps)` with `mu`, `nu`
/// the moving averages of `g` and `g²` (Optax's `scale_by_stddev`; state
/// `mu`, `nu`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[2.0f32], &[1]);
/// let opt = optim::scale_by_stddev(0.5, 0.0);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert_eq!(u.to_vec::<f32>(), vec![2.0]); // g / sqrt(0.5 g² - (0.5 g)²)
/// ```
pub fn scale_by_stddev(decay: f64, eps: f64) -> Optimizer {
    Optimizer::new(ScaleByStddev { decay, eps })
}

#[derive(Debug)]
struct ScaleByRss {
    initial_accumulator_value: f64,
    eps: f64,
}

impl Transform for ScaleByRss {
    fn kind(&self) -> String {
        "scale_by_rss".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![(
            "sum_of_squares",
            full_like_each(params, self.initial_accumulator_value),
        )])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "scale_by_rss";
        let sums = per_leaf_tensors(field(state, "sum_of_squares", owner), params.paths, owner);
        let new_sums: Vec<Tensor> = updates
            .iter()
            .zip(&sums)
            .map(|(g, s)| g.square() + s)
            .collect();
        let out = updates
            .iter()
            .zip(&new_sums)
            .map(|(g, s)| {
                let zero = s.scalar_like(0.0);
                let inverse_root =
                    Tensor::where_(&s.greater(&zero), &(s + self.eps).rsqrt(), &zero);
                inverse_root * g
            })
            .collect();
        (
            out,
            fields(vec![("sum_of_squares", per_leaf(params.paths, new_sums))]),
        )
    }
}

/// Adagrad's scaling: `g / sqrt(sum of g² + eps)`, the sum starting at
/// `initial_accumulator_value` (Optax's `scale_by_rss`; state
/// `sum_of_squares`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[3.0f32, 0.0], &[2]);
/// let opt = optim::scale_by_rss(0.0, 0.0);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert_eq!(u.to_vec::<f32>(), vec![1.0, 0.0]); // a zero sum gives 0, not NaN
/// ```
pub fn scale_by_rss(initial_accumulator_value: f64, eps: f64) -> Optimizer {
    Optimizer::new(ScaleByRss {
        initial_accumulator_value,
        eps,
    })
}

#[derive(Debug)]
struct Trace {
    decay: f64,
    nesterov: bool,
}

impl Transform for Trace {
    fn kind(&self) -> String {
        "trace".into()
    }

    fn init(&self, params: &Leaves<'_>) -> Tree {
        fields(vec![("trace", zeros_like_each(params))])
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let owner = "trace";
        let trace = per_leaf_tensors(field(state, "trace", owner), params.paths, owner);
        let new_trace: Vec<Tensor> = updates
            .iter()
            .zip(&trace)
            .map(|(g, t)| g + t * self.decay)
            .collect();
        let out = if self.nesterov {
            updates
                .iter()
                .zip(&new_trace)
                .map(|(g, t)| g + t * self.decay)
                .collect()
        } else {
            new_trace.clone()
        };
        (
            out,
            fields(vec![("trace", per_leaf(params.paths, new_trace))]),
        )
    }
}

/// Momentum: `t = g + decay·t`, the update `t` (or `g + decay·t` with
/// `nesterov`) (Optax's `trace`; state `trace`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[1.0f32], &[1]);
/// let opt = optim::trace(0.5, false);
/// let (u0, s) = opt.update(&g, &opt.init(&g), &g);
/// let (u1, _) = opt.update(&g, &s, &g);
/// assert_eq!((u0.to_vec::<f32>(), u1.to_vec::<f32>()), (vec![1.0], vec![1.5]));
/// ```
pub fn trace(decay: f64, nesterov: bool) -> Optimizer {
    Optimizer::new(Trace { decay, nesterov })
}

#[derive(Debug)]
struct AddDecayedWeights {
    weight_decay: f64,
}

impl Transform for AddDecayedWeights {
    fn kind(&self) -> String {
        "add_decayed_weights".into()
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        params: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        if self.weight_decay == 0.0 {
            // As Optax: a zero decay adds nothing (and costs nothing).
            return (updates, state.clone());
        }
        let out = updates
            .iter()
            .zip(params.tensors)
            .map(|(g, p)| g + p * self.weight_decay)
            .collect();
        (out, state.clone())
    }
}

/// Decoupled weight decay: `g + weight_decay·p`, on the leaves `mask`
/// selects when given (Optax's `add_decayed_weights`; with a mask it is
/// [`masked`]).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = (Tensor::from_slice(&[2.0f32], &[1]), Tensor::from_slice(&[2.0f32], &[1]));
/// let g = (Tensor::zeros(&[1], DType::F32), Tensor::zeros(&[1], DType::F32));
/// let opt = optim::add_decayed_weights(0.5, Some(optim::mask(|path| path == "0")));
/// let (u, _) = opt.update(&g, &opt.init(&p), &p);
/// assert_eq!((u.0.to_vec::<f32>(), u.1.to_vec::<f32>()), (vec![1.0], vec![0.0]));
/// ```
pub fn add_decayed_weights(weight_decay: f64, mask: Option<Mask>) -> Optimizer {
    let decay = Optimizer::new(AddDecayedWeights { weight_decay });
    match mask {
        Some(mask) => masked(decay, mask),
        None => decay,
    }
}
