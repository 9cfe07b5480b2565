//! W15 of the generality workloads (`shared/bench/generality`): one SGD
//! step of the pre-LN causal transformer block at B 8, T 128, D 256, 8
//! heads of 32, MLP 1024; shared by `bench_generality` and `bench_gpu`.
//! The includer also includes `common/transformer.rs` as `transformer` and
//! `common/splitmix.rs` as `splitmix`.

use crate::splitmix::SplitMix;
use crate::transformer::{sgd_step, Block, Dims};
use rune::prelude::*;

/// W15's sizes.
pub const W15: Dims = Dims {
    b: 8,
    t: 128,
    d: 256,
    h: 8,
    f: 1024,
};

/// W15's parameters, input and target (fixed seed; the README's order:
/// `wq wk wv wo w1 w2`, then `x` and `tgt`).
pub fn w15_inputs() -> (Block, Tensor, Tensor) {
    let Dims { b, t, d, f, .. } = W15;
    let mut rng = SplitMix(15);
    let mut w = |i: usize, o: usize| rng.normal_tensor(&[i, o], 1.0 / (i as f32).sqrt());
    let (wq, wk, wv, wo, w1, w2) = (w(d, d), w(d, d), w(d, d), w(d, d), w(d, f), w(f, d));
    let p = Block {
        wq,
        wk,
        wv,
        wo,
        w1,
        w2,
        b1: Tensor::zeros(&[f], DType::F32),
        b2: Tensor::zeros(&[d], DType::F32),
        g1: Tensor::ones(&[d], DType::F32),
        g2: Tensor::ones(&[d], DType::F32),
    };
    let x = rng.normal_tensor(&[b, t, d], 1.0);
    let tgt = rng.normal_tensor(&[b, t, d], 1.0);
    (p, x, tgt)
}

/// The step on the parameters, `x` and `tgt` captured (as JAX's closure).
pub fn w15_fn(x: &Tensor, tgt: &Tensor) -> impl Fn(&Block) -> (Tensor, Block) {
    let (x, tgt) = (x.clone(), tgt.clone());
    move |p: &Block| sgd_step(p, &x, &tgt, W15)
}
