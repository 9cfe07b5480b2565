//! The linear-algebra kernels (`Prim::Cholesky` ... `Prim::Svd`; the
//! public operations are `crate::linalg`, their derivatives rune's
//! `linalg_derivatives.rs`), over `faer`: Cholesky (llt), triangular solves,
//! LU with partial pivoting (solve, slogdet), Householder QR, the
//! self-adjoint eigendecomposition and the SVD, in the input's own
//! precision (f32 or f64; faer is generic over both).
//!
//! Our tensors are row-major; faer takes strided views, so inputs and
//! outputs are viewed in place (`from_row_major_slice`) where a kernel
//! reads or writes a strided matrix well, and copied into faer's
//! column-major `Mat` where it factors in place. A batch of matrices is
//! split over nx's pool, faer running sequentially on each (`Par::Seq`); a
//! single large matrix runs on faer's rayon threads instead (`par_for`:
//! on 2 cores that took cholesky 512 from ~9-13 to ~6-8 ms and solve 512
//! from ~22-25 to ~16-18 ms; QR and SVD gained little). No hand-written
//! path for tiny matrices: 1024 4×4 f32 solves through faer take ~0.58 ms,
//! numpy ~0.66 ms (measured with `crates/nx/examples/bench_linalg.rs`; the
//! tables are in BENCHMARKS.md's linear-algebra section).

use super::movement::copy;
use super::pool;
use crate::dtype::{DType, Element};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::{evd, lu, svd, triangular_solve as trs};
use faer::{Mat, MatMut, MatRef, Par};

/// The element types the kernels run in.
trait Real: Element + faer::traits::RealField + Copy {}
impl Real for f32 {}
impl Real for f64 {}

/// Calls `$f::<T>($args)` with `T` the Rust type of float dtype `$d`.
macro_rules! by_dtype {
    ($d:expr, $f:ident($($a:expr),*)) => {
        match $d {
            DType::F32 => $f::<f32>($($a),*),
            DType::F64 => $f::<f64>($($a),*),
            d => unreachable!("linalg kernels: dtype {d} is rejected by the op"),
        }
    };
}

/// `x`'s elements in row-major order.
fn load<T: Real>(x: &Value) -> Vec<T> {
    let c = copy(x);
    let v = c.value();
    let data = v.storage.read::<T>()[..v.layout.numel()].to_vec();
    data
}

/// A fresh contiguous tensor holding `data`.
fn store<T: Real>(shape: &[usize], data: &[T]) -> Tensor {
    let mut out = Storage::new(T::DTYPE, data.len());
    out.as_mut_slice::<T>()[..data.len()].copy_from_slice(data);
    Tensor::from_storage(T::DTYPE, shape, out)
}

/// Runs `f` on each of the `mats` consecutive pieces of `data` (one matrix
/// or one problem each), over the pool when `work` (flops per piece) times
/// the count is worth it.
fn per_matrix<T: Send>(
    data: &mut [T],
    mats: usize,
    work: usize,
    f: &(dyn Fn(usize, &mut [T]) + Sync),
) {
    per_matrix_with(data, mats, work, &|| (), &|_, i, m| f(i, m));
}

/// `per_matrix` with a scratch state made by `init` once per task and
/// handed to each of its pieces (a batch of tiny matrices would otherwise
/// spend its time allocating workspaces).
fn per_matrix_with<T: Send, S>(
    data: &mut [T],
    mats: usize,
    work: usize,
    init: &(dyn Fn() -> S + Sync),
    f: &(dyn Fn(&mut S, usize, &mut [T]) + Sync),
) {
    if mats == 0 || data.is_empty() {
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
            let mut state = init();
            for (j, m) in chunk.chunks_mut(len).enumerate() {
                f(&mut state, c * per + j, m);
            }
        });
    } else {
        let mut state = init();
        for (i, m) in data.chunks_mut(len).enumerate() {
            f(&mut state, i, m);
        }
    }
}

