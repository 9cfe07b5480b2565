//! `nx::linalg` against identities (L·Lᵀ = A, op(A)·X = B, A·inv(A) = I)
//! and independent naive references written here (matrix products over
//! plain slices, Gauss–Jordan elimination with full pivoting, Leibniz
//! determinants), on random well-conditioned and nearly singular inputs,
//! batched, in f64 and f32; singular and not-positive-definite inputs;
//! error messages.

use nx::linalg::{self, TriangularSolveOpts};
use nx::{DType, Tensor};
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

/// Deterministic uniform values in [-1, 1) (splitmix64).
fn uniform(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
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

/// `a` (r×k) times `b` (k×c), row-major.
fn mm(a: &[f64], b: &[f64], r: usize, k: usize, c: usize) -> Vec<f64> {
    let mut o = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            o[i * c + j] = (0..k).map(|t| a[i * k + t] * b[t * c + j]).sum();
        }
    }
    o
}

fn tr(a: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0.0; r * c];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = a[i * c + j];
        }
    }
    t
}

fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m, x| m.max(x.abs()))
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

/// A random symmetric positive-definite n×n matrix `M Mᵀ + shift I`.
fn spd(seed: u64, n: usize, shift: f64) -> Vec<f64> {
    let m = uniform(seed, n * n);
    let mut a = mm(&m, &tr(&m, n, n), n, n, n);
    for i in 0..n {
        a[i * n + i] += shift;
    }
    a
}

/// A nearly singular SPD matrix: `B Bᵀ + 1e-6 I` with B of rank n - 1.
fn spd_nearly_singular(seed: u64, n: usize) -> Vec<f64> {
    let b = uniform(seed, n * (n - 1));
    let mut a = mm(&b, &tr(&b, n, n - 1), n, n - 1, n);
    for i in 0..n {
        a[i * n + i] += 1e-6;
    }
    a
}

/// A random well-conditioned general matrix (diagonally shifted).
fn general(seed: u64, n: usize) -> Vec<f64> {
    let mut a = uniform(seed, n * n);
    for i in 0..n {
        a[i * n + i] += if i % 2 == 0 { 3.0 } else { -3.0 };
    }
    a
}

/// A nearly singular general matrix: rank n - 1 plus 1e-9 noise.
fn general_nearly_singular(seed: u64, n: usize) -> Vec<f64> {
    let u = uniform(seed, n * (n - 1));
    let v = uniform(seed + 1, (n - 1) * n);
    let noise = uniform(seed + 2, n * n);
    mm(&u, &v, n, n - 1, n)
        .iter()
        .zip(&noise)
        .map(|(x, e)| x + 1e-9 * e)
        .collect()
}

/// Gauss–Jordan elimination with full pivoting: `A X = B` (A n×n, B n×k).
fn naive_solve(a: &[f64], b: &[f64], n: usize, k: usize) -> Vec<f64> {
    let w = n + k;
    let mut m = vec![0.0; n * w];
    for i in 0..n {
        m[i * w..i * w + n].copy_from_slice(&a[i * n..(i + 1) * n]);
        m[i * w + n..(i + 1) * w].copy_from_slice(&b[i * k..(i + 1) * k]);
    }
    let mut cols: Vec<usize> = (0..n).collect();
    for c in 0..n {
        let (mut pr, mut pc, mut best) = (c, c, -1.0);
        for r in c..n {
            for cc in c..n {
                if m[r * w + cc].abs() > best {
                    (pr, pc, best) = (r, cc, m[r * w + cc].abs());
                }
            }
        }
        for j in 0..w {
            m.swap(c * w + j, pr * w + j);
        }
        for r in 0..n {
            m.swap(r * w + c, r * w + pc);
        }
        cols.swap(c, pc);
        let p = m[c * w + c];
        for j in 0..w {
            m[c * w + j] /= p;
        }
        for r in 0..n {
            if r != c {
                let f = m[r * w + c];
                for j in 0..w {
                    m[r * w + j] -= f * m[c * w + j];
                }
            }
        }
    }
    let mut x = vec![0.0; n * k];
    for i in 0..n {
        for j in 0..k {
            x[cols[i] * k + j] = m[i * w + n + j];
        }
    }
    x
}

