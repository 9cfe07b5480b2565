//! Train an MLP on real handwritten digits:
//!
//! ```sh
//! cargo run --release --example train_digits [-- [--epochs N] [--eager] [--device DEVICE] [--cpu TARGETS] [--out DIR]]
//! ```
//!
//! - the data: the UCI optical-recognition digits (1,797 8x8 images with
//!   pixel values 0..16, from 43 writers; Alpaydin and Kaynak, CC BY 4.0), as
//!   scikit-learn ships them, in `examples/data/digits.csv.gz` (compiled in);
//!   a fixed shuffle splits them into 1,437 training and 360 held-out digits;
//! - the model: an MLP 64-256-256-10 (relu) of `nn::Linear` layers in a
//!   `#[derive(Ptree)]` struct, the loss `nn::cross_entropy`;
//! - the training step (`rune::value_and_grad`, then `optim::adam`'s
//!   update, its step count in the optimizer state) runs under
//!   `rune::jit` (`--eager` runs it op by op; `--device` names jit's device),
//!   with a progress bar;
//! - at the end it prints the held-out accuracy (and exits non-zero under
//!   97%), saves the parameters as a safetensors checkpoint (`nx::save`),
//!   loads it back (`nx::load`) and checks that it predicts the same, and
//!   draws held-out digits with their predictions (green right, red wrong;
//!   the mistakes first) as SVG; both files go to `target/` or `--out DIR`;
//! - it exports the trained predictor (`jit(predict).export_with`: the
//!   parameters as captured constants, the held-out batch's shape as the
//!   signature; kernels for the portable CPU targets, or `--cpu TARGETS`,
//!   e.g. `x86-64-v2`) to `digits.rune` beside them, signed with the
//!   Ed25519 key in `digits.key` there (made on the first run; its public
//!   half in `digits.pub`), checks that the exported program predicts what
//!   the model does, and prints the command that runs it:
//!   `examples/predict_digits.rs` checks the signature, loads it and
//!   classifies the held-out digits with no tracing and no C compiler.

use std::time::Instant;

use rune::prelude::*;
use rune::{nn, optim};

#[path = "common/args.rs"]
mod args;
#[path = "common/digits.rs"]
mod digits;
#[path = "common/image_grid.rs"]
mod image_grid;
#[path = "common/progress.rs"]
mod progress;
#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

const HIDDEN: usize = 256;
const CLASSES: usize = 10;
const BATCH: usize = 64;
const EPOCHS: usize = 60;
const LEARNING_RATE: f64 = 2e-3;
const SEED: u64 = 3;
const MIN_ACCURACY: f64 = 0.97;

/// 64 -> HIDDEN -> HIDDEN -> 10, relu between.
#[derive(Ptree, Clone)]
struct Mlp {
    l1: nn::Linear,
    l2: nn::Linear,
    l3: nn::Linear,
}

impl Mlp {
    /// He initialization (normal, variance 2 / fan-in), zero biases.
    fn init(rng: &mut SplitMix) -> Mlp {
        let mut dense = |i: usize, o: usize| nn::Linear {
            w: rng.normal_tensor(&[i, o], (2.0 / i as f32).sqrt()),
            b: Tensor::zeros(&[o], DType::F32),
        };
        Mlp {
            l1: dense(digits::PIXELS, HIDDEN),
            l2: dense(HIDDEN, HIDDEN),
            l3: dense(HIDDEN, CLASSES),
        }
    }

    /// Logits `[n, 10]` of pixels `[n, 64]` (scaled to [0, 1]).
    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.l1.forward(x).relu();
        self.l3.forward(&self.l2.forward(&h).relu())
    }

    /// Mean cross-entropy of the logits of `x` against the labels `y`.
    fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        nn::cross_entropy(&self.forward(x), y).mean_all()
    }
}

fn accuracy(predicted: &Tensor, y: &Tensor) -> f64 {
    predicted.equal(y).cast(DType::F32).mean_all().item::<f32>() as f64
}

