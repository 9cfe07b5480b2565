//! Pooling (`max_pool`, `avg_pool`) and sorting (`sort`, `argsort`,
//! `top_k`) against naive f64 references written with plain loops here,
//! over tables of configurations; and their error messages.

mod common;

use nx::half::{bf16, f16};
use nx::{DType, Padding, Tensor};
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

/// SplitMix64: the test's own small deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn values_f64(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>()
}

// ---------------------------------------------------------------- pooling

/// JAX's `padtype_to_pads`, written again here.
fn ref_pads(
    pad: &Padding,
    input: &[usize],
    window: &[usize],
    strides: &[usize],
) -> Vec<(usize, usize)> {
    match pad {
        Padding::Valid => vec![(0, 0); input.len()],
        Padding::Same => (0..input.len())
            .map(|d| {
                let out = (input[d] + strides[d] - 1) / strides[d];
                let need =
                    (out as i64 - 1) * strides[d] as i64 + window[d] as i64 - input[d] as i64;
                let total = need.max(0) as usize;
                (total / 2, total - total / 2)
            })
            .collect(),
        Padding::Explicit(p) => p.clone(),
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Pool {
    Max,
    Avg,
}

/// Naive pooling over `[N, C, spatial...]` in f64: returns the output shape
/// and values. Max pads with -inf and propagates NaN; avg divides by the
/// in-bounds count.
fn ref_pool(
    kind: Pool,
    x: &[f64],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> (Vec<usize>, Vec<f64>) {
    let sp = shape.len() - 2;
    let ins = &shape[2..];
    let outs: Vec<usize> = (0..sp)
        .map(|d| (ins[d] + pads[d].0 + pads[d].1 - window[d]) / strides[d] + 1)
        .collect();
    let mut out_shape = shape[..2].to_vec();
    out_shape.extend(&outs);
    let plane_in: usize = ins.iter().product();
    let plane_out: usize = outs.iter().product();
    let wcount: usize = window.iter().product();
    let mut out = Vec::new();
    for p in 0..shape[0] * shape[1] {
        for oi in 0..plane_out {
            // Output coordinates.
            let mut o = vec![0; sp];
            let mut r = oi;
            for d in (0..sp).rev() {
                o[d] = r % outs[d];
                r /= outs[d];
            }
            let (mut acc, mut count) = (
                if kind == Pool::Max {
                    f64::NEG_INFINITY
                } else {
                    0.0
                },
                0,
            );
            for wi in 0..wcount {
                let mut w = vec![0; sp];
                let mut r = wi;
                for d in (0..sp).rev() {
                    w[d] = r % window[d];
                    r /= window[d];
                }
                let mut flat = 0usize;
                let mut inside = true;
                for d in 0..sp {
                    let i = (o[d] * strides[d] + w[d]) as i64 - pads[d].0 as i64;
                    if i < 0 || i >= ins[d] as i64 {
                        inside = false;
                        break;
                    }
                    flat = flat * ins[d] + i as usize;
                }
                if !inside {
                    continue;
                }
                let v = x[p * plane_in + flat];
                count += 1;
                match kind {
                    Pool::Max => {
                        if v.is_nan() || acc.is_nan() {
                            acc = f64::NAN;
                        } else if v > acc {
                            acc = v;
                        }
                    }
                    Pool::Avg => acc += v,
                }
            }
            out.push(match kind {
                Pool::Max => acc,
                Pool::Avg => acc / count as f64,
            });
        }
    }
    (out_shape, out)
}

struct PoolCase {
    shape: &'static [usize],
    window: &'static [usize],
    strides: &'static [usize],
    padding: Padding,
}

fn pool_cases() -> Vec<PoolCase> {
    use Padding::*;
    let c = |shape, window, strides, padding| PoolCase {
        shape,
        window,
        strides,
        padding,
    };
    vec![
        // 1-D
        c(&[2, 3, 7], &[3], &[2], Valid),
        c(&[2, 3, 7], &[3], &[2], Same),
        c(&[1, 2, 8], &[2], &[2], Same),
        c(&[2, 1, 7], &[3], &[1], Explicit(vec![(2, 1)])),
        c(&[1, 1, 5], &[2], &[1], Explicit(vec![(3, 0)])), // windows wholly in padding
        c(&[1, 2, 6], &[1], &[3], Valid),
        c(&[1, 1, 4], &[4], &[1], Valid),
        // 2-D
        c(&[2, 2, 6, 6], &[2, 2], &[2, 2], Valid),
        c(&[2, 2, 5, 7], &[2, 2], &[2, 2], Valid), // leftover rows/columns
        c(&[2, 2, 5, 6], &[3, 2], &[1, 2], Same),
        c(&[1, 3, 5, 5], &[3, 3], &[2, 2], Same),
        c(
            &[2, 1, 4, 6],
            &[2, 3],
            &[2, 1],
            Explicit(vec![(1, 0), (0, 2)]),
        ),
        c(
            &[1, 2, 3, 9],
            &[1, 4],
            &[1, 3],
            Explicit(vec![(0, 0), (3, 1)]),
        ),
        c(&[1, 1, 7, 3], &[3, 3], &[3, 1], Same),
        // Rows a whole number of strides long, which nx's max pool folds
        // end to end before redoing the windows padding cuts: the last
        // window cut, both ends cut, the first cut, a window wider than
        // its stride, and planes larger than one batch of its passes.
        c(&[2, 3, 8, 8], &[3, 3], &[2, 2], Same),
        c(&[1, 2, 6, 6], &[3, 3], &[1, 1], Same),
        c(
            &[2, 2, 6, 6],
            &[3, 3],
            &[2, 2],
            Explicit(vec![(1, 0), (1, 0)]),
        ),
        c(&[1, 2, 9, 9], &[4, 4], &[3, 3], Same),
        c(&[1, 2, 130, 130], &[3, 3], &[2, 2], Same),
        // 3-D
        c(&[1, 2, 4, 5, 3], &[2, 2, 2], &[1, 2, 1], Same),
        c(&[2, 1, 4, 4, 4], &[2, 2, 2], &[2, 2, 2], Valid),
        c(
            &[1, 2, 3, 5, 4],
            &[3, 2, 1],
            &[1, 1, 2],
            Explicit(vec![(1, 1), (0, 1), (0, 0)]),
        ),
    ]
}

fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: element {i}: got {g}, want {w}");
    }
}

#[test]
fn pooling_matches_naive_reference() {
    let mut rng = Rng(1);
    for (ci, c) in pool_cases().iter().enumerate() {
        let n: usize = c.shape.iter().product();
        let x: Vec<f64> = (0..n).map(|_| rng.unit()).collect();
        let pads = ref_pads(&c.padding, &c.shape[2..], c.window, c.strides);
        for kind in [Pool::Max, Pool::Avg] {
            let (shape, want) = ref_pool(kind, &x, c.shape, c.window, c.strides, &pads);
            for dtype in [DType::F64, DType::F32] {
                let t = Tensor::from_slice(&x, c.shape).cast(dtype);
                let xs = values_f64(&t); // the reference at the dtype's values
                let (_, want_d) = ref_pool(kind, &xs, c.shape, c.window, c.strides, &pads);
                let y = match kind {
                    Pool::Max => t.max_pool(c.window, c.strides, c.padding.clone()),
                    Pool::Avg => t.avg_pool(c.window, c.strides, c.padding.clone()),
                };
                let what = format!("case {ci} {kind:?} {dtype} {:?}", c.padding);
                assert_eq!(y.shape(), &shape[..], "{what}: shape");
                assert_eq!(y.dtype(), dtype);
                let tol = if dtype == DType::F64 { 1e-14 } else { 1e-6 };
                assert_close(&what, &values_f64(&y), &want_d, tol);
                if dtype == DType::F64 {
                    assert_close(&what, &values_f64(&y), &want, 1e-14);
                }
            }
        }
    }
}

#[test]
fn pooling_half_integers_and_strided_inputs() {
    let mut rng = Rng(2);
    let c = &pool_cases()[9]; // 2-D, Same, uneven strides
    let n: usize = c.shape.iter().product();
    let pads = ref_pads(&c.padding, &c.shape[2..], c.window, c.strides);
    // Integers: max over every integer dtype, padding never wins.
    let xi: Vec<i64> = (0..n).map(|_| rng.below(200) as i64 - 100).collect();
    let xf: Vec<f64> = xi.iter().map(|&v| v as f64).collect();
    let (_, want) = ref_pool(Pool::Max, &xf, c.shape, c.window, c.strides, &pads);
    for dtype in [DType::I32, DType::I64, DType::I8, DType::I16] {
        let t = Tensor::from_slice(&xi, c.shape).cast(dtype);
        let y = t.max_pool(c.window, c.strides, c.padding.clone());
        assert_eq!(y.dtype(), dtype);
        assert_eq!(values_f64(&y), want, "{dtype}");
    }
    let xu: Vec<u8> = xi.iter().map(|&v| (v + 100) as u8).collect();
    let y = Tensor::from_slice(&xu, c.shape).max_pool(c.window, c.strides, c.padding.clone());
    let wu: Vec<f64> = want.iter().map(|v| v + 100.0).collect();
    assert_eq!(values_f64(&y), wu);
    // Halves: inputs exact in f16/bf16; avg sums in f32 and rounds once.
    let x: Vec<f64> = (0..n)
        .map(|_| (rng.below(64) as f64 - 32.0) / 8.0)
        .collect();
    for dtype in [DType::F16, DType::BF16] {
        let t = Tensor::from_slice(&x, c.shape).cast(dtype);
        for kind in [Pool::Max, Pool::Avg] {
            let (_, want) = ref_pool(kind, &x, c.shape, c.window, c.strides, &pads);
            let y = match kind {
                Pool::Max => t.max_pool(c.window, c.strides, c.padding.clone()),
                Pool::Avg => t.avg_pool(c.window, c.strides, c.padding.clone()),
            };
            assert_eq!(y.dtype(), dtype);
            let want_rounded: Vec<f64> =
                values_f64(&Tensor::from_slice(&want, &[want.len()]).cast(dtype));
            assert_eq!(values_f64(&y), want_rounded, "{kind:?} {dtype}");
        }
    }
    // A strided input (a transposed view) pools like its contiguous copy.
    let x: Vec<f64> = (0..2 * 3 * 6 * 5).map(|_| rng.unit()).collect();
    let base = Tensor::from_slice(&x, &[2, 3, 6, 5]);
    let view = base.permute(&[1, 0, 3, 2]); // [3, 2, 5, 6]
    assert!(!view.is_contiguous());
    let dense = view.copy();
    for kind in [Pool::Max, Pool::Avg] {
        let f = |t: &Tensor| match kind {
            Pool::Max => t.max_pool(&[2, 3], &[1, 2], Padding::Same),
            Pool::Avg => t.avg_pool(&[2, 3], &[1, 2], Padding::Same),
        };
        assert_eq!(f(&view).to_vec::<f64>(), f(&dense).to_vec::<f64>());
    }
}

/// A max pool's bits as the definition folds each window: row-major window
/// order from -inf, skipping padding, taking `v` when `v > acc` or `v` is
/// NaN (the first of equal values stays, so +0/-0 keep the earlier one;
/// the last NaN wins, payload and all).
fn ref_max_pool_bits(
    x: &[f32],
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> Vec<u32> {
    let sp = shape.len() - 2;
    let ins = &shape[2..];
    let outs: Vec<usize> = (0..sp)
        .map(|d| (ins[d] + pads[d].0 + pads[d].1 - window[d]) / strides[d] + 1)
        .collect();
    let (plane_in, plane_out) = (ins.iter().product::<usize>(), outs.iter().product());
    let mut out = Vec::new();
    for p in 0..shape[0] * shape[1] {
        for oi in 0..plane_out {
            let mut acc = f32::NEG_INFINITY;
            for wi in 0..window.iter().product() {
                let (mut ro, mut rw, mut flat, mut inside) = (oi, wi, 0, true);
                let mut at = vec![0i64; sp];
                for d in (0..sp).rev() {
                    at[d] =
                        ((ro % outs[d]) * strides[d] + rw % window[d]) as i64 - pads[d].0 as i64;
                    ro /= outs[d];
                    rw /= window[d];
                }
                for d in 0..sp {
                    inside &= at[d] >= 0 && at[d] < ins[d] as i64;
                    flat = flat * ins[d] + at[d].max(0) as usize;
                }
                let v = x[p * plane_in + flat.min(plane_in - 1)];
                if inside && (v > acc || v.is_nan()) {
                    acc = v;
                }
            }
            out.push(acc.to_bits());
        }
    }
    out
}

/// Every pool case, with values full of ties between +0 and -0, NaNs of
/// different payloads and infinities: the max pool's bits equal the
/// definition's fold (nx reduces one axis at a time), in f32 and in i32.
#[test]
fn max_pool_bits_equal_the_row_major_fold() {
    let mut rng = Rng(7);
    let specials = [
        0.0f32,
        -0.0,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fc0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0,
        -1.0,
    ];
    for (ci, c) in pool_cases().iter().enumerate() {
        let n: usize = c.shape.iter().product();
        let pads = ref_pads(&c.padding, &c.shape[2..], c.window, c.strides);
        for density in [0u64, 3, 10] {
            let x: Vec<f32> = (0..n)
                .map(|_| {
                    if rng.below(10) < density {
                        specials[rng.below(specials.len() as u64) as usize]
                    } else {
                        (rng.below(5) as f32 - 2.0) * 0.5
                    }
                })
                .collect();
            let want = ref_max_pool_bits(&x, c.shape, c.window, c.strides, &pads);
            let got: Vec<u32> = Tensor::from_slice(&x, c.shape)
                .max_pool(c.window, c.strides, c.padding.clone())
                .to_vec::<f32>()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(got, want, "case {ci}, density {density}");
            // Integers: padding is the lowest value, ties are equal bits.
            let xi: Vec<i32> = (0..n)
                .map(|_| match rng.below(9) {
                    0 => i32::MIN,
                    _ => rng.below(7) as i32 - 3,
                })
                .collect();
            let xf: Vec<f32> = xi.iter().map(|&v| v as f32).collect();
            let want: Vec<i32> = ref_max_pool_bits(&xf, c.shape, c.window, c.strides, &pads)
                .iter()
                .map(|&b| {
                    let v = f32::from_bits(b);
                    if v == f32::NEG_INFINITY {
                        i32::MIN
                    } else {
                        v as i32
                    }
                })
                .collect();
            let got = Tensor::from_slice(&xi, c.shape)
                .max_pool(c.window, c.strides, c.padding.clone())
                .to_vec::<i32>();
            assert_eq!(got, want, "case {ci} i32");
        }
    }
}

#[test]
fn max_pool_nan_propagates_and_avg_counts_in_bounds() {
    // NaN in a window gives NaN, as XLA's max.
    let x = Tensor::from_slice(&[1.0f32, f32::NAN, 3.0, 0.5, 2.0, 7.0], &[1, 1, 6]);
    let m = x.max_pool(&[2], &[2], Padding::Valid).to_vec::<f32>();
    assert!(m[0].is_nan());
    assert_eq!(&m[1..], &[3.0, 7.0]);
    // Avg with Same padding: corner windows average fewer elements.
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
    let a = x.avg_pool(&[2, 2], &[1, 1], Padding::Same).to_vec::<f64>();
    // out 2x2, total padding 1 per axis, at the end.
    assert_eq!(a, vec![2.5, 3.0, 3.5, 4.0]);
}

#[test]
fn padding_resolution_follows_padtype_to_pads() {
    let mut rng = Rng(3);
    for _ in 0..200 {
        let n = 1 + rng.below(12) as usize;
        let k = 1 + rng.below(5) as usize;
        let s = 1 + rng.below(4) as usize;
        let got = Padding::Same.resolve("t", &[n], &[k], &[s]);
        assert_eq!(
            got,
            ref_pads(&Padding::Same, &[n], &[k], &[s]),
            "n {n} k {k} s {s}"
        );
        // Same gives ceil(n / s) outputs.
        let (lo, hi) = got[0];
        if n + lo + hi >= k {
            assert_eq!((n + lo + hi - k) / s + 1, n.div_ceil(s));
        }
    }
}

#[test]
fn pooling_errors_name_the_op() {
    let x = Tensor::zeros(&[1, 2, 4, 4], DType::F32);
    let m = panic_message(|| {
        x.max_pool(&[2], &[2], Padding::Valid);
    });
    assert!(
        m.contains("max_pool") && m.contains("window") && m.contains("[2]"),
        "{m}"
    );
    let m = panic_message(|| {
        x.max_pool(&[2, 2], &[2], Padding::Valid);
    });
    assert!(m.contains("max_pool") && m.contains("strides"), "{m}");
    let m = panic_message(|| {
        x.avg_pool(&[5, 2], &[1, 1], Padding::Valid);
    });
    assert!(
        m.contains("avg_pool") && m.contains("larger than the padded input"),
        "{m}"
    );
    // Padding that makes it fit is fine.
    assert_eq!(
        x.avg_pool(&[5, 2], &[1, 1], Padding::Explicit(vec![(1, 0), (0, 0)]))
            .shape(),
        &[1, 2, 1, 3]
    );
    let m = panic_message(|| {
        x.max_pool(&[2, 2], &[0, 1], Padding::Same);
    });
    assert!(
        m.contains("max_pool") && m.contains("strides must be at least 1"),
        "{m}"
    );
    let m = panic_message(|| {
        x.max_pool(&[0, 2], &[1, 1], Padding::Valid);
    });
    assert!(m.contains("window sizes must be at least 1"), "{m}");
    let m = panic_message(|| {
        Tensor::zeros(&[4, 4], DType::F32).max_pool(&[2, 2], &[2, 2], Padding::Valid);
    });
    assert!(
        m.contains("max_pool") && m.contains("[N, C, spatial...]") && m.contains("[4, 4]"),
        "{m}"
    );
    let m = panic_message(|| {
        x.max_pool(&[2, 2], &[1, 1], Padding::Explicit(vec![(1, 1)]));
    });
    assert!(
        m.contains("max_pool") && m.contains("one (lo, hi) pair per spatial axis"),
        "{m}"
    );
    let m = panic_message(|| {
        Tensor::zeros(&[1, 1, 4], DType::I32).avg_pool(&[2], &[2], Padding::Valid);
    });
    assert!(m.contains("avg_pool") && m.contains("float"), "{m}");
}

// ---------------------------------------------------------------- sorting

/// A key comparing as JAX sorts: NaN above everything, -0.0 == 0.0.
fn ref_cmp(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Greater,
        (false, true) => std::cmp::Ordering::Less,
        _ => a.partial_cmp(&b).unwrap(),
    }
}

/// Stable argsort of one row (Vec::sort_by is a stable merge sort).
fn ref_argsort_row(row: &[f64], descending: bool) -> Vec<i32> {
    let mut idx: Vec<usize> = (0..row.len()).collect();
    if descending {
        idx.sort_by(|&i, &j| ref_cmp(row[j], row[i]));
    } else {
        idx.sort_by(|&i, &j| ref_cmp(row[i], row[j]));
    }
    idx.into_iter().map(|i| i as i32).collect()
}

/// Argsort along `axis` of a row-major `shape`, by rows.
fn ref_argsort(x: &[f64], shape: &[usize], axis: usize, descending: bool) -> Vec<i32> {
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let outer: usize = shape[..axis].iter().product();
    let mut out = vec![0i32; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| o * n * inner + j * inner + i;
            let row: Vec<f64> = (0..n).map(|j| x[at(j)]).collect();
            for (j, v) in ref_argsort_row(&row, descending).into_iter().enumerate() {
                out[at(j)] = v;
            }
        }
    }
    out
}

