//! Train a small character-level GPT on real text, built from `rune::nn`
//! layers, with the whole training step (forward, gradient, clipping,
//! schedule, AdamW) as one `rune::jit` program:
//!
//! ```sh
//! cargo run --release --example train_gpt [-- [--data FILE] [--steps N] [--resume]
//!     [--checkpoint PATH] [--sample-every N] [--tie-weights] [--seed N] [--stop-at N]
//!     [--lr X]]
//! ```
//!
//! - the text: `--data FILE`, or by default every fortune of Debian's
//!   `fortunes` package (`apt-get install fortunes`; the files under
//!   `/usr/share/games/fortunes`); the last tenth is held out;
//! - the model: token and position embeddings (`nn::Embedding`), pre-norm
//!   blocks of causal multi-head attention (`nn::MultiHeadAttention`,
//!   `nn::causal_mask`) and a gelu MLP (`nn::Linear`), a final
//!   `nn::LayerNorm` and a linear head (`--tie-weights`: the token
//!   embedding's transpose instead);
//! - training: AdamW with global-norm clipping and a warmup + cosine
//!   learning rate; a progress bar with the loss and tokens/s; the
//!   held-out loss and a generated sample every `--sample-every` steps;
//! - a checkpoint of (model, optimizer state, vocabulary) with `nx::save`
//!   every `--sample-every` steps and at the end (`--checkpoint`, by
//!   default `target/train_gpt.safetensors`); `--resume` continues from it
//!   with the same bits as a run without the stop (batches are a function
//!   of the step; `--stop-at N` stops after step N as an interruption would,
//!   the learning-rate schedule still spanning `--steps`);
//! - at the end the sampler (one character from a window, under `jit`) is
//!   exported with `Jit::export` beside the checkpoint
//!   (`train_gpt_sampler.rune`), loaded back and checked against `jit`.

use std::path::PathBuf;
use std::time::Instant;

use rune::nn;
use rune::optim;
use rune::prelude::*;
use rune::rng;

#[path = "common/progress.rs"]
mod progress;

// ------------------------------------------------------------------ model

/// The model's sizes; the defaults train in a few minutes on two cores.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Characters of context (the sequence length trained on).
    context: usize,
    /// Width of the residual stream.
    dim: usize,
    heads: usize,
    layers: usize,
    /// Width of each block's MLP.
    hidden: usize,
}

const SIZES: Sizes = Sizes {
    context: 64,
    dim: 64,
    heads: 4,
    layers: 2,
    hidden: 256,
};

/// One pre-norm transformer block: `x + attention(norm(x))`, then `x +
/// mlp(norm(x))`.
#[derive(Ptree, Clone)]
struct Block {
    attention_norm: nn::LayerNorm,
    attention: nn::MultiHeadAttention,
    mlp_norm: nn::LayerNorm,
    up: nn::Linear,
    down: nn::Linear,
}

impl Block {
    fn new(key: &Tensor, s: Sizes) -> Block {
        let k = rng::split(key, 3);
        Block {
            attention_norm: nn::LayerNorm::new(s.dim),
            attention: nn::MultiHeadAttention::new(&k.get(0), s.dim, s.heads),
            mlp_norm: nn::LayerNorm::new(s.dim),
            up: nn::Linear::new(&k.get(1), s.dim, s.hidden),
            down: nn::Linear::new(&k.get(2), s.hidden, s.dim),
        }
    }

    fn forward(&self, x: &Tensor, mask: &Tensor) -> Tensor {
        let x = x + self
            .attention
            .forward(&self.attention_norm.forward(x), Some(mask));
        let mlp = self
            .down
            .forward(&self.up.forward(&self.mlp_norm.forward(&x)).gelu());
        x + mlp
    }
}

#[derive(Ptree, Clone)]
struct Gpt {
    tokens: nn::Embedding,
    positions: nn::Embedding,
    blocks: Vec<Block>,
    final_norm: nn::LayerNorm,
    /// `None`: logits from the token embedding's transpose (tied weights).
    head: Option<nn::Linear>,
}

