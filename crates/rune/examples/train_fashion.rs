//! Train a small CNN on Fashion-MNIST (60,000 + 10,000 real 28x28 grey
//! images of clothes, ten classes; Xiao, Rasul and Vollgraf, 2017, MIT):
//!
//! ```sh
//! apt-get install dataset-fashion-mnist      # Debian's package: /usr/share/datasets/fashion-mnist
//! cargo run --release --example train_fashion [-- [--epochs N] [--steps N] [--data DIR] [--eager] [--device DEVICE] [--out DIR]]
//! ```
//!
//! - the data: the four IDX files (gzipped or not) read by
//!   `examples/common/idx.rs` from `--data DIR`, else from where Debian's
//!   `dataset-fashion-mnist` puts them; a missing or malformed file is an
//!   error naming it (and, for a missing data set, how to get it);
//! - the model (`common/cnn.rs`, shared with `train_cnn`): two blocks of
//!   3x3 convolution (SAME) + relu + 2x2 max-pool (1 -> 16 -> 32
//!   channels), a dense relu layer of 128 and a linear head, on `nn` layers;
//! - the training step (`rune::value_and_grad` through the convolutions and
//!   pools, then `optim::adam`) runs under `rune::jit` (`--eager`: op by op), with a
//!   progress bar; each epoch's time is printed (the first includes tracing
//!   and compiling the step), and the test accuracy after it;
//! - at the end: the test accuracy (exits non-zero under 88% after a full
//!   run; `--steps N` stops each epoch after N minibatches, for a quick look,
//!   and skips that check), a safetensors checkpoint loaded back and checked,
//!   and an SVG of test images with their predicted classes, in `target/`
//!   or `--out DIR`.
//!
//! `bench/fashion_jax.py` trains the same model the same way under jax.jit,
//! for the epoch time beside ours.

use std::time::Instant;

use rune::prelude::*;
use rune::{optim, rng};

#[path = "common/cnn.rs"]
mod cnn;
use cnn::Cnn;
#[path = "common/args.rs"]
mod args;
#[path = "common/idx.rs"]
mod idx;
#[path = "common/image_grid.rs"]
mod image_grid;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

const C1: usize = 16; // channels of the first convolution
const C2: usize = 32; // and of the second
const HIDDEN: usize = 128;
const BATCH: usize = 64;
const EPOCHS: usize = 2;
const LEARNING_RATE: f64 = 1e-3;
const SEED: u64 = 11;
const MIN_ACCURACY: f64 = 0.88;
/// Test images per call of the jitted forward pass.
const EVAL_CHUNK: usize = 500;

/// Images `[n, 1, side, side]` scaled to [0, 1] and labels `[n]` (I32).
fn tensors(images: &idx::Idx, labels: &idx::Idx) -> (Tensor, Tensor) {
    let (n, side) = (images.dims[0], images.dims[1]);
    let x: Vec<f32> = images.data.iter().map(|&p| p as f32 / 255.0).collect();
    let y: Vec<i32> = labels.data.iter().map(|&l| l as i32).collect();
    (
        Tensor::from_vec(x, &[n, 1, side, side]),
        Tensor::from_vec(y, &[n]),
    )
}

