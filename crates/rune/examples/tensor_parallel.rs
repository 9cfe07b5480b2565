//! The flagship MLP trained tensor-parallel on a 2x2 mesh (`data` x
//! `model`) with `rune::sharding::shard_map`, beside the same training on
//! one device: the loss curves agree.
//!
//! ```sh
//! cargo run --release --example tensor_parallel [-- --steps N]
//! ```
//!
//! Megatron's split of a 2-64-64-3 tanh MLP: the first layer's columns (and
//! bias) over `model`, the second layer's rows over `model` (each device's
//! partial product summed with `psum`), the last layer replicated; the
//! batch over `data`, the mean loss a `psum` over `data` of each device's
//! share. `grad` and `jit` apply outside `shard_map`; `optim::adam` updates
//! the global parameters. The two loss curves must agree to 1e-5 over the
//! first 200 steps (it exits non-zero otherwise); later, training amplifies
//! the rounding of the split products' different summation order. First version of `rune::sharding`: the four
//! devices' blocks are computed on the calling device.

use rune::prelude::*;
use rune::sharding::{self, Mesh, ShardMapOpts, Spec};
use rune::{nn, optim, rng};

#[path = "common/progress.rs"]
mod progress;
#[path = "common/spirals.rs"]
#[allow(dead_code)] // its hand-written MLP is data_parallel's
mod spirals;
#[path = "common/splitmix.rs"]
mod splitmix;

const HIDDEN: usize = 64;
const BATCH: usize = 128;
const STEPS: usize = 1000;
/// Steps over which the two curves must agree to 1e-5 (relative): later,
/// training amplifies the rounding differences of a different summation
/// order (the split products), as it would between two BLAS libraries.
const CHECKED: usize = 200;

#[derive(Ptree, Clone)]
struct Mlp {
    l1: nn::Linear,
    l2: nn::Linear,
    l3: nn::Linear,
}

/// The mean cross-entropy on one device, as reference.
fn loss_one(m: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let h = m.l1.forward(x).tanh();
    let h = m.l2.forward(&h).tanh();
    nn::cross_entropy(&m.l3.forward(&h), y).mean_all()
}

fn main() {
    let steps = std::env::args()
        .skip_while(|a| a != "--steps")
        .nth(1)
        .map_or(STEPS, |s| s.parse().expect("--steps N"));
    let mut rng = splitmix::SplitMix(42);
    let (x, y) = spirals::spirals(&mut rng);
    let k = rng::split(&rng::key(0), 3);
    let model = Mlp {
        l1: nn::Linear::new(&k.get(0), 2, HIDDEN),
        l2: nn::Linear::new(&k.get(1), HIDDEN, HIDDEN),
        l3: nn::Linear::new(&k.get(2), HIDDEN, spirals::CLASSES),
    };

    let mesh = Mesh::new(
        &["CPU:1", "CPU:2", "CPU:3", "CPU:4"],
        &[("data", 2), ("model", 2)],
    );
    let (cols, rows, rep) = (
        Spec::new(&[None, Some("model")]),
        Spec::new(&[Some("model"), None]),
        Spec::replicated(),
    );
    let batch = Spec::new(&[Some("data")]);
    // The parameters' leaves in order: l1.w, l1.b, l2.w, l2.b, l3.w, l3.b;
    // then the batch.
    let in_specs = vec![
        cols,
        Spec::new(&[Some("model")]),
        rows,
        rep.clone(),
        rep.clone(),
        rep.clone(),
        batch.clone(),
        batch,
    ];
    let loss_tp = sharding::shard_map(
        |(m, x, y): &(Mlp, Tensor, Tensor)| {
            let h = m.l1.forward(x).tanh(); // [B/2, H/2]: this device's columns
            let partial = h.matmul(&m.l2.w); // [B/2, H]: its rows' share
            let h = (sharding::psum(&partial, "model") + &m.l2.b).tanh();
            let logits = m.l3.forward(&h);
            let share = nn::cross_entropy(&logits, y).sum_all() / BATCH as f64;
            sharding::psum(&share, "data") // the global mean
        },
        &mesh,
        ShardMapOpts {
            in_specs,
            out_specs: vec![rep],
            ..Default::default()
        },
    );

    let opt = optim::adam(1e-2, Default::default());
    type Args = (Mlp, optim::OptState, Tensor, Tensor);
    let step = |loss: &dyn Fn(&Mlp, &Tensor, &Tensor) -> Tensor, (m, s, xb, yb): &Args| {
        let (l, g) = value_and_grad(|m: &Mlp| loss(m, xb, yb), m);
        let (u, s) = opt.update(&g, s, m);
        (l, optim::apply_updates(m, &u), s)
    };
    let tp_loss =
        |m: &Mlp, xb: &Tensor, yb: &Tensor| loss_tp.call(&(m.clone(), xb.clone(), yb.clone()));
    let step_tp = jit(|a: &Args| step(&tp_loss, a));
    let step_one = jit(|a: &Args| step(&loss_one, a));

    let (mut tp, mut one) = (
        (model.clone(), opt.init(&model)),
        (model.clone(), opt.init(&model)),
    );
    let n = x.shape()[0];
    let bar = progress::bar(steps);
    let (mut worst_checked, mut worst) = (0f64, 0f64);
    for i in 0..steps {
        let idx: Vec<i64> = (0..BATCH)
            .map(|j| ((i * BATCH + j) * 7919 % n) as i64)
            .collect();
        let idx = Tensor::from_slice(&idx, &[BATCH]);
        let (xb, yb) = (x.take(&idx, 0), y.take(&idx, 0));
        let (l_tp, m, s) = step_tp.call(&(tp.0, tp.1, xb.clone(), yb.clone()));
        tp = (m, s);
        let (l_one, m, s) = step_one.call(&(one.0, one.1, xb, yb));
        one = (m, s);
        let (a, b) = (l_tp.item::<f32>() as f64, l_one.item::<f32>() as f64);
        let diff = (a - b).abs() / b.abs().max(1e-6);
        worst = worst.max(diff);
        if i < CHECKED {
            worst_checked = worst_checked.max(diff);
        }
        bar.set_message(format!("loss: tensor-parallel {a:.5}, one device {b:.5}"));
        bar.inc(1);
        if bar.is_hidden() && (i + 1) % 50 == 0 {
            println!(
                "step {:>4}  loss: tensor-parallel {a:.5}, one device {b:.5}",
                i + 1
            );
        }
    }
    bar.finish();
    println!(
        "{steps} steps on a 2x2 mesh (data x model) and on one device: largest relative loss \
         difference {worst_checked:.2e} over the first {CHECKED} steps, {worst:.2e} over all"
    );
    if worst_checked > 1e-5 {
        eprintln!("the tensor-parallel loss curve differs from one device's");
        std::process::exit(1);
    }
}
