//! Linear-algebra kernels: Cholesky, triangular solves, LU with partial
//! pivoting (solve, slogdet).
//!
//! Written by hand rather than through `faer` (issue 13 asks for it; its
//! release build on this 2-core machine costs far more than the ~2 minutes
//! budgeted): plain loops over row-major slices, the inner loops dot
//! products or row updates (`axpy`) over contiguous rows that the compiler
//! vectorizes. Every kernel works in f64 (f32 inputs are widened, the result
//! rounded once), one matrix at a time; a batch of matrices is split over
//! the kernels' pool when there is enough work.

use super::movement::copy;
use super::pool;
use crate::dtype::DType;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};

/// `x`'s elements in row-major order, widened to f64.
fn load(x: &Value) -> Vec<f64> {
    let c = copy(x);
    let v = c.value();
    let n = v.layout.numel();
    match v.dtype {
        DType::F64 => v.storage.read::<f64>()[..n].to_vec(),
        DType::F32 => v.storage.read::<f32>()[..n]
            .iter()
            .map(|&e| e as f64)
            .collect(),
        d => unreachable!("linalg kernels: dtype {d} is rejected by the op"),
    }
}

/// A fresh contiguous tensor of `dtype` holding `data`.
fn store(dtype: DType, shape: &[usize], data: &[f64]) -> Tensor {
    let mut out = Storage::new(dtype, data.len());
    match dtype {
        DType::F64 => out.as_mut_slice::<f64>()[..data.len()].copy_from_slice(data),
        DType::F32 => {
            for (o, &e) in out.as_mut_slice::<f32>()[..data.len()].iter_mut().zip(data) {
                *o = e as f32;
            }
        }
        d => unreachable!("linalg kernels: dtype {d} is rejected by the op"),
    }
    Tensor::from_storage(dtype, shape, out)
}

/// Runs `f` on each of the `mats` consecutive pieces of `data` (one matrix
/// or one problem each), over the pool when `work` (flops per piece) times
/// the count is worth it.
fn per_matrix(data: &mut [f64], mats: usize, work: usize, f: &(dyn Fn(usize, &mut [f64]) + Sync)) {
    if mats == 0 {
        return;
    }
    let len = data.len() / mats;
    if mats > 1 && mats * work >= 1 << 16 {
        // About 64K flops per task.
        let per = (1usize << 16)
            .div_ceil(work.max(1))
            .min(mats.div_ceil(2))
            .max(1);
        pool::chunks_mut(data, per * len, &|c, chunk| {
            for (j, m) in chunk.chunks_mut(len).enumerate() {
                f(c * per + j, m);
            }
        });
    } else {
        for (i, m) in data.chunks_mut(len).enumerate() {
            f(i, m);
        }
    }
}

/// `Σ a[i] b[i]` with four accumulators (vectorizes).
#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f64; 4];
    let (ca, cb) = (a.chunks_exact(4), b.chunks_exact(4));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..4 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// `y -= alpha * x`.
#[inline]
fn axpy_neg(y: &mut [f64], alpha: f64, x: &[f64]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y -= alpha * x;
    }
}

/// In-place lower Cholesky factor of the `n`×`n` row-major `a` (its lower
/// triangle read, its upper triangle zeroed), row by row
/// (Cholesky–Banachiewicz). False when a pivot is not positive.
fn cholesky1(a: &mut [f64], n: usize) -> bool {
    for i in 0..n {
        let (above, rest) = a.split_at_mut(i * n);
        let ri = &mut rest[..n];
        for j in 0..i {
            let rj = &above[j * n..j * n + j + 1];
            ri[j] = (ri[j] - dot(&ri[..j], &rj[..j])) / rj[j];
        }
        let s = ri[i] - dot(&ri[..i], &ri[..i]);
        // `!(s > 0)` also catches NaN.
        if !(s > 0.0) {
            return false;
        }
        ri[i] = s.sqrt();
        ri[i + 1..].fill(0.0);
    }
    true
}

/// `Prim::Cholesky`: all NaN for a matrix that is not positive definite.
pub(crate) fn cholesky(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let n = shape[shape.len() - 1];
    let mut data = load(x);
    let mats = if n == 0 { 0 } else { data.len() / (n * n) };
    per_matrix(&mut data, mats, n * n * n / 3 + 1, &|_, m| {
        if !cholesky1(m, n) {
            m.fill(f64::NAN);
        }
    });
    store(x.dtype, shape, &data)
}

