//! `linalg::svd` (`Prim::Svd`, faer's), `pinv`, `lstsq`: identities
//! checked independently of how they are computed (reconstruction,
//! orthonormality, `Σ s² = ‖A‖_F²`, `Π s = |det A|`, prescribed singular
//! values of nearly singular and rank-deficient matrices, the Penrose
//! conditions, the normal equations, the minimum-norm solution), both
//! modes against central differences and each other, vmap against the
//! loop, and jit's refusal naming each.

use rune::nx::linalg;
use rune::prelude::*;
use rune::CheckGradsOpts;

fn rand(seed: u64, shape: &[usize]) -> Tensor {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(11);
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_slice(&v, shape)
}

#[track_caller]
fn close(a: &Tensor, b: &Tensor, tol: f64) {
    assert_eq!(a.shape(), b.shape());
    for (i, (x, y)) in a.to_vec::<f64>().iter().zip(b.to_vec::<f64>()).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}"
        );
    }
}

fn t(x: &Tensor) -> Tensor {
    x.swapaxes(-1, -2)
}

fn eye_like(k: usize, batch: &[usize]) -> Tensor {
    let mut shape = batch.to_vec();
    shape.extend([k, k]);
    Tensor::eye(k, DType::F64).broadcast_to(&shape)
}

#[test]
fn svd_reconstructs_with_orthonormal_factors_and_descending_values() {
    for shape in [
        vec![5, 3],
        vec![3, 5],
        vec![4, 4],
        vec![2, 4, 3],
        vec![1, 1],
    ] {
        let a = rand(shape.len() as u64 * 10 + shape[0] as u64, &shape);
        let (m, n) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let batch = &shape[..shape.len() - 2];
        let k = m.min(n);
        let (u, s, vt) = linalg::svd(&a, false);
        close(&(u.clone() * s.unsqueeze(-2)).matmul(&vt), &a, 1e-13);
        close(&t(&u).matmul(&u), &eye_like(k, batch), 1e-13);
        close(&vt.matmul(&t(&vt)), &eye_like(k, batch), 1e-13);
        let sv = s.to_vec::<f64>();
        for row in sv.chunks(k) {
            assert!(
                row.windows(2).all(|w| w[0] >= w[1]) && row[k - 1] >= 0.0,
                "{row:?}"
            );
        }
        // Σ s² = ‖A‖_F², independent of the method
        close(
            &s.square().sum(&[-1], false),
            &a.square().sum(&[-2, -1], false),
            1e-10,
        );
        if m == n {
            close(&s.prod(&[-1], false), &linalg::det(&a).abs(), 1e-13);
        }
        let (uf, sf, vtf) = linalg::svd(&a, true);
        assert_eq!(uf.shape()[uf.ndim() - 1], m);
        assert_eq!(vtf.shape()[vtf.ndim() - 2], n);
        close(&sf, &s, 1e-12);
        close(&t(&uf).matmul(&uf), &eye_like(m, batch), 1e-13);
        close(&vtf.matmul(&t(&vtf)), &eye_like(n, batch), 1e-13);
        let uk = uf.narrow(-1, 0, k);
        let vk = vtf.narrow(-2, 0, k);
        close(&(uk * sf.unsqueeze(-2)).matmul(&vk), &a, 1e-13);
    }
}

#[test]
fn pinv_satisfies_the_penrose_conditions_also_for_rank_deficient_matrices() {
    let u = rand(3, &[4, 1]);
    let v = rand(4, &[1, 3]);
    let rank1 = u.matmul(&v);
    for a in [rand(1, &[4, 3]), rand(2, &[3, 5]), rank1] {
        let p = linalg::pinv(&a);
        assert_eq!(p.shape(), &[a.shape()[1], a.shape()[0]]);
        close(&a.matmul(&p).matmul(&a), &a, 1e-12);
        close(&p.matmul(&a).matmul(&p), &p, 1e-12);
        let ap = a.matmul(&p);
        close(&t(&ap), &ap, 1e-12);
        let pa = p.matmul(&a);
        close(&t(&pa), &pa, 1e-12);
    }
}

