//! Linear algebra (`nx::linalg`): factorizations and solves of f32/f64
//! matrices, batched over every leading axis (the matrices are the last two
//! axes; the leading shapes of two operands broadcast).
//!
//! The primitives are `Prim::Cholesky`, `Prim::TriangularSolve`,
//! `Prim::Solve` (LU with partial pivoting) and `Prim::Slogdet` (the sign
//! and log-magnitude packed in a last axis of 2, since a primitive has one
//! output; `slogdet` slices it), `Prim::Qr`, `Prim::Eigh` and `Prim::Svd`
//! (packed likewise), all computed by `faer`. `inv` is `solve` against the
//! identity, `det` is `sign * exp(logabsdet)`, `pinv`, `lstsq` and the
//! spectral norms come from `svd`; their derivatives follow. The kernels are
//! `cpu/linalg_kernels.rs`, the derivative rules rune's `linalg_derivatives.rs`.
//!
//! Conventions (JAX's, which differ from numpy's in raising nothing):
//! - `cholesky` symmetrizes its input (`(A + Aᵀ)/2`, as `jnp.linalg.cholesky`)
//!   and returns a lower factor; a matrix that is not positive definite gives
//!   a factor of all NaN (numpy raises `LinAlgError`).
//! - `solve` and `inv` of a singular matrix give infinities or NaNs (numpy
//!   raises); `det` of a singular matrix is 0, `slogdet` `(0, -inf)`.
//!   The derivative of `det` at an exactly singular matrix is NaN here (JAX
//!   computes the cofactor matrix instead).
//! - A non-square matrix, a non-float dtype, or fewer than two axes panic
//!   naming the operation.
//!
//! These operations run eagerly: inside `rune::jit`/`pmap` each one raises a
//! `JitError` naming it.
//!
//! ```
//! use nx::{linalg, Tensor};
//! let a = Tensor::from_slice(&[4.0f64, 2.0, 2.0, 3.0], &[2, 2]);
//! let l = linalg::cholesky(&a);
//! let back = l.matmul(&l.swapaxes(-1, -2));
//! assert!((back.to_vec::<f64>()[3] - 3.0).abs() < 1e-12);
//! assert!((linalg::det(&a).item::<f64>() - 8.0).abs() < 1e-12);
//! ```

use crate::prim::Prim;
use crate::shape::try_broadcast_shapes;
use crate::tensor::Tensor;
use crate::trace::{bind, notify_eager_only};
use crate::DType;

/// Which system `triangular_solve` solves: `op(A) X = B` (`left`) or
/// `X op(A) = B`, `op(A) = Aᵀ` when `transpose`, `A` read from its `lower`
/// (else upper) triangle only, its diagonal taken as ones when
/// `unit_diagonal`.
///
/// ```
/// use nx::linalg::TriangularSolveOpts;
/// let o = TriangularSolveOpts { lower: true, left: true, transpose: false, unit_diagonal: false };
/// assert!(o.lower && o.left);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TriangularSolveOpts {
    /// Read `A`'s lower triangle (else its upper one).
    pub lower: bool,
    /// Solve `op(A) X = B` (else `X op(A) = B`).
    pub left: bool,
    /// `op(A) = Aᵀ` (else `A`).
    pub transpose: bool,
    /// Take `A`'s diagonal as ones (its stored diagonal is not read).
    pub unit_diagonal: bool,
}

/// Panics unless `a` is a float (f32/f64) stack of square matrices; returns n.
fn square(op: &str, a: &Tensor) -> usize {
    float(op, a);
    let s = a.shape();
    if s.len() < 2 {
        panic!("linalg::{op}: expects a matrix (at least 2 axes), got shape {s:?}");
    }
    let (r, c) = (s[s.len() - 2], s[s.len() - 1]);
    if r != c {
        panic!(
            "linalg::{op}: expects square matrices in the last two axes, got shape {s:?} \
             ({r}x{c})"
        );
    }
    r
}

