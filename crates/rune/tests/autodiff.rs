//! Reverse and forward mode against closed forms and finite differences:
//! the functions of the seed, nesting, dtypes, broadcasting, errors.

use rune::prelude::*;
mod common;
use common::{panic_message, t64};
use std::collections::BTreeMap;

fn s64(v: f64) -> Tensor {
    Tensor::scalar(v)
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len(), "lengths differ: {a:?} vs {b:?}");
    for (x, y) in a.iter().zip(b) {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{a:?} vs {b:?} (at {x} vs {y})"
        );
    }
}

#[derive(Ptree, Clone)]
struct Params {
    w: Tensor,
    b: Tensor,
}

#[test]
fn grad_of_polynomials_and_transcendentals() {
    let x = t64(&[0.5, -1.5, 2.0], &[3]);
    let xs = x.to_vec::<f64>();
    let g = rune::grad(|x: &Tensor| (x.square() * x).sum_all(), &x);
    close(
        &g.to_vec::<f64>(),
        &xs.iter().map(|v| 3.0 * v * v).collect::<Vec<_>>(),
        1e-12,
    );
    let g = rune::grad(|x: &Tensor| x.sin().exp().sum_all(), &x);
    let want: Vec<f64> = xs.iter().map(|v| v.cos() * v.sin().exp()).collect();
    close(&g.to_vec::<f64>(), &want, 1e-12);
    let g = rune::grad(|x: &Tensor| x.tanh().sum_all(), &x);
    let want: Vec<f64> = xs.iter().map(|v| 1.0 - v.tanh().powi(2)).collect();
    close(&g.to_vec::<f64>(), &want, 1e-12);
}

#[test]
fn value_and_grad_matches_value_and_grad_separately() {
    let p = Params {
        w: t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]),
        b: t64(&[0.5, -0.5], &[2]),
    };
    let x = t64(&[1.0, -1.0, 0.5, 2.0, 0.0, 1.0], &[3, 2]);
    let loss = |p: &Params| (x.matmul(&p.w) + &p.b).tanh().square().mean_all();
    let (v, g) = rune::value_and_grad(loss, &p);
    assert_eq!(v.item::<f64>(), loss(&p).item::<f64>());
    let g2 = rune::grad(loss, &p);
    assert_eq!(g.w.to_vec::<f64>(), g2.w.to_vec::<f64>());
    assert_eq!(g.b.to_vec::<f64>(), g2.b.to_vec::<f64>());
    assert_eq!(g.w.shape(), &[2, 2]);
    assert!(rune::check_grads(loss, &p).is_ok());
}

#[test]
fn leaves_that_do_not_reach_the_result_get_zeros_of_their_shape_and_dtype() {
    let mut m = BTreeMap::new();
    m.insert("used".to_string(), t64(&[1.0, 2.0], &[2]));
    m.insert("unused".to_string(), Tensor::ones(&[3, 2], DType::F32));
    let g = rune::grad(|m: &BTreeMap<String, Tensor>| m["used"].sum_all(), &m);
    assert_eq!(g["used"].to_vec::<f64>(), vec![1.0, 1.0]);
    assert_eq!(g["unused"].shape(), &[3, 2]);
    assert_eq!(g["unused"].dtype(), DType::F32);
    assert_eq!(g["unused"].to_vec::<f32>(), vec![0.0; 6]);
}

#[test]
fn leaves_of_different_float_dtypes_keep_their_dtype() {
    let p = (Tensor::scalar(2.0f32), Tensor::scalar(3.0f64));
    let g = rune::grad(|(a, b): &(Tensor, Tensor)| a.cast(DType::F64) * b, &p);
    assert_eq!(g.0.dtype(), DType::F32);
    assert_eq!(g.1.dtype(), DType::F64);
    assert_eq!(g.0.item::<f32>(), 3.0);
    assert_eq!(g.1.item::<f64>(), 2.0);
}

#[test]
fn broadcasting_sums_cotangents_back_to_the_input_shape() {
    let x = t64(&[1.0, 2.0, 3.0], &[3]);
    let b = t64(&[10.0], &[1]);
    let m = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let g = rune::grad(|(x, b): &(Tensor, Tensor)| (&m * x + b).sum_all(), &(x, b));
    assert_eq!(g.0.to_vec::<f64>(), vec![5.0, 7.0, 9.0]);
    assert_eq!(g.1.shape(), &[1]);
    assert_eq!(g.1.to_vec::<f64>(), vec![6.0]);
}

