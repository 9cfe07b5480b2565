//! jit's persistent compilation cache across processes (issue 10): the
//! first process compiles and writes `<key>.so` + `<key>.meta` under
//! `$XDG_CACHE_HOME/tolk/rune_jit`; a second process with the same trace
//! loads them and compiles nothing (per `RUNE_JIT_DEBUG=1`), with identical
//! results; `JITCACHE=0` writes nothing; truncated and garbage entries are
//! recompiled; two processes compiling the same trace at once both succeed.
//!
//! Each test re-runs this test binary (`current_exe`) as a child process in
//! `CHILD_MODE`, filtered to the `child` test with `--exact`, with a fresh
//! `XDG_CACHE_HOME` of its own. The cache key covers the running executable,
//! which is why the children must be this very binary. The child prints the
//! bits of its jitted results and of the same function run eagerly.

use rune::prelude::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CHILD_ENV: &str = "RUNE_JIT_CACHE_TEST_CHILD";

/// The workload the children jit: fused elementwise kernels, a matmul and a
/// reduction (library steps), a capture, and the gradient of it all.
fn workload(p: &(Tensor, Tensor)) -> (Tensor, Tensor) {
    let c = Tensor::from_slice(&[0.5f32, -1.0, 2.0, 0.25], &[4]);
    let lossf = |(x, w): &(Tensor, Tensor)| {
        ((x.matmul(w) + &c).tanh() * 2.0 + x.sum_all())
            .exp()
            .mean_all()
    };
    let (l, (_, gw)) = rune::value_and_grad(lossf, p);
    (l, gw)
}

fn inputs() -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..24)
        .map(|i| ((i * 37 % 11) as f32 - 5.0) * 0.05)
        .collect();
    let w: Vec<f32> = (0..24).map(|i| ((i * 13 % 7) as f32 - 3.0) * 0.1).collect();
    (Tensor::from_vec(x, &[4, 6]), Tensor::from_vec(w, &[6, 4]))
}

fn bits_line(ts: &[Tensor]) -> String {
    ts.iter()
        .map(|t| {
            t.to_vec::<f32>()
                .iter()
                .map(|x| format!("{:08x}", x.to_bits()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// The child's body (a no-op unless run as a child).
#[test]
fn child() {
    match std::env::var(CHILD_ENV).as_deref() {
        Ok("workload") => {}
        Ok("no-compiler") => return no_compiler_child(),
        Ok("device") => return device_child(),
        Ok("pmap") => return pmap_child(),
        _ => return,
    }
    let f = rune::jit(workload);
    let p = inputs();
    let (l, g) = f.call(&p);
    // A second call in the same process is a memory hit.
    let (l2, g2) = f.call(&p);
    assert_eq!(bits_line(&[l.clone(), g.clone()]), bits_line(&[l2, g2]));
    let (le, ge) = workload(&p);
    // (libtest prints "test child ... " before these on the same line.)
    println!("RESULT {}", bits_line(&[l, g]));
    println!("EAGER {}", bits_line(&[le, ge]));
}

/// The workload jitted on the host device `CPU:1` (a device with memory of
/// its own), called twice.
fn device_child() {
    let f = rune::jit_with(
        workload,
        JitOpts {
            device: "CPU:1".into(),
            donate: false,
        },
    );
    let p = inputs();
    let (l, g) = f.call(&p);
    let (l2, g2) = f.call(&p);
    assert_eq!(bits_line(&[l.clone(), g.clone()]), bits_line(&[l2, g2]));
    let (le, ge) = workload(&p);
    println!("RESULT {}", bits_line(&[l, g]));
    println!("EAGER {}", bits_line(&[le, ge]));
}

/// An elementwise function under pmap on two devices.
fn pmap_child() {
    let f = rune::pmap(|x: &Tensor| (x.exp() * 2.0).tanh(), &["CPU:1", "CPU:2"]);
    let x = inputs().0;
    let y = f.call(&x);
    assert_eq!(
        bits_line(&[y]),
        bits_line(&[(x.exp() * 2.0).tanh()]),
        "elementwise work is bit-exact"
    );
    println!("PMAP-OK");
}

/// With `CC` pointing at no compiler: a `JitError` saying how to install one.
fn no_compiler_child() {
    let f = rune::jit(|x: &Tensor| x.exp() + 1.0);
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    let e = f
        .try_call(&x)
        .err()
        .expect("no C compiler must be a JitError");
    let m = e.message().to_string();
    let from_call = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        f.call(&x);
    }))
    .expect_err("call panics");
    let from_call = from_call
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert_eq!(from_call, m);
    // Eager still works, and a program with no kernels (a matmul alone is a
    // library step) needs no compiler.
    assert_eq!((x.exp() + 1.0).to_vec::<f32>().len(), 2);
    let g = rune::jit(|(a, b): &(Tensor, Tensor)| a.matmul(b));
    let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    assert_eq!(
        g.call(&(a.clone(), a.clone())).to_vec::<f32>(),
        a.matmul(&a).to_vec::<f32>()
    );
    println!("NOCC {}", m.replace('\n', " "));
}

/// A fresh, empty directory for one test's XDG_CACHE_HOME.
fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rune-jit-cache-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cache_dir(xdg: &Path) -> PathBuf {
    xdg.join("tolk").join("rune_jit")
}

fn child_command(xdg: &Path, extra_env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "workload")
        .env("XDG_CACHE_HOME", xdg)
        .env("RUNE_JIT_DEBUG", "1")
        .env_remove("JITCACHE");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c
}

/// What one child reported.
struct Run {
    result: String,
    eager: String,
    stderr: String,
}

impl Run {
    /// Its jit log lines.
    fn jit_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| l.starts_with("jit "))
            .collect()
    }
    fn compiled(&self) -> bool {
        self.jit_lines()
            .iter()
            .any(|l| l.contains("miss, compiled"))
    }
    fn hit_disk(&self) -> bool {
        self.jit_lines()
            .iter()
            .any(|l| l.contains("miss memory, hit disk"))
    }
}

