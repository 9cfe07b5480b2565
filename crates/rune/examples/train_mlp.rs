//! Train a small MLP on three interleaved spirals, end to end:
//!
//! ```sh
//! cargo run --release --example train_mlp [-- [--eager] [--device DEVICE] [LOSS_SVG_PATH]]
//! ```
//!
//! - the data set (2-D points, 3 classes) is generated from a fixed seed and
//!   split into a training and a held-out set;
//! - the model is three `nn::Linear` layers (a `#[derive(Ptree)]` struct),
//!   the loss `nn::cross_entropy`, the optimizer `optim::adam` with a cosine
//!   learning-rate decay over the run;
//! - the whole training step (forward, backward, Adam) runs under
//!   `rune::jit`: compiled on the first step, replayed after (`--eager` runs
//!   it op by op instead; `--device` names jit's device: `CPU` by default,
//!   `CPU:1`, `CUDA`); the step time of both modes is printed at the end;
//! - a progress bar shows the running loss; at the end the held-out accuracy
//!   is printed (the example fails if it is under 95%) and the loss curve is
//!   written as SVG (by default next to the build, in `target/`).

use std::path::PathBuf;
use std::time::Instant;

use rune::prelude::*;
use rune::{nn, optim, rng};

#[path = "common/args.rs"]
mod args;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[allow(dead_code)] // its Mlp is the hand-written one of data_parallel and bench_generality
#[path = "common/spirals.rs"]
mod spirals;
use spirals::{spirals, CLASSES, HELD_OUT, HIDDEN};

const BATCH: usize = 128;
const EPOCHS: usize = 200;
const LEARNING_RATE: f64 = 1e-2;
const SEED: u64 = 42;
const MIN_ACCURACY: f64 = 0.95;

/// A 2-HIDDEN-HIDDEN-3 perceptron with tanh activations.
#[derive(Ptree, Clone)]
struct Mlp {
    layers: Vec<nn::Linear>,
}

