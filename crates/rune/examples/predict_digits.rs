//! Classify the held-out handwritten digits with the predictor
//! `train_digits` exported, with no tracing and no C compiler:
//!
//! ```sh
//! cargo run --release --example train_digits                 # writes target/digits.rune
//! cargo run --release --example predict_digits [-- PATH] [--trust KEY.pub]
//! ```
//!
//! PATH is `target/digits.rune` by default. With `--trust FILE` (a public
//! key, 64 hex digits: `train_digits` writes `digits.pub`) it loads the
//! file only if that key signed it (`rune::Exported::load_trusted`: the
//! signature is checked before any of the file's code is mapped); without,
//! with `rune::Exported::load`, as one loads a file one made oneself.
//!
//! It loads the exported program (the compiled kernels for one or more CPU
//! levels, the plan and the trained parameters as constants, all in the
//! one file), prints what the file records (the library that wrote it,
//! each CPU target with the compiler that built it and the one this host
//! runs, the signer), reads the same fixed held-out split of the UCI digits as
//! `train_digits` (the data is compiled in), classifies them, and prints
//! the accuracy, which is the held-out accuracy `train_digits` reported;
//! then how long loading and the first prediction took. It runs with `CC`
//! and `PATH` pointing where no compiler lives (`tests/export.rs` runs it
//! so).

use std::time::Instant;

use rune::prelude::*;

#[path = "common/digits.rs"]
mod digits;

fn main() {
    let start = Instant::now();
    let (mut path, mut trust) = (None, None);
    let mut args = std::env::args_os().skip(1);
    while let Some(a) = args.next() {
        if a == "--trust" {
            let file = args.next().expect("--trust needs a public key file");
            let hex = std::fs::read_to_string(&file)
                .unwrap_or_else(|e| panic!("{}: {e}", file.to_string_lossy()));
            let key = rune::export::parse_public_key(&hex)
                .unwrap_or_else(|e| panic!("{}: {e}", file.to_string_lossy()));
            trust = Some(key);
        } else {
            path = Some(std::path::PathBuf::from(a));
        }
    }
    let path = path.unwrap_or_else(default_model);
    let loaded = match trust {
        Some(key) => rune::Exported::load_trusted(&path, &[key]),
        None => rune::Exported::load(&path),
    };
    let model = loaded.unwrap_or_else(|e| {
        eprintln!("{}: {e}", path.display());
        eprintln!("(train_digits writes it: cargo run --release --example train_digits)");
        std::process::exit(2)
    });
    let loaded = start.elapsed();
    let data = digits::load().unwrap_or_else(|e| {
        eprintln!("cannot read the digits: {e}");
        std::process::exit(2)
    });
    let (_, held_out) = digits::split(data.len());
    let (x, y) = digits::tensors(&data, &held_out);
    let t_call = Instant::now();
    let out = model.call(&x).unwrap_or_else(|e| {
        eprintln!("{}: {e}", path.display());
        std::process::exit(2)
    });
    let first_call = t_call.elapsed();
    let to_first_prediction = start.elapsed();
    let (predicted, probabilities) = (&out[0], &out[1]);
    let right = predicted.equal(&y).cast(DType::I32).sum_all().item::<i32>();
    let accuracy = right as f64 / held_out.len() as f64;
    let (file_bytes, code_bytes) = model.sizes();
    println!(
        "model: {} ({file_bytes} bytes, {code_bytes} of native code running; inputs {}, outputs {})",
        path.display(),
        list(model.inputs()),
        list(model.outputs())
    );
    println!("{}", model.info());
    println!(
        "held-out accuracy {:.2}% ({right} of {} right)",
        100.0 * accuracy,
        held_out.len()
    );
    let (guesses, labels) = (predicted.to_vec::<i32>(), y.to_vec::<i32>());
    let probs = probabilities.to_vec::<f32>();
    for i in 0..5 {
        println!(
            "  digit {i}: predicted {} (p = {:.3}), label {}",
            guesses[i],
            probs[i * 10 + guesses[i] as usize],
            labels[i]
        );
    }
    println!(
        "load {:.2} ms, first call {:.2} ms, start to first prediction {:.2} ms",
        loaded.as_secs_f64() * 1e3,
        first_call.as_secs_f64() * 1e3,
        to_first_prediction.as_secs_f64() * 1e3
    );
}

fn list(specs: &[rune::LeafSpec]) -> String {
    specs
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `target/digits.rune`, where `train_digits` writes it by default (found
/// from this executable's path, `target/<profile>/examples/predict_digits`).
fn default_model() -> std::path::PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.join("digits.rune")))
        .unwrap_or_else(|| "digits.rune".into())
}
