//! Issue 15: no silent wrong gradients. A backward pass over a value written
//! in place since it was recorded panics; every function that
//! differentiates with respect to its input refuses integer and boolean
//! inputs; derivatives at kinks follow JAX (the table in `rune`'s crate
//! docs), each checked against the value JAX gives.

use rune::prelude::*;
mod common;
use common::{panic_message, t64};

fn ones(shape: &[usize]) -> Tensor {
    Tensor::ones(shape, DType::F64)
}

/// Panics unless `m` is the stale-residual message naming `op`.
fn assert_stale(m: &str, op: &str) {
    assert!(
        m.contains(&format!("`{op}`")) && m.contains("modified in place") && m.contains(".copy()"),
        "expected the stale-residual panic naming `{op}`, got: {m}"
    );
}

// ---------------------------------------------------------------------------
// 1. Mutation after recording

#[test]
fn pullback_after_assign_on_the_parameter_panics() {
    let x = t64(&[1.0, 2.0, 3.0], &[3]);
    // square is x * x: mul keeps both operands, here x's own storage.
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.square(), &x);
    assert_eq!(pb.call(&ones(&[3])).to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
    x.assign(&t64(&[10.0, 20.0, 30.0], &[3]));
    assert_stale(&panic_message(|| drop(pb.call(&ones(&[3])))), "mul");
}

#[test]
fn pullback_after_assign_through_a_view_panics() {
    let x = t64(&[1.0, 2.0, 3.0], &[3]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.square(), &x);
    x.narrow(0, 1, 1).assign(&Tensor::scalar(7.0f64));
    assert_stale(&panic_message(|| drop(pb.call(&ones(&[3])))), "mul");
}

#[test]
fn pullback_after_assign_on_a_capture_panics() {
    let x = t64(&[1.0, 2.0], &[2]);
    let c = t64(&[3.0, 4.0], &[2]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| (x * &c).sum_all(), &x);
    c.assign(&t64(&[0.0, 0.0], &[2]));
    assert_stale(
        &panic_message(|| drop(pb.call(&Tensor::scalar(1.0f64)))),
        "mul",
    );

    // A captured weight of a matrix product.
    let w = t64(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.matmul(&w).sum_all(), &x);
    w.blit(&w.zeros_like());
    assert_stale(
        &panic_message(|| drop(pb.call(&Tensor::scalar(1.0f64)))),
        "dot_general",
    );

    // A captured condition of where_ and captured indices of take.
    let cond = Tensor::from_slice(&[true, false], &[2]);
    let (_, pb) = rune::vjp_fun(
        |x: &Tensor| Tensor::where_(&cond, x, &x.zeros_like()).sum_all(),
        &x,
    );
    cond.assign(&Tensor::from_slice(&[false, true], &[2]));
    assert_stale(
        &panic_message(|| drop(pb.call(&Tensor::scalar(1.0f64)))),
        "where",
    );
    let idx = Tensor::from_slice(&[0i32, 0], &[2]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.take(&idx, 0).sum_all(), &x);
    idx.assign(&Tensor::from_slice(&[1i32, 1], &[2]));
    assert_stale(
        &panic_message(|| drop(pb.call(&Tensor::scalar(1.0f64)))),
        "gather",
    );
}

#[test]
fn pullback_after_assign_on_the_returned_output_panics() {
    // exp's derivative is its result: the output vjp_fun returns.
    let x = t64(&[0.0, 1.0], &[2]);
    let (y, pb) = rune::vjp_fun(|x: &Tensor| x.exp(), &x);
    y.assign(&y.zeros_like());
    assert_stale(&panic_message(|| drop(pb.call(&ones(&[2])))), "exp");
}

#[test]
fn in_place_write_inside_grad_after_the_value_was_used_panics() {
    let x = t64(&[1.0, 2.0], &[2]);
    let c = t64(&[3.0, 4.0], &[2]);
    let m = panic_message(|| {
        rune::grad(
            |x: &Tensor| {
                let y = (x * &c).sum_all();
                c.assign(&c.zeros_like());
                y
            },
            &x,
        );
    });
    assert_stale(&m, "mul");
    let c = t64(&[3.0, 4.0], &[2]);
    let m = panic_message(|| {
        rune::value_and_grad(
            |x: &Tensor| {
                let y = x.matmul(&c);
                c.assign(&c.zeros_like());
                y
            },
            &x,
        );
    });
    assert_stale(&m, "dot_general");
}

#[test]
fn remat_after_assign_on_its_input_panics() {
    // remat keeps its inputs and recomputes from them.
    let x = t64(&[0.5, -1.0], &[2]);
    let (_, pb) = rune::vjp_fun(
        |x: &Tensor| rune::remat(|x: &Tensor| x.sin(), x).sum_all(),
        &x,
    );
    x.assign(&x.zeros_like());
    assert_stale(
        &panic_message(|| drop(pb.call(&Tensor::scalar(1.0f64)))),
        "remat",
    );
}

