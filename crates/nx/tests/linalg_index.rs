//! Linear algebra (matmul, dot, outer, tril, triu, dot_general) and indexing
//! (take, take_along_axis, gather, scatter_add, one_hot), checked against
//! naive references written here with plain loops in f64 / i64.

use nx::{bind, DType, Prim, Slice, Tensor};

// ---------------------------------------------------------------- helpers

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// Uniform integer in [lo, hi).
    fn int(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo) as u64) as i64
    }
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// A random tensor of `dtype` (small integers for integer dtypes).
fn rand_tensor(rng: &mut Rng, shape: &[usize], dtype: DType) -> Tensor {
    let n = numel(shape);
    if dtype.is_float() {
        let v: Vec<f64> = (0..n).map(|_| rng.unit()).collect();
        Tensor::from_slice(&v, shape).cast(dtype)
    } else {
        let v: Vec<f64> = (0..n).map(|_| rng.int(-5, 6) as f64).collect();
        Tensor::from_slice(&v, shape).cast(dtype)
    }
}

/// The elements in row-major order as f64.
fn vals(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>()
}

/// Row-major multi-index of flat position `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F32 => 2f64.powi(-23),
        DType::F64 => 2f64.powi(-52),
        _ => 0.0,
    }
}

/// Checks `got` against `want` within `eps * (k + 2) * scale[i]`, where
/// `scale[i]` is the sum of |products| that went into element `i` (exact
/// for integers).
fn assert_close(got: &Tensor, want: &[f64], scale: &[f64], k: usize, what: &str) {
    let g = vals(got);
    assert_eq!(g.len(), want.len(), "{what}: length");
    let e = eps(got.dtype());
    for i in 0..g.len() {
        let tol = e * (k as f64 + 2.0) * scale[i] + 1e-300;
        assert!(
            (g[i] - want[i]).abs() <= tol,
            "{what}: element {i}: got {} want {} (tol {tol})",
            g[i],
            want[i]
        );
    }
}

/// Numpy matmul on row-major f64 data: (values, |products| sums, shape, k).
fn ref_matmul(
    a: &[f64],
    sa: &[usize],
    b: &[f64],
    sb: &[usize],
) -> (Vec<f64>, Vec<f64>, Vec<usize>, usize) {
    let a_shape: Vec<usize> = if sa.len() == 1 {
        vec![1, sa[0]]
    } else {
        sa.to_vec()
    };
    let b_shape: Vec<usize> = if sb.len() == 1 {
        vec![sb[0], 1]
    } else {
        sb.to_vec()
    };
    let (na, nb) = (a_shape.len(), b_shape.len());
    let (m, k, n) = (a_shape[na - 2], a_shape[na - 1], b_shape[nb - 1]);
    assert_eq!(k, b_shape[nb - 2]);
    let (ba, bb) = (&a_shape[..na - 2], &b_shape[..nb - 2]);
    let nbt = ba.len().max(bb.len());
    let pad = |s: &[usize]| -> Vec<usize> {
        let mut p = vec![1; nbt - s.len()];
        p.extend_from_slice(s);
        p
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let batch: Vec<usize> = (0..nbt)
        .map(|d| if pa[d] == 1 { pb[d] } else { pa[d] })
        .collect();
    let mut out = vec![];
    let mut scale = vec![];
    for bi in 0..numel(&batch) {
        let idx = unravel(bi, &batch);
        let ia: Vec<usize> = (0..nbt)
            .map(|d| if pa[d] == 1 { 0 } else { idx[d] })
            .collect();
        let ib: Vec<usize> = (0..nbt)
            .map(|d| if pb[d] == 1 { 0 } else { idx[d] })
            .collect();
        let (oa, ob) = (ravel(&ia, &pa) * m * k, ravel(&ib, &pb) * k * n);
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sc) = (0.0, 0.0);
                for kk in 0..k {
                    let p = a[oa + i * k + kk] * b[ob + kk * n + j];
                    s += p;
                    sc += p.abs();
                }
                out.push(s);
                scale.push(sc);
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (out, scale, shape, k)
}

fn check_matmul(a: &Tensor, b: &Tensor, what: &str) {
    let (want, scale, shape, k) = ref_matmul(&vals(a), a.shape(), &vals(b), b.shape());
    let got = a.matmul(b);
    assert_eq!(got.shape(), shape.as_slice(), "{what}: shape");
    assert_eq!(got.dtype(), a.dtype(), "{what}: dtype");
    assert_close(&got, &want, &scale, k, what);
}

/// XLA dot_general on row-major f64 data, by multi-index loops.
#[allow(clippy::too_many_arguments)]
fn ref_dot_general(
    a: &[f64],
    sa: &[usize],
    b: &[f64],
    sb: &[usize],
    lb: &[usize],
    rb: &[usize],
    lc: &[usize],
    rc: &[usize],
) -> (Vec<f64>, Vec<f64>, Vec<usize>, usize) {
    let lfree: Vec<usize> = (0..sa.len())
        .filter(|d| !lb.contains(d) && !lc.contains(d))
        .collect();
    let rfree: Vec<usize> = (0..sb.len())
        .filter(|d| !rb.contains(d) && !rc.contains(d))
        .collect();
    let mut shape: Vec<usize> = lb.iter().map(|&d| sa[d]).collect();
    shape.extend(lfree.iter().map(|&d| sa[d]));
    shape.extend(rfree.iter().map(|&d| sb[d]));
    let kshape: Vec<usize> = lc.iter().map(|&d| sa[d]).collect();
    let k = numel(&kshape);
    let (mut out, mut scale) = (vec![], vec![]);
    for o in 0..numel(&shape) {
        let oi = unravel(o, &shape);
        let mut ia = vec![0; sa.len()];
        let mut ib = vec![0; sb.len()];
        for (j, (&x, &y)) in lb.iter().zip(rb).enumerate() {
            ia[x] = oi[j];
            ib[y] = oi[j];
        }
        for (j, &x) in lfree.iter().enumerate() {
            ia[x] = oi[lb.len() + j];
        }
        for (j, &y) in rfree.iter().enumerate() {
            ib[y] = oi[lb.len() + lfree.len() + j];
        }
        let (mut s, mut sc) = (0.0, 0.0);
        for kk in 0..k {
            let ki = unravel(kk, &kshape);
            for (j, (&x, &y)) in lc.iter().zip(rc).enumerate() {
                ia[x] = ki[j];
                ib[y] = ki[j];
            }
            let p = a[ravel(&ia, sa)] * b[ravel(&ib, sb)];
            s += p;
            sc += p.abs();
        }
        out.push(s);
        scale.push(sc);
    }
    (out, scale, shape, k)
}

fn dot_general(
    a: &Tensor,
    b: &Tensor,
    lb: &[usize],
    rb: &[usize],
    lc: &[usize],
    rc: &[usize],
) -> Tensor {
    bind(
        Prim::DotGeneral {
            lhs_batch: lb.to_vec(),
            rhs_batch: rb.to_vec(),
            lhs_contract: lc.to_vec(),
            rhs_contract: rc.to_vec(),
        },
        &[a, b],
    )
}

fn check_dot_general(
    a: &Tensor,
    b: &Tensor,
    lb: &[usize],
    rb: &[usize],
    lc: &[usize],
    rc: &[usize],
) {
    let what = format!(
        "dot_general {:?} {:?} {lb:?} {rb:?} {lc:?} {rc:?} {}",
        a.shape(),
        b.shape(),
        a.dtype()
    );
    let (want, scale, shape, k) =
        ref_dot_general(&vals(a), a.shape(), &vals(b), b.shape(), lb, rb, lc, rc);
    let got = dot_general(a, b, lb, rb, lc, rc);
    assert_eq!(got.shape(), shape.as_slice(), "{what}: shape");
    assert_close(&got, &want, &scale, k, &what);
}

const ALL_NUMERIC: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
];