/// Values with ties, NaN, -0.0 and 0.0, infinities.
fn tricky_values(rng: &mut Rng, n: usize, distinct: u64) -> Vec<f64> {
    (0..n)
        .map(|_| match rng.below(20) {
            0 => f64::NAN,
            1 => -0.0,
            2 => 0.0,
            3 => f64::INFINITY,
            4 => f64::NEG_INFINITY,
            _ => (rng.below(distinct) as f64 - distinct as f64 / 2.0) * 0.25,
        })
        .collect()
}

fn sort_shapes() -> Vec<(Vec<usize>, usize)> {
    vec![
        (vec![1], 0),
        (vec![7], 0),
        (vec![3, 5], 0),
        (vec![3, 5], 1),
        (vec![2, 3, 4], 1),
        (vec![2, 3, 4], 2),
        (vec![4, 255], 1),
        (vec![2, 256], 1),
        (vec![3, 257], 1),
        (vec![1000], 0),
        (vec![300, 3], 0), // long rows along a strided axis
        (vec![2, 3000], 1),
    ]
}

fn check_argsort(t: &Tensor, x: &[f64], shape: &[usize], axis: usize, what: &str) {
    for descending in [false, true] {
        let want = ref_argsort(x, shape, axis, descending);
        let got = t.argsort(axis as isize, descending);
        assert_eq!(got.dtype(), DType::I32);
        assert_eq!(got.shape(), shape);
        assert_eq!(
            got.to_vec::<i32>(),
            want,
            "{what} axis {axis} desc {descending}"
        );
        // The values: x at the reference permutation, bit for bit (-0.0 and
        // 0.0 in their stable order).
        let sorted = t.sort(axis as isize - shape.len() as isize, descending);
        let want_vals = t.take_along_axis(&Tensor::from_slice(&want, shape), axis as isize);
        let (a, b) = (values_f64(&sorted), values_f64(&want_vals));
        assert!(
            a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()),
            "{what} sort values axis {axis} desc {descending}"
        );
    }
}

