//! Held-out variants of the generality workloads (W12-W15's classes with
//! other shapes, bodies and ops) under `rune::jit`, for `bench/probe.py`,
//! which runs the same programs under `jax.jit` (`bench/probe_jax.py`) beside
//! them. W12-W15 are what the compiler was measured on; these check that a
//! gain carries over to programs it was not looked at with.
//!
//! ```sh
//! cargo run --release -p rune --example bench_probe
//! cargo run --release -p rune --example bench_probe -- --only P1
//! ```
//!
//! Inputs are closed-form (`input(shape, seed, scale)`: a scaled sine of the
//! flat index), the same on both sides, so the two sides' values can be
//! compared too: each row prints a checksum of the outputs.
//!
//! - P1: an Elman RNN under `scan` (T 100, batch 16, 8 inputs, 64 hidden,
//!   tanh), loss the mean square of the stacked hidden states;
//!   `jit(value_and_grad)` w.r.t. (Wh, Wx, b).
//! - P2: 90 chained elementwise ops on f32[4096] (cos, an affine map,
//!   softplus, silu, erf, sqrt(x²+1), tanh, atan, exp(-x²), cycled);
//!   `jit(grad(sum))`.
//! - P3: per-example Hessians of `sum(softplus(A x))`, A [32, 16], over 128
//!   examples: `jit(vmap(hessian))`.
//! - P4: one SGD step of W15's pre-LN causal transformer block
//!   (`common/transformer.rs`) at B 4, T 64, D 128, 4 heads of 32, MLP 512.
//! - P5: the same block at B 2, T 256, D 384, 6 heads of 64, MLP 1536.
//! - P6: 32 Lorenz systems, explicit Euler (dt 0.002) for 500 steps under
//!   `scan`; `jit(grad)` of the mean final squared state w.r.t.
//!   (sigma, rho, beta), 0-d tensors.

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit, wanted};

use rune::prelude::*;

#[path = "common/transformer.rs"]
mod transformer;
use transformer::{sgd_step, Block, Dims};

/// `scale · sin(0.7·i + seed)` over the flat index `i`: the same inputs as
/// `probe_jax.py`'s `inp`.
fn input(shape: &[usize], seed: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (scale * (0.7 * i as f64 + seed).sin()) as f32)
        .collect();
    Tensor::from_vec(v, shape)
}

/// Sum of every output leaf's elements, as f64 (compared with JAX's).
fn checksum<T: Ptree>(out: &T) -> f64 {
    out.leaves()
        .iter()
        .map(|t| t.cast(DType::F64).to_vec::<f64>().iter().sum::<f64>())
        .sum()
}

fn row<P: Ptree, Q: Ptree>(
    id: &str,
    what: &str,
    unit: &str,
    f: impl Fn(&P) -> Q,
    inp: &P,
    reps: (usize, usize),
) {
    let jf = rune::jit(&f);
    let (j, e) = (checksum(&jf.call(inp)), checksum(&f(inp)));
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"checksum\": {j}, \"eager_checksum\": {e}}}"
    );
    emit(id, what, unit, bench(|| jf.call(inp), reps.0, reps.1));
}

fn wanted_or_all(id: &str) -> bool {
    !std::env::args().any(|a| a == "--only") || wanted(id)
}

// ---------------------------------------------------------------- P1

fn p1() {
    let (t, b, i, h) = (100, 16, 8, 64);
    let xs = input(&[t, b, i], 1.0, 1.0);
    let params = (
        input(&[h, h], 2.0, 1.0 / 8.0),
        input(&[i, h], 3.0, 1.0 / 8f64.sqrt()),
        input(&[h], 4.0, 0.1),
    );
    let f = move |p: &(Tensor, Tensor, Tensor)| {
        rune::value_and_grad(
            |(wh, wx, bias): &(Tensor, Tensor, Tensor)| {
                let h0 = Tensor::zeros(&[b, h], DType::F32);
                let (_, hs) = rune::scan(
                    |h: &Tensor, x: &Tensor| {
                        let h = (h.matmul(wh) + x.matmul(wx) + bias).tanh();
                        (h.clone(), h)
                    },
                    &h0,
                    &xs,
                );
                hs.square().mean_all()
            },
            p,
        )
    };
    row(
        "P1",
        "jit(value_and_grad) RNN scan T100 B16 H64",
        "us",
        f,
        &params,
        (20, 300),
    );
}

// ---------------------------------------------------------------- P2