/// Solves `M X = B` in place (`b` is `m`×`k` row-major) where `M` is `a`
/// (`m`×`m` row-major) or its transpose, triangular: `lower` says which
/// triangle of `a` holds it; only that triangle (without the diagonal when
/// `unit`) is read.
fn trsm_left(a: &[f64], m: usize, lower: bool, trans: bool, unit: bool, b: &mut [f64], k: usize) {
    let at = |i: usize, j: usize| if trans { a[j * m + i] } else { a[i * m + j] };
    // M is lower triangular iff A's lower triangle untransposed, or its
    // upper triangle transposed.
    let forward = lower != trans;
    let mut row = vec![0.0; k];
    let order: Box<dyn Iterator<Item = usize>> = if forward {
        Box::new(0..m)
    } else {
        Box::new((0..m).rev())
    };
    for i in order {
        row.copy_from_slice(&b[i * k..(i + 1) * k]);
        let js = if forward { 0..i } else { i + 1..m };
        for j in js {
            let mij = at(i, j);
            if mij != 0.0 {
                axpy_neg(&mut row, mij, &b[j * k..(j + 1) * k]);
            }
        }
        if !unit {
            let d = at(i, i);
            for r in row.iter_mut() {
                *r /= d;
            }
        }
        b[i * k..(i + 1) * k].copy_from_slice(&row);
    }
}

/// `r`×`c` row-major `x` transposed.
fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
    let mut t = vec![0.0; x.len()];
    for i in 0..r {
        for j in 0..c {
            t[j * r + i] = x[i * c + j];
        }
    }
    t
}

/// `Prim::TriangularSolve`.
pub(crate) fn triangular_solve(
    a: &Value,
    b: &Value,
    lower: bool,
    left: bool,
    transpose_a: bool,
    unit: bool,
) -> Tensor {
    let shape = b.layout.shape.clone();
    let nd = shape.len();
    let (r, c) = (shape[nd - 2], shape[nd - 1]);
    let m = if left { r } else { c };
    let av = load(a);
    let mut bv = load(b);
    let mats = if r * c == 0 { 0 } else { bv.len() / (r * c) };
    per_matrix(&mut bv, mats, m * m * (r * c / m.max(1)) + 1, &|i, bm| {
        let am = &av[i * m * m..(i + 1) * m * m];
        if left {
            trsm_left(am, m, lower, transpose_a, unit, bm, c);
        } else {
            // X op(A) = B  <=>  op(A)ᵀ Xᵀ = Bᵀ.
            let mut bt = transpose(bm, r, c);
            trsm_left(am, m, lower, !transpose_a, unit, &mut bt, r);
            bm.copy_from_slice(&transpose(&bt, c, r));
        }
    });
    store(b.dtype, &shape, &bv)
}

/// In-place LU with partial pivoting of the `n`×`n` row-major `a` (`P A =
/// L U`, `L` unit lower below the diagonal, `U` on and above it): the row
/// permutation (`perm[i]` = the row of `A` now at row `i`) and its parity
/// (+1 or -1). A zero pivot column is skipped, as LAPACK's getrf does.
fn lu1(a: &mut [f64], n: usize) -> (Vec<usize>, f64) {
    let mut perm: Vec<usize> = (0..n).collect();
    let mut parity = 1.0;
    for c in 0..n {
        let mut p = c;
        let mut best = a[c * n + c].abs();
        for r in c + 1..n {
            let v = a[r * n + c].abs();
            if v > best {
                best = v;
                p = r;
            }
        }
        if p != c {
            let (top, bottom) = a.split_at_mut(p * n);
            top[c * n..(c + 1) * n].swap_with_slice(&mut bottom[..n]);
            perm.swap(c, p);
            parity = -parity;
        }
        let piv = a[c * n + c];
        if piv == 0.0 {
            continue;
        }
        let (top, bottom) = a.split_at_mut((c + 1) * n);
        let pivot_row = &top[c * n + c + 1..(c + 1) * n];
        for r in 0..n - c - 1 {
            let row = &mut bottom[r * n..(r + 1) * n];
            let l = row[c] / piv;
            row[c] = l;
            if l != 0.0 {
                axpy_neg(&mut row[c + 1..], l, pivot_row);
            }
        }
    }
    (perm, parity)
}

