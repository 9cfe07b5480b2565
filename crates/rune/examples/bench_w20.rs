//! W20 (`../shared/bench/generality/`): a Megatron-style tensor-parallel MLP
//! training step, `psum(relu(x @ w1) @ w2, "model")` under
//! `rune::sharding::shard_map` over a mesh of two devices (`w1` split on
//! columns, `w2` on rows, `x` and `y` replicated), mean squared error,
//! `value_and_grad` outside `shard_map`, SGD (lr 0.1), all in one `jit`;
//! and W20-single, the same step on one device. Weights fed back; inputs
//! from the shared hash, so the first loss equals the shared one
//! (1.495932).
//!
//! ```sh
//! cargo run --release --example bench_w20 [-- REPS]
//! ```
//!
//! Prints `loss0`, `min_ms` (sharded) and `single_loss0`, `single_min_ms`
//! after 5 warm-up steps each. `bench/w20.py` runs it beside JAX. The first
//! version of `shard_map` computes the devices' blocks on the calling
//! device, so the sharded step is not yet parallel.

use std::time::Instant;

use rune::prelude::*;
use rune::sharding::{self, Mesh, ShardMapOpts, Spec};

#[path = "common/hashed.rs"]
mod hashed;
use hashed::hashed;

const N: usize = 256;
const D: usize = 512;
const F: usize = 2048;
const LR: f64 = 0.1;

type Weights = (Tensor, Tensor);

/// `min_ms` of `reps` steps after 5 warm-up ones, and the first loss.
fn time(step: &dyn Fn(&(Weights, Tensor, Tensor)) -> (Tensor, Weights), reps: usize) -> (f32, f64) {
    let args = (
        (
            hashed(22, &[D, F], 1.0 / (D as f64).sqrt()),
            hashed(23, &[F, D], 1.0 / (F as f64).sqrt()),
        ),
        hashed(20, &[N, D], 1.0),
        hashed(21, &[N, D], 1.0),
    );
    let (l, w) = step(&args);
    let loss0 = l.item::<f32>();
    let mut args = (w, args.1, args.2);
    let mut best = f64::INFINITY;
    for i in 0..5 + reps {
        let t0 = Instant::now();
        let (l, w) = step(&args);
        l.item::<f32>();
        if i >= 5 {
            best = best.min(t0.elapsed().as_secs_f64());
        }
        args.0 = w;
    }
    (loss0, best * 1e3)
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map_or(100, |s| s.parse().expect("REPS: a number"));
    let mesh = Mesh::new(&["CPU:1", "CPU:2"], &[("model", 2)]);
    let mlp = sharding::shard_map(
        |(x, w1, w2): &(Tensor, Tensor, Tensor)| {
            sharding::psum(&x.matmul(w1).relu().matmul(w2), "model")
        },
        &mesh,
        ShardMapOpts {
            in_specs: vec![
                Spec::replicated(),
                Spec::new(&[None, Some("model")]),
                Spec::new(&[Some("model"), None]),
            ],
            out_specs: vec![Spec::replicated()],
            ..Default::default()
        },
    );
    let sgd = |w: &Weights, g: &Weights| (&w.0 - &(&g.0 * LR), &w.1 - &(&g.1 * LR));
    let sharded = jit(|(w, x, y): &(Weights, Tensor, Tensor)| {
        let loss = |w: &Weights| {
            (mlp.call(&(x.clone(), w.0.clone(), w.1.clone())) - y)
                .square()
                .mean_all()
        };
        let (l, g) = value_and_grad(loss, w);
        (l, sgd(w, &g))
    });
    let single = jit(|(w, x, y): &(Weights, Tensor, Tensor)| {
        let loss = |w: &Weights| (x.matmul(&w.0).relu().matmul(&w.1) - y).square().mean_all();
        let (l, g) = value_and_grad(loss, w);
        (l, sgd(w, &g))
    });
    let (l0, ms) = time(&|a| sharded.call(a), reps);
    let (s0, sms) = time(&|a| single.call(a), reps);
    println!("loss0 {l0:.6}\nmin_ms {ms:.3}\nsingle_loss0 {s0:.6}\nsingle_min_ms {sms:.3}");
}
