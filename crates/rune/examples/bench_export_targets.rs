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
//! cargo run --release --example bench_export_targets -- --w1-source   # W1's kernel C
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
/// and call time (min and median ms) and the min's ratio to `native`'s.
/// The targets' programs are called in turns (one call each per round,
/// `repeats` rounds after 3 untimed ones), so that whatever else the
/// machine runs slows them alike.
fn per_target<P: Ptree, Q: Ptree>(
    name: &str,
    f: impl Fn(&P) -> Q,
    args: &P,
    targets: &[CpuTarget],
    repeats: usize,
) {
    let jitted = rune::jit(&f);
    let want = jitted.call(args).leaves();
    let dir = temp_dir();
    let mut loaded = Vec::new();
    for &t in targets {
        let path = dir.join(format!("{name}-{t}.rune"));
        let opts = ExportOpts {
            cpu: vec![t],
            signing_key: None,
        };
        let t0 = Instant::now();
        jitted.export_with(args, &path, &opts).unwrap();
        let export_ms = t0.elapsed().as_secs_f64() * 1e3;
        let m = Exported::load(&path).unwrap();
        // The largest difference from jit's outputs, relative to the
        // largest magnitude of the output it is in.
        let worst = (m.call(args).unwrap().iter().zip(&want))
            .map(|(g, w)| {
                let (g, w) = (
                    g.cast(DType::F64).to_vec::<f64>(),
                    w.cast(DType::F64).to_vec::<f64>(),
                );
                let scale = w.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
                (g.iter().zip(&w))
                    .map(|(a, b)| (a - b).abs() / scale)
                    .fold(0.0f64, f64::max)
            })
            .fold(0.0f64, f64::max);
        loaded.push((t, m, export_ms, worst));
    }
    let calls: Vec<Box<dyn Fn() + '_>> = (loaded.iter())
        .map(|(_, m, ..)| Box::new(move || drop(m.call(args).unwrap())) as Box<dyn Fn()>)
        .collect();
    let calls: Vec<&dyn Fn()> = calls.iter().map(|c| c.as_ref()).collect();
    let times = in_turns(&calls, repeats);
    let native =
        (loaded.iter().position(|l| l.0 == CpuTarget::Native)).map_or(f64::NAN, |i| times[i].0);
    for ((t, m, export_ms, worst), (min, median)) in loaded.iter().zip(&times) {
        println!(
            "| {name} | {t} | {} | {export_ms:.0} | {min:.3} / {median:.3} | {:.2} | {worst:.1e} |",
            m.sizes().1,
            min / native
        );
    }
}

/// Min and median milliseconds of each of `fs`, run in turns: 3 untimed
/// rounds, then `repeats` timed ones.
fn in_turns(fs: &[&dyn Fn()], repeats: usize) -> Vec<(f64, f64)> {
    for _ in 0..3 {
        fs.iter().for_each(|f| f());
    }
    let mut ts = vec![Vec::with_capacity(repeats); fs.len()];
    for _ in 0..repeats {
        for (f, t) in fs.iter().zip(&mut ts) {
            let t0 = Instant::now();
            f();
            t.push(t0.elapsed().as_secs_f64() * 1e3);
        }
    }
    ts.into_iter()
        .map(|mut t| {
            t.sort_by(f64::total_cmp);
            (t[0], t[repeats / 2])
        })
        .collect()
}

/// Load times (min / median ms, in turns): an unsigned file with `load`,
/// the same program signed with `load` and `load_trusted`, and `inspect`
/// of each (no code mapped; signed minus unsigned is what verifying costs).
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
    let opts = |signing_key| ExportOpts {
        cpu: portable.clone(),
        signing_key,
    };
    jitted.export_with(args, &plain, &opts(None)).unwrap();
    jitted.export_with(args, &signed, &opts(Some(key))).unwrap();
    let (plain, signed) = (
        std::fs::read(plain).unwrap(),
        std::fs::read(signed).unwrap(),
    );
    let (p, s, k) = (&plain, &signed, &trusted);
    let unsigned = move || drop(Exported::from_bytes(p).unwrap());
    let signed_load = move || drop(Exported::from_bytes(s).unwrap());
    let trusted_load = move || drop(Exported::from_bytes_trusted(s, k).unwrap());
    let inspect_plain = move || drop(Exported::inspect(p).unwrap());
    let inspect_signed = move || drop(Exported::inspect(s).unwrap());
    let times = in_turns(
        &[
            &unsigned,
            &signed_load,
            &trusted_load,
            &inspect_plain,
            &inspect_signed,
        ],
        repeats,
    );
    let cells: Vec<String> = times
        .iter()
        .map(|(min, median)| format!("{min:.3} / {median:.3}"))
        .collect();
    println!("| {name} | {} | {} |", signed.len(), cells.join(" | "));
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("--w1-source") {
        // W1's kernels' C, to compile by hand at each level.
        let c = rune::jit(anchors::w1)
            .lower(&anchors::w1_inputs())
            .compile();
        for (_, source) in c.kernel_sources() {
            println!("{source}");
        }
        return;
    }
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