fn p2_op(i: usize, x: &Tensor) -> Tensor {
    match i % 9 {
        0 => x.cos(),
        1 => x * 1.1 - 0.1,
        2 => x.softplus(),
        3 => x * x.sigmoid(),
        4 => x.erf(),
        5 => (x * x + 1.0).sqrt(),
        6 => x.tanh(),
        7 => x.atan(),
        _ => (-x * x).exp(),
    }
}

fn p2() {
    let x = input(&[4096], 5.0, 1.0);
    let f = |x: &Tensor| {
        rune::grad(
            |x: &Tensor| {
                let mut h = x.clone();
                for i in 0..90 {
                    h = p2_op(i, &h);
                }
                h.sum_all()
            },
            x,
        )
    };
    row(
        "P2",
        "jit(grad) 90-op chain (9 ops), f32[4096]",
        "us",
        f,
        &x,
        (50, 1000),
    );
}

// ---------------------------------------------------------------- P3

fn p3() {
    let a = input(&[32, 16], 6.0, 0.25);
    let xs = input(&[128, 16], 7.0, 1.0);
    let f = move |xs: &Tensor| {
        rune::vmap(
            |x: &Tensor| rune::hessian(|x: &Tensor| a.matmul(x).softplus().sum_all(), x),
            xs,
        )
    };
    row(
        "P3",
        "jit(vmap(hessian)) softplus(A x), 128 x R^16",
        "us",
        f,
        &xs,
        (20, 500),
    );
}

// ---------------------------------------------------------------- P4, P5

fn transformer(id: &str, dims: Dims) {
    let Dims { b, t, d, h, f } = dims;
    let w = |i: usize, o: usize, s: f64| input(&[i, o], s, 1.0 / (i as f64).sqrt());
    let p = Block {
        wq: w(d, d, 1.0),
        wk: w(d, d, 2.0),
        wv: w(d, d, 3.0),
        wo: w(d, d, 4.0),
        w1: w(d, f, 5.0),
        w2: w(f, d, 6.0),
        b1: input(&[f], 7.0, 0.1),
        b2: input(&[d], 8.0, 0.1),
        g1: input(&[d], 9.0, 0.1) + 1.0,
        g2: input(&[d], 10.0, 0.1) + 1.0,
    };
    let x = input(&[b, t, d], 11.0, 1.0);
    let tgt = input(&[b, t, d], 12.0, 1.0);
    let f = move |p: &Block| sgd_step(p, &x, &tgt, dims);
    let what = format!(
        "jit(value_and_grad + SGD) transformer B{b} T{t} D{d} H{h} F{}",
        dims.f
    );
    row(id, &what, "ms", f, &p, (5, 50));
}

// ---------------------------------------------------------------- P6

fn p6() {
    let n = 32;
    let s0 = (
        input(&[n], 11.0, 1.0) + 1.0,
        input(&[n], 12.0, 1.0),
        input(&[n], 13.0, 1.0) + 20.0,
    );
    let params = (
        Tensor::scalar(10f32),
        Tensor::scalar(28f32),
        Tensor::scalar(8f32 / 3.0),
    );
    let steps = Tensor::zeros(&[500, 1], DType::F32);
    let f = move |p: &(Tensor, Tensor, Tensor)| {
        rune::grad(
            |(sigma, rho, beta): &(Tensor, Tensor, Tensor)| {
                let dt = 0.002;
                let ((x, y, z), ()) = rune::scan(
                    |(x, y, z): &(Tensor, Tensor, Tensor), _: &Tensor| {
                        let dx = sigma * (y - x);
                        let dy = x * (rho - z) - y;
                        let dz = x * y - beta * z;
                        ((x + dt * dx, y + dt * dy, z + dt * dz), ())
                    },
                    &s0,
                    &steps,
                );
                (x.square() + y.square() + z.square()).mean_all()
            },
            p,
        )
    };
    row(
        "P6",
        "jit(grad) Lorenz Euler scan T500, 32 systems",
        "us",
        f,
        &params,
        (20, 300),
    );
}

fn main() {
    // Inputs are built only for the probes that run (`--only`).
    let probes: [(&str, &dyn Fn()); 6] = [
        ("P1", &p1),
        ("P2", &p2),
        ("P3", &p3),
        ("P4", &|| {
            transformer(
                "P4",
                Dims {
                    b: 4,
                    t: 64,
                    d: 128,
                    h: 4,
                    f: 512,
                },
            )
        }),
        ("P5", &|| {
            transformer(
                "P5",
                Dims {
                    b: 2,
                    t: 256,
                    d: 384,
                    h: 6,
                    f: 1536,
                },
            )
        }),
        ("P6", &p6),
    ];
    for (id, probe) in probes {
        if wanted_or_all(id) {
            probe();
        }
    }
}
