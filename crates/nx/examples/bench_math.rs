//! Eager f32 transcendental kernels on 4M elements: the minimum over many
//! runs of each (the machine is shared; the minimum is the least noisy).
//! `cargo run --release -p nx --example bench_math [-- ops]`

use nx::Tensor;
use std::time::Instant;

fn main() {
    let n = 1 << 22;
    let only: Vec<String> = std::env::args().skip(1).collect();
    // Deterministic inputs in (-4, 4) (positive for log).
    let mut s = 0x9e37_79b9u32;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 8.0 - 4.0
        })
        .collect();
    let x = Tensor::from_slice(&v, &[n]);
    let xp = x.abs() + 1e-3;
    let ops: [(&str, &dyn Fn() -> Tensor); 5] = [
        ("exp", &|| x.exp()),
        ("tanh", &|| x.tanh()),
        ("log", &|| xp.log()),
        ("sin", &|| x.sin()),
        ("cos", &|| x.cos()),
    ];
    for (name, f) in ops {
        if !only.is_empty() && !only.iter().any(|o| o == name) {
            continue;
        }
        let mut best = f64::INFINITY;
        for _ in 0..40 {
            let t = Instant::now();
            let y = f();
            std::hint::black_box(&y);
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!("{name:5} f32 [4M]: {:8.3} ms (min of 40)", best * 1e3);
    }
}
