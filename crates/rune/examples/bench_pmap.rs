//! pmap measurements of issue 11, printed as JSON lines:
//!
//! - W4's step (value_and_grad + SGD of the 784-512-512-10 MLP, batch 128)
//!   under `pmap` on `CPU:1`, `CPU:2` (batch split, parameters replicated
//!   and fed back unread, as a training loop does) against `jit` on the
//!   host device; and the bytes each data-parallel step moves (`jit_stats`).
//! - The all-reduce of a `[n]` f32 sum over a split axis, 1, 16 and 64 MiB
//!   per device, against a plain copy of the same bytes.
//!
//! ```sh
//! cargo run --release -p rune --example bench_pmap
//! ```

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, emit};

use rune::prelude::*;
use rune::{nx, tolk, PmapOpts};

#[path = "common/splitmix.rs"]
mod splitmix;

#[path = "common/w4.rs"]
mod w4;
use w4::{w4_inputs, w4_step};

fn main() {
    let (params, x, y) = w4_inputs();

    // jit on the host device: the parameters fed back each step.
    let one = rune::jit(w4_step);
    let mut p1 = params.clone();
    emit(
        "P1",
        "W4 step, jit on CPU",
        "ms",
        bench(
            || {
                let (l, n) = one.call(&(p1.clone(), x.clone(), y.clone()));
                p1 = n;
                l
            },
            10,
            100,
        ),
    );
    // pmap over two host devices: batch split, parameters replicated.
    let n_leaves = params.leaves().len();
    let mut axes = vec![None; n_leaves];
    axes.extend([Some(0), Some(0)]);
    let dp = rune::pmap_with(
        w4_step,
        PmapOpts {
            devices: vec!["CPU:1".into(), "CPU:2".into()],
            in_axes: Some(axes),
            donate: true,
        },
    );
    let mut p2 = params.clone();
    let mut moved = (0, 0);
    emit(
        "P1",
        "W4 step, pmap on CPU:1, CPU:2 (donate)",
        "ms",
        bench(
            || {
                rune::reset_jit_stats();
                let (l, n) = dp.call(&(p2.clone(), x.clone(), y.clone()));
                let st = rune::jit_stats();
                moved = (st.bytes_to_device, st.bytes_from_device);
                p2 = n;
                l
            },
            10,
            100,
        ),
    );
    println!(
        "{{\"id\": \"P1\", \"framework\": \"ours\", \"variant\": \"bytes per data-parallel step\", \"to_device\": {}, \"from_device\": {}, \"batch_bytes\": {}}}",
        moved.0,
        moved.1,
        128 * 784 * 4 + 128 * 4
    );

    // The all-reduce step itself over two devices' buffers, against a plain
    // copy of one buffer (what a transfer of it costs).
    for mib in [1usize, 16, 64] {
        let n = mib << 18; // f32 elements per device
        let parts = [
            Tensor::ones(&[n], DType::F32),
            Tensor::ones(&[n], DType::F32),
        ];
        let t_reduce = bench(|| tolk::shard::all_reduce(&parts, nx::ReduceOp::Sum), 3, 20);
        let t_copy = bench(|| parts[0].copy(), 3, 20);
        emit(
            "P2",
            &format!("all-reduce (sum) of 2 x {mib} MiB"),
            "ms",
            t_reduce,
        );
        emit("P2", &format!("copy of {mib} MiB"), "ms", t_copy);
    }
}
