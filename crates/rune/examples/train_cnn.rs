//! Train a small convolutional network on generated images of digits:
//!
//! ```sh
//! cargo run --release --example train_cnn [-- [--eager] [--device DEVICE] [OUT_DIR]]
//! ```
//!
//! - the data set: 16x16 grey images of the ten digits, rendered from a
//!   built-in 5x7 bitmap font with a random scale, shear, shift, contrast
//!   and Gaussian noise (fixed seed; 6,000 for training, 1,000 held out);
//! - the model (`common/cnn.rs`, shared with `train_fashion`): two blocks
//!   of 3x3 convolution (`nn::Conv`, SAME padding) + relu + 2x2 max-pool,
//!   then a dense relu layer and a linear head (`nn::Linear`);
//! - the training step (forward, backward through the convolutions and
//!   pools, `optim::adam`) runs under `rune::jit` (`--eager` runs it op by op;
//!   `--device` names jit's device: `CPU` by default, `CPU:1`, `CUDA`); a
//!   progress bar shows the running loss; the step time of both modes is
//!   printed at the end;
//! - the trained parameters are saved as a safetensors checkpoint
//!   (`nx::save`), loaded back (`nx::load`) and checked to give identical
//!   predictions; an SVG shows held-out samples with their predicted labels
//!   (green when right, red when wrong), both written to `target/` (or the
//!   directory given as the argument);
//! - it exits with an error if the held-out accuracy is under 95%.

use std::path::PathBuf;
use std::time::Instant;

use rune::prelude::*;
use rune::{optim, rng};

#[path = "common/cnn.rs"]
mod cnn;
use cnn::Cnn;
#[path = "common/args.rs"]
mod args;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

const SIDE: usize = 16;
const TRAIN: usize = 6000;
const HELD_OUT: usize = 1000;
const C1: usize = 8; // channels of the first convolution
const C2: usize = 16; // and of the second
const HIDDEN: usize = 64;
const BATCH: usize = 64;
const EPOCHS: usize = 6;
const LEARNING_RATE: f64 = 3e-3;
const SEED: u64 = 7;
const MIN_ACCURACY: f64 = 0.95;

/// The digits 0-9 in a 5x7 bitmap font, one row per string, `#` = ink.
const FONT: [[&str; 7]; 10] = [
    [
        " ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### ",
    ],
    [
        "  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### ",
    ],
    [
        " ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####",
    ],
    [
        "#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### ",
    ],
    [
        "   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # ",
    ],
    [
        "#####", "#    ", "#### ", "    #", "    #", "#   #", " ### ",
    ],
    [
        "  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### ",
    ],
    [
        "#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   ",
    ],
    [
        " ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### ",
    ],
    [
        " ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  ",
    ],
];

fn ink(digit: usize, row: isize, col: isize) -> bool {
    (0..7).contains(&row)
        && (0..5).contains(&col)
        && FONT[digit][row as usize].as_bytes()[col as usize] == b'#'
}

/// One `SIDE` x `SIDE` image of `digit`: the glyph scaled by 1.6-2.2
/// (independently in x and y), sheared by up to a quarter, placed at a
/// random offset, with a random contrast and N(0, 0.15) noise.
fn render(digit: usize, rng: &mut SplitMix) -> Vec<f32> {
    let mut uniform =
        |lo: f64, hi: f64| lo + (hi - lo) * (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    let (sx, sy) = (uniform(1.6, 2.2), uniform(1.6, 2.2));
    let shear = uniform(-0.25, 0.25);
    let (w, h) = (5.0 * sx, 7.0 * sy);
    let x0 = uniform(-0.5, SIDE as f64 - w + 0.5);
    let y0 = uniform(-0.5, SIDE as f64 - h + 0.5);
    let contrast = uniform(0.7, 1.0) as f32;
    let mut img = vec![0.0f32; SIDE * SIDE];
    for (i, px) in img.iter_mut().enumerate() {
        let (y, x) = ((i / SIDE) as f64 + 0.5, (i % SIDE) as f64 + 0.5);
        let v = (y - y0) / sy;
        let u = (x - x0 - shear * (y - y0 - h / 2.0)) / sx;
        if ink(digit, v.floor() as isize, u.floor() as isize) {
            *px = contrast;
        }
    }
    for px in img.iter_mut() {
        *px += 0.15 * rng.normal();
    }
    img
}

/// `n` images `[n, 1, SIDE, SIDE]` (F32) and their labels `[n]` (I32).
fn digits(n: usize, rng: &mut SplitMix) -> (Tensor, Tensor) {
    let mut pixels = Vec::with_capacity(n * SIDE * SIDE);
    let mut labels = Vec::with_capacity(n);
    for _ in 0..n {
        let d = (rng.next_u64() % 10) as usize;
        pixels.extend(render(d, rng));
        labels.push(d as i32);
    }
    (
        Tensor::from_vec(pixels, &[n, 1, SIDE, SIDE]),
        Tensor::from_vec(labels, &[n]),
    )
}

/// Where the checkpoint and the SVG go: the first argument, else `target/`
/// (found from this executable's path), else the temporary directory.
fn out_dir() -> PathBuf {
    if let Some(path) = args::parse().path {
        return path;
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let examples = exe.parent()?;
            (examples.file_name()? == "examples")
                .then(|| examples.parent()?.parent().map(PathBuf::from))?
        })
        .unwrap_or_else(std::env::temp_dir)
}

