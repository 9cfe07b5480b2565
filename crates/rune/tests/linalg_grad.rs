//! Derivatives, batching and jit refusal of `nx::linalg`: reverse mode
//! against central differences (`check_grads`, f64) for every operation,
//! single and batched; forward against reverse mode (`<vjp(ct), t> ==
//! <ct, jvp(t)>`); second derivatives; `vmap` against a loop over the
//! lanes; each operation inside `jit` is a `JitError` naming it.

mod common;

use common::{check_refused, panic_message};
use rune::nx::linalg::{self, TriangularSolveOpts};
use rune::prelude::*;
use rune::{CheckGradsOpts, VmapOpts};

/// Deterministic uniform values in [-1, 1) (splitmix64).
fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

fn rand(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_slice(&uniform(seed, n), shape)
}

/// Random symmetric positive-definite matrices `M Mᵀ + n I`, shape `[..., n, n]`.
fn spd(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape[shape.len() - 1];
    let m = rand(seed, shape);
    m.matmul(&m.swapaxes(-1, -2)) + Tensor::eye(n, DType::F64) * n as f64
}

/// Random well-conditioned general matrices.
fn general(seed: u64, shape: &[usize]) -> Tensor {
    let n = shape[shape.len() - 1];
    rand(seed, shape) + Tensor::eye(n, DType::F64) * 3.0
}

/// A fixed random weighting, so that objectives see every output entry.
fn weigh(y: &Tensor, seed: u64) -> Tensor {
    (y * &rand(seed, y.shape())).sum_all()
}

fn opts_all() -> Vec<TriangularSolveOpts> {
    (0..16u32)
        .map(|bits| TriangularSolveOpts {
            lower: bits & 1 != 0,
            left: bits & 2 != 0,
            transpose: bits & 4 != 0,
            unit_diagonal: bits & 8 != 0,
        })
        .collect()
}

fn tight() -> CheckGradsOpts {
    CheckGradsOpts {
        tol: 1e-5,
        eps: 1e-5,
    }
}

// --------------------------------------------------------------- check_grads

#[test]
fn cholesky_gradient_matches_finite_differences() {
    for shape in [vec![1, 1], vec![4, 4], vec![2, 3, 5, 5]] {
        let a = spd(1, &shape);
        rune::check_grads_with(|a: &Tensor| weigh(&linalg::cholesky(a), 2), &a, tight())
            .unwrap_or_else(|e| panic!("shape {shape:?}: {e}"));
    }
}

#[test]
fn triangular_solve_gradients_match_finite_differences_for_every_option() {
    let (m, k) = (4, 3);
    for o in opts_all() {
        let a = general(3, &[m, m]);
        let bshape = if o.left { [m, k] } else { [k, m] };
        let b = rand(4, &bshape);
        rune::check_grads_with(
            |(a, b): &(Tensor, Tensor)| weigh(&linalg::triangular_solve(a, b, o), 5),
            &(a, b),
            tight(),
        )
        .unwrap_or_else(|e| panic!("{o:?}: {e}"));
    }
    // Batched.
    let o = opts_all()[3];
    let (a, b) = (general(6, &[2, m, m]), rand(7, &[2, m, k]));
    rune::check_grads_with(
        |(a, b): &(Tensor, Tensor)| weigh(&linalg::triangular_solve(a, b, o), 8),
        &(a, b),
        tight(),
    )
    .unwrap();
}