// ---------------------------------------------------------------- matmul

#[test]
fn matmul_shapes_and_dtypes() {
    let mut rng = Rng(1);
    let cases: &[(&[usize], &[usize])] = &[
        (&[2, 3], &[3, 4]),
        (&[1, 1], &[1, 1]),
        (&[5, 7], &[7, 1]),
        (&[1, 7], &[7, 6]),
        (&[3], &[3]),
        (&[3], &[3, 4]),
        (&[4, 3], &[3]),
        (&[2, 5, 3], &[3]),
        (&[3], &[2, 3, 4]),
        (&[2, 4, 3], &[2, 3, 5]),
        (&[2, 4, 3], &[3, 5]),
        (&[4, 3], &[2, 3, 5]),
        (&[2, 1, 4, 3], &[3, 3, 2]),
        (&[1, 4, 3], &[2, 3, 5]),
        (&[3, 1, 2, 3], &[1, 2, 3, 2]),
        (&[1, 1, 2, 3], &[3, 2]),
        (&[0, 3], &[3, 4]),
        (&[2, 0], &[0, 4]),
        (&[2, 3], &[3, 0]),
        (&[0, 2, 3], &[3, 2]),
        (&[17, 33], &[33, 9]),
    ];
    for &dt in &ALL_NUMERIC {
        for (sa, sb) in cases {
            let a = rand_tensor(&mut rng, sa, dt);
            let b = rand_tensor(&mut rng, sb, dt);
            check_matmul(&a, &b, &format!("matmul {sa:?} {sb:?} {dt}"));
        }
    }
}

#[test]
fn matmul_of_one_dimensional_operands() {
    let u = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    let r = u.matmul(&u);
    assert_eq!(r.shape(), &[] as &[usize]);
    assert_eq!(r.item::<f32>(), 14.0);
    let m = Tensor::from_slice(&[1.0f32, 0.0, 2.0, 0.0, 1.0, 3.0], &[3, 2]);
    let v = u.matmul(&m);
    assert_eq!(v.shape(), &[2]);
    assert_eq!(v.to_vec::<f32>(), vec![8.0, 9.0]);
    let w = m.transpose().matmul(&u);
    assert_eq!(w.shape(), &[2]);
    assert_eq!(w.to_vec::<f32>(), vec![8.0, 9.0]);
}

#[test]
fn matmul_of_views() {
    let mut rng = Rng(2);
    for &dt in &ALL_NUMERIC {
        // Transposed operands (column-major views).
        let a = rand_tensor(&mut rng, &[5, 4], dt).transpose();
        let b = rand_tensor(&mut rng, &[6, 5], dt).transpose();
        check_matmul(&a, &b, &format!("transposed {dt}"));
        // Sliced with steps, and flipped (negative strides).
        let big = rand_tensor(&mut rng, &[9, 12], dt);
        let a = big.slice(&[Slice::from(1..8).step(2), Slice::from(..).step(3)]); // [4, 4]
        let b = rand_tensor(&mut rng, &[4, 10], dt)
            .slice(&[Slice::from(..).step(-1), Slice::from(2..9)]);
        check_matmul(&a, &b, &format!("sliced/flipped {dt}"));
        // Broadcast (stride-0) operands.
        let a = rand_tensor(&mut rng, &[1, 3], dt).expand(&[4, 3]);
        let b = rand_tensor(&mut rng, &[3, 1], dt).expand(&[3, 5]);
        check_matmul(&a, &b, &format!("broadcast {dt}"));
        // Batched, with the batch axes permuted and the matrices transposed.
        let a = rand_tensor(&mut rng, &[3, 2, 4, 5], dt).permute(&[1, 0, 3, 2]); // [2, 3, 5, 4]
        let b = rand_tensor(&mut rng, &[3, 4, 2], dt).permute(&[0, 1, 2]); // [3, 4, 2]
        check_matmul(&a, &b, &format!("batched permuted {dt}"));
        // Batch axes permuted and sliced on both sides.
        let a = rand_tensor(&mut rng, &[2, 2, 3, 3], dt).permute(&[0, 2, 1, 3]); // [2, 3, 2, 3]
        let a = a.slice(&[Slice::all(), Slice::all(), Slice::all(), Slice::from(..2)]); // [2, 3, 2, 2]
        let b = rand_tensor(&mut rng, &[2, 2, 3], dt).permute(&[2, 0, 1]); // [3, 2, 2]
        check_matmul(&a, &b, &format!("permuted batches {dt}"));
        // A permuted batched lhs against one rhs matrix: the batch folds into
        // the rows, which do not merge into one stride (a copy is made).
        let a = rand_tensor(&mut rng, &[3, 2, 4, 5], dt).permute(&[1, 0, 3, 2]); // [2, 3, 5, 4]
        let b = rand_tensor(&mut rng, &[2, 4], dt).transpose(); // [4, 2]
        check_matmul(&a, &b, &format!("folded permuted batch {dt}"));
    }
}

