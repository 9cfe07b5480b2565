//! Differentially private SGD (Abadi et al., 2016) with per-example
//! gradients from `vmap` of `grad`:
//!
//! ```sh
//! cargo run --release --example per_example_grads
//! ```
//!
//! - the data set (3 Gaussian classes in 10 dimensions, one center per
//!   class) is generated from a fixed seed with nx's implicit RNG and split
//!   into a training and a held-out set;
//! - the model is a 10-32-3 tanh MLP (a `#[derive(Ptree)]` struct) whose loss
//!   is written for ONE example (`x: [10]`, `y: []`);
//! - each step maps `rune::grad` of that loss over the examples of a batch
//!   with `rune::vmap_with` (parameters unmapped: `None` for each of their
//!   leaves; inputs and labels mapped on axis 0): every gradient leaf comes
//!   back with a leading batch axis;
//! - each example's gradient is clipped to L2 norm `CLIP` (the norm over all
//!   the leaves of that example), the clipped gradients are summed, Gaussian
//!   noise of standard deviation `NOISE_MULTIPLIER * CLIP` is added (nx's
//!   implicit RNG), the sum is divided by the batch size, and plain SGD
//!   (`Ptree::map2_leaves`) takes the step;
//! - before training, the vmapped per-example gradients are checked against
//!   a loop of single-example `rune::grad` calls (and both are timed);
//! - at the end the held-out accuracy is printed (the example fails if it is
//!   under 90%), with the runtime.
//!
//! No privacy accounting is done here: the example prints the noise
//! multiplier, the sampling rate and the number of steps, which is what an
//! accountant (moments / RDP) takes to compute (epsilon, delta). Batches are
//! drawn by shuffling each epoch, not by the Poisson sampling that the usual
//! analysis assumes.

use std::time::Instant;

use rune::prelude::*;

#[path = "common/splitmix.rs"]
mod splitmix;
use rune::VmapOpts;
use splitmix::SplitMix;

const FEATURES: usize = 10;
const HIDDEN: usize = 32;
const CLASSES: usize = 3;
const TRAIN: usize = 3000;
const HELD_OUT: usize = 1000;
/// Distance of each class center from the origin (along its own axis).
const SEPARATION: f64 = 3.0;
const BATCH: usize = 100;
const EPOCHS: usize = 10;
const LEARNING_RATE: f64 = 0.5;
/// The L2 bound on each example's gradient.
const CLIP: f64 = 1.0;
/// Noise standard deviation, in units of `CLIP`.
const NOISE_MULTIPLIER: f64 = 1.1;
const SEED: u64 = 7;
const MIN_ACCURACY: f64 = 0.90;

/// A FEATURES-HIDDEN-CLASSES perceptron with a tanh hidden layer.
#[derive(Ptree, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl Mlp {
    fn init() -> Mlp {
        let dense = |fan_in: usize, fan_out: usize| {
            let w = Tensor::randn(&[fan_in, fan_out], DType::F32) * (1.0 / fan_in as f64).sqrt();
            (w, Tensor::zeros(&[fan_out], DType::F32))
        };
        let (w1, b1) = dense(FEATURES, HIDDEN);
        let (w2, b2) = dense(HIDDEN, CLASSES);
        Mlp { w1, b1, w2, b2 }
    }

    /// Logits `[..., CLASSES]` for inputs `[..., FEATURES]` (one example or
    /// a batch: `matmul` follows numpy's rules for a 1-D left operand).
    fn forward(&self, x: &Tensor) -> Tensor {
        let h = (x.matmul(&self.w1) + &self.b1).tanh();
        h.matmul(&self.w2) + &self.b2
    }
}

/// Cross-entropy of ONE example: `x: [FEATURES]` (F32), `y: []` (I32).
fn loss_single(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let log_probs = p.forward(x).log_softmax(-1); // [CLASSES]
    -log_probs.take_along_axis(&y.reshape(&[1]), 0).sum_all()
}

