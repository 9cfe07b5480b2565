//! Train a small MLP on three interleaved spirals, end to end:
//!
//! ```sh
//! cargo run --release --example train_mlp [-- [--eager] [--device DEVICE] [LOSS_SVG_PATH]]
//! ```
//!
//! - the data set (2-D points, 3 classes) is generated from a fixed seed with
//!   nx's implicit RNG and split into a training and a held-out set;
//! - the parameters are a `#[derive(Ptree)]` struct, the loss is the mean
//!   cross-entropy of `log_softmax`, and `rune::value_and_grad` differentiates
//!   it on each minibatch;
//! - the whole training step (forward, backward, Adam written with
//!   `Ptree::map2_leaves`) runs under `rune::jit`: compiled on the first
//!   step, replayed after (`--eager` runs it op by op instead; `--device`
//!   names jit's device: `CPU` by default, `CPU:1`, `CUDA`); the step
//!   time of both modes and the speed-up are printed at the end;
//! - a progress bar shows the running loss; at the end the held-out accuracy is
//!   printed (the example fails if it is under 95%) and the loss curve is
//!   written as SVG (by default next to the build, in `target/`).

use std::f64::consts::PI;
use std::path::PathBuf;
use std::time::Instant;

use rune::prelude::*;

#[path = "common/args.rs"]
mod args;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[path = "common/spirals.rs"]
mod spirals;
use spirals::{accuracy, loss, spirals, Mlp, CLASSES, HELD_OUT, HIDDEN};
#[path = "common/mlp_step.rs"]
mod mlp_step;
use mlp_step::{adam_lr, train_step, State};

const BATCH: usize = 128;
const EPOCHS: usize = 200;
const LEARNING_RATE: f64 = 1e-2;
const SEED: u64 = 42;
const MIN_ACCURACY: f64 = 0.95;

/// Where the loss curve goes: the first argument, else `target/` (found
/// from this executable's path, `target/<profile>/examples/train_mlp`), else
/// the system's temporary directory.
fn plot_path() -> PathBuf {
    if let Some(path) = args::parse().path {
        return path;
    }
    let target = std::env::current_exe().ok().and_then(|exe| {
        let examples = exe.parent()?;
        (examples.file_name()? == "examples")
            .then(|| examples.parent()?.parent().map(PathBuf::from))?
    });
    target
        .unwrap_or_else(std::env::temp_dir)
        .join("train_mlp_loss.svg")
}

fn main() {
    let start = Instant::now();
    nx::seed(SEED);
    let mut rng = SplitMix(SEED);

    let (x, y) = spirals(&mut rng);
    let total = x.shape()[0];
    let n_train = total - HELD_OUT;
    let (x_train, y_train) = (x.narrow(0, 0, n_train), y.narrow(0, 0, n_train));
    let (x_test, y_test) = (
        x.narrow(0, n_train, HELD_OUT),
        y.narrow(0, n_train, HELD_OUT),
    );
    println!(
        "data: {CLASSES} interleaved spirals, {total} points ({n_train} train, {HELD_OUT} held out)"
    );

    let params = Mlp::init([2, HIDDEN, HIDDEN, CLASSES]);
    println!(
        "model: MLP 2-{HIDDEN}-{HIDDEN}-{CLASSES} (tanh), {} parameters in {} tensors",
        params.leaves().iter().map(|t| t.numel()).sum::<usize>(),
        params.num_leaves()
    );
    let cli = args::parse();
    let eager = cli.eager;
    let zeros = params.map_leaves(&mut |t| t.zeros_like());
    let mut state = State {
        params,
        m: zeros.clone(),
        v: zeros,
    };
    let step_fn = rune::jit_with(
        train_step,
        JitOpts {
            device: cli.device.clone(),
            ..JitOpts::default()
        },
    );
    let run_step = |args: &(State, Tensor, Tensor, Tensor), jitted: bool| {
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
            format!("jit on {} (compiled on the first step)", cli.device)
        }
    );

    let batches_per_epoch = n_train / BATCH; // the last partial batch is dropped
    let total_steps = EPOCHS * batches_per_epoch;
    let bar = progress::bar(total_steps);

    let train_start = Instant::now();
    let mut losses: Vec<f64> = Vec::with_capacity(total_steps);
    let mut held_out_losses: Vec<f64> = Vec::with_capacity(EPOCHS);
    let mut running = f64::NAN; // exponential moving average of the minibatch loss
    for epoch in 0..EPOCHS {
        let order = rng.permutation(n_train);
        for b in 0..batches_per_epoch {
            let step = losses.len();
            // cosine decay of the learning rate over the run
            let lr_scale = 0.5 * (1.0 + (PI * step as f64 / total_steps as f64).cos());
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let (xb, yb) = (x_train.take(&idx, 0), y_train.take(&idx, 0));
            let lr = Tensor::scalar(adam_lr(LEARNING_RATE * lr_scale, step as i32 + 1) as f32);
            let (l, next) = run_step(&(state, xb, yb, lr), !eager);
            state = next;

            let l = l.item::<f32>() as f64;
            assert!(l.is_finite(), "loss diverged at step {step}: {l}");
            losses.push(l);
            running = if running.is_nan() {
                l
            } else {
                0.95 * running + 0.05 * l
            };
            bar.set_message(format!("epoch {}/{EPOCHS}  loss {running:.4}", epoch + 1));
            bar.inc(1);
        }
        held_out_losses.push(loss(&state.params, &x_test, &y_test).item::<f32>() as f64);
        if bar.is_hidden() && (epoch + 1) % 25 == 0 {
            // no terminal to draw the bar on (output piped, CI): a line now and then
            println!("epoch {:>3}/{EPOCHS}  loss {running:.4}", epoch + 1);
        }
    }
    bar.finish();
    let train_time = train_start.elapsed().as_secs_f64();

    let params = &state.params;
    let train_acc = accuracy(params, &x_train, &y_train);
    let test_acc = accuracy(params, &x_test, &y_test);
    let test_loss = held_out_losses[EPOCHS - 1];
    println!(
        "trained {total_steps} steps ({EPOCHS} epochs x {batches_per_epoch} minibatches of {BATCH}) \
         in {train_time:.2} s ({:.2} ms/step)",
        1e3 * train_time / total_steps as f64
    );
    // The step time of both modes on one minibatch, after warming up (the
    // jitted step is compiled by now, or compiles during the warmup).
    let probe = (
        state.clone(),
        x_train.narrow(0, 0, BATCH),
        y_train.narrow(0, 0, BATCH),
        Tensor::scalar(1e-3f32),
    );
    let time_step = |jitted: bool| {
        progress::median_time(20, 200, || {
            run_step(&probe, jitted);
        })
    };
    let (t_jit, t_eager) = (time_step(true), time_step(false));
    println!(
        "step time (median of 200): jit {:.1} us, eager {:.1} us, speed-up {:.2}x",
        t_jit * 1e6,
        t_eager * 1e6,
        t_eager / t_jit
    );
    println!("train accuracy    {:.2}%", 100.0 * train_acc);
    println!(
        "held-out accuracy {:.2}%  (held-out loss {test_loss:.4})",
        100.0 * test_acc
    );

    let path = plot_path();
    match plot::loss_curve(&path, &losses, &held_out_losses, batches_per_epoch) {
        Ok(()) => println!("loss curve: {}", path.display()),
        Err(e) => eprintln!("could not write the loss curve to {}: {e}", path.display()),
    }
    println!("total time {:.2} s", start.elapsed().as_secs_f64());

    if test_acc < MIN_ACCURACY {
        eprintln!(
            "held-out accuracy {:.2}% is under {:.0}%",
            100.0 * test_acc,
            100.0 * MIN_ACCURACY
        );
        std::process::exit(1);
    }
}

