//! Every float operation of nx's op table, differentiated: reverse mode
//! against central differences (`check_grads`, f64), and forward against
//! reverse mode (`<vjp(ct), t> == <ct, jvp(t)>` for pseudo-random `t`, `ct`).

#[path = "../../nx/tests/common/mod.rs"]
mod common;

use common::pseudo_random;
use common::table::{all_cases, OpCase};
use rune::prelude::*;

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

/// Entries that mutate their input or inspect eager storage.
const NOT_DIFFERENTIABLE: &[&str] = &["assign", "blit", "contiguous", "copy"];

/// An f64 case with finite inputs: the indices of its differentiable inputs.
fn differentiable(case: &OpCase) -> Option<Vec<usize>> {
    // In-place writes are refused on differentiated values (autodiff.rs
    // tests that), and these entries check eager memory layout.
    if NOT_DIFFERENTIABLE.contains(&case.op) {
        return None;
    }
    let floats: Vec<usize> = (0..case.inputs.len())
        .filter(|&i| case.inputs[i].dtype().is_float())
        .collect();
    if floats.is_empty() || floats.iter().any(|&i| case.inputs[i].dtype() != DType::F64) {
        return None;
    }
    let finite = floats
        .iter()
        .all(|&i| case.inputs[i].to_vec::<f64>().iter().all(|v| v.is_finite()));
    let outs = (case.run)(&case.inputs);
    let float_out = outs
        .iter()
        .any(|o| o.dtype() == DType::F64 && o.numel() > 0);
    let finite_out = outs
        .iter()
        .filter(|o| o.dtype() == DType::F64)
        .all(|o| o.to_vec::<f64>().iter().all(|v| v.is_finite()));
    (finite && float_out && finite_out).then_some(floats)
}

/// The case's operation as a function of its float inputs, the others fixed.
fn with_floats(case: &OpCase, idx: &[usize], xs: &[Tensor]) -> Vec<Tensor> {
    let mut inputs = case.inputs.clone();
    for (&i, x) in idx.iter().zip(xs) {
        inputs[i] = x.clone();
    }
    (case.run)(&inputs)
}

/// A weight per f64 output (pseudo-random, so that every output element matters).
fn weights(outs: &[Tensor], seed: u64) -> Vec<Option<Tensor>> {
    outs.iter()
        .enumerate()
        .map(|(k, o)| {
            (o.dtype() == DType::F64).then(|| {
                let w = pseudo_random(seed + k as u64, o.numel(), -1.0, 1.0);
                Tensor::from_vec(w, o.shape())
            })
        })
        .collect()
}

fn objective(outs: &[Tensor], ws: &[Option<Tensor>]) -> Tensor {
    let mut total = Tensor::scalar(0.0f64);
    for (o, w) in outs.iter().zip(ws) {
        if let Some(w) = w {
            total = total + (o * w).sum_all();
        }
    }
    total
}

/// Cases whose sample points sit on a kink or a jump of the function, where
/// a central difference straddles it and measures something else than the
/// one-sided derivative the rules pick (documented conventions, tested
/// separately in autodiff.rs).
fn at_a_kink(case: &OpCase) -> bool {
    let xs: Vec<Vec<f64>> = case
        .inputs
        .iter()
        .filter(|t| t.dtype() == DType::F64)
        .map(|t| t.to_vec::<f64>())
        .collect();
    let near = |v: f64, k: f64| (v - k).abs() < 1e-3;
    let any = |p: &dyn Fn(f64) -> bool| xs.iter().flatten().any(|&v| p(v));
    let op = case.op;
    let has_ties = || {
        xs.iter().any(|x| {
            let mut s = x.clone();
            s.sort_by(|a, b| a.partial_cmp(b).unwrap());
            s.windows(2).any(|w| near(w[0], w[1]))
        }) || (xs.len() >= 2
            && xs[0].len() == xs[1].len()
            && xs[0].iter().zip(&xs[1]).any(|(a, b)| near(*a, *b)))
    };
    match op {
        "abs" | "relu" | "sign" => any(&|v| near(v, 0.0)),
        "floor" | "ceil" | "round" | "trunc" | "rem" | "op %" => {
            any(&|v| (v - v.round()).abs() < 1e-3 || (v - v.round()).abs() > 0.499)
        }
        "maximum" | "minimum" | "max" | "min" | "clamp" | "argmax" | "argmin" | "max_pool" => {
            has_ties() || op == "clamp"
        }
        "sqrt" | "rsqrt" | "log" | "log2" | "pow" => any(&|v| v <= 1e-3),
        // The standard deviation of one element is sqrt(0).
        "std" => (case.run)(&case.inputs)
            .iter()
            .any(|o| o.to_vec::<f64>().contains(&0.0)),
        _ => false,
    }
}

