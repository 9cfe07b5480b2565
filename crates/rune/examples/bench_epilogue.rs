//! A/B of tolk's product epilogues on W4's jitted step and W6's hessian:
//! the same staged graph compiled twice (`tolk::Options { epilogues }`),
//! the two programs called alternately in one process so that load from
//! other processes falls on both alike; min, 10th percentile and median of
//! each, and the ratio of the medians. The results of the two are checked
//! equal bit for bit first.
//!
//! `cargo run --release -p rune --example bench_epilogue -- [calls] [--parts]
//! [--only-parts] [--w9]`: `--parts` adds one 784-512 relu layer (the
//! pre-activation and mask kept, as a backward pass does) and one SGD update
//! of a transposed product, at batch `BATCH` (128); `--w9` adds W9's scan
//! RNN step.

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

#[path = "common/w4.rs"]
mod w4;
use w4::{w4_inputs, w4_step};

use rune::prelude::*;
use std::time::Instant;

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[0], v[v.len() / 10], v[v.len() / 2])
}

fn ab<P: Ptree, Q: Ptree>(name: &str, f: impl Fn(&P) -> Q, p: &P, calls: usize) {
    let g = rune::make_graph(f, p);
    let compile = |epilogues| {
        tolk::compile_with(
            g.clone(),
            &tolk::Options {
                use_cache: false,
                epilogues,
                stream_min_bytes: tolk::schedule::stream_min_bytes(),
            },
        )
        .expect("compiles")
        .program
    };
    let (off, on) = (compile(false), compile(true));
    let inputs = p.leaves();
    for (a, b) in off.run(&inputs).iter().zip(&on.run(&inputs)) {
        let (x, y) = (
            a.cast(DType::F64).to_vec::<f64>(),
            b.cast(DType::F64).to_vec::<f64>(),
        );
        assert!(
            x.iter().zip(&y).all(|(u, v)| u.to_bits() == v.to_bits()),
            "{name}: epilogues change the result"
        );
    }
    let (mut t_off, mut t_on) = (Vec::new(), Vec::new());
    for i in 0..calls + 10 {
        for (prog, ts) in [(&off, &mut t_off), (&on, &mut t_on)] {
            let t = Instant::now();
            std::hint::black_box(prog.run(&inputs));
            if i >= 10 {
                ts.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    let (a, b) = (stats(t_off), stats(t_on));
    println!(
        "{name:<8} {} epilogues | without: min {:.3} p10 {:.3} median {:.3} ms | with: min {:.3} p10 {:.3} median {:.3} ms | with/without median {:.3}",
        on.num_epilogues(),
        a.0,
        a.1,
        a.2,
        b.0,
        b.1,
        b.2,
        b.2 / a.2
    );
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    if !std::env::args().any(|a| a == "--only-parts") {
        ab("W4", w4_step, &w4_inputs(), calls);
    }
    if std::env::args().any(|a| a == "--parts" || a == "--only-parts") {
        let mut rng = SplitMix(2);
        let batch: usize = std::env::var("BATCH")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128);
        let x = rng.normal_tensor(&[batch, 784], 1.0);
        let w = rng.normal_tensor(&[784, 512], 0.05);
        let b = rng.normal_tensor(&[512], 0.05);
        let layer = |(x, w, b): &(Tensor, Tensor, Tensor)| {
            let z = x.matmul(w) + b;
            let m = z.less_equal(&z.zeros_like());
            (z.relu(), m)
        };
        ab("layer", layer, &(x.clone(), w.clone(), b.clone()), calls);
        let g = rng.normal_tensor(&[batch, 512], 1.0);
        let sgd = |(w, x, g): &(Tensor, Tensor, Tensor)| w - x.transpose().matmul(g) * 0.01;
        ab("sgd", sgd, &(w, x, g), calls);
    }
    if std::env::args().any(|a| a == "--only-parts") {
        return;
    }
    if std::env::args().any(|a| a == "--w9") {
        let (h, i, b, t) = (128, 64, 32, 100);
        let mut rng = SplitMix(9);
        let w = rng.normal_tensor(&[h, h], 1.0 / (h as f32).sqrt());
        let u = rng.normal_tensor(&[i, h], 1.0 / (i as f32).sqrt());
        let bias = Tensor::zeros(&[h], DType::F32);
        let xs = rng.normal_tensor(&[t, b, i], 1.0);
        let h0 = Tensor::zeros(&[b, h], DType::F32);
        let w9 = |(p, xs, h0): &((Tensor, Tensor, Tensor), Tensor, Tensor)| {
            let loss = |(w, u, b): &(Tensor, Tensor, Tensor)| {
                let (ht, ()) = rune::scan(
                    |h: &Tensor, x: &Tensor| ((h.matmul(w) + x.matmul(u) + b).tanh(), ()),
                    h0,
                    xs,
                );
                ht.square().sum_all()
            };
            rune::value_and_grad(loss, p)
        };
        ab("W9", w9, &((w, u, bias), xs, h0), calls / 3);
    }
    let mut rng = SplitMix(1);
    let a = rng.normal_tensor(&[200, 200], 1.0 / (200f32).sqrt());
    let x = rng.normal_tensor(&[200], 1.0);
    let hess = |(a, x): &(Tensor, Tensor)| {
        rune::hessian(|x: &Tensor| a.matmul(x).tanh().square().sum_all(), x)
    };
    ab("W6 hess", hess, &(a, x), calls * 3);
}