/// `Prim::Solve`: `A X = B` through LU with partial pivoting.
pub(crate) fn solve(a: &Value, b: &Value) -> Tensor {
    let shape = b.layout.shape.clone();
    let nd = shape.len();
    let (n, k) = (shape[nd - 2], shape[nd - 1]);
    let mut av = load(a);
    let bv = load(b);
    let mats = if n == 0 { 0 } else { av.len() / (n * n) };
    let mut xv = vec![0.0; bv.len()];
    // Each problem is its matrix followed by its right-hand side: factor in
    // place, then substitute.
    let per = n * n + n * k;
    let mut packed = vec![0.0; mats * per];
    for i in 0..mats {
        packed[i * per..i * per + n * n].copy_from_slice(&av[i * n * n..(i + 1) * n * n]);
        packed[i * per + n * n..(i + 1) * per].copy_from_slice(&bv[i * n * k..(i + 1) * n * k]);
    }
    av.clear();
    per_matrix(&mut packed, mats, n * n * n / 3 + n * n * k + 1, &|_, p| {
        let (lu, rhs) = p.split_at_mut(n * n);
        let (perm, _) = lu1(lu, n);
        let orig = rhs.to_vec();
        for (i, &pi) in perm.iter().enumerate() {
            rhs[i * k..(i + 1) * k].copy_from_slice(&orig[pi * k..(pi + 1) * k]);
        }
        trsm_left(lu, n, true, false, true, rhs, k);
        trsm_left(lu, n, false, false, false, rhs, k);
    });
    for i in 0..mats {
        xv[i * n * k..(i + 1) * n * k].copy_from_slice(&packed[i * per + n * n..(i + 1) * per]);
    }
    store(b.dtype, &shape, &xv)
}

/// `Prim::Slogdet`: `[..., 2]` holding `(sign, log|det|)`; `(0, -inf)` for
/// a singular matrix, `(1, 0)` for a 0×0 one.
pub(crate) fn slogdet(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let data = load(x);
    let mats: usize = shape[..nd - 2].iter().product();
    // Each piece: the matrix, then its two results.
    let per = n * n + 2;
    let mut packed = vec![0.0; mats * per];
    for i in 0..mats {
        packed[i * per..i * per + n * n].copy_from_slice(&data[i * n * n..(i + 1) * n * n]);
    }
    per_matrix(&mut packed, mats, n * n * n / 3 + 1, &|_, p| {
        let (m, res) = p.split_at_mut(n * n);
        let (_, parity) = lu1(m, n);
        let (mut sign, mut logdet) = (parity, 0.0);
        for i in 0..n {
            let d = m[i * n + i];
            if d == 0.0 {
                (sign, logdet) = (0.0, f64::NEG_INFINITY);
                break;
            }
            if d < 0.0 {
                sign = -sign;
            }
            logdet += d.abs().ln();
        }
        res[0] = sign;
        res[1] = logdet;
    });
    let out: Vec<f64> = (0..mats)
        .flat_map(|i| [packed[i * per + n * n], packed[i * per + n * n + 1]])
        .collect();
    let mut oshape = shape[..nd - 2].to_vec();
    oshape.push(2);
    store(x.dtype, &oshape, &out)
}

