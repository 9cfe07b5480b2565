//! The movement composites (pad, concatenate, stack, split, chunk, repeat,
//! tile, roll) against naive references written with plain index loops over
//! row-major data in f64, on several shapes, axes (negative too), dtypes and
//! non-contiguous inputs; assignment through views; every panic message.

use nx::{DType, Element, Slice, Tensor};
use proptest::prelude::*;

// ---------------------------------------------------------------- helpers

/// The elements in row-major order, as f64 (exact for every dtype used here).
fn vals(t: &Tensor) -> Vec<f64> {
    nx::with_dtype!(t.dtype(), T => t.to_vec::<T>().into_iter().map(|v| v.to_f64()).collect())
}

fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Multi-index of row-major position `i`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for a in (0..shape.len()).rev() {
        idx[a] = i % shape[a];
        i /= shape[a];
    }
    idx
}

/// Row-major position of a multi-index.
fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

fn norm(axis: isize, ndim: usize) -> usize {
    if axis < 0 {
        (axis + ndim as isize) as usize
    } else {
        axis as usize
    }
}

/// A contiguous tensor of `shape` whose values depend on the position and
/// `salt`, representable in every dtype (0..13; bools mix true and false).
fn make(dtype: DType, shape: &[usize], salt: usize) -> Tensor {
    let n = numel(shape);
    nx::with_dtype!(dtype, T => {
        let data: Vec<T> = (0..n)
            .map(|i| T::from_f64(((i * 7 + salt * 5 + 3) % 13) as f64))
            .collect();
        Tensor::from_vec(data, shape)
    })
}

/// Tensors of `shape`: contiguous, and (where the shape allows) a transpose,
/// a stepped slice and a flip of other storage, none of them contiguous.
fn variants(dtype: DType, shape: &[usize], salt: usize) -> Vec<Tensor> {
    let mut out = vec![make(dtype, shape, salt)];
    if shape.len() >= 2 {
        let rev: Vec<usize> = shape.iter().rev().copied().collect();
        out.push(make(dtype, &rev, salt + 1).transpose());
    }
    if !shape.is_empty() {
        let mut wide = shape.to_vec();
        wide[0] = 2 * shape[0] + 1;
        let s = make(dtype, &wide, salt + 2).slice(&[Slice::from(1..).step(2)]);
        assert_eq!(s.shape(), shape);
        out.push(s);
        let all: Vec<isize> = (0..shape.len() as isize).collect();
        out.push(make(dtype, shape, salt + 3).flip(&all));
    }
    out
}

const DTYPES: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I32,
    DType::U8,
    DType::F16,
    DType::Bool,
];

fn check(t: &Tensor, shape: &[usize], dtype: DType, want: &[f64]) {
    assert_eq!(t.shape(), shape);
    assert_eq!(t.dtype(), dtype);
    assert_eq!(vals(t), want, "shape {shape:?} dtype {dtype}");
}

// ------------------------------------------------------------- references

fn pad_ref(
    x: &[f64],
    shape: &[usize],
    pads: &[(usize, usize)],
    value: f64,
) -> (Vec<f64>, Vec<usize>) {
    let out: Vec<usize> = (0..shape.len())
        .map(|a| pads[a].0 + shape[a] + pads[a].1)
        .collect();
    let mut r = vec![0.0; numel(&out)];
    for (i, slot) in r.iter_mut().enumerate() {
        let idx = unravel(i, &out);
        let inside = (0..shape.len()).all(|a| idx[a] >= pads[a].0 && idx[a] < pads[a].0 + shape[a]);
        *slot = if inside {
            let src: Vec<usize> = (0..shape.len()).map(|a| idx[a] - pads[a].0).collect();
            x[ravel(&src, shape)]
        } else {
            value
        };
    }
    (r, out)
}

