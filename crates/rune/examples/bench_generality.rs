//! The "generality" workloads W12-W18 (`shared/bench/generality/README.md`)
//! and the flagship training step, under `rune::jit`, for
//! `bench/generality.py`, which runs JAX's side (`jax_generality.py`,
//! `bench/flagship_jax.py`) beside them. These are programs of other shapes
//! than the W1-W10 the compiler was tuned on: does a gain carry over?
//!
//! ```sh
//! cargo run --release -p rune --example bench_generality                 # steady state, all
//! cargo run --release -p rune --example bench_generality -- --only W12,W15
//! JITCACHE=0 cargo run --release -p rune --example bench_generality -- --first-call W12:10000
//! ```
//!
//! Each workload is the README's program in float32, with inputs of the
//! same distributions from a deterministic generator (splitmix64, not
//! numpy's streams):
//!
//! - W12: a ring of 64 damped pendulums, classic RK4 with dt = 0.01 for T
//!   steps under `rune::scan` (carry `(x, v)`; the scanned `xs` is a
//!   `[T, 1]` zero tensor the step ignores, as JAX's `None`),
//!   `loss = sum(x_T²) + 0.1·sum(v_T²)`; `jit(grad(loss))` at `(x0, v0)`,
//!   T = 1000 (ms/call).
//! - W13: 120 chained elementwise ops on f32[256] (sin, `x·0.9 + 0.05`,
//!   tanh, `exp(-x²)`, `log1p(x²)`, sigmoid, cycled), `jit(grad(sum))`
//!   (µs/call).
//! - W14: `jit(vmap(jvp(grad(loss w.r.t. (W1, W2)), (W1, W2), (D1, D2))))`
//!   over 256 examples of a 32-64-1 tanh MLP's squared error (µs/call).
//! - W15: one step of a pre-LN causal transformer block (B 8, T 128, D 256,
//!   8 heads of 32, MLP 1024, gelu in its tanh form): `jit` of
//!   `value_and_grad(loss)` plus SGD (lr 0.01) on all ten parameters
//!   (ms/step).
//! - W12take: W12 with the ring's neighbours taken by index
//!   (`x.take(&prev, 0)`, `x.take(&next, 0)`) instead of `roll` (not in the
//!   README: JAX's side is `bench/generality_jax_extra.py`).
//! - W16: 256 oscillators coupled over a fixed random graph, the
//!   neighbours gathered with `x.take(&nbr, 0)` ([256, 4], summed over axis
//!   1), RK4 for 500 steps under `rune::scan`; `jit(grad(loss))` (ms/call).
//! - W17: two message-passing layers on a random graph (1024 nodes, 8192
//!   edges): `z = h @ W`, `relu(z + nx::segment_sum(z.take(&src, 0), &dst,
//!   1024) / 8)`, a readout, MSE; `jit` of `value_and_grad` plus SGD (lr
//!   0.01) (ms/step).
//! - W18: a LeNet-style CNN step on [64, 1, 28, 28]: conv 5x5 VALID + bias,
//!   relu, 2x2 max-pool, twice, then a dense layer and softmax
//!   cross-entropy against one-hot labels; `jit` of `value_and_grad` plus
//!   SGD (lr 0.05) (ms/step).
//! - FLAGSHIP: the training step `train_mlp` runs under `jit` (the
//!   2-64-64-3 tanh MLP on the spirals, batch 128, Adam with a bias-corrected
//!   step size fed as a 0-d tensor) (µs/step).
//!
//! Timing as the anchors prescribe: inputs built once, untimed warmup
//! calls, then individually timed calls; min and median, printed as JSON
//! lines (`common/timing.rs`'s `emit`). Warmup / repeats are the README's
//! (W12 5/100, W13 200/5000, W14 20/500, W15 5/50, W16 5/100, W17 10/200,
//! W18 5/100; W12take as W12; FLAGSHIP 100/1000).
//!
//! Every jitted result is compared once with the eager (un-jitted)
//! function within a stated tolerance before it is timed, and printed as a
//! `check` row; a mismatch, a jit error or a panic prints an `error` row,
//! the other workloads still run, and the program exits with status 1.
//!
//! `--first-call ID[:T]` (W12:100, W12:10000, W13, W14, W15, W12take:T,
//! W16, W17, W18) runs one
//! first call (trace + compile + run) of that jitted function in this
//! process and prints `FIRSTCALL {"id": ..., "first_call_s": ...}`, then
//! checks the result against eager. The runner starts one fresh process per
//! measurement with `JITCACHE=0` (no persistent compilation cache).