#[test]
fn solve_inv_det_slogdet_gradients_match_finite_differences() {
    for shape in [vec![1, 1], vec![3, 3], vec![2, 4, 4]] {
        let n = shape[shape.len() - 1];
        let a = general(10, &shape);
        let mut bshape = shape.clone();
        *bshape.last_mut().unwrap() = 2;
        let b = rand(11, &bshape);
        let ctx = |what: &str, e: String| panic!("{what}, shape {shape:?}: {e}");
        rune::check_grads_with(
            |(a, b): &(Tensor, Tensor)| weigh(&linalg::solve(a, b), 12),
            &(a.clone(), b),
            tight(),
        )
        .unwrap_or_else(|e| ctx("solve", e));
        let v = rand(13, &[n]);
        rune::check_grads_with(
            |(a, v): &(Tensor, Tensor)| weigh(&linalg::solve(a, v), 14),
            &(a.clone(), v),
            tight(),
        )
        .unwrap_or_else(|e| ctx("solve (vector)", e));
        rune::check_grads_with(|a: &Tensor| weigh(&linalg::inv(a), 15), &a, tight())
            .unwrap_or_else(|e| ctx("inv", e));
        rune::check_grads_with(|a: &Tensor| weigh(&linalg::det(a), 16), &a, tight())
            .unwrap_or_else(|e| ctx("det", e));
        rune::check_grads_with(|a: &Tensor| weigh(&linalg::slogdet(a).1, 17), &a, tight())
            .unwrap_or_else(|e| ctx("slogdet", e));
    }
}

#[test]
fn slogdet_gradient_is_the_inverse_transpose_and_the_sign_has_none() {
    let a = general(20, &[4, 4]);
    let g = rune::grad(|a: &Tensor| linalg::slogdet(a).1, &a);
    let want = linalg::inv(&a).swapaxes(-1, -2);
    let err = (&g - &want).abs().max(&[0, 1], false).item::<f64>();
    assert!(err < 1e-12, "{err:e}");
    let g = rune::grad(|a: &Tensor| linalg::slogdet(a).0, &a);
    assert_eq!(g.abs().sum_all().item::<f64>(), 0.0);
}

#[test]
fn second_derivatives_match_finite_differences() {
    // The gradient itself, differentiated again (reverse over reverse).
    let a = spd(30, &[3, 3]);
    rune::check_grads_with(
        |a: &Tensor| {
            weigh(
                &rune::grad(|a: &Tensor| weigh(&linalg::cholesky(a), 31), a),
                32,
            )
        },
        &a,
        tight(),
    )
    .unwrap();
    let a = general(33, &[3, 3]);
    rune::check_grads_with(
        |a: &Tensor| weigh(&rune::grad(|a: &Tensor| linalg::slogdet(a).1, a), 34),
        &a,
        tight(),
    )
    .unwrap();
    let b = rand(35, &[3, 2]);
    rune::check_grads_with(
        |(a, b): &(Tensor, Tensor)| {
            let (ga, gb) = rune::grad(
                |(a, b): &(Tensor, Tensor)| weigh(&linalg::solve(a, b), 36),
                &(a.clone(), b.clone()),
            );
            weigh(&ga, 37) + weigh(&gb, 38)
        },
        &(a, b),
        tight(),
    )
    .unwrap();
}

// ------------------------------------------------------------- jvp vs vjp

/// `<vjp(ct), t> == <ct, jvp(t)>` for a function of one or two leaves.
fn check_consistency<P: Ptree>(what: &str, f: impl Fn(&P) -> Tensor, p: &P, seed: u64) {
    let leaves = p.leaves();
    let ts: Vec<Tensor> = leaves
        .iter()
        .enumerate()
        .map(|(i, l)| rand(seed + i as u64, l.shape()))
        .collect();
    let (y, dy) = rune::jvp(&f, p, &p.with_leaves(&ts));
    let ct = rand(seed + 100, y.shape());
    let (_, g) = rune::vjp(&f, p, &ct);
    let lhs: f64 = g
        .leaves()
        .iter()
        .zip(&ts)
        .map(|(g, t)| (g * t).sum_all().item::<f64>())
        .sum();
    let rhs = (&ct * &dy).sum_all().item::<f64>();
    assert!(
        (lhs - rhs).abs() <= 1e-10 * lhs.abs().max(rhs.abs()).max(1.0),
        "{what}: <vjp(ct), t> = {lhs} but <ct, jvp(t)> = {rhs}"
    );
}

