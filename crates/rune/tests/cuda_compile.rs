//! The CUDA dialect compiles: the CUDA kernels of every entry of nx's op
//! table (three input modes, as `jit_op_table.rs`) and of a few hundred
//! differential-fuzzer programs (`common/fuzz_programs.rs`, staged scans
//! included) are rendered with `rune::device_kernels`, compiled by NVRTC to
//! PTX (`compute_80`) and assembled by `ptxas` for sm_80 and sm_90, with
//! zero failures. No GPU is needed.
//!
//! Library steps the device runs as kernels of their own (windows, window
//! argmax, arg-reductions, running ops, gathers and scatter-adds by
//! computed indices) are compiled with the rest, and on their own by
//! `library_kernels_compile_with_nvrtc_and_ptxas`. Entries and programs
//! holding an operation the CUDA dialect does not render yet (products,
//! convolutions, sorts, top-k, threefry, ...) must be refused with a `JitError` naming the
//! device; they are counted apart.
//!
//! NVRTC and ptxas come from PyPI (`nvidia-cuda-nvrtc-cu12`,
//! `nvidia-cuda-nvcc-cu12`, as `.ci/run` installs them): `$TOLK_NVRTC` is
//! libnvrtc's path and `$TOLK_PTXAS` ptxas's, else the wheels under
//! `target/cuda-wheels` are used when present. Without them the test says
//! SKIPPED, loudly, and passes, unless `RUNE_TEST_REQUIRE` names `nvrtc`
//! (as `.ci/run`, which installs them, does): then it fails.
//!
//! Cost: NVRTC takes the kernels in batches (one program per batch, the
//! prelude parsed once per batch), batches compiled and assembled on every
//! core.

#![allow(dead_code)] // the fuzzer's programs are also interpreted by jit_fuzz.rs

#[path = "../../nx/tests/common/mod.rs"]
mod common;
#[path = "../../nx/tests/common/panics.rs"]
mod panics;
#[path = "../../nx/tests/common/skip.rs"]
mod skip;

use panics::panic_message;
use rune::prelude::*;

include!("common/fuzz_programs.rs");

use common::table::all_cases;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Kernels per NVRTC program.
const BATCH_KERNELS: usize = 400;

/// Fuzzer seeds rendered (the first of `jit_fuzz.rs`'s CI seeds).
const FUZZ_SEEDS: std::ops::Range<u64> = 1..401;

/// The toolchain: libnvrtc's path and ptxas's.
fn toolchain() -> Option<(PathBuf, PathBuf)> {
    let wheels = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/cuda-wheels/nvidia");
    let pick = |var: &str, fallback: PathBuf| -> Option<PathBuf> {
        match std::env::var(var) {
            Ok(p) if !p.is_empty() => Some(PathBuf::from(p)),
            _ => fallback.exists().then_some(fallback),
        }
    };
    let nvrtc = pick("TOLK_NVRTC", wheels.join("cuda_nvrtc/lib/libnvrtc.so.12"))?;
    let ptxas = pick("TOLK_PTXAS", wheels.join("cuda_nvcc/bin/ptxas"))?;
    Some((nvrtc, ptxas))
}

#[track_caller]
fn skipped(why: &str) {
    skip::skip(
        "nvrtc",
        &format!(
            "cuda_compile did not compile any CUDA kernel: {why}. Install the wheels (pip \
             install --target target/cuda-wheels nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12) \
             or set TOLK_NVRTC and TOLK_PTXAS, as .ci/run does"
        ),
    );
}

/// Distinct kernel functions to compile, each under a name of its own,
/// with the first program that rendered it (named in failures).
#[derive(Default)]
struct Functions {
    seen: std::collections::HashSet<String>,
    list: Vec<(String, String)>,
}