#[path = "common/storage.rs"]
mod storage;
#[path = "common/timing.rs"]
mod timing;
use storage::storage_line;
use timing::{bench, emit};
#[path = "common/check.rs"]
mod check;

use rune::nx::{ConvOpts, Padding};
use rune::prelude::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

#[path = "common/transformer.rs"]
mod transformer;
#[path = "common/w15.rs"]
mod w15;
use w15::{w15_fn, w15_inputs};

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

#[path = "common/w17.rs"]
mod w17;
use w17::{w17_fn, w17_inputs};

#[path = "common/spirals.rs"]
#[allow(dead_code)] // train_mlp's accuracy and constants are not needed here
mod spirals;
use spirals::{spirals, Mlp, CLASSES, HIDDEN};
#[path = "common/mlp_step.rs"]
mod mlp_step;
use mlp_step::{adam_lr, train_step, State};

// ---------------------------------------------------------------- checks

/// Set by a failed workload: the process then exits with status 1.
static FAILED: AtomicBool = AtomicBool::new(false);

/// Runs one workload (`common/check.rs`'s `guarded`); a failure marks
/// the run failed.
fn guarded(id: &str, f: impl FnOnce()) {
    if !check::guarded(id, f) {
        FAILED.store(true, Ordering::Relaxed);
    }
}

/// Compares the jitted result with eager's (`common/check.rs`).
fn check<T: Ptree>(id: &str, jitted: &T, eager: &T, rtol: f64) {
    check::check(id, "jit vs eager", jitted, eager, rtol);
}

// ---------------------------------------------------------------- W12

const W12_DT: f64 = 0.01;
type State2 = (Tensor, Tensor);

fn w12_inputs() -> State2 {
    let mut rng = SplitMix(12);
    let x0 = rng.normal_tensor(&[64], 1.0);
    let v0 = rng.normal_tensor(&[64], 0.1);
    (x0, v0)
}

/// The ring's vector field: `(dx/dt, dv/dt)`.
fn pendulums(x: &Tensor, v: &Tensor) -> State2 {
    let lap = x.roll(1, 0) - 2.0 * x + x.roll(-1, 0);
    (v.clone(), -x.sin() - 0.1 * v + 0.5 * lap)
}

/// One classic RK4 step of `pendulums`.
fn rk4(s: &State2) -> State2 {
    rk4_of(&pendulums, s, W12_DT)
}

/// `sum(x_T²) + 0.1·sum(v_T²)` after `t` RK4 steps from `s`.
fn w12_loss(s: &State2, t: usize) -> Tensor {
    let steps = Tensor::zeros(&[t, 1], DType::F32); // scan's xs: only its length is used
    let ((x, v), ()) = rune::scan(|c: &State2, _: &Tensor| (rk4(c), ()), s, &steps);
    (&x * &x).sum_all() + 0.1 * (&v * &v).sum_all()
}

fn w12_grad(t: usize) -> impl Fn(&State2) -> State2 {
    move |s: &State2| rune::grad(|s: &State2| w12_loss(s, t), s)
}

// Through T RK4 steps the gradient's rounding differences grow with T.
const W12_RTOL: f64 = 1e-3;

fn w12() {
    let s = w12_inputs();
    let g = w12_grad(1000);
    let jg = rune::jit(&g);
    check("W12", &jg.call(&s), &g(&s), W12_RTOL);
    emit(
        "W12",
        "jit(grad) 1000-step RK4 scan, 64 pendulums",
        "ms",
        bench(|| jg.call(&s), 5, 100),
    );
    storage_line("W16", || jg.call(&s));
}