/// The gradient of `loss_single` for every example of `(x [B, F], y [B])`:
/// each leaf of the result is the parameter's shape with `B` in front.
fn per_example_grads(p: &Mlp, x: &Tensor, y: &Tensor) -> Mlp {
    let mut in_axes = vec![None; p.num_leaves()]; // parameters: shared, not mapped
    in_axes.extend([Some(0), Some(0)]); // x and y: mapped on axis 0
    rune::vmap_with(
        |(p, x, y): &(Mlp, Tensor, Tensor)| rune::grad(|p: &Mlp| loss_single(p, x, y), p),
        &(p.clone(), x.clone(), y.clone()),
        VmapOpts {
            in_axes: Some(in_axes),
            out_axis: 0,
        },
    )
}

/// `g` (leaves `[B, ...]`) with each example's gradient scaled to L2 norm
/// at most `CLIP`, the norm taken over all the leaves of that example;
/// also returns how many examples were clipped.
fn clip_per_example(g: &Mlp) -> (Mlp, usize) {
    let batch = g.w1.shape()[0];
    let squared_norms = g
        .leaves()
        .iter()
        .map(|t| {
            t.reshape(&[batch, t.numel() / batch])
                .square()
                .sum(&[1], false)
        })
        .reduce(|a, b| a + b)
        .expect("the model has leaves");
    let norms = squared_norms.sqrt(); // [B]
                                      // CLIP / max(norm, CLIP): 1 for examples within the bound
    let scale = norms.maximum(&norms.full_like(CLIP)).recip() * CLIP;
    let clipped = norms
        .greater(&norms.full_like(CLIP))
        .cast(DType::F32)
        .sum_all();
    let clipped = clipped.item::<f32>() as usize;
    let g = g.map_leaves(&mut |t| {
        let mut shape = vec![1; t.ndim()];
        shape[0] = batch;
        t * scale.reshape(&shape)
    });
    (g, clipped)
}

/// The private gradient: clipped per-example gradients summed, Gaussian
/// noise (std `NOISE_MULTIPLIER * CLIP`) added to every coordinate, divided
/// by the batch size.
fn private_gradient(g: &Mlp) -> (Mlp, usize) {
    let batch = g.w1.shape()[0] as f64;
    let (clipped, n_clipped) = clip_per_example(g);
    let sigma = NOISE_MULTIPLIER * CLIP;
    let noisy = clipped.map_leaves(&mut |t| {
        let sum = t.sum(&[0], false);
        (&sum + Tensor::randn(sum.shape(), sum.dtype()) * sigma) * (1.0 / batch)
    });
    (noisy, n_clipped)
}

/// `FEATURES`-dimensional points around `CLASSES` centers (class `k` at
/// `SEPARATION` along axis `k`, unit variance): points `[n, FEATURES]` (F32)
/// and labels `[n]` (I32), in random order.
fn blobs(n: usize) -> (Tensor, Tensor) {
    let y = Tensor::randint(0, CLASSES as i64, &[n], DType::I32);
    let centers =
        Tensor::eye(CLASSES, DType::F32).pad(&[(0, 0), (0, FEATURES - CLASSES)], 0.0) * SEPARATION; // [CLASSES, FEATURES]
    let x = centers.take(&y, 0) + Tensor::randn(&[n, FEATURES], DType::F32);
    (x, y)
}

fn accuracy(p: &Mlp, x: &Tensor, y: &Tensor) -> f64 {
    let predicted = p.forward(x).argmax(-1, false);
    predicted.equal(y).cast(DType::F32).mean_all().item::<f32>() as f64
}

/// The vmapped per-example gradients against a loop of single-example
/// `grad` calls on the same batch; returns the largest absolute difference.
fn check_against_loop(p: &Mlp, x: &Tensor, y: &Tensor) -> f32 {
    let t0 = Instant::now();
    let batched = per_example_grads(p, x, y);
    let batched: Vec<Vec<f32>> = batched.leaves().iter().map(|t| t.to_vec()).collect();
    let t_vmap = t0.elapsed();

    let n = x.shape()[0];
    let t0 = Instant::now();
    let singles: Vec<Mlp> = (0..n)
        .map(|i| rune::grad(|p: &Mlp| loss_single(p, &x.get(i), &y.get(i)), p))
        .collect();
    let t_loop = t0.elapsed();

    let mut max_diff = 0f32;
    let mut max_abs = 0f32;
    for (i, g) in singles.iter().enumerate() {
        for (leaf, single) in g.leaves().iter().enumerate() {
            let single = single.to_vec::<f32>();
            let k = single.len();
            let row = &batched[leaf][i * k..(i + 1) * k];
            for (a, b) in row.iter().zip(&single) {
                max_diff = max_diff.max((a - b).abs());
                max_abs = max_abs.max(b.abs());
            }
        }
    }
    println!(
        "check: vmap(grad) over {n} examples vs a loop of {n} single-example grads: \
         max |diff| = {max_diff:.3e} (largest gradient entry {max_abs:.3}); \
         vmap {:.2} ms, loop {:.2} ms ({:.1}x)",
        t_vmap.as_secs_f64() * 1e3,
        t_loop.as_secs_f64() * 1e3,
        t_loop.as_secs_f64() / t_vmap.as_secs_f64()
    );
    max_diff
}