fn float(op: &str, a: &Tensor) {
    if !matches!(a.dtype(), DType::F32 | DType::F64) {
        panic!(
            "linalg::{op}: expects an f32 or f64 tensor, got {}",
            a.dtype()
        );
    }
}

/// The leading (batch) axes of `a` and `b` broadcast together, each operand
/// broadcast to them (views) followed by its own last two axes.
fn broadcast_batch(op: &str, a: &Tensor, b: &Tensor) -> (Tensor, Tensor) {
    if a.dtype() != b.dtype() {
        panic!(
            "linalg::{op}: dtype mismatch: {} and {} (cast one operand first)",
            a.dtype(),
            b.dtype()
        );
    }
    let (sa, sb) = (a.shape(), b.shape());
    let (ba, bb) = (&sa[..sa.len() - 2], &sb[..sb.len() - 2]);
    let batch = try_broadcast_shapes(ba, bb).unwrap_or_else(|| {
        panic!("linalg::{op}: the batch axes of shapes {sa:?} and {sb:?} do not broadcast")
    });
    let with = |t: &Tensor| {
        let s = t.shape();
        let mut shape = batch.clone();
        shape.extend_from_slice(&s[s.len() - 2..]);
        t.broadcast_to(&shape)
    };
    (with(a), with(b))
}

/// The lower Cholesky factor `L` of a symmetric positive-definite `a`
/// (`L Lᵀ = a`), over `[..., n, n]`. As JAX, `a` is symmetrized first
/// (`(a + aᵀ)/2`); a matrix that is not positive definite gives all NaN.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[4.0f64, 2.0, 2.0, 2.0], &[2, 2]);
/// assert_eq!(linalg::cholesky(&a).to_vec::<f64>(), vec![2.0, 0.0, 1.0, 1.0]);
/// ```
pub fn cholesky(a: &Tensor) -> Tensor {
    square("cholesky", a);
    notify_eager_only("linalg::cholesky");
    let sym = (a + &a.swapaxes(-1, -2)) * 0.5;
    bind(Prim::Cholesky, &[&sym])
}

/// Solves a triangular system (see [`TriangularSolveOpts`]): `a` is
/// `[..., m, m]`, `b` `[..., m, k]` when `left`, `[..., k, m]` otherwise;
/// the result has `b`'s shape (leading axes broadcast).
///
/// ```
/// use nx::{linalg, linalg::TriangularSolveOpts, Tensor};
/// let l = Tensor::from_slice(&[2.0f64, 0.0, 1.0, 1.0], &[2, 2]);
/// let b = Tensor::from_slice(&[2.0f64, 3.0], &[2, 1]);
/// let o = TriangularSolveOpts { lower: true, left: true, transpose: false, unit_diagonal: false };
/// assert_eq!(linalg::triangular_solve(&l, &b, o).to_vec::<f64>(), vec![1.0, 2.0]);
/// ```
pub fn triangular_solve(a: &Tensor, b: &Tensor, opts: TriangularSolveOpts) -> Tensor {
    let op = "triangular_solve";
    let m = square(op, a);
    float(op, b);
    let sb = b.shape();
    if sb.len() < 2 {
        panic!("linalg::{op}: b must have at least 2 axes ([..., m, k] or [..., k, m]), got shape {sb:?}");
    }
    let along = if opts.left {
        sb.len() - 2
    } else {
        sb.len() - 1
    };
    if sb[along] != m {
        panic!(
            "linalg::{op}: a is {m}x{m} but b (shape {sb:?}) has {} along axis {along} \
             (left = {}: b must be [..., {m}, k] when left, [..., k, {m}] otherwise)",
            sb[along], opts.left
        );
    }
    notify_eager_only("linalg::triangular_solve");
    let (a, b) = broadcast_batch(op, a, b);
    bind(
        Prim::TriangularSolve {
            lower: opts.lower,
            left: opts.left,
            transpose: opts.transpose,
            unit_diagonal: opts.unit_diagonal,
        },
        &[&a, &b],
    )
}