impl Mlp {
    fn new(key: &Tensor) -> Mlp {
        let k = rng::split(key, 3);
        let sizes = [2, HIDDEN, HIDDEN, CLASSES];
        Mlp {
            layers: (0..3)
                .map(|i| nn::Linear::new(&k.get(i), sizes[i], sizes[i + 1]))
                .collect(),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let (last, hidden) = self.layers.split_last().unwrap();
        last.forward(&hidden.iter().fold(x.clone(), |h, l| l.forward(&h).tanh()))
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        nn::cross_entropy(&self.forward(x), y).mean_all()
    }

    fn accuracy(&self, x: &Tensor, y: &Tensor) -> f64 {
        let predicted = self.forward(x).argmax(-1, false);
        predicted.equal(y).cast(DType::F32).mean_all().item::<f32>() as f64
    }
}

/// Where the loss curve goes: the first argument, else `target/` (found
/// from this executable's path, `target/<profile>/examples/train_mlp`), else
/// the system's temporary directory.
fn plot_path(cli: &args::Args) -> PathBuf {
    if let Some(path) = &cli.path {
        return path.clone();
    }
    let exe = std::env::current_exe().ok();
    let examples = exe
        .as_deref()
        .and_then(|e| e.parent())
        .filter(|d| d.ends_with("examples"));
    let target = examples.and_then(|d| d.parent()?.parent());
    target
        .map_or_else(std::env::temp_dir, PathBuf::from)
        .join("train_mlp_loss.svg")
}

fn main() {
    let start = Instant::now();
    let cli = args::parse();
    nx::seed(SEED);
    let mut rng = SplitMix(SEED);
    let (x, y) = spirals(&mut rng);
    let n_train = x.shape()[0] - HELD_OUT;
    let (x_train, y_train) = (x.narrow(0, 0, n_train), y.narrow(0, 0, n_train));
    let (x_test, y_test) = (
        x.narrow(0, n_train, HELD_OUT),
        y.narrow(0, n_train, HELD_OUT),
    );
    println!("data: {CLASSES} interleaved spirals ({n_train} train, {HELD_OUT} held out)");

    let batches_per_epoch = n_train / BATCH; // the last partial batch is dropped
    let total_steps = EPOCHS * batches_per_epoch;
    let mut model = Mlp::new(&rng::key(SEED));
    let opt = optim::adam(
        optim::cosine_decay(LEARNING_RATE, total_steps as u64, 0.0),
        Default::default(),
    );
    let mut state = opt.init(&model);
    println!(
        "model: MLP 2-{HIDDEN}-{HIDDEN}-{CLASSES} (tanh), {} parameters; training step: {}",
        model.leaves().iter().map(|t| t.numel()).sum::<usize>(),
        if cli.eager {
            "eager (--eager)".to_string()
        } else {
            format!("jit on {}", cli.device)
        }
    );
    let train_step = |(model, state, x, y): &(Mlp, optim::OptState, Tensor, Tensor)| {
        let (loss, grads) = value_and_grad(|m: &Mlp| m.loss(x, y), model);
        let (updates, state) = opt.update(&grads, state, model);
        (loss, optim::apply_updates(model, &updates), state)
    };
    let jitted = rune::jit_with(
        &train_step,
        JitOpts {
            device: cli.device.clone(),
            ..JitOpts::default()
        },
    );
    let run_step = |args: &(Mlp, optim::OptState, Tensor, Tensor), jit: bool| {
        if jit {
            jitted.call(args)
        } else {
            train_step(args)
        }
    };

    let bar = progress::bar(total_steps);
    let train_start = Instant::now();
    let (mut losses, mut held_out_losses) = (vec![], vec![]);
    let mut running = f64::NAN; // exponential moving average of the minibatch loss
    for epoch in 0..EPOCHS {
        let order = rng.permutation(n_train);
        for b in 0..batches_per_epoch {
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let (l, m, s) = run_step(
                &(model, state, x_train.take(&idx, 0), y_train.take(&idx, 0)),
                !cli.eager,
            );
            (model, state) = (m, s);
            let l = l.item::<f32>() as f64;
            assert!(l.is_finite(), "loss diverged at step {}: {l}", losses.len());
            losses.push(l);
            running = if running.is_nan() {
                l
            } else {
                0.95 * running + 0.05 * l
            };
            bar.set_message(format!("epoch {}/{EPOCHS}  loss {running:.4}", epoch + 1));
            bar.inc(1);
        }
        held_out_losses.push(model.loss(&x_test, &y_test).item::<f32>() as f64);
        if bar.is_hidden() && (epoch + 1) % 25 == 0 {
            // no terminal to draw the bar on (output piped, CI): a line now and then
            println!("epoch {:>3}/{EPOCHS}  loss {running:.4}", epoch + 1);
        }
    }
    bar.finish();
    let train_time = train_start.elapsed().as_secs_f64();
    println!(
        "trained {total_steps} steps ({EPOCHS} epochs x {batches_per_epoch} minibatches of {BATCH}) \
         in {train_time:.2} s ({:.2} ms/step)",
        1e3 * train_time / total_steps as f64
    );
    // The step time of both modes on one minibatch, after warming up.
    let probe = (
        model.clone(),
        state.clone(),
        x_train.narrow(0, 0, BATCH),
        y_train.narrow(0, 0, BATCH),
    );
    let time_step = |jit: bool| progress::median_time(20, 200, || drop(run_step(&probe, jit)));
    let (t_jit, t_eager) = (time_step(true), time_step(false));
    println!(
        "step time (median of 200): jit {:.1} us, eager {:.1} us, speed-up {:.2}x",
        t_jit * 1e6,
        t_eager * 1e6,
        t_eager / t_jit
    );
    let test_acc = model.accuracy(&x_test, &y_test);
    println!(
        "train accuracy    {:.2}%",
        100.0 * model.accuracy(&x_train, &y_train)
    );
    println!(
        "held-out accuracy {:.2}%  (held-out loss {:.4})",
        100.0 * test_acc,
        held_out_losses[EPOCHS - 1]
    );

    let path = plot_path(&cli);
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