#[test]
fn no_perturbation_confusion() {
    // d/dx [x * d/dy (x * y)] at x = 2 is d/dx [x^2] = 4.
    let g = rune::grad(
        |x: &Tensor| x * rune::grad(|y: &Tensor| x * y, &s64(1.0)),
        &s64(2.0),
    );
    assert_eq!(g.item::<f64>(), 4.0);
    // The same through jvp.
    let (_, d) = rune::jvp(
        |x: &Tensor| x * rune::jvp(|y: &Tensor| x * y, &s64(1.0), &s64(1.0)).1,
        &s64(2.0),
        &s64(1.0),
    );
    assert_eq!(d.item::<f64>(), 4.0);
}

#[test]
fn higher_derivatives() {
    let x = s64(0.7);
    let d1 = |x: &Tensor| rune::grad(|x: &Tensor| x.sin(), x);
    let d2 = |x: &Tensor| rune::grad(d1, x);
    let d3 = rune::grad(d2, &x);
    assert!((d2(&x).item::<f64>() + 0.7f64.sin()).abs() < 1e-12);
    assert!((d3.item::<f64>() + 0.7f64.cos()).abs() < 1e-12);
    // x^4: second derivative 12 x^2, third 24 x.
    let f = |x: &Tensor| x.square().square();
    let g2 = rune::grad(|x: &Tensor| rune::grad(f, x), &s64(1.5));
    assert!((g2.item::<f64>() - 12.0 * 2.25).abs() < 1e-12);
    let g3 = rune::grad(
        |x: &Tensor| rune::grad(|x: &Tensor| rune::grad(f, x), x),
        &s64(1.5),
    );
    assert!((g3.item::<f64>() - 36.0).abs() < 1e-12);
}

#[test]
fn jvp_of_grad_is_hvp_and_matches_closed_form() {
    // f(x) = sum(tanh(A x)^2); grad = 2 A^T (t (1 - t^2)); check hvp by finite
    // differences of the gradient.
    let a = t64(&[0.3, -0.2, 0.5, 0.1, 0.4, -0.6, 0.2, 0.7, -0.1], &[3, 3]);
    let f = |x: &Tensor| a.matmul(x).tanh().square().sum_all();
    let x = t64(&[0.1, -0.3, 0.8], &[3]);
    let v = t64(&[1.0, 0.5, -2.0], &[3]);
    let hv = rune::hvp(f, &x, &v).to_vec::<f64>();
    let eps = 1e-6;
    let gp = rune::grad(f, &(&x + &(&v * eps))).to_vec::<f64>();
    let gm = rune::grad(f, &(&x - &(&v * eps))).to_vec::<f64>();
    let fd: Vec<f64> = gp
        .iter()
        .zip(&gm)
        .map(|(p, m)| (p - m) / (2.0 * eps))
        .collect();
    close(&hv, &fd, 1e-6);
}

#[test]
fn grad_of_jvp_and_grad_of_value_and_grad() {
    // g(x) = jvp(sin, x, 1) = cos(x); d/dx = -sin(x)
    let x = s64(0.4);
    let g = rune::grad(
        |x: &Tensor| rune::jvp(|x: &Tensor| x.sin(), x, &s64(1.0)).1,
        &x,
    );
    assert!((g.item::<f64>() + 0.4f64.sin()).abs() < 1e-12);
    // h(x) = value + grad of x^3 = x^3 + 3x^2; h' = 3x^2 + 6x
    let g = rune::grad(
        |x: &Tensor| {
            let (v, d) = rune::value_and_grad(|x: &Tensor| x.square() * x, x);
            v + d
        },
        &x,
    );
    assert!((g.item::<f64>() - (3.0 * 0.16 + 2.4)).abs() < 1e-12);
}

