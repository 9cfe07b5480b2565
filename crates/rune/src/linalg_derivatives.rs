//! Derivatives of the linear-algebra primitives (`nx::linalg`), as JAX
//! derives them in `jax/_src/lax/linalg.py`; `jvp.rs` and `vjp.rs` call
//! these from their arms. Every rule is built from the primitives
//! themselves and ordinary tensor operations, so derivatives nest.
//!
//! - Cholesky (`L Lᵀ = Σ`): `L̇ = L φ(L⁻¹ Σ̇ L⁻ᵀ)` with `φ` the lower
//!   triangle with the diagonal halved (Murray 2016, JAX's rule); the
//!   reverse rule is its transpose, `Σ̄ = L⁻ᵀ φ(Lᵀ L̄) L⁻¹` (not symmetric:
//!   `linalg::cholesky` symmetrizes its input, whose transpose symmetrizes
//!   the cotangent, as in JAX).
//! - Triangular solve: linear in `b`; in `a`, `Ẋ = -op(A)⁻¹ op(Ȧ) X` (left)
//!   or `-X op(Ȧ) op(A)⁻¹` (right), `Ȧ` restricted to the triangle the
//!   kernel reads (strictly, with a unit diagonal); the reverse rule
//!   transposes these.
//! - Solve: `Ẋ = A⁻¹ (Ḃ - Ȧ X)`; `B̄ = A⁻ᵀ X̄`, `Ā = -B̄ Xᵀ` (JAX's
//!   `custom_linear_solve`).
//! - Slogdet: the sign has a zero derivative, `d log|det A| = tr(A⁻¹ Ȧ)`,
//!   so `Ā = ḡ A⁻ᵀ`.
//! - QR, eigh: see their rules below.
//! - SVD: JAX's `_svd_jvp_rule` (reduced factorization only, as JAX), its
//!   transpose for the reverse rule; undefined (NaN) for the factors where
//!   singular values repeat, finite for the singular values themselves.

use crate::autodiff::{add_opt, PrimRule, Saved};
use nx::{bind, Prim, Tensor};

/// The last two axes swapped.
fn mt(x: &Tensor) -> Tensor {
    x.swapaxes(-2, -1)
}

/// The identity broadcast to `a`'s `[..., n, n]` shape.
fn eye_like(a: &Tensor) -> Tensor {
    let n = a.shape()[a.ndim() - 1];
    Tensor::eye(n, a.dtype()).broadcast_to(a.shape())
}

fn tri_solve(
    a: &Tensor,
    b: &Tensor,
    lower: bool,
    left: bool,
    transpose: bool,
    unit: bool,
) -> Tensor {
    bind(
        Prim::TriangularSolve {
            lower,
            left,
            transpose,
            unit_diagonal: unit,
        },
        &[a, b],
    )
}

/// The lower triangle of `x` with its diagonal halved (JAX's `phi`).
fn phi(x: &Tensor) -> Tensor {
    x.tril(0) - &(x * &eye_like(x)) * 0.5
}

/// The tangent of `L = cholesky(Σ)` along `Σ̇`.
pub(crate) fn cholesky_jvp(l: &Tensor, sigma_dot: &Tensor) -> Tensor {
    // Σ̇ L⁻ᵀ, then L⁻¹ (Σ̇ L⁻ᵀ).
    let tmp = tri_solve(l, sigma_dot, true, false, true, false);
    let y = tri_solve(l, &tmp, true, true, false, false);
    l.matmul(&phi(&y))
}

/// The reverse rule of `Prim::Cholesky`, keeping `L`.
pub(crate) fn cholesky_vjp(l: &Tensor) -> PrimRule {
    let l = Saved::new(l.clone());
    Box::new(move |ct, op| {
        let l = l.get(op);
        let p = phi(&mt(l).matmul(ct));
        // L⁻ᵀ P, then (L⁻ᵀ P) L⁻¹.
        let z = tri_solve(l, &p, true, true, true, false);
        vec![Some(tri_solve(l, &z, true, false, false, false))]
    })
}

