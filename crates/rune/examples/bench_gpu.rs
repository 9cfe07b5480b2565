//! The benchmark half of the GPU check (issue 45): the anchors' W1, W3
//! and W4 and the generality workloads W15 and W17, jitted on the device
//! named on the command line, beside the device's own limits measured in
//! the same process, so that the issue's GPU targets (W1 at 85% of the
//! memory bandwidth or more, W3 at 70% of cuBLAS's peak or more) read off
//! the rows. `bench/gpu_check.sh` runs it on the GPU machine beside
//! `bench/gpu_jax.py` (jax.jit on the same workloads) and prints both as
//! one table (`bench/gpu_table.py`).
//!
//! ```sh
//! cargo run --release -p rune --example bench_gpu -- --device CUDA
//! cargo run --release -p rune --example bench_gpu -- --device CPU --only W1,PEAK_BW
//! ```
//!
//! The workloads are the other benchmarks' own definitions
//! (`common/anchors.rs`: W1 `exp(x) * y + 1` over f32[4M], W3 `a @ b` over
//! f32[1024, 1024]; `common/w4.rs`; `common/w15.rs`; `common/w17.rs`), so
//! a CPU row here is `bench_jit`'s or `bench_generality`'s. Warmup and
//! repeats are the anchors' and the generality README's (W1 5/100, W3
//! 5/50, W4 10/200, W15 5/50, W17 10/200).
//!
//! Inputs lie where JAX's do. JAX's workloads take device arrays
//! (`jnp.asarray` puts them on its default device) and capture the rest
//! as constants; here, on CUDA, the inputs (W1's x and y, W3's a and b,
//! W4's parameters, batch and labels, W15's and W17's parameters) are
//! made resident once, the unread outputs of a jitted identity, which a
//! call takes where they lie, moving nothing (the runtime's residency
//! rules); what W15 and W17 capture (x and the target; the graph) are the
//! program's constants, uploaded once. One exception the rules make: W4's
//! labels index a gather (and its gradient's scatter), and indices are
//! checked on the host before each call, so resident labels are read back
//! every call (512 bytes per check; each row's
//! `bytes_host_device_per_call` says what a steady call moved).
//!
//! A timed call ends when the device is done: the stream synchronized
//! (`DeviceApi::synchronize`, JAX's `block_until_ready`), its outputs then
//! dropped unread (reading them would time a copy to the host that JAX's
//! timing does not make). On the CPU a call returns when it is done.
//!
//! References, measured on the device (ids `PEAK_BW`, `PEAK_GEMM`,
//! `GEMM_W3`):
//! - bandwidth: on CUDA a device-to-device copy of 256 MiB
//!   (`DeviceApi::copy_on_device`, the driver's `cuMemcpyDtoDAsync`: each
//!   byte read once and written once, 512 MiB moved), the best streaming
//!   the runtime exposes; on the CPU the same copy between host buffers,
//!   split across nx's threads.
//! - GEMM: on CUDA an SGEMM of 8192³ through the runtime's gemm
//!   (`DeviceApi::gemm`: cuBLAS's `cublasSgemmStridedBatched`, the call
//!   jit's products make, true f32 with no TF32), its peak; and the same
//!   call at W3's size, what W3's program wraps. On the CPU nx's eager
//!   matmul (the GEMM jit's products call) at 2048³ and at W3's size.
//!
//! Output: JSON lines on stdout. A `DEVICE` row (the device's
//! description); per workload a check row (the jitted result against
//! eager's on the host, once, before timing; `common/check.rs`) and a
//! timing row `{"id", "framework": "ours", "device", "variant", "unit":
//! "ms", "min", "median", "n", "bytes_host_device_per_call"}`, W1's with
//! `gb_per_s` and W3's with `gflop_per_s` (from the min); the references'
//! rows with `gb_per_s` or `gflop_per_s`. A workload that fails prints an
//! error row instead and the process exits with status 1 after the others
//! ran. `--only ID,ID` runs a subset (W1, W3, W4, W15, W17, PEAK_BW,
//! PEAK_GEMM).

