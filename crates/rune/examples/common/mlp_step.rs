//! The flagship training step as first written (before `rune::optim`):
//! hand-written Adam on the spirals MLP (`spirals.rs`), kept for
//! `bench_generality`'s FLAGSHIP row (its JAX side, `bench/flagship_jax.py`,
//! is the same hand-written step) and the test that trains it on the
//! emulated CUDA device (`tests/cuda_emulated.rs`). `train_mlp` itself now
//! trains an `nn` MLP with `optim::adam`.

use rune::prelude::*;

use super::spirals::{loss, Mlp};

/// What the training step updates: the parameters and Adam's moments.
#[derive(Ptree, Clone)]
pub struct State {
    pub params: Mlp,
    pub m: Mlp, // first moments
    pub v: Mlp, // second moments
}

const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

/// One Adam step (Kingma and Ba, 2015) on a minibatch, written with
/// `map2_leaves` over the trees: returns the minibatch loss and the new
/// state. `lr` is the bias-corrected step size, a 0-d tensor so that the
/// jitted step is compiled once and fed a new value every step.
pub fn train_step((s, xb, yb, lr): &(State, Tensor, Tensor, Tensor)) -> (Tensor, State) {
    let (l, grads) = rune::value_and_grad(|p: &Mlp| loss(p, xb, yb), &s.params);
    let m =
        s.m.map2_leaves(&grads, &mut |m, g| m * BETA1 + g * (1.0 - BETA1));
    let v =
        s.v.map2_leaves(&grads, &mut |v, g| v * BETA2 + g.square() * (1.0 - BETA2));
    let steps = m.map2_leaves(&v, &mut |m, v| m * lr / (v.sqrt() + EPS));
    let params = s.params.map2_leaves(&steps, &mut |p, s| p - s);
    (l, State { params, m, v })
}

/// The step size of Adam step `t` (from 1) with the bias corrections:
/// `lr * sqrt(1 - b2^t) / (1 - b1^t)`.
pub fn adam_lr(lr: f64, t: i32) -> f64 {
    lr * (1.0 - BETA2.powi(t)).sqrt() / (1.0 - BETA1.powi(t))
}