/// faer's parallelism for a batch of `mats` problems of `work` flops each:
/// faer's rayon threads (as many as nx's pool) for one large matrix, where
/// nx's pool has nothing to split; sequential otherwise (the batch is
/// split over nx's pool instead).
fn par_for(mats: usize, work: usize) -> Par {
    let threads = pool::threads();
    if mats == 1 && work >= 1 << 24 && threads > 1 {
        Par::rayon(threads)
    } else {
        Par::Seq
    }
}

/// The batch axes of a `[..., r, c]` shape followed by `tail`.
fn batched(shape: &[usize], tail: &[usize]) -> Vec<usize> {
    let mut s = shape[..shape.len() - 2].to_vec();
    s.extend_from_slice(tail);
    s
}

/// The number of matrices in a `[..., r, c]` shape.
fn batch(shape: &[usize]) -> usize {
    shape[..shape.len() - 2].iter().product()
}

/// A scratch buffer of `req` bytes for one faer call.
fn scratch(req: faer::dyn_stack::StackReq) -> MemBuffer {
    MemBuffer::new(req)
}

/// The `n`×`n` row-major `a` copied into a column-major `Mat`.
fn to_mat<T: Real>(a: &[T], r: usize, c: usize) -> Mat<T> {
    MatRef::from_row_major_slice(a, r, c).to_owned()
}

/// `Prim::Cholesky`: the lower factor, all NaN for a matrix that is not
/// positive definite (faer's llt stops at a pivot that is not positive).
pub(crate) fn cholesky(x: &Value) -> Tensor {
    by_dtype!(x.dtype, cholesky_t(x))
}

fn cholesky_t<T: Real>(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let n = shape[shape.len() - 1];
    let mut data = load::<T>(x);
    let work = n * n * n / 3 + 1;
    let par = par_for(batch(shape), work);
    per_matrix(&mut data, batch(shape), work, &|_, m| {
        let mut l = to_mat(m, n, n);
        let mut mem = scratch(
            faer::linalg::cholesky::llt::factor::cholesky_in_place_scratch::<T>(
                n,
                par,
                Default::default(),
            ),
        );
        let ok = faer::linalg::cholesky::llt::factor::cholesky_in_place(
            l.as_mut(),
            Default::default(),
            par,
            MemStack::new(&mut mem),
            Default::default(),
        )
        .is_ok();
        if ok {
            // faer leaves the strict upper triangle as it was.
            for i in 0..n {
                for j in 0..n {
                    m[i * n + j] = if j <= i {
                        l[(i, j)]
                    } else {
                        <T as Element>::from_f64(0.0)
                    };
                }
            }
        } else {
            m.fill(<T as Element>::from_f64(f64::NAN));
        }
    });
    store(shape, &data)
}

/// Solves `M X = B` in place for the triangular `M` (`lower` says which
/// triangle holds it; only that one is read, without the diagonal when
/// `unit`).
fn tri_left<T: Real>(m: MatRef<'_, T>, lower: bool, unit: bool, b: MatMut<'_, T>, par: Par) {
    match (lower, unit) {
        (true, false) => trs::solve_lower_triangular_in_place(m, b, par),
        (true, true) => trs::solve_unit_lower_triangular_in_place(m, b, par),
        (false, false) => trs::solve_upper_triangular_in_place(m, b, par),
        (false, true) => trs::solve_unit_upper_triangular_in_place(m, b, par),
    }
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
    by_dtype!(
        b.dtype,
        triangular_solve_t(a, b, lower, left, transpose_a, unit)
    )
}

fn triangular_solve_t<T: Real>(
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
    let av = load::<T>(a);
    let mut bv = load::<T>(b);
    let work = m * r * c + 1;
    let par = par_for(batch(&shape), work);
    per_matrix(&mut bv, batch(&shape), work, &|i, bm| {
        // Views of the row-major buffers, no copies: op(A) is A's view or
        // its transpose, lower triangular iff A's lower triangle
        // untransposed or its upper one transposed.
        let am = MatRef::from_row_major_slice(&av[i * m * m..(i + 1) * m * m], m, m);
        let op = if transpose_a { am.transpose() } else { am };
        let op_lower = lower != transpose_a;
        let bm = MatMut::from_row_major_slice_mut(bm, r, c);
        if left {
            tri_left(op, op_lower, unit, bm, par);
        } else {
            // X op(A) = B  <=>  op(A)ᵀ Xᵀ = Bᵀ.
            tri_left(op.transpose(), !op_lower, unit, bm.transpose_mut(), par);
        }
    });
    store(&shape, &bv)
}

