//! vmap's semantics (shapes seen inside, in_axes/out_axis, broadcasting of
//! unbatched results, errors), its composition with differentiation, and the
//! Jacobians built on it.

use rune::prelude::*;
mod common;
use common::{panic_message, t64};
use rune::VmapOpts;
use std::cell::Cell;

fn close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape(), "{a:?} vs {b:?}");
    for (x, y) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()) {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{a}\nvs\n{b}");
    }
}

#[test]
fn the_mapped_function_sees_unbatched_shapes() {
    let xs = t64(&(0..24).map(f64::from).collect::<Vec<_>>(), &[4, 2, 3]);
    let out = rune::vmap(
        |x: &Tensor| {
            assert_eq!(x.shape(), &[2, 3]);
            assert_eq!(x.ndim(), 2);
            x.sum(&[1], false)
        },
        &xs,
    );
    assert_eq!(out.shape(), &[4, 2]);
    close(&out, &xs.sum(&[2], false), 0.0);
}

#[test]
fn in_axes_out_axis_and_constants() {
    let a = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = t64(&[10.0, 20.0], &[2]);
    // Map a over axis 1 (negative: -1), b unmapped; out_axis 1.
    let out = rune::vmap_with(
        |(a, b): &(Tensor, Tensor)| a + b,
        &(a.clone(), b.clone()),
        VmapOpts {
            in_axes: Some(vec![Some(-1), None]),
            out_axis: 1,
        },
    );
    assert_eq!(out.shape(), &[2, 3]);
    assert_eq!(
        out.to_vec::<f64>(),
        vec![11.0, 12.0, 13.0, 24.0, 25.0, 26.0]
    );
    // out_axis -1 puts the batch axis last.
    let out = rune::vmap_with(
        |a: &Tensor| a * 2.0,
        &a,
        VmapOpts {
            in_axes: None,
            out_axis: -1,
        },
    );
    assert_eq!(out.shape(), &[3, 2]);
    close(&out, &(&a * 2.0).transpose(), 0.0);
}