#[test]
fn forward_and_reverse_mode_agree() {
    for shape in [vec![4, 4], vec![3, 2, 4, 4]] {
        let a = spd(40, &shape);
        check_consistency("cholesky", |a: &Tensor| linalg::cholesky(a), &a, 41);
        let g = general(42, &shape);
        check_consistency("inv", |a: &Tensor| linalg::inv(a), &g, 43);
        check_consistency("det", |a: &Tensor| linalg::det(a), &g, 44);
        check_consistency("slogdet", |a: &Tensor| linalg::slogdet(a).1, &g, 45);
        let mut bshape = shape.clone();
        *bshape.last_mut().unwrap() = 3;
        let b = rand(46, &bshape);
        check_consistency(
            "solve",
            |(a, b): &(Tensor, Tensor)| linalg::solve(a, b),
            &(g.clone(), b.clone()),
            47,
        );
        for o in opts_all() {
            let b = if o.left {
                b.clone()
            } else {
                b.swapaxes(-1, -2)
            };
            check_consistency(
                &format!("triangular_solve {o:?}"),
                |(a, b): &(Tensor, Tensor)| linalg::triangular_solve(a, b, o),
                &(g.clone(), b),
                48,
            );
        }
    }
}

// ---------------------------------------------------------------------- vmap

fn assert_close(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}: shapes");
    let err = (a - b)
        .abs()
        .max(&(0..a.ndim() as isize).collect::<Vec<_>>(), false)
        .item::<f64>();
    assert!(err < 1e-12, "{what}: vmap differs from the loop by {err:e}");
}

/// The loop `vmap` replaces: `f` on each lane along axis 0 of the mapped leaves.
fn lanes(f: impl Fn(&[Tensor]) -> Tensor, xs: &[Tensor], mapped: &[bool], n: usize) -> Tensor {
    let outs: Vec<Tensor> = (0..n)
        .map(|i| {
            let args: Vec<Tensor> = xs
                .iter()
                .zip(mapped)
                .map(|(x, &m)| if m { x.get(i) } else { x.clone() })
                .collect();
            f(&args)
        })
        .collect();
    Tensor::stack(&outs, 0)
}

#[test]
fn vmap_equals_the_loop_over_lanes() {
    let n = 3;
    let a = spd(50, &[n, 4, 4]);
    let got = rune::vmap(|a: &Tensor| linalg::cholesky(a), &a);
    assert_close(
        &got,
        &lanes(|x| linalg::cholesky(&x[0]), &[a.clone()], &[true], n),
        "cholesky",
    );
    let got = rune::vmap(|a: &Tensor| linalg::slogdet(a).1, &a);
    assert_close(
        &got,
        &lanes(|x| linalg::slogdet(&x[0]).1, &[a.clone()], &[true], n),
        "slogdet",
    );
    let got = rune::vmap(|a: &Tensor| linalg::det(a), &a);
    assert_close(
        &got,
        &lanes(|x| linalg::det(&x[0]), &[a.clone()], &[true], n),
        "det",
    );
    let got = rune::vmap(|a: &Tensor| linalg::inv(a), &a);
    assert_close(
        &got,
        &lanes(|x| linalg::inv(&x[0]), &[a.clone()], &[true], n),
        "inv",
    );

    // Two operands: both mapped, only the matrix, only the right-hand side.
    let b = rand(51, &[n, 4, 2]);
    let (a1, b1) = (a.get(0), b.get(0));
    for (mapped, args) in [
        ([true, true], (a.clone(), b.clone())),
        ([true, false], (a.clone(), b1.clone())),
        ([false, true], (a1.clone(), b.clone())),
    ] {
        let in_axes = Some(mapped.iter().map(|&m| m.then_some(0)).collect());
        let xs = [args.0.clone(), args.1.clone()];
        let got = rune::vmap_with(
            |(a, b): &(Tensor, Tensor)| linalg::solve(a, b),
            &args,
            VmapOpts {
                in_axes: in_axes.clone(),
                out_axis: 0,
            },
        );
        assert_close(
            &got,
            &lanes(|x| linalg::solve(&x[0], &x[1]), &xs, &mapped, n),
            "solve",
        );
        for o in opts_all().into_iter().filter(|o| o.left) {
            let got = rune::vmap_with(
                |(a, b): &(Tensor, Tensor)| linalg::triangular_solve(a, b, o),
                &args,
                VmapOpts {
                    in_axes: in_axes.clone(),
                    out_axis: 0,
                },
            );
            let want = lanes(
                |x| linalg::triangular_solve(&x[0], &x[1], o),
                &xs,
                &mapped,
                n,
            );
            assert_close(&got, &want, "triangular_solve");
        }
    }
    // Per-example gradients: vmap of grad.
    let got = rune::vmap(
        |a: &Tensor| rune::grad(|a: &Tensor| weigh(&linalg::cholesky(a), 52), a),
        &a,
    );
    let want = lanes(
        |x| rune::grad(|a: &Tensor| weigh(&linalg::cholesky(a), 52), &x[0]),
        &[a.clone()],
        &[true],
        n,
    );
    assert_close(&got, &want, "vmap of grad of cholesky");
    // Mapped over a non-leading axis.
    let at = a.moveaxis(0, 2);
    let got = rune::vmap_with(
        |a: &Tensor| linalg::slogdet(a).1,
        &at,
        VmapOpts {
            in_axes: Some(vec![Some(2)]),
            out_axis: 0,
        },
    );
    assert_close(
        &got,
        &lanes(|x| linalg::slogdet(&x[0]).1, &[a.clone()], &[true], n),
        "axis 2",
    );
}