/// `Ȧ` restricted to the part of `a` a triangular solve reads.
fn tri_mask(g: &Tensor, lower: bool, unit: bool) -> Tensor {
    let k = if unit { 1 } else { 0 };
    if lower {
        g.tril(-k)
    } else {
        g.triu(k)
    }
}

/// The options of a `Prim::TriangularSolve`.
fn tri_opts(prim: &Prim) -> (bool, bool, bool, bool) {
    match prim {
        Prim::TriangularSolve {
            lower,
            left,
            transpose,
            unit_diagonal,
        } => (*lower, *left, *transpose, *unit_diagonal),
        p => unreachable!("tri_opts: {} is not a triangular solve", p.name()),
    }
}

/// The tangent of `X = triangular_solve(A, B)` (`out`) along `(ta, tb)`.
pub(crate) fn triangular_solve_jvp(
    prim: &Prim,
    a: &Tensor,
    out: &Tensor,
    ta: Option<&Tensor>,
    tb: Option<&Tensor>,
) -> Option<Tensor> {
    let (lower, left, transpose, unit) = tri_opts(prim);
    let db = tb.map(|tb| bind(prim.clone(), &[a, tb]));
    let da = ta.map(|ga| {
        let g = -tri_mask(ga, lower, unit);
        let g = if transpose { mt(&g) } else { g };
        let rhs = if left { g.matmul(out) } else { out.matmul(&g) };
        bind(prim.clone(), &[a, &rhs])
    });
    add_opt(da, db)
}

/// The reverse rule of `Prim::TriangularSolve`, keeping `A` and `X`.
pub(crate) fn triangular_solve_vjp(
    prim: &Prim,
    a: &Tensor,
    out: &Tensor,
    needs: &[bool],
) -> PrimRule {
    let (lower, left, transpose, unit) = tri_opts(prim);
    let need_a = needs[0];
    let a = Saved::new(a.clone());
    let x = need_a.then(|| Saved::new(out.clone()));
    Box::new(move |ct, op| {
        let a = a.get(op);
        let ct_b = tri_solve(a, ct, lower, left, !transpose, unit);
        let ct_a = x.as_ref().map(|x| {
            let x = x.get(op);
            let g = match (left, transpose) {
                (true, false) => ct_b.matmul(&mt(x)),
                (true, true) => x.matmul(&mt(&ct_b)),
                (false, false) => mt(x).matmul(&ct_b),
                (false, true) => mt(&ct_b).matmul(x),
            };
            -tri_mask(&g, lower, unit)
        });
        vec![ct_a, Some(ct_b)]
    })
}

/// The tangent of `X = solve(A, B)` (`out`) along `(ta, tb)`.
pub(crate) fn solve_jvp(
    a: &Tensor,
    out: &Tensor,
    ta: Option<&Tensor>,
    tb: Option<&Tensor>,
) -> Option<Tensor> {
    let rhs = match (ta, tb) {
        (None, None) => return None,
        (Some(ta), Some(tb)) => tb - &ta.matmul(out),
        (Some(ta), None) => -ta.matmul(out),
        (None, Some(tb)) => tb.clone(),
    };
    Some(bind(Prim::Solve, &[a, &rhs]))
}

/// The reverse rule of `Prim::Solve`, keeping `A` and `X`.
pub(crate) fn solve_vjp(a: &Tensor, out: &Tensor, needs: &[bool]) -> PrimRule {
    let a = Saved::new(a.clone());
    let x = needs[0].then(|| Saved::new(out.clone()));
    Box::new(move |ct, op| {
        let ct_b = bind(Prim::Solve, &[&mt(a.get(op)), ct]);
        let ct_a = x.as_ref().map(|x| -ct_b.matmul(&mt(x.get(op))));
        vec![ct_a, Some(ct_b)]
    })
}