/// Solves `a x = b` (LU with partial pivoting). `a` is `[..., n, n]`; `b`
/// is a vector `[n]` when 1-D (numpy 2's rule; the result is then `[..., n]`),
/// else `[..., n, k]`; leading axes broadcast. A singular `a` gives
/// infinities or NaNs.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[0.0f64, 2.0, 1.0, 1.0], &[2, 2]);
/// let b = Tensor::from_slice(&[4.0f64, 3.0], &[2]);
/// assert_eq!(linalg::solve(&a, &b).to_vec::<f64>(), vec![1.0, 2.0]);
/// ```
pub fn solve(a: &Tensor, b: &Tensor) -> Tensor {
    let op = "solve";
    let n = square(op, a);
    float(op, b);
    let sb = b.shape().to_vec();
    let vector = sb.len() == 1;
    if sb.is_empty() || (vector && sb[0] != n) || (!vector && sb[sb.len() - 2] != n) {
        panic!("linalg::{op}: a is {n}x{n}, so b must be [{n}] or [..., {n}, k]; got shape {sb:?}");
    }
    notify_eager_only("linalg::solve");
    let b2 = if vector { b.unsqueeze(-1) } else { b.clone() };
    let (a, b2) = broadcast_batch(op, a, &b2);
    let x = bind(Prim::Solve, &[&a, &b2]);
    if vector {
        x.squeeze(-1)
    } else {
        x
    }
}

/// The inverse of each `[..., n, n]` matrix (`solve` against the identity).
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[2.0f64, 0.0, 0.0, 4.0], &[2, 2]);
/// assert_eq!(linalg::inv(&a).to_vec::<f64>(), vec![0.5, 0.0, 0.0, 0.25]);
/// ```
pub fn inv(a: &Tensor) -> Tensor {
    let n = square("inv", a);
    notify_eager_only("linalg::inv");
    let eye = Tensor::eye(n, a.dtype()).broadcast_to(a.shape());
    bind(Prim::Solve, &[a, &eye])
}

/// `(sign, log|det a|)` of each `[..., n, n]` matrix, both of shape `[...]`;
/// a singular matrix gives `(0, -inf)`.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[0.0f64, 1.0, 1.0, 0.0], &[2, 2]);
/// let (sign, logdet) = linalg::slogdet(&a);
/// assert_eq!((sign.item::<f64>(), logdet.item::<f64>()), (-1.0, 0.0));
/// ```
pub fn slogdet(a: &Tensor) -> (Tensor, Tensor) {
    square("slogdet", a);
    notify_eager_only("linalg::slogdet");
    let p = bind(Prim::Slogdet, &[a]);
    (
        p.narrow(-1, 0, 1).squeeze(-1),
        p.narrow(-1, 1, 1).squeeze(-1),
    )
}

/// The determinant of each `[..., n, n]` matrix (`sign * exp(logabsdet)`
/// from `slogdet`); exactly 0 for a singular matrix.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[1.0f64, 2.0, 2.0, 4.0], &[2, 2]);
/// assert_eq!(linalg::det(&a).item::<f64>(), 0.0);
/// ```
pub fn det(a: &Tensor) -> Tensor {
    square("det", a);
    notify_eager_only("linalg::det");
    let p = bind(Prim::Slogdet, &[a]);
    let (sign, logdet) = (
        p.narrow(-1, 0, 1).squeeze(-1),
        p.narrow(-1, 1, 1).squeeze(-1),
    );
    sign * logdet.exp()
}

