//! Timing (and JSON rows) shared by the benchmark examples (`bench_autodiff`, `bench_jit`, `bench_generality`, `bench_rng`, ...),
//! as the anchors prescribe: untimed warmup calls, then individually timed
//! calls; min and median reported.

use std::hint::black_box;
use std::time::Instant;

/// Per-call seconds: `warmup` untimed calls, then `repeats` timed ones; (min, median).
pub fn bench<T>(mut f: impl FnMut() -> T, warmup: usize, repeats: usize) -> (f64, f64) {
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

/// Prints one timing row as the JSON line the `bench/*.py` scripts read
/// (`min`/`median` in seconds, scaled to `unit`: "ms" or "us").
#[allow(dead_code)] // bench_rng prints its own rows
pub fn emit(id: &str, variant: &str, unit: &str, (min, median): (f64, f64)) {
    let scale = match unit {
        "ms" => 1e3,
        "us" => 1e6,
        _ => 1.0,
    };
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"{variant}\", \"unit\": \"{unit}\", \"min\": {}, \"median\": {}, \"threads\": {}}}",
        min * scale,
        median * scale,
        kernel_threads()
    );
}

/// `nx::num_threads()`, computed the same way (`NX_NUM_THREADS`, else the
/// cores): this file is shared by nx's, rune's and a user crate's examples,
/// which do not all see nx under one path.
fn kernel_threads() -> usize {
    std::env::var("NX_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `--only ID` on the command line: whether row `id` runs (all run without
/// `--only`; for profiling one row).
#[allow(dead_code)] // the nx benches' row filter
pub fn wanted(id: &str) -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--only") {
        Some(i) => args.get(i + 1).is_some_and(|w| w == id),
        None => true,
    }
}

/// `s` as a JSON string literal (quotes, backslashes and control
/// characters escaped), for error rows.
#[allow(dead_code)] // used by the benches that print error rows
pub fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}