#[test]
fn matmul_larger_products_use_every_path() {
    let mut rng = Rng(3);
    // One product above the threading threshold, contiguous and transposed.
    for dt in [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I64] {
        let a = rand_tensor(&mut rng, &[70, 90], dt);
        let b = rand_tensor(&mut rng, &[90, 80], dt);
        check_matmul(&a, &b, &format!("large {dt}"));
        check_matmul(
            &b.transpose(),
            &a.transpose(),
            &format!("large transposed {dt}"),
        );
    }
    // Products above the splitting threshold (64^3 multiply-adds), split
    // into bands of rows (more rows than columns) or of columns, with every
    // operand orientation, and batched.
    for (m, k, n) in [(150, 130, 140), (70, 200, 300)] {
        let a = rand_tensor(&mut rng, &[m, k], DType::F32);
        let b = rand_tensor(&mut rng, &[k, n], DType::F32);
        let at = rand_tensor(&mut rng, &[k, m], DType::F32).transpose();
        let bt = rand_tensor(&mut rng, &[n, k], DType::F32).transpose();
        check_matmul(&a, &b, &format!("split {m}x{k}x{n}"));
        check_matmul(&at, &b, &format!("split {m}x{k}x{n}, lhs transposed"));
        check_matmul(&a, &bt, &format!("split {m}x{k}x{n}, rhs transposed"));
        check_matmul(&at, &bt, &format!("split {m}x{k}x{n}, both transposed"));
    }
    let a = rand_tensor(&mut rng, &[3, 130, 140], DType::F64);
    let b = rand_tensor(&mut rng, &[3, 140, 120], DType::F64);
    check_matmul(&a, &b, "split, batched");
    // Many small products (parallel over the batch).
    for dt in [DType::F32, DType::F64, DType::I32] {
        let a = rand_tensor(&mut rng, &[80, 16, 16], dt);
        let b = rand_tensor(&mut rng, &[80, 16, 16], dt);
        check_matmul(&a, &b, &format!("many small {dt}"));
    }
    // A batched lhs against one rhs matrix (folded into one product).
    let a = rand_tensor(&mut rng, &[6, 20, 30], DType::F32);
    let b = rand_tensor(&mut rng, &[30, 40], DType::F32);
    check_matmul(&a, &b, "folded batch");
    // Operands whose rows or contracted axes do not merge into one stride
    // (a [B, T, D] stored as [B, D, T], as attention's backward makes
    // them) are gathered first, split across threads when large; both
    // sides, f32 and i32 (whose gather converts to i64).
    for dt in [DType::F32, DType::I32] {
        let x = rand_tensor(&mut rng, &[8, 64, 130], dt).permute(&[0, 2, 1]); // [8, 130, 64]
        let w = rand_tensor(&mut rng, &[64, 20], dt);
        // x @ w: rows (8, 130) with strides (8320, 1).
        check_dot_general(&x, &w, &[], &[], &[2], &[0]);
        // Contracting (8, 130) against g [8, 130, 30]: x^T g.
        let g = rand_tensor(&mut rng, &[8, 130, 30], dt);
        check_dot_general(&x, &g, &[], &[], &[0, 1], &[0, 1]);
    }
}

#[test]
#[cfg(target_arch = "x86_64")]
fn float_products_flush_subnormals_and_leave_the_caller_mode_alone() {
    // Products treat subnormal inputs as zero and flush subnormal results
    // (as XLA's CPU backend does); normal values are unaffected.
    let tiny = f32::MIN_POSITIVE / 4.0; // subnormal
    assert!(tiny > 0.0 && !tiny.is_normal());
    let a = Tensor::from_slice(&[tiny, 1.0], &[1, 2]);
    let b = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1]);
    assert_eq!(a.matmul(&b).to_vec::<f32>(), vec![2.0]);
    let a = Tensor::from_slice(&[tiny], &[1, 1]);
    assert_eq!(
        a.matmul(&Tensor::from_slice(&[1.0f32], &[1, 1]))
            .to_vec::<f32>(),
        vec![0.0]
    );
    // A result that would be subnormal: 2^-70 * 2^-70 = 2^-140.
    let s = Tensor::from_slice(&[2f64.powi(-70) as f32], &[1, 1]);
    assert_eq!(s.matmul(&s).to_vec::<f32>(), vec![0.0]);
    // The same through a column-major rhs (the path that goes to faer).
    let t = 2f64.powi(-70) as f32;
    let s2 = Tensor::from_slice(&[t, 0.0, 0.0, t], &[2, 2]);
    assert_eq!(s2.matmul(&s2.transpose()).to_vec::<f32>(), vec![0.0; 4]);
    let tiny64 = f64::MIN_POSITIVE / 4.0;
    let a = Tensor::from_slice(&[tiny64], &[1, 1]);
    assert_eq!(
        a.matmul(&Tensor::from_slice(&[1.0f64], &[1, 1]))
            .to_vec::<f64>(),
        vec![0.0]
    );
    // The calling thread's floating-point mode is restored afterwards:
    // elementwise operations and plain Rust arithmetic keep subnormals.
    let x = Tensor::from_slice(&[tiny], &[1]);
    assert_eq!((&x * &Tensor::scalar(1.0f32)).to_vec::<f32>(), vec![tiny]);
    let half = std::hint::black_box(tiny) * std::hint::black_box(0.5f32);
    assert_eq!(half, f32::from_bits(tiny.to_bits() / 2));
}