#[test]
fn a_copy_taken_before_mutation_still_works() {
    let x = t64(&[1.0, 2.0, 3.0], &[3]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.square(), &x.copy());
    x.assign(&t64(&[10.0, 20.0, 30.0], &[3]));
    assert_eq!(pb.call(&ones(&[3])).to_vec::<f64>(), vec![2.0, 4.0, 6.0]);

    // A captured copy.
    let c = t64(&[3.0, 4.0], &[2]);
    let c0 = c.copy();
    let (_, pb) = rune::vjp_fun(|x: &Tensor| (x * &c0).sum_all(), &t64(&[1.0, 1.0], &[2]));
    c.assign(&c.zeros_like());
    assert_eq!(
        pb.call(&Tensor::scalar(1.0f64)).to_vec::<f64>(),
        vec![3.0, 4.0]
    );

    // Inside grad: the function reads a copy, then writes the original.
    let c = t64(&[3.0, 4.0], &[2]);
    let g = rune::grad(
        |x: &Tensor| {
            let y = (x * &c.copy()).sum_all();
            c.assign(&c.zeros_like());
            y
        },
        &t64(&[1.0, 2.0], &[2]),
    );
    assert_eq!(g.to_vec::<f64>(), vec![3.0, 4.0]);
}

#[test]
fn a_pullback_whose_residuals_were_not_touched_still_works() {
    let x = t64(&[0.5, 1.0], &[2]);
    let want: Vec<f64> = [0.5f64, 1.0].iter().map(|v| v.cos()).collect();
    // sin keeps cos(x), a fresh value: writing x afterwards changes nothing
    // the backward pass reads.
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.sin(), &x);
    x.assign(&x.zeros_like());
    assert_eq!(pb.call(&ones(&[2])).to_vec::<f64>(), want);
    // Writes to unrelated tensors.
    let other = t64(&[1.0, 2.0], &[2]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.square(), &t64(&[1.0, 2.0], &[2]));
    other.assign(&other.zeros_like());
    assert_eq!(pb.call(&ones(&[2])).to_vec::<f64>(), vec![2.0, 4.0]);
    // Writes made before the forward pass (a buffer filled in place, then used).
    let buf = Tensor::zeros(&[2], DType::F64);
    buf.assign(&t64(&[5.0, 6.0], &[2]));
    let g = rune::grad(|x: &Tensor| (x * &buf).sum_all(), &t64(&[1.0, 1.0], &[2]));
    assert_eq!(g.to_vec::<f64>(), vec![5.0, 6.0]);
    // The usual training step: grad returns before the parameters are written.
    let w = t64(&[1.0, -1.0], &[2]);
    for _ in 0..3 {
        let g = rune::grad(|w: &Tensor| w.square().sum_all(), &w);
        w.assign(&(&w - &g * 0.25));
    }
    assert_eq!(w.to_vec::<f64>(), vec![0.125, -0.125]);
}

#[test]
fn versions_count_in_place_writes_only() {
    let x = t64(&[1.0, 2.0], &[2]);
    let v = x.version().unwrap();
    let _ = &x * 2.0;
    assert_eq!(x.version(), Some(v));
    x.assign(&x.zeros_like());
    assert_eq!(x.version(), Some(v + 1));
    // Views share the counter; copies start their own.
    assert_eq!(x.reshape(&[2, 1]).version(), Some(v + 1));
    assert_eq!(x.copy().version(), Some(0));
}

// ---------------------------------------------------------------------------
// 2. Integer and boolean inputs are refused

#[test]
fn jacobians_refuse_integer_and_bool_inputs() {
    let xi = Tensor::from_slice(&[1i32, 2], &[2]);
    let xb = Tensor::from_slice(&[true, false], &[2]);
    let f = |x: &Tensor| x.cast(DType::F64) * 2.0;
    let s = |x: &Tensor| x.cast(DType::F64).sum_all();
    for (name, m) in [
        ("jacrev", panic_message(|| drop(rune::jacrev(f, &xi)))),
        ("jacfwd", panic_message(|| drop(rune::jacfwd(f, &xi)))),
        ("hessian", panic_message(|| drop(rune::hessian(s, &xi)))),
    ] {
        assert_eq!(
            m,
            format!(
                "{name}: the input has integer dtype i32; differentiate with respect to a float tensor"
            )
        );
    }
    for (name, m) in [
        ("jacrev", panic_message(|| drop(rune::jacrev(f, &xb)))),
        ("jacfwd", panic_message(|| drop(rune::jacfwd(f, &xb)))),
        ("hessian", panic_message(|| drop(rune::hessian(s, &xb)))),
    ] {
        assert_eq!(
            m,
            format!(
                "{name}: the input has boolean dtype bool; differentiate with respect to a float tensor"
            )
        );
    }
}