/// The QR factorization `a = q r` of each `[..., m, n]` matrix (faer's
/// blocked Householder reflections; signs as they fall, like LAPACK's): `q` has orthonormal
/// columns, `[..., m, k]`, `r` is upper triangular `[..., k, n]`, with
/// `k = min(m, n)`, or `k = m` when `complete`. Derivatives exist for
/// `m >= n` reduced, or square (as in JAX; otherwise differentiating panics).
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[3.0f64, 1.0, 4.0, 2.0], &[2, 2]);
/// let (q, r) = linalg::qr(&a, false);
/// let back = q.matmul(&r).to_vec::<f64>();
/// assert!((back[2] - 4.0).abs() < 1e-12 && r.to_vec::<f64>()[2] == 0.0);
/// ```
pub fn qr(a: &Tensor, complete: bool) -> (Tensor, Tensor) {
    float("qr", a);
    if a.ndim() < 2 {
        panic!(
            "linalg::qr: expects a matrix (at least 2 axes), got shape {:?}",
            a.shape()
        );
    }
    notify_eager_only("linalg::qr");
    let q = bind(Prim::Qr { complete }, &[a]);
    let r = q.swapaxes(-1, -2).matmul(a).triu(0);
    (q, r)
}

/// The eigenvalues `w` (ascending, `[..., n]`) and eigenvectors `v` (the
/// columns of `[..., n, n]`, `a v = v diag(w)`) of each symmetric matrix
/// (symmetrized first, `(a + aᵀ)/2`, as JAX; faer's eigensolver).
/// As in JAX, the derivative of the eigenvectors is undefined where two
/// eigenvalues are equal (it has `1/(w_j - w_i)` factors: infinities or
/// NaNs there), while the eigenvalues' derivative stays finite.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[2.0f64, 1.0, 1.0, 2.0], &[2, 2]);
/// let (w, _v) = linalg::eigh(&a);
/// let w = w.to_vec::<f64>();
/// assert!((w[0] - 1.0).abs() < 1e-12 && (w[1] - 3.0).abs() < 1e-12);
/// ```
pub fn eigh(a: &Tensor) -> (Tensor, Tensor) {
    let n = square("eigh", a);
    notify_eager_only("linalg::eigh");
    let sym = (a + &a.swapaxes(-1, -2)) * 0.5;
    let p = bind(Prim::Eigh, &[&sym]);
    (p.narrow(-2, n, 1).squeeze(-2), p.narrow(-2, 0, n))
}

/// Which norm [`norm`] computes: matrix orders over the last two axes
/// (`Fro`: Frobenius, `Nuc`: sum of singular values, `One`: largest column
/// sum of magnitudes, `Two`: largest singular value, `Inf`: largest row
/// sum), or `Vector(p)` over the last axis (`(Σ|x|^p)^(1/p)`; `p = ∞` the
/// largest magnitude, `-∞` the smallest, `0` the count of nonzeros), as numpy.
///
/// ```
/// use nx::linalg::Norm;
/// assert_ne!(Norm::Vector(1.0), Norm::Vector(2.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Norm {
    /// Frobenius norm: `sqrt(Σ|a_ij|²)` over the last two axes.
    Fro,
    /// Nuclear norm: the sum of the singular values.
    Nuc,
    /// The largest column sum of magnitudes.
    One,
    /// The spectral norm: the largest singular value.
    Two,
    /// The largest row sum of magnitudes.
    Inf,
    /// The vector `p`-norm over the last axis.
    Vector(f64),
}