fn concat_ref(parts: &[(Vec<f64>, Vec<usize>)], axis: usize) -> (Vec<f64>, Vec<usize>) {
    let mut out = parts[0].1.clone();
    out[axis] = parts.iter().map(|p| p.1[axis]).sum();
    let mut r = vec![0.0; numel(&out)];
    for (i, slot) in r.iter_mut().enumerate() {
        let mut idx = unravel(i, &out);
        let mut k = 0;
        while idx[axis] >= parts[k].1[axis] {
            idx[axis] -= parts[k].1[axis];
            k += 1;
        }
        *slot = parts[k].0[ravel(&idx, &parts[k].1)];
    }
    (r, out)
}

fn repeat_ref(x: &[f64], shape: &[usize], reps: usize, axis: usize) -> (Vec<f64>, Vec<usize>) {
    let mut out = shape.to_vec();
    out[axis] *= reps;
    let mut r = vec![0.0; numel(&out)];
    for (i, slot) in r.iter_mut().enumerate() {
        let mut idx = unravel(i, &out);
        idx[axis] /= reps;
        *slot = x[ravel(&idx, shape)];
    }
    (r, out)
}

fn tile_ref(x: &[f64], shape: &[usize], reps: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let n = shape.len().max(reps.len());
    let s: Vec<usize> = (0..n)
        .map(|a| {
            if a + shape.len() >= n {
                shape[a + shape.len() - n]
            } else {
                1
            }
        })
        .collect();
    let r: Vec<usize> = (0..n)
        .map(|a| {
            if a + reps.len() >= n {
                reps[a + reps.len() - n]
            } else {
                1
            }
        })
        .collect();
    let out: Vec<usize> = (0..n).map(|a| s[a] * r[a]).collect();
    let mut v = vec![0.0; numel(&out)];
    for (i, slot) in v.iter_mut().enumerate() {
        let idx = unravel(i, &out);
        let src: Vec<usize> = (0..n).map(|a| idx[a] % s[a]).collect();
        *slot = x[ravel(&src, &s)];
    }
    (v, out)
}

fn roll_ref(x: &[f64], shape: &[usize], shift: isize, axis: usize) -> Vec<f64> {
    let n = shape[axis] as isize;
    (0..x.len())
        .map(|i| {
            let mut idx = unravel(i, shape);
            idx[axis] = (idx[axis] as isize - shift).rem_euclid(n) as usize;
            x[ravel(&idx, shape)]
        })
        .collect()
}

/// Elements `start..start + len` of `axis`.
fn narrow_ref(x: &[f64], shape: &[usize], axis: usize, start: usize, len: usize) -> Vec<f64> {
    let mut out = shape.to_vec();
    out[axis] = len;
    (0..numel(&out))
        .map(|i| {
            let mut idx = unravel(i, &out);
            idx[axis] += start;
            x[ravel(&idx, shape)]
        })
        .collect()
}

// ------------------------------------------------------------------ tests

const SHAPES: [&[usize]; 5] = [&[5], &[2, 3], &[3, 1, 4], &[2, 0, 3], &[2, 3, 2, 2]];

#[test]
fn pad_matches_reference() {
    for dtype in DTYPES {
        for shape in SHAPES {
            for x in variants(dtype, shape, 0) {
                let pads: Vec<(usize, usize)> =
                    (0..shape.len()).map(|a| (a % 2, (a + 2) % 3)).collect();
                let value = 9.0;
                let (want, out) = pad_ref(
                    &vals(&x),
                    shape,
                    &pads,
                    vals(&make(dtype, &[], 0).full_like(value))[0],
                );
                check(&x.pad(&pads, value), &out, dtype, &want);
            }
        }
    }
    // Zero padding gives a fresh copy; a 0-d tensor takes no pairs.
    let x = make(DType::F32, &[2, 2], 1);
    let p = x.pad(&[(0, 0), (0, 0)], 0.0);
    assert_eq!(vals(&p), vals(&x));
    assert!(!p.shares_storage_with(&x));
    let s = Tensor::scalar(4i64);
    assert_eq!(s.pad(&[], 1.0).to_vec::<i64>(), vec![4]);
    // The value is converted to the dtype.
    let b = Tensor::from_slice(&[false, true], &[2]);
    assert_eq!(
        b.pad(&[(1, 1)], 2.0).to_vec::<bool>(),
        vec![true, false, true, true]
    );
    let h = Tensor::from_slice(&[1.0f32], &[1]);
    assert_eq!(h.pad(&[(0, 1)], -0.5).to_vec::<f32>(), vec![1.0, -0.5]);
}