/// The tangent of `slogdet(A)` (packed `[..., 2]`) along `ta`: zero for the
/// sign, `tr(A⁻¹ Ȧ)` for the log-magnitude.
pub(crate) fn slogdet_jvp(a: &Tensor, ta: &Tensor) -> Tensor {
    let s = bind(Prim::Solve, &[a, ta]);
    let tr = (&s * &eye_like(&s)).sum(&[-2, -1], false).unsqueeze(-1);
    Tensor::concatenate(&[tr.zeros_like(), tr], -1)
}

/// The reverse rule of `Prim::Slogdet`, keeping `A`.
pub(crate) fn slogdet_vjp(a: &Tensor) -> PrimRule {
    let a = Saved::new(a.clone());
    Box::new(move |ct, op| {
        let a = a.get(op);
        // A⁻ᵀ = solve(Aᵀ, I).
        let inv_t = bind(Prim::Solve, &[&mt(a), &eye_like(a)]);
        let g = ct.narrow(-1, 1, 1).unsqueeze(-1);
        vec![Some(&g * &inv_t)]
    })
}

/// Panics unless QR's derivative is defined (JAX implements it for
/// `m >= n` with the reduced factorization, or square matrices only).
fn qr_differentiable(complete: bool, a: &Tensor) {
    let s = a.shape();
    let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
    if m < n || (complete && m != n) {
        panic!(
            "linalg::qr: the derivative is implemented for m >= n with complete = false, or \
             square matrices (as in JAX); got shape {s:?} with complete = {complete}"
        );
    }
}

/// `R = triu(Qᵀ A)`.
fn qr_r(a: &Tensor, q: &Tensor) -> Tensor {
    mt(q).matmul(a).triu(0)
}

/// The tangent of `Q` (JAX's rule, after j-towns.github.io/papers/qr-derivative.pdf):
/// `D = Ȧ R⁻¹`, `C = Qᵀ D`, `Ω = tril(C, -1) - tril(C, -1)ᵀ`, `Q̇ = Q (Ω - C) + D`.
pub(crate) fn qr_jvp(complete: bool, a: &Tensor, q: &Tensor, ta: &Tensor) -> Tensor {
    qr_differentiable(complete, a);
    let r = qr_r(a, q);
    let d = tri_solve(&r, ta, false, false, false, false);
    let c = mt(q).matmul(&d);
    let low = c.tril(-1);
    let omega = &low - &mt(&low);
    q.matmul(&(omega - &c)) + d
}

/// The reverse rule of `Prim::Qr` (the transpose of `qr_jvp`), keeping `A`
/// and `Q`: `M = Qᵀ Q̄`, `D̄ = Q̄ + Q (tril(M - Mᵀ, -1) - M)`, `Ā = D̄ R⁻ᵀ`.
pub(crate) fn qr_vjp(complete: bool, a: &Tensor, q: &Tensor) -> PrimRule {
    qr_differentiable(complete, a);
    let (a, q) = (Saved::new(a.clone()), Saved::new(q.clone()));
    Box::new(move |ct, op| {
        let (a, q) = (a.get(op), q.get(op));
        let r = qr_r(a, q);
        let m = mt(q).matmul(ct);
        let g = (&m - &mt(&m)).tril(-1) - &m;
        let d_bar = ct + &q.matmul(&g);
        vec![Some(tri_solve(&r, &d_bar, false, false, true, false))]
    })
}

/// The eigenvectors `V` and eigenvalues `w` (as a `[..., 1, n]` row) of a
/// packed `Prim::Eigh` output, and `F` with `F_ij = 1/(w_j - w_i)` off the
/// diagonal, 0 on it (infinite for equal eigenvalues, as JAX's).
fn eigh_parts(out: &Tensor) -> (Tensor, Tensor, Tensor) {
    let n = out.shape()[out.ndim() - 1];
    let v = out.narrow(-2, 0, n);
    let w = out.narrow(-2, n, 1);
    let eye = eye_like(&v);
    let f = (&w - &mt(&w) + &eye).recip() - &eye;
    (v, w, f)
}