/// The Leibniz determinant (n ≤ 5).
fn leibniz_det(a: &[f64], n: usize) -> f64 {
    fn perms(n: usize) -> Vec<(Vec<usize>, f64)> {
        if n == 0 {
            return vec![(vec![], 1.0)];
        }
        let mut out = vec![];
        for (p, s) in perms(n - 1) {
            for pos in 0..n {
                let mut q = p.clone();
                q.insert(pos, n - 1);
                // Inserting n-1 at `pos` adds (n-1-pos) inversions.
                let sign = if (n - 1 - pos) % 2 == 0 { s } else { -s };
                out.push((q, sign));
            }
        }
        out
    }
    perms(n)
        .iter()
        .map(|(p, s)| s * (0..n).map(|i| a[i * n + p[i]]).product::<f64>())
        .sum()
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

// ------------------------------------------------------------------ cholesky

fn check_cholesky(a: &[f64], n: usize, tol: f64) {
    let l = linalg::cholesky(&t(a, &[n, n])).to_vec::<f64>();
    for i in 0..n {
        for j in i + 1..n {
            assert_eq!(l[i * n + j], 0.0, "upper triangle of L at ({i}, {j})");
        }
        assert!(l[i * n + i] > 0.0, "positive diagonal");
    }
    let back = mm(&l, &tr(&l, n, n), n, n, n);
    let err = max_diff(&back, a) / max_abs(a);
    assert!(err < tol, "L Lᵀ = A: relative error {err:e} (n = {n})");
}

#[test]
fn cholesky_reconstructs_well_conditioned_and_nearly_singular_matrices() {
    for (seed, n) in [(1, 1), (2, 3), (3, 8), (4, 17), (5, 40)] {
        check_cholesky(&spd(seed, n, n as f64), n, 1e-14);
        if n > 1 {
            check_cholesky(&spd_nearly_singular(seed, n), n, 1e-12);
        }
    }
}

#[test]
fn cholesky_reads_the_symmetrized_matrix_and_batches() {
    let n = 5;
    let mats: Vec<Vec<f64>> = (0..6).map(|s| spd(10 + s, n, 2.0)).collect();
    let flat: Vec<f64> = mats.concat();
    let l = linalg::cholesky(&t(&flat, &[2, 3, n, n]));
    assert_eq!(l.shape(), &[2, 3, n, n]);
    let lv = l.to_vec::<f64>();
    for (i, m) in mats.iter().enumerate() {
        let one = linalg::cholesky(&t(m, &[n, n])).to_vec::<f64>();
        assert_eq!(&lv[i * n * n..(i + 1) * n * n], &one[..], "batch entry {i}");
    }
    // JAX's convention: (A + Aᵀ)/2 is factored.
    let mut skew = mats[0].clone();
    for i in 0..n {
        for j in 0..i {
            skew[i * n + j] += 0.25;
            skew[j * n + i] -= 0.25;
        }
    }
    let a = linalg::cholesky(&t(&skew, &[n, n])).to_vec::<f64>();
    let b = linalg::cholesky(&t(&mats[0], &[n, n])).to_vec::<f64>();
    assert!(max_diff(&a, &b) < 1e-14);
}

#[test]
fn cholesky_of_a_matrix_that_is_not_positive_definite_is_all_nan() {
    let bad = [1.0, 2.0, 2.0, 1.0]; // eigenvalues 3 and -1
    let good = spd(7, 2, 1.0);
    let l = linalg::cholesky(&t(&[&bad[..], &good[..]].concat(), &[2, 2, 2])).to_vec::<f64>();
    assert!(l[..4].iter().all(|v| v.is_nan()), "{l:?}");
    assert!(
        l[4..].iter().all(|v| v.is_finite()),
        "other batch entries unaffected"
    );
}

#[test]
fn cholesky_in_f32() {
    let n = 6;
    let a = spd(8, n, 3.0);
    let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    let l = linalg::cholesky(&Tensor::from_slice(&a32, &[n, n]));
    assert_eq!(l.dtype(), DType::F32);
    let l: Vec<f64> = l.to_vec::<f32>().iter().map(|&v| v as f64).collect();
    let back = mm(&l, &tr(&l, n, n), n, n, n);
    assert!(max_diff(&back, &a) / max_abs(&a) < 1e-6);
}

// ---------------------------------------------------------- triangular solve

/// op(A) as the kernel should see it: the chosen triangle (ones on the
/// diagonal when unit), transposed when asked.
fn op_matrix(a: &[f64], m: usize, o: TriangularSolveOpts) -> Vec<f64> {
    let mut e = vec![0.0; m * m];
    for i in 0..m {
        for j in 0..m {
            let keep = if o.lower { j <= i } else { j >= i };
            if keep {
                e[i * m + j] = if i == j && o.unit_diagonal {
                    1.0
                } else {
                    a[i * m + j]
                };
            }
        }
    }
    if o.transpose {
        tr(&e, m, m)
    } else {
        e
    }
}

#[test]
fn triangular_solve_every_option_satisfies_its_system_and_ignores_the_other_triangle() {
    let (m, k) = (7, 3);
    for bits in 0..16u32 {
        let o = TriangularSolveOpts {
            lower: bits & 1 != 0,
            left: bits & 2 != 0,
            transpose: bits & 4 != 0,
            unit_diagonal: bits & 8 != 0,
        };
        // Garbage everywhere; a strong diagonal.
        let mut a = uniform(100 + bits as u64, m * m);
        for i in 0..m {
            a[i * m + i] += 4.0;
        }
        let bshape = if o.left { [m, k] } else { [k, m] };
        let b = uniform(200 + bits as u64, m * k);
        let x = linalg::triangular_solve(&t(&a, &[m, m]), &t(&b, &bshape), o);
        assert_eq!(x.shape(), &bshape);
        let x = x.to_vec::<f64>();
        let e = op_matrix(&a, m, o);
        let back = if o.left {
            mm(&e, &x, m, m, k)
        } else {
            mm(&x, &e, k, m, m)
        };
        let err = max_diff(&back, &b);
        assert!(err < 1e-12, "{o:?}: residual {err:e}");
    }
}

#[test]
fn triangular_solve_broadcasts_batch_axes() {
    let m = 4;
    let o = TriangularSolveOpts {
        lower: true,
        left: true,
        transpose: false,
        unit_diagonal: false,
    };
    let mut a = uniform(3, m * m);
    for i in 0..m {
        a[i * m + i] = 2.0 + i as f64;
    }
    let b = uniform(4, 3 * m * 2);
    let x = linalg::triangular_solve(&t(&a, &[m, m]), &t(&b, &[3, m, 2]), o);
    assert_eq!(x.shape(), &[3, m, 2]);
    let xv = x.to_vec::<f64>();
    for i in 0..3 {
        let one = linalg::triangular_solve(
            &t(&a, &[m, m]),
            &t(&b[i * m * 2..(i + 1) * m * 2], &[m, 2]),
            o,
        );
        assert_eq!(&xv[i * m * 2..(i + 1) * m * 2], &one.to_vec::<f64>()[..]);
    }
}

// ----------------------------------------------------------- solve, inv, det

#[test]
fn solve_matches_gauss_jordan_on_well_conditioned_and_nearly_singular_matrices() {
    for (seed, n, k) in [(1, 1, 1), (2, 2, 3), (3, 5, 1), (4, 12, 4), (5, 33, 2)] {
        let a = general(seed, n);
        let b = uniform(seed + 50, n * k);
        let x = linalg::solve(&t(&a, &[n, n]), &t(&b, &[n, k])).to_vec::<f64>();
        let want = naive_solve(&a, &b, n, k);
        let err = max_diff(&x, &want) / max_abs(&want);
        assert!(err < 1e-12, "n = {n}: relative error {err:e}");
        if n > 1 {
            // Nearly singular: compare the residual (the solution itself is
            // ill-determined), scaled by |A| |x|.
            let a = general_nearly_singular(seed, n);
            let x = linalg::solve(&t(&a, &[n, n]), &t(&b, &[n, k])).to_vec::<f64>();
            let res = max_diff(&mm(&a, &x, n, n, k), &b);
            let scale = max_abs(&a) * max_abs(&x) * n as f64;
            assert!(
                res / scale < 1e-13,
                "n = {n}: backward error {:e}",
                res / scale
            );
            let want = naive_solve(&a, &b, n, k);
            let rel = max_diff(&x, &want) / max_abs(&want);
            assert!(
                rel < 1e-3,
                "n = {n}: forward error {rel:e} (condition ~1e9)"
            );
        }
    }
}

#[test]
fn solve_with_a_vector_and_broadcast_batches() {
    let n = 4;
    let mats: Vec<Vec<f64>> = (0..3).map(|s| general(20 + s, n)).collect();
    let a = t(&mats.concat(), &[3, n, n]);
    let b = uniform(9, n);
    let x = linalg::solve(&a, &t(&b, &[n]));
    assert_eq!(x.shape(), &[3, n]);
    let xv = x.to_vec::<f64>();
    for (i, m) in mats.iter().enumerate() {
        let want = naive_solve(m, &b, n, 1);
        assert!(max_diff(&xv[i * n..(i + 1) * n], &want) < 1e-13);
    }
    // A single matrix against a batch of right-hand sides.
    let bs = uniform(10, 2 * n * 3);
    let x = linalg::solve(&t(&mats[0], &[n, n]), &t(&bs, &[2, n, 3]));
    assert_eq!(x.shape(), &[2, n, 3]);
    let xv = x.to_vec::<f64>();
    for i in 0..2 {
        let want = naive_solve(&mats[0], &bs[i * n * 3..(i + 1) * n * 3], n, 3);
        assert!(max_diff(&xv[i * n * 3..(i + 1) * n * 3], &want) < 1e-13);
    }
}

#[test]
fn inv_times_a_is_the_identity() {
    for (seed, n) in [(1, 1), (2, 4), (3, 20)] {
        for (a, tol) in [(general(seed, n), 1e-13), (spd(seed, n, 1.0), 1e-12)] {
            let inv = linalg::inv(&t(&a, &[n, n])).to_vec::<f64>();
            let p = mm(&a, &inv, n, n, n);
            let q = mm(&inv, &a, n, n, n);
            let mut eye = vec![0.0; n * n];
            for i in 0..n {
                eye[i * n + i] = 1.0;
            }
            assert!(max_diff(&p, &eye) < tol, "A inv(A), n = {n}");
            assert!(max_diff(&q, &eye) < tol, "inv(A) A, n = {n}");
        }
    }
    // Batched, f32.
    let n = 3;
    let a: Vec<f64> = [general(5, n), general(6, n)].concat();
    let a32: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    let inv = linalg::inv(&Tensor::from_slice(&a32, &[2, n, n]));
    assert_eq!(inv.dtype(), DType::F32);
    let inv: Vec<f64> = inv.to_vec::<f32>().iter().map(|&v| v as f64).collect();
    for i in 0..2 {
        let p = mm(&a[i * 9..(i + 1) * 9], &inv[i * 9..(i + 1) * 9], n, n, n);
        for r in 0..n {
            for c in 0..n {
                let want = if r == c { 1.0 } else { 0.0 };
                assert!((p[r * n + c] - want).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn det_and_slogdet_match_the_leibniz_formula() {
    for (seed, n) in [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)] {
        for a in [general(seed, n), uniform(seed + 7, n * n)] {
            let want = leibniz_det(&a, n);
            let d = linalg::det(&t(&a, &[n, n])).item::<f64>();
            assert!(
                (d - want).abs() <= 1e-12 * want.abs().max(1.0),
                "det {d} vs {want}"
            );
            let (s, l) = linalg::slogdet(&t(&a, &[n, n]));
            assert_eq!(s.item::<f64>(), want.signum(), "sign, n = {n}");
            assert!((l.item::<f64>() - want.abs().ln()).abs() < 1e-12);
        }
    }
    // Batched: one entry per matrix.
    let mats: Vec<Vec<f64>> = (0..4).map(|s| uniform(40 + s, 9)).collect();
    let d = linalg::det(&t(&mats.concat(), &[2, 2, 3, 3]));
    assert_eq!(d.shape(), &[2, 2]);
    for (i, m) in mats.iter().enumerate() {
        let want = leibniz_det(m, 3);
        assert!((d.to_vec::<f64>()[i] - want).abs() < 1e-12);
    }
}

#[test]
fn det_of_a_singular_matrix_is_zero_and_slogdet_is_zero_and_minus_infinity() {
    let singular = [1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 0.5, -1.0, 2.0];
    assert_eq!(linalg::det(&t(&singular, &[3, 3])).item::<f64>(), 0.0);
    let (s, l) = linalg::slogdet(&t(&singular, &[3, 3]));
    assert_eq!(s.item::<f64>(), 0.0);
    assert_eq!(l.item::<f64>(), f64::NEG_INFINITY);
    let zeros = Tensor::zeros(&[2, 4, 4], DType::F32);
    assert_eq!(linalg::det(&zeros).to_vec::<f32>(), vec![0.0, 0.0]);
    // A permutation matrix (a 3-cycle): sign 1, log 0; a swap: sign -1.
    let p = t(&[0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0], &[3, 3]);
    let (s, l) = linalg::slogdet(&p);
    assert_eq!((s.item::<f64>(), l.item::<f64>()), (1.0, 0.0));
    let (s, _) = linalg::slogdet(&t(&[0.0, 1.0, 1.0, 0.0], &[2, 2]));
    assert_eq!(s.item::<f64>(), -1.0);
}

// -------------------------------------------------------------------- errors

#[test]
fn non_square_non_float_and_mismatched_inputs_panic_naming_the_op() {
    let rect = Tensor::zeros(&[2, 3], DType::F64);
    for (name, f) in [
        (
            "linalg::cholesky",
            Box::new(|| drop(linalg::cholesky(&rect))) as Box<dyn Fn()>,
        ),
        ("linalg::inv", Box::new(|| drop(linalg::inv(&rect)))),
        ("linalg::det", Box::new(|| drop(linalg::det(&rect)))),
        ("linalg::slogdet", Box::new(|| drop(linalg::slogdet(&rect)))),
        (
            "linalg::solve",
            Box::new(|| drop(linalg::solve(&rect, &rect))),
        ),
    ] {
        let m = panic_message(f);
        assert!(
            m.contains(name) && m.contains("square") && m.contains("[2, 3]"),
            "{m}"
        );
    }
    let m = panic_message(|| drop(linalg::cholesky(&Tensor::zeros(&[3], DType::F64))));
    assert!(
        m.contains("linalg::cholesky") && m.contains("at least 2 axes"),
        "{m}"
    );
    let m = panic_message(|| drop(linalg::det(&Tensor::zeros(&[2, 2], DType::I32))));
    assert!(
        m.contains("linalg::det") && m.contains("f32 or f64") && m.contains("i32"),
        "{m}"
    );
    let a = Tensor::eye(3, DType::F64);
    let m = panic_message(|| drop(linalg::solve(&a, &Tensor::zeros(&[4, 1], DType::F64))));
    assert!(m.contains("linalg::solve") && m.contains("[4, 1]"), "{m}");
    let m = panic_message(|| drop(linalg::solve(&a, &Tensor::zeros(&[3, 1], DType::F32))));
    assert!(
        m.contains("linalg::solve") && m.contains("dtype mismatch"),
        "{m}"
    );
    let o = TriangularSolveOpts {
        lower: true,
        left: false,
        transpose: false,
        unit_diagonal: false,
    };
    let m = panic_message(|| {
        drop(linalg::triangular_solve(
            &a,
            &Tensor::zeros(&[3, 2], DType::F64),
            o,
        ))
    });
    assert!(
        m.contains("linalg::triangular_solve") && m.contains("[3, 2]"),
        "{m}"
    );
    let m = panic_message(|| {
        drop(linalg::solve(
            &Tensor::zeros(&[2, 3, 3], DType::F64),
            &Tensor::zeros(&[4, 3, 1], DType::F64),
        ))
    });
    assert!(
        m.contains("linalg::solve") && m.contains("do not broadcast"),
        "{m}"
    );
}

// ------------------------------------------------------------------ qr, eigh

fn check_orthonormal_columns(q: &[f64], m: usize, k: usize, tol: f64, what: &str) {
    let g = mm(&tr(q, m, k), q, k, m, k);
    for i in 0..k {
        for j in 0..k {
            let want = if i == j { 1.0 } else { 0.0 };
            assert!(
                (g[i * k + j] - want).abs() < tol,
                "{what}: QᵀQ[{i},{j}] = {}",
                g[i * k + j]
            );
        }
    }
}

#[test]
fn qr_reconstructs_with_orthonormal_q_and_upper_triangular_r() {
    for (seed, m, n) in [(1, 1, 1), (2, 5, 3), (3, 3, 5), (4, 6, 6), (5, 30, 17)] {
        for complete in [false, true] {
            let inputs = [
                uniform(seed, m * n),
                // Rank-deficient: the last column repeats the first.
                {
                    let mut a = uniform(seed + 9, m * n);
                    for i in 0..m {
                        a[i * n + n - 1] = a[i * n];
                    }
                    a
                },
            ];
            for a in inputs {
                let (q, r) = linalg::qr(&t(&a, &[m, n]), complete);
                let k = if complete { m } else { m.min(n) };
                assert_eq!(q.shape(), &[m, k]);
                assert_eq!(r.shape(), &[k, n]);
                let (q, r) = (q.to_vec::<f64>(), r.to_vec::<f64>());
                let what = format!("{m}x{n} complete={complete}");
                check_orthonormal_columns(&q, m, k, 1e-13, &what);
                for i in 0..k {
                    for j in 0..i.min(n) {
                        assert_eq!(r[i * n + j], 0.0, "{what}: R below the diagonal");
                    }
                }
                let err = max_diff(&mm(&q, &r, m, k, n), &a);
                assert!(err < 1e-13, "{what}: QR - A = {err:e}");
            }
        }
    }
    // Batched equals one by one.
    let a = uniform(77, 3 * 4 * 3);
    let (q, _) = linalg::qr(&t(&a, &[3, 4, 3]), false);
    for i in 0..3 {
        let (q1, _) = linalg::qr(&t(&a[i * 12..(i + 1) * 12], &[4, 3]), false);
        assert_eq!(
            &q.to_vec::<f64>()[i * 12..(i + 1) * 12],
            &q1.to_vec::<f64>()[..]
        );
    }
}

fn check_eigh(a: &[f64], n: usize, tol: f64, what: &str) {
    let (w, v) = linalg::eigh(&t(a, &[n, n]));
    assert_eq!((w.shape(), v.shape()), (&[n][..], &[n, n][..]));
    let (w, v) = (w.to_vec::<f64>(), v.to_vec::<f64>());
    for i in 1..n {
        assert!(w[i - 1] <= w[i], "{what}: eigenvalues not ascending: {w:?}");
    }
    check_orthonormal_columns(&v, n, n, tol, what);
    let av = mm(a, &v, n, n, n);
    let scale = max_abs(a).max(1.0);
    for j in 0..n {
        for i in 0..n {
            let err = (av[i * n + j] - w[j] * v[i * n + j]).abs();
            assert!(
                err < tol * scale,
                "{what}: (A v - λ v)[{i}] of vector {j} = {err:e}"
            );
        }
    }
    // The trace is the sum of the eigenvalues.
    let trace: f64 = (0..n).map(|i| a[i * n + i]).sum();
    assert!((trace - w.iter().sum::<f64>()).abs() < tol * scale * n as f64);
}

#[test]
fn eigh_satisfies_a_v_equals_lambda_v_with_orthonormal_ascending_eigenpairs() {
    for (seed, n) in [(1, 1), (2, 2), (3, 5), (4, 16), (5, 33)] {
        let a = uniform(seed, n * n);
        let sym: Vec<f64> = (0..n * n)
            .map(|i| (a[i] + a[(i % n) * n + i / n]) / 2.0)
            .collect();
        check_eigh(&sym, n, 1e-12, &format!("random n = {n}"));
        check_eigh(&spd(seed, n, 1.0), n, 1e-12, &format!("spd n = {n}"));
        if n > 1 {
            check_eigh(
                &spd_nearly_singular(seed, n),
                n,
                1e-12,
                &format!("nearly singular n = {n}"),
            );
        }
    }
    // Degenerate eigenvalues: still an orthonormal basis.
    let mut a = vec![0.0; 16];
    for (i, d) in [2.0, 2.0, 2.0, -1.0].iter().enumerate() {
        a[i * 4 + i] = *d;
    }
    check_eigh(&a, 4, 1e-14, "degenerate");
    // A 2x2 against its closed form.
    let (p, q, r) = (1.5, -0.7, 0.2);
    let (w, _) = linalg::eigh(&t(&[p, q, q, r], &[2, 2]));
    let mean = (p + r) / 2.0;
    let rad = (((p - r) / 2.0f64).powi(2) + q * q).sqrt();
    let w = w.to_vec::<f64>();
    assert!((w[0] - (mean - rad)).abs() < 1e-14 && (w[1] - (mean + rad)).abs() < 1e-14);
    // Batched and f32.
    let mats: Vec<Vec<f64>> = (0..3).map(|s| spd(60 + s, 4, 0.5)).collect();
    let a32: Vec<f32> = mats.concat().iter().map(|&v| v as f32).collect();
    let (w, v) = linalg::eigh(&Tensor::from_slice(&a32, &[3, 4, 4]));
    assert_eq!(
        (w.shape(), v.shape(), w.dtype()),
        (&[3, 4][..], &[3, 4, 4][..], DType::F32)
    );
    for (i, m) in mats.iter().enumerate() {
        let (w1, _) = linalg::eigh(&t(m, &[4, 4]));
        let w1 = w1.to_vec::<f64>();
        for j in 0..4 {
            assert!((w.to_vec::<f32>()[i * 4 + j] as f64 - w1[j]).abs() < 1e-4 * w1[3]);
        }
    }
}

// ---------------------------------------------------------------------- norm

/// The largest singular value by power iteration on AᵀA (m×n `a`).
fn power_sigma(a: &[f64], m: usize, n: usize) -> f64 {
    let ata = mm(&tr(a, m, n), a, n, m, n);
    let mut x = vec![1.0; n];
    for _ in 0..2000 {
        let y = mm(&ata, &x, n, n, 1);
        let len = y.iter().map(|v| v * v).sum::<f64>().sqrt();
        x = y.iter().map(|v| v / len).collect();
    }
    // The Rayleigh quotient of the converged vector.
    let y = mm(&ata, &x, n, n, 1);
    y.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>().sqrt()
}

#[test]
fn matrix_and_vector_norms_match_naive_references() {
    use linalg::Norm;
    let (m, n) = (3, 5);
    let a = uniform(90, 2 * m * n);
    let at = t(&a, &[2, m, n]);
    let get = |ord: Norm| linalg::norm(&at, ord).to_vec::<f64>();
    let (fro, one, inf, two, nuc) = (
        get(Norm::Fro),
        get(Norm::One),
        get(Norm::Inf),
        get(Norm::Two),
        get(Norm::Nuc),
    );
    for b in 0..2 {
        let x = &a[b * m * n..(b + 1) * m * n];
        let want_fro = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        let want_one = (0..n)
            .map(|j| (0..m).map(|i| x[i * n + j].abs()).sum::<f64>())
            .fold(0.0, f64::max);
        let want_inf = (0..m)
            .map(|i| (0..n).map(|j| x[i * n + j].abs()).sum::<f64>())
            .fold(0.0, f64::max);
        assert!((fro[b] - want_fro).abs() < 1e-13);
        assert!((one[b] - want_one).abs() < 1e-13);
        assert!((inf[b] - want_inf).abs() < 1e-13);
        assert!(
            (two[b] - power_sigma(x, m, n)).abs() < 1e-10,
            "two {} vs {}",
            two[b],
            power_sigma(x, m, n)
        );
        // σ₁ ≤ ‖A‖_F ≤ ‖A‖_* ≤ √rank ‖A‖_F.
        assert!(two[b] <= fro[b] && fro[b] <= nuc[b] && nuc[b] <= (m as f64).sqrt() * fro[b]);
    }
    // The nuclear norm of a 2x2 in closed form, and of a rank-1 matrix (its
    // only singular value is |u| |v|).
    let (p, q, r, s): (f64, f64, f64, f64) = (1.0, 2.0, -0.5, 0.75);
    let (trace, det) = (p * p + q * q + r * r + s * s, p * s - q * r);
    let disc = (trace * trace - 4.0 * det * det).sqrt();
    let want = ((trace + disc) / 2.0).sqrt() + ((trace - disc) / 2.0).sqrt();
    let got = linalg::norm(&t(&[p, q, r, s], &[2, 2]), Norm::Nuc).item::<f64>();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    let u = [1.0, -2.0, 0.5];
    let v = [3.0, 1.0];
    let outer: Vec<f64> = u
        .iter()
        .flat_map(|a| v.iter().map(move |b| a * b))
        .collect();
    let norm_u = u.iter().map(|x| x * x).sum::<f64>().sqrt();
    let norm_v = v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let got = linalg::norm(&t(&outer, &[3, 2]), Norm::Nuc).item::<f64>();
    assert!((got - norm_u * norm_v).abs() < 1e-6, "{got}");
    // Vector orders over the last axis.
    let xs = [0.5, -2.0, 0.0, 3.0];
    let x = t(&xs, &[1, 4]);
    for (p, want) in [
        (1.0, 5.5),
        (2.0, (0.25f64 + 4.0 + 9.0).sqrt()),
        (3.0, (0.125f64 + 8.0 + 27.0).powf(1.0 / 3.0)),
        (0.5, (0.5f64.sqrt() + 2.0f64.sqrt() + 3.0f64.sqrt()).powi(2)),
        (f64::INFINITY, 3.0),
        (f64::NEG_INFINITY, 0.0),
        (0.0, 3.0),
    ] {
        let got = linalg::norm(&x, Norm::Vector(p)).to_vec::<f64>();
        assert_eq!(got.len(), 1);
        assert!(
            (got[0] - want).abs() < 1e-12,
            "p = {p}: {} vs {want}",
            got[0]
        );
    }
    let m = panic_message(|| drop(linalg::norm(&t(&[1.0], &[1]), Norm::Fro)));
    assert!(m.contains("linalg::norm") && m.contains("2 axes"), "{m}");
}

// ------------------------------------------- single large matrices (rayon)

/// One matrix large enough that the kernels hand faer its rayon threads
/// (`par_for`: at least 2^24 flops): the same identities hold there.
#[test]
fn large_single_matrices_take_faers_parallel_path_and_keep_their_identities() {
    let n = 400;
    let a = spd(500, n, n as f64);
    let l = linalg::cholesky(&t(&a, &[n, n])).to_vec::<f64>();
    assert!(max_diff(&mm(&l, &tr(&l, n, n), n, n, n), &a) / max_abs(&a) < 1e-14);
    let g = general(501, n);
    let b = uniform(502, n * 3);
    let x = linalg::solve(&t(&g, &[n, n]), &t(&b, &[n, 3])).to_vec::<f64>();
    assert!(max_diff(&mm(&g, &x, n, n, 3), &b) < 1e-10);
    let lower = TriangularSolveOpts {
        lower: true,
        left: true,
        transpose: false,
        unit_diagonal: false,
    };
    let y = linalg::triangular_solve(&t(&l, &[n, n]), &t(&b, &[n, 3]), lower).to_vec::<f64>();
    assert!(max_diff(&mm(&l, &y, n, n, 3), &b) < 1e-10);
    let (q, r) = linalg::qr(&t(&g, &[n, n]), false);
    let (q, r) = (q.to_vec::<f64>(), r.to_vec::<f64>());
    assert!(max_diff(&mm(&q, &r, n, n, n), &g) < 1e-12);
    check_orthonormal_columns(&q, n, n, 1e-12, "qr n = 400");
    check_eigh(&a, n, 1e-12, "eigh n = 400");
    let (u, s, vt) = linalg::svd(&t(&g, &[n, n]), false);
    let back = (u * s.unsqueeze(-2)).matmul(&vt).to_vec::<f64>();
    assert!(max_diff(&back, &g) < 1e-12);
}