#[test]
fn concatenate_matches_reference() {
    for dtype in DTYPES {
        for shape in SHAPES {
            for axis in -(shape.len() as isize)..shape.len() as isize {
                let a = norm(axis, shape.len());
                // Three parts whose sizes differ on the joined axis.
                let parts: Vec<Tensor> = (0..3)
                    .map(|k| {
                        let mut s = shape.to_vec();
                        s[a] = k + 1;
                        variants(dtype, &s, k)[k % 3].clone()
                    })
                    .collect();
                let refs: Vec<(Vec<f64>, Vec<usize>)> = parts
                    .iter()
                    .map(|p| (vals(p), p.shape().to_vec()))
                    .collect();
                let (want, out) = concat_ref(&refs, a);
                check(&Tensor::concatenate(&parts, axis), &out, dtype, &want);
            }
        }
    }
    // One tensor: a fresh copy.
    let x = make(DType::I32, &[2, 3], 0).transpose();
    let c = Tensor::concatenate(std::slice::from_ref(&x), 1);
    assert_eq!(vals(&c), vals(&x));
    assert!(!c.shares_storage_with(&x));
    // Empty pieces are fine.
    let e = Tensor::zeros(&[0, 3], DType::F32);
    let y = make(DType::F32, &[2, 3], 0);
    assert_eq!(
        vals(&Tensor::concatenate(&[e.clone(), y.clone(), e], 0)),
        vals(&y)
    );
}

#[test]
fn stack_matches_reference() {
    for dtype in DTYPES {
        for shape in SHAPES {
            for axis in -(shape.len() as isize + 1)..=shape.len() as isize {
                let a = norm(axis, shape.len() + 1);
                let parts: Vec<Tensor> = (0..3)
                    .map(|k| variants(dtype, shape, k)[k % 2].clone())
                    .collect();
                let mut out = shape.to_vec();
                out.insert(a, 3);
                let data: Vec<Vec<f64>> = parts.iter().map(vals).collect();
                let want: Vec<f64> = (0..numel(&out))
                    .map(|i| {
                        let mut idx = unravel(i, &out);
                        let k = idx.remove(a);
                        data[k][ravel(&idx, shape)]
                    })
                    .collect();
                check(&Tensor::stack(&parts, axis), &out, dtype, &want);
            }
        }
    }
    // Stacking 0-d tensors makes a vector.
    let s = Tensor::stack(&[Tensor::scalar(1i32), Tensor::scalar(2i32)], 0);
    assert_eq!(s.shape(), &[2]);
    assert_eq!(s.to_vec::<i32>(), vec![1, 2]);
}