/// LU with partial pivoting of the column-major `lu` in place (`P A = L
/// U`) with the workspace `mem` (of `lu_scratch`'s size): the row
/// permutation (`perm[i]`: the row of `A` now at row `i`) and the number
/// of transpositions. A zero pivot leaves a zero on `U`'s diagonal
/// (singular: infinities or NaNs from the solves).
fn lu1<T: Real>(
    lu: MatMut<'_, T>,
    perm: &mut [usize],
    perm_inv: &mut [usize],
    par: Par,
    mem: &mut MemBuffer,
) -> usize {
    let (info, _) = lu::partial_pivoting::factor::lu_in_place(
        lu,
        perm,
        perm_inv,
        par,
        MemStack::new(mem),
        Default::default(),
    );
    info.transposition_count
}

/// The workspace of one LU solve of an `n`×`n` system with `k` columns,
/// reused across a task's matrices.
struct LuScratch<T: Real> {
    lu: Mat<T>,
    perm: Vec<usize>,
    perm_inv: Vec<usize>,
    mem: MemBuffer,
    rows: Vec<T>,
}

impl<T: Real> LuScratch<T> {
    fn new(n: usize, k: usize, par: Par) -> LuScratch<T> {
        LuScratch {
            lu: Mat::zeros(n, n),
            perm: vec![0; n],
            perm_inv: vec![0; n],
            mem: scratch(
                lu::partial_pivoting::factor::lu_in_place_scratch::<usize, T>(
                    n,
                    n,
                    par,
                    Default::default(),
                ),
            ),
            rows: vec![<T as Element>::from_f64(0.0); n * k],
        }
    }

    /// Factors the row-major `a` (`P A = L U`) into `self.lu`, `self.perm`;
    /// the number of transpositions.
    fn factor(&mut self, a: &[T], par: Par) -> usize {
        let n = self.perm.len();
        self.lu.copy_from(MatRef::from_row_major_slice(a, n, n));
        lu1(
            self.lu.as_mut(),
            &mut self.perm,
            &mut self.perm_inv,
            par,
            &mut self.mem,
        )
    }
}

/// `Prim::Solve`: `A X = B` through LU with partial pivoting.
pub(crate) fn solve(a: &Value, b: &Value) -> Tensor {
    by_dtype!(b.dtype, solve_t(a, b))
}

fn solve_t<T: Real>(a: &Value, b: &Value) -> Tensor {
    let shape = b.layout.shape.clone();
    let nd = shape.len();
    let (n, k) = (shape[nd - 2], shape[nd - 1]);
    let av = load::<T>(a);
    let mut bv = load::<T>(b);
    let work = n * n * n / 3 + n * n * k + 1;
    let par = par_for(batch(&shape), work);
    per_matrix_with(
        &mut bv,
        batch(&shape),
        work,
        &|| LuScratch::<T>::new(n, k, par),
        &|s, i, rhs| {
            s.factor(&av[i * n * n..(i + 1) * n * n], par);
            // P B: rows of the row-major right-hand side are contiguous.
            s.rows.copy_from_slice(rhs);
            for (row, &p) in s.perm.iter().enumerate() {
                rhs[row * k..(row + 1) * k].copy_from_slice(&s.rows[p * k..(p + 1) * k]);
            }
            let mut x = MatMut::from_row_major_slice_mut(rhs, n, k);
            trs::solve_unit_lower_triangular_in_place(s.lu.as_ref(), x.as_mut(), par);
            trs::solve_upper_triangular_in_place(s.lu.as_ref(), x, par);
        },
    );
    store(&shape, &bv)
}