mod plot {
    use std::path::Path;

    use plotters::prelude::*;

    /// Minibatch losses (faint), their per-epoch means and the held-out loss
    /// after each epoch, on a log-scale loss axis, as SVG (text is left to
    /// the viewer's fonts, so the example needs no font files).
    pub fn loss_curve(
        path: &Path,
        losses: &[f64],
        held_out: &[f64],
        steps_per_epoch: usize,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let epoch_means: Vec<(f64, f64)> = losses
            .chunks(steps_per_epoch)
            .enumerate()
            .map(|(e, c)| {
                (
                    ((e + 1) * steps_per_epoch) as f64,
                    c.iter().sum::<f64>() / c.len() as f64,
                )
            })
            .collect();
        let held_out: Vec<(f64, f64)> = held_out
            .iter()
            .enumerate()
            .map(|(e, &l)| (((e + 1) * steps_per_epoch) as f64, l))
            .collect();
        let all = losses.iter().chain(held_out.iter().map(|(_, l)| l));
        let lo = all.clone().cloned().fold(f64::INFINITY, f64::min).max(1e-6) * 0.8;
        let hi = all.cloned().fold(0.0, f64::max) * 1.25;

        let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut builder = ChartBuilder::on(&root);
        builder
            .margin(20)
            .caption(
                "train_mlp: cross-entropy on three spirals",
                ("sans-serif", 24),
            )
            .x_label_area_size(40)
            .y_label_area_size(60);
        let mut chart =
            builder.build_cartesian_2d(0f64..losses.len() as f64, (lo..hi).log_scale())?;
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(WHITE.mix(0.0))
            .x_desc("step")
            .y_desc("cross-entropy (log scale)")
            .x_label_formatter(&|x| format!("{}", *x as i64));
        mesh.draw()?;

        let faint = RGBColor(120, 160, 230);
        chart
            .draw_series(LineSeries::new(
                losses.iter().enumerate().map(|(i, &l)| (i as f64, l)),
                faint.mix(0.5),
            ))?
            .label("minibatch loss")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], faint));
        chart
            .draw_series(LineSeries::new(epoch_means, RED.stroke_width(2)))?
            .label("training loss, epoch mean")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        let green = RGBColor(0, 140, 60);
        chart
            .draw_series(LineSeries::new(held_out, green.stroke_width(2)))?
            .label("held-out loss (after each epoch)")
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], green.stroke_width(2))
            });
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
        root.present()?;
        Ok(())
    }
}
