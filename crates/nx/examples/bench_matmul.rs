//! W3 and friends: matmul throughput in GFLOP/s (2·m·n·k / t), timed like
//! the anchors (5 warm-up calls, then 50 timed ones; best and median).
//!
//! `cargo run --release -p nx --example bench_matmul`

use nx::{DType, Tensor};
use std::time::Instant;

fn data(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5
        })
        .collect();
    Tensor::from_slice(&v, shape).cast(dtype)
}

fn bench(name: &str, flops: f64, f: impl Fn() -> Tensor) {
    for _ in 0..5 {
        std::hint::black_box(f());
    }
    let mut ts: Vec<f64> = (0..50)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .collect();
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let (best, med) = (ts[0], ts[ts.len() / 2]);
    println!(
        "{name:<40} median {:8.3} ms {:7.1} GFLOP/s   best {:8.3} ms {:7.1} GFLOP/s",
        med * 1e3,
        flops / med / 1e9,
        best * 1e3,
        flops / best / 1e9
    );
}

fn main() {
    let n = 1024;
    let fl = 2.0 * (n * n * n) as f64;
    let a = data(&[n, n], DType::F32, 1);
    let b = data(&[n, n], DType::F32, 2);
    bench("W3 f32 1024^2 a@b", fl, || a.matmul(&b));
    bench("f32 1024^2 a.T@b (view)", fl, || a.transpose().matmul(&b));
    bench("f32 1024^2 a@b.T (view)", fl, || a.matmul(&b.transpose()));
    let (a64, b64) = (a.cast(DType::F64), b.cast(DType::F64));
    bench("f64 1024^2 a@b", fl, || a64.matmul(&b64));
    let (a16, b16) = (a.cast(DType::F16), b.cast(DType::F16));
    bench("f16 1024^2 a@b", fl, || a16.matmul(&b16));
    let x = data(&[64, 128, 128], DType::F32, 3);
    let y = data(&[64, 128, 128], DType::F32, 4);
    bench("f32 batch 64x128^3", 64.0 * 2.0 * 128f64.powi(3), || {
        x.matmul(&y)
    });
    let h = data(&[128, 784], DType::F32, 5);
    let w = data(&[784, 512], DType::F32, 6);
    bench(
        "f32 128x784 @ 784x512 (MLP layer)",
        2.0 * 128.0 * 784.0 * 512.0,
        || h.matmul(&w),
    );
    // The W4 step's backward products: weight gradients (lhs transposed)
    // and input gradients (rhs transposed), as views.
    let g = data(&[128, 512], DType::F32, 7);
    let w2 = data(&[512, 512], DType::F32, 8);
    bench(
        "f32 784x128 @ 128x512 (x.T@g, view)",
        2.0 * 128.0 * 784.0 * 512.0,
        || h.transpose().matmul(&g),
    );
    bench(
        "f32 128x512 @ 512x512 (g@w.T, view)",
        2.0 * 128.0 * 512.0 * 512.0,
        || g.matmul(&w2.transpose()),
    );
    let a200 = data(&[200, 200], DType::F32, 9);
    bench("f32 200^3 (W6 hessian)", 2.0 * 200f64.powi(3), || {
        a200.matmul(&a200)
    });
}