/// A matrix or vector norm (see [`Norm`]), batched over the other leading
/// axes: a composition of tensor operations (and, for `Two` and `Nuc`,
/// of [`svd`]'s singular values), so it differentiates. The gradient of
/// `Two` is undefined where the largest singular value repeats, and that
/// of `Vector(2.0)` at the zero vector is NaN (as JAX's).
///
/// ```
/// use nx::{linalg, linalg::Norm, Tensor};
/// let a = Tensor::from_slice(&[3.0f64, 0.0, 0.0, -4.0], &[2, 2]);
/// assert!((linalg::norm(&a, Norm::Fro).item::<f64>() - 5.0).abs() < 1e-12);
/// assert!((linalg::norm(&a, Norm::Two).item::<f64>() - 4.0).abs() < 1e-12);
/// assert_eq!(linalg::norm(&a, Norm::Vector(1.0)).to_vec::<f64>(), vec![3.0, 4.0]);
/// ```
pub fn norm(a: &Tensor, ord: Norm) -> Tensor {
    float("norm", a);
    let need = if matches!(ord, Norm::Vector(_)) { 1 } else { 2 };
    if a.ndim() < need {
        panic!(
            "linalg::norm: {ord:?} needs at least {need} axes, got shape {:?}",
            a.shape()
        );
    }
    notify_eager_only("linalg::norm");
    let x = a.abs();
    match ord {
        Norm::Vector(p) if p == f64::INFINITY => x.max(&[-1], false),
        Norm::Vector(p) if p == f64::NEG_INFINITY => x.min(&[-1], false),
        Norm::Vector(p) if p == 0.0 => x
            .not_equal(&x.scalar_like(0.0))
            .cast(a.dtype())
            .sum(&[-1], false),
        Norm::Vector(p) if p == 1.0 => x.sum(&[-1], false),
        Norm::Vector(p) if p == 2.0 => (a * a).sum(&[-1], false).sqrt(),
        Norm::Vector(p) => x
            .pow(&x.scalar_like(p))
            .sum(&[-1], false)
            .pow(&x.scalar_like(1.0 / p)),
        Norm::Fro => (a * a).sum(&[-2, -1], false).sqrt(),
        Norm::One => x.sum(&[-2], false).max(&[-1], false),
        Norm::Inf => x.sum(&[-1], false).max(&[-1], false),
        Norm::Two | Norm::Nuc => {
            let sh = a.shape();
            if sh[sh.len() - 2].min(sh[sh.len() - 1]) == 0 {
                return Tensor::zeros(&sh[..sh.len() - 2], a.dtype());
            }
            let (_, s, _) = svd(a, false);
            if ord == Norm::Two {
                s.narrow(-1, 0, 1).squeeze(-1)
            } else {
                s.sum(&[-1], false)
            }
        }
    }
}

/// Rank-2-or-more float input: `(m, n)` of its last two axes.
fn matrix(op: &str, a: &Tensor) -> (usize, usize) {
    float(op, a);
    let s = a.shape();
    if s.len() < 2 {
        panic!("linalg::{op}: expects a matrix (at least 2 axes), got shape {s:?}");
    }
    (s[s.len() - 2], s[s.len() - 1])
}

/// The singular value decomposition `a = u · diag(s) · vt` of each matrix
/// `[..., m, n]` (faer's, `Prim::Svd`): `s` descending (`[..., k]`,
/// `k = min(m, n)`); reduced (`full_matrices = false`: `u` `[..., m, k]`,
/// `vt` `[..., k, n]`) or full (`u` `[..., m, m]`, `vt` `[..., n, n]`).
/// Signs of the singular vectors are as they fall (each pair `u_i`, `v_i`
/// may flip together). As in JAX, the derivative is implemented for the
/// reduced factorization (and square matrices), and that of `u` and `vt`
/// is undefined (NaN) where two singular values are equal, while the
/// derivative of `s` stays finite.
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[3.0f64, 0.0, 0.0, 0.0, -2.0, 0.0], &[2, 3]);
/// let (u, s, vt) = linalg::svd(&a, false);
/// assert_eq!((u.shape(), s.shape(), vt.shape()), (&[2usize, 2][..], &[2usize][..], &[2usize, 3][..]));
/// let s = s.to_vec::<f64>();
/// assert!((s[0] - 3.0).abs() < 1e-12 && (s[1] - 2.0).abs() < 1e-12);
/// ```
pub fn svd(a: &Tensor, full_matrices: bool) -> (Tensor, Tensor, Tensor) {
    let (m, n) = matrix("svd", a);
    notify_eager_only("linalg::svd");
    let p = bind(Prim::Svd { full_matrices }, &[a]);
    svd_unpack(&p, m, n, full_matrices)
}

