//! Exported programs (issue 47): `jit(f).export(&args, path)` writes one
//! file; `Exported::load(path)?.call(&args)?` runs it with no tracing and
//! no C compiler. Round trips are compared with eager execution of the same
//! function (within 4 ulps: fused reductions add in another order than
//! eager's; elementwise kernels are exact) and, bit for bit, with the same
//! function under `jit` in this process; every damaged or mismatched file
//! or call is a named `Err`.
//!
//! `a_child_with_no_compiler_and_an_empty_cache_runs_the_export` re-runs
//! this test binary (`current_exe`) with `CC` and `PATH` pointing at an
//! empty directory and `XDG_CACHE_HOME` at another: the child
//! (`child_loads_without_a_compiler`, a no-op unless `CHILD_ENV` is set)
//! shows that jit cannot compile there, then loads and runs the export.

#[path = "common/bits.rs"]
mod bits;
#[path = "../../nx/tests/common/skip.rs"]
mod skip;

use bits::same_bits;
use rune::prelude::*;
use rune::{ExportError, Exported};
use std::path::{Path, PathBuf};
use tolk::export::bytes::{Reader, Writer};

const CHILD_ENV: &str = "RUNE_EXPORT_TEST_CHILD";

/// A fresh directory under the system's temporary directory.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rune_export_{tag}_{}_{}",
        std::process::id(),
        tolk::cache::unique_suffix()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Deterministic values in about [-1, 1).
fn data(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let v: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape)
}

/// `got` is within 4 ulps (relative to each element's magnitude, and at
/// least 1e-6 absolute) of `want`, element by element: what the compiled
/// program's fused reductions give beside eager's.
fn assert_close(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: number of outputs");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        bits::same_type(g, w).unwrap_or_else(|e| panic!("{what}: output {i}: {e}"));
        if !g.dtype().is_float() {
            same_bits(g, w).unwrap_or_else(|e| panic!("{what}: output {i}: {e}"));
            continue;
        }
        let (g64, w64) = (
            g.cast(DType::F64).to_vec::<f64>(),
            w.cast(DType::F64).to_vec::<f64>(),
        );
        for (j, (a, b)) in g64.iter().zip(&w64).enumerate() {
            let tol = (4.0 * f32::EPSILON as f64 * b.abs()).max(1e-6);
            assert!(
                (a - b).abs() <= tol || (a.is_nan() && b.is_nan()),
                "{what}: output {i} element {j}: exported {a}, eager {b}"
            );
        }
    }
}

/// Exports `f` at `args` and loads it back; checks the loaded program's
/// outputs at `args` against `jit(f)`'s bits and eager `f`'s values.
fn round_trip<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, args: &P, tag: &str) -> Exported {
    let dir = temp_dir(tag);
    let path = dir.join(format!("{tag}.rune"));
    let jitted = rune::jit(&f);
    jitted.export(args, &path).unwrap();
    let m = Exported::load(&path).unwrap();
    let got = m.call(args).unwrap();
    assert_same(
        &got,
        &jitted.call(args).leaves(),
        &format!("{tag} against jit"),
    );
    assert_close(&got, &f(args).leaves(), &format!("{tag} against eager"));
    m
}

fn assert_same(got: &[Tensor], want: &[Tensor], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: number of outputs");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        same_bits(g, w).unwrap_or_else(|e| panic!("{what}: output {i}: {e}"));
    }
}

#[derive(Ptree, Clone)]
struct Mlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

fn mlp_params() -> Mlp {
    Mlp {
        w1: data(&[16, 32], 1) * 0.3,
        b1: data(&[32], 2) * 0.1,
        w2: data(&[32, 10], 3) * 0.3,
        b2: data(&[10], 4) * 0.1,
    }
}

fn mlp_forward(p: &Mlp, x: &Tensor) -> Tensor {
    let h = (x.matmul(&p.w1) + &p.b1).tanh();
    (h.matmul(&p.w2) + &p.b2).log_softmax(-1)
}

#[test]
fn an_mlp_forward_round_trips_equal_to_eager() {
    let f = |a: &(Mlp, Tensor)| mlp_forward(&a.0, &a.1);
    let args = (mlp_params(), data(&[8, 16], 5));
    let m = round_trip(f, &args, "mlp");
    // New values of the same signature.
    let other = (mlp_params().map_leaves(&mut |t| t * 0.5), data(&[8, 16], 6));
    assert_close(&m.call(&other).unwrap(), &[f(&other)], "mlp, other values");
    assert_eq!(m.inputs().len(), 5);
    assert_eq!(m.inputs()[0].path, "0.w1");
    assert_eq!(m.outputs()[0].shape, vec![8, 10]);
}

#[test]
fn a_program_with_a_staged_scan_round_trips_its_loop_body() {
    let w = data(&[6, 6], 7) * 0.4;
    let f = move |a: &(Tensor, Tensor)| {
        rune::scan(
            |c: &Tensor, x: &Tensor| {
                let next = (c.matmul(&w) * 0.9 + x).tanh();
                (next.clone(), c.sin() * x)
            },
            &a.0,
            &a.1,
        )
    };
    let args = (data(&[6], 8), data(&[12, 6], 9));
    let m = round_trip(&f, &args, "scan");
    assert!(
        m.graph().to_string().contains("scan"),
        "the exported program keeps its loop:\n{}",
        m.graph()
    );
}

