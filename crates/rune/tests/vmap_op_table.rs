//! Every operation of nx's op table under `vmap`: the mapped result equals
//! the stack of the operation applied lane by lane, with the batch axis at 0,
//! at the end, and with only the first input mapped (the others constants).
//! The indexing and window entries (gathers, scatter-adds, segment sums,
//! index adds, one-hot, pools) also under `jit` of `vmap`, against eager
//! `vmap` bit for bit.

#[path = "common/bits.rs"]
mod bits;
#[path = "common/compiled_call.rs"]
mod compiled_call;
use compiled_call::compiled_call;
#[path = "../../nx/tests/common/mod.rs"]
mod common;

use common::table::{all_cases, OpCase};
use rune::prelude::*;

const LANES: usize = 3;

/// Entries whose run closure inspects eager memory layout or writes in place.
const SKIP: &[&str] = &["assign", "blit", "contiguous", "copy"];

/// Lane `k` of an input: a rearrangement of its elements (the same values,
/// so every lane stays in the operation's domain and index range).
fn lane(x: &Tensor, k: usize) -> Tensor {
    if x.numel() == 0 || x.ndim() == 0 {
        return x.clone();
    }
    let flat = x.flatten();
    let n = flat.numel();
    match k {
        0 => x.clone(),
        1 => flat.flip(&[0]).reshape(x.shape()),
        _ => flat.roll((1 % n) as isize, 0).reshape(x.shape()),
    }
}

fn same(a: &Tensor, b: &Tensor) -> Result<(), String> {
    if a.shape() != b.shape() || a.dtype() != b.dtype() {
        return Err(format!("{:?} vs {:?}", a, b));
    }
    if a.dtype().is_float() {
        let tol = match a.dtype() {
            DType::F16 | DType::BF16 => 1e-2,
            DType::F32 => 1e-5,
            _ => 1e-12,
        };
        let (x, y) = (
            a.cast(DType::F64).to_vec::<f64>(),
            b.cast(DType::F64).to_vec::<f64>(),
        );
        for (u, v) in x.iter().zip(&y) {
            let ok = (u.is_nan() && v.is_nan()) || u == v || (u - v).abs() <= tol * (1.0 + v.abs());
            if !ok {
                return Err(format!("{u} vs {v}\n{a}\n{b}"));
            }
        }
        Ok(())
    } else {
        let (x, y) = (a.cast(DType::I64), b.cast(DType::I64));
        if x.to_vec::<i64>() == y.to_vec::<i64>() {
            Ok(())
        } else {
            Err(format!("{a}\nvs\n{b}"))
        }
    }
}

/// `check()`, with a panic turned into an `Err` carrying its message, so one
/// failing case does not hide the others.
fn attempt(check: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(check)).unwrap_or_else(|p| {
        Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>().cloned().unwrap_or_default()
        ))
    })
}

/// For per-input axes `axes` (None: unbatched, lane 0's input used as the
/// constant): the batched arguments, vmap's `in_axes`, and the loop's
/// outputs (each stacked over the lanes at axis 0).
fn prepare(
    case: &OpCase,
    axes: &[Option<usize>],
) -> (Vec<Tensor>, Vec<Option<isize>>, Vec<Tensor>) {
    let lanes: Vec<Vec<Tensor>> = (0..LANES)
        .map(|k| {
            case.inputs
                .iter()
                .zip(axes)
                .map(|(x, a)| if a.is_some() { lane(x, k) } else { x.clone() })
                .collect()
        })
        .collect();
    let per_lane: Vec<Vec<Tensor>> = lanes.iter().map(|ins| (case.run)(ins)).collect();
    let expected = (0..per_lane[0].len())
        .map(|j| {
            Tensor::stack(
                &per_lane.iter().map(|e| e[j].clone()).collect::<Vec<_>>(),
                0,
            )
        })
        .collect();
    let args: Vec<Tensor> = (0..case.inputs.len())
        .map(|i| match axes[i] {
            Some(a) => {
                let per: Vec<Tensor> = lanes.iter().map(|l| l[i].clone()).collect();
                Tensor::stack(&per, a as isize)
            }
            None => case.inputs[i].clone(),
        })
        .collect();
    let in_axes: Vec<Option<isize>> = axes.iter().map(|a| a.map(|a| a as isize)).collect();
    (args, in_axes, expected)
}

/// `case` under vmap of `args` with `in_axes`, the batch axis of every
/// output at 0.
fn vmap_of(case: &OpCase, args: &[Tensor], in_axes: &[Option<isize>]) -> Vec<Tensor> {
    rune::vmap_with(
        |xs: &Vec<Tensor>| (case.run)(xs),
        &args.to_vec(),
        rune::VmapOpts {
            in_axes: Some(in_axes.to_vec()),
            out_axis: 0,
        },
    )
}

/// Runs `case` under vmap with the given per-input axes (None: unbatched,
/// lane 0's input used as the constant) and compares against the loop.
fn check(case: &OpCase, axes: &[Option<usize>]) -> Result<(), String> {
    let (args, in_axes, expected) = prepare(case, axes);
    let got = vmap_of(case, &args, &in_axes);
    for (j, g) in got.iter().enumerate() {
        same(g, &expected[j]).map_err(|e| format!("output {j}: {e}"))?;
    }
    Ok(())
}

