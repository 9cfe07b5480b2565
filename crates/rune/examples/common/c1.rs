//! C1, shared by the benchmarks that run it (`bench_autodiff`, `bench_jit`,
//! `bench_user`): the 100-op elementwise chain whose grad is timed on [64].

use rune::prelude::*;

/// 100 elementwise operations, bounded for any input.
pub fn chain(x: &Tensor) -> Tensor {
    let mut h = x.clone();
    for i in 0..25 {
        h = (&h * 0.9 + 0.01 * i as f64).sin().tanh();
    }
    h
}