#[test]
fn lstsq_solves_the_normal_equations_or_gives_the_minimum_norm_solution() {
    // overdetermined: Aᵀ A x = Aᵀ b
    let (a, b) = (rand(5, &[6, 3]), rand(6, &[6, 2]));
    let x = linalg::lstsq(&a, &b);
    close(
        &x,
        &linalg::solve(&t(&a).matmul(&a), &t(&a).matmul(&b)),
        1e-9,
    );
    // underdetermined: x = Aᵀ (A Aᵀ)⁻¹ b, the solution of least norm
    let (a, b) = (rand(7, &[2, 4]), rand(8, &[2]));
    let x = linalg::lstsq(&a, &b);
    assert_eq!(x.shape(), &[4]);
    let min_norm = t(&a).matmul(&linalg::solve(&a.matmul(&t(&a)), &b));
    close(&x, &min_norm, 1e-12);
    close(&a.matmul(&x), &b, 1e-12);
}

#[test]
fn svd_pinv_and_lstsq_gradients_match_finite_differences() {
    let opts = CheckGradsOpts {
        tol: 1e-5,
        eps: 1e-5,
    };
    let w = rand(9, &[3]);
    for shape in [[4usize, 3], [3, 4]] {
        let a = rand(10 + shape[0] as u64, &shape);
        rune::check_grads_with(
            |a: &Tensor| (linalg::svd(a, false).1 * &w).sum_all(),
            &a,
            opts.clone(),
        )
        .unwrap_or_else(|e| panic!("svd values {shape:?}: {e}"));
        // u diag(s) vt is a (a function invariant to the factors' signs)
        rune::check_grads_with(
            |a: &Tensor| {
                let (u, s, vt) = linalg::svd(a, false);
                ((u * s.unsqueeze(-2)).matmul(&vt) * a).sum_all()
            },
            &a,
            opts.clone(),
        )
        .unwrap_or_else(|e| panic!("svd reconstruction {shape:?}: {e}"));
        let c = rand(20, &[shape[1], shape[0]]);
        rune::check_grads_with(
            |a: &Tensor| (linalg::pinv(a) * &c).sum_all(),
            &a,
            opts.clone(),
        )
        .unwrap_or_else(|e| panic!("pinv {shape:?}: {e}"));
    }
    let b = rand(30, &[4]);
    rune::check_grads_with(
        |a: &Tensor| linalg::lstsq(a, &b).square().sum_all(),
        &rand(31, &[4, 3]),
        opts,
    )
    .unwrap_or_else(|e| panic!("lstsq: {e}"));
}

#[test]
fn jit_refuses_svd_pinv_and_lstsq_naming_them() {
    let a = rand(40, &[3, 3]);
    for (name, f) in [
        (
            "linalg::svd",
            (|a: &Tensor| linalg::svd(a, false).1) as fn(&Tensor) -> Tensor,
        ),
        ("linalg::pinv", |a: &Tensor| linalg::pinv(a)),
        ("linalg::lstsq", |a: &Tensor| linalg::lstsq(a, a)),
    ] {
        let e = rune::jit(f).try_call(&a).err().expect("a JitError");
        assert!(
            e.message().contains(name) && e.message().contains("eagerly"),
            "{name}: {}",
            e.message()
        );
    }
}

/// An `m`×`n` matrix with prescribed singular values `sv` (descending):
/// `Q1 diag(sv) Q2ᵀ` with `Q1`, `Q2` orthonormal (QR of random matrices).
fn with_singular_values(seed: u64, m: usize, n: usize, sv: &[f64]) -> Tensor {
    let k = sv.len();
    let (q1, _) = linalg::qr(&rand(seed, &[m, k]), false);
    let (q2, _) = linalg::qr(&rand(seed + 1, &[n, k]), false);
    (q1 * Tensor::from_slice(sv, &[k]).unsqueeze(0)).matmul(&t(&q2))
}

