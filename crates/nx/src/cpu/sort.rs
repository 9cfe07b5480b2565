//! Sorting: `Prim::Argsort` (a stable permutation along an axis) and
//! `Prim::TopK` (the first `k` of the descending one along the last axis).
//!
//! Every element maps to an unsigned key whose order is the sort order
//! (`key`): floats by their bits with the sign folded (NaN above +inf, -0.0
//! as 0.0), integers offset so that the minimum is 0. Descending order
//! sorts the complemented keys. A row is then sorted with its positions:
//! short rows by comparison of `(key, position)` pairs (unique, so an
//! unstable sort is stable), long rows by an MSD radix sort over the key's
//! bytes (stable counting scatters, each bucket then sorted by the next
//! byte, cache-resident after the first levels; bytes equal in every key
//! are skipped). Keys of up to 32
//! bits travel packed with the position in one `u64`. `TopK` with a small
//! `k` scans the row once, keeping the best `k` in order (an element enters
//! only when strictly better than the current last: ties keep the lower
//! index). Rows are split across the pool.

use super::movement::copy;
use super::pool;
use crate::dtype::{DType, Element};
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use std::sync::Arc;

/// Rows at or below this length are sorted by comparison.
const SMALL: usize = 256;

/// The order-preserving key of `v` (see the module's doc), and whether the
/// dtype's keys fit in 32 bits.
#[inline(always)]
fn key<T: Element>(v: T) -> u64 {
    match T::DTYPE {
        DType::F32 => {
            let f = v.to_f64() as f32;
            if f.is_nan() {
                return u32::MAX as u64;
            }
            let b = (f + 0.0).to_bits(); // -0.0 + 0.0 = +0.0
            (if b >> 31 == 1 { !b } else { b | 1 << 31 }) as u64
        }
        DType::F64 | DType::F16 | DType::BF16 => {
            let f = v.to_f64();
            if f.is_nan() {
                return u64::MAX;
            }
            let b = (f + 0.0).to_bits();
            if b >> 63 == 1 {
                !b
            } else {
                b | 1 << 63
            }
        }
        DType::Bool | DType::U8 | DType::U16 | DType::U32 | DType::U64 => v.to_i128() as u64,
        d => {
            let bits = 8 * d.size_in_bytes() as u32;
            (v.to_i128() + (1i128 << (bits - 1))) as u64
        }
    }
}

fn narrow_keys(d: DType) -> bool {
    !matches!(
        d,
        DType::F64 | DType::F16 | DType::BF16 | DType::U64 | DType::I64
    )
}

/// Sorts `a` stably by the byte digits `byte, byte - 1, .., low` of the
/// key (`digit(item, b)`), most significant first: a counting scatter into
/// `tmp` (same length) by the top digit, copied back, then each bucket by
/// the next digit, so that below the first levels every bucket is
/// cache-resident. Slices of at most 48 items, and the buckets after the
/// last digit, are in order by `Ord` (items are unique: the position is
/// part of them).
fn msd_radix<I: Copy + Ord>(
    a: &mut [I],
    tmp: &mut [I],
    byte: u32,
    low: u32,
    digit: &impl Fn(&I, u32) -> usize,
) {
    let n = a.len();
    if n <= 48 {
        a.sort_unstable();
        return;
    }
    let mut counts = [0usize; 256];
    for it in a.iter() {
        counts[digit(it, byte)] += 1;
    }
    if counts.iter().any(|&c| c == n) {
        // Every key has this digit.
        if byte > low {
            msd_radix(a, tmp, byte - 1, low, digit);
        }
        return;
    }
    let mut at = [0usize; 256];
    let mut sum = 0;
    for d in 0..256 {
        at[d] = sum;
        sum += counts[d];
    }
    for it in a.iter() {
        let d = digit(it, byte);
        tmp[at[d]] = *it;
        at[d] += 1;
    }
    a.copy_from_slice(&tmp[..n]);
    if byte == low {
        return; // stable: equal keys keep their positions' order
    }
    let mut start = 0;
    for &c in &counts {
        if c > 1 {
            msd_radix(
                &mut a[start..start + c],
                &mut tmp[start..start + c],
                byte - 1,
                low,
                digit,
            );
        }
        start += c;
    }
}

/// Scratch buffers reused across the rows of one task.
#[derive(Default)]
struct Scratch {
    narrow: Vec<u64>,
    narrow_tmp: Vec<u64>,
    wide: Vec<(u64, u32)>,
    wide_tmp: Vec<(u64, u32)>,
}

/// Writes the stable sorting permutation of `row` into `out`.
fn argsort_row<T: Element>(row: &[T], descending: bool, s: &mut Scratch, out: &mut [i32]) {
    let n = row.len();
    let flip = if descending { u64::MAX } else { 0 };
    if narrow_keys(T::DTYPE) {
        let flip = flip & 0xffff_ffff;
        s.narrow.clear();
        s.narrow.extend(
            row.iter()
                .enumerate()
                .map(|(i, &v)| ((key(v) ^ flip) << 32) | i as u64),
        );
        if n <= SMALL {
            s.narrow.sort_unstable();
        } else {
            s.narrow_tmp.resize(n, 0);
            msd_radix(&mut s.narrow, &mut s.narrow_tmp, 7, 4, &|&x, b| {
                (x >> (8 * b)) as usize & 0xff
            });
        }
        for (o, &x) in out.iter_mut().zip(&s.narrow) {
            *o = x as u32 as i32;
        }
    } else {
        s.wide.clear();
        s.wide.extend(
            row.iter()
                .enumerate()
                .map(|(i, &v)| (key(v) ^ flip, i as u32)),
        );
        if n <= SMALL {
            s.wide.sort_unstable();
        } else {
            s.wide_tmp.resize(n, (0, 0));
            msd_radix(&mut s.wide, &mut s.wide_tmp, 7, 0, &|x, b| {
                (x.0 >> (8 * b)) as usize & 0xff
            });
        }
        for (o, &(_, i)) in out.iter_mut().zip(&s.wide) {
            *o = i as i32;
        }
    }
}