#[test]
fn a_program_with_captured_constants_round_trips_them() {
    // Constants of several dtypes, one strided (a transposed view).
    let table = data(&[10, 4], 10);
    let wt = data(&[4, 4], 11).transpose();
    let idx = Tensor::from_slice(&[3i32, 0, 9, 9, 1], &[5]);
    let scale = Tensor::from_slice(&[2.0f64], &[1]);
    let f = |x: &Tensor| {
        let rows = table.take(&idx, 0); // [5, 4]
        let y = (rows.matmul(&wt) + x).exp();
        let s = scale.cast(DType::F32);
        (y * s.reshape(&[1, 1]).broadcast_to(&[5, 4])).sum(&[1], false)
    };
    let x = data(&[5, 4], 12);
    let m = round_trip(f, &x, "consts");
    assert_eq!(
        m.inputs().len(),
        1,
        "captured tensors are constants, not inputs"
    );
}

#[derive(Ptree, Clone)]
struct Batch {
    images: Tensor,
    labels: Tensor,
    extra: Vec<Tensor>,
}

#[test]
fn pytree_inputs_and_outputs_round_trip_with_their_structure() {
    let f = |b: &Batch| {
        let logits = b.images.sum(&[1], false);
        let hit = logits.greater(&b.labels.cast(DType::F32));
        let mut by_name = std::collections::BTreeMap::new();
        by_name.insert("mean".to_string(), b.extra[0].mean_all());
        by_name.insert("max".to_string(), b.extra[1].max(&[0], false));
        (logits, (hit, by_name))
    };
    let batch = Batch {
        images: data(&[4, 3], 13),
        labels: Tensor::from_slice(&[0i32, 1, -1, 2], &[4]),
        extra: vec![data(&[7], 14), data(&[2, 5], 15)],
    };
    let m = round_trip(f, &batch, "tree");
    let paths: Vec<&str> = m.inputs().iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["images", "labels", "extra.0", "extra.1"]);
    let out_paths: Vec<&str> = m.outputs().iter().map(|s| s.path.as_str()).collect();
    assert_eq!(out_paths, ["0", "1.0", "1.1.max", "1.1.mean"]);
    let want = f(&batch);
    let got = m.call_as(&batch, &want).unwrap();
    assert_close(&got.leaves(), &want.leaves(), "tree");
    assert_eq!(got.1 .1.keys().collect::<Vec<_>>(), ["max", "mean"]);
    // The wrong output template is a named error.
    let e = m.call_as(&batch, &data(&[1], 0)).err().unwrap();
    assert!(
        matches!(
            e,
            ExportError::Structure {
                which: "output",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_jit_on_a_host_device_exports_the_host_code() {
    let f = |x: &Tensor| (x * 3.0).exp();
    let x = data(&[5], 16);
    let path = temp_dir("device").join("device.rune");
    let g = rune::jit_with(
        f,
        rune::JitOpts {
            device: "CPU:1".into(),
            donate: false,
        },
    );
    g.export(&x, &path).unwrap();
    let m = Exported::load(&path).unwrap();
    assert_same(&m.call(&x).unwrap(), &[f(&x)], "CPU:1");
}

#[test]
fn a_function_that_cannot_stage_is_a_named_error() {
    let f = |x: &Tensor| {
        if x.sum_all().item::<f32>() > 0.0 {
            x.clone()
        } else {
            -x
        }
    };
    let path = temp_dir("refused").join("refused.rune");
    let e = rune::jit(f).export(&data(&[3], 1), &path).err().unwrap();
    assert!(matches!(e, ExportError::Jit(_)), "{e}");
    assert!(!path.exists());
}

#[test]
fn writebacks_are_replayed_into_the_callers_tensors() {
    // An optimizer-style update in place: `v` and `w` are assigned.
    let f = |p: &(Tensor, Tensor, Tensor)| {
        let (w, v, g) = p;
        v.assign(&(v * 0.9 + g));
        w.assign(&(w - v * 0.1));
        (w * w).sum_all()
    };
    let make = || (data(&[6], 20), data(&[6], 21), data(&[6], 22));
    let path = temp_dir("writeback").join("writeback.rune");
    rune::jit(f).export(&make(), &path).unwrap();
    let m = Exported::load(&path).unwrap();
    let (exported_args, eager_args) = (make(), make());
    for _ in 0..3 {
        let got = m.call(&exported_args).unwrap();
        let want = f(&eager_args);
        assert_close(&got, &[want], "writeback output");
    }
    assert_close(
        &exported_args.leaves(),
        &eager_args.leaves(),
        "the assigned inputs",
    );
}

#[test]
fn an_index_out_of_range_while_running_is_a_named_error() {
    let table = data(&[5, 3], 23);
    let f = |i: &Tensor| table.take(i, 0) * 2.0;
    let i = Tensor::from_slice(&[0i32, 4, -1], &[3]);
    let path = temp_dir("run").join("run.rune");
    rune::jit(f).export(&i, &path).unwrap();
    let m = Exported::load(&path).unwrap();
    assert_same(&m.call(&i).unwrap(), &[f(&i)], "in range");
    let bad = Tensor::from_slice(&[0i32, 5, 1], &[3]);
    let e = m.call(&bad).err().unwrap();
    assert!(
        matches!(&e, ExportError::Run { message } if message.contains("out of")),
        "{e}"
    );
    // The program still runs after the error.
    assert_same(&m.call(&i).unwrap(), &[f(&i)], "after the error");
}

/// A small export and its bytes, for the damage tests.
fn small_export(tag: &str) -> (Vec<u8>, Tensor, Tensor) {
    let f = |x: &Tensor| (x.exp() + 1.0).log();
    let x = data(&[6], 17);
    let path = temp_dir(tag).join("small.rune");
    rune::jit(f).export(&x, &path).unwrap();
    let want = f(&x);
    (std::fs::read(&path).unwrap(), x, want)
}

#[test]
fn calls_with_another_signature_are_named_errors() {
    let (bytes, x, want) = small_export("signature");
    let m = Exported::from_bytes(&bytes).unwrap();
    assert_same(&m.call(&x).unwrap(), &[want], "small");
    let e = m.call(&data(&[7], 1)).err().unwrap();
    assert!(
        matches!(&e, ExportError::InputMismatch { index: 0, found, .. } if found.shape == [7]),
        "{e}"
    );
    let e = m.call(&x.cast(DType::F64)).err().unwrap();
    assert!(
        matches!(&e, ExportError::InputMismatch { found, .. } if found.dtype == DType::F64),
        "{e}"
    );
    let e = m.call_leaves(&[x.clone(), x.clone()]).err().unwrap();
    assert_eq!(
        e,
        ExportError::InputCount {
            expected: 1,
            found: 2
        }
    );
    let e = m.call(&vec![x.clone()]).err().unwrap();
    assert!(
        matches!(e, ExportError::Structure { which: "input", .. }),
        "{e}"
    );
    // Under a transformation: refused, not traced through.
    let e = std::cell::RefCell::new(None);
    let _ = rune::grad(
        |x: &Tensor| {
            *e.borrow_mut() = m.call(x).err();
            x.sum_all()
        },
        &x,
    );
    assert_eq!(e.into_inner(), Some(ExportError::UnderTransformation));
    // Every message is a sentence naming what differs.
    let msg = ExportError::InputMismatch {
        index: 0,
        expected: m.inputs()[0].clone(),
        found: rune::LeafSpec {
            path: String::new(),
            dtype: DType::F64,
            shape: vec![6],
        },
    }
    .to_string();
    assert!(msg.contains("f64[6]") && msg.contains("f32[6]"), "{msg}");
}

#[test]
fn every_truncation_is_a_named_error() {
    let (bytes, ..) = small_export("truncate");
    for n in 0..bytes.len() {
        match Exported::from_bytes(&bytes[..n]) {
            Err(ExportError::Truncated { found, .. }) => assert_eq!(found, n as u64),
            Err(e) => panic!("truncated to {n} of {} bytes: {e}", bytes.len()),
            Ok(_) => panic!("truncated to {n} of {} bytes: loaded", bytes.len()),
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        Exported::from_bytes(&longer),
        Err(ExportError::Corrupted { .. })
    ));
}

#[test]
fn every_flipped_byte_is_a_named_error() {
    let (bytes, ..) = small_export("flip");
    for i in 0..bytes.len() {
        for mask in [0x01u8, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= mask;
            match Exported::from_bytes(&b) {
                Err(
                    ExportError::NotAnExport
                    | ExportError::FormatVersion { .. }
                    | ExportError::Truncated { .. }
                    | ExportError::Corrupted { .. },
                ) => {}
                Err(e) => panic!("byte {i} ^ {mask:#x}: unexpected error {e}"),
                Ok(_) => panic!("byte {i} ^ {mask:#x}: loaded"),
            }
        }
    }
}

/// The header's length: magic, version, body length, signature length.
const HEADER: usize = 24;

/// `bytes` (an unsigned file) with its body rewritten by `edit` (given a
/// reader at the body's start and a writer for the new body) and a valid
/// checksum: what a file written by another host or build looks like.
fn rewrite_body(bytes: &[u8], edit: impl Fn(&mut Reader, &mut Writer)) -> Vec<u8> {
    assert_eq!(
        &bytes[20..24],
        &[0; 4],
        "rewrite_body takes an unsigned file"
    );
    let body = &bytes[HEADER..bytes.len() - 4];
    let mut r = Reader::new(body);
    let mut w = Writer::default();
    edit(&mut r, &mut w);
    let rest = r.take(r.remaining(), "rest").unwrap();
    w.bytes.extend_from_slice(rest);
    let mut out = bytes[..12].to_vec();
    out.extend_from_slice(&(w.bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    out.extend_from_slice(&w.bytes);
    let sum = crc32fast::hash(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// One CPU target's record in a body: name, features, compiler.
struct TargetRecord {
    name: String,
    features: Vec<String>,
    compiler: String,
}

/// `bytes` (unsigned) with its targets' records replaced by `edit`'s
/// (the code stays: the records are what the loader chooses by).
fn rewrite_targets(bytes: &[u8], edit: impl Fn(&mut Vec<TargetRecord>)) -> Vec<u8> {
    rewrite_body(bytes, |r, w| {
        w.str(r.str("library").unwrap());
        w.str(r.str("platform").unwrap());
        let n = r.usize("targets").unwrap();
        let mut targets: Vec<TargetRecord> = (0..n)
            .map(|_| TargetRecord {
                name: r.str("name").unwrap().to_string(),
                features: (0..r.usize("n").unwrap())
                    .map(|_| r.str("feature").unwrap().to_string())
                    .collect(),
                compiler: r.str("compiler").unwrap().to_string(),
            })
            .collect();
        edit(&mut targets);
        w.usize(targets.len());
        for t in &targets {
            w.str(&t.name);
            w.usize(t.features.len());
            for f in &t.features {
                w.str(f);
            }
            w.str(&t.compiler);
        }
    })
}

#[test]
fn another_version_platform_or_missing_cpu_feature_is_a_named_error() {
    let (bytes, x, want) = small_export("compat");
    // The rewriting itself keeps a loadable file.
    let same = rewrite_body(&bytes, |_, _| {});
    assert_same(
        &Exported::from_bytes(&same).unwrap().call(&x).unwrap(),
        &[want],
        "rewritten",
    );

    for version in [1u32, 3] {
        let mut other = bytes.clone();
        other[8..12].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            Exported::from_bytes(&other).err().unwrap(),
            ExportError::FormatVersion {
                found: version,
                supported: rune::export::FORMAT_VERSION
            }
        );
    }

    let other_platform = rewrite_body(&bytes, |r, w| {
        w.str(r.str("library").unwrap());
        r.str("platform").unwrap();
        w.str("riscv64-plan9");
    });
    assert!(matches!(
        Exported::from_bytes(&other_platform),
        Err(ExportError::WrongPlatform { file, .. }) if file == "riscv64-plan9"
    ));

    let more_features = rewrite_targets(&bytes, |targets| {
        for t in targets.iter_mut() {
            t.features.push("avx1024-imaginary".into());
        }
    });
    assert_eq!(
        Exported::from_bytes(&more_features).err().unwrap(),
        ExportError::MissingCpuFeatures {
            target: rune::export::CpuTarget::portable().name().into(),
            missing: vec!["avx1024-imaginary".into()]
        }
    );

    let path = temp_dir("io").join("missing.rune");
    assert!(matches!(Exported::load(&path), Err(ExportError::Io { .. })));
    let garbage = temp_dir("garbage").join("garbage.rune");
    std::fs::write(&garbage, b"not an export at all").unwrap();
    assert_eq!(
        Exported::load(&garbage).err().unwrap(),
        ExportError::NotAnExport
    );
}

#[test]
fn lowered_prints_the_program_and_compiled_reports_sources_and_costs() {
    let f = |a: &(Tensor, Tensor)| (a.0.matmul(&a.1).tanh() * 2.0).sum(&[1], false);
    let args = (data(&[8, 16], 1), data(&[16, 4], 2));
    let lowered = rune::jit(f).lower(&args);
    let text = lowered.to_string();
    for op in ["dot_general", "tanh", "reduce_sum"] {
        assert!(text.contains(op), "{op} in\n{text}");
    }
    let c = lowered.compile();
    assert!(!c.kernel_sources().is_empty());
    assert!(c
        .kernel_sources()
        .iter()
        .all(|(_, src)| src.contains("tk_k")));
    let cost = c.cost_analysis();
    // The product: 2·8·16·4; the scale and the sum: one each per element
    // of the [8, 4] product; tanh a transcendental per element.
    assert_eq!(cost.flops, 2 * 8 * 16 * 4 + 8 * 4 + 8 * 4);
    assert_eq!(cost.transcendentals, 8 * 4);
    // The product reads both operands and writes [8, 4]; the fused kernel
    // reads that and writes [8].
    assert_eq!(
        cost.bytes_accessed,
        4 * (8 * 16 + 16 * 4 + 8 * 4) + 4 * (8 * 4 + 8)
    );
    let jitted = rune::jit(f).call(&args);
    assert_same(&[c.call(&args).unwrap()], &[jitted.clone()], "compiled");
    assert_close(
        &[c.call(&args).unwrap()],
        &[f(&args)],
        "compiled against eager",
    );
    let path = temp_dir("compiled").join("compiled.rune");
    c.export(&path).unwrap();
    assert_same(
        &Exported::load(&path).unwrap().call(&args).unwrap(),
        &[jitted],
        "compiled export",
    );
}

/// The function the child runs: `exp` has a guarded fast form whose exact
/// form (for NaN and inputs above 68.9) the export carries prebuilt.
fn child_function(x: &Tensor) -> Tensor {
    (x.exp() * 0.5).sum(&[1], false)
}

fn child_input() -> Tensor {
    let mut v: Vec<f32> = (0..24).map(|i| i as f32 * 0.37 - 4.0).collect();
    v[5] = 80.0; // beyond the fast form's range: the exact form runs
    v[11] = f32::NAN;
    Tensor::from_vec(v, &[4, 6])
}

#[test]
fn a_child_with_no_compiler_and_an_empty_cache_runs_the_export() {
    let dir = temp_dir("child");
    let path = dir.join("child.rune");
    rune::jit(child_function)
        .export(&child_input(), &path)
        .unwrap();
    // The file carries the exact forms (the plan's text names them), which
    // the child's input (80.0 and NaN) sends `exp` to.
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        bytes.windows(6).any(|w| w == b"_exact"),
        "no exact forms exported"
    );
    let empty_bin = dir.join("bin");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&empty_bin).unwrap();
    std::fs::create_dir_all(&cache).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_loads_without_a_compiler",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .env("CC", empty_bin.join("cc"))
        .env("PATH", &empty_bin)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("child: exported program ran"),
        "child failed:\n{stdout}\n{stderr}"
    );
    let left: Vec<_> = walk(&cache);
    assert!(left.is_empty(), "the child wrote to its cache: {left:?}");
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn child_loads_without_a_compiler() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return; // only as the child of the test above
    };
    // No compiler here: jit cannot compile a new function.
    let fresh = rune::jit(|x: &Tensor| x.cos() * 3.0 + x);
    let e = fresh
        .try_call(&data(&[5], 3))
        .err()
        .expect("jit compiled without a compiler");
    assert!(e.message().contains("C compiler"), "{}", e.message());
    // The export loads and runs, the exact forms included.
    let m = Exported::load(Path::new(&path)).unwrap();
    let x = child_input();
    assert_close(&m.call(&x).unwrap(), &[child_function(&x)], "child");
    println!("child: exported program ran");
}

/// Bytes changed behind a valid checksum (what only a forger or a bug
/// writes) outside the shared objects: loading returns an error or a
/// program, and never panics while decoding. Every fourth byte (a load
/// that succeeds maps the code: about 10 ms each).
#[test]
fn decoding_forged_bytes_outside_the_native_code_never_panics() {
    let (bytes, ..) = small_export("forged");
    let elf: Vec<(usize, usize)> = {
        let mut v = Vec::new();
        let mut i = 0;
        while let Some(at) = bytes[i..].windows(4).position(|w| w == b"\x7fELF") {
            let start = i + at;
            let len = u64::from_le_bytes(bytes[start - 8..start].try_into().unwrap()) as usize;
            v.push((start - 8, start + len));
            i = start + len;
        }
        v
    };
    assert!(!elf.is_empty());
    let body = HEADER..bytes.len() - 4;
    let mut panics = Vec::new();
    for i in body.clone().step_by(4) {
        if elf.iter().any(|&(a, b)| (a..b).contains(&i)) {
            continue;
        }
        let mut b = bytes.clone();
        b[i] ^= 0x5a;
        let n = b.len();
        let sum = crc32fast::hash(&b[..n - 4]);
        b[n - 4..].copy_from_slice(&sum.to_le_bytes());
        let r = std::panic::catch_unwind(|| Exported::from_bytes(&b).map(|_| ()));
        if r.is_err() {
            panics.push(i);
        }
    }
    assert!(
        panics.is_empty(),
        "decoding panicked for bytes changed at {panics:?}"
    );
}

/// The built examples' directory (`target/<profile>/examples`, beside this
/// test binary's `deps/`), if `train_digits` and `predict_digits` are
/// there: `cargo test` builds the examples with the tests.
fn examples_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.join("examples");
    let found = |name: &str| {
        dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
            .exists()
    };
    (found("train_digits") && found("predict_digits")).then_some(dir)
}

/// The held-out accuracy line's percentage in an example's output.
fn held_out_accuracy(stdout: &str) -> Option<f64> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("held-out accuracy "))?;
    line["held-out accuracy ".len()..]
        .split('%')
        .next()?
        .parse()
        .ok()
}

