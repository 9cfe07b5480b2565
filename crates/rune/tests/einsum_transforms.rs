//! `nx::einsum` under the transformations: gradients by `check_grads` (f64)
//! and against the closed forms for a product, vmap against a loop over the
//! examples, jit against eager, for specs covering products, diagonals,
//! ellipses, implicit output and three operands.

use rune::prelude::*;
use rune::VmapOpts;
mod common;

fn t(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(v, shape)
}

fn assert_close(a: &Tensor, b: &Tensor, tol: f64, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    let (x, y) = (a.to_vec::<f64>(), b.to_vec::<f64>());
    for (i, (p, q)) in x.iter().zip(&y).enumerate() {
        assert!(
            (p - q).abs() <= tol * (1.0 + q.abs()),
            "{what}: element {i}: {p} vs {q}"
        );
    }
}

/// (spec, operand shapes)
const CASES: &[(&str, &[&[usize]])] = &[
    ("ij,jk->ik", &[&[3, 4], &[4, 2]]),
    ("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 3]]),
    ("ii->i", &[&[4, 4]]),
    ("iij->j", &[&[3, 3, 2]]),
    ("...ij,...jk", &[&[2, 3, 4], &[4, 2]]),
    ("ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 2]]),
    ("i,j->ij", &[&[3], &[4]]),
    ("ab,cb->", &[&[2, 3], &[4, 3]]),
];

fn operands(shapes: &[&[usize]], seed: u64) -> Vec<Tensor> {
    shapes
        .iter()
        .enumerate()
        .map(|(k, s)| t(s, seed + k as u64))
        .collect()
}

fn apply(spec: &str, xs: &[Tensor]) -> Tensor {
    let r: Vec<&Tensor> = xs.iter().collect();
    nx::einsum(spec, &r)
}

#[test]
fn gradients() {
    for &(spec, shapes) in CASES {
        let xs = operands(shapes, 3);
        // A nonlinear head so every output element's cotangent differs.
        let f = |p: &Vec<Tensor>| apply(spec, p).sin().sum_all();
        rune::check_grads(f, &xs).unwrap_or_else(|e| panic!("{spec}: {e}"));
    }
    // Closed forms: d/dA sum(A B) = 1 B^T, d/dB = A^T 1.
    let (a, b) = (t(&[3, 4], 1), t(&[4, 2], 2));
    let g = rune::grad(
        |p: &(Tensor, Tensor)| nx::einsum("ij,jk->ik", &[&p.0, &p.1]).sum_all(),
        &(a.clone(), b.clone()),
    );
    let ones = Tensor::ones(&[3, 2], DType::F64);
    assert_close(&g.0, &ones.matmul(&b.transpose()), 1e-12, "dA");
    assert_close(&g.1, &a.transpose().matmul(&ones), 1e-12, "dB");
    // The trace's gradient is the identity.
    let s = t(&[4, 4], 5);
    let g = rune::grad(|x: &Tensor| nx::einsum("ii", &[x]), &s);
    assert_close(&g, &Tensor::eye(4, DType::F64), 0.0, "d trace");
}

#[test]
fn vmap_equals_the_loop() {
    for &(spec, shapes) in CASES {
        let n = 3;
        // Every operand mapped over a leading axis of 3.
        let xs: Vec<Tensor> = shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let mut sh = vec![n];
                sh.extend_from_slice(s);
                t(&sh, 40 + k as u64)
            })
            .collect();
        let got = rune::vmap(|p: &Vec<Tensor>| apply(spec, p), &xs);
        let lanes: Vec<Tensor> = (0..n)
            .map(|i| apply(spec, &xs.iter().map(|x| x.get(i)).collect::<Vec<_>>()))
            .collect();
        assert_close(&got, &Tensor::stack(&lanes, 0), 1e-12, spec);
        // Only the first operand mapped, along its last axis.
        let mut first = xs[0].get(0);
        let lanes_in: Vec<Tensor> = (0..n).map(|i| &first + i as f64).collect();
        first = Tensor::stack(&lanes_in, -1);
        let mut args = vec![first];
        args.extend(xs[1..].iter().map(|x| x.get(1)));
        let mut in_axes = vec![Some(-1)];
        in_axes.extend(std::iter::repeat_n(None, args.len() - 1));
        let got = rune::vmap_with(
            |p: &Vec<Tensor>| apply(spec, p),
            &args,
            VmapOpts {
                in_axes: Some(in_axes),
                out_axis: 0,
            },
        );
        let lanes: Vec<Tensor> = (0..n)
            .map(|i| {
                let mut ops = vec![lanes_in[i].clone()];
                ops.extend(args[1..].iter().cloned());
                apply(spec, &ops)
            })
            .collect();
        assert_close(
            &got,
            &Tensor::stack(&lanes, 0),
            1e-12,
            &format!("{spec}, one mapped"),
        );
    }
}

#[test]
fn jit_equals_eager() {
    for &(spec, shapes) in CASES {
        let xs = operands(shapes, 60);
        let f = rune::jit(move |p: &Vec<Tensor>| apply(spec, p));
        let eager = apply(spec, &xs);
        assert_close(&f.call(&xs), &eager, 1e-12, spec);
        // A second call with new values reuses the program.
        let ys = operands(shapes, 70);
        assert_close(&f.call(&ys), &apply(spec, &ys), 1e-12, spec);
        assert_eq!(f.trace_count(), 1, "{spec}");
    }
    // The gradient, jitted.
    let (a, b) = (t(&[3, 4], 8), t(&[4, 4], 9));
    let loss = |p: &(Tensor, Tensor)| {
        nx::einsum("ij,jk,kk->i", &[&p.0, &p.1, &p.1])
            .square()
            .sum_all()
    };
    let g = rune::jit(move |p: &(Tensor, Tensor)| rune::grad(loss, p));
    let want = rune::grad(loss, &(a.clone(), b.clone()));
    let got = g.call(&(a, b));
    assert_close(&got.0, &want.0, 1e-12, "jit grad a");
    assert_close(&got.1, &want.1, 1e-12, "jit grad b");
}

#[test]
fn f32_under_jit_and_vmap() {
    let a = t(&[2, 3, 4], 11).cast(DType::F32);
    let b = t(&[2, 4, 5], 12).cast(DType::F32);
    let eager = nx::einsum("bij,bjk->bki", &[&a, &b]);
    let jitted = rune::jit(|p: &(Tensor, Tensor)| nx::einsum("bij,bjk->bki", &[&p.0, &p.1]));
    let j = jitted.call(&(a.clone(), b.clone()));
    let v = rune::vmap(
        |p: &(Tensor, Tensor)| nx::einsum("ij,jk->ki", &[&p.0, &p.1]),
        &(a, b),
    );
    let e = eager.cast(DType::F64);
    assert_close(&j.cast(DType::F64), &e, 1e-6, "jit f32");
    assert_close(&v.cast(DType::F64), &e, 1e-6, "vmap f32");
}

#[test]
fn error_under_a_transformation_names_einsum() {
    let x = t(&[2, 3], 1);
    let msg = common::panic_message(|| {
        let _ = rune::grad(|p: &Tensor| nx::einsum("ij,jk", &[p]).sum_all(), &x);
    });
    assert!(msg.starts_with("einsum: "), "{msg}");
}