#[test]
fn matmul_integers_wrap_and_bools_or() {
    let a = Tensor::from_slice(&[i32::MAX, 2], &[1, 2]);
    let b = Tensor::from_slice(&[2i32, 3], &[2, 1]);
    let want = i32::MAX.wrapping_mul(2).wrapping_add(6);
    assert_eq!(a.matmul(&b).to_vec::<i32>(), vec![want]);
    let a = Tensor::from_slice(&[u8::MAX, 1], &[1, 2]);
    let b = Tensor::from_slice(&[1u8, 1], &[2, 1]);
    assert_eq!(a.matmul(&b).to_vec::<u8>(), vec![0]);
    let a = Tensor::from_slice(&[true, false, false, false], &[2, 2]);
    let b = Tensor::from_slice(&[true, true, false, true], &[2, 2]);
    assert_eq!(
        a.matmul(&b).to_vec::<bool>(),
        vec![true, true, false, false]
    );
    let m = Tensor::from_slice(&[-3i64, 4, 5, -6], &[2, 2]);
    assert_eq!(m.matmul(&m).to_vec::<i64>(), vec![29, -36, -45, 56]);
}

#[test]
fn matmul_results_are_fresh_and_shaped() {
    let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
    let c = a.matmul(&a);
    assert!(!c.shares_storage_with(&a));
    assert_eq!(c.to_vec::<f64>(), vec![7.0, 10.0, 15.0, 22.0]);
    // x.matmul(x.T) of one storage.
    let g = a.matmul(&a.transpose());
    assert_eq!(g.to_vec::<f64>(), vec![5.0, 11.0, 11.0, 25.0]);
}

#[test]
#[should_panic(expected = "matmul: shapes [2, 3] and [4, 5] are not aligned: 3 != 4")]
fn matmul_misaligned_panics() {
    Tensor::zeros(&[2, 3], DType::F32).matmul(&Tensor::zeros(&[4, 5], DType::F32));
}

#[test]
#[should_panic(expected = "matmul: shapes [3] and [4] are not aligned: 3 != 4")]
fn matmul_misaligned_vectors_panic() {
    Tensor::zeros(&[3], DType::F32).matmul(&Tensor::zeros(&[4], DType::F32));
}

#[test]
#[should_panic(
    expected = "matmul: the batch dimensions of shapes [2, 2, 3] and [3, 3, 4] cannot be broadcast together"
)]
fn matmul_batch_mismatch_panics() {
    Tensor::zeros(&[2, 2, 3], DType::F32).matmul(&Tensor::zeros(&[3, 3, 4], DType::F32));
}

#[test]
#[should_panic(expected = "matmul: 0-d operands are not allowed, got shapes [] and [3]")]
fn matmul_scalar_panics() {
    Tensor::scalar(1.0f32).matmul(&Tensor::zeros(&[3], DType::F32));
}

#[test]
#[should_panic(expected = "matmul: dtype mismatch: f32 and f64")]
fn matmul_dtype_mismatch_panics() {
    Tensor::zeros(&[2, 2], DType::F32).matmul(&Tensor::zeros(&[2, 2], DType::F64));
}

// ---------------------------------------------------------------- dot_general

#[test]
fn dot_general_with_several_batch_and_contracting_dims() {
    let mut rng = Rng(4);
    for &dt in &ALL_NUMERIC {
        // lhs [B1=2, K1=3, B2=4, M=5, K2=3], rhs [K2=3, B2=4, N=2, B1=2, K1=3]
        let a = rand_tensor(&mut rng, &[2, 3, 4, 5, 3], dt);
        let b = rand_tensor(&mut rng, &[3, 4, 2, 2, 3], dt);
        check_dot_general(&a, &b, &[0, 2], &[3, 1], &[1, 4], &[4, 0]);
        // Same, contracting pairs listed the other way round.
        check_dot_general(&a, &b, &[0, 2], &[3, 1], &[4, 1], &[0, 4]);
        // Batch dims listed out of order, several free dims on both sides.
        let a = rand_tensor(&mut rng, &[3, 2, 4, 5], dt);
        let b = rand_tensor(&mut rng, &[2, 6, 3, 4, 2], dt);
        check_dot_general(&a, &b, &[1, 0], &[0, 2], &[2], &[3]);
        // No contracting dims: a batched outer product.
        let a = rand_tensor(&mut rng, &[3, 4], dt);
        let b = rand_tensor(&mut rng, &[5, 3], dt);
        check_dot_general(&a, &b, &[0], &[1], &[], &[]);
        // Everything contracted: a 0-d result.
        let a = rand_tensor(&mut rng, &[3, 4], dt);
        let b = rand_tensor(&mut rng, &[4, 3], dt);
        check_dot_general(&a, &b, &[], &[], &[0, 1], &[1, 0]);
        // Free dims interleaved with contracting ones (needs a copy).
        let a = rand_tensor(&mut rng, &[2, 3, 4, 5], dt);
        let b = rand_tensor(&mut rng, &[5, 6, 3], dt);
        check_dot_general(&a, &b, &[], &[], &[1, 3], &[2, 0]);
        // Non-contiguous operands.
        let a = rand_tensor(&mut rng, &[4, 6, 5], dt)
            .permute(&[2, 0, 1])
            .slice(&[Slice::all(), Slice::from(..).step(-1)]);
        let b = rand_tensor(&mut rng, &[12, 5, 3], dt).slice(&[Slice::from(..).step(2)]); // [6, 5, 3]
        check_dot_general(&a, &b, &[0], &[1], &[2], &[0]);
    }
}

#[test]
fn dot_general_with_empty_dims() {
    // Zero-length contraction: zeros.
    let a = Tensor::zeros(&[2, 0], DType::F32);
    let b = Tensor::zeros(&[0, 3], DType::F32);
    let c = dot_general(&a, &b, &[], &[], &[1], &[0]);
    assert_eq!(c.shape(), &[2, 3]);
    assert_eq!(c.to_vec::<f32>(), vec![0.0; 6]);
    let c = dot_general(
        &a.cast(DType::I32),
        &b.cast(DType::I32),
        &[],
        &[],
        &[1],
        &[0],
    );
    assert_eq!(c.to_vec::<i32>(), vec![0; 6]);
    // Zero-size batch.
    let a = Tensor::zeros(&[0, 2, 3], DType::F64);
    let b = Tensor::zeros(&[0, 3, 4], DType::F64);
    let c = dot_general(&a, &b, &[0], &[0], &[2], &[1]);
    assert_eq!(c.shape(), &[0, 2, 4]);
}

// ---------------------------------------------------------------- dot, outer

