//! Batches of small matrix products (issue 44: "vmap of small products is
//! one batched call"): `rune::jit` of `vmap(|(a, w)| tanh(a @ w + 1))`
//! over `B` pairs of `M x M` f32 matrices, and the eager batched product.
//! `bench/small_products.py` runs jax.jit's side in the same run.
//!
//! ```text
//! cargo run --release -p rune --example bench_small_products
//! ```

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use rune::prelude::*;

fn main() {
    nx::seed(0);
    for (b, m) in [(2048usize, 4usize), (1024, 8), (256, 16), (64, 32)] {
        let x = Tensor::randn(&[b, m, m], DType::F32);
        let w = Tensor::randn(&[b, m, m], DType::F32);
        let p = (x, w);
        let f = rune::jit(|p: &(Tensor, Tensor)| {
            rune::vmap(|(a, w): &(Tensor, Tensor)| (a.matmul(w) + 1.0).tanh(), p)
        });
        let id = format!("SP{b}x{m}");
        emit(
            &id,
            "rune::jit(vmap(tanh(a @ w + 1)))",
            "us",
            bench(|| f.call(&p), 5, 50),
        );
        emit(
            &format!("{id}e"),
            "eager a.matmul(w), batched",
            "us",
            bench(|| p.0.matmul(&p.1), 5, 50),
        );
    }
}