impl Gpt {
    fn new(key: &Tensor, vocab: usize, s: Sizes, tie_weights: bool) -> Gpt {
        let k = rng::split(key, s.layers + 3);
        let mut tokens = nn::Embedding::new(&k.get(0), vocab, s.dim);
        let mut positions = nn::Embedding::new(&k.get(1), s.context, s.dim);
        if tie_weights {
            // The table is also the head: entries of std 1 would start the
            // logits at std sqrt(dim); GPT-2's 0.02 keeps them near 0. The
            // positions shrink with it, or they would drown the tokens.
            tokens.table = &tokens.table * 0.02;
            positions.table = &positions.table * 0.02;
        }
        Gpt {
            tokens,
            positions,
            blocks: (0..s.layers)
                .map(|i| Block::new(&k.get(i + 3), s))
                .collect(),
            final_norm: nn::LayerNorm::new(s.dim),
            head: (!tie_weights).then(|| nn::Linear::new(&k.get(2), s.dim, vocab)),
        }
    }

    /// The next-character logits `[B, T, vocab]` at every position of `ids
    /// [B, T]`.
    fn forward(&self, ids: &Tensor) -> Tensor {
        let t = ids.shape()[1];
        let positions = Tensor::arange(0.0, t as f64, 1.0, DType::I32);
        let mut x = self.tokens.forward(ids) + self.positions.forward(&positions);
        let mask = nn::causal_mask(t);
        for block in &self.blocks {
            x = block.forward(&x, &mask);
        }
        let x = self.final_norm.forward(&x);
        match &self.head {
            Some(head) => head.forward(&x),
            None => x.matmul(&self.tokens.table.transpose()),
        }
    }

    /// The mean cross-entropy of predicting `targets [B, T]` from `ids`.
    fn loss(&self, ids: &Tensor, targets: &Tensor) -> Tensor {
        nn::cross_entropy(&self.forward(ids), targets).mean_all()
    }
}

// -------------------------------------------------------------- optimizer

/// The default peak learning rate (`--lr`).
const PEAK_LR: f64 = 2e-2;
const END_LR: f64 = 1e-4;
const WARMUP: usize = 100;
const CLIP: f64 = 1.0;
const WEIGHT_DECAY: f64 = 0.1;

/// AdamW with the gradients clipped to global norm `CLIP`, decoupled weight
/// decay on the matrices (not biases or gains), and a warmup + cosine
/// learning rate peaking at `peak_lr` and spanning `steps` steps.
fn optimizer(peak_lr: f64, steps: usize) -> optim::Optimizer {
    let schedule = optim::warmup_cosine_decay(
        0.0,
        peak_lr,
        WARMUP as u64,
        steps.max(WARMUP + 1) as u64,
        END_LR,
    );
    let matrices = optim::mask(|p: &str| p.ends_with(".w") || p.ends_with(".table"));
    optim::chain(vec![
        optim::clip_by_global_norm(CLIP),
        optim::adamw(
            schedule,
            optim::AdamWOpts {
                weight_decay: WEIGHT_DECAY,
                mask: Some(matrices),
                ..Default::default()
            },
        ),
    ])
}

// ------------------------------------------------------------------- data

const FORTUNES: &str = "/usr/share/games/fortunes";

/// Every fortune of the `fortunes` package, separated by blank lines.
fn fortunes() -> Result<String, String> {
    let dir = std::fs::read_dir(FORTUNES).map_err(|e| {
        format!(
            "no text to train on: {FORTUNES} cannot be read ({e}).\n\
             Install Debian's fortunes (`sudo apt-get install fortunes`) or pass --data FILE."
        )
    })?;
    let mut files: Vec<PathBuf> = dir
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        // The text files; `.dat` are indices, `.u8` links to the same text.
        .filter(|p| p.is_file() && p.extension().is_none())
        .collect();
    files.sort();
    let mut text = String::new();
    for file in files {
        let bytes = std::fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        for fortune in String::from_utf8_lossy(&bytes).split("\n%\n") {
            text.push_str(fortune.trim_end_matches('%').trim());
            text.push_str("\n\n");
        }
    }
    if text.trim().is_empty() {
        return Err(format!("{FORTUNES} holds no fortunes; pass --data FILE"));
    }
    Ok(text)
}

