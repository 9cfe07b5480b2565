//! Convolution under the transformations: reverse mode against central
//! differences (f64) and against the naive reference's own linearity,
//! forward against reverse mode, vmap (input, kernel, both) against the
//! loop, jit against eager, grad under jit.

#[path = "../../nx/tests/conv_ref/mod.rs"]
mod conv_ref;

use conv_ref::{cases, conv_ref_opts, values, Case};
use nx::{ConvOpts, Padding};
use rune::prelude::*;
use rune::CheckGradsOpts;

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

fn inputs(c: &Case, seed: u64) -> (Tensor, Tensor) {
    let x = t(&values(seed, c.x.iter().product()), &c.x);
    let w = t(&values(seed + 1, c.w.iter().product()), &c.w);
    (x, w)
}

fn dot(a: &Tensor, b: &Tensor) -> f64 {
    (a * b).sum_all().item::<f64>()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

#[test]
fn reverse_mode_matches_central_differences() {
    for (i, c) in cases().iter().enumerate() {
        let (x, w) = inputs(c, 3 * i as u64);
        let out = x.conv(&w, c.opts.clone());
        let ws = t(&values(900 + i as u64, out.numel()), out.shape());
        let opts = c.opts.clone();
        let f = |p: &(Tensor, Tensor)| (p.0.conv(&p.1, opts.clone()) * &ws).sum_all();
        let r = rune::check_grads_with(
            f,
            &(x, w),
            CheckGradsOpts {
                tol: 1e-6,
                eps: 1e-4,
            },
        );
        assert!(r.is_ok(), "{}: {}", c.name, r.unwrap_err());
    }
}

#[test]
fn gradients_equal_the_references_linear_maps() {
    // The objective <ct, conv(x, w)> is linear in each argument, so its
    // gradient's entry j is the objective at the unit vector e_j: computed
    // with the naive reference, no differentiation involved.
    for (i, c) in cases().iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        let (x, w) = inputs(c, 50 + i as u64);
        let (xv, wv) = (x.to_vec::<f64>(), w.to_vec::<f64>());
        let out = x.conv(&w, c.opts.clone());
        let ctv = values(700 + i as u64, out.numel());
        let ct = t(&ctv, out.shape());
        let (_, (dx, dw)) = rune::vjp(
            |p: &(Tensor, Tensor)| p.0.conv(&p.1, c.opts.clone()),
            &(x.clone(), w.clone()),
            &ct,
        );
        let objective = |xv: &[f64], wv: &[f64]| {
            let (y, _) = conv_ref_opts(xv, &c.x, wv, &c.w, &c.opts);
            y.iter().zip(&ctv).map(|(a, b)| a * b).sum::<f64>()
        };
        let unit = |n: usize, j: usize| {
            let mut e = vec![0.0; n];
            e[j] = 1.0;
            e
        };
        let want_dx: Vec<f64> = (0..xv.len())
            .map(|j| objective(&unit(xv.len(), j), &wv))
            .collect();
        let want_dw: Vec<f64> = (0..wv.len())
            .map(|j| objective(&xv, &unit(wv.len(), j)))
            .collect();
        assert_eq!(dx.shape(), &c.x[..]);
        assert_eq!(dw.shape(), &c.w[..]);
        close(
            &dx.to_vec::<f64>(),
            &want_dx,
            1e-12,
            &format!("{}: dx", c.name),
        );
        close(
            &dw.to_vec::<f64>(),
            &want_dw,
            1e-12,
            &format!("{}: dw", c.name),
        );
    }
}

#[test]
fn forward_mode_is_the_transpose_of_reverse_mode() {
    for (i, c) in cases().iter().enumerate() {
        let (x, w) = inputs(c, 200 + 2 * i as u64);
        let (tx, tw) = inputs(c, 400 + 2 * i as u64);
        let opts = c.opts.clone();
        let f = |p: &(Tensor, Tensor)| p.0.conv(&p.1, opts.clone());
        let (out, tout) = rune::jvp(f, &(x.clone(), w.clone()), &(tx.clone(), tw.clone()));
        let ct = t(&values(600 + i as u64, out.numel()), out.shape());
        let (_, (dx, dw)) = rune::vjp(f, &(x, w), &ct);
        let lhs = dot(&dx, &tx) + dot(&dw, &tw);
        let rhs = dot(&ct, &tout);
        assert!(
            (lhs - rhs).abs() <= 1e-10 * lhs.abs().max(1.0),
            "{}: <vjp(ct), t> = {lhs}, <ct, jvp(t)> = {rhs}",
            c.name
        );
    }
}

fn batch(c: &Case, b: usize, shape: &[usize], seed: u64) -> Tensor {
    let mut s = vec![b];
    s.extend_from_slice(shape);
    let _ = c;
    t(&values(seed, s.iter().product()), &s)
}

