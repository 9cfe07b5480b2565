//! The optimizer update alone (issue 56, "The optimizer step is fast"): a
//! GPT-like tree of 96 leaves (6 blocks of 16: layer norms, attention and
//! MLP weights and biases, d = 192: 2.67M F32 parameters), the update
//! `clip_by_global_norm(1.0)` then AdamW (warmup + cosine decay, weight
//! decay on the `.w` leaves) and `apply_updates`, timed as the other
//! benchmarks are (untimed warmup calls, then individually timed calls; min
//! and median), printed as JSON lines for `bench/optim.py`, which runs the
//! same step in JAX + Optax beside it.
//!
//! ```sh
//! cargo run --release -p rune --example bench_optim
//! ```
//!
//! - O1: clip + AdamW update and apply, under `jit`
//! - O2: the same, eager
//! - O3: `optim::adam` update and apply, eager
//! - O4: the examples' former hand-written Adam step, eager (O3's anchor), kept here
//! - O5: W19u's shape (`../shared/bench/generality`): 16 blocks of two
//!   [128, 128] layers and a norm, 96 leaves, 532,480 parameters; W19's
//!   optimizer (clip + AdamW, decay on every leaf), parameters and state fed
//!   back into the next call, under `jit`

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use rune::optim::{self, OptState, Optimizer};
use rune::prelude::*;
use rune::rng;

const BLOCKS: usize = 6;
const D: usize = 192;

/// The leaves' names and shapes: per block, two layer norms, the four
/// attention projections and the two MLP layers, each weight with its bias.
fn leaf_shapes() -> Vec<(String, Vec<usize>)> {
    let mut out = Vec::new();
    for i in 0..BLOCKS {
        let mut add =
            |name: &str, shape: &[usize]| out.push((format!("h{i}.{name}"), shape.to_vec()));
        add("ln1.scale", &[D]);
        add("ln1.bias", &[D]);
        for proj in ["q", "k", "v", "o"] {
            add(&format!("attn.{proj}.w"), &[D, D]);
            add(&format!("attn.{proj}.b"), &[D]);
        }
        add("ln2.scale", &[D]);
        add("ln2.bias", &[D]);
        add("mlp.fc.w", &[D, 4 * D]);
        add("mlp.fc.b", &[4 * D]);
        add("mlp.proj.w", &[4 * D, D]);
        add("mlp.proj.b", &[D]);
    }
    out
}

/// A tree of the shapes, normal draws times `std` from `seed`.
fn tree(seed: u64, std: f64) -> Tree {
    let shapes = leaf_shapes();
    let keys = rng::split(&rng::key(seed), shapes.len());
    Tree::dict(shapes.iter().enumerate().map(|(i, (name, shape))| {
        (
            name.clone(),
            Tree::from(rng::normal(&keys.get(i), shape, DType::F32) * std),
        )
    }))
}

/// W19u's leaves: per block, `l1` and `l2` (`w` [128, 128], `b` [128]) and
/// `norm` (`scale`, `bias` [128]).
fn w19u_tree(seed: u64, std: f64) -> Tree {
    const W19U_BLOCKS: usize = 16;
    const W19U_D: usize = 128;
    let keys = rng::split(&rng::key(seed), W19U_BLOCKS * 6);
    let mut k = 0;
    let mut draw = |shape: &[usize]| {
        k += 1;
        Tree::from(rng::normal(&keys.get(k - 1), shape, DType::F32) * std)
    };
    let (d, dd) = ([W19U_D], [W19U_D, W19U_D]);
    Tree::list((0..W19U_BLOCKS).map(|_| {
        Tree::dict([
            ("l1", Tree::dict([("w", draw(&dd)), ("b", draw(&d))])),
            ("l2", Tree::dict([("w", draw(&dd)), ("b", draw(&d))])),
            (
                "norm",
                Tree::dict([("scale", draw(&d)), ("bias", draw(&d))]),
            ),
        ])
    }))
}

