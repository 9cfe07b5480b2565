//! Exported program vs jit, first call in a fresh process: the digits
//! predictor's program (an MLP 64-256-256-10 with its parameters captured,
//! argmax and softmax of a [360, 64] batch, as `train_digits` exports it;
//! parameters drawn here, not trained: the same program).
//!
//! ```sh
//! cargo run --release --example bench_export [-- REPEATS]
//! ```
//!
//! Each measurement is a child process (this executable, `--child MODE
//! DIR`) timing from the start of its `main` to its first result:
//!
//! - `exported`: `Exported::load` + the first `call`, with `CC` and `PATH`
//!   pointing at an empty directory;
//! - `jit, warm cache`: `jit(f).call` with tolk's disk cache holding the
//!   program (a previous child compiled it): trace, cache hit, run;
//! - `jit, no cache`: the same with `JITCACHE=0`: trace, compile with `cc`,
//!   run.
//!
//! The parent prints the median and range of each over REPEATS children
//! (default 7), the whole child process's wall time too, and the export's
//! size.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use rune::prelude::*;

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;

const BATCH: usize = 360;
const PIXELS: usize = 64;
const HIDDEN: usize = 256;
const CLASSES: usize = 10;

struct Mlp {
    layers: Vec<(Tensor, Tensor)>,
}

fn model() -> Mlp {
    let mut rng = SplitMix(3);
    let mut dense = |i: usize, o: usize| {
        let w: Vec<f32> = (0..i * o)
            .map(|_| rng.normal() * (2.0 / i as f32).sqrt())
            .collect();
        (
            Tensor::from_vec(w, &[i, o]),
            Tensor::zeros(&[o], DType::F32),
        )
    };
    Mlp {
        layers: vec![
            dense(PIXELS, HIDDEN),
            dense(HIDDEN, HIDDEN),
            dense(HIDDEN, CLASSES),
        ],
    }
}

fn predict(m: &Mlp, x: &Tensor) -> (Tensor, Tensor) {
    let mut h = x.clone();
    for (i, (w, b)) in m.layers.iter().enumerate() {
        h = h.matmul(w) + b;
        if i + 1 < m.layers.len() {
            h = h.relu();
        }
    }
    (h.argmax(-1, false), h.softmax(-1))
}

fn input() -> Tensor {
    let mut rng = SplitMix(7);
    rng.uniform_tensor(BATCH * PIXELS).reshape(&[BATCH, PIXELS])
}

/// A child: the first result of `mode`, timed from `main`'s start.
fn child(mode: &str, dir: &Path, start: Instant) {
    let x = input();
    let labels = match mode {
        "exported" => {
            let m = rune::Exported::load(dir.join("digits.rune")).unwrap();
            m.call(&x).unwrap()[0].clone()
        }
        "jit" => {
            let m = model();
            rune::jit(|x: &Tensor| predict(&m, x)).call(&x).0
        }
        other => panic!("unknown mode {other}"),
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    // The same predictions as eager (argmax is exact either way).
    assert_eq!(
        labels.to_vec::<i32>(),
        predict(&model(), &x).0.to_vec::<i32>()
    );
    println!("first result {ms:.3} ms");
}

fn run_child(mode: &str, dir: &Path, env: &[(&str, &Path)], jitcache_off: bool) -> (f64, f64) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--child").arg(mode).arg(dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    if jitcache_off {
        cmd.env("JITCACHE", "0");
    }
    let t = Instant::now();
    let out = cmd.output().unwrap();
    let wall = t.elapsed().as_secs_f64() * 1e3;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{mode}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ms: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("first result "))
        .and_then(|l| l.trim_end_matches(" ms").parse().ok())
        .expect("the child's time");
    (ms, wall)
}

fn summary(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!(
        "{:8.2} ms  ({:.2} - {:.2})",
        v[v.len() / 2],
        v[0],
        v[v.len() - 1]
    )
}

fn main() {
    let start = Instant::now();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2], Path::new(&args[3]), start);
        return;
    }
    let repeats: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("rune_bench_export_{}", std::process::id()));
    let (empty_bin, warm_cache) = (dir.join("bin"), dir.join("cache"));
    std::fs::create_dir_all(&empty_bin).unwrap();
    std::fs::create_dir_all(&warm_cache).unwrap();
    let m = model();
    let path = dir.join("digits.rune");
    let t = Instant::now();
    rune::jit(|x: &Tensor| predict(&m, x))
        .export(&input(), &path)
        .unwrap();
    let export_ms = t.elapsed().as_secs_f64() * 1e3;
    let size = std::fs::metadata(&path).unwrap().len();
    let loaded = rune::Exported::load(&path).unwrap();
    println!(
        "export: {} bytes ({} of native code), written in {export_ms:.0} ms",
        size,
        loaded.sizes().1
    );
    // Warm the disk cache once.
    run_child("jit", &dir, &[("XDG_CACHE_HOME", &warm_cache)], false);
    let modes: [(&str, &str, Vec<(&str, &Path)>, bool); 3] = [
        (
            "exported (load + first call, no compiler)",
            "exported",
            vec![("CC", &empty_bin), ("PATH", &empty_bin)],
            false,
        ),
        (
            "jit first call, warm disk cache",
            "jit",
            vec![("XDG_CACHE_HOME", &warm_cache)],
            false,
        ),
        ("jit first call, JITCACHE=0", "jit", vec![], true),
    ];
    println!(
        "{:<44} {:<30} child process wall time",
        "", "main() to first result, median (range)"
    );
    for (label, mode, env, off) in modes {
        let (mut firsts, mut walls) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            let (ms, wall) = run_child(mode, &dir, &env, off);
            firsts.push(ms);
            walls.push(wall);
        }
        println!(
            "{label:<44} {:<30} {}",
            summary(&mut firsts),
            summary(&mut walls)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
