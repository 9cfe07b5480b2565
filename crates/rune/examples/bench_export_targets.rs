//! Exported programs per CPU target (issue 59, BENCHMARKS.md "Export"):
//! for W1 (`exp(x) * y + 1` on f32[4M]), W4's forward (the 784-512-512-10
//! relu MLP's loss, batch 128) and W15's forward (the pre-LN transformer
//! block, B 8, T 128, D 256), each exported for one target at a time
//! (`x86-64-v2`, `x86-64-v3`, `x86-64-v4` where the host has AVX-512,
//! `native`): the native code's bytes and the exported program's call time
//! against `native`'s. Then loading: `Exported::from_bytes` against
//! `Exported::from_bytes_trusted` (Ed25519 over the whole file first) for
//! a signed export of the digits predictor's program and of W15's forward.
//!
//! ```sh
//! cargo run --release --example bench_export_targets [-- REPEATS]
//! ```
//!
//! Each call time is the min and median of REPEATS (default 30) timed
//! calls after 3 untimed ones; each load time the min and median of
//! REPEATS loads (all in this process: the files' code mapped each time).
//! `inspect` reads what a file records without mapping its code (checking
//! the signature, if any): signed minus unsigned is what verifying costs.

use rune::export::{CpuTarget, ExportOpts, SigningKey};
use rune::prelude::*;
use rune::Exported;
use std::time::Instant;

#[path = "common/splitmix.rs"]
mod splitmix;
use splitmix::SplitMix;
#[path = "common/anchors.rs"]
mod anchors;
#[path = "common/timing.rs"]
mod timing;
#[path = "common/transformer.rs"]
#[allow(dead_code)] // the step is W15's; its forward is timed here
mod transformer;
#[path = "common/w15.rs"]
#[allow(dead_code)]
mod w15;
#[path = "common/w4.rs"]
mod w4;

fn host_has(target: CpuTarget) -> bool {
    let host = rune::tolk::export::host_cpu_features();
    target.arch() == std::env::consts::ARCH && target.features().iter().all(|f| host.contains(f))
}