#[test]
fn results_that_do_not_depend_on_mapped_inputs_are_broadcast() {
    let xs = t64(&[1.0, 2.0, 3.0], &[3]);
    let (c, y) = rune::vmap(|x: &Tensor| (Tensor::ones(&[2], DType::F32), x * 2.0), &xs);
    assert_eq!(c.shape(), &[3, 2]);
    assert_eq!(c.to_vec::<f32>(), vec![1.0; 6]);
    assert_eq!(y.to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
}

#[test]
fn structured_inputs_and_outputs() {
    #[derive(Ptree, Clone)]
    struct Pair {
        a: Tensor,
        b: Tensor,
    }
    let p = Pair {
        a: t64(&[1.0, 2.0], &[2]),
        b: t64(&[3.0, 4.0, 5.0, 6.0], &[2, 2]),
    };
    let out: Pair = rune::vmap(
        |p: &Pair| Pair {
            a: &p.a * &p.b.sum_all(),
            b: p.b.flip(&[0]),
        },
        &p,
    );
    assert_eq!(out.a.to_vec::<f64>(), vec![7.0, 22.0]);
    assert_eq!(out.b.to_vec::<f64>(), vec![4.0, 3.0, 6.0, 5.0]);
}

#[test]
fn closed_over_randomness_is_a_constant_of_the_map() {
    nx::seed(7);
    let noise = Tensor::rand(&[4], DType::F32);
    let xs = Tensor::zeros(&[3, 4], DType::F32);
    let out = rune::vmap(|x: &Tensor| x + &noise, &xs);
    let rows: Vec<Vec<f32>> = (0..3).map(|i| out.get(i).to_vec::<f32>()).collect();
    assert_eq!(rows[0], rows[1]);
    assert_eq!(rows[1], rows[2]);
}

#[test]
fn errors_name_the_problem() {
    let a = t64(&[1.0, 2.0, 3.0], &[3]);
    let b = t64(&[1.0, 2.0], &[2]);
    let pair = (a.clone(), b.clone());
    let f = |(a, b): &(Tensor, Tensor)| a.sum_all() + b.sum_all();
    let m = panic_message(|| {
        rune::vmap_with(
            f,
            &pair,
            VmapOpts {
                in_axes: Some(vec![Some(0)]),
                out_axis: 0,
            },
        );
    });
    assert!(
        m.contains("vmap") && m.contains("1 entries") && m.contains("2 leaves"),
        "{m}"
    );
    let m = panic_message(|| {
        rune::vmap_with(
            f,
            &pair,
            VmapOpts {
                in_axes: Some(vec![None, None]),
                out_axis: 0,
            },
        );
    });
    assert!(m.contains("maps no leaf"), "{m}");
    let m = panic_message(|| {
        rune::vmap_with(
            f,
            &pair,
            VmapOpts {
                in_axes: Some(vec![Some(1), None]),
                out_axis: 0,
            },
        );
    });
    assert!(m.contains("out of bounds") && m.contains("[3]"), "{m}");
    let m = panic_message(|| {
        rune::vmap(f, &pair);
    });
    assert!(
        m.contains("disagree") && m.contains('3') && m.contains('2'),
        "{m}"
    );
    let m = panic_message(|| {
        rune::vmap(|x: &Tensor| x * 2.0, &Tensor::scalar(1.0f64));
    });
    assert!(m.contains("scalar"), "{m}");
    let m = panic_message(|| {
        rune::vmap(|x: &Tensor| Tensor::scalar(x.sum_all().item::<f64>()), &a);
    });
    assert!(m.contains("vmap") && m.contains("read"), "{m}");
}

// ---------------------------------------------------------------------------
// Composition

fn loss(w: &Tensor, x: &Tensor) -> Tensor {
    x.matmul(w).tanh().square().sum_all()
}

#[test]
fn vmap_of_grad_gives_per_example_gradients() {
    let w = t64(&[0.5, -0.2, 0.3, 0.8, -0.1, 0.4], &[3, 2]);
    let xs = t64(
        &[
            1.0, 2.0, -1.0, 0.5, 0.0, 1.5, -2.0, 1.0, 0.3, 0.7, 0.2, -0.4,
        ],
        &[4, 3],
    );
    let per = rune::vmap_with(
        |(w, x): &(Tensor, Tensor)| rune::grad(|w: &Tensor| loss(w, x), w),
        &(w.clone(), xs.clone()),
        VmapOpts {
            in_axes: Some(vec![None, Some(0)]),
            out_axis: 0,
        },
    );
    assert_eq!(per.shape(), &[4, 3, 2]);
    for i in 0..4 {
        let single = rune::grad(|w: &Tensor| loss(w, &xs.get(i)), &w);
        close(&per.get(i), &single, 1e-12);
    }
}

#[test]
fn grad_of_vmap_and_jvp_of_vmap() {
    let w = t64(&[0.5, -0.2, 0.3, 0.8, -0.1, 0.4], &[3, 2]);
    let xs = t64(&[1.0, 2.0, -1.0, 0.5, 0.0, 1.5], &[2, 3]);
    let batched = |w: &Tensor| {
        rune::vmap_with(
            |(w, x): &(Tensor, Tensor)| loss(w, x),
            &(w.clone(), xs.clone()),
            VmapOpts {
                in_axes: Some(vec![None, Some(0)]),
                out_axis: 0,
            },
        )
        .sum_all()
    };
    let looped = |w: &Tensor| loss(w, &xs.get(0)) + loss(w, &xs.get(1));
    close(&rune::grad(batched, &w), &rune::grad(looped, &w), 1e-12);
    let v = t64(&[1.0, 0.0, -1.0, 2.0, 0.5, 0.5], &[3, 2]);
    close(
        &rune::jvp(batched, &w, &v).1,
        &rune::jvp(looped, &w, &v).1,
        1e-12,
    );
    // vmap of jvp: per-example directional derivatives.
    let d = rune::vmap_with(
        |(w, x): &(Tensor, Tensor)| rune::jvp(|w: &Tensor| loss(w, x), w, &v).1,
        &(w.clone(), xs.clone()),
        VmapOpts {
            in_axes: Some(vec![None, Some(0)]),
            out_axis: 0,
        },
    );
    for i in 0..2 {
        close(
            &d.get(i),
            &rune::jvp(|w: &Tensor| loss(w, &xs.get(i)), &w, &v).1,
            1e-12,
        );
    }
}

#[test]
fn nested_vmap_is_an_outer_product_of_maps() {
    let a = t64(&[1.0, 2.0, 3.0], &[3]);
    let b = t64(&[10.0, 20.0], &[2]);
    let out = rune::vmap_with(
        |(a, b): &(Tensor, Tensor)| {
            rune::vmap_with(
                |(a, b): &(Tensor, Tensor)| a * b,
                &(a.clone(), b.clone()),
                VmapOpts {
                    in_axes: Some(vec![None, Some(0)]),
                    out_axis: 0,
                },
            )
        },
        &(a.clone(), b.clone()),
        VmapOpts {
            in_axes: Some(vec![Some(0), None]),
            out_axis: 0,
        },
    );
    close(&out, &a.outer(&b), 0.0);
}

#[test]
fn vmap_of_a_pullback_transforms_the_backward_pass() {
    let x = t64(&[0.3, -0.5, 1.2], &[3]);
    let (_, pb) = rune::vjp_fun(|x: &Tensor| x.sin() * x.sum_all(), &x);
    let cts = Tensor::eye(3, DType::F64);
    let rows = rune::vmap(|ct: &Tensor| pb.call(ct), &cts);
    for i in 0..3 {
        close(&rows.get(i), &pb.call(&cts.get(i)), 1e-14);
    }
}

#[test]
fn custom_rules_and_remat_under_vmap() {
    let xs = t64(&[0.1, 0.2, 0.3], &[3]);
    let f = |x: &Tensor| {
        rune::custom_vjp(
            |x: &Tensor| (x.sin(), x.clone()),
            |x: &Tensor, ct: &Tensor| ct * x.cos(),
            x,
        )
    };
    close(&rune::vmap(f, &xs), &xs.sin(), 0.0);
    let g = |x: &Tensor| {
        rune::custom_jvp(
            |x: &Tensor| x.exp(),
            |x: &Tensor, t: &Tensor| (x.exp(), x.exp() * t),
            x,
        )
    };
    close(&rune::vmap(g, &xs), &xs.exp(), 0.0);
    let r = rune::vmap(|x: &Tensor| rune::remat(|x: &Tensor| x.tanh(), x), &xs);
    close(&r, &xs.tanh(), 0.0);
    // grad of vmap of a custom-rule function: one contribution per lane.
    let gx = rune::grad(|xs: &Tensor| rune::vmap(f, xs).sum_all(), &xs);
    close(&gx, &xs.cos(), 1e-15);
    // The custom rule (not fwd's own derivative) is what an enclosing
    // differentiation sees through vmap, once per lane.
    let h = |x: &Tensor| {
        rune::custom_vjp(
            |x: &Tensor| (x.sin(), ()),
            |_: &(), ct: &Tensor| ct * 100.0,
            x,
        )
    };
    let gh = rune::grad(|xs: &Tensor| rune::vmap(h, xs).sum_all(), &xs);
    assert_eq!(gh.to_vec::<f64>(), vec![100.0; 3]);
    let k = |x: &Tensor| {
        rune::custom_jvp(
            |x: &Tensor| x.exp(),
            |x: &Tensor, t: &Tensor| (x.exp(), t * 7.0),
            x,
        )
    };
    let (_, dk) = rune::jvp(
        |xs: &Tensor| rune::vmap(k, xs),
        &xs,
        &Tensor::ones(&[3], DType::F64),
    );
    assert_eq!(dk.to_vec::<f64>(), vec![7.0; 3]);
    // vmap of grad through remat.
    let gr = rune::vmap(
        |x: &Tensor| rune::grad(|x: &Tensor| rune::remat(|x: &Tensor| x.tanh(), x), x),
        &xs,
    );
    close(&gr, &(xs.tanh().square().neg() + 1.0), 1e-15);
}

// ---------------------------------------------------------------------------
// Jacobians

#[test]
fn jacobians_match_closed_forms_and_call_f_once() {
    let x = t64(&[0.3, -1.1, 0.7, 2.0], &[4]);
    let calls = Cell::new(0);
    let f = |x: &Tensor| {
        calls.set(calls.get() + 1);
        x.sin() * x.sum_all()
    };
    // d/dx_j [sin(x_i) s] = delta_ij cos(x_i) s + sin(x_i)
    let xs = x.to_vec::<f64>();
    let s: f64 = xs.iter().sum();
    let want: Vec<f64> = (0..4)
        .flat_map(|i| {
            let xs = xs.clone();
            (0..4).map(move |j| if i == j { xs[i].cos() * s } else { 0.0 } + xs[i].sin())
        })
        .collect();
    let want = t64(&want, &[4, 4]);
    let jf = rune::jacfwd(f, &x);
    assert_eq!(calls.get(), 1);
    let jr = rune::jacrev(f, &x);
    assert_eq!(calls.get(), 2);
    close(&jf, &want, 1e-12);
    close(&jr, &want, 1e-12);
    // Shapes: shape(f x) ++ shape(x).
    let m = t64(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let j = rune::jacrev(|m: &Tensor| m.sum(&[1], false), &m);
    assert_eq!(j.shape(), &[2, 2, 3]);
    let j = rune::jacfwd(|m: &Tensor| m.sum(&[1], false), &m);
    assert_eq!(j.shape(), &[2, 2, 3]);
    assert_eq!(
        j.to_vec::<f64>(),
        vec![1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    );
    // Hessian of sum(tanh(A x)^2) against finite differences of the gradient.
    let a = t64(&[0.3, -0.2, 0.5, 0.1, 0.4, -0.6, 0.2, 0.7, -0.1], &[3, 3]);
    let x3 = t64(&[0.1, -0.3, 0.8], &[3]);
    let h_calls = Cell::new(0);
    let h = rune::hessian(
        |x: &Tensor| {
            h_calls.set(h_calls.get() + 1);
            a.matmul(x).tanh().square().sum_all()
        },
        &x3,
    );
    assert_eq!(h_calls.get(), 1);
    assert_eq!(h.shape(), &[3, 3]);
    let g = |x: &Tensor| rune::grad(|x: &Tensor| a.matmul(x).tanh().square().sum_all(), x);
    for j in 0..3 {
        let mut e = vec![0.0; 3];
        e[j] = 1e-6;
        let e = t64(&e, &[3]);
        let col = (g(&(&x3 + &e)) - g(&(&x3 - &e))) / 2e-6;
        for i in 0..3 {
            let hij = h.get(i).get(j).item::<f64>();
            assert!((hij - col.get(i).item::<f64>()).abs() < 1e-6);
        }
    }
    // Symmetric.
    close(&h, &h.transpose(), 1e-12);
    assert_eq!(
        rune::hessian(|v: &Tensor| v.sin().sum_all(), &t64(&[1.0, 2.0], &[2])).dtype(),
        DType::F64
    );
}

#[test]
fn out_axis_out_of_bounds_and_batched_writes_into_constants_panic() {
    let xs = t64(&[1.0, 2.0, 3.0], &[3]);
    let m = panic_message(|| {
        rune::vmap_with(
            |x: &Tensor| x * 2.0,
            &xs,
            VmapOpts {
                in_axes: None,
                out_axis: 1,
            },
        );
    });
    assert!(
        m.contains("vmap") && m.contains("out_axis 1") && m.contains("[3]"),
        "{m}"
    );
    let buf = Tensor::zeros(&[], DType::F64);
    let m = panic_message(|| {
        rune::vmap(
            |x: &Tensor| {
                buf.assign(x);
                x.clone()
            },
            &xs,
        );
    });
    assert!(m.contains("assign") && m.contains("batched"), "{m}");
}
