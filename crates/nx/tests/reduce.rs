//! Reductions, arg-reductions, cumulative ops, softmax and friends, checked
//! against naive references (plain loops over multi-indices in f64).

use nx::{DType, Element, Slice, Tensor};

// ---------------------------------------------------------------------------
// Helpers and references.

/// Deterministic pseudo-random integers in `lo..=hi` (xorshift64).
fn ints(n: usize, seed: u64, lo: i64, hi: i64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (lo + (s % (hi - lo + 1) as u64) as i64) as f64
        })
        .collect()
}

/// Halves in [-5, 5]: exact in every float type, sums exact for small counts.
fn halves(n: usize, seed: u64) -> Vec<f64> {
    ints(n, seed, -10, 10)
        .into_iter()
        .map(|v| v * 0.5)
        .collect()
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

fn make(vals: &[f64], shape: &[usize], dtype: DType) -> Tensor {
    Tensor::from_slice(vals, shape).cast(dtype)
}

/// The elements in row-major order, as f64.
fn vals(x: &Tensor) -> Vec<f64> {
    nx::with_dtype!(x.dtype(), T => x.to_vec::<T>().into_iter().map(Element::to_f64).collect())
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Sum,
    Prod,
    Max,
    Min,
}

fn combine(op: Op, a: f64, v: f64) -> f64 {
    match op {
        Op::Sum => a + v,
        Op::Prod => a * v,
        Op::Max if a.is_nan() || v.is_nan() => f64::NAN,
        Op::Min if a.is_nan() || v.is_nan() => f64::NAN,
        Op::Max => a.max(v),
        Op::Min => a.min(v),
    }
}

fn init(op: Op) -> f64 {
    match op {
        Op::Sum => 0.0,
        Op::Prod => 1.0,
        Op::Max => f64::NEG_INFINITY,
        Op::Min => f64::INFINITY,
    }
}

/// Multi-index of flat position `flat` in `shape`.
fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

/// Naive reduction: every input element lands in the output element its
/// kept indices name. Returns the values and the (keepdims = false) shape.
fn ref_reduce(v: &[f64], shape: &[usize], axes: &[usize], op: Op) -> (Vec<f64>, Vec<usize>) {
    let out_shape: Vec<usize> = (0..shape.len())
        .filter(|d| !axes.contains(d))
        .map(|d| shape[d])
        .collect();
    let mut out = vec![init(op); numel(&out_shape)];
    for (flat, &x) in v.iter().enumerate() {
        let idx = unravel(flat, shape);
        let mut o = 0;
        for d in 0..shape.len() {
            if !axes.contains(&d) {
                o = o * shape[d] + idx[d];
            }
        }
        out[o] = combine(op, out[o], x);
    }
    (out, out_shape)
}

fn keep_shape(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    (0..shape.len())
        .map(|d| if axes.contains(&d) { 1 } else { shape[d] })
        .collect()
}

fn assert_close(got: &[f64], want: &[f64], rtol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= rtol * w.abs().max(1.0);
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

fn apply(x: &Tensor, op: Op, axes: &[isize], keepdims: bool) -> Tensor {
    match op {
        Op::Sum => x.sum(axes, keepdims),
        Op::Prod => x.prod(axes, keepdims),
        Op::Max => x.max(axes, keepdims),
        Op::Min => x.min(axes, keepdims),
    }
}

/// Every subset of axes (given half of them as negative axes), both
/// keepdims, against the reference computed from `x`'s own elements.
fn check_every_axis_set(x: &Tensor, ops: &[Op], rtol: f64) {
    let shape = x.shape().to_vec();
    let nd = shape.len();
    let v = vals(x);
    for mask in 0..(1usize << nd) {
        let axes: Vec<usize> = (0..nd).filter(|d| mask >> d & 1 == 1).collect();
        let iaxes: Vec<isize> = axes
            .iter()
            .map(|&a| {
                if a % 2 == 1 {
                    a as isize - nd as isize
                } else {
                    a as isize
                }
            })
            .collect();
        for &op in ops {
            let (want, out_shape) = ref_reduce(&v, &shape, &axes, op);
            // Round the reference to the dtype, as the kernel does once at the
            // end; integers wrap (the f64 reference is exact below 2^53).
            let want = if x.dtype().is_int() {
                let w: Vec<i64> = want.iter().map(|&w| w as i64).collect();
                vals(&Tensor::from_slice(&w, &out_shape).cast(x.dtype()))
            } else {
                vals(&make(&want, &out_shape, x.dtype()))
            };
            // Products round at every step.
            let rtol = if op == Op::Prod { rtol * 20.0 } else { rtol };
            for keepdims in [false, true] {
                let got = apply(x, op, &iaxes, keepdims);
                let what = format!(
                    "{op:?} {:?} {shape:?} axes {iaxes:?} keepdims {keepdims}",
                    x.dtype()
                );
                let expect_shape = if keepdims {
                    keep_shape(&shape, &axes)
                } else {
                    out_shape.clone()
                };
                assert_eq!(got.shape(), &expect_shape[..], "{what}");
                assert_eq!(got.dtype(), x.dtype(), "{what}");
                assert_close(&vals(&got), &want, rtol, &what);
            }
        }
    }
}

const ALL_OPS: [Op; 4] = [Op::Sum, Op::Prod, Op::Max, Op::Min];

// ---------------------------------------------------------------------------
// sum / prod / max / min.

#[test]
fn every_axis_set_on_small_shapes_in_float_dtypes() {
    for (k, shape) in [
        vec![5],
        vec![3, 4],
        vec![2, 3, 4],
        vec![2, 3, 1, 5],
        vec![4, 1, 3],
    ]
    .into_iter()
    .enumerate()
    {
        let v = halves(numel(&shape), k as u64 + 1);
        for (dtype, rtol) in [
            (DType::F64, 1e-12),
            (DType::F32, 1e-6),
            (DType::F16, 2e-3),
            (DType::BF16, 1e-2),
        ] {
            check_every_axis_set(&make(&v, &shape, dtype), &ALL_OPS, rtol);
        }
    }
}

#[test]
fn every_axis_set_on_small_shapes_in_integer_dtypes() {
    for (k, shape) in [vec![7], vec![3, 4], vec![2, 3, 4], vec![3, 1, 2, 2]]
        .into_iter()
        .enumerate()
    {
        let signed = ints(numel(&shape), 10 + k as u64, -3, 3);
        let unsigned = ints(numel(&shape), 20 + k as u64, 0, 3);
        for dtype in [DType::I8, DType::I16, DType::I32, DType::I64] {
            check_every_axis_set(&make(&signed, &shape, dtype), &ALL_OPS, 0.0);
        }
        for dtype in [DType::U8, DType::U16, DType::U32, DType::U64] {
            check_every_axis_set(&make(&unsigned, &shape, dtype), &ALL_OPS, 0.0);
        }
    }
}

#[test]
fn larger_shapes_cover_lanes_blocks_and_both_loops() {
    // Long rows (lanes + remainder), long columns (more than one block of
    // reduced positions), odd sizes everywhere.
    for (k, shape) in [
        vec![33, 70, 5],
        vec![5, 9000],
        vec![700, 13],
        vec![3, 300, 11],
    ]
    .into_iter()
    .enumerate()
    {
        let v = halves(numel(&shape), 30 + k as u64);
        check_every_axis_set(
            &make(&v, &shape, DType::F64),
            &[Op::Sum, Op::Max, Op::Min],
            1e-12,
        );
        check_every_axis_set(&make(&v, &shape, DType::F32), &[Op::Sum, Op::Max], 1e-6);
        let iv = ints(numel(&shape), 40 + k as u64, -100, 100);
        check_every_axis_set(&make(&iv, &shape, DType::I32), &[Op::Sum, Op::Min], 0.0);
    }
}

#[test]
fn parallel_paths_match_the_reference() {
    // Above the parallel threshold: full, rows, columns (wide: column blocks;
    // narrow: row groups), and the strided horizontal loop.
    let shape = [300, 2100];
    let v = halves(numel(&shape), 7);
    let x = make(&v, &shape, DType::F32);
    check_every_axis_set(&x, &[Op::Sum, Op::Max], 1e-6);
    let narrow = make(&halves(30000 * 7, 8), &[30000, 7], DType::F64);
    check_every_axis_set(&narrow, &[Op::Sum, Op::Min], 1e-12);
    let strided = x.slice(&[Slice::all(), Slice::from(..).step(2)]);
    check_every_axis_set(&strided, &[Op::Sum, Op::Max], 1e-6);
    let t = x.transpose();
    check_every_axis_set(&t, &[Op::Sum, Op::Min], 1e-6);
    // One output from a long strided run, and from many broadcast rows
    // (both split across cores).
    let long = make(&halves(300_001, 21), &[300_001], DType::F32);
    check_every_axis_set(
        &long.slice(&[Slice::from(1..).step(2)]),
        &[Op::Sum, Op::Max],
        1e-6,
    );
    let row = make(&halves(300, 22), &[300], DType::F64);
    check_every_axis_set(&row.broadcast_to(&[1000, 300]), &[Op::Sum, Op::Min], 1e-12);
    let xi = make(&ints(numel(&shape), 9, -1000, 1000), &shape, DType::I64);
    check_every_axis_set(&xi, &[Op::Sum, Op::Max], 0.0);
}

#[test]
fn views_reduce_like_their_contents() {
    let base = make(&halves(2 * 3 * 4 * 5, 3), &[2, 3, 4, 5], DType::F32);
    let views = [
        base.permute(&[2, 0, 3, 1]),
        base.transpose(),
        base.slice(&[
            Slice::all(),
            Slice::from(1..3),
            Slice::from(..).step(-1),
            Slice::from(..).step(2),
        ]),
        base.get(1),
        base.narrow(3, 1, 3).swapaxes(0, 2),
        Tensor::from_slice(&[1.5f32, -2.0, 3.0, 0.5], &[4, 1]).broadcast_to(&[3, 4, 6]),
        Tensor::from_slice(&[1.5f32, -2.0, 3.0], &[3]).broadcast_to(&[4, 2, 3]),
        Tensor::scalar(2.5f32).broadcast_to(&[3, 5]),
    ];
    for x in &views {
        check_every_axis_set(x, &ALL_OPS, 1e-6);
    }
    let xi = make(&ints(120, 4, -4, 4), &[2, 3, 4, 5], DType::I32);
    let view = xi.permute(&[3, 1, 0, 2]).slice(&[Slice::from(..).step(-2)]);
    check_every_axis_set(&view, &[Op::Sum, Op::Max, Op::Min], 0.0);
}

#[test]
fn zero_d_and_size_one_shapes() {
    let s = Tensor::scalar(4.0f32);
    assert_eq!(s.sum_all().item::<f32>(), 4.0);
    assert_eq!(s.sum(&[], false).item::<f32>(), 4.0);
    assert_eq!(s.max(&[], true).shape(), &[] as &[usize]);
    let one = Tensor::from_slice(&[3i32], &[1, 1, 1]);
    assert_eq!(one.sum(&[0, 2], false).to_vec::<i32>(), vec![3]);
    assert_eq!(one.prod(&[1], true).shape(), &[1, 1, 1]);
}

#[test]
fn empty_axes_reduce_nothing() {
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
    for keepdims in [false, true] {
        let y = x.sum(&[], keepdims);
        assert_eq!(y.shape(), &[2, 2]);
        assert_eq!(y.to_vec::<f64>(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(
            x.mean(&[], keepdims).to_vec::<f64>(),
            vec![1.0, 2.0, 3.0, 4.0]
        );
        assert_eq!(x.var(&[], keepdims).to_vec::<f64>(), vec![0.0; 4]);
    }
}

#[test]
fn empty_reductions_give_identities() {
    let x = Tensor::zeros(&[3, 0, 2], DType::F32);
    assert_eq!(x.sum(&[1], false).to_vec::<f32>(), vec![0.0; 6]);
    assert_eq!(x.prod(&[1], false).to_vec::<f32>(), vec![1.0; 6]);
    assert_eq!(x.sum_all().item::<f32>(), 0.0);
    assert_eq!(x.prod(&[0, 1, 2], true).shape(), &[1, 1, 1]);
    assert!(x
        .mean(&[1], false)
        .to_vec::<f32>()
        .iter()
        .all(|v| v.is_nan()));
    // Reducing a non-empty axis of an empty tensor gives an empty result.
    assert_eq!(x.max(&[0], false).shape(), &[0, 2]);
    assert_eq!(x.argmax(2, false).shape(), &[3, 0]);
    let xi = Tensor::zeros(&[0], DType::I32);
    assert_eq!(xi.sum_all().item::<i32>(), 0);
    assert_eq!(xi.prod(&[0], false).item::<i32>(), 1);
    let b = Tensor::zeros(&[2, 0], DType::Bool);
    assert_eq!(b.all(&[1], false).to_vec::<bool>(), vec![true, true]);
    assert_eq!(b.any(&[1], false).to_vec::<bool>(), vec![false, false]);
    assert_eq!(x.cumsum(1).shape(), &[3, 0, 2]);
    assert_eq!(x.softmax(1).shape(), &[3, 0, 2]);
}

#[test]
fn every_dtype_sums_and_finds_extremes() {
    let v = [3.0, 1.0, 2.0, 0.0, 5.0, 4.0];
    for dtype in DType::ALL {
        let x = make(&v, &[2, 3], dtype);
        if dtype != DType::Bool {
            assert_eq!(vals(&x.sum(&[1], false)), vec![6.0, 9.0], "{dtype}");
            assert_eq!(vals(&x.prod(&[0], false)), vec![0.0, 5.0, 8.0], "{dtype}");
        }
        let want_max = if dtype == DType::Bool {
            vec![1.0, 1.0]
        } else {
            vec![3.0, 5.0]
        };
        assert_eq!(vals(&x.max(&[-1], false)), want_max, "{dtype}");
        assert_eq!(vals(&x.min(&[-1], false)), vec![1.0, 0.0], "{dtype}");
        assert_eq!(x.argmax(1, false).to_vec::<i32>(), vec![0, 1], "{dtype}");
        assert_eq!(
            x.argmin(1, false).to_vec::<i32>(),
            if dtype == DType::Bool {
                vec![0, 0]
            } else {
                vec![1, 0]
            },
            "{dtype}"
        );
        assert_eq!(x.argmax(0, false).dtype(), DType::I32);
    }
}

#[test]
fn integer_reductions_wrap() {
    let x = Tensor::from_slice(&[100i8, 100, 100], &[3]);
    assert_eq!(x.sum_all().item::<i8>(), 44); // 300 - 256
    let u = Tensor::from_slice(&[200u8, 100], &[2]);
    assert_eq!(u.sum_all().item::<u8>(), 44);
    let p = Tensor::from_slice(&[65536i32, 65536, 3], &[3]);
    assert_eq!(p.prod(&[0], false).item::<i32>(), 0);
    let big = Tensor::from_slice(&[i64::MAX, 1], &[2]);
    assert_eq!(big.sum_all().item::<i64>(), i64::MIN);
    // Integer extremes use the type's bounds as identities.
    let m = Tensor::from_slice(&[i32::MIN, i32::MIN], &[2]);
    assert_eq!(m.max(&[0], false).item::<i32>(), i32::MIN);
    let n = Tensor::from_slice(&[u64::MAX, u64::MAX - 1], &[2]);
    assert_eq!(n.min(&[0], false).item::<u64>(), u64::MAX - 1);
    assert_eq!(n.max(&[0], false).item::<u64>(), u64::MAX);
}

#[test]
fn max_and_min_propagate_nan() {
    // NaN in lanes, in the remainder, in the vertical loop and the strided loop.
    for n in [5usize, 100, 1000, 70000] {
        for pos in [0, n / 2 + 1, n - 1] {
            let mut v = halves(n, n as u64);
            v[pos] = f64::NAN;
            for dtype in [DType::F32, DType::F64, DType::F16] {
                let x = make(&v, &[n], dtype);
                assert!(
                    vals(&x.max(&[0], false))[0].is_nan(),
                    "{dtype} n {n} pos {pos}"
                );
                assert!(
                    vals(&x.min(&[0], false))[0].is_nan(),
                    "{dtype} n {n} pos {pos}"
                );
                assert!(vals(&x.sum(&[0], false))[0].is_nan());
            }
        }
    }
    let x = Tensor::from_slice(&[1.0f32, f64::NAN as f32, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let m = x.max(&[0], false).to_vec::<f32>();
    assert!(m[1].is_nan() && m[0] == 5.0);
    let m = x.transpose().min(&[1], false).to_vec::<f32>();
    assert!(m[1].is_nan() && m[0] == 1.0);
    let m = x.max(&[1], false).to_vec::<f32>();
    assert!(m[0].is_nan() && m[1] == 4.0 && m[2] == 6.0);
}

#[test]
fn infinities_are_ordinary_extremes() {
    let x = Tensor::from_slice(&[f32::NEG_INFINITY, -1.0, f32::INFINITY], &[3]);
    assert_eq!(x.max(&[0], false).item::<f32>(), f32::INFINITY);
    assert_eq!(x.min(&[0], false).item::<f32>(), f32::NEG_INFINITY);
    let all_neg = Tensor::full(&[4], f64::NEG_INFINITY, DType::F32);
    assert_eq!(all_neg.max(&[0], false).item::<f32>(), f32::NEG_INFINITY);
}

#[test]
fn f32_sum_of_four_million_tenths_is_accurate() {
    let n = 4 << 20;
    let x = Tensor::full(&[n], 0.1, DType::F32);
    let s = x.sum_all().item::<f32>() as f64;
    assert!((s - 419430.4).abs() / 419430.4 < 1e-6, "sum = {s}");
    // Column and row sums of the same data stay accurate too.
    let m = x.reshape(&[4096, 1024]);
    for v in m.sum(&[0], false).to_vec::<f32>() {
        assert!((v as f64 - 409.6).abs() / 409.6 < 1e-6, "column sum {v}");
    }
    for v in m.sum(&[1], false).to_vec::<f32>() {
        assert!((v as f64 - 102.4).abs() / 102.4 < 1e-6, "row sum {v}");
    }
    let mean = x.mean_all().item::<f32>() as f64;
    assert!((mean - 0.1).abs() < 1e-7, "mean = {mean}");
}

#[test]
fn half_sums_accumulate_in_f32() {
    // A naive f16 accumulator stalls at 2048, a bf16 one at 256.
    let x = Tensor::ones(&[3000], DType::F16);
    assert_eq!(x.sum_all().item::<nx::half::f16>().to_f32(), 3000.0);
    let y = Tensor::ones(&[40, 25], DType::BF16);
    assert_eq!(
        y.sum(&[0, 1], false).item::<nx::half::bf16>().to_f32(),
        1000.0
    );
    assert_eq!(
        y.transpose().sum(&[1], false).to_vec::<nx::half::bf16>()[0].to_f32(),
        40.0
    );
    // The mean of many halves does not overflow the half range on the way.
    let z = Tensor::ones(&[70000], DType::F16);
    assert_eq!(z.mean_all().item::<nx::half::f16>().to_f32(), 1.0);
    assert_eq!(z.var(&[0], false).item::<nx::half::f16>().to_f32(), 0.0);
}

// ---------------------------------------------------------------------------
// mean / var / std / logsumexp / softmax / log_softmax.

fn ref_mean(v: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let (s, _) = ref_reduce(v, shape, axes, Op::Sum);
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    s.into_iter().map(|x| x / count as f64).collect()
}

/// Population variance by the textbook two-pass formula, element by element.
fn ref_var(v: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let mean = ref_mean(v, shape, axes);
    let count: usize = axes.iter().map(|&a| shape[a]).product();
    let out_n = mean.len();
    let mut acc = vec![0.0; out_n];
    for (flat, &x) in v.iter().enumerate() {
        let idx = unravel(flat, shape);
        let mut o = 0;
        for d in 0..shape.len() {
            if !axes.contains(&d) {
                o = o * shape[d] + idx[d];
            }
        }
        acc[o] += (x - mean[o]) * (x - mean[o]);
    }
    acc.into_iter().map(|s| s / count as f64).collect()
}

fn ref_logsumexp(v: &[f64], shape: &[usize], axes: &[usize]) -> Vec<f64> {
    let (m, _) = ref_reduce(v, shape, axes, Op::Max);
    let mut acc = vec![0.0; m.len()];
    for (flat, &x) in v.iter().enumerate() {
        let idx = unravel(flat, shape);
        let mut o = 0;
        for d in 0..shape.len() {
            if !axes.contains(&d) {
                o = o * shape[d] + idx[d];
            }
        }
        acc[o] += (x - m[o]).exp();
    }
    acc.iter().zip(&m).map(|(s, m)| s.ln() + m).collect()
}

#[test]
fn mean_var_std_logsumexp_match_the_reference() {
    let shape = [3, 4, 5];
    let v: Vec<f64> = halves(60, 11).iter().map(|x| x * 1.7 + 0.3).collect();
    for (dtype, rtol) in [(DType::F64, 1e-12), (DType::F32, 1e-5), (DType::F16, 3e-3)] {
        let x = make(&v, &shape, dtype);
        let v = vals(&x);
        for axes in [vec![0], vec![2], vec![0, 2], vec![1, 2], vec![0, 1, 2]] {
            let iaxes: Vec<isize> = axes.iter().map(|&a| a as isize - 3).collect();
            let out_shape: Vec<usize> = (0..3)
                .filter(|d| !axes.contains(d))
                .map(|d| shape[d])
                .collect();
            let what = format!("{dtype} axes {axes:?}");
            let m = x.mean(&iaxes, false);
            assert_eq!(m.shape(), &out_shape[..], "{what}");
            assert_eq!(m.dtype(), dtype);
            assert_close(
                &vals(&m),
                &ref_mean(&v, &shape, &axes),
                rtol,
                &format!("mean {what}"),
            );
            let var = ref_var(&v, &shape, &axes);
            assert_close(
                &vals(&x.var(&iaxes, false)),
                &var,
                rtol,
                &format!("var {what}"),
            );
            let sd: Vec<f64> = var.iter().map(|x| x.sqrt()).collect();
            let got = x.std(&axes.iter().map(|&a| a as isize).collect::<Vec<_>>(), true);
            assert_eq!(got.shape(), &keep_shape(&shape, &axes)[..]);
            assert_close(&vals(&got), &sd, rtol, &format!("std {what}"));
            let lse = x.logsumexp(&iaxes, true);
            assert_eq!(lse.shape(), &keep_shape(&shape, &axes)[..]);
            assert_close(
                &vals(&lse),
                &ref_logsumexp(&v, &shape, &axes),
                rtol,
                &format!("logsumexp {what}"),
            );
        }
        let all: Vec<usize> = vec![0, 1, 2];
        assert_close(
            &vals(&x.mean_all()),
            &ref_mean(&v, &shape, &all),
            rtol,
            "mean_all",
        );
        assert_eq!(x.mean_all().shape(), &[] as &[usize]);
    }
}

#[test]
fn mean_and_var_of_views() {
    let base = make(&halves(48, 12), &[4, 12], DType::F64);
    let x = base
        .slice(&[Slice::from(..).step(-1), Slice::from(1..).step(3)])
        .transpose();
    let v = vals(&x);
    let shape = x.shape().to_vec();
    assert_close(
        &vals(&x.mean(&[0], false)),
        &ref_mean(&v, &shape, &[0]),
        1e-12,
        "mean view",
    );
    assert_close(
        &vals(&x.var(&[1], false)),
        &ref_var(&v, &shape, &[1]),
        1e-12,
        "var view",
    );
}

#[test]
fn logsumexp_is_stable_and_handles_infinities() {
    let x = Tensor::from_slice(&[1000.0f32, 1000.0, -1000.0, -1000.0], &[2, 2]);
    let l = x.logsumexp(&[1], false).to_vec::<f32>();
    assert!((l[0] - (1000.0 + 2f32.ln())).abs() < 1e-3, "{l:?}");
    assert!((l[1] - (-1000.0 + 2f32.ln())).abs() < 1e-3, "{l:?}");
    let inf = f64::INFINITY;
    let y = Tensor::from_slice(&[-inf, -inf, 0.0, -inf, inf, 1.0], &[3, 2]);
    let l = y.logsumexp(&[1], false).to_vec::<f64>();
    assert_eq!(l, vec![f64::NEG_INFINITY, 0.0, f64::INFINITY]);
}

fn ref_softmax(v: &[f64], shape: &[usize], axis: usize, log: bool) -> Vec<f64> {
    let lse = ref_logsumexp(v, shape, &[axis]);
    v.iter()
        .enumerate()
        .map(|(flat, &x)| {
            let idx = unravel(flat, shape);
            let mut o = 0;
            for d in 0..shape.len() {
                if d != axis {
                    o = o * shape[d] + idx[d];
                }
            }
            if log {
                x - lse[o]
            } else {
                (x - lse[o]).exp()
            }
        })
        .collect()
}

#[test]
fn softmax_and_log_softmax_match_the_reference() {
    let shape = [3, 4, 5];
    let v: Vec<f64> = halves(60, 13).iter().map(|x| x * 3.0).collect();
    for (dtype, rtol) in [(DType::F64, 1e-12), (DType::F32, 1e-5), (DType::BF16, 2e-2)] {
        let x = make(&v, &shape, dtype);
        let v = vals(&x);
        for axis in 0..3usize {
            for ax in [axis as isize, axis as isize - 3] {
                let s = x.softmax(ax);
                assert_eq!(s.shape(), &shape);
                assert_eq!(s.dtype(), dtype);
                assert_close(
                    &vals(&s),
                    &ref_softmax(&v, &shape, axis, false),
                    rtol,
                    &format!("softmax {dtype} {ax}"),
                );
                let l = x.log_softmax(ax);
                assert_close(
                    &vals(&l),
                    &ref_softmax(&v, &shape, axis, true),
                    rtol * 10.0,
                    &format!("log_softmax {dtype} {ax}"),
                );
            }
        }
    }
    // Large logits do not overflow.
    let big = Tensor::from_slice(&[1000.0f32, 1001.0, 999.0], &[3]);
    let s = big.softmax(0).to_vec::<f32>();
    assert!(
        (s.iter().sum::<f32>() - 1.0).abs() < 1e-6 && s[1] > s[0] && s[0] > s[2],
        "{s:?}"
    );
    let l = big.log_softmax(-1).to_vec::<f32>();
    assert!(l.iter().all(|v| v.is_finite()), "{l:?}");
    // A transposed input.
    let t = make(&v, &[6, 10], DType::F64).transpose();
    let tv = vals(&t);
    assert_close(
        &vals(&t.softmax(0)),
        &ref_softmax(&tv, &[10, 6], 0, false),
        1e-12,
        "softmax of a view",
    );
}

// ---------------------------------------------------------------------------
// all / any.

#[test]
fn all_and_any_on_bool_and_numbers() {
    let b = Tensor::from_slice(&[true, false, true, true, true, true], &[2, 3]);
    assert_eq!(b.all(&[1], false).to_vec::<bool>(), vec![false, true]);
    assert_eq!(b.any(&[1], false).to_vec::<bool>(), vec![true, true]);
    assert_eq!(b.all(&[0], true).to_vec::<bool>(), vec![true, false, true]);
    assert_eq!(b.all(&[0], true).shape(), &[1, 3]);
    assert!(b.any(&[0, 1], false).item::<bool>());
    assert!(!b.all(&[-2, -1], false).item::<bool>());
    assert_eq!(b.all(&[], false).to_vec::<bool>(), b.to_vec::<bool>());
    let z = Tensor::zeros(&[3, 2], DType::Bool);
    assert_eq!(z.any(&[0], false).to_vec::<bool>(), vec![false, false]);
    let i = Tensor::from_slice(&[0i32, 2, 0, 0, -1, 3], &[3, 2]);
    assert_eq!(i.any(&[1], false).dtype(), DType::Bool);
    assert_eq!(i.any(&[1], false).to_vec::<bool>(), vec![true, false, true]);
    assert_eq!(i.all(&[0], false).to_vec::<bool>(), vec![false, false]);
    assert_eq!(
        i.transpose().all(&[0], false).to_vec::<bool>(),
        vec![false, false, true]
    );
    let f = Tensor::from_slice(&[f32::NAN, 0.5, 0.0], &[3]);
    assert!(!f.all(&[0], false).item::<bool>());
    // NaN is truthy.
    assert!(f.narrow(0, 0, 2).all(&[0], false).item::<bool>());
    // Bool reductions against the reference on a larger, strided input.
    let v: Vec<f64> = ints(600, 14, 0, 9)
        .into_iter()
        .map(|x| (x > 0.0) as u8 as f64)
        .collect();
    let x = make(&v, &[20, 30], DType::Bool).slice(&[Slice::from(..).step(3)]);
    check_every_axis_set(&x, &[Op::Max, Op::Min], 0.0);
    for axes in [vec![0isize], vec![1], vec![0, 1]] {
        assert_eq!(
            x.all(&axes, false).to_vec::<bool>(),
            x.min(&axes, false).to_vec::<bool>()
        );
        assert_eq!(
            x.any(&axes, false).to_vec::<bool>(),
            x.max(&axes, false).to_vec::<bool>()
        );
    }
}

// ---------------------------------------------------------------------------
// argmax / argmin.

/// First index of the extreme along `axis`, NaN counting as the extreme.
fn ref_arg(v: &[f64], shape: &[usize], axis: usize, max: bool) -> Vec<i32> {
    let out_shape: Vec<usize> = (0..shape.len())
        .filter(|&d| d != axis)
        .map(|d| shape[d])
        .collect();
    let mut best: Vec<Option<(f64, usize)>> = vec![None; numel(&out_shape)];
    for (flat, &x) in v.iter().enumerate() {
        let idx = unravel(flat, shape);
        let mut o = 0;
        for d in 0..shape.len() {
            if d != axis {
                o = o * shape[d] + idx[d];
            }
        }
        let i = idx[axis];
        best[o] = match best[o] {
            None => Some((x, i)),
            Some((b, bi)) if b.is_nan() => Some((b, bi)),
            Some(_) if x.is_nan() => Some((x, i)),
            Some((b, bi)) => {
                if (max && x > b) || (!max && x < b) || (x == b && i < bi) {
                    Some((x, i))
                } else {
                    Some((b, bi))
                }
            }
        };
    }
    best.into_iter().map(|b| b.unwrap().1 as i32).collect()
}

#[test]
fn argmax_and_argmin_match_the_reference() {
    // Few distinct values, so ties are everywhere.
    let shape = [4, 5, 6];
    let v = ints(120, 15, -2, 2);
    let base = make(&v, &shape, DType::F32);
    let inputs = [
        base.clone(),
        base.permute(&[2, 0, 1]),
        base.slice(&[
            Slice::from(..).step(-1),
            Slice::from(1..4),
            Slice::from(..).step(2),
        ]),
        make(&v, &shape, DType::I8),
        make(
            &v.iter().map(|x| x + 2.0).collect::<Vec<_>>(),
            &shape,
            DType::U8,
        ),
        make(&v, &shape, DType::F16),
        make(&v, &shape, DType::Bool),
        Tensor::from_slice(&[3.0f64, 1.0, 3.0], &[3, 1]).broadcast_to(&[2, 3, 4]),
    ];
    for x in &inputs {
        let xv = vals(x);
        let xs = x.shape().to_vec();
        for axis in 0..xs.len() {
            for (max, name) in [(true, "argmax"), (false, "argmin")] {
                let want = ref_arg(&xv, &xs, axis, max);
                for ax in [axis as isize, axis as isize - xs.len() as isize] {
                    let got = if max {
                        x.argmax(ax, false)
                    } else {
                        x.argmin(ax, false)
                    };
                    assert_eq!(got.dtype(), DType::I32);
                    assert_eq!(
                        got.to_vec::<i32>(),
                        want,
                        "{name} {:?} {xs:?} axis {ax}",
                        x.dtype()
                    );
                    let kept = if max {
                        x.argmax(ax, true)
                    } else {
                        x.argmin(ax, true)
                    };
                    let mut ks = xs.clone();
                    ks[axis] = 1;
                    assert_eq!(kept.shape(), &ks[..]);
                    assert_eq!(kept.to_vec::<i32>(), want);
                }
            }
        }
    }
}

#[test]
fn arg_ties_go_to_the_first_index_and_nan_wins() {
    let x = Tensor::from_slice(&[1.0f32, 5.0, 5.0, 0.0, 0.0], &[5]);
    assert_eq!(x.argmax(0, false).item::<i32>(), 1);
    assert_eq!(x.argmin(0, false).item::<i32>(), 3);
    let nan = f32::NAN;
    let y = Tensor::from_slice(&[1.0f32, nan, 7.0, nan, -3.0, 2.0], &[6]);
    assert_eq!(y.argmax(0, false).item::<i32>(), 1);
    assert_eq!(y.argmin(0, false).item::<i32>(), 1);
    // Along a non-last axis (the vertical loop) too.
    let z = Tensor::from_slice(&[1.0f32, 2.0, nan, 2.0, nan, 9.0, 4.0, 2.0], &[4, 2]);
    assert_eq!(z.argmax(0, false).to_vec::<i32>(), vec![1, 2]);
    assert_eq!(z.argmin(0, false).to_vec::<i32>(), vec![1, 0]);
    assert_eq!(z.argmax(1, false).to_vec::<i32>(), vec![1, 0, 0, 0]);
    let s = Tensor::scalar(1.0f32).reshape(&[1]);
    assert_eq!(s.argmax(0, true).to_vec::<i32>(), vec![0]);
}

#[test]
fn argmax_on_large_inputs() {
    let n = 300 * 700;
    let v = halves(n, 16);
    let x = make(&v, &[300, 700], DType::F32);
    for axis in 0..2 {
        assert_eq!(
            x.argmax(axis as isize, false).to_vec::<i32>(),
            ref_arg(&v, &[300, 700], axis, true)
        );
        assert_eq!(
            x.argmin(axis as isize, false).to_vec::<i32>(),
            ref_arg(&v, &[300, 700], axis, false)
        );
    }
}

// ---------------------------------------------------------------------------
// cumsum / cumprod.

fn ref_cum(v: &[f64], shape: &[usize], axis: usize, prod: bool) -> Vec<f64> {
    let stride: usize = shape[axis + 1..].iter().product();
    let mut out = v.to_vec();
    for flat in 0..v.len() {
        let i = unravel(flat, shape)[axis];
        if i > 0 {
            let prev = out[flat - stride];
            out[flat] = if prod { prev * v[flat] } else { prev + v[flat] };
        }
    }
    out
}

#[test]
fn cumsum_and_cumprod_match_the_reference() {
    let shape = [3, 4, 5];
    let v = ints(60, 17, -2, 2);
    let pv: Vec<f64> = ints(60, 18, 1, 2)
        .into_iter()
        .zip(ints(60, 19, 0, 1))
        .map(|(a, s)| if s > 0.0 { -a } else { a })
        .collect();
    for dtype in [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::I32,
        DType::I64,
        DType::I8,
    ] {
        let x = make(&v, &shape, dtype);
        let p = make(&pv, &shape, dtype);
        let pv = vals(&p);
        for axis in 0..3 {
            let ax = if axis == 1 { -2 } else { axis as isize };
            let got = x.cumsum(ax);
            assert_eq!(got.shape(), &shape);
            assert_eq!(got.dtype(), dtype);
            assert_close(
                &vals(&got),
                &ref_cum(&v, &shape, axis, false),
                0.0,
                &format!("cumsum {dtype} {axis}"),
            );
            let want = vals(&make(&ref_cum(&pv, &shape, axis, true), &shape, dtype));
            assert_close(
                &vals(&p.cumprod(ax)),
                &want,
                1e-3,
                &format!("cumprod {dtype} {axis}"),
            );
        }
    }
    // Views.
    let x = make(&v, &shape, DType::F64);
    let t = x.permute(&[2, 0, 1]).slice(&[Slice::from(..).step(-2)]);
    let tv = vals(&t);
    for axis in 0..3 {
        assert_close(
            &vals(&t.cumsum(axis as isize)),
            &ref_cum(&tv, t.shape(), axis, false),
            0.0,
            "cumsum view",
        );
    }
    let b = Tensor::from_slice(&[1.0f32, 2.0], &[2, 1]).broadcast_to(&[2, 3]);
    assert_eq!(
        b.cumsum(1).to_vec::<f32>(),
        vec![1.0, 2.0, 3.0, 2.0, 4.0, 6.0]
    );
    // Large: parallel over the outer axis.
    let big = make(&halves(200 * 1000, 20), &[200, 1000], DType::F32);
    let bv = vals(&big);
    assert_close(
        &vals(&big.cumsum(1)),
        &ref_cum(&bv, &[200, 1000], 1, false),
        1e-6,
        "cumsum big rows",
    );
    assert_close(
        &vals(&big.cumsum(0)),
        &ref_cum(&bv, &[200, 1000], 0, false),
        1e-6,
        "cumsum big cols",
    );
}

#[test]
fn cumulative_integers_wrap() {
    let x = Tensor::from_slice(&[100i8, 100, 100], &[3]);
    assert_eq!(x.cumsum(0).to_vec::<i8>(), vec![100, -56, 44]);
    let u = Tensor::from_slice(&[16u8, 16, 2], &[3]);
    assert_eq!(u.cumprod(0).to_vec::<u8>(), vec![16, 0, 0]);
}

// ---------------------------------------------------------------------------
// Panics.

#[test]
#[should_panic(expected = "sum: axis 2 is out of range for a tensor of rank 2")]
fn sum_axis_out_of_range() {
    Tensor::zeros(&[2, 3], DType::F32).sum(&[2], false);
}

#[test]
#[should_panic(expected = "max: axis -3 is out of range for a tensor of rank 2")]
fn max_negative_axis_out_of_range() {
    Tensor::zeros(&[2, 3], DType::F32).max(&[-3], false);
}

#[test]
#[should_panic(expected = "sum: axis 1 is repeated in [1, -1]")]
fn sum_repeated_axis() {
    Tensor::zeros(&[2, 3], DType::F32).sum(&[1, -1], false);
}

#[test]
#[should_panic(expected = "mean: axis 0 is repeated in [0, 0]")]
fn mean_repeated_axis() {
    Tensor::zeros(&[2, 3], DType::F32).mean(&[0, 0], false);
}

#[test]
#[should_panic(expected = "sum: expects a numeric tensor, got bool")]
fn sum_rejects_bool() {
    Tensor::zeros(&[2], DType::Bool).sum(&[0], false);
}

#[test]
#[should_panic(expected = "sum_all: expects a numeric tensor, got bool")]
fn sum_all_rejects_bool() {
    Tensor::zeros(&[2], DType::Bool).sum_all();
}

#[test]
#[should_panic(expected = "prod: expects a numeric tensor, got bool")]
fn prod_rejects_bool() {
    Tensor::zeros(&[2], DType::Bool).prod(&[0], false);
}

#[test]
#[should_panic(expected = "mean: expects a float tensor, got i32")]
fn mean_rejects_integers() {
    Tensor::zeros(&[2], DType::I32).mean(&[0], false);
}

#[test]
#[should_panic(expected = "mean_all: expects a float tensor, got u8")]
fn mean_all_rejects_integers() {
    Tensor::zeros(&[2], DType::U8).mean_all();
}

#[test]
#[should_panic(expected = "var: expects a float tensor, got i64")]
fn var_rejects_integers() {
    Tensor::zeros(&[2], DType::I64).var(&[0], false);
}

#[test]
#[should_panic(expected = "std: expects a float tensor, got bool")]
fn std_rejects_bool() {
    Tensor::zeros(&[2], DType::Bool).std(&[0], false);
}

#[test]
#[should_panic(expected = "logsumexp: expects a float tensor, got i32")]
fn logsumexp_rejects_integers() {
    Tensor::zeros(&[2], DType::I32).logsumexp(&[0], false);
}

#[test]
#[should_panic(expected = "softmax: expects a float tensor, got i32")]
fn softmax_rejects_integers() {
    Tensor::zeros(&[2], DType::I32).softmax(0);
}

#[test]
#[should_panic(expected = "log_softmax: expects a float tensor, got u16")]
fn log_softmax_rejects_integers() {
    Tensor::zeros(&[2], DType::U16).log_softmax(0);
}

#[test]
#[should_panic(expected = "softmax: axis 1 is out of range for a tensor of rank 1")]
fn softmax_axis_out_of_range() {
    Tensor::zeros(&[2], DType::F32).softmax(1);
}

#[test]
#[should_panic(expected = "max: cannot reduce an empty axis (axis 1 of shape [2, 0])")]
fn max_of_empty_axis() {
    Tensor::zeros(&[2, 0], DType::F32).max(&[1], false);
}

#[test]
#[should_panic(expected = "min: cannot reduce an empty axis (axis 0 of shape [0])")]
fn min_of_empty_axis() {
    Tensor::zeros(&[0], DType::I32).min(&[-1], false);
}

#[test]
#[should_panic(expected = "argmax: cannot reduce an empty axis (axis 0 of shape [0, 3])")]
fn argmax_of_empty_axis() {
    Tensor::zeros(&[0, 3], DType::F32).argmax(0, false);
}

#[test]
#[should_panic(expected = "argmin: cannot reduce an empty axis (axis 1 of shape [3, 0])")]
fn argmin_of_empty_axis() {
    Tensor::zeros(&[3, 0], DType::F32).argmin(-1, true);
}

#[test]
#[should_panic(expected = "argmax: axis 1 is out of range for a tensor of rank 1")]
fn argmax_axis_out_of_range() {
    Tensor::zeros(&[3], DType::F32).argmax(1, false);
}

#[test]
#[should_panic(expected = "argmin: axis 0 is out of range for a tensor of rank 0")]
fn argmin_of_a_scalar() {
    Tensor::scalar(1.0f32).argmin(0, false);
}

#[test]
#[should_panic(expected = "logsumexp: cannot reduce an empty axis (axis 0 of shape [0])")]
fn logsumexp_of_empty_axis() {
    Tensor::zeros(&[0], DType::F32).logsumexp(&[0], false);
}

#[test]
#[should_panic(expected = "cumsum: expects a numeric tensor, got bool")]
fn cumsum_rejects_bool() {
    Tensor::zeros(&[2], DType::Bool).cumsum(0);
}

#[test]
#[should_panic(expected = "cumprod: axis 2 is out of range for a tensor of rank 2")]
fn cumprod_axis_out_of_range() {
    Tensor::zeros(&[2, 2], DType::F32).cumprod(2);
}

#[test]
#[should_panic(expected = "all: axis 3 is out of range for a tensor of rank 1")]
fn all_axis_out_of_range() {
    Tensor::zeros(&[2], DType::Bool).all(&[3], false);
}

#[test]
#[should_panic(expected = "any: axis 0 is repeated in [0, -1]")]
fn any_repeated_axis() {
    Tensor::zeros(&[2], DType::Bool).any(&[0, -1], false);
}