#[test]
fn argsort_and_sort_float_dtypes() {
    let mut rng = Rng(4);
    for (shape, axis) in sort_shapes() {
        let n: usize = shape.iter().product();
        for distinct in [5, 1000] {
            let x = tricky_values(&mut rng, n, distinct);
            for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
                let t = Tensor::from_slice(&x, &shape).cast(dtype);
                let xs = values_f64(&t);
                check_argsort(&t, &xs, &shape, axis, &format!("{dtype} {shape:?}"));
            }
        }
    }
}

#[test]
fn argsort_integer_dtypes() {
    let mut rng = Rng(5);
    for (shape, axis) in sort_shapes() {
        let n: usize = shape.iter().product();
        for dtype in common::INTS {
            let signed = common::SIGNED.contains(&dtype);
            let x: Vec<f64> = (0..n)
                .map(|_| {
                    let v = rng.below(100) as f64;
                    if signed {
                        v - 50.0
                    } else {
                        v
                    }
                })
                .collect();
            let t = Tensor::from_slice(&x, &shape).cast(dtype);
            check_argsort(&t, &x, &shape, axis, &format!("{dtype} {shape:?}"));
        }
    }
    // Extremes of the wide types.
    let x = [i64::MAX, i64::MIN, -1, 0, 1, i64::MIN + 1, i64::MAX - 1];
    let t = Tensor::from_slice(&x, &[7]);
    assert_eq!(
        t.argsort(0, false).to_vec::<i32>(),
        vec![1, 5, 2, 3, 4, 6, 0]
    );
    let x = [u64::MAX, 0, 1 << 63, (1 << 63) - 1];
    let t = Tensor::from_slice(&x, &[4]);
    assert_eq!(t.argsort(0, false).to_vec::<i32>(), vec![1, 3, 2, 0]);
}