/// `F ∘ X`, 0 where `X` is exactly 0 (JAX's symbolic zeros: an unused
/// eigenvector cotangent contributes nothing even where `F` is infinite, so
/// the eigenvalues' derivative stays finite at degenerate eigenvalues).
fn f_times(f: &Tensor, x: &Tensor) -> Tensor {
    let zero = x.scalar_like(0.0);
    Tensor::where_(&x.equal(&zero), &zero, &(f * x))
}

/// The tangent of the packed eigendecomposition (JAX's rule): with
/// `S = Vᵀ Ȧ V`, `V̇ = V (F ∘ S)`, `ẇ = diag(S)`.
pub(crate) fn eigh_jvp(out: &Tensor, ta: &Tensor) -> Tensor {
    let (v, _, f) = eigh_parts(out);
    let s = mt(&v).matmul(&ta.matmul(&v));
    let dv = v.matmul(&f_times(&f, &s));
    let dw = (&s * &eye_like(&s)).sum(&[-2], true);
    Tensor::concatenate(&[dv, dw], -2)
}

/// The reverse rule of `Prim::Eigh`, keeping its output:
/// `Ā = V (F ∘ (Vᵀ V̄) + diag(w̄)) Vᵀ`.
pub(crate) fn eigh_vjp(out: &Tensor) -> PrimRule {
    let out = Saved::new(out.clone());
    Box::new(move |ct, op| {
        let (v, _, f) = eigh_parts(out.get(op));
        let n = v.shape()[v.ndim() - 1];
        let (v_bar, w_bar) = (ct.narrow(-2, 0, n), ct.narrow(-2, n, 1));
        let inner = f_times(&f, &mt(&v).matmul(&v_bar)) + &eye_like(&v) * &w_bar;
        vec![Some(v.matmul(&inner).matmul(&mt(&v)))]
    })
}

/// Panics unless the SVD's derivative is defined: JAX implements it for the
/// reduced factorization only (`full_matrices = false`); a square matrix's
/// full factorization is its reduced one, so it is accepted too.
fn svd_differentiable(full_matrices: bool, m: usize, n: usize) {
    if full_matrices && m != n {
        panic!(
            "linalg::svd: the derivative is implemented for full_matrices = false (as in JAX) \
             or square matrices; got a {m}x{n} matrix with full_matrices = true"
        );
    }
}

/// The factors of a packed `Prim::Svd` output of an `m`×`n` matrix:
/// `u` `[..., m, k]`, `s` as a `[..., 1, k]` row, `vt` `[..., k, n]`, and
/// `F` with `F_ij = 1/(s_j² - s_i²)` off the diagonal, 0 on it (infinite
/// for equal singular values, as JAX's).
fn svd_parts(m: usize, n: usize, out: &Tensor, full: bool) -> (Tensor, Tensor, Tensor, Tensor) {
    svd_differentiable(full, m, n);
    let (u, sv, vt) = nx::linalg::svd_unpack(out, m, n, full);
    let row = sv.unsqueeze(-2);
    let eye = eye_like(&mt(&row).matmul(&row));
    let diffs = (&row + &mt(&row)) * (&row - &mt(&row));
    let f = (diffs + &eye).recip() - &eye;
    (u, row, vt, f)
}

/// `x / s` (columns divided by the `[..., 1, k]` row `s`), 0 where `x` is
/// exactly 0 (JAX's symbolic zeros: an unused factor's cotangent adds
/// nothing even where a singular value is 0).
fn div_s(x: &Tensor, s: &Tensor) -> Tensor {
    let zero = x.scalar_like(0.0);
    Tensor::where_(&x.equal(&zero), &zero, &(x / s))
}

/// `[..., r, c]` flattened into its last axis, to pack.
fn flat2(x: &Tensor) -> Tensor {
    let s = x.shape();
    let mut shape = s[..s.len() - 2].to_vec();
    shape.push(s[s.len() - 2] * s[s.len() - 1]);
    x.reshape(&shape)
}

