//! Eager benchmark workloads of issue 2 ("Measure"), timed as
//! `/work/shared/bench/anchors/README.md` prescribes: inputs built once
//! outside the timed region, `warmup` untimed calls, then `repeats`
//! individually timed calls (`Instant`), min and median reported.
//!
//! ```sh
//! cargo run --release -p nx --example bench_eager            # all workloads
//! cargo run --release -p nx --example bench_eager -- --only W1,S1
//! cargo run --release -p nx --example bench_eager -- --diag  # + per-op rows
//! ```
//!
//! Output: one JSON object per line, `{"id", "variant", "unit", "min",
//! "median", "warmup", "repeats", "threads"}` (for GFLOP/s rows `min` is the
//! best throughput, from the fastest call, and `median` comes from the median
//! time), so `bench/compare.py` can parse it. Lines starting with `#` are
//! comments. A workload whose kernel is not implemented yet prints a line with
//! an `"error"` field instead of timings.
//!
//! Workloads: W1 `exp(x) * y + 1` on 4M f32 (x, y ~ U[0,1)); W2 `sum_all` of
//! 4M f32; W3 1024×1024 f32 matmul (GFLOP/s = 2n³/t); S1 add of two 100×100
//! f32; S2 `sum_all` of 100×100 f32.

use nx::{DType, Tensor};
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Instant;

const N4M: usize = 4 * 1024 * 1024;

/// splitmix64: a small, good-enough generator for benchmark inputs (values do
/// not matter for timing, only their range: no denormals, no NaN).
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// U[0, 1) with 24 random bits.
    fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
    /// N(0, 1) by Box–Muller.
    fn normal(&mut self) -> f32 {
        let u1 = 1.0 - (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }
    fn tensor(&mut self, shape: &[usize], f: fn(&mut Rng) -> f32) -> Tensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| f(self)).collect();
        Tensor::from_vec(v, shape)
    }
}

/// Per-call times in seconds: `warmup` untimed calls, then `repeats` timed ones.
fn bench(mut f: impl FnMut() -> Tensor, warmup: usize, repeats: usize) -> (f64, f64) {
    for _ in 0..warmup {
        black_box(f());
    }
    let mut ts = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t0 = Instant::now();
        let out = f();
        ts.push(t0.elapsed().as_secs_f64());
        drop(black_box(out));
    }
    ts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let med = if repeats % 2 == 1 {
        ts[repeats / 2]
    } else {
        0.5 * (ts[repeats / 2 - 1] + ts[repeats / 2])
    };
    (ts[0], med)
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

fn emit(id: &str, variant: &str, unit: &str, min: f64, median: f64, warmup: usize, repeats: usize) {
    println!(
        "{{\"id\": {}, \"variant\": {}, \"unit\": {}, \"min\": {min:.6}, \"median\": {median:.6}, \"warmup\": {warmup}, \"repeats\": {repeats}, \"threads\": {}}}",
        json_str(id),
        json_str(variant),
        json_str(unit),
        nx::num_threads()
    );
}

/// Times `f` and prints its row (`unit` "ms" or "us"); with `flops`, also a
/// GFLOP/s row. A panic in the first call (e.g. a kernel not written yet)
/// prints an error row instead.
#[allow(clippy::too_many_arguments)]
fn timed(
    id: &str,
    variant: &str,
    unit: &str,
    mut f: impl FnMut() -> Tensor,
    check: impl Fn(&Tensor) -> Result<(), String>,
    warmup: usize,
    repeats: usize,
    flops: Option<f64>,
) {
    let first = catch_unwind(AssertUnwindSafe(&mut f));
    let err = match first {
        Err(e) => Some(
            e.downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        ),
        Ok(t) => check(&t).err(),
    };
    if let Some(msg) = err {
        println!(
            "{{\"id\": {}, \"variant\": {}, \"error\": {}}}",
            json_str(id),
            json_str(variant),
            json_str(msg.lines().next().unwrap_or(""))
        );
        return;
    }
    let (mn, md) = bench(f, warmup, repeats);
    let scale = if unit == "us" { 1e6 } else { 1e3 };
    emit(id, variant, unit, mn * scale, md * scale, warmup, repeats);
    if let Some(fl) = flops {
        emit(
            id,
            variant,
            "GFLOP/s",
            fl / mn / 1e9,
            fl / md / 1e9,
            warmup,
            repeats,
        );
    }
}

/// `Ok` when `got` and `want` agree to a relative tolerance.
fn close(got: &[f32], want: &[f64], rtol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("wrong length {} != {}", got.len(), want.len()));
    }
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if ((g as f64) - w).abs() > rtol * w.abs().max(1.0) {
            return Err(format!("wrong value at {i}: {g} vs {w}"));
        }
    }
    Ok(())
}

// TEMPORARY until `Tensor::sum_all` / `Tensor::matmul` land on main: bind the
// primitives those operations emit.
fn sum_all(x: &Tensor) -> Tensor {
    nx::bind(
        nx::Prim::Reduce {
            op: nx::ReduceOp::Sum,
            axes: (0..x.ndim()).collect(),
        },
        &[x],
    )
}