#[test]
fn vjp_with_structured_output_and_vjp_fun_reuse() {
    let x = t64(&[1.0, 2.0], &[2]);
    let f = |x: &Tensor| (x.square(), x.sum_all() * 3.0);
    let ct = (t64(&[1.0, 1.0], &[2]), s64(2.0));
    let ((a, b), g) = rune::vjp(f, &x, &ct);
    assert_eq!(a.to_vec::<f64>(), vec![1.0, 4.0]);
    assert_eq!(b.item::<f64>(), 9.0);
    assert_eq!(g.to_vec::<f64>(), vec![2.0 + 6.0, 4.0 + 6.0]);

    let calls = std::cell::Cell::new(0);
    let (y, pb) = rune::vjp_fun(
        |x: &Tensor| {
            calls.set(calls.get() + 1);
            x.exp()
        },
        &x,
    );
    assert_eq!(calls.get(), 1);
    let e: Vec<f64> = vec![1.0f64.exp(), 2.0f64.exp()];
    close(&y.to_vec::<f64>(), &e, 1e-15);
    for k in 1..4 {
        let g = pb.call(&t64(&[k as f64, 0.0], &[2]));
        close(&g.to_vec::<f64>(), &[k as f64 * e[0], 0.0], 1e-15);
    }
    assert_eq!(calls.get(), 1, "the pullback must not re-run f");
}

#[test]
fn jvp_structured_and_aux() {
    let p = (s64(2.0), s64(3.0));
    let t = (s64(1.0), s64(0.0));
    let (out, tan) = rune::jvp(|(a, b): &(Tensor, Tensor)| vec![a * b, a + b], &p, &t);
    assert_eq!(out[0].item::<f64>(), 6.0);
    assert_eq!(tan[0].item::<f64>(), 3.0);
    assert_eq!(tan[1].item::<f64>(), 1.0);
    let ((y, dy), aux) = rune::jvp_aux(|x: &Tensor| (x.exp(), "aux"), &s64(0.0), &s64(2.0));
    assert_eq!((y.item::<f64>(), dy.item::<f64>(), aux), (1.0, 2.0, "aux"));
    // A result that does not depend on the input has a zero tangent.
    let (_, dz) = rune::jvp(
        |_: &Tensor| Tensor::ones(&[2], DType::F64),
        &s64(1.0),
        &s64(1.0),
    );
    assert_eq!(dz.to_vec::<f64>(), vec![0.0, 0.0]);
}

#[test]
fn value_and_grad_aux_returns_aux_as_is_and_usable() {
    let x = t64(&[1.0, 2.0], &[2]);
    let ((v, (acc, name)), g) = rune::value_and_grad_aux(
        |x: &Tensor| (x.square().sum_all(), (x * 10.0, String::from("ok"))),
        &x,
    );
    assert_eq!(v.item::<f64>(), 5.0);
    assert_eq!(g.to_vec::<f64>(), vec![2.0, 4.0]);
    assert_eq!(name, "ok");
    // The aux tensor holds its value and can be used afterwards.
    assert_eq!((&acc + 1.0).to_vec::<f64>(), vec![11.0, 21.0]);
}

#[test]
fn reading_values_inside_grad_is_allowed() {
    let g = rune::grad(
        |x: &Tensor| {
            let v = x.item::<f64>();
            x * v
        },
        &s64(3.0),
    );
    // v is a constant: d/dx (x * 3) = 3.
    assert_eq!(g.item::<f64>(), 3.0);
}

#[test]
fn detach_and_no_grad() {
    let g = rune::grad(|x: &Tensor| x * rune::detach(x), &s64(3.0));
    assert_eq!(g.item::<f64>(), 3.0);
    let (_, d) = rune::jvp(|x: &Tensor| x * rune::detach(x), &s64(3.0), &s64(1.0));
    assert_eq!(d.item::<f64>(), 3.0);
    let g = rune::grad(
        |x: &Tensor| x.square() + rune::no_grad(|| x.square() * 5.0),
        &s64(2.0),
    );
    assert_eq!(g.item::<f64>(), 4.0);
    // A transformation started inside no_grad works as usual.
    let g = rune::grad(
        |x: &Tensor| rune::no_grad(|| rune::grad(|y: &Tensor| y.square(), x)) * x,
        &s64(2.0),
    );
    // inner grad = 2x evaluated as a constant 4: d/dx (4 x) = 4
    assert_eq!(g.item::<f64>(), 4.0);
    // detach outside any transformation is a copy.
    let x = t64(&[1.0, 2.0], &[2]);
    let d = rune::detach(&x);
    assert_eq!(d.to_vec::<f64>(), x.to_vec::<f64>());
    assert!(!d.shares_storage_with(&x));
}