#[test]
fn every_gradient_entry_point_refuses_integer_leaves() {
    let xi = Tensor::from_slice(&[1i32, 2], &[2]);
    let s = |x: &Tensor| x.cast(DType::F64).sum_all();
    let msgs = [
        ("grad", panic_message(|| drop(rune::grad(s, &xi)))),
        (
            "value_and_grad",
            panic_message(|| drop(rune::value_and_grad(s, &xi))),
        ),
        (
            "value_and_grad_aux",
            panic_message(|| drop(rune::value_and_grad_aux(|x: &Tensor| (s(x), ()), &xi))),
        ),
        ("hvp", panic_message(|| drop(rune::hvp(s, &xi, &xi)))),
        (
            "check_grads",
            panic_message(|| drop(rune::check_grads(s, &xi))),
        ),
    ];
    for (name, m) in msgs {
        assert!(
            m.starts_with(&format!("{name}: parameter leaf 0 has dtype i32;")),
            "{name}: {m}"
        );
    }
    // In a tree, the leaf is named by position; bool too.
    let p = (t64(&[1.0], &[1]), Tensor::from_slice(&[true], &[1]));
    let m = panic_message(|| drop(rune::hvp(|p: &(Tensor, Tensor)| p.0.sum_all(), &p, &p)));
    assert!(
        m.starts_with("hvp: parameter leaf 1 has dtype bool;"),
        "{m}"
    );
}

// ---------------------------------------------------------------------------
// 3. JAX's conventions at kinks
//
// Expected values are JAX's (jax 0.10, x64), derived from its rules and
// confirmed by running them: e.g. `jax.vmap(jax.grad(jnp.abs))` of
// `[-2., 0., 3., -0.]` is `[-1, 1, 1, 1]`.

/// The elementwise derivative of `f` at each element of `x`, in reverse
/// mode (vmap of grad) and in forward mode (jvp along ones).
fn derivs(f: impl Fn(&Tensor) -> Tensor, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let xs = t64(x, &[x.len()]);
    let rev = rune::vmap(|x: &Tensor| rune::grad(&f, x), &xs);
    let fwd = rune::jvp(&f, &xs, &xs.ones_like()).1;
    (rev.to_vec::<f64>(), fwd.to_vec::<f64>())
}

/// Equal, with NaN equal to NaN and zeros of either sign equal.
fn same(got: &[f64], want: &[f64]) -> bool {
    got.len() == want.len()
        && got
            .iter()
            .zip(want)
            .all(|(g, w)| (g.is_nan() && w.is_nan()) || g == w)
}

fn check(name: &str, f: impl Fn(&Tensor) -> Tensor, x: &[f64], want: &[f64]) {
    let (rev, fwd) = derivs(f, x);
    assert!(
        same(&rev, want),
        "{name} (reverse) at {x:?}: {rev:?}, JAX: {want:?}"
    );
    assert!(
        same(&fwd, want),
        "{name} (forward) at {x:?}: {fwd:?}, JAX: {want:?}"
    );
}

#[test]
fn abs_at_zero_is_one_as_in_jax() {
    // select(x >= 0, 1, -1): 1 at 0 and -0.0, -1 at NaN.
    check(
        "abs",
        |x| x.abs(),
        &[-2.0, 0.0, 3.0, -0.0, f64::NAN],
        &[-1.0, 1.0, 1.0, 1.0, -1.0],
    );
    // Its second derivative is 0 everywhere, the kink included.
    let h = rune::hessian(|x: &Tensor| x.abs().sum_all(), &t64(&[0.0], &[1]));
    assert_eq!(h.to_vec::<f64>(), vec![0.0]);
}

#[test]
fn relu_at_zero_is_zero_as_in_jax() {
    // jax.nn.relu: select(x > 0, 1, 0).
    check(
        "relu",
        |x| x.relu(),
        &[-1.0, 0.0, -0.0, 2.0],
        &[0.0, 0.0, 0.0, 1.0],
    );
}