// ----------------------------------------------------------------------- jit

#[test]
fn every_linalg_operation_is_refused_by_jit_naming_it() {
    let a = spd(60, &[3, 3]);
    let b = rand(61, &[3, 2]);
    let o = opts_all()[3];
    check_refused(
        &rune::jit(|a: &Tensor| linalg::cholesky(a)),
        &a,
        "linalg::cholesky",
    );
    check_refused(&rune::jit(|a: &Tensor| linalg::inv(a)), &a, "linalg::inv");
    check_refused(&rune::jit(|a: &Tensor| linalg::det(a)), &a, "linalg::det");
    check_refused(
        &rune::jit(|a: &Tensor| linalg::slogdet(a).1),
        &a,
        "linalg::slogdet",
    );
    let ab = (a.clone(), b.clone());
    check_refused(
        &rune::jit(|(a, b): &(Tensor, Tensor)| linalg::solve(a, b)),
        &ab,
        "linalg::solve",
    );
    check_refused(
        &rune::jit(|(a, b): &(Tensor, Tensor)| linalg::triangular_solve(a, b, o)),
        &ab,
        "linalg::triangular_solve",
    );
    // Under a transformation inside jit, and on a captured constant.
    check_refused(
        &rune::jit(|a: &Tensor| rune::grad(|a: &Tensor| linalg::slogdet(a).1, a)),
        &a,
        "linalg::slogdet",
    );
    check_refused(
        &rune::jit(|a: &Tensor| rune::vmap(|a: &Tensor| linalg::det(a), a)),
        &spd(62, &[2, 3, 3]),
        "linalg::det",
    );
    let captured = a.clone();
    check_refused(
        &rune::jit(move |x: &Tensor| x + &linalg::inv(&captured)),
        &a,
        "linalg::inv",
    );
    // Outside jit the same functions run.
    assert_eq!(linalg::det(&a).shape(), &[] as &[usize]);
}

// ------------------------------------------------------------------ qr, eigh