#[test]
fn custom_vjp_replaces_the_inner_derivative() {
    let f = |x: &Tensor| {
        rune::custom_vjp(
            |x: &Tensor| (x.sin(), x.clone()),
            |x: &Tensor, ct: &Tensor| ct * 100.0 + x * 0.0,
            x,
        )
    };
    let x = s64(0.3);
    assert_eq!(f(&x).item::<f64>(), 0.3f64.sin());
    let g = rune::grad(f, &x);
    assert_eq!(g.item::<f64>(), 100.0);
    // An enclosing grad sees fwd itself: the inner grad uses the rule (100,
    // a constant), so the outer derivative of it is 0.
    let gg = rune::grad(|x: &Tensor| rune::grad(f, x), &x);
    assert_eq!(gg.item::<f64>(), 0.0);
    // Structured params and outputs; residual carried.
    let p = (s64(2.0), s64(5.0));
    let h = |p: &(Tensor, Tensor)| {
        rune::custom_vjp(
            |(a, b): &(Tensor, Tensor)| ((a * b, a + b), (a.clone(), b.clone())),
            |(a, b): &(Tensor, Tensor), (c1, c2): &(Tensor, Tensor)| (c1 * b + c2, c1 * a + c2),
            p,
        )
    };
    let g = rune::grad(
        |p: &(Tensor, Tensor)| {
            let (m, s) = h(p);
            m + s * 2.0
        },
        &p,
    );
    assert_eq!(g.0.item::<f64>(), 5.0 + 2.0);
    assert_eq!(g.1.item::<f64>(), 2.0 + 2.0);
}

#[test]
fn custom_jvp_replaces_the_forward_rule() {
    let f = |x: &Tensor| {
        rune::custom_jvp(
            |x: &Tensor| x.exp(),
            |x: &Tensor, t: &Tensor| (x.exp(), t * 7.0),
            x,
        )
    };
    let (y, d) = rune::jvp(f, &s64(0.0), &s64(2.0));
    assert_eq!(y.item::<f64>(), 1.0);
    assert_eq!(d.item::<f64>(), 14.0);
    // Outside differentiation it is f.
    assert_eq!(f(&s64(1.0)).item::<f64>(), 1.0f64.exp());
}

#[test]
fn remat_gives_identical_gradients() {
    let w = t64(&[0.5, -0.3, 0.8, 0.1], &[2, 2]);
    let x = t64(&[1.0, 2.0, -1.0, 0.5], &[2, 2]);
    let layer = |h: &Tensor, w: &Tensor| h.matmul(w).tanh();
    let plain = rune::grad(|w: &Tensor| layer(&layer(&x, w), w).sum_all(), &w);
    let xc = x.clone();
    let remated = rune::grad(
        |w: &Tensor| {
            let h = rune::remat(
                |(h, w): &(Tensor, Tensor)| h.matmul(w).tanh(),
                &(xc.clone(), w.clone()),
            );
            rune::remat(
                |(h, w): &(Tensor, Tensor)| h.matmul(w).tanh(),
                &(h, w.clone()),
            )
            .sum_all()
        },
        &w,
    );
    assert_eq!(plain.to_vec::<f64>(), remated.to_vec::<f64>());
}

#[test]
fn remat_under_hvp_works_through_the_backward_pass() {
    let f = |x: &Tensor| rune::remat(|x: &Tensor| x.sin(), x).sum_all();
    let x = t64(&[0.2, 1.0], &[2]);
    let hv = rune::hvp(f, &x, &t64(&[1.0, 1.0], &[2]));
    close(&hv.to_vec::<f64>(), &[-0.2f64.sin(), -1.0f64.sin()], 1e-12);
}