/// The first `kq` columns of `Q` from a Householder QR of the `m`×`n`
/// row-major `a`, written row-major (`m`×`kq`) into `q`. A zero column
/// gets no reflector (the identity), as LAPACK's geqrf does.
fn qr_q1(a: &[f64], m: usize, n: usize, kq: usize, q: &mut [f64]) {
    let k = m.min(n);
    // The columns of A are the rows of At (n×m), contiguous.
    let mut at = transpose(a, m, n);
    let mut reflectors: Vec<(Vec<f64>, f64)> = Vec::with_capacity(k);
    for j in 0..k {
        let (head, tail) = at.split_at_mut((j + 1) * m);
        let x = &mut head[j * m + j..(j + 1) * m];
        let norm = dot(x, x).sqrt();
        if norm == 0.0 {
            reflectors.push((vec![], 0.0));
            continue;
        }
        let alpha = if x[0] >= 0.0 { -norm } else { norm };
        let mut v = x.to_vec();
        v[0] -= alpha;
        let vn2 = dot(&v, &v);
        let beta = if vn2 == 0.0 { 0.0 } else { 2.0 / vn2 };
        for c in 0..n - j - 1 {
            let col = &mut tail[c * m + j..(c + 1) * m];
            let s = beta * dot(&v, col);
            axpy_neg(col, s, &v);
        }
        x[0] = alpha;
        x[1..].fill(0.0);
        reflectors.push((v, beta));
    }
    // Q e_i = H_0 H_1 ... H_{k-1} e_i; H_j leaves e_i alone for j > i.
    let mut qt = vec![0.0; kq * m];
    for i in 0..kq {
        let row = &mut qt[i * m..(i + 1) * m];
        row[i] = 1.0;
        for j in (0..k.min(i + 1)).rev() {
            let (v, beta) = &reflectors[j];
            if *beta == 0.0 {
                continue;
            }
            let seg = &mut row[j..];
            let s = beta * dot(v, seg);
            axpy_neg(seg, s, v);
        }
    }
    q.copy_from_slice(&transpose(&qt, kq, m));
}

/// `Prim::Qr`: the orthonormal factor `Q` (`[..., m, min(m, n)]`, or
/// `[..., m, m]` when `complete`).
pub(crate) fn qr(x: &Value, complete: bool) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let kq = if complete { m } else { m.min(n) };
    let data = load(x);
    let mats: usize = shape[..nd - 2].iter().product();
    let mut out = vec![0.0; mats * m * kq];
    if m * kq > 0 {
        per_matrix(&mut out, mats, 2 * m * n * kq + 1, &|i, q| {
            qr_q1(&data[i * m * n..(i + 1) * m * n], m, n, kq, q);
        });
    }
    let mut oshape = shape[..nd - 2].to_vec();
    oshape.extend([m, kq]);
    store(x.dtype, &oshape, &out)
}

/// Eigenvalues (ascending) and eigenvectors (columns) of the symmetric
/// `n`×`n` row-major `a` by cyclic Jacobi rotations, packed into `out`
/// (`(n + 1)`×`n`: the eigenvector matrix, then the eigenvalues).
fn eigh1(a: &[f64], n: usize, out: &mut [f64]) {
    let mut a = a.to_vec();
    let mut v = vec![0.0; n * n];
    for i in 0..n {
        v[i * n + i] = 1.0;
    }
    let frob2 = dot(&a, &a);
    for _sweep in 0..64 {
        let mut off = 0.0;
        for p in 0..n {
            for q in p + 1..n {
                off += a[p * n + q] * a[p * n + q];
            }
        }
        if !(off > 1e-32 * frob2) {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                // A <- Jᵀ A J, V <- V J with J the rotation in the (p, q) plane.
                for k in 0..n {
                    let (kp, kq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * kp - s * kq;
                    a[k * n + q] = s * kp + c * kq;
                }
                let (rp, rq) = (p * n, q * n);
                for k in 0..n {
                    let (pk, qk) = (a[rp + k], a[rq + k]);
                    a[rp + k] = c * pk - s * qk;
                    a[rq + k] = s * pk + c * qk;
                }
                a[p * n + q] = 0.0;
                a[q * n + p] = 0.0;
                for k in 0..n {
                    let (kp, kq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * kp - s * kq;
                    v[k * n + q] = s * kp + c * kq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[i * n + i].total_cmp(&a[j * n + j]));
    for (jn, &j) in order.iter().enumerate() {
        for i in 0..n {
            out[i * n + jn] = v[i * n + j];
        }
        out[n * n + jn] = a[j * n + j];
    }
}

/// `Prim::Eigh`: `[..., n + 1, n]`, the eigenvectors as columns of the
/// first `n` rows, the eigenvalues (ascending) in the last row.
pub(crate) fn eigh(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let data = load(x);
    let mats: usize = shape[..nd - 2].iter().product();
    let mut out = vec![0.0; mats * (n + 1) * n];
    if n > 0 {
        per_matrix(&mut out, mats, 8 * n * n * n + 1, &|i, o| {
            eigh1(&data[i * n * n..(i + 1) * n * n], n, o);
        });
    }
    let mut oshape = shape[..nd - 2].to_vec();
    oshape.extend([n + 1, n]);
    store(x.dtype, &oshape, &out)
}