#[test]
fn reverse_mode_matches_central_differences() {
    let mut checked = 0;
    let mut failures = vec![];
    for case in all_cases() {
        let Some(idx) = differentiable(&case) else {
            continue;
        };
        if at_a_kink(&case) {
            continue;
        }
        let xs: Vec<Tensor> = idx.iter().map(|&i| case.inputs[i].clone()).collect();
        let ws = weights(&(case.run)(&case.inputs), 7);
        let f = |xs: &Vec<Tensor>| objective(&with_floats(&case, &idx, xs), &ws);
        let opts = rune::CheckGradsOpts {
            tol: 1e-5,
            eps: 1e-6,
        };
        match attempt(|| rune::check_grads_with(f, &xs, opts)) {
            Ok(()) => checked += 1,
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    report(&failures, checked, "checked against central differences");
}

fn dot(a: &[Tensor], b: &[Tensor]) -> f64 {
    a.iter()
        .zip(b)
        .filter(|(x, _)| x.dtype() == DType::F64)
        .map(|(x, y)| (x * y).sum_all().item::<f64>())
        .sum()
}

#[test]
fn forward_and_reverse_mode_agree() {
    let mut checked = 0;
    let mut failures = vec![];
    for case in all_cases() {
        let Some(idx) = differentiable(&case) else {
            continue;
        };
        let xs: Vec<Tensor> = idx.iter().map(|&i| case.inputs[i].clone()).collect();
        let ts: Vec<Tensor> = xs
            .iter()
            .enumerate()
            .map(|(k, x)| {
                Tensor::from_vec(
                    pseudo_random(100 + k as u64, x.numel(), -1.0, 1.0),
                    x.shape(),
                )
            })
            .collect();
        let f = |xs: &Vec<Tensor>| with_floats(&case, &idx, xs);
        let outs = f(&xs);
        let cts: Vec<Tensor> = outs
            .iter()
            .enumerate()
            .map(|(k, o)| {
                if o.dtype() == DType::F64 {
                    Tensor::from_vec(
                        pseudo_random(200 + k as u64, o.numel(), -1.0, 1.0),
                        o.shape(),
                    )
                } else {
                    Tensor::zeros(o.shape(), o.dtype())
                }
            })
            .collect();
        let result = attempt(|| {
            let (_, pulled) = rune::vjp(f, &xs, &cts);
            let (_, pushed) = rune::jvp(f, &xs, &ts);
            let (a, b) = (dot(&pulled, &ts), dot(&cts, &pushed));
            if (a - b).abs() > 1e-9 * (1.0 + a.abs().max(b.abs())) {
                Err(format!("<vjp(ct), t> = {a} but <ct, jvp(t)> = {b}"))
            } else {
                Ok(())
            }
        });
        match result {
            Ok(()) => checked += 1,
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    report(&failures, checked, "forward and reverse mode agree");
}

/// Fails listing every failure, or when too few of the table's cases ran.
fn report(failures: &[String], checked: usize, what: &str) {
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    println!("{checked} cases: {what}");
    assert!(checked > 150, "only {checked} cases checked");
}

#[test]
fn second_derivatives_against_closed_forms() {
    let xs = [0.3f64, -0.8, 1.7];
    let x = Tensor::from_slice(&xs, &[3]);
    let second = |f: &dyn Fn(&Tensor) -> Tensor| {
        // The diagonal of the Hessian of sum(f(x)) (f elementwise): grad of sum(grad).
        rune::grad(
            |x: &Tensor| rune::grad(|x: &Tensor| f(x).sum_all(), x).sum_all(),
            &x,
        )
        .to_vec::<f64>()
    };
    let cases: Vec<(&str, Box<dyn Fn(&Tensor) -> Tensor>, fn(f64) -> f64)> = vec![
        ("sin", Box::new(|x| x.sin()), |v| -v.sin()),
        ("exp", Box::new(|x| x.exp()), |v| v.exp()),
        ("tanh", Box::new(|x| x.tanh()), |v| {
            let t = v.tanh();
            -2.0 * t * (1.0 - t * t)
        }),
        ("sigmoid", Box::new(|x| x.sigmoid()), |v| {
            let s = 1.0 / (1.0 + (-v).exp());
            s * (1.0 - s) * (1.0 - 2.0 * s)
        }),
        ("cube", Box::new(|x| x.square() * x), |v| 6.0 * v),
        ("atan", Box::new(|x| x.atan()), |v| {
            -2.0 * v / (1.0 + v * v).powi(2)
        }),
        ("erf", Box::new(|x| x.erf()), |v| {
            -4.0 * v / std::f64::consts::PI.sqrt() * (-v * v).exp()
        }),
    ];
    for (name, f, d2) in cases {
        let got = second(&*f);
        for (g, v) in got.iter().zip(xs) {
            assert!(
                (g - d2(v)).abs() < 1e-10,
                "{name}'' at {v}: {g} vs {}",
                d2(v)
            );
        }
    }
    // Mixed second derivative of a product through a reduction and a matmul:
    // f(a, b) = sum(a @ b); d/da_ij d/db_jk = 1 ... check the Hessian-vector
    // product of x^T M x, which is (M + M^T) v.
    let m = Tensor::from_slice(&[1.0f64, 2.0, -1.0, 0.5], &[2, 2]);
    let v = Tensor::from_slice(&[1.0f64, -2.0], &[2]);
    let hv = rune::hvp(
        |x: &Tensor| x.dot(&m.matmul(x)),
        &Tensor::from_slice(&[0.3f64, 0.9], &[2]),
        &v,
    );
    let want = (&m + &m.transpose()).matmul(&v);
    assert_eq!(hv.to_vec::<f64>(), want.to_vec::<f64>());
}