fn parse(out: Output) -> Run {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success(),
        "child failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let field = |tag: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(tag).map(|i| &l[i + tag.len()..]))
            .unwrap_or_else(|| {
                panic!("child printed no {tag:?} line:\n{stdout}\nstderr:\n{stderr}")
            })
            .to_string()
    };
    let run = Run {
        result: field("RESULT "),
        eager: field("EAGER "),
        stderr,
    };
    // Each child calls twice: a miss (compiled or from disk), then a memory hit.
    let lines = run.jit_lines();
    assert_eq!(lines.len(), 2, "two calls, two log lines:\n{}", run.stderr);
    assert!(lines[1].contains("hit memory"), "{}", lines[1]);
    assert!(
        lines[0].contains("kernels")
            && lines[0].contains("steps")
            && lines[0].contains("transfers 0 B"),
        "{}",
        lines[0]
    );
    run
}

fn run_child(xdg: &Path, extra_env: &[(&str, &str)]) -> Run {
    parse(child_command(xdg, extra_env).output().unwrap())
}

/// The entries in the cache directory: (.so files, .meta files, others).
fn entries(xdg: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<PathBuf>) {
    let (mut so, mut meta, mut other) = (Vec::new(), Vec::new(), Vec::new());
    if let Ok(rd) = std::fs::read_dir(cache_dir(xdg)) {
        for e in rd {
            let p = e.unwrap().path();
            match p.extension().and_then(|x| x.to_str()) {
                Some("so") if !name(&p).starts_with("tmp-") => so.push(p),
                Some("meta") if !name(&p).starts_with("tmp-") => meta.push(p),
                _ => other.push(p),
            }
        }
    }
    (so, meta, other)
}

fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().to_string()
}

/// The jitted result of a process that does not use the persistent cache
/// (`JITCACHE=0`), computed once: "results are identical with and without
/// the cache" means bit for bit equal to this. It is itself checked against
/// eager (in this process) within `assert_near_eager`'s bound.
fn expected() -> String {
    static REF: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    REF.get_or_init(|| {
        let xdg = fresh_dir("reference");
        let r = run_child(&xdg, &[("JITCACHE", "0")]);
        let _ = std::fs::remove_dir_all(&xdg);
        let (l, g) = workload(&inputs());
        assert_near_eager(&r.result, &bits_line(&[l, g]));
        assert_near_eager(&r.result, &r.eager);
        r.result
    })
    .clone()
}