#[path = "common/timing.rs"]
mod timing;
use timing::{bench, json_str};
#[path = "common/check.rs"]
mod check;
use check::{check, guarded};

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[path = "common/anchors.rs"]
mod anchors;
use anchors::{w1_inputs, w3_inputs, W1_LEN, W3_N};
#[path = "common/w4.rs"]
mod w4;
use w4::{w4_inputs, w4_step};
#[path = "common/transformer.rs"]
mod transformer;
#[path = "common/w15.rs"]
mod w15;
use w15::{w15_fn, w15_inputs};
#[path = "common/w17.rs"]
mod w17;
use w17::{w17_fn, w17_inputs};

use rune::prelude::*;
use rune::Jit;
use std::sync::Arc;
use tolk::device::{Device, Gemm, Operand};

/// The device the workloads run on, and how a call on it is timed.
struct Target {
    /// The jit device's name (`"CPU"`, `"CUDA"`, `"CUDA:1"`).
    name: String,
    /// The CUDA device behind it (the one jit runs on: `tolk::device::open`
    /// keeps one per process), or `None` on the host.
    cuda: Option<Arc<Device>>,
}

/// One timed workload: seconds per call, and what a call moved.
struct Timing {
    min: f64,
    median: f64,
    n: usize,
    /// Bytes between host and device per call (`jit_stats`), averaged
    /// over the warmup and timed calls.
    moved_per_call: u64,
}

impl Target {
    /// `name`, opened; panics naming what is missing (rune's
    /// unavailable-device message) when it cannot be.
    fn open(name: &str) -> Target {
        let cuda = name.starts_with("CUDA").then(|| {
            // jit's own check first: its message names what is missing.
            drop(rune::jit_with(|x: &Tensor| x.clone(), Self::opts_for(name)));
            tolk::device::open(name).unwrap_or_else(|e| panic!("bench_gpu: {e}"))
        });
        Target {
            name: name.into(),
            cuda,
        }
    }

    fn opts_for(name: &str) -> JitOpts {
        JitOpts {
            device: name.into(),
            ..JitOpts::default()
        }
    }

    fn describe(&self) -> String {
        match &self.cuda {
            Some(d) => d.api().describe(),
            None => format!("the host, {} threads", nx::num_threads()),
        }
    }

    /// `f` jitted on this device.
    fn jit<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(&self, f: F) -> Jit<F, P, Q> {
        rune::jit_with(f, Self::opts_for(&self.name))
    }

    /// `p` where a call on this device takes it without a transfer: on
    /// CUDA its leaves as unread outputs of a jitted identity (one upload
    /// now, none per call); on the host `p`'s own tensors.
    fn place<P: Ptree>(&self, p: &P) -> P {
        if self.cuda.is_none() {
            return p.with_leaves(&p.leaves());
        }
        let identity = self.jit(|leaves: &Vec<Tensor>| leaves.clone());
        p.with_leaves(&identity.call(&p.leaves()))
    }

    /// Waits until the device has done every call made so far.
    fn sync(&self) {
        if let Some(d) = &self.cuda {
            d.api()
                .synchronize()
                .unwrap_or_else(|e| panic!("bench_gpu: synchronize: {e}"));
        }
    }

    /// `call` timed `repeats` times after `warmup` untimed calls, each
    /// call waited for (its results dropped after the clock stops).
    fn time<T>(&self, mut call: impl FnMut() -> T, warmup: usize, repeats: usize) -> Timing {
        let before = rune::jit_stats();
        let (min, median) = bench(
            || {
                let out = call();
                self.sync();
                out
            },
            warmup,
            repeats,
        );
        let after = rune::jit_stats();
        let moved = (after.bytes_to_device - before.bytes_to_device)
            + (after.bytes_from_device - before.bytes_from_device);
        Timing {
            min,
            median,
            n: repeats,
            moved_per_call: moved / (warmup + repeats) as u64,
        }
    }

    /// Prints one timing row (milliseconds), with `extra` fields.
    fn row(&self, id: &str, variant: &str, t: &Timing, extra: &[(&str, f64)]) {
        let extra: String = extra
            .iter()
            .map(|(k, v)| format!(", \"{k}\": {v}"))
            .collect();
        println!(
            "{{\"id\": \"{id}\", \"framework\": \"ours\", \"device\": {}, \"variant\": {}, \
             \"unit\": \"ms\", \"min\": {}, \"median\": {}, \"n\": {}, \
             \"bytes_host_device_per_call\": {}{extra}}}",
            json_str(&self.name),
            json_str(variant),
            t.min * 1e3,
            t.median * 1e3,
            t.n,
            t.moved_per_call,
        );
    }
}