fn temp_dir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("bench_export_targets_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Exports `f` at `args` for each target; prints code bytes, export time
/// and call time (median ms) and the ratio to `native`'s.
fn per_target<P: Ptree, Q: Ptree>(
    name: &str,
    f: impl Fn(&P) -> Q,
    args: &P,
    targets: &[CpuTarget],
    repeats: usize,
) {
    let jitted = rune::jit(&f);
    let want = jitted.call(args).leaves();
    let path = temp_dir().join(format!("{name}.rune"));
    let mut rows = Vec::new();
    for &t in targets {
        let opts = ExportOpts {
            cpu: vec![t],
            signing_key: None,
        };
        let t0 = Instant::now();
        jitted.export_with(args, &path, &opts).unwrap();
        let export_ms = t0.elapsed().as_secs_f64() * 1e3;
        let m = Exported::load(&path).unwrap();
        let got = m.call(args).unwrap();
        // The largest difference from jit's outputs, relative to the
        // largest magnitude of the output it is in.
        let worst = got
            .iter()
            .zip(&want)
            .map(|(g, w)| {
                let (g, w) = (
                    g.cast(DType::F64).to_vec::<f64>(),
                    w.cast(DType::F64).to_vec::<f64>(),
                );
                let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
                g.iter()
                    .zip(&w)
                    .map(|(a, b)| (a - b).abs() / scale)
                    .fold(0.0f64, f64::max)
            })
            .fold(0.0f64, f64::max);
        let (min, median) = timing::bench(|| m.call(args).unwrap(), 3, repeats);
        rows.push((t, m.sizes().1, export_ms, min * 1e3, median * 1e3, worst));
    }
    let native_ms = rows
        .iter()
        .find(|r| r.0 == CpuTarget::Native)
        .map_or(f64::NAN, |r| r.3);
    for (t, code, export_ms, min, median, worst) in rows {
        println!(
            "| {name} | {t} | {code} | {export_ms:.0} | {min:.3} / {median:.3} | {:.2} | {worst:.1e} |",
            min / native_ms
        );
    }
}

/// Min and median milliseconds of `repeats` runs of `f`, as "min / median".
fn min_median_ms(repeats: usize, mut f: impl FnMut()) -> String {
    let mut ts: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ts.sort_by(f64::total_cmp);
    format!("{:.3} / {:.3}", ts[0], ts[repeats / 2])
}

/// Load time unsigned-`load`, and signed with `load` and `load_trusted`.
fn load_times<P: Ptree, Q: Ptree>(name: &str, f: impl Fn(&P) -> Q, args: &P, repeats: usize) {
    let key = SigningKey::from_bytes(&[42; 32]);
    let trusted = [key.verifying_key()];
    let dir = temp_dir();
    let (plain, signed) = (
        dir.join(format!("{name}-plain.rune")),
        dir.join(format!("{name}-signed.rune")),
    );
    let jitted = rune::jit(&f);
    let portable = vec![CpuTarget::portable()];
    jitted
        .export_with(
            args,
            &plain,
            &ExportOpts {
                cpu: portable.clone(),
                signing_key: None,
            },
        )
        .unwrap();
    jitted
        .export_with(
            args,
            &signed,
            &ExportOpts {
                cpu: portable,
                signing_key: Some(key),
            },
        )
        .unwrap();
    let (plain, signed) = (
        std::fs::read(plain).unwrap(),
        std::fs::read(signed).unwrap(),
    );
    let ms = |f: &mut dyn FnMut()| min_median_ms(repeats, f);
    let unsigned = ms(&mut || drop(Exported::from_bytes(&plain).unwrap()));
    let signed_load = ms(&mut || drop(Exported::from_bytes(&signed).unwrap()));
    let trusted_load = ms(&mut || drop(Exported::from_bytes_trusted(&signed, &trusted).unwrap()));
    let inspect_plain = ms(&mut || drop(Exported::inspect(&plain).unwrap()));
    let inspect_signed = ms(&mut || drop(Exported::inspect(&signed).unwrap()));
    println!(
        "| {name} | {} | {unsigned} | {signed_load} | {trusted_load} | {inspect_plain} | {inspect_signed} |",
        signed.len()
    );
}

fn main() {
    let repeats: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    println!(
        "CPU: {cpu}; {} threads; nx level {}; {}",
        timing_threads(),
        rune::nx::cpu_features(),
        rune::tolk::build::compiler_identity().unwrap_or_default()
    );
    let mut targets = vec![CpuTarget::X86_64V2, CpuTarget::X86_64V3];
    if host_has(CpuTarget::X86_64V4) {
        targets.push(CpuTarget::X86_64V4);
    }
    targets.push(CpuTarget::Native);
    targets.retain(|&t| host_has(t) || t == CpuTarget::Native);
    println!();
    println!("| workload | target | code bytes | export ms | call ms (min / median) | min vs native | max diff vs jit (rel. to max abs) |");
    println!("|---|---|---|---|---|---|---|");
    let w1 = anchors::w1_inputs();
    per_target("W1", anchors::w1, &w1, &targets, repeats);
    let (p, x, y) = w4::w4_inputs();
    let w4_forward = |(p, x, y): &w4::W4In| w4::w4_loss(p, x, y);
    per_target("W4 forward", w4_forward, &(p, x, y), &targets, repeats);
    let (p, x, _) = w15::w15_inputs();
    let w15_forward = |(p, x): &(transformer::Block, Tensor)| transformer::block(p, x, w15::W15);
    per_target(
        "W15 forward",
        w15_forward,
        &(p.clone(), x.clone()),
        &targets,
        repeats,
    );

    println!();
    println!("| program | signed file bytes | load ms, unsigned | load ms, signed (`load`) | `load_trusted` ms | `inspect` ms, unsigned | `inspect` ms, signed |");
    println!("|---|---|---|---|---|---|---|");
    let mut rng = SplitMix(3);
    let digits = w4::mlp_params(&mut rng, &[64, 256, 256, 10]);
    let batch = rng.uniform_tensor(360 * 64).reshape(&[360, 64]);
    let predict = |x: &Tensor| {
        let mut h = x.clone();
        for (i, l) in digits.iter().enumerate() {
            h = h.matmul(&l.w) + &l.b;
            if i + 1 < digits.len() {
                h = h.relu();
            }
        }
        (h.argmax(-1, false), h.softmax(-1))
    };
    load_times("digits predictor", predict, &batch, repeats);
    let w15_captured = |x: &Tensor| transformer::block(&p, x, w15::W15);
    load_times("W15 forward (weights captured)", w15_captured, &x, repeats);
    let _ = std::fs::remove_dir_all(temp_dir());
}

fn timing_threads() -> usize {
    std::env::var("NX_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