// ---------------------------------------------------------------- W13

/// Op `i` of the chain.
fn chain_op(i: usize, x: &Tensor) -> Tensor {
    match i % 6 {
        0 => x.sin(),
        1 => x * 0.9 + 0.05,
        2 => x.tanh(),
        3 => (-x * x).exp(),
        4 => (x * x).log1p(),
        _ => x.sigmoid(),
    }
}

fn w13_grad(x: &Tensor) -> Tensor {
    rune::grad(
        |x: &Tensor| {
            let mut h = x.clone();
            for i in 0..120 {
                h = chain_op(i, &h);
            }
            h.sum_all()
        },
        x,
    )
}

fn w13_inputs() -> Tensor {
    SplitMix(13).normal_tensor(&[256], 1.0)
}

fn w13() {
    let x = w13_inputs();
    let jg = rune::jit(w13_grad);
    check("W13", &jg.call(&x), &w13_grad(&x), 1e-5);
    emit(
        "W13",
        "jit(grad) 120-op transcendental chain, f32[256]",
        "us",
        bench(|| jg.call(&x), 200, 5000),
    );
}

// ---------------------------------------------------------------- W14

type Params2 = (Tensor, Tensor);

struct W14 {
    p: Params2,
    d: Params2,
    xs: Tensor,
    ys: Tensor,
}

fn w14_inputs() -> W14 {
    let mut rng = SplitMix(14);
    let p = (
        rng.normal_tensor(&[32, 64], 1.0 / 32f32.sqrt()),
        rng.normal_tensor(&[64, 1], 1.0 / 8.0),
    );
    let d = (
        rng.normal_tensor(&[32, 64], 1.0),
        rng.normal_tensor(&[64, 1], 1.0),
    );
    let xs = rng.normal_tensor(&[256, 32], 1.0);
    let ys = rng.normal_tensor(&[256], 1.0);
    W14 { p, d, xs, ys }
}

/// One example's squared error: `r = (tanh(x @ W1) @ W2)[0] - y`, `r²`.
fn w14_sq((w1, w2): &Params2, x: &Tensor, y: &Tensor) -> Tensor {
    let r = x.matmul(w1).tanh().matmul(w2).get(0) - y;
    &r * &r
}

/// Per-example Hessian-vector products along `d` at `p` (captured, as JAX's
/// closure): `vmap` over `(xs, ys)` of `jvp` of `grad`.
fn w14_fn(p: &Params2, d: &Params2) -> impl Fn(&(Tensor, Tensor)) -> Params2 {
    let (p, d) = (p.clone(), d.clone());
    move |examples: &(Tensor, Tensor)| {
        rune::vmap(
            |(x, y): &(Tensor, Tensor)| {
                rune::jvp(
                    |q: &Params2| rune::grad(|q: &Params2| w14_sq(q, x, y), q),
                    &p,
                    &d,
                )
                .1
            },
            examples,
        )
    }
}

fn w14() {
    let w = w14_inputs();
    let f = w14_fn(&w.p, &w.d);
    let jf = rune::jit(&f);
    let inp = (w.xs, w.ys);
    check("W14", &jf.call(&inp), &f(&inp), 1e-5);
    emit(
        "W14",
        "jit(vmap(hvp)) 32-64-1 MLP, 256 examples",
        "us",
        bench(|| jf.call(&inp), 20, 500),
    );
}

// ---------------------------------------------------------------- W15

fn w15() {
    let (p, x, tgt) = w15_inputs();
    let step = w15_fn(&x, &tgt);
    let js = rune::jit(&step);
    check("W15", &js.call(&p), &step(&p), 1e-4);
    emit(
        "W15",
        "jit(value_and_grad + SGD) transformer block B8 T128 D256",
        "ms",
        bench(|| js.call(&p), 5, 50),
    );
}

// ---------------------------------------------------------------- W12take

