//! Pooling and sorting timings (issue 12), eager, one JSON line per row
//! (`bench/pool_sort.py` runs this beside JAX and numpy):
//!
//! - P1 `max_pool` 2x2 stride 2, f32 [32, 64, 32, 32], forward;
//! - P2 the same forward plus its backward: the operations rune's reverse
//!   rule binds (the first maximum of each window, `Prim::WindowArgmax`,
//!   kept from the forward pass, then the cotangent scatter-added into
//!   zeros), here bound directly since nx does not depend on rune;
//! - P3 `avg_pool` 2x2 stride 2 forward (context);
//! - P4 `max_pool` 3x3 stride 2 SAME (padded, overlapping windows:
//!   reduced one axis at a time), forward;
//! - S1 `sort` of 10^6 f32 (standard normal), S2 `argsort`, S3 `top_k(10)`.
//!
//! `cargo run --release -p nx --example bench_pool_sort`

use nx::{bind, DType, Padding, Prim, Tensor};

// The rune benches' timing (plain std code), shared rather than copied.
#[path = "../../rune/examples/common/timing.rs"]
mod timing;
use timing::{bench, wanted};

fn emit(id: &str, variant: &str, (min, median): (f64, f64)) {
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"{variant}\", \"unit\": \"ms\", \"min\": {}, \"median\": {}, \"threads\": {}}}",
        min * 1e3,
        median * 1e3,
        nx::num_threads()
    );
}

fn main() {
    nx::seed(0);
    let x = Tensor::randn(&[32, 64, 32, 32], DType::F32);
    let pool = || x.max_pool(&[2, 2], &[2, 2], Padding::Valid);
    if wanted("P1") {
        emit(
            "P1",
            "max_pool 2x2/2 f32 [32,64,32,32] fwd",
            bench(pool, 5, 50),
        );
    }
    if wanted("P4") {
        emit(
            "P4",
            "max_pool 3x3/2 SAME f32 [32,64,32,32] fwd",
            bench(|| x.max_pool(&[3, 3], &[2, 2], Padding::Same), 5, 50),
        );
    }
    let ct = Tensor::ones(&[32, 64, 16, 16], DType::F32);
    let fwd_bwd = || {
        let y = pool();
        let idx = bind(
            Prim::WindowArgmax {
                window: vec![1, 1, 2, 2],
                strides: vec![1, 1, 2, 2],
                padding: vec![(0, 0); 4],
                flat_from: 2,
            },
            &[&x],
        );
        let g = Tensor::zeros(&[32, 64, 1024], DType::F32).scatter_add(
            2,
            &idx.reshape(&[32, 64, 256]),
            &ct.reshape(&[32, 64, 256]),
        );
        (y, g.reshape(&[32, 64, 32, 32]))
    };
    if wanted("P2") {
        emit(
            "P2",
            "max_pool fwd+bwd (argmax + scatter_add)",
            bench(fwd_bwd, 3, 30),
        );
    }
    let avg = || x.avg_pool(&[2, 2], &[2, 2], Padding::Valid);
    if wanted("P3") {
        emit(
            "P3",
            "avg_pool 2x2/2 f32 [32,64,32,32] fwd",
            bench(avg, 5, 50),
        );
    }

    let v = Tensor::randn(&[1_000_000], DType::F32);
    if wanted("S1") {
        emit("S1", "sort f32 [1e6]", bench(|| v.sort(-1, false), 3, 30));
    }
    if wanted("S2") {
        emit(
            "S2",
            "argsort f32 [1e6]",
            bench(|| v.argsort(-1, false), 3, 30),
        );
    }
    if wanted("S3") {
        emit("S3", "top_k(10) f32 [1e6]", bench(|| v.top_k(10), 3, 30));
    }
    // A check that the top_k path and a full sort agree.
    let (tv, _) = v.top_k(10);
    let s = v.sort(-1, true).narrow(0, 0, 10);
    assert_eq!(tv.to_vec::<f32>(), s.to_vec::<f32>());
}