fn parse_bits(line: &str) -> Vec<f32> {
    line.split([';', ','])
        .map(|h| f32::from_bits(u32::from_str_radix(h, 16).unwrap()))
        .collect()
}

/// A jitted result (bits line) is within `64 * eps * (1 + |eager|)` of the
/// eager one, elementwise. Not bit for bit: the workload's reductions (the
/// mean, the sums in the matmul's backward pass) compile as kernels that
/// accumulate f32 in f64, eager accumulates in f32; over these 24- and
/// 16-term sums of O(1) values that is a few ulp (the elementwise parts and
/// the matmuls themselves are bit-exact), far below any real error.
#[track_caller]
fn assert_near_eager(jit: &str, eager: &str) {
    let (a, b) = (parse_bits(jit), parse_bits(eager));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let tol = 64.0 * f32::EPSILON * (1.0 + y.abs());
        assert!((x - y).abs() <= tol, "element {i}: jit {x} eager {y}");
    }
}

#[test]
fn the_persistent_cache_serves_a_second_process() {
    let xdg = fresh_dir("persist");
    let first = run_child(&xdg, &[]);
    assert!(
        first.compiled(),
        "the first process compiles:\n{}",
        first.stderr
    );
    assert!(!first.hit_disk());
    let (so, meta, other) = entries(&xdg);
    assert_eq!(so.len(), 1, "one .so: {so:?} {other:?}");
    assert_eq!(meta.len(), 1, "one .meta: {meta:?}");
    assert_eq!(
        so[0].file_stem(),
        meta[0].file_stem(),
        "<key>.so beside <key>.meta"
    );
    assert!(
        other.is_empty(),
        "no temporary files left behind: {other:?}"
    );

    let second = run_child(&xdg, &[]);
    assert!(
        second.hit_disk(),
        "the second process loads from disk:\n{}",
        second.stderr
    );
    assert!(
        !second.compiled(),
        "the second process compiles nothing:\n{}",
        second.stderr
    );
    assert_eq!(second.result, first.result, "identical results");
    // Identical to a process without the cache, and close to eager.
    assert_eq!(first.result, expected());
    assert_near_eager(&first.result, &first.eager);
    // The cache did not grow.
    let (so2, meta2, _) = entries(&xdg);
    assert_eq!((so2.len(), meta2.len()), (1, 1));
    let _ = std::fs::remove_dir_all(&xdg);
}

/// `RUNE_JIT_DEBUG=1`: a miss (compiled, or loaded from disk) reports how
/// long tracing, compiling or loading, and the first run took; a hit in
/// memory reports no times.
#[test]
fn a_miss_logs_its_trace_compile_and_run_times() {
    let xdg = fresh_dir("timings");
    let timed = |l: &str| {
        ["trace ", "compile ", "run "].iter().all(|w| {
            l.split(w).nth(1).is_some_and(|rest| {
                let num: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                num.parse::<f64>().is_ok() && rest[num.len()..].starts_with(" ms")
            })
        })
    };
    for run in [run_child(&xdg, &[]), run_child(&xdg, &[])] {
        let lines = run.jit_lines();
        let misses: Vec<&&str> = lines.iter().filter(|l| l.contains("miss")).collect();
        assert!(!misses.is_empty(), "{}", run.stderr);
        assert!(misses.iter().all(|l| timed(l)), "{}", run.stderr);
        let hits: Vec<&&str> = lines.iter().filter(|l| l.contains("hit memory")).collect();
        assert!(hits.iter().all(|l| !l.contains(" ms")), "{}", run.stderr);
    }
    let _ = std::fs::remove_dir_all(&xdg);
}