/// W19's optimizer: clipping, then AdamW with weight decay on every leaf.
fn w19_optimizer() -> Optimizer {
    optim::chain(vec![
        optim::clip_by_global_norm(1.0),
        optim::adamw(
            optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5),
            optim::AdamWOpts {
                weight_decay: 0.1,
                ..Default::default()
            },
        ),
    ])
}

fn clip_adamw() -> Optimizer {
    optim::chain(vec![
        optim::clip_by_global_norm(1.0),
        optim::adamw(
            optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5),
            optim::AdamWOpts {
                weight_decay: 0.1,
                mask: Some(optim::mask(|path: &str| path.ends_with(".w"))),
                ..Default::default()
            },
        ),
    ])
}

fn step(opt: &Optimizer, params: &Tree, state: &OptState, grads: &Tree) -> (Tree, OptState) {
    let (updates, state) = opt.update(grads, state, params);
    (optim::apply_updates(params, &updates), state)
}

fn main() {
    let params = tree(0, 0.02);
    let grads = tree(1, 0.01);
    assert_eq!(params.num_leaves(), 96);
    let opt = clip_adamw();
    let state = opt.init(&params);

    let jitted = jit(|(p, s, g): &(Tree, OptState, Tree)| step(&opt, p, s, g));
    let args = (params.clone(), state.clone(), grads.clone());
    emit(
        "O1",
        "clip_by_global_norm + adamw update and apply, 96 leaves, jit",
        "ms",
        bench(|| jitted.call(&args), 3, 30),
    );
    emit(
        "O2",
        "clip_by_global_norm + adamw update and apply, 96 leaves, eager",
        "ms",
        bench(|| step(&opt, &params, &state, &grads), 2, 10),
    );

    let adam = optim::adam(1e-3, optim::AdamOpts::default());
    let adam_state = adam.init(&params);
    emit(
        "O3",
        "optim::adam update and apply, 96 leaves, eager",
        "ms",
        bench(|| step(&adam, &params, &adam_state, &grads), 2, 10),
    );
    let w19 = w19_optimizer();
    let mut w19u_params = w19u_tree(2, 1.0 / 128f64.sqrt());
    assert_eq!(w19u_params.num_leaves(), 96);
    let w19u_grads = w19u_tree(3, 1.0);
    let mut w19u_state = w19.init(&w19u_params);
    let w19u_step = jit(|(p, s, g): &(Tree, OptState, Tree)| step(&w19, p, s, g));
    emit(
        "O5",
        "W19u: clip_by_global_norm + adamw update and apply, 96 leaves of 128 and 128x128, jit, fed back",
        "ms",
        bench(
            || {
                let args = (w19u_params.clone(), w19u_state.clone(), w19u_grads.clone());
                (w19u_params, w19u_state) = w19u_step.call(&args);
            },
            20,
            500,
        ),
    );
    let (m, v) = (zeros(&params), zeros(&params));
    emit(
        "O4",
        "hand-written Adam step (the examples' former common/adam.rs), 96 leaves, eager",
        "ms",
        bench(
            || hand_written_adam(&params, &m, &v, &grads, 1.0, 1e-3),
            2,
            10,
        ),
    );
}

/// A tree of zeros shaped as `t`.
fn zeros<P: Ptree>(t: &P) -> P {
    t.map_leaves(&mut |x| x.zeros_like())
}

/// O4's anchor: the Adam step the examples carried before `rune::optim`
/// (step `t`, step size corrected by `sqrt(1 - b2^t) / (1 - b1^t)`): new
/// parameters and moments.
fn hand_written_adam<P: Ptree>(p: &P, m: &P, v: &P, g: &P, t: f64, lr: f64) -> (P, P, P) {
    let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8);
    let lr = (1.0 - b2.powf(t)).sqrt() / (1.0 - b1.powf(t)) * lr;
    let m = m.map2_leaves(g, &mut |m, g| m * b1 + g * (1.0 - b1));
    let v = v.map2_leaves(g, &mut |v, g| v * b2 + g.square() * (1.0 - b2));
    let steps = m.map2_leaves(&v, &mut |m, v| m * lr / (v.sqrt() + eps));
    (p.map2_leaves(&steps, &mut |p, s| p - s), m, v)
}
