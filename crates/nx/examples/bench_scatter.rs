//! Eager scatter-add timings, one JSON line per row (µs):
//!
//! - SC1 `nx::segment_sum` of f32 [8192, 64] into 1024 segments (W17's
//!   second layer, forward; its backward's gather transpose has the shape);
//! - SC2 the same of f32 [8192, 32] (W17's first layer);
//! - SC3 `index_add` along axis 1: f32 [2048, 256] with 256 column indices;
//! - SC4 max_pool 2x2's backward scatter: the cotangent [32, 64, 256] into
//!   zeros [32, 64, 1024] along axis 2 (`bench_pool_sort`'s P2 without the
//!   pool);
//! - SC5 `take`'s transpose in W16: [256, 4] into zeros [256, 4] along axis
//!   0 (small: the per-call cost);
//! - SC6 `nx::segment_sum` of f32 [65536] into 1024 segments (1-D: nothing
//!   off the scattered axis to split across threads).
//!
//! `cargo run --release -p nx --example bench_scatter [-- --only SC1]`

use nx::{DType, Tensor};

#[path = "../../rune/examples/common/timing.rs"]
mod timing;
use timing::{bench, wanted};

fn emit(id: &str, variant: &str, (min, median): (f64, f64)) {
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"{variant}\", \"unit\": \"us\", \"min\": {:.2}, \"median\": {:.2}, \"threads\": {}}}",
        min * 1e6,
        median * 1e6,
        nx::num_threads()
    );
}

/// `n` ids in `0..s` (a fixed integer hash, not a random stream).
fn ids(n: usize, s: usize) -> Tensor {
    let v: Vec<i32> = (0..n as u64)
        .map(|i| ((i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 17) % s as u64) as i32)
        .collect();
    Tensor::from_slice(&v, &[n])
}

fn main() {
    nx::seed(0);
    let rows: [(&str, &str, &[usize], usize); 2] = [
        (
            "SC1",
            "segment_sum f32 [8192,64] -> 1024",
            &[8192, 64],
            1024,
        ),
        (
            "SC2",
            "segment_sum f32 [8192,32] -> 1024",
            &[8192, 32],
            1024,
        ),
    ];
    for (id, what, shape, s) in rows {
        if wanted(id) {
            let d = Tensor::randn(shape, DType::F32);
            let i = ids(shape[0], s);
            emit(id, what, bench(|| nx::segment_sum(&d, &i, s), 20, 200));
        }
    }
    if wanted("SC3") {
        let x = Tensor::randn(&[2048, 256], DType::F32);
        let src = Tensor::randn(&[2048, 256], DType::F32);
        let i = ids(256, 256);
        emit(
            "SC3",
            "index_add axis 1 f32 [2048,256], 256 indices",
            bench(|| x.index_add(1, &i, &src), 20, 200),
        );
    }
    if wanted("SC4") {
        let z = Tensor::zeros(&[32, 64, 1024], DType::F32);
        let ct = Tensor::randn(&[32, 64, 256], DType::F32);
        let i = ids(32 * 64 * 256, 1024).reshape(&[32, 64, 256]);
        emit(
            "SC4",
            "scatter_add axis 2 [32,64,256] into [32,64,1024]",
            bench(|| z.scatter_add(2, &i, &ct), 10, 100),
        );
    }
    if wanted("SC5") {
        let z = Tensor::zeros(&[256, 4], DType::F32);
        let ct = Tensor::randn(&[256, 4], DType::F32);
        let i = ids(1024, 256).reshape(&[256, 4]);
        emit(
            "SC5",
            "scatter_add axis 0 [256,4] into [256,4] (W16's take transpose)",
            bench(|| z.scatter_add(0, &i, &ct), 200, 5000),
        );
    }
    if wanted("SC6") {
        let d = Tensor::randn(&[65536], DType::F32);
        let i = ids(65536, 1024);
        emit(
            "SC6",
            "segment_sum f32 [65536] -> 1024",
            bench(|| nx::segment_sum(&d, &i, 1024), 20, 200),
        );
    }
}