#[test]
fn split_and_chunk_match_reference() {
    for dtype in DTYPES {
        for x in variants(dtype, &[7, 4], 0) {
            let data = vals(&x);
            for axis in [0isize, -2] {
                let pieces = x.split(&[2, 0, 5], axis);
                assert_eq!(pieces.len(), 3);
                let mut at = 0;
                for (p, k) in pieces.iter().zip([2, 0, 5]) {
                    let mut s = vec![7, 4];
                    s[0] = k;
                    check(p, &s, dtype, &narrow_ref(&data, &[7, 4], 0, at, k));
                    at += k;
                }
            }
            let pieces = x.split(&[1, 3], -1);
            check(
                &pieces[0],
                &[7, 1],
                dtype,
                &narrow_ref(&data, &[7, 4], 1, 0, 1),
            );
            check(
                &pieces[1],
                &[7, 3],
                dtype,
                &narrow_ref(&data, &[7, 4], 1, 1, 3),
            );
        }
    }
    // torch.chunk: ceil(len / n) per piece, the last smaller, maybe fewer pieces.
    let x = make(DType::I64, &[3, 6], 0);
    let data = vals(&x);
    let cases: [(usize, &[usize]); 7] = [
        (1, &[6]),
        (2, &[3, 3]),
        (3, &[2, 2, 2]),
        (4, &[2, 2, 2]),
        (5, &[2, 2, 2]),
        (6, &[1, 1, 1, 1, 1, 1]),
        (9, &[1, 1, 1, 1, 1, 1]),
    ];
    for (n, sizes) in cases {
        let pieces = x.chunk(n, -1);
        let got: Vec<usize> = pieces.iter().map(|p| p.shape()[1]).collect();
        assert_eq!(got, sizes, "chunk({n})");
        let mut at = 0;
        for p in &pieces {
            let k = p.shape()[1];
            assert_eq!(vals(p), narrow_ref(&data, &[3, 6], 1, at, k));
            at += k;
        }
    }
    let y = make(DType::F32, &[7], 0);
    let sizes: Vec<usize> = y.chunk(3, 0).iter().map(|p| p.shape()[0]).collect();
    assert_eq!(sizes, vec![3, 3, 1]);
    // An empty axis gives one empty piece.
    let e = Tensor::zeros(&[0, 2], DType::F32);
    let c = e.chunk(3, 0);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].shape(), &[0, 2]);
    // The pieces are views: writing one writes the source.
    let z = Tensor::zeros(&[4], DType::F32);
    z.split(&[1, 3], 0)[1].assign(&Tensor::scalar(1.0f32));
    assert_eq!(z.to_vec::<f32>(), vec![0.0, 1.0, 1.0, 1.0]);
}

#[test]
fn repeat_matches_reference() {
    for dtype in DTYPES {
        for shape in SHAPES {
            for x in variants(dtype, shape, 0) {
                for axis in -(shape.len() as isize)..shape.len() as isize {
                    for reps in [0, 1, 3] {
                        let a = norm(axis, shape.len());
                        let (want, out) = repeat_ref(&vals(&x), shape, reps, a);
                        check(&x.repeat(reps, axis), &out, dtype, &want);
                    }
                }
            }
        }
    }
    let x = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    assert_eq!(x.repeat(2, 1).to_vec::<i32>(), vec![1, 1, 2, 2, 3, 3, 4, 4]);
    assert_eq!(x.repeat(2, 0).to_vec::<i32>(), vec![1, 2, 1, 2, 3, 4, 3, 4]);
}

#[test]
fn tile_matches_reference() {
    let reps_list: [&[usize]; 6] = [&[], &[2], &[1, 3], &[2, 1, 2], &[0, 2], &[2, 1, 1, 2, 1]];
    for dtype in DTYPES {
        for shape in SHAPES.iter().chain([&[][..]].iter()) {
            for x in variants(dtype, shape, 0) {
                for reps in reps_list {
                    let (want, out) = tile_ref(&vals(&x), shape, reps);
                    check(&x.tile(reps), &out, dtype, &want);
                }
            }
        }
    }
    let x = Tensor::from_slice(&[1i32, 2], &[2]);
    assert_eq!(x.tile(&[2]).to_vec::<i32>(), vec![1, 2, 1, 2]);
    let t = x.tile(&[2, 2]);
    assert_eq!(t.shape(), &[2, 4]);
    assert_eq!(t.to_vec::<i32>(), vec![1, 2, 1, 2, 1, 2, 1, 2]);
}

#[test]
fn roll_matches_reference() {
    for dtype in DTYPES {
        for shape in SHAPES {
            for x in variants(dtype, shape, 0) {
                for axis in -(shape.len() as isize)..shape.len() as isize {
                    for shift in [-7isize, -1, 0, 1, 2, 5, 13] {
                        let a = norm(axis, shape.len());
                        let want = if shape[a] == 0 {
                            vec![]
                        } else {
                            roll_ref(&vals(&x), shape, shift, a)
                        };
                        let r = x.roll(shift, axis);
                        check(&r, shape, dtype, &want);
                        assert!(!r.shares_storage_with(&x));
                    }
                }
            }
        }
    }
    let x = Tensor::from_slice(&[0i32, 1, 2, 3, 4], &[5]);
    assert_eq!(x.roll(2, 0).to_vec::<i32>(), vec![3, 4, 0, 1, 2]);
    assert_eq!(x.roll(-1, -1).to_vec::<i32>(), vec![1, 2, 3, 4, 0]);
}