/// `Prim::Slogdet`: `[..., 2]` holding `(sign, log|det|)`; `(0, -inf)` for
/// a singular matrix, `(1, 0)` for a 0×0 one.
pub(crate) fn slogdet(x: &Value) -> Tensor {
    by_dtype!(x.dtype, slogdet_t(x))
}

fn slogdet_t<T: Real>(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let data = load::<T>(x);
    let mats = batch(shape);
    let mut out = vec![<T as Element>::from_f64(0.0); mats * 2];
    let work = n * n * n / 3 + 1;
    let par = par_for(mats, work);
    let init = || LuScratch::<T>::new(n, 0, par);
    per_matrix_with(&mut out, mats, work, &init, &|s, i, res| {
        let swaps = s.factor(&data[i * n * n..(i + 1) * n * n], par);
        let lu = &s.lu;
        // Accumulate in f64: the log-magnitude of an f32 matrix then
        // rounds once.
        let mut sign = if swaps % 2 == 0 { 1.0 } else { -1.0 };
        let mut logdet = 0.0f64;
        for j in 0..n {
            let d = Element::to_f64(lu[(j, j)]);
            if d == 0.0 {
                (sign, logdet) = (0.0, f64::NEG_INFINITY);
                break;
            }
            if d < 0.0 {
                sign = -sign;
            }
            logdet += d.abs().ln();
        }
        res[0] = <T as Element>::from_f64(sign);
        res[1] = <T as Element>::from_f64(logdet);
    });
    store(&batched(shape, &[2]), &out)
}

/// `Prim::Qr`: the orthonormal factor `Q` (`[..., m, min(m, n)]`, or
/// `[..., m, m]` when `complete`) of faer's blocked Householder QR.
pub(crate) fn qr(x: &Value, complete: bool) -> Tensor {
    by_dtype!(x.dtype, qr_t(x, complete))
}

fn qr_t<T: Real>(x: &Value, complete: bool) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let kq = if complete { m } else { m.min(n) };
    let data = load::<T>(x);
    let mats = batch(shape);
    let mut out = vec![<T as Element>::from_f64(0.0); mats * m * kq];
    let k = m.min(n);
    let work = 2 * m * n * kq + 1;
    let par = par_for(mats, work);
    per_matrix(&mut out, mats, work, &|i, q| {
        let mut f = to_mat(&data[i * m * n..(i + 1) * m * n], m, n);
        let bs = faer::linalg::qr::no_pivoting::factor::recommended_block_size::<T>(m, n);
        let mut coeff = Mat::<T>::zeros(bs, k);
        let mut mem = scratch(
            faer::linalg::qr::no_pivoting::factor::qr_in_place_scratch::<T>(
                m,
                n,
                bs,
                par,
                Default::default(),
            )
            .or(
                faer::linalg::householder::apply_block_householder_sequence_on_the_left_in_place_scratch::<T>(
                    m, bs, kq,
                ),
            ),
        );
        faer::linalg::qr::no_pivoting::factor::qr_in_place(
            f.as_mut(),
            coeff.as_mut(),
            par,
            MemStack::new(&mut mem),
            Default::default(),
        );
        // The reflectors: below the diagonal of the first k columns, with
        // an implied unit diagonal (made explicit, R's triangle cleared).
        let mut basis = f.get_mut(.., ..k);
        for j in 0..k {
            basis[(j, j)] = <T as Element>::from_f64(1.0);
            for r in 0..j {
                basis[(r, j)] = <T as Element>::from_f64(0.0);
            }
        }
        // Q's first kq columns: the reflectors applied to the identity.
        let mut qv = MatMut::from_row_major_slice_mut(q, m, kq);
        for r in 0..m {
            for c in 0..kq {
                qv[(r, c)] = <T as Element>::from_f64(if r == c { 1.0 } else { 0.0 });
            }
        }
        faer::linalg::householder::apply_block_householder_sequence_on_the_left_in_place_with_conj(
            f.as_ref().get(.., ..k),
            coeff.as_ref(),
            faer::Conj::No,
            qv,
            par,
            MemStack::new(&mut mem),
        );
    });
    store(&batched(shape, &[m, kq]), &out)
}