fn main() {
    let start = Instant::now();
    let cli = args::parse_with(&["--epochs", "--cpu"]);
    let epochs = cli.epochs.unwrap_or(EPOCHS);
    let data = digits::load().unwrap_or_else(|e| {
        eprintln!("cannot read the digits: {e}");
        std::process::exit(2)
    });
    let (train_idx, test_idx) = digits::split(data.len());
    let (x_train, y_train) = digits::tensors(&data, &train_idx);
    let (x_test, y_test) = digits::tensors(&data, &test_idx);
    let n_train = train_idx.len();
    println!(
        "data: {} UCI handwritten digits (8x8, from {}), {n_train} train, {} held out (fixed split)",
        data.len(),
        digits::CSV_GZ_PATH,
        test_idx.len()
    );

    let mut rng = SplitMix(SEED);
    let params = Mlp::init(&mut rng);
    println!(
        "model: MLP {}-{HIDDEN}-{HIDDEN}-{CLASSES} (relu), {} parameters",
        digits::PIXELS,
        params.leaves().iter().map(|t| t.numel()).sum::<usize>()
    );
    let opt = optim::adam(LEARNING_RATE, Default::default());
    let mut state = opt.init(&params);
    let mut params = params;
    // One Adam step on a minibatch (the step count lives in the optimizer
    // state, so the jitted step compiles once).
    let train_step = |(p, s, x, y): &(Mlp, optim::OptState, Tensor, Tensor)| {
        let (l, grads) = rune::value_and_grad(|p: &Mlp| p.loss(x, y), p);
        let (updates, s) = opt.update(&grads, s, p);
        (l, optim::apply_updates(p, &updates), s)
    };
    let step_fn = rune::jit_with(
        &train_step,
        JitOpts {
            device: cli.device.clone(),
            ..JitOpts::default()
        },
    );
    println!(
        "training step: {}",
        if cli.eager {
            "eager (--eager)".to_string()
        } else {
            format!("jit on {} (compiled on the first step)", cli.device)
        }
    );

    let batches = n_train / BATCH; // the last partial batch is dropped
    let bar = progress::bar(epochs * batches);
    let train_start = Instant::now();
    let mut running = f64::NAN;
    for epoch in 0..epochs {
        let order = rng.permutation(n_train);
        for b in 0..batches {
            let idx = Tensor::from_slice(&order[b * BATCH..(b + 1) * BATCH], &[BATCH]);
            let args = (params, state, x_train.take(&idx, 0), y_train.take(&idx, 0));
            let (l, p, s) = if cli.eager {
                train_step(&args)
            } else {
                step_fn.call(&args)
            };
            (params, state) = (p, s);
            let l = l.item::<f32>() as f64;
            assert!(l.is_finite(), "loss diverged at epoch {epoch}: {l}");
            running = if running.is_nan() {
                l
            } else {
                0.95 * running + 0.05 * l
            };
            bar.set_message(format!("epoch {}/{epochs}  loss {running:.4}", epoch + 1));
            bar.inc(1);
        }
        if bar.is_hidden() && (epoch + 1) % 10 == 0 {
            println!("epoch {:>3}/{epochs}  loss {running:.4}", epoch + 1);
        }
    }
    bar.finish();
    let train_time = train_start.elapsed().as_secs_f64();
    println!(
        "trained {} steps ({epochs} epochs x {batches} minibatches of {BATCH}) in {train_time:.2} s",
        epochs * batches
    );

    let params = &params;
    let train_acc = accuracy(&params.forward(&x_train).argmax(-1, false), &y_train);
    let logits = params.forward(&x_test);
    let predicted = logits.argmax(-1, false);
    let test_acc = accuracy(&predicted, &y_test);
    println!("train accuracy    {:.2}%", 100.0 * train_acc);
    println!(
        "held-out accuracy {:.2}% ({} of {} right)",
        100.0 * test_acc,
        (test_acc * test_idx.len() as f64).round(),
        test_idx.len()
    );

    // The checkpoint: saved, loaded back, the same logits bit for bit.
    let dir = args::out_dir(&cli);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("cannot create {}: {e}", dir.display());
        std::process::exit(2);
    }
    let ckpt = dir.join("train_digits.safetensors");
    nx::save(params, &ckpt).unwrap_or_else(|e| panic!("write {}: {e}", ckpt.display()));
    let loaded: Mlp =
        nx::load(&ckpt, params).unwrap_or_else(|e| panic!("read {}: {e}", ckpt.display()));
    let same = loaded
        .forward(&x_test)
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

    // The exported predictor: the parameters are captured constants, the
    // input is a batch of the held-out set's shape.
    let model = dir.join("digits.rune");
    let predictor = rune::jit(|x: &Tensor| {
        let logits = params.forward(x);
        (logits.argmax(-1, false), logits.softmax(-1))
    });
    // Signed with the key in `digits.key` beside it (made on the first
    // run); `digits.pub` holds the public key that `predict_digits --trust`
    // checks the file against.
    let signing_key = signing_key(&dir);
    let public = dir.join("digits.pub");
    let public_hex = rune::export::public_key_hex(&signing_key.verifying_key());
    std::fs::write(&public, format!("{public_hex}\n"))
        .unwrap_or_else(|e| panic!("write {}: {e}", public.display()));
    let opts = rune::ExportOpts {
        cpu: match &cli.cpu {
            Some(list) => list
                .split(',')
                .map(|t| t.trim().parse().unwrap_or_else(|e| panic!("--cpu: {e}")))
                .collect(),
            None => rune::ExportOpts::default_targets(),
        },
        signing_key: Some(signing_key),
    };
    let t_export = Instant::now();
    if let Err(e) = predictor.export_with(&x_test, &model, &opts) {
        eprintln!("cannot export the predictor to {}: {e}", model.display());
        std::process::exit(2);
    }
    let export_ms = t_export.elapsed().as_secs_f64() * 1e3;
    let trusted = [opts.signing_key.as_ref().unwrap().verifying_key()];
    let exported = rune::Exported::load_trusted(&model, &trusted)
        .and_then(|m| m.call(&x_test))
        .unwrap_or_else(|e| panic!("{}: {e}", model.display()));
    let exported_same = exported[0].to_vec::<i32>() == predicted.to_vec::<i32>();
    let targets: Vec<&str> = opts.cpu.iter().map(|t| t.name()).collect();
    println!(
        "exported predictor: {} ({} bytes, {export_ms:.0} ms; for {}; signed by {public_hex}); its \
         predictions {}; run it with `cargo run --release --example predict_digits -- {} \
         --trust {}`",
        model.display(),
        std::fs::metadata(&model).map_or(0, |m| m.len()),
        targets.join(", "),
        if exported_same { "identical" } else { "DIFFER" },
        model.display(),
        public.display()
    );

    // The picture: every held-out mistake, then right answers, 40 in all.
    let (guesses, labels) = (predicted.to_vec::<i32>(), y_test.to_vec::<i32>());
    let pixels = x_test.to_vec::<f32>();
    let mut shown: Vec<usize> = (0..labels.len())
        .filter(|&i| guesses[i] != labels[i])
        .collect();
    shown.extend((0..labels.len()).filter(|&i| guesses[i] == labels[i]));
    shown.truncate(40);
    let cells: Vec<image_grid::Cell> = shown
        .iter()
        .map(|&i| image_grid::Cell {
            ink: &pixels[i * digits::PIXELS..(i + 1) * digits::PIXELS],
            caption: if guesses[i] == labels[i] {
                format!("{}", guesses[i])
            } else {
                format!("{} (is {})", guesses[i], labels[i])
            },
            right: guesses[i] == labels[i],
        })
        .collect();
    let svg = dir.join("train_digits_held_out.svg");
    let title = format!(
        "train_digits: held-out digits and predictions ({:.2}% right; mistakes first, red)",
        100.0 * test_acc
    );
    match image_grid::write_svg(&svg, &title, digits::SIDE, 8, 10, &cells) {
        Ok(()) => println!("held-out digits with predictions: {}", svg.display()),
        Err(e) => eprintln!("could not write {}: {e}", svg.display()),
    }
    println!("total time {:.2} s", start.elapsed().as_secs_f64());

    if !same {
        eprintln!("the reloaded checkpoint predicts differently");
        std::process::exit(1);
    }
    if !exported_same {
        eprintln!("the exported predictor predicts differently");
        std::process::exit(1);
    }
    if test_acc < MIN_ACCURACY {
        eprintln!(
            "held-out accuracy {:.2}% is under {:.0}%",
            100.0 * test_acc,
            100.0 * MIN_ACCURACY
        );
        std::process::exit(1);
    }
}

/// The key that signs the export: `dir/digits.key` (32 secret bytes), made
/// from the operating system's random bytes on the first run, readable by
/// this user only.
fn signing_key(dir: &std::path::Path) -> rune::export::SigningKey {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("digits.key");
    let secret: [u8; 32] = match std::fs::read(&path) {
        Ok(bytes) => bytes
            .try_into()
            .unwrap_or_else(|_| panic!("{}: not a 32-byte key", path.display())),
        Err(_) => {
            let mut secret = [0u8; 32];
            std::fs::File::open("/dev/urandom")
                .and_then(|mut f| f.read_exact(&mut secret))
                .unwrap_or_else(|e| panic!("cannot read random bytes: {e}"));
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, &secret))
                .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            secret
        }
    };
    rune::export::SigningKey::from_bytes(&secret)
}