/// `(u, s, vt)` from a packed `Prim::Svd` output `[..., len]` of `m`×`n`
/// matrices (also the derivative rules' unpacking of cotangents).
#[doc(hidden)]
pub fn svd_unpack(p: &Tensor, m: usize, n: usize, full_matrices: bool) -> (Tensor, Tensor, Tensor) {
    let k = m.min(n);
    let (ku, kv) = if full_matrices { (m, n) } else { (k, k) };
    let lead = &p.shape()[..p.ndim() - 1];
    let with = |r: usize, c: usize| {
        let mut s = lead.to_vec();
        s.extend([r, c]);
        s
    };
    (
        p.narrow(-1, 0, m * ku).reshape(&with(m, ku)),
        p.narrow(-1, m * ku, k),
        p.narrow(-1, m * ku + k, kv * n).reshape(&with(kv, n)),
    )
}

/// `pinv` with singular values at or under `rtol · s_max` treated as zero.
fn pinv_cut(a: &Tensor, rtol: f64) -> Tensor {
    let (u, s, vt) = svd(a, false);
    let k = s.shape()[s.ndim() - 1];
    if k == 0 {
        return (vt.swapaxes(-1, -2)).matmul(&u.swapaxes(-1, -2));
    }
    let cutoff = s.narrow(-1, 0, 1) * rtol;
    let kept = s.greater(&cutoff);
    let safe = Tensor::where_(&kept, &s, &s.ones_like());
    let s_inv = Tensor::where_(&kept, &(1.0 / &safe), &s.zeros_like());
    (vt.swapaxes(-1, -2) * s_inv.unsqueeze(-2)).matmul(&u.swapaxes(-1, -2))
}

/// Machine epsilon of `a`'s dtype.
fn eps(a: &Tensor) -> f64 {
    if a.dtype() == DType::F32 {
        f32::EPSILON as f64
    } else {
        f64::EPSILON
    }
}

/// The Moore–Penrose pseudo-inverse `[..., n, m]` of each `[..., m, n]`
/// matrix from its SVD, singular values at or under `10 · max(m, n) · eps ·
/// s_max` treated as zero (`jnp.linalg.pinv`'s default `rtol`; numpy's
/// default `rcond` is `1e-15`, the same order for f64). Differentiated
/// through [`svd`] (JAX gives `pinv` its own rule, equal where the rank is
/// locally constant and the kept singular values are distinct).
///
/// ```
/// use nx::{linalg, Tensor};
/// let a = Tensor::from_slice(&[2.0f64, 0.0, 0.0, 4.0, 0.0, 0.0], &[3, 2]);
/// let p = linalg::pinv(&a).to_vec::<f64>();
/// assert!((p[0] - 0.5).abs() < 1e-12 && (p[4] - 0.25).abs() < 1e-12);
/// ```
pub fn pinv(a: &Tensor) -> Tensor {
    let (m, n) = matrix("pinv", a);
    notify_eager_only("linalg::pinv");
    pinv_cut(a, 10.0 * m.max(n) as f64 * eps(a))
}

/// The least-squares solution `x` of `a x ≈ b` (`a` `[..., m, n]`, `b`
/// `[..., m, k]` or `[m]`): numpy's minimum-norm solution when the system
/// is underdetermined or rank-deficient, as `pinv(a) · b` with singular
/// values at or under `max(m, n) · eps · s_max` dropped (numpy's and JAX's
/// default `rcond`).
///
/// ```
/// use nx::{linalg, Tensor};
/// // fit y = c0 + c1 t through (0, 1), (1, 3), (2, 5)
/// let a = Tensor::from_slice(&[1.0f64, 0.0, 1.0, 1.0, 1.0, 2.0], &[3, 2]);
/// let b = Tensor::from_slice(&[1.0f64, 3.0, 5.0], &[3]);
/// let x = linalg::lstsq(&a, &b).to_vec::<f64>();
/// assert!((x[0] - 1.0).abs() < 1e-10 && (x[1] - 2.0).abs() < 1e-10);
/// ```
pub fn lstsq(a: &Tensor, b: &Tensor) -> Tensor {
    let (m, n) = matrix("lstsq", a);
    float("lstsq", b);
    notify_eager_only("linalg::lstsq");
    pinv_cut(a, m.max(n) as f64 * eps(a)).matmul(b)
}