impl Functions {
    /// Adds the kernels of `p` and of its loops' bodies (without their
    /// prelude); returns how many there were. Functions equal up to their
    /// name are compiled once (the op table's modes and dtypes share many).
    fn add(&mut self, p: &tolk::cuda::CudaProgram, label: &str, prelude: &str) -> usize {
        let mut n = 0;
        for src in p.sources() {
            let body = src
                .strip_prefix(prelude)
                .expect("every unit starts with the prelude");
            for f in body.split("extern \"C\" __global__").skip(1) {
                n += 1;
                // The name: `... tk_k<digits>(`.
                let at = f.find("tk_k").expect("a kernel name");
                let end = at + f[at..].find('(').expect("a parameter list");
                let generic = format!("{}tk_kernel{}", &f[..at], &f[end..]);
                if self.seen.insert(generic.clone()) {
                    let name = format!("tk_u{}", self.list.len());
                    let text = format!("extern \"C\" __global__{}{name}{}", &f[..at], &f[end..]);
                    self.list.push((label.to_string(), text));
                }
            }
        }
        n
    }
}

struct Tally {
    kernels: usize,
    programs: usize,
    refused: usize,
    loops: usize,
}

/// Compiles `functions` in batches: NVRTC to PTX, then ptxas for sm_80
/// and sm_90. Returns the failures, each naming its batch's programs.
fn compile_all(functions: &Functions, ptxas: &Path, prelude: &str, tmp: &Path) -> Vec<String> {
    let batches: Vec<&[(String, String)]> = functions.list.chunks(BATCH_KERNELS).collect();
    let nvrtc = tolk::nvrtc::Nvrtc::get().expect("NVRTC loads");
    let opts = tolk::cuda::nvrtc_options("compute_80");
    let opts: Vec<&str> = opts.iter().map(String::as_str).collect();
    let failures = Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let b = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(batch) = batches.get(b) else { break };
                let mut src = String::from(prelude);
                for (_, f) in batch.iter() {
                    src.push('\n');
                    src.push_str(f);
                }
                let names = || {
                    let mut labels: Vec<&str> = batch.iter().map(|(l, _)| l.as_str()).collect();
                    labels.dedup();
                    labels.into_iter().take(8).collect::<Vec<_>>().join("; ")
                };
                let ptx = match nvrtc.compile_ptx(&src, &format!("batch{b}.cu"), &opts) {
                    Ok(p) => p,
                    Err(e) => {
                        let e: String = e.chars().take(3000).collect();
                        failures
                            .lock()
                            .unwrap()
                            .push(format!("NVRTC, batch {b} ({}...): {e}", names()));
                        continue;
                    }
                };
                let file = tmp.join(format!("batch{b}.ptx"));
                std::fs::write(&file, &ptx).unwrap();
                for arch in ["sm_80", "sm_90"] {
                    let out = std::process::Command::new(ptxas)
                        .arg(format!("-arch={arch}"))
                        .arg(&file)
                        .arg("-o")
                        .arg(tmp.join(format!("batch{b}_{arch}.cubin")))
                        .output()
                        .expect("ptxas runs");
                    if !out.status.success() {
                        failures.lock().unwrap().push(format!(
                            "ptxas {arch}, batch {b} ({}...): {}",
                            names(),
                            String::from_utf8_lossy(&out.stderr)
                                .chars()
                                .take(3000)
                                .collect::<String>()
                        ));
                    }
                }
            });
        }
    });
    failures.into_inner().unwrap()
}

/// A refusal must be a JitError naming the device.
fn check_refusal(label: &str, e: &rune::JitError, failures: &mut Vec<String>) {
    let m = e.message();
    if !(m.contains("\"CUDA\"") && m.contains("not supported")) {
        failures.push(format!("{label}: unexpected JitError: {m}"));
    }
}