/// W12 with the ring's neighbours taken by index (`x.take(&idx, 0)`)
/// instead of `roll`: `x[i - 1]` and `x[i + 1]`, indices mod 64.
fn w12take_grad(t: usize) -> impl Fn(&State2) -> State2 {
    let prev: Vec<i32> = (0..64).map(|i| (i + 63) % 64).collect();
    let next: Vec<i32> = (0..64).map(|i| (i + 1) % 64).collect();
    let (prev, next) = (
        Tensor::from_slice(&prev, &[64]),
        Tensor::from_slice(&next, &[64]),
    );
    move |s: &State2| {
        let f = |x: &Tensor, v: &Tensor| {
            let lap = x.take(&prev, 0) - 2.0 * x + x.take(&next, 0);
            (v.clone(), -x.sin() - 0.1 * v + 0.5 * lap)
        };
        rune::grad(
            |s: &State2| {
                let ((x, v), ()) = rune::scan(
                    |c: &State2, _: &Tensor| (rk4_of(&f, c, W12_DT), ()),
                    s,
                    &Tensor::zeros(&[t, 1], DType::F32),
                );
                (&x * &x).sum_all() + 0.1 * (&v * &v).sum_all()
            },
            s,
        )
    }
}

fn w12take() {
    let s = w12_inputs();
    let g = w12take_grad(1000);
    let jg = rune::jit(&g);
    check("W12take", &jg.call(&s), &g(&s), W12_RTOL);
    emit(
        "W12take",
        "jit(grad) 1000-step RK4 scan, 64 pendulums, neighbours by take",
        "ms",
        bench(|| jg.call(&s), 5, 100),
    );
    storage_line("W16", || jg.call(&s));
}

/// One classic RK4 step of the vector field `f` with step `dt`.
fn rk4_of(f: &impl Fn(&Tensor, &Tensor) -> State2, (x, v): &State2, dt: f64) -> State2 {
    let (k1x, k1v) = f(x, v);
    let (k2x, k2v) = f(&(x + dt / 2.0 * &k1x), &(v + dt / 2.0 * &k1v));
    let (k3x, k3v) = f(&(x + dt / 2.0 * &k2x), &(v + dt / 2.0 * &k2v));
    let (k4x, k4v) = f(&(x + dt * &k3x), &(v + dt * &k3v));
    let x = x + dt / 6.0 * (&k1x + 2.0 * &k2x + 2.0 * &k3x + &k4x);
    let v = v + dt / 6.0 * (&k1v + 2.0 * &k2v + 2.0 * &k3v + &k4v);
    (x, v)
}

// ---------------------------------------------------------------- W16

/// W16's graph (`nbr`, [256, 4] i32 in `0..256`) and initial state.
fn w16_inputs() -> (Tensor, State2) {
    let mut rng = SplitMix(16);
    let nbr: Vec<i32> = (0..256 * 4)
        .map(|_| (rng.next_u64() % 256) as i32)
        .collect();
    let nbr = Tensor::from_slice(&nbr, &[256, 4]);
    let x0 = rng.normal_tensor(&[256], 1.0);
    let v0 = rng.normal_tensor(&[256], 0.1);
    (nbr, (x0, v0))
}

/// `jit(grad)` of W16's loss: 256 oscillators coupled through the gathered
/// neighbours `x[nbr]` ([256, 4], summed over axis 1), RK4 under `scan`.
fn w16_grad(nbr: &Tensor, t: usize) -> impl Fn(&State2) -> State2 {
    let nbr = nbr.clone();
    move |s: &State2| {
        let f = |x: &Tensor, v: &Tensor| {
            let coupling = x.take(&nbr, 0).sum(&[1], false) - 4.0 * x;
            (v.clone(), -x.sin() - 0.1 * v + 0.25 * coupling)
        };
        rune::grad(
            |s: &State2| {
                let ((x, v), ()) = rune::scan(
                    |c: &State2, _: &Tensor| (rk4_of(&f, c, 0.01), ()),
                    s,
                    &Tensor::zeros(&[t, 1], DType::F32),
                );
                (&x * &x).sum_all() + 0.1 * (&v * &v).sum_all()
            },
            s,
        )
    }
}