fn main() {
    let start = Instant::now();
    let mut rng = SplitMix(SEED);
    let (x_train, y_train) = digits(TRAIN, &mut rng);
    let (x_test, y_test) = digits(HELD_OUT, &mut rng);
    println!(
        "data: {TRAIN} training and {HELD_OUT} held-out {SIDE}x{SIDE} images of the ten digits"
    );

    let model = Cnn::new(&rng::key(SEED), SIDE, C1, C2, HIDDEN);
    println!(
        "model: conv3x3(1->{C1}) relu maxpool2, conv3x3({C1}->{C2}) relu maxpool2, \
         dense {}->{HIDDEN} relu, dense {HIDDEN}->10: {} parameters",
        model.dense.w.shape()[0],
        model.leaves().iter().map(|t| t.numel()).sum::<usize>()
    );
    let opt = optim::adam(LEARNING_RATE, Default::default());
    let mut state = (model.clone(), opt.init(&model));
    let cli = args::parse();
    let eager = cli.eager;
    let train_step = |a: &(Cnn, optim::OptState, Tensor, Tensor)| cnn::train_step(&opt, a);
    let step_fn = rune::jit_with(
        &train_step,
        JitOpts {
            device: cli.device.clone(),
            ..JitOpts::default()
        },
    );
    let run_step = |args: &(Cnn, optim::OptState, Tensor, Tensor), jitted: bool| {
        if jitted {
            step_fn.call(args)
        } else {
            train_step(args)
        }
    };
    println!(
        "training step: {}",
        if eager {
            "eager (--eager)".to_string()
        } else {
            format!("jit on {}", cli.device)
        }
    );

    let batches = TRAIN / BATCH;
    let bar = progress::bar(EPOCHS * batches);
    let train_start = Instant::now();
    let mut running = f64::NAN;
    for epoch in 0..EPOCHS {
        let order = rng.permutation(TRAIN);
        for b in 0..batches {
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let (xb, yb) = (x_train.take(&idx, 0), y_train.take(&idx, 0));
            let (l, m, o) = run_step(&(state.0, state.1, xb, yb), !eager);
            state = (m, o);
            let l = l.item::<f32>() as f64;
            assert!(l.is_finite(), "loss diverged at epoch {epoch}: {l}");
            running = if running.is_nan() {
                l
            } else {
                0.95 * running + 0.05 * l
            };
            bar.set_message(format!("epoch {}/{EPOCHS}  loss {running:.4}", epoch + 1));
            bar.inc(1);
        }
        if bar.is_hidden() {
            println!("epoch {}/{EPOCHS}  loss {running:.4}", epoch + 1);
        }
    }
    bar.finish();
    println!(
        "trained {} steps in {:.2} s",
        EPOCHS * batches,
        train_start.elapsed().as_secs_f64()
    );

    let params = &state.0;
    let logits = params.forward(&x_test);
    let predicted = logits.argmax(-1, false);
    let accuracy = predicted
        .equal(&y_test)
        .cast(DType::F32)
        .mean_all()
        .item::<f32>() as f64;
    println!("held-out accuracy {:.2}%", 100.0 * accuracy);

    // The checkpoint: saved, loaded back, same predictions (bit for bit).
    let dir = out_dir();
    let ckpt = dir.join("train_cnn.safetensors");
    nx::save(params, &ckpt).expect("write the checkpoint");
    let loaded: Cnn = nx::load(&ckpt, params).expect("read the checkpoint");
    let reloaded = loaded.forward(&x_test);
    let same = reloaded
        .to_vec::<f32>()
        .iter()
        .map(|v| v.to_bits())
        .eq(logits.to_vec::<f32>().iter().map(|v| v.to_bits()));
    println!(
        "checkpoint: {} ({} tensors: {}); reloaded predictions {}",
        ckpt.display(),
        loaded.num_leaves(),
        loaded.leaf_paths().join(", "),
        if same { "identical" } else { "DIFFER" }
    );

    let svg = dir.join("train_cnn_samples.svg");
    match samples_svg(&svg, &x_test, &y_test, &predicted) {
        Ok(()) => println!("samples with predicted labels: {}", svg.display()),
        Err(e) => eprintln!("could not write {}: {e}", svg.display()),
    }

    // Step time of both modes on one minibatch (the jitted step is
    // compiled by now, or compiles during the warmup).
    let probe = (
        state.0.clone(),
        state.1.clone(),
        x_train.narrow(0, 0, BATCH),
        y_train.narrow(0, 0, BATCH),
    );
    let time_step = |jitted: bool| {
        progress::median_time(5, 50, || {
            run_step(&probe, jitted);
        })
    };
    let (t_jit, t_eager) = (time_step(true), time_step(false));
    println!(
        "step time (median of 50, batch {BATCH}): jit {:.2} ms, eager {:.2} ms, speed-up {:.2}x",
        t_jit * 1e3,
        t_eager * 1e3,
        t_eager / t_jit
    );
    println!("total time {:.2} s", start.elapsed().as_secs_f64());

    if !same {
        eprintln!("the reloaded checkpoint predicts differently");
        std::process::exit(1);
    }
    if accuracy < MIN_ACCURACY {
        eprintln!(
            "held-out accuracy {:.2}% is under {:.0}%",
            100.0 * accuracy,
            100.0 * MIN_ACCURACY
        );
        std::process::exit(1);
    }
}