#[test]
fn svd_of_nearly_singular_and_rank_deficient_matrices_is_accurate() {
    for (m, n, sv) in [
        (6, 4, vec![3.0, 1.0, 1e-8, 1e-13]),
        (4, 6, vec![2.0, 1e-6, 1e-10, 0.0]),
        (5, 5, vec![1.0, 0.5, 0.0, 0.0, 0.0]),
        (5, 5, vec![1.0, 1e-15, 1e-15, 1e-15, 1e-15]),
    ] {
        let a = with_singular_values(m as u64 * 7 + n as u64, m, n, &sv);
        let k = m.min(n);
        let (u, s, vt) = linalg::svd(&a, false);
        // Backward stable: the small singular values to eps · s_max, the
        // reconstruction and orthonormality to ~eps (the Gram route could
        // resolve only sqrt(eps) · s_max).
        for (got, want) in s.to_vec::<f64>().iter().zip(&sv) {
            assert!(
                (got - want).abs() < 1e-14 * sv[0],
                "{m}x{n}: {got} vs {want}"
            );
        }
        close(&(u.clone() * s.unsqueeze(-2)).matmul(&vt), &a, 1e-13);
        close(&t(&u).matmul(&u), &eye_like(k, &[]), 1e-13);
        close(&vt.matmul(&t(&vt)), &eye_like(k, &[]), 1e-13);
        let (uf, sf, vtf) = linalg::svd(&a, true);
        close(&t(&uf).matmul(&uf), &eye_like(m, &[]), 1e-13);
        close(&vtf.matmul(&t(&vtf)), &eye_like(n, &[]), 1e-13);
        let (uk, vk) = (uf.narrow(-1, 0, k), vtf.narrow(-2, 0, k));
        close(&(uk * sf.unsqueeze(-2)).matmul(&vk), &a, 1e-13);
        // pinv where every singular value is either well above JAX's cutoff
        // (10 · max(m, n) · eps · s_max) or below it: the Penrose
        // conditions to ~eps (kept values near the cutoff would amplify
        // rounding by s_max / s_min, as in any SVD pinv).
        if sv.iter().all(|&x| x > 1e-3 * sv[0] || x < 1e-14 * sv[0]) {
            let p = linalg::pinv(&a);
            close(&a.matmul(&p).matmul(&a), &a, 1e-13);
            close(&p.matmul(&a).matmul(&p), &p, 1e-12);
            let ap = a.matmul(&p);
            close(&t(&ap), &ap, 1e-13);
        }
    }
}

#[test]
fn svd_in_f32_matches_f64() {
    let a = rand(60, &[3, 5, 4]);
    let (_, s64, _) = linalg::svd(&a, false);
    let (u, s, vt) = linalg::svd(&a.cast(DType::F32), false);
    assert_eq!(s.dtype(), DType::F32);
    for (x, y) in s.to_vec::<f32>().iter().zip(s64.to_vec::<f64>()) {
        assert!((*x as f64 - y).abs() < 1e-5, "{x} vs {y}");
    }
    let back = (u * s.unsqueeze(-2)).matmul(&vt).cast(DType::F64);
    close(&back, &a, 1e-5);
}

/// Losses of the factors that do not depend on the sign of each pair
/// `(u_i, v_i)`: projections `u diag(c) uᵀ`, `v diag(c) vᵀ` weighted.
fn sign_free_loss(a: &Tensor, full: bool) -> Tensor {
    let (u, s, vt) = linalg::svd(a, full);
    let k = s.shape()[s.ndim() - 1];
    let c = rand(70, &[k]);
    let (m, n) = (u.shape()[u.ndim() - 2], vt.shape()[vt.ndim() - 1]);
    let pu = (u.narrow(-1, 0, k) * c.unsqueeze(-2)).matmul(&t(&u.narrow(-1, 0, k)));
    let v = t(&vt.narrow(-2, 0, k));
    let pv = (v.clone() * c.unsqueeze(-2)).matmul(&t(&v));
    (pu * rand(71, &[m, m])).sum_all() + (pv * rand(72, &[n, n])).sum_all() + (&s * &s).sum_all()
}

#[test]
fn svd_gradients_of_values_and_factors_match_finite_differences() {
    let opts = CheckGradsOpts {
        tol: 1e-6,
        eps: 1e-6,
    };
    for shape in [vec![5, 3], vec![3, 5], vec![4, 4], vec![2, 4, 3]] {
        let a = rand(80 + shape[0] as u64, &shape);
        rune::check_grads_with(
            |a: &Tensor| linalg::svd(a, false).1.sum_all(),
            &a,
            opts.clone(),
        )
        .unwrap_or_else(|e| panic!("sum s {shape:?}: {e}"));
        let w = rand(81, &shape);
        rune::check_grads_with(
            |a: &Tensor| {
                let (u, s, vt) = linalg::svd(a, false);
                ((u * s.unsqueeze(-2)).matmul(&vt) * &w).sum_all()
            },
            &a,
            opts.clone(),
        )
        .unwrap_or_else(|e| panic!("sum((u s) vt * w) {shape:?}: {e}"));
        if shape.len() == 2 {
            rune::check_grads_with(|a: &Tensor| sign_free_loss(a, false), &a, opts.clone())
                .unwrap_or_else(|e| panic!("projections {shape:?}: {e}"));
        }
    }
    // Square full factorization = reduced: differentiable too.
    rune::check_grads_with(
        |a: &Tensor| sign_free_loss(a, true),
        &rand(90, &[4, 4]),
        opts,
    )
    .unwrap_or_else(|e| panic!("square full: {e}"));
}

