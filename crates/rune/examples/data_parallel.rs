//! Data-parallel training of the flagship MLP with `rune::pmap`:
//!
//! ```sh
//! cargo run --release --example data_parallel
//! ```
//!
//! The same spirals and model as `train_mlp`. Each training step runs under
//! `pmap` over the host devices `CPU:1` and `CPU:2`: the minibatch is split
//! in two along axis 0 (one half per device), the parameters and Adam's
//! state are replicated. `f` is written for the whole batch and needs no
//! collectives: the mean loss over a split batch is a local sum on each
//! device plus an all-reduce, and so are its gradients, so both devices
//! apply the same update. The state the step returns stays resident on the
//! devices and is fed back unread, so once it is there each step moves only
//! the batch halves (`rune::jit_stats`).
//!
//! The example runs the same steps under `rune::jit` on the host device
//! alongside and checks that the two loss trajectories agree (they differ
//! only by the order of the floating-point additions in the all-reduce),
//! that every step after the first moved exactly the batch, and that the
//! trained model reaches 95% held-out accuracy; it exits with an error
//! otherwise.

use std::time::Instant;

use rune::prelude::*;

#[path = "common/adam.rs"]
mod adam;
use adam::Adam;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[path = "common/spirals.rs"]
mod spirals;
use spirals::{accuracy, loss, spirals, Mlp, CLASSES, HELD_OUT, HIDDEN};

const DEVICES: [&str; 2] = ["CPU:1", "CPU:2"];
const BATCH: usize = 128;
const EPOCHS: usize = 60;
const LEARNING_RATE: f64 = 1e-2;
const SEED: u64 = 42;
const MIN_ACCURACY: f64 = 0.95;
/// How far apart the two trajectories may be (relative, per step's loss)
/// over the first `CHECKED_STEPS` steps. They differ by rounding only (the
/// all-reduce adds the two halves' partial sums in another order), and
/// training amplifies rounding differences slowly, so later steps are
/// reported, not checked.
const TRAJECTORY_TOL: f64 = 1e-4;
const CHECKED_STEPS: usize = 100;

/// One Adam step on a minibatch (the step size is computed from the step
/// count in the state, so nothing but the batch changes between steps).
fn train_step((s, xb, yb): &(Adam<Mlp>, Tensor, Tensor)) -> (Tensor, Adam<Mlp>) {
    let (l, grads) = rune::value_and_grad(|p: &Mlp| loss(p, xb, yb), &s.params);
    (l, s.step(&grads, LEARNING_RATE))
}

