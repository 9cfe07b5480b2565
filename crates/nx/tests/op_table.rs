//! The op table (`common::table`) run eagerly against its naive references,
//! on the entries' own inputs and on non-contiguous copies of them.

mod common;

use common::table::{all_cases, OpCase, REQUIRED_OPS};
use common::{gapped_copy, strided_copy};
use nx::{DType, Slice, Tensor};
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};

fn panic_message(e: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = e.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "(non-string panic)".to_string()
    }
}

/// Runs `check` on every case, then fails once listing every failing case.
fn run_all(cases: &[OpCase], what: &str, check: impl Fn(&OpCase)) {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut failures = vec![];
    for case in cases {
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| check(case))) {
            failures.push(format!("- {}: {}", case.name, panic_message(e)));
        }
    }
    std::panic::set_hook(hook);
    if !failures.is_empty() {
        panic!(
            "{what}: {} of {} entries failed:\n{}",
            failures.len(),
            cases.len(),
            failures.join("\n")
        );
    }
}

#[test]
fn every_entry_matches_its_reference() {
    let cases = all_cases();
    run_all(&cases, "eager vs reference", |c| c.check());
}

#[test]
fn every_entry_matches_on_strided_inputs() {
    let cases = all_cases();
    run_all(&cases, "eager on negative-stride inputs", |c| {
        let inputs: Vec<Tensor> = c.inputs.iter().map(strided_copy).collect();
        for (a, b) in inputs.iter().zip(&c.inputs) {
            assert_eq!(a.shape(), b.shape());
        }
        let got = (c.run)(&inputs);
        c.check_outputs(&inputs, &got, " [strided inputs]");
    });
    run_all(&cases, "eager on gapped inputs", |c| {
        let inputs: Vec<Tensor> = c.inputs.iter().map(gapped_copy).collect();
        let got = (c.run)(&inputs);
        c.check_outputs(&inputs, &got, " [gapped inputs]");
    });
}

#[test]
fn every_entry_is_deterministic_and_leaves_inputs_alone() {
    let cases = all_cases();
    run_all(&cases, "determinism", |c| {
        let before: Vec<_> = c.inputs.iter().map(common::RefArray::from_tensor).collect();
        let a = (c.run)(&c.inputs);
        let b = (c.run)(&c.inputs);
        let after: Vec<_> = c.inputs.iter().map(common::RefArray::from_tensor).collect();
        // NaN != NaN, so compare through Debug strings.
        assert_eq!(
            format!("{before:?}"),
            format!("{after:?}"),
            "inputs changed"
        );
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(
                format!("{:?}", common::RefArray::from_tensor(x)),
                format!("{:?}", common::RefArray::from_tensor(y)),
                "two runs differ"
            );
        }
    });
}

#[test]
fn the_table_covers_every_public_operation() {
    let cases = all_cases();
    let ops: BTreeSet<&str> = cases.iter().map(|c| c.op).collect();
    let missing: Vec<&&str> = REQUIRED_OPS.iter().filter(|o| !ops.contains(**o)).collect();
    assert!(
        missing.is_empty(),
        "operations without an entry: {missing:?}"
    );
    let mut names = BTreeSet::new();
    for c in &cases {
        assert!(
            names.insert(c.name.clone()),
            "duplicate entry name {}",
            c.name
        );
    }
}

#[test]
fn elementwise_entries_cover_their_dtypes() {
    // Every float op has an entry for each float dtype; every numeric op for
    // each numeric dtype; cast for every pair.
    let cases = all_cases();
    let has = |op: &str, dt: DType| {
        cases.iter().any(|c| {
            c.op == op
                && c.name
                    .split('/')
                    .nth(1)
                    .is_some_and(|v| v.starts_with(dt.name()))
        })
    };
    for op in ["exp", "sin", "erf", "sigmoid", "gelu", "atan2", "pow"] {
        for dt in common::FLOATS {
            assert!(has(op, dt), "{op} has no {dt} entry");
        }
    }
    for op in [
        "add", "sub", "mul", "div", "rem", "neg", "abs", "sign", "round", "clamp", "maximum",
    ] {
        for dt in common::NUMERIC {
            assert!(has(op, dt), "{op} has no {dt} entry");
        }
    }
    for from in DType::ALL {
        for to in DType::ALL {
            let name = format!("cast/{from}->{to}");
            assert!(cases.iter().any(|c| c.name == name), "no entry {name}");
        }
    }
}

// ---------------------------------------------------------------------------
// Properties of the table's machinery itself, so that a passing table means
// something.