#[test]
fn check_grads_accepts_right_and_rejects_wrong_gradients() {
    let x = t64(&[0.3, -0.7, 1.1], &[3]);
    assert!(rune::check_grads(|x: &Tensor| (x.exp() * x.cos()).sum_all(), &x).is_ok());
    let wrong = |x: &Tensor| {
        rune::custom_vjp(
            |x: &Tensor| (x.square().sum_all(), x.clone()),
            |x: &Tensor, ct: &Tensor| x * ct * 3.0,
            x,
        )
    };
    let err = rune::check_grads(wrong, &x).unwrap_err();
    assert!(err.contains("check_grads"), "{err}");
    let opts = rune::CheckGradsOpts::default();
    assert_eq!((opts.tol, opts.eps), (1e-2, 1e-4));
    assert!(rune::check_grads_with(
        |x: &Tensor| x.sin().sum_all(),
        &x,
        rune::CheckGradsOpts {
            tol: 1e-6,
            eps: 1e-5
        }
    )
    .is_ok());
}

#[test]
fn integer_and_bool_inputs_of_differentiable_ops() {
    // take with integer indices: gradient scatters back.
    let x = t64(&[1.0, 2.0, 3.0], &[3]);
    let idx = Tensor::from_slice(&[2i32, 0, 2], &[3]);
    let g = rune::grad(|x: &Tensor| x.take(&idx, 0).sum_all(), &x);
    assert_eq!(g.to_vec::<f64>(), vec![1.0, 0.0, 2.0]);
    // where with a bool condition.
    let c = Tensor::from_slice(&[true, false, true], &[3]);
    let g = rune::grad(
        |x: &Tensor| Tensor::where_(&c, &x.square(), &(x * 10.0)).sum_all(),
        &x,
    );
    assert_eq!(g.to_vec::<f64>(), vec![2.0, 10.0, 6.0]);
    // vjp and jvp give zeros / ignore integer leaves.
    let p = (x.clone(), Tensor::from_slice(&[1i32], &[1]));
    let (_, g) = rune::vjp(|(x, _): &(Tensor, Tensor)| x.sum_all(), &p, &s64(1.0));
    assert_eq!(g.1.dtype(), DType::I32);
    assert_eq!(g.1.to_vec::<i32>(), vec![0]);
}

#[test]
fn max_splits_ties_and_reductions_route_to_extremes() {
    let x = t64(&[1.0, 3.0, 3.0, 2.0], &[4]);
    let g = rune::grad(|x: &Tensor| x.max(&[0], false), &x);
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 0.5, 0.5, 0.0]);
    let g = rune::grad(|x: &Tensor| x.maximum(&x.full_like(2.0)).sum_all(), &x);
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 1.0, 1.0, 0.5]);
    let g = rune::grad(
        |x: &Tensor| x.prod(&[0], false),
        &t64(&[2.0, 0.0, 3.0], &[3]),
    );
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 6.0, 0.0]);
}

// ---------------------------------------------------------------------------
// Errors

#[test]
fn grad_refuses_integer_leaves_and_non_scalar_objectives() {
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| x.cast(DType::F32).sum_all(),
            &Tensor::from_slice(&[1i32], &[1]),
        );
    });
    assert!(m.contains("grad") && m.contains("i32"), "{m}");
    let m = panic_message(|| {
        rune::grad(|x: &Tensor| x.sum_all(), &Tensor::from_slice(&[true], &[1]));
    });
    assert!(m.contains("grad") && m.contains("bool"), "{m}");
    let m = panic_message(|| {
        rune::grad(|x: &Tensor| x * 2.0, &t64(&[1.0, 2.0], &[2]));
    });
    assert!(
        m.contains("grad") && m.contains("scalar") && m.contains("[2]"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::value_and_grad(|x: &Tensor| x * 2.0, &t64(&[1.0, 2.0], &[2]));
    });
    assert!(m.contains("value_and_grad"), "{m}");
    // One element of any rank is a scalar objective.
    let g = rune::grad(|x: &Tensor| x * 2.0, &t64(&[1.0], &[1, 1]));
    assert_eq!(g.to_vec::<f64>(), vec![2.0]);
}

#[test]
fn cotangent_and_tangent_shape_mismatches_panic() {
    let x = t64(&[1.0, 2.0], &[2]);
    let m = panic_message(|| {
        rune::vjp(|x: &Tensor| x.sin(), &x, &t64(&[1.0, 2.0, 3.0], &[3]));
    });
    assert!(
        m.contains("vjp") && m.contains("[3]") && m.contains("[2]"),
        "{m}"
    );
    let m = panic_message(|| {
        let (_, pb) = rune::vjp_fun(|x: &Tensor| x.sin(), &x);
        pb.call(&s64(1.0));
    });
    assert!(m.contains("vjp_fun") && m.contains("shape"), "{m}");
    let m = panic_message(|| {
        rune::jvp(|x: &Tensor| x.sin(), &x, &s64(1.0));
    });
    assert!(
        m.contains("jvp") && m.contains("tangent") && m.contains("[2]"),
        "{m}"
    );
}