/// The text with control characters dropped (fortunes underline by
/// overstriking: `_`, backspace, letter), tabs as spaces.
fn clean(text: &str) -> Vec<char> {
    let mut out: Vec<char> = Vec::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{8}' => {
                out.pop(); // the overstruck character goes; the next one stays
            }
            '\t' => out.push(' '),
            '\n' => out.push('\n'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// The text as ids into its sorted set of characters.
struct Corpus {
    vocab: Vec<char>,
    train: Vec<i32>,
    held_out: Vec<i32>,
}

impl Corpus {
    fn new(text: &str) -> Corpus {
        let chars = clean(text);
        let mut vocab = chars.clone();
        vocab.sort_unstable();
        vocab.dedup();
        let ids: Vec<i32> = chars
            .iter()
            .map(|c| vocab.binary_search(c).unwrap() as i32)
            .collect();
        let split = ids.len() * 9 / 10;
        Corpus {
            vocab,
            train: ids[..split].to_vec(),
            held_out: ids[split..].to_vec(),
        }
    }

    /// `batch` windows of `context + 1` characters at offsets drawn from
    /// `key`: the inputs `[batch, context]` and the targets, shifted by one.
    fn batch(ids: &[i32], key: &Tensor, batch: usize, context: usize) -> (Tensor, Tensor) {
        let offsets =
            rng::randint(key, 0, (ids.len() - context - 1) as i64, &[batch]).to_vec::<i32>();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for o in offsets {
            let o = o as usize;
            x.extend_from_slice(&ids[o..o + context]);
            y.extend_from_slice(&ids[o + 1..o + context + 1]);
        }
        (
            Tensor::from_vec(x, &[batch, context]),
            Tensor::from_vec(y, &[batch, context]),
        )
    }

    fn text(&self, ids: &[i32]) -> String {
        ids.iter().map(|&i| self.vocab[i as usize]).collect()
    }
}

// -------------------------------------------------------------------- run

struct Args {
    data: Option<PathBuf>,
    steps: usize,
    resume: bool,
    checkpoint: Option<PathBuf>,
    sample_every: usize,
    tie_weights: bool,
    seed: u64,
    /// Stop (with a checkpoint) after this step, as if interrupted: the
    /// schedule still spans `steps`, so `--resume` continues the same run.
    stop_at: Option<usize>,
    /// The peak learning rate.
    lr: f64,
}

const USAGE: &str = "usage: train_gpt [--data FILE] [--steps N] [--resume] [--checkpoint PATH] \
                     [--sample-every N] [--tie-weights] [--seed N] [--stop-at N] [--lr X]";

fn parse_args() -> Args {
    let mut args = Args {
        data: None,
        steps: 2000,
        resume: false,
        checkpoint: None,
        sample_every: 500,
        tie_weights: false,
        seed: 0,
        stop_at: None,
        lr: PEAK_LR,
    };
    let mut it = std::env::args().skip(1);
    let number = |opt: &str, v: Option<String>| -> usize {
        v.and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{opt} needs a whole number; {USAGE}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--data" => {
                args.data = Some(
                    it.next()
                        .unwrap_or_else(|| panic!("--data needs a file; {USAGE}"))
                        .into(),
                )
            }
            "--checkpoint" => {
                args.checkpoint = Some(
                    it.next()
                        .unwrap_or_else(|| panic!("--checkpoint needs a path; {USAGE}"))
                        .into(),
                )
            }
            "--steps" => args.steps = number("--steps", it.next()).max(1),
            "--sample-every" => args.sample_every = number("--sample-every", it.next()).max(1),
            "--seed" => args.seed = number("--seed", it.next()) as u64,
            "--stop-at" => args.stop_at = Some(number("--stop-at", it.next())),
            "--lr" => {
                args.lr = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .filter(|&lr: &f64| lr > 0.0)
                    .unwrap_or_else(|| panic!("--lr needs a positive number; {USAGE}"))
            }
            "--resume" => args.resume = true,
            "--tie-weights" => args.tie_weights = true,
            _ => panic!("unknown argument {a}; {USAGE}"),
        }
    }
    args
}