#[test]
fn dot_follows_numpy() {
    let mut rng = Rng(5);
    for &dt in &ALL_NUMERIC {
        // 1-D . 1-D
        let u = rand_tensor(&mut rng, &[7], dt);
        let v = rand_tensor(&mut rng, &[7], dt);
        let (uv, vv) = (vals(&u), vals(&v));
        let want: f64 = uv.iter().zip(&vv).map(|(a, b)| a * b).sum();
        let sc: f64 = uv.iter().zip(&vv).map(|(a, b)| (a * b).abs()).sum();
        let got = u.dot(&v);
        assert_eq!(got.shape(), &[] as &[usize]);
        assert_close(&got, &[want], &[sc], 7, "dot 1-D");
        // 2-D . 2-D equals matmul.
        let a = rand_tensor(&mut rng, &[3, 4], dt);
        let b = rand_tensor(&mut rng, &[4, 2], dt);
        let (w, s, shape, k) = ref_matmul(&vals(&a), a.shape(), &vals(&b), b.shape());
        let got = a.dot(&b);
        assert_eq!(got.shape(), shape.as_slice());
        assert_close(&got, &w, &s, k, "dot 2-D");
        // N-D . 1-D: over the last axis.
        let a = rand_tensor(&mut rng, &[2, 3, 4], dt);
        let v = rand_tensor(&mut rng, &[4], dt);
        let (w, s, shape, k) = ref_dot_general(
            &vals(&a),
            a.shape(),
            &vals(&v),
            v.shape(),
            &[],
            &[],
            &[2],
            &[0],
        );
        let got = a.dot(&v);
        assert_eq!(got.shape(), &[2, 3]);
        assert_eq!(shape, vec![2, 3]);
        assert_close(&got, &w, &s, k, "dot N-D 1-D");
        // N-D . M-D: last of a with second-to-last of b.
        let a = rand_tensor(&mut rng, &[2, 3, 4], dt);
        let b = rand_tensor(&mut rng, &[5, 4, 2], dt);
        let got = a.dot(&b);
        assert_eq!(got.shape(), &[2, 3, 5, 2]);
        let (av, bv) = (vals(&a), vals(&b));
        let g = vals(&got);
        for i in 0..2 {
            for j in 0..3 {
                for k in 0..5 {
                    for m in 0..2 {
                        let (mut s, mut sc) = (0.0, 0.0);
                        for c in 0..4 {
                            let p = av[(i * 3 + j) * 4 + c] * bv[(k * 4 + c) * 2 + m];
                            s += p;
                            sc += p.abs();
                        }
                        let o = g[((i * 3 + j) * 5 + k) * 2 + m];
                        assert!((o - s).abs() <= eps(dt) * 6.0 * sc, "dot N-D M-D {dt}");
                    }
                }
            }
        }
        // 1-D . N-D: with the second-to-last axis of b.
        let u = rand_tensor(&mut rng, &[4], dt);
        let got = u.dot(&b);
        assert_eq!(got.shape(), &[5, 2]);
        let (w, s, _, k) =
            ref_dot_general(&vals(&u), u.shape(), &bv, b.shape(), &[], &[], &[0], &[1]);
        assert_close(&got, &w, &s, k, "dot 1-D N-D");
    }
    // A 0-d operand multiplies.
    let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    assert_eq!(
        x.dot(&Tensor::scalar(3.0f32)).to_vec::<f32>(),
        vec![3.0, 6.0]
    );
}

#[test]
fn outer_flattens() {
    let a = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
    let b = Tensor::from_slice(&[1.0f64, -1.0, 0.5], &[3]).flip(&[0]);
    let o = a.outer(&b);
    assert_eq!(o.shape(), &[4, 3]);
    let (av, bv) = (vals(&a), vals(&b));
    let mut want = vec![];
    for x in &av {
        for y in &bv {
            want.push(x * y);
        }
    }
    assert_eq!(o.to_vec::<f64>(), want);
}

#[test]
#[should_panic(expected = "dot: shapes [2, 3] and [4, 5] are not aligned: 3 (dim 1) != 4 (dim 0)")]
fn dot_misaligned_panics() {
    Tensor::zeros(&[2, 3], DType::F32).dot(&Tensor::zeros(&[4, 5], DType::F32));
}

#[test]
#[should_panic(expected = "dot: dtype mismatch: i32 and i64")]
fn dot_dtype_mismatch_panics() {
    Tensor::zeros(&[3], DType::I32).dot(&Tensor::zeros(&[3], DType::I64));
}

#[test]
#[should_panic(expected = "outer: dtype mismatch: f32 and f16")]
fn outer_dtype_mismatch_panics() {
    Tensor::zeros(&[3], DType::F32).outer(&Tensor::zeros(&[3], DType::F16));
}

// ---------------------------------------------------------------- tril, triu

fn ref_tri(x: &[f64], shape: &[usize], k: isize, lower: bool) -> Vec<f64> {
    let nd = shape.len();
    let (r, c) = (shape[nd - 2], shape[nd - 1]);
    (0..x.len())
        .map(|i| {
            let (row, col) = (((i / c) % r) as isize, (i % c) as isize);
            let keep = if lower {
                col - row <= k
            } else {
                col - row >= k
            };
            if keep {
                x[i]
            } else {
                0.0
            }
        })
        .collect()
}

#[test]
fn tril_and_triu() {
    let mut rng = Rng(6);
    for dt in [DType::F32, DType::I64, DType::F16] {
        for shape in [&[4, 4][..], &[3, 5], &[5, 2], &[2, 3, 4], &[0, 3]] {
            let x = rand_tensor(&mut rng, shape, dt);
            for k in -3..=3 {
                let xv = vals(&x);
                let l = x.tril(k);
                let u = x.triu(k);
                assert_eq!(l.dtype(), dt);
                assert_eq!(l.shape(), shape);
                assert_eq!(vals(&l), ref_tri(&xv, shape, k, true), "tril {shape:?} {k}");
                assert_eq!(
                    vals(&u),
                    ref_tri(&xv, shape, k, false),
                    "triu {shape:?} {k}"
                );
            }
        }
    }
    let t = Tensor::ones(&[3, 3], DType::Bool).tril(-1);
    assert_eq!(
        t.to_vec::<bool>(),
        vec![false, false, false, true, false, false, true, true, false]
    );
}

