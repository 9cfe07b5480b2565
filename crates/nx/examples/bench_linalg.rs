//! Linear-algebra timings (issue 13), eager, one JSON line per row
//! (`bench/linalg.py` runs this beside numpy and jax.jit):
//!
//! - L1 `cholesky` of a 512×512 f64 SPD matrix;
//! - L2 `solve(a, b)`, 512×512 f64, `b` 512×512 (numpy's matrix form);
//! - L3 `qr(a, false)` 512×512 f64 (both factors);
//! - L3k the `Prim::Qr` kernel alone (Q only: `qr` adds `R = triu(Qᵀ A)`);
//! - L4 `svd(a, false)` 512×512 f64 (all three factors);
//! - L5 `solve` of a batch of 1024 4×4 f32 systems, `b` `[1024, 4, 1]`.
//!
//! `cargo run --release -p nx --example bench_linalg [-- --only L5]`

use nx::{linalg, DType, Tensor};

// The rune benches' timing (plain std code), shared rather than copied.
#[path = "../../rune/examples/common/timing.rs"]
mod timing;
use timing::{bench, emit, wanted};

fn main() {
    nx::seed(0);
    let n = 512;
    let a = Tensor::randn(&[n, n], DType::F64);
    let spd = a.matmul(&a.swapaxes(-1, -2)) + Tensor::eye(n, DType::F64) * n as f64;
    let b = Tensor::randn(&[n, n], DType::F64);
    if wanted("L1") {
        let r = bench(|| linalg::cholesky(&spd), 3, 20);
        emit("L1", "cholesky 512 f64", "ms", r);
    }
    if wanted("L2") {
        let r = bench(|| linalg::solve(&a, &b), 3, 20);
        emit("L2", "solve 512 f64, b 512x512", "ms", r);
    }
    if wanted("L3") {
        let r = bench(|| linalg::qr(&a, false), 3, 20);
        emit("L3", "qr 512 f64 reduced (q, r)", "ms", r);
    }
    if wanted("L3k") {
        // The kernel alone: linalg::qr adds R = triu(Qᵀ A), a matmul.
        let r = bench(|| nx::bind(nx::Prim::Qr { complete: false }, &[&a]), 3, 20);
        emit("L3k", "Prim::Qr alone (q)", "ms", r);
    }
    if wanted("L4") {
        let r = bench(|| linalg::svd(&a, false), 2, 10);
        emit("L4", "svd 512 f64 reduced (u, s, vt)", "ms", r);
    }
    if wanted("L5") {
        let a4 = Tensor::randn(&[1024, 4, 4], DType::F32) + Tensor::eye(4, DType::F32) * 4.0;
        let b4 = Tensor::randn(&[1024, 4, 1], DType::F32);
        let r = bench(|| linalg::solve(&a4, &b4), 20, 200);
        emit("L5", "solve 1024 x 4x4 f32, b [1024,4,1]", "us", r);
    }
}