#[test]
fn the_comparison_catches_wrong_values() {
    use common::{assert_matches, RefArray, Tol};
    let t = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    let good = RefArray::floats(DType::F32, &[2], vec![1.0, 2.0]);
    let off = RefArray::floats(DType::F32, &[2], vec![1.0, 2.001]);
    let nan = RefArray::floats(DType::F32, &[2], vec![1.0, f64::NAN]);
    let tol = Tol::for_dtype(DType::F32, 1.0);
    assert_matches(&t, &good, &tol, "good");
    for (r, what) in [(off, "off"), (nan, "nan")] {
        let e = catch_unwind(AssertUnwindSafe(|| assert_matches(&t, &r, &tol, what)));
        assert!(e.is_err(), "{what} was accepted");
    }
    // Signed zeros only when asked for.
    let z = Tensor::from_slice(&[-0.0f64], &[1]);
    let pz = RefArray::floats(DType::F64, &[1], vec![0.0]);
    assert_matches(&z, &pz, &Tol::for_dtype(DType::F64, 1.0), "zeros");
    let mut strict = Tol::for_dtype(DType::F64, 1.0);
    strict.signed_zeros = true;
    assert!(catch_unwind(AssertUnwindSafe(|| assert_matches(&z, &pz, &strict, "z"))).is_err());
    // Integers exactly; dtype and shape must agree.
    let i = Tensor::from_slice(&[5i64], &[1]);
    assert!(catch_unwind(AssertUnwindSafe(|| assert_matches(
        &i,
        &RefArray::ints(DType::I64, &[1], vec![6]),
        &tol,
        "int"
    )))
    .is_err());
    assert!(catch_unwind(AssertUnwindSafe(|| assert_matches(
        &i,
        &RefArray::ints(DType::I32, &[1], vec![5]),
        &tol,
        "dtype"
    )))
    .is_err());
    assert!(catch_unwind(AssertUnwindSafe(|| assert_matches(
        &i,
        &RefArray::ints(DType::I64, &[1, 1], vec![5]),
        &tol,
        "shape"
    )))
    .is_err());
    // Half types: one ulp of f16 at 1.0 passes at the default 2 ulps, 3 do not.
    let h = Tensor::from_slice(&[half::f16::from_f64(1.0 + 3.0 * 2f64.powi(-10))], &[1]);
    let one = RefArray::floats(DType::F16, &[1], vec![1.0]);
    assert!(catch_unwind(AssertUnwindSafe(|| assert_matches(
        &h,
        &one,
        &Tol::for_dtype(DType::F16, 1.0),
        "f16"
    )))
    .is_err());
    let h = Tensor::from_slice(&[half::f16::from_f64(1.0 + 2f64.powi(-10))], &[1]);
    assert_matches(&h, &one, &Tol::for_dtype(DType::F16, 1.0), "f16 1ulp");
}

#[test]
fn ulp_index_counts_representable_values() {
    use common::ulp_index;
    // f16: 0, the smallest subnormal, the smallest normal, 1, the largest, inf.
    assert_eq!(ulp_index(0.0, DType::F16), 0);
    assert_eq!(ulp_index(2f64.powi(-24), DType::F16), 1);
    assert_eq!(ulp_index(2f64.powi(-14), DType::F16), 1024);
    assert_eq!(ulp_index(1.0, DType::F16), 15 * 1024);
    assert_eq!(ulp_index(1.0 + 2f64.powi(-10), DType::F16), 15 * 1024 + 1);
    assert_eq!(ulp_index(65504.0, DType::F16), 0x7bff);
    assert_eq!(ulp_index(f64::INFINITY, DType::F16), 0x7c00);
    assert_eq!(ulp_index(-1.0, DType::F16), -15 * 1024);
    // Agrees with the bit patterns of f32 and bf16.
    for x in [1e-40f32, 1.5e-38, 0.1, 1.0, 3.3e38, 1234.5678] {
        assert_eq!(ulp_index(x as f64, DType::F32), x.to_bits() as i128, "{x}");
        let b = half::bf16::from_f32(x);
        assert_eq!(
            ulp_index(b.to_f64(), DType::BF16),
            b.to_bits() as i128,
            "{x}"
        );
        let h = half::f16::from_f32(x);
        if h.is_finite() {
            assert_eq!(
                ulp_index(h.to_f64(), DType::F16),
                h.to_bits() as i128,
                "{x}"
            );
        }
    }
}