#[test]
#[should_panic(expected = "tril: expects a tensor of rank 2 or more, got shape [3]")]
fn tril_of_a_vector_panics() {
    Tensor::zeros(&[3], DType::F32).tril(0);
}

#[test]
#[should_panic(expected = "triu: expects a tensor of rank 2 or more, got shape []")]
fn triu_of_a_scalar_panics() {
    Tensor::scalar(1.0f32).triu(0);
}

// ---------------------------------------------------------------- take

fn index_tensor(v: &[i64], shape: &[usize], dt: DType) -> Tensor {
    Tensor::from_slice(v, shape).cast(dt)
}

fn norm(i: i64, n: usize) -> usize {
    (if i < 0 { i + n as i64 } else { i }) as usize
}

fn ref_take(
    x: &[f64],
    sx: &[usize],
    idx: &[i64],
    si: &[usize],
    axis: usize,
) -> (Vec<f64>, Vec<usize>) {
    let mut shape = sx[..axis].to_vec();
    shape.extend_from_slice(si);
    shape.extend_from_slice(&sx[axis + 1..]);
    let out = (0..numel(&shape))
        .map(|o| {
            let oi = unravel(o, &shape);
            let ii = &oi[axis..axis + si.len()];
            let mut xi = oi[..axis].to_vec();
            xi.push(norm(idx[ravel(ii, si)], sx[axis]));
            xi.extend_from_slice(&oi[axis + si.len()..]);
            x[ravel(&xi, sx)]
        })
        .collect();
    (out, shape)
}

#[test]
fn take_follows_numpy() {
    let mut rng = Rng(7);
    for idt in [DType::I32, DType::I64] {
        for dt in [DType::F32, DType::I64, DType::BF16, DType::U8] {
            let x = rand_tensor(&mut rng, &[3, 4, 5], dt);
            let xv = vals(&x);
            for axis in 0..3usize {
                let n = x.shape()[axis] as i64;
                for si in [&[][..], &[2], &[2, 3], &[1, 4, 2]] {
                    let iv: Vec<i64> = (0..numel(si)).map(|_| rng.int(-n, n)).collect();
                    let idx = index_tensor(&iv, si, idt);
                    let (want, shape) = ref_take(&xv, x.shape(), &iv, si, axis);
                    for ax in [axis as isize, axis as isize - 3] {
                        let got = x.take(&idx, ax);
                        assert_eq!(got.shape(), shape.as_slice(), "take {si:?} axis {ax}");
                        assert_eq!(got.dtype(), dt);
                        assert_eq!(vals(&got), want, "take {si:?} axis {ax} {dt} {idt}");
                    }
                }
            }
        }
    }
    // Non-contiguous data and indices.
    let x = Tensor::from_slice(&(0..12).map(|v| v as f32).collect::<Vec<_>>(), &[3, 4]).transpose(); // [4, 3]
    let idx = Tensor::from_slice(&[2i32, 0, 1, 1], &[2, 2]).transpose();
    let got = x.take(&idx, 0);
    assert_eq!(got.shape(), &[2, 2, 3]);
    let (want, _) = ref_take(&vals(&x), &[4, 3], &[2, 1, 0, 1], &[2, 2], 0);
    assert_eq!(vals(&got), want);
}

#[test]
fn take_large_runs_in_parallel() {
    let x = Tensor::arange(0.0, 1000.0, 1.0, DType::F32).reshape(&[10, 100]);
    let iv: Vec<i64> = (0..200_000).map(|i| (i * 37 % 100) as i64 - 50).collect();
    let idx = Tensor::from_slice(&iv, &[2000, 100]);
    let got = x.take(&idx, 1);
    assert_eq!(got.shape(), &[10, 2000, 100]);
    let g = got.to_vec::<f32>();
    for (o, &gv) in g.iter().enumerate().step_by(997) {
        let (r, j) = (o / 200_000, o % 200_000);
        assert_eq!(gv, (r * 100 + norm(iv[j], 100)) as f32);
    }
}

#[test]
#[should_panic(expected = "gather: index 3 is out of bounds for axis 1 of size 3")]
fn take_out_of_bounds_panics() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    x.take(&Tensor::from_slice(&[0i32, 3], &[2]), 1);
}

#[test]
#[should_panic(expected = "gather: index -4 is out of bounds for axis 0 of size 3")]
fn take_negative_out_of_bounds_panics() {
    let x = Tensor::zeros(&[3, 2], DType::F32);
    x.take(&Tensor::from_slice(&[-4i64], &[1, 1]), 0);
}

#[test]
#[should_panic(expected = "take: indices must be i32 or i64, got f32")]
fn take_float_indices_panic() {
    let x = Tensor::zeros(&[3], DType::F32);
    x.take(&Tensor::zeros(&[1], DType::F32), 0);
}

#[test]
#[should_panic(expected = "take: axis 2 is out of range for a tensor of rank 2")]
fn take_axis_out_of_range_panics() {
    let x = Tensor::zeros(&[3, 3], DType::F32);
    x.take(&Tensor::zeros(&[1], DType::I32), 2);
}

// ---------------------------------------------------------------- take_along_axis, gather

#[test]
fn take_along_axis_follows_numpy() {
    let mut rng = Rng(8);
    for idt in [DType::I32, DType::I64] {
        let x = rand_tensor(&mut rng, &[3, 4, 5], DType::F64);
        let xv = vals(&x);
        for axis in 0..3usize {
            let n = x.shape()[axis] as i64;
            // Same shape off axis, several lengths along it.
            for len in [1usize, 2, 6] {
                let mut si = x.shape().to_vec();
                si[axis] = len;
                let iv: Vec<i64> = (0..numel(&si)).map(|_| rng.int(-n, n)).collect();
                let idx = index_tensor(&iv, &si, idt);
                let got = x.take_along_axis(&idx, axis as isize);
                assert_eq!(got.shape(), si.as_slice());
                let want: Vec<f64> = (0..numel(&si))
                    .map(|o| {
                        let mut p = unravel(o, &si);
                        p[axis] = norm(iv[o], n as usize);
                        xv[ravel(&p, x.shape())]
                    })
                    .collect();
                assert_eq!(got.to_vec::<f64>(), want);
                // torch-style gather agrees when nothing broadcasts.
                assert_eq!(x.gather(axis as isize, &idx).to_vec::<f64>(), want);
            }
        }
    }
    // Broadcasting off the axis: x [3, 1, 4] with idx [1, 2, 2] along axis 2.
    let x = rand_tensor(&mut rng, &[3, 1, 4], DType::F32);
    let iv = vec![3i64, 0, -1, 1];
    let idx = Tensor::from_slice(&iv, &[1, 2, 2]);
    let got = x.take_along_axis(&idx, -1);
    assert_eq!(got.shape(), &[3, 2, 2]);
    let xv = vals(&x);
    let want: Vec<f64> = (0..12)
        .map(|o| {
            let p = unravel(o, &[3, 2, 2]);
            xv[p[0] * 4 + norm(iv[p[1] * 2 + p[2]], 4)]
        })
        .collect();
    assert_eq!(vals(&got), want);
}

