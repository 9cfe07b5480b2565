//! Sampling throughput of `rune::rng` (issue 5, "Measure"): 10^7 `F32`
//! draws from one key, eager, timed as the other benchmarks are (untimed
//! warmup calls, then individually timed calls; min and median), printed as
//! JSON lines for `bench/rng.py`, which runs JAX's jitted samplers beside it.
//!
//! ```sh
//! cargo run --release -p rune --example bench_rng
//! ```
//!
//! - R1: `rng::uniform(&key, &[10_000_000], F32)`
//! - R2: `rng::normal(&key, &[10_000_000], F32)`
//! - R3: `rng::bits(&key, &[10_000_000])` (the generator alone, for context)

use rune::prelude::*;
use rune::rng;
use std::hint::black_box;
use std::time::Instant;

const N: usize = 10_000_000;

/// Per-call seconds: `warmup` untimed calls, then `repeats` timed ones; (min, median).
fn bench<T>(mut f: impl FnMut() -> T, warmup: usize, repeats: usize) -> (f64, f64) {
    for _ in 0..warmup {
        black_box(f());
    }
    let mut ts: Vec<f64> = (0..repeats)
        .map(|_| {
            let t0 = Instant::now();
            let out = f();
            let dt = t0.elapsed().as_secs_f64();
            drop(black_box(out));
            dt
        })
        .collect();
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (ts[0], ts[repeats / 2])
}

fn emit(id: &str, variant: &str, (min, median): (f64, f64)) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"{variant}\", \"unit\": \"ms\", \"min\": {}, \"median\": {}, \"threads\": {threads}, \"n\": {N}}}",
        min * 1e3,
        median * 1e3,
    );
}

fn main() {
    let key = rng::key(0);
    let (warmup, repeats) = (2, 10);
    emit(
        "R1",
        "rng::uniform f32 [1e7], eager",
        bench(|| rng::uniform(&key, &[N], DType::F32), warmup, repeats),
    );
    emit(
        "R2",
        "rng::normal f32 [1e7], eager",
        bench(|| rng::normal(&key, &[N], DType::F32), warmup, repeats),
    );
    emit(
        "R3",
        "rng::bits u32 [1e7], eager",
        bench(|| rng::bits(&key, &[N]), warmup, repeats),
    );
}