fn w16() {
    let (nbr, s) = w16_inputs();
    let g = w16_grad(&nbr, 500);
    let jg = rune::jit(&g);
    check("W16", &jg.call(&s), &g(&s), W12_RTOL);
    emit(
        "W16",
        "jit(grad) 500-step RK4 scan, 256 oscillators on a graph (take)",
        "ms",
        bench(|| jg.call(&s), 5, 100),
    );
    storage_line("W16", || jg.call(&s));
}

// ---------------------------------------------------------------- W17

fn w17() {
    let (p, g) = w17_inputs();
    let step = w17_fn(g);
    let js = rune::jit(&step);
    check("W17", &js.call(&p), &step(&p), 1e-4);
    emit(
        "W17",
        "jit(value_and_grad + SGD) 2-layer GNN, 1024 nodes, 8192 edges",
        "ms",
        bench(|| js.call(&p), 10, 200),
    );
    storage_line("W17", || js.call(&p));
}

// ---------------------------------------------------------------- W18

/// W18's LeNet-style CNN.
#[derive(Ptree, Clone)]
struct LeNet {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
    w3: Tensor,
    b3: Tensor,
}

fn w18_inputs() -> (LeNet, Tensor, Tensor) {
    let mut rng = SplitMix(18);
    let x = rng.normal_tensor(&[64, 1, 28, 28], 1.0);
    let labels: Vec<i32> = (0..64).map(|_| (rng.next_u64() % 10) as i32).collect();
    let y = Tensor::from_slice(&labels, &[64]).one_hot(10);
    let p = LeNet {
        w1: rng.normal_tensor(&[6, 1, 5, 5], 1.0 / 5.0),
        b1: Tensor::zeros(&[6], DType::F32),
        w2: rng.normal_tensor(&[16, 6, 5, 5], 1.0 / 150f32.sqrt()),
        b2: Tensor::zeros(&[16], DType::F32),
        w3: rng.normal_tensor(&[256, 10], 1.0 / 16.0),
        b3: Tensor::zeros(&[10], DType::F32),
    };
    (p, x, y)
}

/// conv 5x5 VALID + bias, relu, max-pool 2x2/2.
fn conv_block(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    (x.conv(w, ConvOpts::default()) + b.reshape(&[1, b.numel(), 1, 1]))
        .relu()
        .max_pool(&[2, 2], &[2, 2], Padding::Valid)
}

fn lenet_loss(p: &LeNet, x: &Tensor, y: &Tensor) -> Tensor {
    let h = conv_block(&conv_block(x, &p.w1, &p.b1), &p.w2, &p.b2);
    let logits = h.reshape(&[64, 256]).matmul(&p.w3) + &p.b3;
    -(y * logits.log_softmax(-1)).sum(&[-1], false).mean_all()
}

fn w18_fn(x: &Tensor, y: &Tensor) -> impl Fn(&LeNet) -> (Tensor, LeNet) {
    let (x, y) = (x.clone(), y.clone());
    move |p: &LeNet| {
        let (l, g) = rune::value_and_grad(|p: &LeNet| lenet_loss(p, &x, &y), p);
        (l, p.map2_leaves(&g, &mut |w, g| w - g * 0.05))
    }
}

fn w18() {
    let (p, x, y) = w18_inputs();
    let step = w18_fn(&x, &y);
    let js = rune::jit(&step);
    check("W18", &js.call(&p), &step(&p), 1e-4);
    emit(
        "W18",
        "jit(value_and_grad + SGD) LeNet-style CNN, batch 64",
        "ms",
        bench(|| js.call(&p), 5, 100),
    );
}

// ---------------------------------------------------------------- FLAGSHIP