#[test]
fn gather_reads_the_leading_part_like_torch() {
    // torch.gather(x, 1, idx) with idx smaller than x off the axis.
    let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6, 7, 8, 9], &[3, 3]);
    let idx = Tensor::from_slice(&[2i64, 0, 1, 1], &[2, 2]);
    let got = x.gather(1, &idx);
    assert_eq!(got.shape(), &[2, 2]);
    assert_eq!(got.to_vec::<i32>(), vec![3, 1, 5, 5]);
    let got = x.gather(0, &idx);
    assert_eq!(got.to_vec::<i32>(), vec![7, 2, 4, 5]);
    // Negative indices count from the end; larger along the axis is fine.
    let idx = Tensor::from_slice(&[-1i32, -3, 0, 2], &[1, 4]);
    assert_eq!(x.gather(1, &idx).to_vec::<i32>(), vec![3, 1, 1, 3]);
}

#[test]
#[should_panic(
    expected = "take_along_axis: indices must have the same rank as the tensor, got shapes [2, 3] and [3]"
)]
fn take_along_axis_rank_mismatch_panics() {
    Tensor::zeros(&[2, 3], DType::F32).take_along_axis(&Tensor::zeros(&[3], DType::I32), 1);
}

#[test]
#[should_panic(
    expected = "take_along_axis: shapes [2, 3] and [3, 1] cannot be broadcast together off axis 1"
)]
fn take_along_axis_broadcast_mismatch_panics() {
    Tensor::zeros(&[2, 3], DType::F32).take_along_axis(&Tensor::zeros(&[3, 1], DType::I32), 1);
}

#[test]
#[should_panic(expected = "take_along_axis: indices must be i32 or i64, got u32")]
fn take_along_axis_index_dtype_panics() {
    Tensor::zeros(&[2, 3], DType::F32).take_along_axis(&Tensor::zeros(&[2, 1], DType::U32), 1);
}

#[test]
#[should_panic(expected = "gather: index 5 is out of bounds for axis 0 of size 2")]
fn take_along_axis_out_of_bounds_panics() {
    let idx = Tensor::from_slice(&[0i64, 5, 1], &[1, 3]);
    Tensor::zeros(&[2, 3], DType::F32).take_along_axis(&idx, 0);
}

#[test]
#[should_panic(
    expected = "gather: indices must have the same rank as the tensor, got shapes [2, 3] and [2]"
)]
fn gather_rank_mismatch_panics() {
    Tensor::zeros(&[2, 3], DType::F32).gather(0, &Tensor::zeros(&[2], DType::I64));
}

#[test]
#[should_panic(expected = "gather: index shape [3, 1] exceeds the input shape [2, 3] off axis 1")]
fn gather_index_too_large_panics() {
    Tensor::zeros(&[2, 3], DType::F32).gather(1, &Tensor::zeros(&[3, 1], DType::I64));
}

#[test]
#[should_panic(expected = "gather: indices must be i32 or i64, got bool")]
fn gather_bool_indices_panic() {
    Tensor::zeros(&[2, 3], DType::F32).gather(1, &Tensor::zeros(&[2, 1], DType::Bool));
}

#[test]
#[should_panic(expected = "gather: axis -3 is out of range for a tensor of rank 2")]
fn gather_axis_out_of_range_panics() {
    Tensor::zeros(&[2, 3], DType::F32).gather(-3, &Tensor::zeros(&[2, 1], DType::I32));
}

// ---------------------------------------------------------------- scatter_add

#[test]
fn scatter_add_follows_torch() {
    let mut rng = Rng(9);
    for idt in [DType::I32, DType::I64] {
        for dt in [DType::F32, DType::F64, DType::I32, DType::I64, DType::F16] {
            let x = rand_tensor(&mut rng, &[3, 4, 2], dt);
            let xv = vals(&x);
            for axis in 0..3usize {
                let n = x.shape()[axis] as i64;
                // Indices the size of x off the axis, longer along it (repeats).
                let mut si = x.shape().to_vec();
                si[axis] = 5;
                let iv: Vec<i64> = (0..numel(&si)).map(|_| rng.int(-n, n)).collect();
                let idx = index_tensor(&iv, &si, idt);
                let src = rand_tensor(&mut rng, &si, dt);
                let sv = vals(&src);
                let mut want = xv.clone();
                for o in 0..numel(&si) {
                    let mut p = unravel(o, &si);
                    p[axis] = norm(iv[o], n as usize);
                    want[ravel(&p, x.shape())] += sv[o];
                }
                let got = x.scatter_add(axis as isize, &idx, &src);
                assert_eq!(got.shape(), x.shape());
                assert_eq!(got.dtype(), dt);
                let g = vals(&got);
                for i in 0..g.len() {
                    // Up to 6 roundings of values below 6 in magnitude.
                    assert!(
                        (g[i] - want[i]).abs() <= 6.0 * 6.0 * eps(dt),
                        "scatter_add {dt} {i}: {} vs {}",
                        g[i],
                        want[i]
                    );
                }
                // x itself is untouched.
                assert_eq!(vals(&x), xv);
            }
        }
    }
}