fn main() {
    let start = Instant::now();
    let cli = args::parse_with(&["--epochs", "--steps", "--data"]);
    let epochs = cli.epochs.unwrap_or(EPOCHS);
    let set = idx::read_fashion_mnist(cli.data.as_deref()).unwrap_or_else(|e| {
        eprintln!("cannot read Fashion-MNIST: {e}");
        std::process::exit(2)
    });
    let side = set.side();
    let (x_train, y_train) = tensors(&set.train_images, &set.train_labels);
    let (x_test, y_test) = tensors(&set.test_images, &set.test_labels);
    let (n_train, n_test) = (x_train.shape()[0], x_test.shape()[0]);
    println!(
        "data: Fashion-MNIST from {}: {n_train} training and {n_test} test images, {side}x{side} (read in {:.2} s)",
        cli.data
            .as_deref()
            .unwrap_or(std::path::Path::new(idx::FASHION_DEBIAN_DIR))
            .display(),
        start.elapsed().as_secs_f64()
    );
    drop(set);

    let mut rng = SplitMix(SEED);
    let params = Cnn::new(&rng::key(SEED), side, C1, C2, HIDDEN);
    println!(
        "model: conv3x3(1->{C1}) relu maxpool2, conv3x3({C1}->{C2}) relu maxpool2, \
         dense {}->{HIDDEN} relu, dense {HIDDEN}->10: {} parameters",
        params.dense.w.shape()[0],
        params.leaves().iter().map(|t| t.numel()).sum::<usize>()
    );
    let opt = optim::adam(LEARNING_RATE, Default::default());
    let mut state = (opt.init(&params), params);
    let opts = || JitOpts {
        device: cli.device.clone(),
        ..JitOpts::default()
    };
    let train_step = |a: &(Cnn, optim::OptState, Tensor, Tensor)| cnn::train_step(&opt, a);
    let step_fn = rune::jit_with(&train_step, opts());
    let predict = rune::jit_with(
        |(p, x): &(Cnn, Tensor)| p.forward(x).argmax(-1, false),
        opts(),
    );
    let test_accuracy = |p: &Cnn| -> (f64, Vec<i32>) {
        let mut guesses = Vec::with_capacity(n_test);
        for c in (0..n_test).step_by(EVAL_CHUNK) {
            let len = EVAL_CHUNK.min(n_test - c);
            let x = x_test.narrow(0, c, len);
            let g = if cli.eager || len != EVAL_CHUNK {
                p.forward(&x).argmax(-1, false)
            } else {
                predict.call(&(p.clone(), x))
            };
            guesses.extend(g.to_vec::<i32>());
        }
        let labels = y_test.to_vec::<i32>();
        let right = guesses.iter().zip(&labels).filter(|(g, l)| g == l).count();
        (right as f64 / n_test as f64, guesses)
    };
    println!(
        "training step: {}, batch {BATCH}, Adam lr {LEARNING_RATE}",
        if cli.eager {
            "eager (--eager)".to_string()
        } else {
            format!("jit on {} (compiled on the first step)", cli.device)
        }
    );

    let batches = (n_train / BATCH).min(cli.steps.unwrap_or(usize::MAX));
    let bar = progress::bar(epochs * batches);
    let mut running = f64::NAN;
    let mut epoch_times = Vec::with_capacity(epochs);
    let mut first_step = 0.0;
    let mut accuracy = 0.0;
    for epoch in 0..epochs {
        let epoch_start = Instant::now();
        let order = rng.permutation(n_train);
        for b in 0..batches {
            let step_start = Instant::now();
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let args = (
                state.1,
                state.0,
                x_train.take(&idx, 0),
                y_train.take(&idx, 0),
            );
            let (l, model, opt_state) = if cli.eager {
                train_step(&args)
            } else {
                step_fn.call(&args)
            };
            state = (opt_state, model);
            let l = l.item::<f32>() as f64;
            if epoch == 0 && b == 0 {
                first_step = step_start.elapsed().as_secs_f64();
            }
            assert!(l.is_finite(), "loss diverged at epoch {epoch}: {l}");
            running = if running.is_nan() {
                l
            } else {
                0.98 * running + 0.02 * l
            };
            bar.set_message(format!("epoch {}/{epochs}  loss {running:.4}", epoch + 1));
            bar.inc(1);
        }
        let t = epoch_start.elapsed().as_secs_f64();
        epoch_times.push(t);
        accuracy = test_accuracy(&state.1).0;
        bar.suspend(|| {
            println!(
                "epoch {}/{epochs}: {t:.1} s ({:.2} ms/step{}), loss {running:.4}, test accuracy {:.2}%",
                epoch + 1,
                1e3 * t / batches as f64,
                if epoch == 0 && !cli.eager {
                    format!(", the first step {:.2} s of it: tracing and compiling", first_step)
                } else {
                    String::new()
                },
                100.0 * accuracy
            )
        });
    }
    bar.finish();
    let steady: Vec<f64> = if epochs > 1 {
        epoch_times[1..].to_vec()
    } else {
        // one epoch: without its first step, scaled to a whole epoch
        vec![(epoch_times[0] - first_step) * batches as f64 / (batches - 1).max(1) as f64]
    };
    let epoch_time = steady.iter().sum::<f64>() / steady.len() as f64;
    println!(
        "epoch time (after compiling, {} steps of {BATCH}): {epoch_time:.1} s{}",
        batches,
        if batches < n_train / BATCH {
            format!(
                "; a full epoch of {} steps at this rate: {:.1} s",
                n_train / BATCH,
                epoch_time * (n_train / BATCH) as f64 / batches as f64
            )
        } else {
            String::new()
        }
    );

    let params = &state.1;
    let (_, guesses) = test_accuracy(params);
    println!("test accuracy {:.2}% ({n_test} images)", 100.0 * accuracy);

    // The checkpoint: saved, loaded back, the same predictions.
    let dir = args::out_dir(&cli);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    let ckpt = dir.join("train_fashion.safetensors");
    nx::save(params, &ckpt).unwrap_or_else(|e| panic!("write {}: {e}", ckpt.display()));
    let loaded: Cnn =
        nx::load(&ckpt, params).unwrap_or_else(|e| panic!("read {}: {e}", ckpt.display()));
    let same = test_accuracy(&loaded).1 == guesses;
    println!(
        "checkpoint: {} ({} tensors); reloaded predictions {}",
        ckpt.display(),
        loaded.num_leaves(),
        if same { "identical" } else { "DIFFER" }
    );

    // The picture: the first 40 test images with their predicted classes.
    let labels = y_test.to_vec::<i32>();
    let pixels = x_test.narrow(0, 0, 40.min(n_test)).to_vec::<f32>();
    let cells: Vec<image_grid::Cell> = (0..40.min(n_test))
        .map(|i| {
            let (g, l) = (guesses[i] as usize, labels[i] as usize);
            image_grid::Cell {
                ink: &pixels[i * side * side..(i + 1) * side * side],
                caption: if g == l {
                    idx::FASHION_CLASSES[g].to_string()
                } else {
                    format!(
                        "{} (is {})",
                        idx::FASHION_CLASSES[g],
                        idx::FASHION_CLASSES[l]
                    )
                },
                right: g == l,
            }
        })
        .collect();
    let svg = dir.join("train_fashion_test.svg");
    let title = format!(
        "train_fashion: Fashion-MNIST test images and predicted classes ({:.2}% right over the test set)",
        100.0 * accuracy
    );
    match image_grid::write_svg(&svg, &title, side, 3, 8, &cells) {
        Ok(()) => println!("test images with predictions: {}", svg.display()),
        Err(e) => eprintln!("could not write {}: {e}", svg.display()),
    }
    println!("total time {:.1} s", start.elapsed().as_secs_f64());

    if !same {
        eprintln!("the reloaded checkpoint predicts differently");
        std::process::exit(1);
    }
    if cli.steps.is_none() && accuracy < MIN_ACCURACY {
        eprintln!(
            "test accuracy {:.2}% is under {:.0}%",
            100.0 * accuracy,
            100.0 * MIN_ACCURACY
        );
        std::process::exit(1);
    }
}