/// A process that loads its program from a warm cache does not run the C
/// compiler at all, not even `cc --version` for the cache key: the version
/// line is kept beside the cache, named by the compiler binary's path, size
/// and modification time. `CC` is a wrapper script that logs each run.
#[test]
fn a_warm_cache_runs_no_compiler() {
    let xdg = fresh_dir("ccver");
    let wrapper = xdg.join("cc-logged");
    let log = xdg.join("cc.log");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec cc \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cc = [("CC", wrapper.to_str().unwrap())];
    let first = run_child(&xdg, &cc);
    assert!(first.compiled(), "{}", first.stderr);
    let runs = std::fs::read_to_string(&log).unwrap();
    assert!(runs.lines().any(|l| l == "--version"), "{runs}");
    let stored: Vec<PathBuf> = std::fs::read_dir(xdg.join("tolk"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "version"))
        .collect();
    assert_eq!(stored.len(), 1, "one stored version: {stored:?}");
    let line = std::fs::read_to_string(&stored[0]).unwrap();
    assert!(
        line.starts_with(&format!("{}: ", wrapper.display())),
        "{line}"
    );
    let second = run_child(&xdg, &cc);
    assert!(second.hit_disk(), "{}", second.stderr);
    assert_eq!(second.result, first.result);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        runs,
        "the second process ran the compiler"
    );
    let _ = std::fs::remove_dir_all(&xdg);
}

#[test]
fn jitcache_0_writes_nothing() {
    let xdg = fresh_dir("disabled");
    for _ in 0..2 {
        let r = run_child(&xdg, &[("JITCACHE", "0")]);
        assert!(
            r.compiled(),
            "every process compiles with JITCACHE=0:\n{}",
            r.stderr
        );
        assert!(!r.hit_disk());
        assert_eq!(
            r.result,
            expected(),
            "results are identical without the cache"
        );
    }
    assert!(
        !xdg.join("tolk").exists(),
        "JITCACHE=0 created {}",
        xdg.join("tolk").display()
    );
    let _ = std::fs::remove_dir_all(&xdg);
}

/// Populates a cache, damages its entry with `damage(so, meta)`, and checks
/// that the next process recompiles (correctly, without crashing) and that
/// the one after it is served from the repaired entry.
fn damaged_entry_is_recompiled(tag: &str, damage: impl Fn(&Path, &Path)) {
    let xdg = fresh_dir(tag);
    let first = run_child(&xdg, &[]);
    assert!(first.compiled());
    let (so, meta, _) = entries(&xdg);
    assert_eq!((so.len(), meta.len()), (1, 1));
    damage(&so[0], &meta[0]);

    let second = run_child(&xdg, &[]);
    assert!(
        second.compiled(),
        "{tag}: a damaged entry is not trusted:\n{}",
        second.stderr
    );
    assert!(!second.hit_disk(), "{tag}:\n{}", second.stderr);
    assert_eq!(
        second.result, first.result,
        "{tag}: the recompiled program gives the same results"
    );
    assert_eq!(second.result, expected());

    let third = run_child(&xdg, &[]);
    assert!(
        third.hit_disk(),
        "{tag}: the recompiled entry replaced the damaged one:\n{}",
        third.stderr
    );
    assert_eq!(third.result, first.result);
    let _ = std::fs::remove_dir_all(&xdg);
}

fn truncate(p: &Path) {
    let bytes = std::fs::read(p).unwrap();
    assert!(bytes.len() > 2);
    std::fs::write(p, &bytes[..bytes.len() / 2]).unwrap();
}

fn garbage(p: &Path) {
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(p, bytes).unwrap();
}

#[test]
fn a_truncated_meta_is_recompiled() {
    damaged_entry_is_recompiled("trunc-meta", |_, meta| truncate(meta));
}

#[test]
fn a_truncated_shared_object_is_recompiled() {
    damaged_entry_is_recompiled("trunc-so", |so, _| truncate(so));
}

#[test]
fn a_garbage_meta_is_recompiled() {
    damaged_entry_is_recompiled("garbage-meta", |_, meta| garbage(meta));
}

#[test]
fn a_garbage_shared_object_is_recompiled() {
    damaged_entry_is_recompiled("garbage-so", |so, _| garbage(so));
}

#[test]
fn an_empty_or_missing_half_of_an_entry_is_recompiled() {
    damaged_entry_is_recompiled("empty-meta", |_, meta| std::fs::write(meta, b"").unwrap());
    damaged_entry_is_recompiled("missing-so", |so, _| std::fs::remove_file(so).unwrap());
}

