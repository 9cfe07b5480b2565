//! W19 (`../shared/bench/generality/`): one training step of a
//! character-level GPT (4 pre-LN blocks, D 128, 4 heads, MLP 512 gelu,
//! learned positions, vocab 96, context 64, batch 32) with
//! `clip_by_global_norm(1) + adamw(warmup_cosine_decay, wd 0.1)`, the whole
//! step under one `jit`, written with `rune::nn` and `rune::optim`; params
//! and optimizer state fed back. Inputs from W19's integer hash, so the
//! first loss matches JAX's (5.083419).
//!
//! ```sh
//! cargo run --release --example bench_w19 [-- REPS]
//! ```
//!
//! Prints `loss0`, the first call's time and `min_ms` over REPS (default 50)
//! steps after 5 warm-up steps (with `W19_SPLIT=1` also the gradient alone
//! and the optimizer update alone, each jitted). `bench/w19.py` runs it
//! beside JAX + Optax.

use std::time::Instant;

use rune::prelude::*;
use rune::{nn, optim};

#[path = "common/hashed.rs"]
mod hashed;
use hashed::{hash_u32, hashed};

const V: usize = 96;
const T: usize = 64;
const B: usize = 32;
const D: usize = 128;
const L: usize = 4;
const H: usize = 4;

fn linear(seed: u32, d_in: usize, d_out: usize) -> nn::Linear {
    nn::Linear {
        w: hashed(seed, &[d_in, d_out], 1.0 / (d_in as f64).sqrt()),
        b: Tensor::zeros(&[d_out], DType::F32),
    }
}

#[derive(Ptree, Clone)]
struct Block {
    ln1: nn::LayerNorm,
    attn: nn::MultiHeadAttention,
    ln2: nn::LayerNorm,
    fc1: nn::Linear,
    fc2: nn::Linear,
}

#[derive(Ptree, Clone)]
struct Gpt {
    tok: nn::Embedding,
    pos: Tensor,
    blocks: Vec<Block>,
    ln_f: nn::LayerNorm,
    head: nn::Linear,
}

impl Gpt {
    fn new() -> Gpt {
        let block = |l: u32| {
            let s = 100 * (l + 1);
            let attn = nn::MultiHeadAttention {
                q: linear(s + 1, D, D),
                k: linear(s + 2, D, D),
                v: linear(s + 3, D, D),
                o: linear(s + 4, D, D),
                heads: H,
            };
            let (ln1, ln2) = (nn::LayerNorm::new(D), nn::LayerNorm::new(D));
            Block {
                ln1,
                attn,
                ln2,
                fc1: linear(s + 5, D, 4 * D),
                fc2: linear(s + 6, 4 * D, D),
            }
        };
        Gpt {
            tok: nn::Embedding {
                table: hashed(1, &[V, D], 1.0),
            },
            pos: hashed(2, &[T, D], 0.1),
            blocks: (0..L as u32).map(block).collect(),
            ln_f: nn::LayerNorm::new(D),
            head: linear(3, D, V),
        }
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        let mask = nn::causal_mask(T);
        let mut h = self.tok.forward(x) + &self.pos;
        for b in &self.blocks {
            h = &h + b.attn.forward(&b.ln1.forward(&h), Some(&mask));
            h = &h + b.fc2.forward(&b.fc1.forward(&b.ln2.forward(&h)).gelu());
        }
        nn::cross_entropy(&self.head.forward(&self.ln_f.forward(&h)), y).mean_all()
    }
}

fn main() {
    let reps: usize = std::env::args()
        .nth(1)
        .map_or(50, |s| s.parse().expect("REPS: a number"));
    let opt = optim::chain(vec![
        optim::clip_by_global_norm(1.0),
        optim::adamw(
            optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5),
            optim::AdamWOpts {
                weight_decay: 0.1,
                ..Default::default()
            },
        ),
    ]);
    let tokens: Vec<i32> = hash_u32(19, B * (T + 1))
        .iter()
        .map(|&t| (t % V as u32) as i32)
        .collect();
    let t = Tensor::from_vec(tokens, &[B, T + 1]);
    let (x, y) = (t.narrow(1, 0, T), t.narrow(1, 1, T));
    let step = jit(|(p, s, x, y): &(Gpt, optim::OptState, Tensor, Tensor)| {
        let (l, g) = value_and_grad(|p: &Gpt| p.loss(x, y), p);
        let (u, s) = opt.update(&g, s, p);
        (l, optim::apply_updates(p, &u), s)
    });
    let p = Gpt::new();
    let s = opt.init(&p);
    let mut args = (p, s, x, y);
    let started = Instant::now();
    let (l, p, s) = step.call(&args);
    let loss0 = l.item::<f32>();
    let first = started.elapsed().as_secs_f64();
    (args.0, args.1) = (p, s);
    let mut times = vec![];
    for i in 0..5 + reps {
        let t0 = Instant::now();
        let (l, p, s) = step.call(&args);
        l.item::<f32>();
        if i >= 5 {
            times.push(t0.elapsed().as_secs_f64());
        }
        (args.0, args.1) = (p, s);
    }
    let min = times.iter().cloned().fold(f64::INFINITY, f64::min);
    println!(
        "loss0 {loss0:.6}\nfirst_call_s {first:.3}\nmin_ms {:.3}",
        min * 1e3
    );
    if std::env::var_os("W19_SPLIT").is_some() {
        // Diagnostics: the gradient alone, and the optimizer update alone.
        let grad =
            jit(|(p, x, y): &(Gpt, Tensor, Tensor)| value_and_grad(|p: &Gpt| p.loss(x, y), p));
        let ga = (args.0.clone(), args.2.clone(), args.3.clone());
        let update = jit(|(g, s, p): &(Gpt, optim::OptState, Gpt)| {
            let (u, s) = opt.update(g, s, p);
            (optim::apply_updates(p, &u), s)
        });
        let ua = (grad.call(&ga).1, args.1.clone(), args.0.clone());
        let time = |f: &mut dyn FnMut()| {
            f();
            (0..reps)
                .map(|_| {
                    let t0 = Instant::now();
                    f();
                    t0.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let tg = time(&mut || {
            grad.call(&ga).0.item::<f32>();
        });
        let tu = time(&mut || {
            update.call(&ua).0.head.b.to_vec::<f32>();
        });
        println!(
            "grad_only_ms {:.3}\nupdate_only_ms {:.3}",
            tg * 1e3,
            tu * 1e3
        );
    }
}