#[test]
fn scatter_add_with_smaller_index_and_source_views() {
    // torch: index smaller than self off the axis and than src everywhere.
    let x = Tensor::ones(&[3, 4], DType::F32);
    let idx = Tensor::from_slice(&[0i32, 2, 2, 1], &[2, 2]);
    let src = Tensor::from_slice(&(1..=9).map(|v| v as f32).collect::<Vec<_>>(), &[3, 3]);
    let got = x.scatter_add(0, &idx, &src);
    // src leading [2, 2]: [[1, 2], [4, 5]]; row idx[i][j] col j += src[i][j].
    let want = vec![
        2.0, 1.0, 1.0, 1.0, //
        1.0, 6.0, 1.0, 1.0, //
        5.0, 3.0, 1.0, 1.0,
    ];
    assert_eq!(got.to_vec::<f32>(), want);
    let got = x.scatter_add(1, &idx, &src);
    let want = vec![
        2.0, 1.0, 3.0, 1.0, //
        1.0, 6.0, 5.0, 1.0, //
        1.0, 1.0, 1.0, 1.0,
    ];
    assert_eq!(got.to_vec::<f32>(), want);
    // Transposed source and self, negative indices.
    let x = Tensor::zeros(&[2, 3], DType::I64).transpose(); // [3, 2]
    let idx = Tensor::from_slice(&[-1i64, 0, -1, 1], &[2, 2]);
    let src = Tensor::from_slice(&[10i64, 20, 30, 40], &[2, 2]).transpose(); // [[10, 30], [20, 40]]
    let got = x.scatter_add(0, &idx, &src);
    assert_eq!(got.to_vec::<i64>(), vec![0, 30, 0, 40, 30, 0]);
}

#[test]
fn scatter_add_is_the_transpose_of_gather() {
    // <gather(x, i), u> == <x, scatter_add(0, i, u)> for any x, u.
    let mut rng = Rng(10);
    let x = rand_tensor(&mut rng, &[4, 3], DType::F64);
    let iv: Vec<i64> = (0..18).map(|_| rng.int(-4, 4)).collect();
    let idx = Tensor::from_slice(&iv, &[6, 3]);
    let u = rand_tensor(&mut rng, &[6, 3], DType::F64);
    let g = x.take_along_axis(&idx, 0);
    let s = Tensor::zeros(&[4, 3], DType::F64).scatter_add(0, &idx, &u);
    let lhs: f64 = vals(&g).iter().zip(vals(&u)).map(|(a, b)| a * b).sum();
    let rhs: f64 = vals(&x).iter().zip(vals(&s)).map(|(a, b)| a * b).sum();
    assert!((lhs - rhs).abs() < 1e-12);
}

#[test]
#[should_panic(expected = "scatter_add: index 3 is out of bounds for axis 0 of size 3")]
fn scatter_add_out_of_bounds_panics() {
    let x = Tensor::zeros(&[3], DType::F32);
    x.scatter_add(
        0,
        &Tensor::from_slice(&[3i32], &[1]),
        &Tensor::ones(&[1], DType::F32),
    );
}

#[test]
#[should_panic(expected = "scatter_add: dtype mismatch: f32 and f64")]
fn scatter_add_dtype_mismatch_panics() {
    let x = Tensor::zeros(&[3], DType::F32);
    x.scatter_add(
        0,
        &Tensor::from_slice(&[0i32], &[1]),
        &Tensor::ones(&[1], DType::F64),
    );
}

#[test]
#[should_panic(
    expected = "scatter_add: the tensor, indices and source must have one rank, got shapes [3], [1, 1] and [1]"
)]
fn scatter_add_rank_mismatch_panics() {
    let x = Tensor::zeros(&[3], DType::F32);
    x.scatter_add(
        0,
        &Tensor::zeros(&[1, 1], DType::I32),
        &Tensor::ones(&[1], DType::F32),
    );
}

#[test]
#[should_panic(expected = "scatter_add: index shape [2] exceeds the source shape [1]")]
fn scatter_add_index_larger_than_source_panics() {
    let x = Tensor::zeros(&[3], DType::F32);
    x.scatter_add(
        0,
        &Tensor::zeros(&[2], DType::I32),
        &Tensor::ones(&[1], DType::F32),
    );
}

#[test]
#[should_panic(
    expected = "scatter_add: index shape [3, 1] exceeds the tensor shape [2, 2] off axis 1"
)]
fn scatter_add_index_larger_than_tensor_panics() {
    let x = Tensor::zeros(&[2, 2], DType::F32);
    x.scatter_add(
        1,
        &Tensor::zeros(&[3, 1], DType::I32),
        &Tensor::ones(&[3, 1], DType::F32),
    );
}

#[test]
#[should_panic(expected = "scatter_add: indices must be i32 or i64, got i16")]
fn scatter_add_index_dtype_panics() {
    let x = Tensor::zeros(&[2], DType::F32);
    x.scatter_add(
        0,
        &Tensor::zeros(&[2], DType::I16),
        &Tensor::ones(&[2], DType::F32),
    );
}

// ---------------------------------------------------------------- one_hot

#[test]
fn one_hot_encodes_integers() {
    for dt in [DType::I32, DType::I64, DType::U8, DType::I8] {
        let v: Vec<i64> = vec![0, 3, 1, -1, 4, 2];
        let x = Tensor::from_slice(&v, &[2, 3]).cast(dt);
        let y = x.one_hot(4);
        assert_eq!(y.shape(), &[2, 3, 4]);
        assert_eq!(y.dtype(), DType::F32);
        let xv = vals(&x);
        let mut want = vec![];
        for &c in &xv {
            for k in 0..4 {
                want.push(if c == k as f64 { 1.0f32 } else { 0.0 });
            }
        }
        assert_eq!(y.to_vec::<f32>(), want, "{dt}");
    }
    // More classes than a u8 can count: no wrap-around matches.
    let y = Tensor::from_slice(&[0u8, 255], &[2]).one_hot(300);
    let v = y.to_vec::<f32>();
    assert_eq!(v.iter().sum::<f32>(), 2.0);
    assert_eq!(v[0], 1.0);
    assert_eq!(v[300 + 255], 1.0);
}

#[test]
#[should_panic(expected = "one_hot: expects an integer tensor, got f32")]
fn one_hot_of_floats_panics() {
    Tensor::zeros(&[3], DType::F32).one_hot(2);
}