#[test]
fn two_processes_compiling_the_same_trace_at_once_both_succeed() {
    let xdg = fresh_dir("concurrent");
    // Several rounds, each in a fresh directory, to give the race a chance.
    for round in 0..3 {
        let dir = xdg.join(format!("round{round}"));
        std::fs::create_dir_all(&dir).unwrap();
        let pa = child_command(&dir, &[])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pb = child_command(&dir, &[])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ra = parse(pa.wait_with_output().unwrap());
        let rb = parse(pb.wait_with_output().unwrap());
        assert_eq!(ra.result, expected(), "round {round}: process A");
        assert_eq!(rb.result, expected(), "round {round}: process B");
        // Whatever the interleaving, a third process succeeds. Its entry may
        // be one whose `.meta` describes the other writer's `.so` (the two
        // objects differ: each embeds its temporary source file's name), a
        // mismatch the reader detects and recompiles; after that, a valid
        // entry is in place and a fourth process loads it.
        let third = run_child(&dir, &[]);
        assert_eq!(third.result, expected(), "round {round}: a third process");
        let fourth = run_child(&dir, &[]);
        assert!(
            third.hit_disk() || fourth.hit_disk(),
            "round {round}:\n{}\n{}",
            third.stderr,
            fourth.stderr
        );
        assert_eq!(fourth.result, expected());
    }
    let _ = std::fs::remove_dir_all(&xdg);
}

#[test]
fn a_missing_c_compiler_is_a_jit_error_saying_how_to_install_one() {
    let xdg = fresh_dir("no-cc");
    let out = child_command(
        &xdg,
        &[("CC", "/nonexistent/bin/cc"), (CHILD_ENV, "no-compiler")],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    let m = stdout
        .lines()
        .find_map(|l| l.find("NOCC ").map(|i| &l[i + 5..]))
        .unwrap_or_else(|| panic!("no NOCC line:\n{stdout}\n{stderr}"));
    assert!(m.contains("/nonexistent/bin/cc"), "names the compiler: {m}");
    assert!(
        m.contains("install") && m.contains("CC"),
        "says how to install one: {m}"
    );
    let _ = std::fs::remove_dir_all(&xdg);
}

/// jit on a device other than the host's zero-copy one persists like jit on
/// the CPU: the second process loads the program from disk.
#[test]
fn jit_on_a_host_device_persists_across_processes() {
    let xdg = fresh_dir("device");
    let run = |_: usize| {
        let out = child_command(&xdg, &[])
            .env(CHILD_ENV, "device")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{stdout}\n{stderr}");
        let result = stdout
            .lines()
            .find_map(|l| l.find("RESULT ").map(|i| l[i + 7..].to_string()))
            .expect("a RESULT line");
        let lines: Vec<String> = stderr
            .lines()
            .filter(|l| l.starts_with("jit "))
            .map(String::from)
            .collect();
        assert_eq!(lines.len(), 2, "two calls, two log lines:\n{stderr}");
        assert!(lines[1].contains("hit memory"), "{}", lines[1]);
        (result, lines[0].clone())
    };
    let (first, log1) = run(1);
    assert!(log1.contains("miss, compiled"), "{log1}");
    assert!(
        !entries(&xdg).0.is_empty(),
        "the first process wrote an entry"
    );
    let (second, log2) = run(2);
    assert!(log2.contains("miss memory, hit disk"), "{log2}");
    assert_eq!(first, second, "identical results from the disk cache");
    let (l, g) = workload(&inputs());
    assert_near_eager(&first, &bits_line(&[l, g]));
    let _ = std::fs::remove_dir_all(&xdg);
}

/// "pmap compilations are never persisted."
#[test]
fn pmap_compilations_are_never_persisted() {
    let xdg = fresh_dir("pmap");
    let out = child_command(&xdg, &[])
        .env(CHILD_ENV, "pmap")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("PMAP-OK"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (so, meta, _) = entries(&xdg);
    assert!(
        so.is_empty() && meta.is_empty(),
        "pmap wrote {so:?} {meta:?}"
    );
    let _ = std::fs::remove_dir_all(&xdg);
}