// ------------------------------------------------------------------ views

#[test]
fn assign_through_views_writes_the_base() {
    // Slice with steps.
    let x = Tensor::zeros(&[3, 4], DType::F32);
    x.slice(&[Slice::from(..).step(2), Slice::from(1..).step(2)])
        .assign(&Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]));
    assert_eq!(
        x.to_vec::<f32>(),
        vec![0., 1., 0., 2., 0., 0., 0., 0., 0., 3., 0., 4.]
    );
    // Reversed slice.
    let x = Tensor::zeros(&[4], DType::I32);
    x.slice(&[Slice::from(..).step(-1)])
        .assign(&Tensor::from_slice(&[1i32, 2, 3, 4], &[4]));
    assert_eq!(x.to_vec::<i32>(), vec![4, 3, 2, 1]);
    // Transpose.
    let x = Tensor::zeros(&[2, 3], DType::I64);
    x.transpose()
        .assign(&Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6], &[3, 2]));
    assert_eq!(x.to_vec::<i64>(), vec![1, 3, 5, 2, 4, 6]);
    // Narrow, with a broadcast source.
    let x = Tensor::zeros(&[2, 4], DType::F64);
    x.narrow(-1, 1, 2)
        .assign(&Tensor::from_slice(&[7.0f64, 8.0], &[2, 1]));
    assert_eq!(x.to_vec::<f64>(), vec![0., 7., 7., 0., 0., 8., 8., 0.]);
    // A view of a view (get of a transpose).
    let x = Tensor::zeros(&[2, 3], DType::U8);
    x.transpose().get(1).assign(&Tensor::scalar(5u8));
    assert_eq!(x.to_vec::<u8>(), vec![0, 5, 0, 0, 5, 0]);
    // Reshape of a contiguous tensor is a view too.
    let x = Tensor::zeros(&[2, 2], DType::F32);
    x.reshape(&[4])
        .narrow(0, 3, 1)
        .assign(&Tensor::scalar(1.0f32));
    assert_eq!(x.to_vec::<f32>(), vec![0., 0., 0., 1.]);
}

#[test]
fn assign_is_overlap_safe() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[5]);
    x.assign(&x.flip(&[0]));
    assert_eq!(x.to_vec::<f32>(), vec![5.0, 4.0, 3.0, 2.0, 1.0]);
    // Shift left: x[0..4] = x[1..5].
    let x = Tensor::from_slice(&[0i32, 1, 2, 3, 4], &[5]);
    x.narrow(0, 0, 4).assign(&x.narrow(0, 1, 4));
    assert_eq!(x.to_vec::<i32>(), vec![1, 2, 3, 4, 4]);
    // Shift right: x[1..5] = x[0..4] (a forward copy would smear x[0]).
    let x = Tensor::from_slice(&[0i32, 1, 2, 3, 4], &[5]);
    x.narrow(0, 1, 4).assign(&x.narrow(0, 0, 4));
    assert_eq!(x.to_vec::<i32>(), vec![0, 0, 1, 2, 3]);
    // In place transpose of a square matrix.
    let x = Tensor::from_slice(&[1i64, 2, 3, 4, 5, 6, 7, 8, 9], &[3, 3]);
    x.assign(&x.transpose());
    assert_eq!(x.to_vec::<i64>(), vec![1, 4, 7, 2, 5, 8, 3, 6, 9]);
    // Rows swapped through a 2-D flip of the same storage.
    let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0, 4.0], &[2, 2]);
    x.assign(&x.flip(&[0, 1]));
    assert_eq!(x.to_vec::<f64>(), vec![4.0, 3.0, 2.0, 1.0]);
}

// ----------------------------------------------------------------- panics