#[test]
fn custom_rules_refuse_the_other_mode() {
    let m = panic_message(|| {
        rune::jvp(
            |x: &Tensor| {
                rune::custom_vjp(
                    |x: &Tensor| (x.sin(), ()),
                    |_: &(), c: &Tensor| c.clone(),
                    x,
                )
            },
            &s64(1.0),
            &s64(1.0),
        );
    });
    assert!(
        m.contains("custom_vjp") && m.contains("forward mode"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::jvp(
            |x: &Tensor| rune::remat(|x: &Tensor| x.sin(), x),
            &s64(1.0),
            &s64(1.0),
        );
    });
    assert!(m.contains("remat") && m.contains("forward mode"), "{m}");
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| {
                rune::custom_jvp(
                    |x: &Tensor| x.sin(),
                    |x: &Tensor, t: &Tensor| (x.sin(), t.clone()),
                    x,
                )
            },
            &s64(1.0),
        );
    });
    assert!(
        m.contains("custom_jvp") && m.contains("reverse mode"),
        "{m}"
    );
}

#[test]
fn mutation_of_differentiated_values_panics() {
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| {
                let y = x * 2.0;
                y.assign(&x.full_like(0.0));
                y.sum_all()
            },
            &t64(&[1.0, 2.0], &[2]),
        );
    });
    assert!(m.contains("assign") && m.contains("differentiated"), "{m}");
    let m = panic_message(|| {
        rune::jvp(
            |x: &Tensor| {
                let buf = Tensor::zeros(&[2], DType::F64);
                buf.blit(x);
                buf
            },
            &t64(&[1.0, 2.0], &[2]),
            &t64(&[1.0, 2.0], &[2]),
        );
    });
    assert!(m.contains("differentiated"), "{m}");
}

#[test]
fn structure_and_dtype_mismatches_of_cotangents_tangents_and_rules_panic() {
    let x = t64(&[1.0, 2.0], &[2]);
    let m = panic_message(|| {
        rune::vjp(|x: &Tensor| vec![x.sin()], &x, &vec![x.clone(), x.clone()]);
    });
    assert!(
        m.contains("vjp") && m.contains("2 leaves") && m.contains("has 1"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::vjp(|x: &Tensor| x.sin(), &x, &Tensor::ones(&[2], DType::F32));
    });
    assert!(
        m.contains("vjp") && m.contains("f32") && m.contains("f64"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::jvp(|x: &Tensor| x.sin(), &x, &Tensor::ones(&[2], DType::F32));
    });
    assert!(m.contains("jvp") && m.contains("dtype f32"), "{m}");
    let m = panic_message(|| {
        rune::jvp(
            |p: &Vec<Tensor>| p[0].sin(),
            &vec![x.clone()],
            &vec![x.clone(), x.clone()],
        );
    });
    assert!(
        m.contains("jvp") && m.contains("2 leaves") && m.contains("have 1"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::grad(|x: &Tensor| x.sum_all().cast(DType::I32), &x);
    });
    assert!(
        m.contains("grad") && m.contains("float scalar") && m.contains("i32"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| {
                rune::custom_vjp(
                    |x: &Tensor| (x.sum_all(), ()),
                    |_: &(), c: &Tensor| c.clone(),
                    x,
                )
            },
            &x,
        );
    });
    assert!(
        m.contains("custom_vjp") && m.contains("bwd") && m.contains("[2]"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::jvp(
            |x: &Tensor| {
                rune::custom_jvp(
                    |x: &Tensor| x.sin(),
                    |x: &Tensor, _: &Tensor| (x.sin(), s64(1.0)),
                    x,
                )
            },
            &x,
            &x,
        );
    });
    assert!(
        m.contains("custom_jvp") && m.contains("tangent leaf 0") && m.contains("[2]"),
        "{m}"
    );
}