/// `Prim::Eigh`: `[..., n + 1, n]`, the eigenvectors as columns of the
/// first `n` rows, the eigenvalues (ascending, as faer sorts them) in the
/// last row; all NaN if faer's iteration does not converge.
pub(crate) fn eigh(x: &Value) -> Tensor {
    by_dtype!(x.dtype, eigh_t(x))
}

fn eigh_t<T: Real>(x: &Value) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let n = shape[nd - 1];
    let data = load::<T>(x);
    let mats = batch(shape);
    let mut out = vec![<T as Element>::from_f64(0.0); mats * (n + 1) * n];
    let work = 9 * n * n * n + 1;
    let par = par_for(mats, work);
    per_matrix(&mut out, mats, work, &|i, o| {
        // The input is symmetric: its row-major buffer read column-major
        // is the same matrix, and faer reads its lower triangle.
        let a = MatRef::from_column_major_slice(&data[i * n * n..(i + 1) * n * n], n, n);
        let (v, w) = o.split_at_mut(n * n);
        let mut mem = scratch(evd::self_adjoint_evd_scratch::<T>(
            n,
            evd::ComputeEigenvectors::Yes,
            par,
            Default::default(),
        ));
        let ok = evd::self_adjoint_evd(
            a,
            faer::diag::DiagMut::from_slice_mut(w),
            Some(MatMut::from_row_major_slice_mut(v, n, n)),
            par,
            MemStack::new(&mut mem),
            Default::default(),
        )
        .is_ok();
        if !ok {
            o.fill(<T as Element>::from_f64(f64::NAN));
        }
    });
    store(&batched(shape, &[n + 1, n]), &out)
}

/// `Prim::Svd`: `[..., m·ku + k + kv·n]`, `u` (`m`×`ku`, row-major), the
/// singular values (descending, as faer sorts them), then `vt` (`kv`×`n`,
/// row-major); `ku = kv = k = min(m, n)`, or `ku = m`, `kv = n` when
/// `full_matrices`. All NaN if faer's iteration does not converge.
pub(crate) fn svd(x: &Value, full_matrices: bool) -> Tensor {
    by_dtype!(x.dtype, svd_t(x, full_matrices))
}

fn svd_t<T: Real>(x: &Value, full: bool) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let (m, n) = (shape[nd - 2], shape[nd - 1]);
    let k = m.min(n);
    let (ku, kv) = if full { (m, n) } else { (k, k) };
    let len = m * ku + k + kv * n;
    let data = load::<T>(x);
    let mats = batch(shape);
    let mut out = vec![<T as Element>::from_f64(0.0); mats * len];
    let compute = if full {
        svd::ComputeSvdVectors::Full
    } else {
        svd::ComputeSvdVectors::Thin
    };
    let work = 12 * m * n * k.max(1) + 1;
    let par = par_for(mats, work);
    per_matrix(&mut out, mats, work, &|i, o| {
        let a = MatRef::from_row_major_slice(&data[i * m * n..(i + 1) * m * n], m, n);
        let (u, rest) = o.split_at_mut(m * ku);
        let (s, vt) = rest.split_at_mut(k);
        let mut mem = scratch(svd::svd_scratch::<T>(
            m,
            n,
            compute,
            compute,
            par,
            Default::default(),
        ));
        // `vt` row-major (kv×n) is `V` (n×kv) column-major.
        let ok = svd::svd(
            a,
            faer::diag::DiagMut::from_slice_mut(s),
            Some(MatMut::from_row_major_slice_mut(u, m, ku)),
            Some(MatMut::from_column_major_slice_mut(vt, n, kv)),
            par,
            MemStack::new(&mut mem),
            Default::default(),
        )
        .is_ok();
        if !ok {
            o.fill(<T as Element>::from_f64(f64::NAN));
        }
    });
    store(&batched(shape, &[len]), &out)
}