/// A grid of the first 40 held-out images (scaled 4x), each with its
/// predicted label drawn below it in a 5x7 dot font: green when
/// right, red when wrong.
fn samples_svg(
    path: &std::path::Path,
    x: &Tensor,
    y: &Tensor,
    predicted: &Tensor,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    const COLS: usize = 10;
    const ROWS: usize = 4;
    const ZOOM: usize = 4;
    const GLYPH: usize = 3; // pixels per font dot
    let cell_w = SIDE * ZOOM + 8;
    let cell_h = SIDE * ZOOM + 7 * GLYPH + 14;
    let (w, h) = (COLS * cell_w, ROWS * cell_h);
    let pixels = x.to_vec::<f32>();
    let (labels, guesses) = (y.to_vec::<i32>(), predicted.to_vec::<i32>());
    let root = SVGBackend::new(path, (w as u32, h as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    for k in 0..COLS * ROWS {
        let (ox, oy) = ((k % COLS) * cell_w + 4, (k / COLS) * cell_h + 4);
        for i in 0..SIDE * SIDE {
            let v = pixels[k * SIDE * SIDE + i].clamp(0.0, 1.0);
            let g = (255.0 * (1.0 - v)) as u8;
            let (py, px) = (oy + (i / SIDE) * ZOOM, ox + (i % SIDE) * ZOOM);
            root.draw(&Rectangle::new(
                [
                    (px as i32, py as i32),
                    ((px + ZOOM) as i32, (py + ZOOM) as i32),
                ],
                RGBColor(g, g, g).filled(),
            ))?;
        }
        let guess = guesses[k] as usize;
        let color = if guess == labels[k] as usize {
            RGBColor(0, 150, 60)
        } else {
            RGBColor(220, 30, 30)
        };
        let (gx, gy) = (ox + (SIDE * ZOOM - 5 * GLYPH) / 2, oy + SIDE * ZOOM + 6);
        for r in 0..7 {
            for c in 0..5 {
                if ink(guess, r, c) {
                    let (px, py) = (gx + c as usize * GLYPH, gy + r as usize * GLYPH);
                    root.draw(&Rectangle::new(
                        [
                            (px as i32, py as i32),
                            ((px + GLYPH) as i32, (py + GLYPH) as i32),
                        ],
                        color.filled(),
                    ))?;
                }
            }
        }
    }
    root.present()?;
    Ok(())
}