fn main() {
    let start = Instant::now();
    nx::seed(SEED);
    let mut rng = SplitMix(SEED);

    let (x_train, y_train) = blobs(TRAIN);
    let (x_test, y_test) = blobs(HELD_OUT);
    println!(
        "data: {CLASSES} Gaussian classes in {FEATURES} dimensions (centers {SEPARATION} apart \
         from the origin), {TRAIN} train, {HELD_OUT} held out"
    );
    let mut params = Mlp::init();
    println!(
        "model: MLP {FEATURES}-{HIDDEN}-{CLASSES} (tanh), {} parameters in {} tensors",
        params.leaves().iter().map(|t| t.numel()).sum::<usize>(),
        params.num_leaves()
    );

    let max_diff = check_against_loop(
        &params,
        &x_train.narrow(0, 0, BATCH),
        &y_train.narrow(0, 0, BATCH),
    );
    assert!(
        max_diff < 1e-5,
        "vmapped per-example gradients differ from single-example grads by {max_diff}"
    );

    let steps_per_epoch = TRAIN / BATCH;
    let steps = EPOCHS * steps_per_epoch;
    println!(
        "DP-SGD: batch {BATCH} (sampling rate {:.3}), {steps} steps, clip {CLIP}, noise \
         multiplier {NOISE_MULTIPLIER} (noise std {:.2} on each coordinate of the summed gradient), lr {LEARNING_RATE}",
        BATCH as f64 / TRAIN as f64,
        NOISE_MULTIPLIER * CLIP
    );
    println!(
        "held-out accuracy before training: {:.1}%",
        100.0 * accuracy(&params, &x_test, &y_test)
    );

    let train_start = Instant::now();
    let mut clipped_total = 0usize;
    for epoch in 0..EPOCHS {
        let order = rng.permutation(TRAIN);
        let mut clipped_epoch = 0usize;
        for b in 0..steps_per_epoch {
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let (xb, yb) = (x_train.take(&idx, 0), y_train.take(&idx, 0));
            let grads = per_example_grads(&params, &xb, &yb);
            let (private, clipped) = private_gradient(&grads);
            clipped_epoch += clipped;
            params = params.map2_leaves(&private, &mut |w, g| w - g * LEARNING_RATE);
        }
        clipped_total += clipped_epoch;
        println!(
            "epoch {:>2}/{EPOCHS}  held-out accuracy {:5.1}%  examples clipped {:4.1}%",
            epoch + 1,
            100.0 * accuracy(&params, &x_test, &y_test),
            100.0 * clipped_epoch as f64 / (steps_per_epoch * BATCH) as f64
        );
    }
    let train_time = train_start.elapsed().as_secs_f64();

    let acc = accuracy(&params, &x_test, &y_test);
    println!(
        "held-out accuracy: {:.1}% (chance {:.1}%); {:.1}% of per-example gradients clipped overall",
        100.0 * acc,
        100.0 / CLASSES as f64,
        100.0 * clipped_total as f64 / (steps * BATCH) as f64
    );
    println!(
        "runtime: training {:.2} s ({:.2} ms per step: per-example grads, clip, noise, update); total {:.2} s",
        train_time,
        1e3 * train_time / steps as f64,
        start.elapsed().as_secs_f64()
    );
    assert!(
        acc >= MIN_ACCURACY,
        "held-out accuracy {:.1}% is under {:.0}%",
        100.0 * acc,
        100.0 * MIN_ACCURACY
    );
}