// ---------------------------------------------------------------- workloads

fn w1(t: &Target) {
    let inp = w1_inputs();
    let jf = t.jit(anchors::w1);
    let on = t.place(&inp);
    check(
        "W1",
        "jit vs eager",
        &jf.call(&on),
        &anchors::w1(&inp),
        1e-6,
    );
    let timing = t.time(|| jf.call(&on), 5, 100);
    // Read x and y, write the result: 12 bytes per element.
    let bytes = (3 * 4 * W1_LEN) as f64;
    t.row(
        "W1",
        "jit exp(x) * y + 1, f32[4M]",
        &timing,
        &[("bytes", bytes), ("gb_per_s", bytes / timing.min / 1e9)],
    );
}

fn w3(t: &Target) {
    let inp = w3_inputs();
    let jf = t.jit(anchors::w3);
    let on = t.place(&inp);
    check(
        "W3",
        "jit vs eager",
        &jf.call(&on),
        &anchors::w3(&inp),
        1e-5,
    );
    let timing = t.time(|| jf.call(&on), 5, 50);
    let flops = 2.0 * (W3_N as f64).powi(3);
    t.row(
        "W3",
        "jit a @ b, f32[1024, 1024]",
        &timing,
        &[("flops", flops), ("gflop_per_s", flops / timing.min / 1e9)],
    );
}

fn w4(t: &Target) {
    let inp = w4_inputs();
    let js = t.jit(w4_step);
    let on = t.place(&inp);
    check("W4", "jit vs eager", &js.call(&on), &w4_step(&inp), 1e-4);
    let timing = t.time(|| js.call(&on), 10, 200);
    t.row(
        "W4",
        "jit(value_and_grad + SGD) MLP 784-512-512-10, batch 128",
        &timing,
        &[],
    );
}

fn w15(t: &Target) {
    let (p, x, tgt) = w15_inputs();
    let step = w15_fn(&x, &tgt);
    let js = t.jit(&step);
    let on = t.place(&p);
    check("W15", "jit vs eager", &js.call(&on), &step(&p), 1e-4);
    let timing = t.time(|| js.call(&on), 5, 50);
    t.row(
        "W15",
        "jit(value_and_grad + SGD) transformer block B8 T128 D256",
        &timing,
        &[],
    );
}

fn w17(t: &Target) {
    let (p, g) = w17_inputs();
    let step = w17_fn(g);
    let js = t.jit(&step);
    let on = t.place(&p);
    check("W17", "jit vs eager", &js.call(&on), &step(&p), 1e-4);
    let timing = t.time(|| js.call(&on), 10, 200);
    t.row(
        "W17",
        "jit(value_and_grad + SGD) 2-layer GNN, 1024 nodes, 8192 edges",
        &timing,
        &[],
    );
}

// ---------------------------------------------------------------- references

/// Bytes each side of the bandwidth reference's copy: far past any cache.
const COPY_BYTES: usize = 256 << 20;

/// The memory bandwidth reference: a 256 MiB copy, 512 MiB moved.
fn peak_bandwidth(t: &Target) {
    let (timing, what) = match &t.cuda {
        Some(d) => {
            let alloc = |bytes| d.alloc(bytes).unwrap_or_else(|e| panic!("{e}"));
            // The contents are whatever the allocator holds: a copy's speed
            // does not depend on them.
            let (src, dst) = (alloc(COPY_BYTES), alloc(COPY_BYTES));
            let copy = || {
                d.api()
                    .copy_on_device(dst.ptr(), src.ptr(), COPY_BYTES)
                    .unwrap_or_else(|e| panic!("{e}"))
            };
            (t.time(copy, 3, 20), "device-to-device copy, 256 MiB")
        }
        None => {
            let src = vec![1u8; COPY_BYTES];
            let mut dst = vec![0u8; COPY_BYTES];
            let parts = nx::num_threads();
            let chunk = COPY_BYTES.div_ceil(parts);
            let copy = || {
                std::thread::scope(|scope| {
                    for (to, from) in dst.chunks_mut(chunk).zip(src.chunks(chunk)) {
                        scope.spawn(move || to.copy_from_slice(from));
                    }
                })
            };
            (
                t.time(copy, 3, 20),
                "host copy, 256 MiB, split across nx's threads",
            )
        }
    };
    let bytes = (2 * COPY_BYTES) as f64;
    t.row(
        "PEAK_BW",
        what,
        &timing,
        &[("bytes", bytes), ("gb_per_s", bytes / timing.min / 1e9)],
    );
}