#[test]
fn every_operation_under_vmap_equals_the_loop() {
    let mut failures = vec![];
    let mut checked = 0;
    for case in all_cases() {
        if case.inputs.is_empty() || SKIP.contains(&case.op) {
            continue;
        }
        let n = case.inputs.len();
        let modes: Vec<(&str, Vec<Option<usize>>)> = vec![
            ("axis 0", vec![Some(0); n]),
            (
                "last axis",
                case.inputs.iter().map(|x| Some(x.ndim())).collect(),
            ),
            (
                "first input only",
                (0..n).map(|i| (i == 0).then_some(0)).collect(),
            ),
        ];
        for (mode, axes) in modes {
            if mode == "first input only" && n == 1 {
                continue;
            }
            match attempt(|| check(&case, &axes)) {
                Ok(()) => checked += 1,
                Err(e) => failures.push(format!("{} ({mode}): {e}", case.name)),
            }
        }
    }
    let shown: Vec<&String> = failures.iter().take(40).collect();
    assert!(
        failures.is_empty(),
        "{} failures (first 40):\n{}",
        failures.len(),
        shown
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!("{checked} (case, mode) pairs checked");
    assert!(checked > 3000);
}

/// The indexing and window operations (gathers, scatter-adds, segment
/// sums, index adds, one-hot, pools: the kernel classes of issue 44).
const INDEXING_OPS: &[&str] = &[
    "take",
    "take_along_axis",
    "gather",
    "scatter_add",
    "index_add",
    "segment_sum",
    "one_hot",
    "max_pool",
    "avg_pool",
];

/// Entries per jitted batch.
const BATCH: usize = 48;

/// The op table's indexing and window entries over F32, F64 and I32 data
/// (every index dtype) under `jit` of `vmap` (every input mapped at axis
/// 0; only the first mapped, the rest unbatched arguments): equal to eager
/// `vmap` bit for bit, and so to the loop over the lanes. One compile per
/// batch of entries; a failing batch is rerun entry by entry to name it.
#[test]
fn indexing_and_pool_entries_under_jit_of_vmap_equal_eager() {
    let start = std::time::Instant::now();
    let cases: Vec<OpCase> = all_cases()
        .into_iter()
        .filter(|c| INDEXING_OPS.contains(&c.op))
        .filter(|c| {
            let dt = c.name.split('/').nth(1).unwrap_or("");
            ["f32", "f64", "i32"].contains(&dt)
        })
        .collect();
    let mut failures = vec![];
    let mut checked = 0;
    for mode in ["axis 0", "first input only"] {
        // (case, batched args, in_axes, eager vmap's outputs)
        let mut items = vec![];
        for case in &cases {
            let n = case.inputs.len();
            let axes: Vec<Option<usize>> = match mode {
                "axis 0" => vec![Some(0); n],
                _ if n == 1 => continue,
                _ => (0..n).map(|i| (i == 0).then_some(0)).collect(),
            };
            let (args, in_axes, expected) = prepare(case, &axes);
            let mut want = vec![];
            let ok = attempt(|| {
                want = vmap_of(case, &args, &in_axes);
                for (j, g) in want.iter().enumerate() {
                    same(g, &expected[j]).map_err(|e| format!("output {j}: {e}"))?;
                }
                Ok(())
            });
            if let Err(e) = ok {
                failures.push(format!("{} ({mode}, eager vmap): {e}", case.name));
                continue;
            }
            items.push((case, args, in_axes, want));
        }
        type Item<'a> = (&'a OpCase, Vec<Tensor>, Vec<Option<isize>>, Vec<Tensor>);
        let run = |items: &[&Item]| -> Result<Vec<Vec<Tensor>>, String> {
            let flat: Vec<Tensor> = items.iter().flat_map(|it| it.1.iter().cloned()).collect();
            let f = |xs: &Vec<Tensor>| {
                let mut next = 0;
                let mut outs = vec![];
                for it in items {
                    let n = it.1.len();
                    outs.push(vmap_of(it.0, &xs[next..next + n], &it.2));
                    next += n;
                }
                outs
            };
            compiled_call(&rune::jit(f), &flat)
        };
        let compare = |it: &Item, got: &[Tensor]| -> Result<(), String> {
            for (j, (g, w)) in got.iter().zip(&it.3).enumerate() {
                bits::same_bits(g, w).map_err(|e| format!("output {j}: {e}"))?;
            }
            Ok(())
        };
        for chunk in items.chunks(BATCH) {
            let refs: Vec<&Item> = chunk.iter().collect();
            match run(&refs) {
                Ok(outs) => {
                    for (it, got) in chunk.iter().zip(&outs) {
                        match compare(it, got) {
                            Ok(()) => checked += 1,
                            Err(e) => {
                                failures.push(format!("{} ({mode}, jit of vmap): {e}", it.0.name))
                            }
                        }
                    }
                }
                Err(_) => {
                    for it in chunk {
                        match run(&[it]).and_then(|o| compare(it, &o[0])) {
                            Ok(()) => checked += 1,
                            Err(e) => {
                                failures.push(format!("{} ({mode}, jit of vmap): {e}", it.0.name))
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "{checked} (entry, mode) pairs under jit of vmap equal eager, {:.1} s",
        start.elapsed().as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures (first 40):\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(checked > 150, "only {checked} pairs checked");
}