const BATCH: usize = 128;
const SEED: u64 = 42;
fn flagship() {
    // train_mlp's data and initialization (same seed), its first minibatch
    // and the step size of its first step.
    nx::seed(SEED);
    let mut rng = SplitMix(SEED);
    let (x, y) = spirals(&mut rng);
    let params = Mlp::init([2, HIDDEN, HIDDEN, CLASSES]);
    let zeros = params.map_leaves(&mut |t| t.zeros_like());
    let state = State {
        params,
        m: zeros.clone(),
        v: zeros,
    };
    let lr = adam_lr(1e-2, 1);
    let inp = (
        state,
        x.narrow(0, 0, BATCH),
        y.narrow(0, 0, BATCH),
        Tensor::scalar(lr as f32),
    );
    let js = rune::jit(train_step);
    check("FLAGSHIP", &js.call(&inp), &train_step(&inp), 1e-4);
    emit(
        "FLAGSHIP",
        "jit(value_and_grad + Adam) train_mlp step, MLP 2-64-64-3 tanh, batch 128",
        "us",
        bench(|| js.call(&inp), 100, 1000),
    );
}

// ---------------------------------------------------------------- first calls

/// One first call of a jitted workload in this process (the runner starts
/// it with `JITCACHE=0`): prints its time, then checks it against eager.
fn first_call(spec: &str) {
    let (id, t) = match spec.split_once(':') {
        Some((id, t)) => (id, Some(t.parse::<usize>().expect("--first-call ID:T"))),
        None => (spec, None),
    };
    // Inputs and the jitted function are made before the clock starts.
    fn timed<P: Ptree, Q: Ptree>(
        id: &str,
        t: Option<usize>,
        f: impl Fn(&P) -> Q,
        inp: &P,
        rtol: f64,
    ) {
        let jf = rune::jit(&f);
        let t0 = Instant::now();
        let out = jf.call(inp);
        let dt = t0.elapsed().as_secs_f64();
        let t = t.map_or(String::new(), |t| format!(", \"T\": {t}"));
        println!("FIRSTCALL {{\"id\": \"{id}\"{t}, \"first_call_s\": {dt}}}");
        check(id, &out, &f(inp), rtol);
    }
    guarded(id, || match id {
        "W12" => {
            let t = t.expect("W12 needs a length: --first-call W12:T");
            timed(id, Some(t), w12_grad(t), &w12_inputs(), W12_RTOL)
        }
        "W13" => timed(id, None, w13_grad, &w13_inputs(), 1e-5),
        "W14" => {
            let w = w14_inputs();
            timed(id, None, w14_fn(&w.p, &w.d), &(w.xs, w.ys), 1e-5)
        }
        "W15" => {
            let (p, x, tgt) = w15_inputs();
            timed(id, None, w15_fn(&x, &tgt), &p, 1e-4)
        }
        "W12take" => {
            let t = t.expect("W12take needs a length: --first-call W12take:T");
            timed(id, Some(t), w12take_grad(t), &w12_inputs(), W12_RTOL)
        }
        "W16" => {
            let (nbr, s) = w16_inputs();
            timed(id, None, w16_grad(&nbr, 500), &s, W12_RTOL)
        }
        "W17" => {
            let (p, g) = w17_inputs();
            timed(id, None, w17_fn(g), &p, 1e-4)
        }
        "W18" => {
            let (p, x, y) = w18_inputs();
            timed(id, None, w18_fn(&x, &y), &p, 1e-4)
        }
        _ => panic!(
            "--first-call: unknown workload {id} (W12:T, W13, W14, W15, W12take:T, W16, W17, W18)"
        ),
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--first-call") {
        first_call(args.get(i + 1).expect("--first-call ID[:T]"));
    } else {
        let only: Option<Vec<String>> = args
            .iter()
            .position(|a| a == "--only")
            .map(|i| args[i + 1].split(',').map(String::from).collect());
        let want = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));
        let workloads: [(&str, fn()); 9] = [
            ("W12", w12),
            ("W13", w13),
            ("W14", w14),
            ("W15", w15),
            ("FLAGSHIP", flagship),
            ("W12take", w12take),
            ("W16", w16),
            ("W17", w17),
            ("W18", w18),
        ];
        for (id, run) in workloads {
            if want(id) {
                guarded(id, run);
            }
        }
    }
    if FAILED.load(Ordering::Relaxed) {
        std::process::exit(1);
    }
}