/// `target/train_gpt.safetensors` (beside the example's executable), or in
/// the temporary directory.
fn default_checkpoint() -> PathBuf {
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()));
    target
        .unwrap_or_else(std::env::temp_dir)
        .join("train_gpt.safetensors")
}

const BATCH: usize = 32;
const HELD_OUT_BATCHES: usize = 8;
const SAMPLE_CHARS: usize = 200;
const TEMPERATURE: f64 = 0.8;

fn main() {
    let args = parse_args();
    let text = match &args.data {
        Some(path) => std::fs::read_to_string(path).unwrap_or_else(|e| {
            eprintln!("cannot read {}: {e}", path.display());
            std::process::exit(1)
        }),
        None => fortunes().unwrap_or_else(|e| {
            eprintln!("{e}");
            std::process::exit(1)
        }),
    };
    let corpus = Corpus::new(&text);
    let s = SIZES;
    if corpus.held_out.len() < s.context + 2 {
        eprintln!(
            "the text is too short: its held-out tenth needs more than {} characters",
            s.context + 1
        );
        std::process::exit(1);
    }
    let vocab = corpus.vocab.len();
    let vocab_tensor = Tensor::from_vec(corpus.vocab.iter().map(|&c| c as i32).collect(), &[vocab]);
    println!(
        "{} characters ({} held out), {vocab} distinct; context {}, width {}, {} heads, {} layers",
        corpus.train.len() + corpus.held_out.len(),
        corpus.held_out.len(),
        s.context,
        s.dim,
        s.heads,
        s.layers
    );

    let checkpoint = args.checkpoint.clone().unwrap_or_else(default_checkpoint);
    if let Some(dir) = checkpoint.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }
    let mut model = Gpt::new(&rng::key(args.seed), vocab, s, args.tie_weights);
    let (steps, peak_lr) = (args.steps, args.lr);
    let optimizer = optimizer(peak_lr, steps);
    let mut opt = optimizer.init(&model);
    if args.resume {
        let template = (model, opt, vocab_tensor.clone());
        let (m, o, saved_vocab): (Gpt, optim::OptState, Tensor) =
            rune::nx::load(&checkpoint, &template).unwrap_or_else(|e| {
                eprintln!("cannot resume from {}: {e}", checkpoint.display());
                std::process::exit(1)
            });
        if saved_vocab.to_vec::<i32>() != vocab_tensor.to_vec::<i32>() {
            eprintln!(
                "{} was trained on another text (its characters differ)",
                checkpoint.display()
            );
            std::process::exit(1);
        }
        (model, opt) = (m, o);
    }
    let params: usize = model.leaves().iter().map(|p| p.numel()).sum();
    let first_step = opt.count().item::<i32>() as usize;
    println!("{params} parameters; steps {first_step}..{}", args.steps);

    let train_step = jit(
        |(model, opt, x, y): &(Gpt, optim::OptState, Tensor, Tensor)| {
            let (loss, grads) = value_and_grad(|m: &Gpt| m.loss(x, y), model);
            let (updates, opt) = optimizer.update(&grads, opt, model);
            (loss, optim::apply_updates(model, &updates), opt)
        },
    );
    let eval_loss = jit(|(model, x, y): &(Gpt, Tensor, Tensor)| model.loss(x, y));
    // The next character after the first `len` of a window [1, context]
    // (the rest is padding, which the causal mask keeps from mattering).
    let next_char = jit(
        |(model, window, len, key): &(Gpt, Tensor, Tensor, Tensor)| {
            let logits = model.forward(window).get(0).take(&(len - 1.0), 0);
            rng::categorical(key, &(logits / TEMPERATURE), -1)
        },
    );

    let data_key = rng::key(args.seed ^ 0x5eed);
    let held_out_loss = |model: &Gpt| -> f32 {
        let total: f32 = (0..HELD_OUT_BATCHES)
            .map(|i| {
                let (x, y) = Corpus::batch(
                    &corpus.held_out,
                    &rng::fold_in(&data_key, u32::MAX - i as u32),
                    BATCH,
                    s.context,
                );
                eval_loss.call(&(model.clone(), x, y)).item::<f32>()
            })
            .sum();
        total / HELD_OUT_BATCHES as f32
    };
    let sample = |model: &Gpt, key: &Tensor| -> String {
        let mut ids = vec![corpus.vocab.binary_search(&'\n').unwrap_or(0) as i32];
        for i in 0..SAMPLE_CHARS {
            let window_start = ids.len().saturating_sub(s.context);
            let mut window = ids[window_start..].to_vec();
            let len = window.len();
            window.resize(s.context, 0);
            let args = (
                model.clone(),
                Tensor::from_vec(window, &[1, s.context]),
                Tensor::scalar(len as i32),
                rng::fold_in(key, i as u32),
            );
            ids.push(next_char.call(&args).item::<i32>());
        }
        corpus.text(&ids[1..])
    };

    let bar = progress::bar(steps);
    bar.set_position(first_step as u64);
    let started = Instant::now();
    let mut smoothed: Option<f32> = None;
    let last_step = args.stop_at.map_or(steps, |s| s.min(steps));
    for step in first_step..last_step {
        let (x, y) = Corpus::batch(
            &corpus.train,
            &rng::fold_in(&data_key, step as u32),
            BATCH,
            s.context,
        );
        let (loss, next_model, next_opt) = train_step.call(&(model, opt, x, y));
        (model, opt) = (next_model, next_opt);
        let loss = loss.item::<f32>();
        let avg = smoothed.map_or(loss, |a| 0.95 * a + 0.05 * loss);
        smoothed = Some(avg);
        let done = step + 1 - first_step;
        let tokens_per_s = (done * BATCH * s.context) as f64 / started.elapsed().as_secs_f64();
        bar.set_message(format!(
            "loss {avg:.3}  {:.1}k tokens/s",
            tokens_per_s / 1e3
        ));
        bar.inc(1);
        if (step + 1) % args.sample_every == 0 || step + 1 == last_step {
            let held_out = held_out_loss(&model);
            let text = sample(&model, &rng::fold_in(&rng::key(args.seed), step as u32));
            // `suspend`, not `println`: a hidden bar (no terminal) would drop the line.
            bar.suspend(|| {
                println!(
                    "step {}: train loss {avg:.3}, held-out loss {held_out:.3}\n---\n{text}\n---",
                    step + 1
                )
            });
            rune::nx::save(
                &(model.clone(), opt.clone(), vocab_tensor.clone()),
                &checkpoint,
            )
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", checkpoint.display()));
        }
    }
    bar.finish();
    println!(
        "{:.1} s; checkpoint {}",
        started.elapsed().as_secs_f64(),
        checkpoint.display()
    );

    // The sampler as one file that runs without tracing or a C compiler
    // (`rune::Exported`): checked to draw what the jitted sampler draws.
    let exported = checkpoint.with_file_name("train_gpt_sampler.rune");
    let example = (
        model.clone(),
        Tensor::zeros(&[1, s.context], DType::I32),
        Tensor::scalar(1i32),
        rng::key(args.seed),
    );
    next_char
        .export(&example, &exported)
        .unwrap_or_else(|e| panic!("cannot export the sampler: {e}"));
    let loaded = rune::Exported::load(&exported)
        .unwrap_or_else(|e| panic!("cannot load {}: {e}", exported.display()));
    let drawn = loaded
        .call(&example)
        .unwrap_or_else(|e| panic!("the exported sampler failed: {e}"));
    assert_eq!(
        drawn[0].item::<i32>(),
        next_char.call(&example).item::<i32>()
    );
    println!("sampler exported to {}", exported.display());
}