/// The input with `axis` moved last, contiguous (a copy unless already so).
fn axis_last(x: &Value, axis: usize) -> (Tensor, Vec<usize>) {
    let nd = x.layout.shape.len();
    let mut perm: Vec<usize> = (0..nd).filter(|&d| d != axis).collect();
    perm.push(axis);
    let layout = x.layout.permute(&perm);
    let t = if layout.is_contiguous() {
        Tensor::from_value(x.dtype, layout, x.storage.clone())
    } else {
        let v = Tensor::from_value(x.dtype, layout, x.storage.clone());
        copy(v.value())
    };
    (t, perm)
}

/// Runs `row_fn(in_row, out_row, scratch)` over the rows of `x` (the last
/// axis, rows of `n` in, `m` out), split across the pool; out is I32 with
/// `out_shape`.
fn rows_i32<T: Element>(
    x: &Value,
    n: usize,
    m: usize,
    out_shape: &[usize],
    row_fn: &(dyn Fn(&[T], &mut [i32], &mut Scratch) + Sync),
) -> Tensor {
    let total: usize = out_shape.iter().product();
    let mut out = Storage::new(DType::I32, total);
    if total > 0 {
        let data = x.storage.read::<T>();
        let data = &data[x.layout.offset..];
        let o = &mut out.as_mut_slice::<i32>()[..total];
        let rows = total / m;
        // About 64K elements of input per task.
        let per = (65536 / n.max(1)).clamp(1, rows.div_ceil(pool::threads()).max(1));
        let body = |c: usize, o: &mut [i32]| {
            let mut s = Scratch::default();
            for (j, orow) in o.chunks_mut(m).enumerate() {
                let r = c * per + j;
                row_fn(&data[r * n..(r + 1) * n], orow, &mut s);
            }
        };
        if rows <= 1 || rows * n < 65536 {
            body(0, o);
        } else {
            pool::chunks_mut(o, per * m, &body);
        }
    }
    Tensor::from_storage(DType::I32, out_shape, out)
}

fn argsort_typed<T: Element>(x: &Value, axis: usize, descending: bool) -> Tensor {
    let shape = &x.layout.shape;
    let (xt, perm) = axis_last(x, axis);
    let xv = xt.value();
    let n = shape[axis];
    let moved: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let out = rows_i32::<T>(xv, n, n, &moved, &|row, o, s| {
        argsort_row(row, descending, s, o)
    });
    if axis + 1 == shape.len() {
        return out;
    }
    // Back to the input's axis order, contiguous.
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    let ov = out.value();
    let view = Tensor::from_value(DType::I32, ov.layout.permute(&inv), Arc::clone(&ov.storage));
    copy(view.value())
}

/// `Prim::Argsort`: the stable permutation sorting along `axis`.
pub(crate) fn argsort(x: &Value, axis: usize, descending: bool) -> Tensor {
    crate::with_dtype!(x.dtype, T => argsort_typed::<T>(x, axis, descending))
}

/// The `k` largest of `row` (NaN largest, ties to the lower index) into
/// `out`, largest first, by one scan.
fn top_k_scan<T: Element>(row: &[T], out: &mut [i32], s: &mut Scratch) {
    let k = out.len();
    // (key, index), best first: higher key, then lower index.
    let best = &mut s.wide;
    best.clear();
    for (i, &v) in row.iter().enumerate() {
        let kv = key(v);
        if best.len() == k {
            if kv <= best[k - 1].0 {
                continue;
            }
            best.pop();
        }
        // Insert after every entry with a key >= kv (those came earlier).
        let at = best.partition_point(|e| e.0 >= kv);
        best.insert(at, (kv, i as u32));
    }
    for (o, e) in out.iter_mut().zip(best.iter()) {
        *o = e.1 as i32;
    }
}

fn top_k_typed<T: Element>(x: &Value, k: usize) -> Tensor {
    let shape = &x.layout.shape;
    let nd = shape.len();
    let (xt, _) = axis_last(x, nd - 1);
    let xv = xt.value();
    let n = shape[nd - 1];
    let mut out_shape = shape.clone();
    out_shape[nd - 1] = k;
    if k == 0 {
        return Tensor::from_storage(DType::I32, &out_shape, Storage::new(DType::I32, 0));
    }
    rows_i32::<T>(xv, n, k, &out_shape, &|row, o, s| {
        if k <= 64 && k * 16 <= n {
            top_k_scan(row, o, s);
        } else {
            let mut full = vec![0i32; n];
            argsort_row(row, true, s, &mut full);
            o.copy_from_slice(&full[..k]);
        }
    })
}

/// `Prim::TopK`: indices of the `k` largest along the last axis.
pub(crate) fn top_k(x: &Value, k: usize) -> Tensor {
    crate::with_dtype!(x.dtype, T => top_k_typed::<T>(x, k))
}