#[test]
fn reference_rounding_matches_rust_for_f32() {
    // `round_to_f32` is written from the definition; Rust's `as f32` rounds
    // f64 to nearest even, so they must agree everywhere.
    let mut vals = common::pseudo_random(7, 2000, -1e6, 1e6);
    vals.extend(common::pseudo_random(8, 200, -1e-36, 1e-36));
    vals.extend([
        3.4028235677973366e38,
        3.4028235e38 * 1.0000001,
        1e-45,
        7e-46,
        0.5 * 1.401298464324817e-45,
    ]);
    for x in vals {
        assert_eq!(common::round_to_f32(x), (x as f32) as f64, "{x:e}");
    }
}

// ---------------------------------------------------------------------------
// Views: the movement entries above check values; these check that the view
// operations really are views.

#[test]
fn view_operations_share_storage() {
    let x = Tensor::arange(0.0, 24.0, 1.0, DType::F32).reshape(&[2, 3, 4]);
    let views = [
        x.reshape(&[6, 4]),
        x.permute(&[2, 0, 1]),
        x.transpose(),
        x.swapaxes(0, 2),
        x.moveaxis(0, 2),
        x.slice(&[Slice::all(), Slice::from(..).step(-2)]),
        x.narrow(2, 1, 2),
        x.get(1),
        x.flip(&[0, 2]),
        x.narrow(2, 0, 1).expand(&[2, 3, 5]),
        x.unsqueeze(1),
        x.narrow(0, 0, 1).squeeze(0),
        x.flatten(),
    ];
    for (i, v) in views.iter().enumerate() {
        assert!(v.shares_storage_with(&x), "view {i} copied");
    }
    // Writing through a view is visible in the base.
    x.slice(&[Slice::from(1..2), Slice::from(..).step(-1)])
        .narrow(1, 0, 1)
        .assign(&Tensor::scalar(-1.0f32));
    let v = x.to_vec::<f32>();
    for (k, &got) in v.iter().enumerate() {
        let (i, j, l) = (k / 12, k / 4 % 3, k % 4);
        let want = if i == 1 && j == 2 { -1.0 } else { k as f32 };
        assert_eq!(got, want, "at {i},{j},{l}");
    }
    // A reshape of a transposed tensor cannot be a view; it is still right.
    let t = x.transpose();
    let r = t.reshape(&[24]);
    assert!(!r.shares_storage_with(&x));
}

#[test]
fn empty_views_read_write_and_reshape() {
    // Views of zero-size tensors: a narrow past the start of an empty
    // storage, flips, reshapes, elementwise ops and assign on them.
    let base = Tensor::zeros(&[1, 2, 0], DType::F64);
    let v = base.narrow(1, 1, 1);
    assert_eq!(v.shape(), &[1, 1, 0]);
    assert_eq!(v.to_vec::<f64>(), Vec::<f64>::new());
    assert!(v.contiguous().is_contiguous());
    assert_eq!((&v + 1.0).shape(), &[1, 1, 0]);
    v.assign(&Tensor::ones(&[0], DType::F64));
    let e = Tensor::zeros(&[2, 0], DType::I32);
    assert!(e.is_contiguous());
    assert_eq!(e.flip(&[0]).to_vec::<i32>(), Vec::<i32>::new());
    assert_eq!(e.reshape(&[1, 0]).shape(), &[1, 0]);
    assert_eq!(
        e.flip(&[0, 1]).reshape(&[2, 1, 0]).reshape(&[0]).shape(),
        &[0]
    );
    assert_eq!(e.transpose().reshape(&[0, 7]).shape(), &[0, 7]);
    let b = Tensor::zeros(&[0], DType::F32).broadcast_to(&[3, 0]);
    assert_eq!(b.copy().shape(), &[3, 0]);
    assert!(b.copy().is_contiguous());
}

#[test]
fn elementwise_and_cast_on_empty_views_past_the_storage() {
    // narrow(1, 1, 0) of a [2, 3] tensor whose storage is empty would point
    // past it; every kernel must cope.
    let base = Tensor::zeros(&[0, 3], DType::F32);
    let v = base.narrow(1, 2, 1);
    assert_eq!((&v * 2.0).shape(), &[0, 1]);
    assert_eq!(v.exp().shape(), &[0, 1]);
    assert_eq!(v.cast(DType::I8).shape(), &[0, 1]);
    assert_eq!(v.less(&v).shape(), &[0, 1]);
    assert_eq!(Tensor::where_(&v.less(&v), &v, &v).shape(), &[0, 1]);
    assert_eq!(v.copy().shape(), &[0, 1]);
}