/// The user's path end to end: `train_digits` trains and exports its
/// predictor, signed, for the portable level only (x86-64-v2 on x86-64);
/// `predict_digits --trust digits.pub`, run with `CC` and `PATH` where no
/// compiler lives and an empty cache directory, checks the signature,
/// loads it and classifies the held-out digits with the accuracy training
/// reported.
#[test]
fn the_digits_predictor_runs_with_no_compiler() {
    let Some(examples) = examples_dir() else {
        skip::skip(
            "examples",
            "the examples are not built (cargo test --workspace builds them)",
        );
        return;
    };
    let dir = temp_dir("predictor");
    let portable = rune::export::CpuTarget::portable().name();
    let train = std::process::Command::new(examples.join("train_digits"))
        .args(["--cpu", portable, "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    let trained = String::from_utf8_lossy(&train.stdout);
    assert!(
        train.status.success(),
        "train_digits failed:\n{trained}\n{}",
        String::from_utf8_lossy(&train.stderr)
    );
    let want = held_out_accuracy(&trained).expect("train_digits prints its held-out accuracy");
    let (empty_bin, cache) = (dir.join("bin"), dir.join("cache"));
    std::fs::create_dir_all(&empty_bin).unwrap();
    std::fs::create_dir_all(&cache).unwrap();
    let predict = std::process::Command::new(examples.join("predict_digits"))
        .arg(dir.join("digits.rune"))
        .arg("--trust")
        .arg(dir.join("digits.pub"))
        .env("CC", empty_bin.join("cc"))
        .env("PATH", &empty_bin)
        .env("XDG_CACHE_HOME", &cache)
        .env("JITCACHE", "1")
        .output()
        .unwrap();
    let predicted = String::from_utf8_lossy(&predict.stdout);
    assert!(
        predict.status.success(),
        "predict_digits failed:\n{predicted}\n{}",
        String::from_utf8_lossy(&predict.stderr)
    );
    let got = held_out_accuracy(&predicted).expect("predict_digits prints its accuracy");
    assert_eq!(got, want, "{predicted}");
    assert!(got >= 97.0, "{predicted}");
    assert!(
        predicted.contains(&format!("target {portable} (running)")),
        "{predicted}"
    );
    assert!(predicted.contains("(trusted)"), "{predicted}");
    assert!(predicted.contains(rune::export::LIBRARY), "{predicted}");
    assert!(walk(&cache).is_empty(), "the predictor wrote to its cache");
}

// ---- CPU targets, signatures, versions (issue 59) ----

use rune::export::{CpuTarget, ExportOpts, SigningKey, VerifyingKey};

/// Export options for `cpu`, unsigned.
fn for_cpu(cpu: &[CpuTarget]) -> ExportOpts {
    ExportOpts {
        cpu: cpu.to_vec(),
        signing_key: None,
    }
}

/// A fixed key (tests only: a real key's 32 bytes are secret and random).
fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

/// `f` exported at `args` with `opts`, as bytes.
fn export_bytes<P: Ptree, Q: Ptree>(
    f: impl Fn(&P) -> Q,
    args: &P,
    opts: &ExportOpts,
    tag: &str,
) -> Vec<u8> {
    let path = temp_dir(tag).join(format!("{tag}.rune"));
    rune::jit(f).export_with(args, &path, opts).unwrap();
    std::fs::read(&path).unwrap()
}

fn host_has(target: CpuTarget) -> bool {
    let host = tolk::export::host_cpu_features();
    target.arch() == std::env::consts::ARCH && target.features().iter().all(|f| host.contains(f))
}

/// An export for x86-64-v2 runs here and gives jit's values: the same bits
/// where no FMA is involved (products, sums, relu, max), within 4 ulps for
/// the f32 polynomials (`tanh`, `exp` in `log_softmax`), which fuse their
/// multiply-adds where the host has FMA (jit) and not at v2.
#[test]
fn an_x86_64_v2_export_loads_and_equals_jit() {
    if !host_has(CpuTarget::X86_64V2) {
        eprintln!("skipped: not an x86-64-v2 host");
        return;
    }
    let p = mlp_params();
    let x = data(&[5, 16], 9);
    let exact = |x: &Tensor| {
        let h = (x.matmul(&p.w1) + &p.b1).relu();
        let y = h.matmul(&p.w2) + &p.b2;
        (y.max(&[1], false), y.sum(&[0], false) * 0.5)
    };
    let v2 = for_cpu(&[CpuTarget::X86_64V2]);
    let m = Exported::from_bytes(&export_bytes(exact, &x, &v2, "v2_exact")).unwrap();
    assert_same(
        &m.call(&x).unwrap(),
        &rune::jit(exact).call(&x).leaves(),
        "v2 exact",
    );
    let info = m.info();
    assert_eq!(info.targets.len(), 1);
    assert_eq!(info.targets[0].name, "x86-64-v2");
    assert_eq!(info.targets[0].cpu_features, CpuTarget::X86_64V2.features());
    assert_eq!(info.running, Some(0));
    assert_eq!(info.library, format!("rune {}", env!("CARGO_PKG_VERSION")));
    assert_eq!(info.platform, format!("x86_64-{}", std::env::consts::OS));
    let cc = tolk::build::compiler_identity().unwrap();
    assert_eq!(info.targets[0].compiler, cc);
    assert!(info.to_string().contains("x86-64-v2 (running)"), "{info}");

    let smooth = |x: &Tensor| mlp_forward(&p, x);
    let m = Exported::from_bytes(&export_bytes(smooth, &x, &v2, "v2_smooth")).unwrap();
    assert_close(
        &m.call(&x).unwrap(),
        &[rune::jit(smooth).call(&x)],
        "v2 tanh",
    );
}

/// A file whose every target needs features this host lacks is refused,
/// naming the target: a level declared above any host's (x86-64-v4 plus an
/// imaginary feature), and, on a host without AVX-512, a real x86-64-v4
/// export. Nothing is mapped.
#[test]
fn a_level_the_host_lacks_is_refused_by_name() {
    if !host_has(CpuTarget::X86_64V2) {
        eprintln!("skipped: not an x86-64-v2 host");
        return;
    }
    let f = |x: &Tensor| x * 3.0 + 1.0;
    let x = data(&[8], 2);
    let bytes = export_bytes(f, &x, &for_cpu(&[CpuTarget::X86_64V2]), "above");
    let above = rewrite_targets(&bytes, |targets| {
        targets[0].name = "x86-64-v4".into();
        targets[0].features = CpuTarget::X86_64V4.features();
        targets[0].features.push("avx1024-imaginary".into());
    });
    let mapped = tolk::export::mapped_on_this_thread();
    let e = Exported::from_bytes(&above).err().unwrap();
    assert_eq!(tolk::export::mapped_on_this_thread(), mapped);
    match &e {
        ExportError::MissingCpuFeatures { target, missing } => {
            assert_eq!(target, "x86-64-v4");
            assert!(missing.contains(&"avx1024-imaginary".to_string()), "{e}");
        }
        e => panic!("{e}"),
    }
    assert!(e.to_string().contains("built for x86-64-v4"), "{e}");

    if !host_has(CpuTarget::X86_64V4) {
        let v4 = export_bytes(f, &x, &for_cpu(&[CpuTarget::X86_64V4]), "v4");
        let e = Exported::from_bytes(&v4).err().unwrap();
        assert!(
            matches!(&e, ExportError::MissingCpuFeatures { target, missing }
                if target == "x86-64-v4" && missing.contains(&"avx512f".to_string())),
            "{e}"
        );
        assert_eq!(tolk::export::mapped_on_this_thread(), mapped);
    }
}

/// Several levels in one file: the loader runs the best the host has, and
/// falls back to a lower one when a higher needs what the host lacks.
#[test]
fn a_file_with_several_levels_runs_the_best_the_host_has() {
    if !host_has(CpuTarget::X86_64V2) {
        eprintln!("skipped: not an x86-64-v2 host");
        return;
    }
    let f = |x: &Tensor| (x * 3.0).exp().sum(&[0], false);
    let x = data(&[16], 5);
    let all = [
        CpuTarget::X86_64V2,
        CpuTarget::X86_64V3,
        CpuTarget::X86_64V4,
    ];
    let bytes = export_bytes(f, &x, &for_cpu(&all), "levels");
    let m = Exported::from_bytes(&bytes).unwrap();
    let best = all.iter().rposition(|&t| host_has(t)).unwrap();
    assert_eq!(m.info().running, Some(best));
    assert_eq!(m.info().targets.len(), 3);
    if best > 0 {
        // The host's best level (with FMA) gives jit's bits.
        assert_same(&m.call(&x).unwrap(), &[rune::jit(f).call(&x)], "best level");
    }
    let only_v2 = rewrite_targets(&bytes, |targets| {
        for t in &mut targets[1..] {
            t.features.push("avx1024-imaginary".into());
        }
    });
    let m = Exported::from_bytes(&only_v2).unwrap();
    assert_eq!(m.info().running, Some(0));
    assert_close(&m.call(&x).unwrap(), &[f(&x)], "fallback to v2");
    // The default: those three levels.
    assert_eq!(ExportOpts::default().cpu, all);
}

#[test]
fn targets_that_cannot_be_built_are_named_errors() {
    let f = |x: &Tensor| x + 1.0;
    let x = data(&[4], 1);
    let path = temp_dir("targets").join("t.rune");
    let jitted = rune::jit(f);
    let e = jitted.export_with(&x, &path, &for_cpu(&[])).err().unwrap();
    assert!(matches!(e, ExportError::CpuTarget { .. }), "{e}");
    let e = (jitted.export_with(
        &x,
        &path,
        &for_cpu(&[CpuTarget::X86_64V2, CpuTarget::Aarch64]),
    ))
    .err()
    .unwrap();
    assert!(matches!(e, ExportError::CpuTarget { .. }), "{e}");
    assert!(e.to_string().contains("one architecture"), "{e}");
    // aarch64 from another architecture: a cross compiler builds it, or the
    // error says there is none; the file never loads here.
    if std::env::consts::ARCH != "aarch64" {
        match jitted.export_with(&x, &path, &for_cpu(&[CpuTarget::Aarch64])) {
            Err(ExportError::CpuTarget { detail }) => {
                assert!(
                    detail.contains("aarch64") && detail.contains("cross compiler"),
                    "{detail}"
                )
            }
            Err(e) => panic!("{e}"),
            Ok(()) => assert!(matches!(
                Exported::load(&path),
                Err(ExportError::WrongPlatform { file, .. }) if file.starts_with("aarch64-")
            )),
        }
    }
    // `native`: the host's features, jit's code.
    let native = export_bytes(f, &x, &for_cpu(&[CpuTarget::Native]), "native");
    let m = Exported::from_bytes(&native).unwrap();
    assert_eq!(m.cpu_features(), tolk::export::host_cpu_features());
    assert_eq!(m.info().targets[0].name, "native");
}

/// A small signed export (one target, for the byte-by-byte loops).
fn small_signed(signer: &SigningKey, tag: &str) -> (Vec<u8>, Tensor, Tensor) {
    let f = |x: &Tensor| (x * 2.0 + 1.0).relu();
    let x = data(&[6], 17);
    let opts = ExportOpts {
        cpu: vec![CpuTarget::portable()],
        signing_key: Some(signer.clone()),
    };
    (export_bytes(f, &x, &opts, tag), x.clone(), f(&x))
}

#[test]
fn signed_files_verify_and_report_their_signer() {
    let (bytes, x, want) = small_signed(&key(1), "signed");
    let trusted: Vec<VerifyingKey> = vec![key(9).verifying_key(), key(1).verifying_key()];
    let m = Exported::from_bytes_trusted(&bytes, &trusted).unwrap();
    assert_same(&m.call(&x).unwrap(), std::slice::from_ref(&want), "signed");
    assert_eq!(m.info().signer, Some(key(1).verifying_key()));
    assert!(m.info().trusted);
    assert!(m.info().to_string().contains("(trusted)"));
    // `load` still loads it (its signature checked, against no list).
    let m = Exported::from_bytes(&bytes).unwrap();
    assert_eq!(m.info().signer, Some(key(1).verifying_key()));
    assert!(!m.info().trusted);
    let info = Exported::inspect(&bytes).unwrap();
    assert_eq!(info.signer, Some(key(1).verifying_key()));
    // Through the file too.
    let path = temp_dir("signed_file").join("s.rune");
    std::fs::write(&path, &bytes).unwrap();
    assert!(Exported::load_trusted(&path, &trusted).is_ok());
}

/// What `load_trusted` may answer for a file changed after signing: each
/// is refused before any code is mapped.
fn refused_before_mapping(bytes: &[u8], trusted: &[VerifyingKey], what: &str) -> ExportError {
    let mapped = tolk::export::mapped_on_this_thread();
    let e = match Exported::from_bytes_trusted(bytes, trusted) {
        Ok(_) => panic!("{what}: loaded"),
        Err(e) => e,
    };
    assert_eq!(
        tolk::export::mapped_on_this_thread(),
        mapped,
        "{what}: code was mapped before {e}"
    );
    e
}

/// Every single-bit change at every byte of a signed file, every
/// truncation, and the signature block removed: refused by `load_trusted`
/// before any code is mapped.
#[test]
fn every_change_to_a_signed_file_is_refused_before_mapping() {
    let (bytes, ..) = small_signed(&key(1), "tamper");
    let trusted = [key(1).verifying_key()];
    for i in 0..bytes.len() {
        let mut b = bytes.clone();
        b[i] ^= 1 << (i % 8);
        let e = refused_before_mapping(&b, &trusted, &format!("byte {i}"));
        assert!(
            matches!(
                e,
                ExportError::BadSignature
                    | ExportError::UntrustedSigner { .. }
                    | ExportError::NotAnExport
                    | ExportError::FormatVersion { .. }
                    | ExportError::Truncated { .. }
                    | ExportError::Corrupted { .. }
            ),
            "byte {i}: {e}"
        );
        // Past the header only the signature can tell.
        if i >= HEADER && i < bytes.len() - 96 {
            assert_eq!(e, ExportError::BadSignature, "byte {i}");
        }
    }
    for n in (0..bytes.len())
        .step_by(97)
        .chain([bytes.len() - 1, bytes.len() - 96])
    {
        let e = refused_before_mapping(&bytes[..n], &trusted, &format!("truncated to {n}"));
        assert!(
            matches!(e, ExportError::Truncated { found, .. } if found == n as u64),
            "truncated to {n}: {e}"
        );
    }
    // The signature block cut off and the header rewritten to say so: an
    // unsigned file, which `load` takes and `load_trusted` refuses.
    let mut unsigned = bytes[..bytes.len() - 96].to_vec();
    unsigned[20..24].copy_from_slice(&0u32.to_le_bytes());
    let e = refused_before_mapping(&unsigned, &trusted, "unsigned");
    // The header changed under the checksum: the signature check comes first.
    assert_eq!(e, ExportError::Unsigned);
    // A body changed and re-summed by a forger, signature kept.
    let mut forged = bytes.clone();
    let n = forged.len() - 96;
    forged[HEADER + 3] ^= 0x20;
    let sum = crc32fast::hash(&forged[..n - 4]);
    forged[n - 4..n].copy_from_slice(&sum.to_le_bytes());
    assert_eq!(
        refused_before_mapping(&forged, &trusted, "re-summed"),
        ExportError::BadSignature
    );
    // `load` (no trusted keys) refuses a signature that does not verify too.
    assert_eq!(
        Exported::from_bytes(&forged).err(),
        Some(ExportError::BadSignature)
    );
}

#[test]
fn a_file_signed_by_another_key_is_refused_before_mapping() {
    let (bytes, ..) = small_signed(&key(2), "other_key");
    let trusted = [key(1).verifying_key()];
    let e = refused_before_mapping(&bytes, &trusted, "another key");
    assert_eq!(
        e,
        ExportError::UntrustedSigner {
            signer: rune::export::public_key_hex(&key(2).verifying_key())
        }
    );
    assert!(e.to_string().contains("not among the trusted keys"), "{e}");
    // Signed by key 2 but naming the trusted key 1: the signature fails.
    let mut claimed = bytes.clone();
    let n = claimed.len();
    claimed[n - 96..n - 64].copy_from_slice(key(1).verifying_key().as_bytes());
    assert_eq!(
        refused_before_mapping(&claimed, &trusted, "claimed"),
        ExportError::BadSignature
    );
    // An unsigned file.
    let (unsigned, ..) = small_export("unsigned_trusted");
    assert_eq!(
        refused_before_mapping(&unsigned, &trusted, "unsigned"),
        ExportError::Unsigned
    );
    // No trusted keys at all: nothing is trusted.
    assert!(matches!(
        refused_before_mapping(&bytes, &[], "no keys"),
        ExportError::UntrustedSigner { .. }
    ));
}
