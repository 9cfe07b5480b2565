//! The eager workloads as a user's crate runs them (issue 14, "Measure"):
//! W1 `exp(x) * y + 1` on 4M f32, W2 `sum_all` of 4M f32, W4 (value_and_grad
//! + SGD of the 784-512-512-10 MLP, batch 128) and C1 (grad of the 100-op
//! chain on [64]). The same file is an example of `rune` (built with the
//! workspace's settings) and of `crates/rune-user` (a crate outside the
//! workspace, built with none), so `bench/user_crate.py` times the one code
//! both ways.
//!
//! ```sh
//! cargo run --release -p rune --example bench_user
//! cargo run --release --manifest-path crates/rune-user/Cargo.toml \
//!     --target-dir target/rune-user --example bench_user
//! ```
//!
//! Output: a `#` line naming the kernel level, then one JSON row per workload
//! (`timing::emit`).

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use rune::prelude::*;

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

#[path = "common/c1.rs"]
mod c1;
use c1::chain;

#[path = "common/w4.rs"]
mod w4;
use w4::{w4_inputs, w4_step};

fn main() {
    println!("# eager kernels: {}", rune::nx::cpu_features());
    let n = 4 * 1024 * 1024;
    let mut rng = SplitMix(0);
    let (x, y) = (rng.uniform_tensor(n), rng.uniform_tensor(n));
    let w1 = || x.exp() * &y + 1.0;
    emit("W1", "exp(x) * y + 1 (eager)", "ms", bench(w1, 5, 100));
    emit("W2", "sum_all (eager)", "ms", bench(|| x.sum_all(), 5, 200));
    let inp = w4_inputs();
    emit(
        "W4",
        "value_and_grad + SGD (eager)",
        "ms",
        bench(|| w4_step(&inp), 10, 200),
    );
    let xc = SplitMix(2).normal_tensor(&[64], 1.0);
    let c1 = || rune::grad(|x: &Tensor| chain(x).sum_all(), &xc);
    emit(
        "C1",
        "grad of the 100-op chain on [64] (eager)",
        "us",
        bench(c1, 200, 2000),
    );
}