#[test]
#[should_panic(
    expected = "pad: expected 2 (before, after) pairs, one per axis of shape [2, 3], got 1"
)]
fn pad_needs_one_pair_per_axis() {
    make(DType::F32, &[2, 3], 0).pad(&[(1, 1)], 0.0);
}

#[test]
#[should_panic(expected = "concatenate: needs at least one tensor")]
fn concatenate_empty() {
    Tensor::concatenate(&[], 0);
}

#[test]
#[should_panic(
    expected = "concatenate: dtype mismatch: tensor 0 is f32 (shape [2]) but tensor 1 is i32 (shape [3])"
)]
fn concatenate_dtype_mismatch() {
    Tensor::concatenate(&[make(DType::F32, &[2], 0), make(DType::I32, &[3], 0)], 0);
}

#[test]
#[should_panic(
    expected = "concatenate: shapes [2, 3] (tensor 0) and [2, 4] (tensor 1) must agree except on axis 0"
)]
fn concatenate_shape_mismatch() {
    Tensor::concatenate(
        &[make(DType::F32, &[2, 3], 0), make(DType::F32, &[2, 4], 0)],
        0,
    );
}

#[test]
#[should_panic(
    expected = "concatenate: shapes [2, 3] (tensor 0) and [6] (tensor 2) must agree except on axis -1"
)]
fn concatenate_rank_mismatch() {
    let a = make(DType::F32, &[2, 3], 0);
    Tensor::concatenate(&[a.clone(), a, make(DType::F32, &[6], 0)], -1);
}

#[test]
#[should_panic(expected = "concatenate: axis 2 is out of range for a tensor of rank 2")]
fn concatenate_axis_out_of_range() {
    let a = make(DType::F32, &[2, 3], 0);
    Tensor::concatenate(&[a.clone(), a], 2);
}

#[test]
#[should_panic(expected = "concatenate: axis 0 is out of range for a tensor of rank 0")]
fn concatenate_scalars() {
    Tensor::concatenate(&[Tensor::scalar(1.0f32), Tensor::scalar(2.0f32)], 0);
}

#[test]
#[should_panic(expected = "stack: needs at least one tensor")]
fn stack_empty() {
    Tensor::stack(&[], 0);
}

#[test]
#[should_panic(expected = "stack: shapes [2, 3] (tensor 0) and [3, 2] (tensor 1) must be equal")]
fn stack_shape_mismatch() {
    Tensor::stack(
        &[make(DType::F32, &[2, 3], 0), make(DType::F32, &[3, 2], 0)],
        0,
    );
}

#[test]
#[should_panic(expected = "stack: dtype mismatch: tensor 0 is f32 but tensor 1 is f64")]
fn stack_dtype_mismatch() {
    Tensor::stack(&[make(DType::F32, &[2], 0), make(DType::F64, &[2], 0)], 0);
}

#[test]
#[should_panic(expected = "stack: axis 3 is out of range for a tensor of rank 3")]
fn stack_axis_out_of_range() {
    Tensor::stack(&[make(DType::F32, &[2, 3], 0)], 3);
}

#[test]
#[should_panic(expected = "split: sizes [2, 2] sum to 4 but axis 1 of shape [3, 5] has length 5")]
fn split_sizes_must_sum_to_the_length() {
    make(DType::F32, &[3, 5], 0).split(&[2, 2], 1);
}

#[test]
#[should_panic(expected = "split: axis -3 is out of range for a tensor of rank 2")]
fn split_axis_out_of_range() {
    make(DType::F32, &[3, 5], 0).split(&[3], -3);
}

#[test]
#[should_panic(expected = "chunk: the number of chunks must be positive, got 0")]
fn chunk_zero() {
    make(DType::F32, &[3], 0).chunk(0, 0);
}

#[test]
#[should_panic(expected = "chunk: axis 1 is out of range for a tensor of rank 1")]
fn chunk_axis_out_of_range() {
    make(DType::F32, &[3], 0).chunk(2, 1);
}