#[test]
fn sort_stability_nan_and_signed_zero() {
    let x = [0.0f32, f32::NAN, -0.0, 1.0, -0.0, f32::NAN, 0.0];
    let t = Tensor::from_slice(&x, &[7]);
    // Ascending: zeros in input order, then 1, then NaNs in input order.
    assert_eq!(
        t.argsort(0, false).to_vec::<i32>(),
        vec![0, 2, 4, 6, 3, 1, 5]
    );
    // Descending: NaNs first, then 1, then the zeros, each in input order.
    assert_eq!(
        t.argsort(0, true).to_vec::<i32>(),
        vec![1, 5, 3, 0, 2, 4, 6]
    );
    let s = t.sort(0, false).to_vec::<f32>();
    let signs: Vec<bool> = s[..4].iter().map(|v| v.is_sign_negative()).collect();
    assert_eq!(signs, vec![false, true, true, false]);
}

#[test]
fn top_k_matches_descending_argsort() {
    let mut rng = Rng(6);
    let cases: Vec<(Vec<usize>, Vec<usize>)> = vec![
        (vec![5], vec![1, 3, 5]),
        (vec![3, 8], vec![1, 2, 8]),
        (vec![2, 2, 40], vec![1, 10, 40]),
        (vec![2, 2000], vec![1, 10, 64, 65, 500, 2000]),
        (vec![1, 300], vec![1, 18, 19]),
    ];
    for (shape, ks) in cases {
        let n: usize = shape.iter().product();
        let last = *shape.last().unwrap();
        for distinct in [4, 100000] {
            let x = tricky_values(&mut rng, n, distinct);
            for dtype in [DType::F32, DType::F64, DType::BF16, DType::I32] {
                let t = if dtype == DType::I32 {
                    let xi: Vec<f64> = x
                        .iter()
                        .map(|v| {
                            if v.is_finite() {
                                (v * 4.0).round()
                            } else {
                                7.0
                            }
                        })
                        .collect();
                    Tensor::from_slice(&xi, &shape).cast(dtype)
                } else {
                    Tensor::from_slice(&x, &shape).cast(dtype)
                };
                let xs = values_f64(&t);
                let full = ref_argsort(&xs, &shape, shape.len() - 1, true);
                for &k in &ks {
                    let (v, i) = t.top_k(k);
                    let mut oshape = shape.clone();
                    *oshape.last_mut().unwrap() = k;
                    assert_eq!(i.shape(), &oshape[..]);
                    assert_eq!(v.shape(), &oshape[..]);
                    assert_eq!(i.dtype(), DType::I32);
                    assert_eq!(v.dtype(), dtype);
                    let want: Vec<i32> = full.chunks(last).flat_map(|r| r[..k].to_vec()).collect();
                    assert_eq!(
                        i.to_vec::<i32>(),
                        want,
                        "{dtype} {shape:?} k {k} distinct {distinct}"
                    );
                    let rows = n / last;
                    let want_v: Vec<f64> = (0..rows)
                        .flat_map(|r| want[r * k..(r + 1) * k].iter().map(move |&j| (r, j)))
                        .map(|(r, j)| xs[r * last + j as usize])
                        .collect();
                    let got_v = values_f64(&v);
                    assert!(
                        got_v
                            .iter()
                            .zip(&want_v)
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{dtype} values k {k}"
                    );
                }
            }
        }
    }
    // Ties go to the lower index.
    let t = Tensor::from_slice(&[2.0f32, 9.0, 2.0, 9.0, 2.0], &[5]);
    assert_eq!(t.top_k(3).1.to_vec::<i32>(), vec![1, 3, 0]);
}