/// The library steps the device runs as kernels of their own
/// (`tolk::codegen::cuda_library`): padded, overlapping and large max
/// windows in every real dtype and their gradients (window argmax,
/// scatter-add and gather by those indices), large sum windows, and
/// gathers and scatter-adds by computed indices (I32 and I64) with their
/// index checks: each program renders them, and they compile with NVRTC
/// and ptxas (sm_80, sm_90).
#[test]
fn library_kernels_compile_with_nvrtc_and_ptxas() {
    use nx::Padding::{Explicit, Same, Valid};
    let Some((nvrtc, ptxas)) = toolchain() else {
        skipped("no NVRTC or ptxas (TOLK_NVRTC, TOLK_PTXAS, target/cuda-wheels)");
        return;
    };
    std::env::set_var("TOLK_NVRTC", &nvrtc);
    if let Err(e) = tolk::nvrtc::Nvrtc::get() {
        skipped(&e);
        return;
    }
    let prelude = {
        use tolk::codegen::Dialect;
        tolk::codegen::cuda::Cuda::for_host().prelude()
    };
    let mut functions = Functions::default();
    let mut add = |label: &str, p: Result<tolk::cuda::CudaProgram, rune::JitError>| {
        let p = p.unwrap_or_else(|e| panic!("{label}: {}", e.message()));
        assert!(!p.library.is_empty(), "{label}: no library kernel");
        functions.add(&p, label, &prelude);
    };
    let x = Tensor::from_slice(
        &(0..2 * 3 * 9 * 7)
            .map(|i| (i % 11) as f32 - 5.0)
            .collect::<Vec<_>>(),
        &[2, 3, 9, 7],
    );
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
    ] {
        let xd = x.cast(dt);
        let f = |x: &Tensor| {
            (
                x.max_pool(&[3, 3], &[2, 2], Same),
                x.max_pool(&[3, 2], &[2, 1], Explicit(vec![(1, 2), (0, 1)])),
                x.max_pool(&[6, 6], &[1, 1], Valid),
            )
        };
        add(
            &format!("max pools of {dt}"),
            rune::device_kernels(f, &xd, "CUDA"),
        );
    }
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let xd = x.cast(dt);
        let f = |x: &Tensor| {
            let g = rune::grad(|x: &Tensor| x.max_pool(&[3, 3], &[2, 2], Same).sum_all(), x);
            let (_, t) = rune::jvp(|x: &Tensor| x.max_pool(&[3, 3], &[2, 2], Same), x, x);
            let a = x.avg_pool(&[6, 6], &[1, 2], Same);
            (g, t, a)
        };
        add(
            &format!("pool gradients of {dt}"),
            rune::device_kernels(f, &xd, "CUDA"),
        );
    }
    let table = Tensor::from_slice(&(0..24).map(|i| i as f32).collect::<Vec<_>>(), &[6, 4]);
    for it in [DType::I32, DType::I64] {
        let i = Tensor::from_slice(&[0i32, 11, 3, 6], &[4]).cast(it);
        let f = |(t, i): &(Tensor, Tensor)| {
            let j = i - 6.0;
            (
                t.take(&j, 0),
                t.index_add(0, &j, &t.take(&j, 0)),
                nx::segment_sum(&t.take(&j, 0), &(i % 3.0), 3),
            )
        };
        add(
            &format!("computed indices of {it}"),
            rune::device_kernels(f, &(table.clone(), i), "CUDA"),
        );
    }
    for dt in [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U8,
        DType::Bool,
    ] {
        let xd = x.cast(dt);
        let f = |x: &Tensor| {
            let mut outs = vec![x.argmax(2, false), x.argmin(3, true)];
            if dt != DType::Bool {
                outs.extend([x.cumsum(2), x.cumprod(3)]);
            }
            outs
        };
        add(
            &format!("arg-reductions and running ops of {dt}"),
            rune::device_kernels(f, &xd, "CUDA"),
        );
    }
    let tmp = std::env::temp_dir().join(format!("tolk-cuda-library-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let failures = compile_all(&functions, &ptxas, &prelude, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "library kernels: {} distinct functions compiled",
        functions.list.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn cuda_kernels_of_the_op_table_and_fuzzer_programs_compile_with_nvrtc_and_ptxas() {
    let Some((nvrtc, ptxas)) = toolchain() else {
        skipped("no NVRTC or ptxas (TOLK_NVRTC, TOLK_PTXAS, target/cuda-wheels)");
        return;
    };
    std::env::set_var("TOLK_NVRTC", &nvrtc);
    if let Err(e) = tolk::nvrtc::Nvrtc::get() {
        skipped(&e);
        return;
    }
    let start = std::time::Instant::now();
    let prelude = {
        use tolk::codegen::Dialect;
        tolk::codegen::cuda::Cuda::for_host().prelude()
    };
    let mut failures = Vec::new();

    // The op table, in jit_op_table's three modes.
    let mut table = Tally {
        kernels: 0,
        programs: 0,
        refused: 0,
        loops: 0,
    };
    let mut functions = Functions::default();
    let cases = all_cases();
    for mode in ["args", "strided args", "captured"] {
        for case in &cases {
            if case.op == "contiguous" || (mode != "args" && case.inputs.is_empty()) {
                continue;
            }
            let n = case.inputs.len();
            let mut args = Vec::new();
            let mut caps = Vec::new();
            for (i, x) in case.inputs.iter().enumerate() {
                match mode {
                    "args" => args.push(x.clone()),
                    "strided args" => args.push(common::strided_copy(x)),
                    _ if n >= 2 && i == n - 1 => args.push(x.clone()),
                    _ => caps.push(common::strided_copy(x)),
                }
            }
            let f = |xs: &Vec<Tensor>| {
                let (mut a, mut c) = (xs.iter(), caps.iter());
                let ins: Vec<Tensor> = case
                    .inputs
                    .iter()
                    .enumerate()
                    .map(|(i, _)| {
                        let captured = mode == "captured" && !(n >= 2 && i == n - 1);
                        if captured { c.next() } else { a.next() }.unwrap().clone()
                    })
                    .collect();
                (case.run)(&ins)
            };
            let label = format!("{} ({mode})", case.name);
            match rune::device_kernels(f, &args, "CUDA") {
                Ok(p) => {
                    table.programs += 1;
                    table.kernels += functions.add(&p, &label, &prelude);
                }
                Err(e) if e.message().contains("\"CUDA\"") => {
                    table.refused += 1;
                    check_refusal(&label, &e, &mut failures);
                }
                // Refused by jit on every device (an assignment into a view).
                Err(e) => assert!(case.op == "assign", "{label}: {}", e.message()),
            }
        }
    }

    // Fuzzer programs (staged scans among them).
    let mut fuzz = Tally {
        kernels: 0,
        programs: 0,
        refused: 0,
        loops: 0,
    };
    let mut not_staged = 0;
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for seed in FUZZ_SEEDS {
        let prog = generate(seed);
        // Eager rejects some generated programs; so does jit_fuzz.
        let eager_ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let (args, caps) = (
                prog.inputs
                    .iter()
                    .filter(|i| !i.captured)
                    .map(make_input)
                    .collect::<Vec<_>>(),
                prog.inputs
                    .iter()
                    .filter(|i| i.captured)
                    .map(make_input)
                    .collect::<Vec<_>>(),
            );
            run(&prog, &args, &caps);
        }))
        .is_ok();
        if !eager_ok {
            continue;
        }
        let mut args = Vec::new();
        let mut caps = Vec::new();
        for i in &prog.inputs {
            if i.captured {
                caps.push(make_input(i));
            } else {
                args.push(make_input(i));
            }
        }
        let rendered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rune::device_kernels(|a: &Vec<Tensor>| run(&prog, a, &caps), &args, "CUDA")
        }));
        let label = format!("fuzzer seed {seed}");
        match rendered {
            Ok(Ok(p)) => {
                fuzz.programs += 1;
                fuzz.kernels += functions.add(&p, &label, &prelude);
                fuzz.loops += p.bodies.len();
            }
            Ok(Err(e)) if e.message().contains("\"CUDA\"") => {
                fuzz.refused += 1;
                check_refusal(&label, &e, &mut failures);
            }
            // One jit refuses on every device (a JitError at trace time).
            Ok(Err(_)) => not_staged += 1,
            // A panic while staging or rendering a program eager runs.
            Err(p) => {
                let m = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{label}: rendering panicked: {m}"));
            }
        }
    }
    std::panic::set_hook(hook);
    let rendered_secs = start.elapsed().as_secs_f64();

    let tmp = std::env::temp_dir().join(format!("tolk-cuda-compile-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    failures.extend(compile_all(&functions, &ptxas, &prelude, &tmp));
    let _ = std::fs::remove_dir_all(&tmp);
    println!(
        "op table: {} kernels from {} (entry, mode) pairs, {} refused on CUDA; \
         fuzzer: {} kernels from {} programs ({} with staged loops), {} refused on CUDA, \
         {} refused by jit on every device; {} distinct kernels; rendered in {rendered_secs:.1} s, NVRTC + ptxas \
         (sm_80, sm_90) in {:.1} s; {} failures",
        table.kernels,
        table.programs,
        table.refused,
        fuzz.kernels,
        fuzz.programs,
        fuzz.loops,
        fuzz.refused,
        not_staged,
        functions.list.len(),
        start.elapsed().as_secs_f64() - rendered_secs,
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures (first 10):\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n\n")
    );
    assert!(
        table.kernels > 3000,
        "only {} op-table kernels",
        table.kernels
    );
    assert!(
        fuzz.programs >= 150,
        "only {} fuzzer programs",
        fuzz.programs
    );
    assert!(fuzz.loops >= 10, "only {} staged loops", fuzz.loops);
}

#[test]
fn jit_on_cuda_without_a_driver_is_the_unavailable_device_panic_naming_what_is_missing() {
    let jit_on_cuda = || {
        rune::jit_with(
            |x: &Tensor| x * 2.0,
            rune::JitOpts {
                device: "CUDA".into(),
                donate: false,
            },
        );
    };
    match tolk::cuda_probe::probe() {
        // This machine (CI): what is missing is named.
        Err(missing) => {
            let m = panic_message(jit_on_cuda);
            assert!(
                m.contains("\"CUDA\"") && m.contains("is not available"),
                "{m}"
            );
            assert!(missing.starts_with("no CUDA") || missing.starts_with("no NVRTC"));
            assert!(
                m.contains(&missing),
                "names what is missing ({missing}): {m}"
            );
        }
        // A GPU machine: the device opens (tests/cuda_emulated.rs runs
        // programs on it under bench/gpu_check.sh).
        Ok(_) => jit_on_cuda(),
    }
    let m = panic_message(|| {
        rune::pmap(|x: &Tensor| x * 2.0, &["CUDA:0"]);
    });
    assert!(
        m.contains("\"CUDA:0\"") && m.contains("is not available"),
        "{m}"
    );
}

#[test]
fn operations_not_on_cuda_yet_are_a_jit_error_naming_them_and_the_device() {
    let a = Tensor::from_slice(&[1.0f32, -2.0, 3.0, 0.5, 4.0, -1.0], &[2, 3]);
    let refused = |e: Result<tolk::cuda::CudaProgram, rune::JitError>| -> String {
        e.err().expect("refused").message().to_string()
    };
    let m = refused(rune::device_kernels(
        |x: &Tensor| x.matmul(&x.transpose()),
        &a,
        "CUDA",
    ));
    assert!(
        m.contains("dot_general") && m.contains("device \"CUDA\""),
        "{m}"
    );
    let m = refused(rune::device_kernels(
        |x: &Tensor| x.argsort(1, false),
        &a,
        "CUDA:1",
    ));
    assert!(m.contains("argsort") && m.contains("\"CUDA\""), "{m}");
    let m = refused(rune::device_kernels(|x: &Tensor| x.top_k(2).1, &a, "CUDA"));
    assert!(m.contains("top_k") && m.contains("\"CUDA\""), "{m}");
    // Arg-reductions and running ops are kernels of their own.
    let p = rune::device_kernels(|x: &Tensor| (x.argmax(1, false), x.cumsum(1)), &a, "CUDA")
        .expect("renders");
    assert_eq!(p.library.len(), 2);
    // Elementwise work, reductions (of an input too) and views render.
    let p = rune::device_kernels(
        |x: &Tensor| {
            (
                x.exp() * x,
                x.sum(&[1], false),
                x.transpose().max(&[0], true),
            )
        },
        &a,
        "CUDA",
    )
    .expect("renders");
    assert!(p.num_kernels() >= 2, "{}", p.num_kernels());
    assert!(p.source.contains("__global__"));
    // A device without a renderer of its own.
    let m = panic_message(|| {
        rune::device_kernels(|x: &Tensor| x * 2.0, &a, "CPU").ok();
    });
    assert!(m.contains("no renderer"), "{m}");
}
