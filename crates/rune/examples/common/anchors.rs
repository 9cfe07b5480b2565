//! W1 and W3 of the anchors (`shared/bench/anchors`), shared by the
//! benchmarks that run them (`bench_jit`: W1; `bench_gpu`: both); W4 is
//! `common/w4.rs`. The includer also includes `common/splitmix.rs` as
//! `splitmix`.
#![allow(dead_code)] // each includer uses a subset

use crate::splitmix::SplitMix;
use rune::prelude::*;

/// W1's length: x and y are f32[4M].
pub const W1_LEN: usize = 4 * 1024 * 1024;

/// W1's inputs: x, y ~ U[0, 1) (fixed seed).
pub fn w1_inputs() -> (Tensor, Tensor) {
    let mut rng = SplitMix(0);
    (rng.uniform_tensor(W1_LEN), rng.uniform_tensor(W1_LEN))
}

/// W1: `exp(x) * y + 1`.
pub fn w1((x, y): &(Tensor, Tensor)) -> Tensor {
    x.exp() * y + 1.0
}

/// W3's size: a and b are f32[1024, 1024].
pub const W3_N: usize = 1024;

/// W3's inputs: a, b standard normal (fixed seed).
pub fn w3_inputs() -> (Tensor, Tensor) {
    let mut rng = SplitMix(3);
    (
        rng.normal_tensor(&[W3_N, W3_N], 1.0),
        rng.normal_tensor(&[W3_N, W3_N], 1.0),
    )
}

/// W3: `a @ b`.
pub fn w3((a, b): &(Tensor, Tensor)) -> Tensor {
    a.matmul(b)
}
