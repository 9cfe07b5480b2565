//! `rune::distributed` measured (feature `mpi`): run by `bench/mpi/run.sh`,
//! or by hand:
//!
//! ```sh
//! cargo build --release -p rune --features mpi --example bench_distributed
//! mpirun --oversubscribe -np 2 target/release/examples/bench_distributed
//! mpirun -np 1 target/release/examples/bench_distributed --only W4
//! ```
//!
//! - `allreduce`: `World::all_reduce_sum` of one f32 tensor of 1, 16 and
//!   64 MiB (the times of rank 0, each call after a barrier; bandwidth =
//!   the buffer's bytes over the time, as `bench/mpi/allreduce.c` reports
//!   MPI_Allreduce's), and a memcpy of the same buffer (`Tensor::copy`).
//! - `W4`: the data-parallel W4 step (`value_and_grad` + SGD of the
//!   784-512-512-10 relu MLP, batch 128) as a pmap over `world.devices()`,
//!   each process passing its 128/size rows, parameters fed back; and the
//!   bytes each step sent (`distributed::bytes_sent`).
//!
//! Rank 0 prints one JSON line per measurement (min and median, ms).

#[path = "common/splitmix.rs"]
mod splitmix;
#[path = "common/w4.rs"]
mod w4;

use rune::distributed;
use rune::prelude::*;
use std::time::Instant;
use w4::{w4_inputs, w4_step, Layer};

fn stats(mut t: Vec<f64>) -> (f64, f64) {
    t.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (t[0], t[t.len() / 2])
}

fn main() {
    let world = distributed::init();
    let only: Option<String> = std::env::args().skip_while(|a| a != "--only").nth(1);
    let want = |id: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|x| x == id))
    };
    let lead = world.rank() == 0;
    let size = world.size();

    if want("allreduce") {
        for mib in [1usize, 16, 64] {
            let n = (mib << 20) / 4;
            let t = Tensor::ones(&[n], DType::F32);
            let runs = if mib == 64 { 20 } else { 50 };
            let mut times = Vec::new();
            for i in 0..runs + 3 {
                world.barrier();
                let s = Instant::now();
                let r = world.all_reduce_sum(&t);
                let dt = s.elapsed().as_secs_f64();
                if i == 0 {
                    assert_eq!(r.to_vec::<f32>()[n - 1], size as f32);
                }
                if i >= 3 {
                    times.push(dt);
                }
            }
            let (min, med) = stats(times);
            let mut copies = Vec::new();
            for _ in 0..runs {
                let s = Instant::now();
                let c = t.copy();
                copies.push(s.elapsed().as_secs_f64());
                drop(c);
            }
            let (cmin, cmed) = stats(copies);
            if lead {
                let bytes = (mib << 20) as f64;
                println!(
                    "{{\"id\": \"allreduce\", \"mib\": {mib}, \"procs\": {size}, \"min_ms\": {:.3}, \
                     \"median_ms\": {:.3}, \"gb_s\": {:.2}, \"memcpy_median_ms\": {:.3}, \
                     \"memcpy_gb_s\": {:.2}}}",
                    1e3 * min,
                    1e3 * med,
                    bytes / med / 1e9,
                    1e3 * cmed,
                    bytes / cmed / 1e9
                );
                let _ = cmin;
            }
        }
    }

    if want("W4") {
        let (params, x, y) = w4_inputs();
        let rows = 128 / size;
        let xs = x.narrow(0, world.rank() * rows, rows).copy();
        let ys = y.narrow(0, world.rank() * rows, rows).copy();
        let mut in_axes = vec![None; params.len() * 2];
        in_axes.extend([Some(0), Some(0)]);
        let step = rune::pmap_with(
            w4_step,
            PmapOpts {
                devices: world.devices(),
                in_axes: Some(in_axes),
                donate: true,
            },
        );
        let mut p: Vec<Layer> = params;
        let mut times = Vec::new();
        let mut sent = 0;
        for i in 0..110 {
            world.barrier();
            let before = distributed::bytes_sent();
            let s = Instant::now();
            let (l, next) = step.call(&(p, xs.clone(), ys.clone()));
            let dt = s.elapsed().as_secs_f64();
            sent = distributed::bytes_sent() - before;
            p = next;
            assert!(l.item::<f32>().is_finite());
            if i >= 10 {
                times.push(dt);
            }
        }
        let (min, med) = stats(times);
        let grads: usize = p.iter().map(|l| 4 * (l.w.numel() + l.b.numel())).sum();
        if lead {
            println!(
                "{{\"id\": \"W4\", \"variant\": \"data-parallel pmap over MPI\", \"procs\": {size}, \
                 \"rows_per_proc\": {rows}, \"min_ms\": {:.3}, \"median_ms\": {:.3}, \
                 \"bytes_sent_per_step\": {sent}, \"gradient_bytes\": {grads}}}",
                1e3 * min,
                1e3 * med
            );
        }
    }
}