#[test]
fn qr_and_eigh_gradients_match_finite_differences() {
    for (shape, complete) in [
        (vec![4, 4], false),
        (vec![4, 4], true),
        (vec![5, 3], false),
        (vec![2, 4, 2], false),
    ] {
        let a = rand(70, &shape);
        rune::check_grads_with(
            |a: &Tensor| {
                let (q, r) = linalg::qr(a, complete);
                weigh(&q, 71) + weigh(&r, 72)
            },
            &a,
            tight(),
        )
        .unwrap_or_else(|e| panic!("qr {shape:?} complete={complete}: {e}"));
    }
    for shape in [vec![1, 1], vec![4, 4], vec![2, 3, 3]] {
        // Eigenvectors enter squared: their signs are arbitrary.
        let a = rand(73, &shape);
        rune::check_grads_with(
            |a: &Tensor| {
                let (w, v) = linalg::eigh(a);
                weigh(&w, 74) + weigh(&(&v * &v), 75)
            },
            &a,
            tight(),
        )
        .unwrap_or_else(|e| panic!("eigh {shape:?}: {e}"));
    }
    // QR's derivative outside JAX's cases is refused by name.
    let m = panic_message(|| {
        drop(rune::grad(
            |a: &Tensor| weigh(&linalg::qr(a, false).0, 1),
            &rand(1, &[2, 3]),
        ))
    });
    assert!(m.contains("linalg::qr") && m.contains("m >= n"), "{m}");
}

#[test]
fn qr_and_eigh_forward_and_reverse_mode_agree() {
    for shape in [vec![4, 4], vec![6, 3], vec![2, 5, 4]] {
        let a = rand(80, &shape);
        check_consistency("qr q", |a: &Tensor| linalg::qr(a, false).0, &a, 81);
        check_consistency("qr r", |a: &Tensor| linalg::qr(a, false).1, &a, 82);
    }
    for shape in [vec![4, 4], vec![3, 5, 5]] {
        let a = rand(83, &shape);
        check_consistency("eigh w", |a: &Tensor| linalg::eigh(a).0, &a, 84);
        check_consistency("eigh v", |a: &Tensor| linalg::eigh(a).1, &a, 85);
    }
}

#[test]
fn qr_and_eigh_vmap_equals_the_loop_and_jit_refuses_them() {
    let n = 3;
    let a = rand(90, &[n, 5, 4]);
    let got = rune::vmap(|a: &Tensor| linalg::qr(a, false).0, &a);
    assert_close(
        &got,
        &lanes(|x| linalg::qr(&x[0], false).0, &[a.clone()], &[true], n),
        "qr",
    );
    let got = rune::vmap(|a: &Tensor| linalg::qr(a, true).1, &a);
    assert_close(
        &got,
        &lanes(|x| linalg::qr(&x[0], true).1, &[a.clone()], &[true], n),
        "qr r",
    );
    let s = spd(91, &[n, 4, 4]);
    let got = rune::vmap(|a: &Tensor| linalg::eigh(a).1, &s);
    assert_close(
        &got,
        &lanes(|x| linalg::eigh(&x[0]).1, &[s.clone()], &[true], n),
        "eigh",
    );
    check_refused(
        &rune::jit(|a: &Tensor| linalg::qr(a, false).0),
        &a,
        "linalg::qr",
    );
    check_refused(
        &rune::jit(|a: &Tensor| linalg::eigh(a).0),
        &s,
        "linalg::eigh",
    );
}

// ---------------------------------------------------------------------- norm

#[test]
fn norm_gradients_match_finite_differences_and_jit_refuses_norm() {
    use linalg::Norm;
    let a = rand(100, &[2, 3, 4]);
    for ord in [
        Norm::Fro,
        Norm::Nuc,
        Norm::One,
        Norm::Two,
        Norm::Inf,
        Norm::Vector(1.0),
        Norm::Vector(2.0),
        Norm::Vector(3.0),
        Norm::Vector(f64::INFINITY),
    ] {
        rune::check_grads_with(|a: &Tensor| weigh(&linalg::norm(a, ord), 101), &a, tight())
            .unwrap_or_else(|e| panic!("{ord:?}: {e}"));
    }
    check_refused(
        &rune::jit(|a: &Tensor| linalg::norm(a, Norm::Two)),
        &a,
        "linalg::norm",
    );
}
