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
//!
//! Across processes on MPI (cargo feature `mpi`; see the README):
//!
//! ```sh
//! cargo build --release --features rune/mpi --example data_parallel
//! mpirun -np 2 target/release/examples/data_parallel --mpi
//! ```
//!
//! With `--mpi` the devices are the MPI world's (`"MPI:0"`, ..., one per
//! process): every process draws the same minibatch and passes its own
//! rows of it, the step's gradients (and its loss) are all-reduced across
//! the processes, and nothing else moves: the parameters and Adam's state
//! are fed back where they are. Rank 0 runs the single-process reference
//! alongside, checks the trajectories and the bytes each step sent
//! (`rune::distributed::bytes_sent`), and prints; the others are quiet.

use std::time::Instant;

use rune::prelude::*;

use rune::optim;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[path = "common/spirals.rs"]
mod spirals;
use spirals::{accuracy, loss, spirals, Mlp, CLASSES, HELD_OUT, HIDDEN};

const DEVICES: [&str; 2] = ["CPU:1", "CPU:2"];
/// The mode: host devices in this process, or one device per MPI process.
struct Mode {
    devices: Vec<String>,
    /// This process's rank and the world's size (0 and 1 without `--mpi`).
    rank: usize,
    size: usize,
    mpi: bool,
}

#[cfg(feature = "mpi")]
fn mpi_mode() -> Mode {
    let world = rune::distributed::init();
    Mode {
        devices: world.devices(),
        rank: world.rank(),
        size: world.size(),
        mpi: true,
    }
}

#[cfg(not(feature = "mpi"))]
fn mpi_mode() -> Mode {
    eprintln!(
        "--mpi needs rune's cargo feature `mpi`: \
         cargo build --release --features rune/mpi --example data_parallel"
    );
    std::process::exit(2)
}

#[cfg(feature = "mpi")]
fn bytes_sent() -> u64 {
    rune::distributed::bytes_sent()
}

#[cfg(not(feature = "mpi"))]
fn bytes_sent() -> u64 {
    0
}
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

/// The model and Adam's state (its step count inside, so nothing but the
/// batch changes between steps).
#[derive(Ptree, Clone)]
struct State {
    params: Mlp,
    opt: optim::OptState,
}

fn adam() -> optim::Optimizer {
    optim::adam(LEARNING_RATE, Default::default())
}

/// One Adam step on a minibatch.
fn train_step((s, xb, yb): &(State, Tensor, Tensor)) -> (Tensor, State) {
    let (l, grads) = rune::value_and_grad(|p: &Mlp| loss(p, xb, yb), &s.params);
    let (updates, opt) = adam().update(&grads, &s.opt, &s.params);
    (
        l,
        State {
            params: optim::apply_updates(&s.params, &updates),
            opt,
        },
    )
}

