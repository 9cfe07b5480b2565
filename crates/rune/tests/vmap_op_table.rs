//! Every operation of nx's op table under `vmap`: the mapped result equals
//! the stack of the operation applied lane by lane, with the batch axis at 0,
//! at the end, and with only the first input mapped (the others constants).

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

/// Runs `case` under vmap with the given per-input axes (None: unbatched,
/// lane 0's input used as the constant) and compares against the loop.
fn check(case: &OpCase, axes: &[Option<usize>]) -> Result<(), String> {
    let lanes: Vec<Vec<Tensor>> = (0..LANES)
        .map(|k| {
            case.inputs
                .iter()
                .zip(axes)
                .map(|(x, a)| if a.is_some() { lane(x, k) } else { x.clone() })
                .collect()
        })
        .collect();
    let expected: Vec<Vec<Tensor>> = lanes.iter().map(|ins| (case.run)(ins)).collect();
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
    let got = rune::vmap_with(
        |xs: &Vec<Tensor>| (case.run)(xs),
        &args,
        rune::VmapOpts {
            in_axes: Some(in_axes),
            out_axis: 0,
        },
    );
    for (j, g) in got.iter().enumerate() {
        let want = Tensor::stack(
            &expected.iter().map(|e| e[j].clone()).collect::<Vec<_>>(),
            0,
        );
        same(g, &want).map_err(|e| format!("output {j}: {e}"))?;
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