/// The GEMM references: the device's f32 matrix product at a size that
/// reaches its peak, and at W3's.
fn peak_gemm(t: &Target) {
    let flops = |n: usize| 2.0 * (n as f64).powi(3);
    let emit = |id: &str, what: &str, n: usize, timing: Timing| {
        let f = flops(n);
        t.row(
            id,
            what,
            &timing,
            &[("flops", f), ("gflop_per_s", f / timing.min / 1e9)],
        );
    };
    match &t.cuda {
        Some(d) => {
            // C = A B, square and contiguous, as the runtime's products
            // call it (row-major operands; cuBLAS transposes the view).
            let sgemm = |a: &Tensor, b: &Tensor, n: usize, warmup, repeats| {
                let up = |x: &Tensor| d.upload_tensor(x).unwrap_or_else(|e| panic!("{e}"));
                let (a, b) = (up(a), up(b));
                let c = d.alloc(n * n * 4).unwrap_or_else(|e| panic!("{e}"));
                let operand = |ptr| Operand {
                    ptr,
                    row_stride: n,
                    col_stride: 1,
                    batch_stride: 0,
                };
                let g = Gemm {
                    dtype: DType::F32,
                    batch: 1,
                    m: n,
                    n,
                    k: n,
                    a: operand(a.ptr()),
                    b: operand(b.ptr()),
                    c: c.ptr(),
                };
                let run = || d.api().gemm(&g).unwrap_or_else(|e| panic!("{e}"));
                t.time(run, warmup, repeats)
            };
            let big = 8192;
            let m = SplitMix(8192)
                .uniform_tensor(big * big)
                .reshape(&[big, big]);
            emit(
                "PEAK_GEMM",
                "cuBLAS SGEMM 8192^3 (the runtime's gemm)",
                big,
                sgemm(&m, &m, big, 2, 10),
            );
            let (a, b) = w3_inputs();
            emit(
                "GEMM_W3",
                "cuBLAS SGEMM 1024^3 (the runtime's gemm, W3's inputs)",
                W3_N,
                sgemm(&a, &b, W3_N, 5, 50),
            );
        }
        None => {
            let big = 2048;
            let mut rng = SplitMix(2048);
            let (a, b) = (
                rng.normal_tensor(&[big, big], 1.0),
                rng.normal_tensor(&[big, big], 1.0),
            );
            emit(
                "PEAK_GEMM",
                "nx matmul 2048^3 (eager)",
                big,
                t.time(|| a.matmul(&b), 1, 5),
            );
            let w3 = w3_inputs();
            emit(
                "GEMM_W3",
                "nx matmul 1024^3 (eager, W3's inputs)",
                W3_N,
                t.time(|| anchors::w3(&w3), 5, 50),
            );
        }
    }
}

// ---------------------------------------------------------------- main

/// A workload or reference, run on the device.
type Workload = fn(&Target);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .map(|i| args.get(i + 1).cloned().unwrap_or_default())
    };
    let device = value("--device").unwrap_or_else(|| "CPU".into());
    let only: Option<Vec<String>> =
        value("--only").map(|o| o.split(',').map(String::from).collect());
    let want = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == id));

    let mut target = None;
    if !guarded("DEVICE", || target = Some(Target::open(&device))) {
        std::process::exit(1);
    }
    let t = target.expect("opened");
    println!(
        "{{\"id\": \"DEVICE\", \"framework\": \"ours\", \"device\": {}, \"describe\": {}}}",
        json_str(&t.name),
        json_str(&t.describe())
    );
    let workloads: [(&str, Workload); 7] = [
        ("PEAK_BW", peak_bandwidth),
        ("PEAK_GEMM", peak_gemm),
        ("W1", w1),
        ("W3", w3),
        ("W4", w4),
        ("W15", w15),
        ("W17", w17),
    ];
    let mut failed = false;
    for (id, run) in workloads {
        if want(id) {
            failed |= !guarded(id, || run(&t));
        }
    }
    if failed {
        std::process::exit(1);
    }
}