fn main() {
    let mode = if std::env::args().any(|a| a == "--mpi") {
        mpi_mode()
    } else {
        Mode {
            devices: DEVICES.iter().map(|d| d.to_string()).collect(),
            rank: 0,
            size: 1,
            mpi: false,
        }
    };
    if BATCH % mode.devices.len() != 0 {
        panic!(
            "the batch of {BATCH} does not split over {} devices",
            mode.devices.len()
        );
    }
    let lead = mode.rank == 0;
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
    let params = Mlp::init([2, HIDDEN, HIDDEN, CLASSES]);
    let init = State {
        opt: adam().init(&params),
        params,
    };

    // Split the batch (x, y), replicate every leaf of the state.
    let mut in_axes = vec![None; init.num_leaves()];
    in_axes.extend([Some(0), Some(0)]);
    let parallel = rune::pmap_with(
        train_step,
        PmapOpts {
            devices: mode.devices.clone(),
            in_axes: Some(in_axes),
            donate: false,
        },
    );
    let single = rune::jit(train_step);
    let rows = BATCH / mode.devices.len();
    if lead {
        println!(
            "data: {n_train} training points, minibatches of {BATCH} split over {} ({rows} \
             each{}); parameters and Adam's state replicated",
            mode.devices.join(", "),
            if mode.mpi {
                ", one device per process"
            } else {
                ""
            },
        );
    }

    let batches_per_epoch = n_train / BATCH;
    let total_steps = EPOCHS * batches_per_epoch;
    let bar = if lead {
        progress::bar(total_steps)
    } else {
        indicatif::ProgressBar::hidden()
    };
    let param_bytes: u64 = init
        .params
        .leaves()
        .iter()
        .map(|t| (t.numel() * t.dtype().size_in_bytes()) as u64)
        .sum();
    // Across processes a step sends the gradients' all-reduce and the
    // loss's (4 bytes), nothing else.
    let step_bytes = param_bytes + 4;

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
            // Across processes, this process's rows of the minibatch.
            let (xs, ys) = if mode.mpi {
                let at = mode.rank * rows;
                (xb.narrow(0, at, rows).copy(), yb.narrow(0, at, rows).copy())
            } else {
                (xb.clone(), yb.clone())
            };

            rune::reset_jit_stats();
            let sent = bytes_sent();
            let t = Instant::now();
            let (l_dp, next) = parallel.call(&(dp_state, xs, ys));
            t_dp += t.elapsed().as_secs_f64();
            dp_state = next;
            let moved = rune::jit_stats();
            let sent = bytes_sent() - sent;
            if mode.mpi {
                let expected = if mode.size > 1 { step_bytes } else { 0 };
                if moved.bytes_to_device != 0 || sent != expected {
                    wrong_traffic.push((step, sent, moved.bytes_to_device));
                }
            } else if step > 0
                && (moved.bytes_to_device != batch_bytes || moved.bytes_from_device != 0)
            {
                wrong_traffic.push((step, moved.bytes_to_device, moved.bytes_from_device));
            }
            if !lead {
                // Only rank 0 checks against the single-process run.
                bar.inc(1);
                continue;
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
        if lead && bar.is_hidden() && (epoch + 1) % 10 == 0 {
            println!("epoch {:>3}/{EPOCHS}", epoch + 1);
        }
    }
    bar.finish();
    if !lead {
        if !wrong_traffic.is_empty() {
            eprintln!(
                "rank {}: {} steps sent more than the gradients",
                mode.rank,
                wrong_traffic.len()
            );
            std::process::exit(1);
        }
        return;
    }

    let test_acc = accuracy(&dp_state.params, &x_test, &y_test);
    let test_acc_one = accuracy(&one_state.params, &x_test, &y_test);
    println!(
        "trained {total_steps} steps: pmap {:.1} us/step, jit in one process {:.1} us/step",
        1e6 * t_dp / total_steps as f64,
        1e6 * t_one / total_steps as f64
    );
    if mode.mpi {
        println!(
            "per step, {} processes: {} bytes sent to the all-reduce per process (the {} bytes \
             of gradients and the 4-byte loss), nothing copied; each process passes its own \
             {rows} rows",
            mode.size,
            if mode.size > 1 { step_bytes } else { 0 },
            param_bytes
        );
    } else {
        println!(
            "per step after the first: {batch_bytes} bytes to the devices (the batch halves) \
             and 0 back; reading each step's loss moved {} bytes in all ({} per step: one \
             replica)",
            moved_from_device,
            moved_from_device / total_steps as u64
        );
    }
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
    if let (true, Some((step, sent, to))) = (mode.mpi, wrong_traffic.first()) {
        eprintln!(
            "{} steps moved more than the gradients; the first, step {step}: {sent} bytes sent, \
             {to} copied (expected {step_bytes} and 0)",
            wrong_traffic.len()
        );
        failed = true;
    } else if let Some((step, to, from)) = wrong_traffic.first() {
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
