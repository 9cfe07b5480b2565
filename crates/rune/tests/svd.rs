//! `linalg::svd`, `pinv`, `lstsq` (compositions over `eigh`): identities
//! checked independently of how they are computed (reconstruction,
//! orthonormality, `Σ s² = ‖A‖_F²`, `Π s = |det A|`, the Penrose
//! conditions, the normal equations, the minimum-norm solution), reverse
//! mode against central differences, and jit's refusal naming each.

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
        close(&(u.clone() * s.unsqueeze(-2)).matmul(&vt), &a, 1e-10);
        close(&t(&u).matmul(&u), &eye_like(k, batch), 1e-10);
        close(&vt.matmul(&t(&vt)), &eye_like(k, batch), 1e-10);
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
            close(&s.prod(&[-1], false), &linalg::det(&a).abs(), 1e-10);
        }
        let (uf, sf, vtf) = linalg::svd(&a, true);
        assert_eq!(uf.shape()[uf.ndim() - 1], m);
        assert_eq!(vtf.shape()[vtf.ndim() - 2], n);
        close(&sf, &s, 1e-12);
        close(&t(&uf).matmul(&uf), &eye_like(m, batch), 1e-10);
        close(&vtf.matmul(&t(&vtf)), &eye_like(n, batch), 1e-10);
        let uk = uf.narrow(-1, 0, k);
        let vk = vtf.narrow(-2, 0, k);
        close(&(uk * sf.unsqueeze(-2)).matmul(&vk), &a, 1e-10);
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
        close(&a.matmul(&p).matmul(&a), &a, 1e-9);
        close(&p.matmul(&a).matmul(&p), &p, 1e-9);
        let ap = a.matmul(&p);
        close(&t(&ap), &ap, 1e-9);
        let pa = p.matmul(&a);
        close(&t(&pa), &pa, 1e-9);
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
    close(&x, &min_norm, 1e-9);
    close(&a.matmul(&x), &b, 1e-9);
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