#[test]
fn sorting_errors_name_the_op() {
    let x = Tensor::zeros(&[3, 4], DType::F32);
    let m = panic_message(|| {
        x.top_k(5);
    });
    assert!(
        m.contains("top_k") && m.contains("k = 5") && m.contains("size 4"),
        "{m}"
    );
    let m = panic_message(|| {
        x.sort(2, false);
    });
    assert!(
        m.contains("sort") && m.contains("axis 2 is out of range"),
        "{m}"
    );
    let m = panic_message(|| {
        x.argsort(-3, true);
    });
    assert!(
        m.contains("argsort") && m.contains("axis -3 is out of range"),
        "{m}"
    );
    let m = panic_message(|| {
        Tensor::scalar(1.0f32).top_k(1);
    });
    assert!(m.contains("top_k") && m.contains("scalar"), "{m}");
    let m = panic_message(|| {
        Tensor::scalar(1.0f32).sort(0, false);
    });
    assert!(m.contains("sort") && m.contains("scalar"), "{m}");
}

#[test]
fn half_types_use_their_own_values() {
    // f16 and bf16 round differently: each sorts by its own values.
    let x = [1.0f64, 1.0 + 1.0 / 512.0, 1.0 - 1.0 / 1024.0];
    let h: Vec<f16> = x.iter().map(|&v| f16::from_f64(v)).collect();
    let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f64(v)).collect();
    let th = Tensor::from_slice(&h, &[3]);
    let tb = Tensor::from_slice(&b, &[3]);
    let hv: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
    let bv: Vec<f64> = b.iter().map(|v| v.to_f64()).collect();
    assert_eq!(
        th.argsort(0, false).to_vec::<i32>(),
        ref_argsort_row(&hv, false)
    );
    assert_eq!(
        tb.argsort(0, false).to_vec::<i32>(),
        ref_argsort_row(&bv, false)
    );
}