#[test]
fn svd_value_gradient_is_u_vt_and_finite_at_repeated_and_zero_values() {
    // d(Σ s)/dA = U Vᵀ; at a rank-deficient matrix with a repeated zero
    // singular value the factors' rule has infinite F entries, which an
    // unused factor must not turn into NaN (JAX's symbolic zeros).
    let a = with_singular_values(95, 5, 4, &[2.0, 2.0, 0.0, 0.0]);
    let g = rune::grad(|a: &Tensor| linalg::svd(a, false).1.sum_all(), &a);
    assert!(g.to_vec::<f64>().iter().all(|x| x.is_finite()), "{g}");
    let b = rand(96, &[4, 3]);
    let (u, _, vt) = linalg::svd(&b, false);
    let g = rune::grad(|a: &Tensor| linalg::svd(a, false).1.sum_all(), &b);
    close(&g, &u.matmul(&vt), 1e-12);
}

#[test]
fn svd_forward_and_reverse_mode_agree() {
    for shape in [vec![5, 3], vec![3, 5], vec![2, 4, 4]] {
        let a = rand(100 + shape[0] as u64, &shape);
        let f = |a: &Tensor| {
            let (u, s, vt) = linalg::svd(a, false);
            let flat = |x: &Tensor| x.reshape(&[x.numel()]);
            Tensor::concatenate(&[flat(&u), flat(&s), flat(&vt)], 0)
        };
        let t0 = rand(110, &shape);
        let (y, dy) = rune::jvp(f, &a, &t0);
        let ct = rand(111, y.shape());
        let (_, g) = rune::vjp(f, &a, &ct);
        let lhs = (&g * &t0).sum_all().item::<f64>();
        let rhs = (&ct * &dy).sum_all().item::<f64>();
        assert!(
            (lhs - rhs).abs() <= 1e-10 * lhs.abs().max(rhs.abs()).max(1.0),
            "{shape:?}: <vjp(ct), t> = {lhs} but <ct, jvp(t)> = {rhs}"
        );
        // The tangent of s is diag(Uᵀ Ȧ V).
        let (u, _, vt) = linalg::svd(&a, false);
        let (_, ds) = rune::jvp(|a: &Tensor| linalg::svd(a, false).1, &a, &t0);
        let want = (t(&u).matmul(&t0).matmul(&t(&vt))
            * eye_like(u.shape()[u.ndim() - 1], &shape[..shape.len() - 2]))
        .sum(&[-1], false);
        close(&ds, &want, 1e-12);
    }
}

#[test]
fn svd_vmap_equals_the_loop_and_batches_gradients() {
    let a = rand(120, &[3, 5, 4]);
    let loop_ = |f: &dyn Fn(&Tensor) -> Tensor| {
        let lanes: Vec<Tensor> = (0..3).map(|i| f(&a.get(i)).unsqueeze(0)).collect();
        Tensor::concatenate(&lanes, 0)
    };
    for full in [false, true] {
        let got = rune::vmap(|a: &Tensor| linalg::svd(a, full).1, &a);
        close(&got, &loop_(&|a| linalg::svd(a, full).1), 1e-14);
        let rec = move |a: &Tensor| {
            let (u, s, vt) = linalg::svd(a, full);
            let k = s.shape()[s.ndim() - 1];
            (u.narrow(-1, 0, k) * s.unsqueeze(-2)).matmul(&vt.narrow(-2, 0, k))
        };
        let got = rune::vmap(rec, &a);
        close(&got, &loop_(&rec), 1e-13);
        close(&got, &a, 1e-13);
    }
    // per-example gradients: vmap of grad, against the loop
    let f = |a: &Tensor| rune::grad(|a: &Tensor| sign_free_loss(a, false), a);
    let got = rune::vmap(f, &a);
    close(&got, &loop_(&f), 1e-12);
    // a batched input differentiates as the sum over its matrices
    let g = rune::grad(|a: &Tensor| linalg::svd(a, false).1.sum_all(), &a);
    let want = loop_(&|a| rune::grad(|a: &Tensor| linalg::svd(a, false).1.sum_all(), a));
    close(&g, &want, 1e-12);
}

#[test]
fn svd_derivative_of_a_non_square_full_factorization_panics_as_in_jax() {
    let a = rand(130, &[4, 3]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rune::grad(|a: &Tensor| linalg::svd(a, true).1.sum_all(), &a)
    }));
    let e = r.err().expect("a panic");
    let msg = e
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains("linalg::svd") && msg.contains("full_matrices"),
        "{msg}"
    );
}
