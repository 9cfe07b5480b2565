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

#[path = "common/timing.rs"]
mod timing;
use timing::bench;

use rune::prelude::*;
use rune::rng;

const N: usize = 10_000_000;

fn emit(id: &str, variant: &str, (min, median): (f64, f64)) {
    let threads = nx::num_threads();
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
