//! Convolution (issue 12, "Measure"): conv 3x3, 64 -> 64 channels, batch
//! 32, 32x32, f32, `Padding::Same`; forward, and forward + backward (the
//! gradient of `sum(conv(x, w))` w.r.t. `x` and `w`), eager and under
//! `rune::jit`, timed as the other benchmarks (untimed warmup calls, then
//! individually timed calls; min and median), printed as JSON lines for
//! `bench/conv.py`, which runs `jax.jit` of `lax.conv_general_dilated` (and
//! its `jax.grad`) beside it.
//!
//! ```sh
//! cargo run --release -p rune --example bench_conv
//! ```
//!
//! - CV1: `x.conv(&w, Same)` forward
//! - CV2: `grad(|(x, w)| x.conv(&w, Same).sum_all())` (forward + both gradients)
//! - PL1: `relu(x + b).max_pool(3x3, stride 2, Same)` under jit (a pool with
//!   overlapping, padded windows, fused with the bias and relu before it)
//! - PL2: the gradient of `sum(avg_pool(x, 3x3, stride 2, Same)^2)` under jit

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use nx::{ConvOpts, Padding};
use rune::prelude::*;

fn main() {
    let (n, c, o, hw, k) = (32, 64, 64, 32, 3);
    nx::seed(0);
    let x = Tensor::randn(&[n, c, hw, hw], DType::F32);
    let w = Tensor::randn(&[o, c, k, k], DType::F32) * (1.0 / ((c * k * k) as f64).sqrt());
    let opts = || ConvOpts {
        padding: Padding::Same,
        ..Default::default()
    };
    let fwd = |p: &(Tensor, Tensor)| p.0.conv(&p.1, opts());
    let loss = |p: &(Tensor, Tensor)| fwd(p).sum_all();
    let grad = |p: &(Tensor, Tensor)| rune::grad(loss, p);
    let p = (x, w);
    let (warmup, repeats) = (3, 20);
    emit(
        "CV1",
        "conv 3x3 64->64 [32, 64, 32, 32] f32 same, eager",
        "ms",
        bench(|| fwd(&p), warmup, repeats),
    );
    emit(
        "CV2",
        "grad of sum(conv) w.r.t. x and w, eager",
        "ms",
        bench(|| grad(&p), warmup, repeats),
    );
    let jf = rune::jit(fwd);
    let jg = rune::jit(grad);
    emit(
        "CV1",
        "conv 3x3 64->64 [32, 64, 32, 32] f32 same, rune::jit",
        "ms",
        bench(|| jf.call(&p), warmup, repeats),
    );
    emit(
        "CV2",
        "grad of sum(conv) w.r.t. x and w, rune::jit",
        "ms",
        bench(|| jg.call(&p), warmup, repeats),
    );
    let b = Tensor::randn(&[1, c, 1, 1], DType::F32);
    let pool = rune::jit(|(x, b): &(Tensor, Tensor)| {
        (x + b).relu().max_pool(&[3, 3], &[2, 2], Padding::Same)
    });
    let pb = (p.0.clone(), b);
    emit(
        "PL1",
        "relu(x + b).max_pool(3x3/2 same), rune::jit",
        "ms",
        bench(|| pool.call(&pb), warmup, repeats),
    );
    let avg = rune::jit(|x: &Tensor| {
        rune::grad(
            |x: &Tensor| {
                x.avg_pool(&[3, 3], &[2, 2], Padding::Same)
                    .square()
                    .sum_all()
            },
            x,
        )
    });
    emit(
        "PL2",
        "grad of sum(avg_pool(3x3/2 same)^2), rune::jit",
        "ms",
        bench(|| avg.call(&p.0), warmup, repeats),
    );
}