#[test]
fn max_and_min_split_ties_evenly_as_in_jax() {
    // lax.max/lax.min: 1/2 to each operand on a tie.
    let pair = |f: fn(&Tensor, &Tensor) -> Tensor, a: f64, b: f64| {
        let g = rune::grad(
            |p: &(Tensor, Tensor)| f(&p.0, &p.1),
            &(Tensor::scalar(a), Tensor::scalar(b)),
        );
        (g.0.item::<f64>(), g.1.item::<f64>())
    };
    assert_eq!(pair(|a, b| a.maximum(b), 1.0, 1.0), (0.5, 0.5));
    assert_eq!(pair(|a, b| a.maximum(b), 2.0, 1.0), (1.0, 0.0));
    assert_eq!(pair(|a, b| a.minimum(b), 1.0, 1.0), (0.5, 0.5));
    assert_eq!(pair(|a, b| a.minimum(b), 2.0, 1.0), (0.0, 1.0));
    // Reductions share the derivative among the tied extremes.
    let g = rune::grad(
        |x: &Tensor| x.max(&[0], false),
        &t64(&[1.0, 3.0, 3.0, 2.0], &[4]),
    );
    assert_eq!(g.to_vec::<f64>(), vec![0.0, 0.5, 0.5, 0.0]);
    let g = rune::grad(
        |x: &Tensor| x.min(&[0], false),
        &t64(&[1.0, 0.0, 0.0, 2.0, 0.0], &[5]),
    );
    let third = 1.0 / 3.0;
    assert_eq!(g.to_vec::<f64>(), vec![0.0, third, third, 0.0, third]);
    // clamp is maximum then minimum, as jnp.clip: 1/2 at each bound.
    check(
        "clamp(0, 1)",
        |x| x.clamp(0.0, 1.0),
        &[-1.0, 0.0, 0.5, 1.0, 2.0],
        &[0.0, 0.5, 1.0, 0.5, 0.0],
    );
}

#[test]
fn sqrt_at_zero_is_infinite_as_in_jax() {
    // 0.5 / sqrt(x): +inf at 0, -inf at -0.0 (sqrt(-0.0) = -0.0).
    check(
        "sqrt",
        |x| x.sqrt(),
        &[0.0, -0.0, 4.0],
        &[f64::INFINITY, f64::NEG_INFINITY, 0.25],
    );
}

#[test]
fn pow_at_zero_follows_jax() {
    // d/dx x^y = y * x^(y-1) (no case for y = 0, so 0 * inf = NaN at
    // x = y = 0); d/dy x^y = log(x == 0 ? 1 : x) * x^y, so 0 at x = 0.
    let d = |x: f64, y: f64| {
        let g = rune::grad(
            |p: &(Tensor, Tensor)| p.0.pow(&p.1),
            &(Tensor::scalar(x), Tensor::scalar(y)),
        );
        vec![g.0.item::<f64>(), g.1.item::<f64>()]
    };
    let cases = [
        (0.0, 0.0, [f64::NAN, 0.0]),
        (0.0, 0.5, [f64::INFINITY, 0.0]),
        (0.0, 1.0, [1.0, 0.0]),
        (0.0, 2.0, [0.0, 0.0]),
        (0.0, 3.0, [0.0, 0.0]),
        (2.0, 0.0, [0.0, std::f64::consts::LN_2]),
        (-2.0, 2.0, [-4.0, f64::NAN]),
    ];
    for (x, y, want) in cases {
        let got = d(x, y);
        assert!(
            same(&got, &want),
            "pow at ({x}, {y}): {got:?}, JAX: {want:?}"
        );
    }
    // Forward mode agrees.
    let (_, t) = rune::jvp(
        |p: &(Tensor, Tensor)| p.0.pow(&p.1),
        &(t64(&[0.0, 0.0, 0.0], &[3]), t64(&[0.0, 0.5, 2.0], &[3])),
        &(ones(&[3]), Tensor::zeros(&[3], DType::F64)),
    );
    assert!(same(&t.to_vec::<f64>(), &[f64::NAN, f64::INFINITY, 0.0]));
}

#[test]
fn rounding_functions_have_zero_derivative_as_in_jax() {
    let x = [-1.5, -0.5, 0.0, 0.5, 2.7, 3.0];
    let zeros = [0.0; 6];
    check("floor", |x| x.floor(), &x, &zeros);
    check("ceil", |x| x.ceil(), &x, &zeros);
    check("round", |x| x.round(), &x, &zeros);
    check("trunc", |x| x.trunc(), &x, &zeros);
    check("sign", |x| x.sign(), &x, &zeros);
}

#[test]
fn softplus_at_zero_is_one_half_as_in_jax() {
    // jax.nn.softplus' derivative is sigmoid(x), 1/2 at 0.
    let (rev, fwd) = derivs(|x| x.softplus(), &[-1.0, 0.0, 2.0]);
    let want: Vec<f64> = [-1.0f64, 0.0, 2.0]
        .iter()
        .map(|v| 1.0 / (1.0 + (-v).exp()))
        .collect();
    for got in [rev, fwd] {
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-15, "{got:?} vs {want:?}");
        }
    }
}