fn matmul(a: &Tensor, b: &Tensor) -> Tensor {
    nx::bind(
        nx::Prim::DotGeneral {
            lhs_batch: vec![],
            rhs_batch: vec![],
            lhs_contract: vec![1],
            rhs_contract: vec![0],
        },
        &[a, b],
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut only: Option<Vec<String>> = None;
    let mut diag = false;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--only" => {
                i += 1;
                only = Some(args[i].split(',').map(|s| s.trim().to_string()).collect());
            }
            "--diag" => diag = true,
            "-h" | "--help" => {
                println!("usage: bench_eager [--only W1,W2,W3,S1,S2] [--diag]");
                return;
            }
            a => panic!("bench_eager: unknown argument {a:?}"),
        }
        i += 1;
    }
    let want = |id: &str| only.as_ref().is_none_or(|o| o.iter().any(|w| w == id));
    // Keep panics from unimplemented kernels to one JSON error line each.
    std::panic::set_hook(Box::new(|_| {}));
    println!(
        "# nx bench_eager: threads {}, profile {}",
        nx::num_threads(),
        if cfg!(debug_assertions) {
            "debug (numbers are meaningless)"
        } else {
            "release"
        }
    );
    let mut rng = Rng(0);

    if want("W1") {
        let x = rng.tensor(&[N4M], Rng::uniform);
        let y = rng.tensor(&[N4M], Rng::uniform);
        let (xs, ys) = (x.to_vec::<f32>(), y.to_vec::<f32>());
        let check = |z: &Tensor| {
            let z = z.to_vec::<f32>();
            let idx = [0, 1, 12345, N4M / 2, N4M - 1];
            let got: Vec<f32> = idx.iter().map(|&i| z[i]).collect();
            let want: Vec<f64> = idx
                .iter()
                .map(|&i| (xs[i] as f64).exp() * ys[i] as f64 + 1.0)
                .collect();
            close(&got, &want, 1e-6)
        };
        timed(
            "W1",
            "exp(x) * y + 1",
            "ms",
            || x.exp() * &y + 1.0,
            check,
            5,
            100,
            None,
        );
        if diag {
            let ok = |_: &Tensor| Ok(());
            timed("W1.exp", "exp(x)", "ms", || x.exp(), ok, 5, 100, None);
            timed("W1.mul", "x * y", "ms", || &x * &y, ok, 5, 100, None);
            timed("W1.add1", "x + 1", "ms", || &x + 1.0, ok, 5, 100, None);
            timed("D.add", "x + y (4M)", "ms", || &x + &y, ok, 5, 100, None);
            timed(
                "D.sigmoid",
                "sigmoid(x)",
                "ms",
                || x.sigmoid(),
                ok,
                5,
                100,
                None,
            );
            timed(
                "D.exp_f64",
                "exp(x) f64",
                "ms",
                || x.cast(DType::F64).exp(),
                ok,
                2,
                10,
                None,
            );
        }
    }

    if want("W2") {
        let x = rng.tensor(&[N4M], Rng::uniform);
        let want: f64 = x.to_vec::<f32>().iter().map(|&v| v as f64).sum();
        let check = move |s: &Tensor| close(&[s.item::<f32>()], &[want], 1e-4);
        timed(
            "W2",
            "sum_all(x)",
            "ms",
            || sum_all(&x),
            check,
            5,
            200,
            None,
        );
    }

    if want("W3") {
        let n = 1024;
        let a = rng.tensor(&[n, n], Rng::normal);
        let b = rng.tensor(&[n, n], Rng::normal);
        let (av, bv) = (a.to_vec::<f32>(), b.to_vec::<f32>());
        let check = move |c: &Tensor| {
            if c.shape() != [n, n] {
                return Err(format!("wrong shape {:?}", c.shape()));
            }
            let c = c.to_vec::<f32>();
            let mut got = vec![];
            let mut want = vec![];
            for (i, j) in [(0, 0), (1, 7), (511, 1000), (1023, 1023)] {
                got.push(c[i * n + j]);
                want.push(
                    (0..n)
                        .map(|k| av[i * n + k] as f64 * bv[k * n + j] as f64)
                        .sum(),
                );
            }
            close(&got, &want, 1e-3)
        };
        let flops = 2.0 * (n as f64).powi(3);
        timed(
            "W3",
            "a.matmul(b) 1024^2",
            "ms",
            || matmul(&a, &b),
            check,
            5,
            50,
            Some(flops),
        );
    }

    if want("S1") {
        let a = rng.tensor(&[100, 100], Rng::uniform);
        let b = rng.tensor(&[100, 100], Rng::uniform);
        let (av, bv) = (a.to_vec::<f32>(), b.to_vec::<f32>());
        let check = move |c: &Tensor| {
            let want: Vec<f64> = av
                .iter()
                .zip(&bv)
                .map(|(&u, &v)| u as f64 + v as f64)
                .collect();
            close(&c.to_vec::<f32>(), &want, 1e-6)
        };
        timed(
            "S1",
            "a + b 100x100",
            "us",
            || &a + &b,
            check,
            1000,
            10000,
            None,
        );
    }

    if want("S2") {
        let x = rng.tensor(&[100, 100], Rng::uniform);
        let want: f64 = x.to_vec::<f32>().iter().map(|&v| v as f64).sum();
        let check = move |s: &Tensor| close(&[s.item::<f32>()], &[want], 1e-5);
        timed(
            "S2",
            "sum_all(x) 100x100",
            "us",
            || sum_all(&x),
            check,
            1000,
            10000,
            None,
        );
    }
}