#[test]
fn vmap_over_input_kernel_and_both_equals_the_loop() {
    let b = 3;
    for (i, c) in cases().iter().enumerate() {
        let (x, w) = inputs(c, 1000 + i as u64);
        let xb = batch(c, b, &c.x, 2000 + i as u64);
        let wb = batch(c, b, &c.w, 3000 + i as u64);
        let opts = c.opts.clone();
        let lane = |xi: &Tensor, wi: &Tensor| xi.conv(wi, opts.clone());
        let stack =
            |f: &dyn Fn(usize) -> Tensor| Tensor::stack(&(0..b).map(f).collect::<Vec<_>>(), 0);
        let got = rune::vmap(|xi: &Tensor| lane(xi, &w), &xb);
        let want = stack(&|k| lane(&xb.get(k), &w));
        close(
            &got.to_vec::<f64>(),
            &want.to_vec::<f64>(),
            1e-12,
            &format!("{}: input", c.name),
        );
        let got = rune::vmap(|wi: &Tensor| lane(&x, wi), &wb);
        let want = stack(&|k| lane(&x, &wb.get(k)));
        assert_eq!(got.shape(), want.shape());
        close(
            &got.to_vec::<f64>(),
            &want.to_vec::<f64>(),
            1e-12,
            &format!("{}: kernel", c.name),
        );
        let got = rune::vmap(
            |p: &(Tensor, Tensor)| lane(&p.0, &p.1),
            &(xb.clone(), wb.clone()),
        );
        let want = stack(&|k| lane(&xb.get(k), &wb.get(k)));
        assert_eq!(got.shape(), want.shape());
        close(
            &got.to_vec::<f64>(),
            &want.to_vec::<f64>(),
            1e-12,
            &format!("{}: both", c.name),
        );
    }
}

#[test]
fn vmap_of_grad_gives_per_example_gradients() {
    // Batched cotangents and operands inside the transposes' convolutions.
    for c in cases().iter().filter(|c| c.opts.feature_group_count > 1) {
        let b = 2;
        let (_, w) = inputs(c, 7);
        let xb = batch(c, b, &c.x, 8);
        let opts = c.opts.clone();
        let loss = |p: &(Tensor, Tensor)| p.0.conv(&p.1, opts.clone()).sin().sum_all();
        let g = |xi: &Tensor| rune::grad(loss, &(xi.clone(), w.clone()));
        let (gx, gw) = rune::vmap(g, &xb);
        for k in 0..b {
            let (ex, ew) = g(&xb.get(k));
            let what = format!("{}: lane {k}", c.name);
            close(
                &gx.get(k).to_vec::<f64>(),
                &ex.to_vec::<f64>(),
                1e-12,
                &what,
            );
            close(
                &gw.get(k).to_vec::<f64>(),
                &ew.to_vec::<f64>(),
                1e-12,
                &what,
            );
        }
    }
}

#[test]
fn jit_equals_eager_and_grad_runs_under_jit() {
    for (i, c) in cases().iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        let (x, w) = inputs(c, 5000 + i as u64);
        let opts = c.opts.clone();
        let f = |p: &(Tensor, Tensor)| (p.0.conv(&p.1, opts.clone()) * 2.0).tanh();
        let eager = f(&(x.clone(), w.clone()));
        let jitted = rune::jit(f).call(&(x.clone(), w.clone()));
        assert_eq!(jitted.shape(), eager.shape());
        close(
            &jitted.to_vec::<f64>(),
            &eager.to_vec::<f64>(),
            1e-12,
            c.name,
        );
        let loss = |p: &(Tensor, Tensor)| f(p).sum_all();
        let (gx, gw) = rune::grad(loss, &(x.clone(), w.clone()));
        let (jx, jw) = rune::jit(|p: &(Tensor, Tensor)| rune::grad(loss, p)).call(&(x, w));
        close(&jx.to_vec::<f64>(), &gx.to_vec::<f64>(), 1e-12, c.name);
        close(&jw.to_vec::<f64>(), &gw.to_vec::<f64>(), 1e-12, c.name);
    }
}

#[test]
fn conv_transpose_is_the_input_gradient_of_conv() {
    // API.md: conv_transpose(y, w) with conv's strides is the gradient of
    // conv w.r.t. its input (VALID, stride dividing in - k).
    let x = t(&values(1, 2 * 3 * 9), &[2, 3, 9]);
    let w = t(&values(2, 4 * 3 * 3), &[4, 3, 3]);
    let opts = ConvOpts {
        strides: vec![2],
        ..Default::default()
    };
    let y = x.conv(&w, opts.clone());
    let ct = t(&values(3, y.numel()), y.shape());
    let (_, dx) = rune::vjp(|x: &Tensor| x.conv(&w, opts.clone()), &x, &ct);
    let z = ct.conv_transpose(&w, opts);
    assert_eq!(z.shape(), x.shape());
    close(
        &z.to_vec::<f64>(),
        &dx.to_vec::<f64>(),
        1e-12,
        "conv_transpose",
    );
    // And conv_transpose differentiates (it is a conv).
    let f = |p: &(Tensor, Tensor)| {
        p.0.conv_transpose(
            &p.1,
            ConvOpts {
                strides: vec![2],
                padding: Padding::Same,
                ..Default::default()
            },
        )
        .sum_all()
    };
    let r = rune::check_grads(f, &(ct, w));
    assert!(r.is_ok(), "{}", r.unwrap_err());
}