/// The tangent of the packed SVD `a = u diag(s) vt` along `ȧ` (JAX's
/// `_svd_jvp_rule`, real case): with `dS = uᵀ ȧ v`, `ṡ = diag(dS)`,
/// `u̇ = u (F ∘ (dS S + S dSᵀ))`, `v̇ = v (F ∘ (S dS + dSᵀ S))`, plus, for
/// `m > n`, `(I - u uᵀ) ȧ v S⁻¹` in `u̇` (for `n > m`, `(I - v vᵀ) ȧᵀ u S⁻¹`
/// in `v̇`). The antisymmetric diagonal term of the complex case is 0 for
/// real matrices. Where two singular values are equal `F` is infinite and
/// the factors' tangents are NaN (as in JAX); `ṡ` stays finite.
pub(crate) fn svd_jvp(full: bool, a: &Tensor, out: &Tensor, ta: &Tensor) -> Tensor {
    let sh = a.shape();
    let (m, n) = (sh[sh.len() - 2], sh[sh.len() - 1]);
    let (u, s, vt, f) = svd_parts(m, n, out, full);
    let v = mt(&vt);
    let ds_mat = mt(&u).matmul(&ta.matmul(&v));
    let eye = eye_like(&ds_mat);
    let ds = (&ds_mat * &eye).sum(&[-2], false);
    let dss = &ds_mat * &s;
    let sds = &mt(&s) * &ds_mat;
    let mut du = u.matmul(&f_times(&f, &(&dss + &mt(&dss))));
    let mut dv = v.matmul(&f_times(&f, &(&sds + &mt(&sds))));
    if m > n {
        let dav = ta.matmul(&v);
        du = du + div_s(&(&dav - &u.matmul(&mt(&u).matmul(&dav))), &s);
    }
    if n > m {
        let dahu = mt(ta).matmul(&u);
        dv = dv + div_s(&(&dahu - &v.matmul(&vt.matmul(&dahu))), &s);
    }
    Tensor::concatenate(&[flat2(&du), ds, flat2(&mt(&dv))], -1)
}

/// The reverse rule of `Prim::Svd` (the transpose of `svd_jvp`), keeping
/// the output: with `G = F ∘ (uᵀ ū)`, `H = F ∘ (vᵀ v̄)`,
/// `ā = u (diag(s̄) + (G + Gᵀ) S + S (H + Hᵀ)) vᵀ`, plus
/// `(I - u uᵀ) ū S⁻¹ vᵀ` for `m > n` (`u S⁻¹ v̄ᵀ (I - v vᵀ)` for `n > m`).
/// Exact zeros in the cotangent contribute nothing (see `f_times`), so the
/// gradient of a function of `s` alone is finite at repeated or zero
/// singular values, as JAX's.
pub(crate) fn svd_vjp(full: bool, a: &Tensor, out: &Tensor) -> PrimRule {
    let sh = a.shape();
    let (m, n) = (sh[sh.len() - 2], sh[sh.len() - 1]);
    svd_differentiable(full, m, n);
    let out = Saved::new(out.clone());
    Box::new(move |ct, op| {
        let (u, s, vt, f) = svd_parts(m, n, out.get(op), full);
        let (u_bar, s_bar, vt_bar) = nx::linalg::svd_unpack(ct, m, n, full);
        let v = mt(&vt);
        let v_bar = mt(&vt_bar);
        let g = f_times(&f, &mt(&u).matmul(&u_bar));
        let h = f_times(&f, &mt(&v).matmul(&v_bar));
        let eye = eye_like(&g);
        let inner = &eye * &s_bar.unsqueeze(-2) + (&g + &mt(&g)) * &s + &mt(&s) * &(&h + &mt(&h));
        let mut ga = u.matmul(&inner).matmul(&vt);
        if m > n {
            let us = div_s(&u_bar, &s);
            ga = ga + (&us - &u.matmul(&mt(&u).matmul(&us))).matmul(&vt);
        }
        if n > m {
            let vs = mt(&div_s(&v_bar, &s));
            ga = ga + u.matmul(&(&vs - &vs.matmul(&v).matmul(&vt)));
        }
        vec![Some(ga)]
    })
}