fn main() {
    let start = Instant::now();
    nx::seed(SEED);
    let mut rng = SplitMix(SEED);
    let (x, y) = spirals(&mut rng);
    let n_train = x.shape()[0] - HELD_OUT;
    let (x_train, y_train) = (x.narrow(0, 0, n_train), y.narrow(0, 0, n_train));
    let (x_test, y_test) = (
        x.narrow(0, n_train, HELD_OUT),
        y.narrow(0, n_train, HELD_OUT),
    );
    let init = Adam::new(Mlp::init([2, HIDDEN, HIDDEN, CLASSES]));

    // Split the batch (x, y), replicate every leaf of the state.
    let mut in_axes = vec![None; init.num_leaves()];
    in_axes.extend([Some(0), Some(0)]);
    let parallel = rune::pmap_with(
        train_step,
        PmapOpts {
            devices: DEVICES.iter().map(|d| d.to_string()).collect(),
            in_axes: Some(in_axes),
            donate: false,
        },
    );
    let single = rune::jit(train_step);
    println!(
        "data: {n_train} training points, minibatches of {BATCH} split over {} ({} each); \
         parameters and Adam's state replicated",
        DEVICES.join(", "),
        BATCH / DEVICES.len()
    );

    let batches_per_epoch = n_train / BATCH;
    let total_steps = EPOCHS * batches_per_epoch;
    let bar = progress::bar(total_steps);

    let batch_bytes = (BATCH * 2 * 4 + BATCH * 4) as u64; // x: [B, 2] f32, y: [B] i32
    let (mut dp_state, mut one_state) = (init.clone(), init);
    let (mut worst_drift, mut early_drift, mut wrong_traffic) = (0.0f64, 0.0f64, Vec::new());
    let (mut t_dp, mut t_one) = (0.0, 0.0);
    let mut moved_from_device = 0;
    for epoch in 0..EPOCHS {
        let order = rng.permutation(n_train);
        for b in 0..batches_per_epoch {
            let step = epoch * batches_per_epoch + b;
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let (xb, yb) = (x_train.take(&idx, 0), y_train.take(&idx, 0));

            rune::reset_jit_stats();
            let t = Instant::now();
            let (l_dp, next) = parallel.call(&(dp_state, xb.clone(), yb.clone()));
            t_dp += t.elapsed().as_secs_f64();
            dp_state = next;
            let moved = rune::jit_stats();
            if step > 0 && (moved.bytes_to_device != batch_bytes || moved.bytes_from_device != 0) {
                wrong_traffic.push((step, moved.bytes_to_device, moved.bytes_from_device));
            }

            let t = Instant::now();
            let (l_one, next) = single.call(&(one_state, xb, yb));
            t_one += t.elapsed().as_secs_f64();
            one_state = next;

            rune::reset_jit_stats();
            let (l_dp, l_one) = (l_dp.item::<f32>() as f64, l_one.item::<f32>() as f64);
            moved_from_device += rune::jit_stats().bytes_from_device;
            assert!(l_dp.is_finite(), "loss diverged at step {step}: {l_dp}");
            let drift = (l_dp - l_one).abs() / l_one.abs().max(1e-6);
            worst_drift = worst_drift.max(drift);
            if step < CHECKED_STEPS {
                early_drift = early_drift.max(drift);
            }
            bar.set_message(format!(
                "epoch {}/{EPOCHS}  loss {l_dp:.4} (one device {l_one:.4})",
                epoch + 1
            ));
            bar.inc(1);
        }
        if bar.is_hidden() && (epoch + 1) % 10 == 0 {
            println!("epoch {:>3}/{EPOCHS}", epoch + 1);
        }
    }
    bar.finish();

    let test_acc = accuracy(&dp_state.params, &x_test, &y_test);
    let test_acc_one = accuracy(&one_state.params, &x_test, &y_test);
    println!(
        "trained {total_steps} steps: pmap {:.1} us/step, jit on one device {:.1} us/step",
        1e6 * t_dp / total_steps as f64,
        1e6 * t_one / total_steps as f64
    );
    println!(
        "per step after the first: {batch_bytes} bytes to the devices (the batch halves) and \
         0 back; reading each step's loss moved {} bytes in all ({} per step: one replica)",
        moved_from_device,
        moved_from_device / total_steps as u64
    );
    println!(
        "loss trajectories, pmap vs one device: largest relative difference \
         {early_drift:.2e} over the first {CHECKED_STEPS} steps, {worst_drift:.2e} over all \
         {total_steps}"
    );
    println!(
        "held-out accuracy {:.2}% (one device: {:.2}%)",
        100.0 * test_acc,
        100.0 * test_acc_one
    );
    println!("total time {:.2} s", start.elapsed().as_secs_f64());

    let mut failed = false;
    if early_drift > TRAJECTORY_TOL {
        eprintln!(
            "the trajectories differ over the first {CHECKED_STEPS} steps: \
             {early_drift:.2e} > {TRAJECTORY_TOL:.0e}"
        );
        failed = true;
    }
    if let Some((step, to, from)) = wrong_traffic.first() {
        eprintln!(
            "{} steps moved more than the batch; the first, step {step}: {to} bytes to the \
             devices, {from} back (expected {batch_bytes} and 0)",
            wrong_traffic.len()
        );
        failed = true;
    }
    if test_acc < MIN_ACCURACY {
        eprintln!(
            "held-out accuracy {:.2}% is under {:.0}%",
            100.0 * test_acc,
            100.0 * MIN_ACCURACY
        );
        failed = true;
    }
    if failed {
        std::process::exit(1);
    }
}