#[test]
#[should_panic(expected = "repeat: axis -2 is out of range for a tensor of rank 1")]
fn repeat_axis_out_of_range() {
    make(DType::F32, &[3], 0).repeat(2, -2);
}

#[test]
#[should_panic(expected = "repeat: axis 0 is out of range for a tensor of rank 0")]
fn repeat_scalar() {
    Tensor::scalar(1i32).repeat(2, 0);
}

#[test]
#[should_panic(expected = "roll: axis 2 is out of range for a tensor of rank 2")]
fn roll_axis_out_of_range() {
    make(DType::F32, &[3, 2], 0).roll(1, 2);
}

// --------------------------------------------------------------- proptest

/// A random shape (rank 1..=3, sizes 0..=4), a view kind and a seed.
fn shape_strategy() -> impl Strategy<Value = (Vec<usize>, usize, usize)> {
    (
        prop::collection::vec(0usize..=4, 1..=3),
        0usize..4,
        0usize..50,
    )
}

fn pick(shape: &[usize], kind: usize, salt: usize) -> Tensor {
    let v = variants(DType::F32, shape, salt);
    v[kind % v.len()].clone()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn prop_pad((shape, kind, salt) in shape_strategy(), p in prop::collection::vec((0usize..3, 0usize..3), 3)) {
        let x = pick(&shape, kind, salt);
        let pads = &p[..shape.len()];
        let (want, out) = pad_ref(&vals(&x), &shape, pads, -1.0);
        let got = x.pad(pads, -1.0);
        prop_assert_eq!(got.shape(), &out[..]);
        prop_assert_eq!(vals(&got), want);
    }

    #[test]
    fn prop_concatenate((shape, kind, salt) in shape_strategy(), axis in 0usize..3, extra in 0usize..4) {
        let a = axis % shape.len();
        let x = pick(&shape, kind, salt);
        let mut s2 = shape.clone();
        s2[a] = extra;
        let y = pick(&s2, kind + 1, salt + 1);
        let (want, out) = concat_ref(&[(vals(&x), shape.clone()), (vals(&y), s2)], a);
        let got = Tensor::concatenate(&[x, y], a as isize - shape.len() as isize);
        prop_assert_eq!(got.shape(), &out[..]);
        prop_assert_eq!(vals(&got), want);
    }

    #[test]
    fn prop_repeat_tile_roll((shape, kind, salt) in shape_strategy(), axis in 0usize..3, reps in 0usize..4,
                             tiles in prop::collection::vec(0usize..3, 0..=4), shift in -9isize..9) {
        let a = axis % shape.len();
        let x = pick(&shape, kind, salt);
        let data = vals(&x);
        let (want, out) = repeat_ref(&data, &shape, reps, a);
        let got = x.repeat(reps, a as isize);
        prop_assert_eq!(got.shape(), &out[..]);
        prop_assert_eq!(vals(&got), want);
        let (want, out) = tile_ref(&data, &shape, &tiles);
        let got = x.tile(&tiles);
        prop_assert_eq!(got.shape(), &out[..]);
        prop_assert_eq!(vals(&got), want);
        if shape[a] > 0 {
            prop_assert_eq!(vals(&x.roll(shift, a as isize)), roll_ref(&data, &shape, shift, a));
        }
    }

    #[test]
    fn prop_chunk_pieces_rejoin((shape, kind, salt) in shape_strategy(), axis in 0usize..3, n in 1usize..6) {
        let a = axis % shape.len();
        let x = pick(&shape, kind, salt);
        let pieces = x.chunk(n, a as isize);
        let len = shape[a];
        let size = if len == 0 { 0 } else { len.div_ceil(n) };
        prop_assert!(pieces.len() <= n.max(1));
        for (i, p) in pieces.iter().enumerate() {
            if i + 1 < pieces.len() {
                prop_assert_eq!(p.shape()[a], size);
            } else {
                prop_assert!(p.shape()[a] <= size.max(len));
            }
        }
        prop_assert_eq!(vals(&Tensor::concatenate(&pieces, a as isize)), vals(&x));
    }
}
