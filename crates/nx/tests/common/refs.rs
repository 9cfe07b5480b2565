//! Naive reference implementations over `RefArray`: plain loops over
//! multi-indices, f64 arithmetic for floats and exact i128 arithmetic for
//! integers (wrapped into the dtype at the end). Written from the documented
//! semantics, independently of nx's kernels.

use super::{all_indices, numel, ravel, unravel, Data, RefArray};
use nx::DType;

/// Normalizes a possibly negative axis of a rank-`n` array.
pub fn axis(a: isize, n: usize) -> usize {
    let r = if a < 0 { a + n as isize } else { a };
    assert!(
        r >= 0 && (r as usize) < n,
        "reference: axis {a} out of range for rank {n}"
    );
    r as usize
}

// ---------------------------------------------------------------------------
// Broadcasting and elementwise maps.

pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Vec<usize> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db {
            da
        } else if da == 1 {
            db
        } else if db == 1 {
            da
        } else {
            panic!("reference: shapes {a:?} and {b:?} do not broadcast")
        };
    }
    out
}

/// `a` broadcast to `shape` (numpy rules), materialized.
pub fn broadcast_to(a: &RefArray, shape: &[usize]) -> RefArray {
    let n = shape.len();
    let r = a.ndim();
    assert!(r <= n, "reference broadcast_to: rank {r} into {shape:?}");
    let ashape = a.shape.clone();
    a.select(shape, |idx| {
        let src: Vec<usize> = (0..r)
            .map(|i| if ashape[i] == 1 { 0 } else { idx[n - r + i] })
            .collect();
        ravel(&src, &ashape)
    })
}

/// Float unary map, same dtype.
pub fn map_f(a: &RefArray, f: impl Fn(f64) -> f64) -> RefArray {
    RefArray::floats(a.dtype, &a.shape, a.f().iter().map(|&x| f(x)).collect())
}

/// Integer unary map, same dtype (the result wraps).
pub fn map_i(a: &RefArray, f: impl Fn(i128) -> i128) -> RefArray {
    RefArray::ints(a.dtype, &a.shape, a.i().iter().map(|&x| f(x)).collect())
}

/// Unary map dispatching on the kind.
pub fn map_num(a: &RefArray, ff: impl Fn(f64) -> f64, fi: impl Fn(i128) -> i128) -> RefArray {
    if a.is_float() {
        map_f(a, ff)
    } else {
        map_i(a, fi)
    }
}

/// Unary predicate into a bool array.
pub fn map_pred(a: &RefArray, ff: impl Fn(f64) -> bool, fi: impl Fn(i128) -> bool) -> RefArray {
    let v = match &a.data {
        Data::F(v) => v.iter().map(|&x| ff(x)).collect(),
        Data::I(v) => v.iter().map(|&x| fi(x)).collect(),
    };
    RefArray::bools(&a.shape, v)
}

fn pair(a: &RefArray, b: &RefArray) -> (RefArray, RefArray, Vec<usize>) {
    let s = broadcast_shapes(&a.shape, &b.shape);
    (broadcast_to(a, &s), broadcast_to(b, &s), s)
}

/// Float binary map with broadcasting; result has `a`'s dtype.
pub fn zip_f(a: &RefArray, b: &RefArray, f: impl Fn(f64, f64) -> f64) -> RefArray {
    let (a, b, s) = pair(a, b);
    let v = a.f().iter().zip(b.f()).map(|(&x, &y)| f(x, y)).collect();
    RefArray::floats(a.dtype, &s, v)
}

/// Integer binary map with broadcasting; result has `a`'s dtype (wraps).
pub fn zip_i(a: &RefArray, b: &RefArray, f: impl Fn(i128, i128) -> i128) -> RefArray {
    let (a, b, s) = pair(a, b);
    let v = a.i().iter().zip(b.i()).map(|(&x, &y)| f(x, y)).collect();
    RefArray::ints(a.dtype, &s, v)
}

pub fn zip_num(
    a: &RefArray,
    b: &RefArray,
    ff: impl Fn(f64, f64) -> f64,
    fi: impl Fn(i128, i128) -> i128,
) -> RefArray {
    if a.is_float() {
        zip_f(a, b, ff)
    } else {
        zip_i(a, b, fi)
    }
}

/// Binary predicate with broadcasting into a bool array.
pub fn zip_pred(
    a: &RefArray,
    b: &RefArray,
    ff: impl Fn(f64, f64) -> bool,
    fi: impl Fn(i128, i128) -> bool,
) -> RefArray {
    let (a, b, s) = pair(a, b);
    let v = match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => x.iter().zip(y).map(|(&p, &q)| ff(p, q)).collect(),
        (Data::I(x), Data::I(y)) => x.iter().zip(y).map(|(&p, &q)| fi(p, q)).collect(),
        _ => panic!("zip_pred: mixed kinds"),
    };
    RefArray::bools(&s, v)
}

/// `cond ? a : b` with three-way broadcasting.
pub fn where_(c: &RefArray, a: &RefArray, b: &RefArray) -> RefArray {
    let s = broadcast_shapes(&c.shape, &broadcast_shapes(&a.shape, &b.shape));
    let (c, a, b) = (
        broadcast_to(c, &s),
        broadcast_to(a, &s),
        broadcast_to(b, &s),
    );
    let cv = c.i();
    match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => RefArray::floats(
            a.dtype,
            &s,
            (0..x.len())
                .map(|k| if cv[k] != 0 { x[k] } else { y[k] })
                .collect(),
        ),
        (Data::I(x), Data::I(y)) => RefArray::ints(
            a.dtype,
            &s,
            (0..x.len())
                .map(|k| if cv[k] != 0 { x[k] } else { y[k] })
                .collect(),
        ),
        _ => panic!("where_: mixed kinds"),
    }
}

// ---------------------------------------------------------------------------
// Scalar semantics of the elementwise operations.

/// Round half to even, keeping the sign of zero.
pub fn round_half_even(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let f = x.floor();
    let d = x - f;
    let r = if d < 0.5 {
        f
    } else if d > 0.5 {
        f + 1.0
    } else if f % 2.0 == 0.0 {
        f
    } else {
        f + 1.0
    };
    if r == 0.0 {
        0.0f64.copysign(x)
    } else {
        r
    }
}

pub fn sign_f(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

/// NaN-propagating maximum; `max(-0, +0) = +0`.
pub fn fmax(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        if x.is_sign_positive() {
            x
        } else {
            y
        }
    } else if x > y {
        x
    } else {
        y
    }
}

/// NaN-propagating minimum; `min(-0, +0) = -0`.
pub fn fmin(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else if x == y {
        if x.is_sign_negative() {
            x
        } else {
            y
        }
    } else if x < y {
        x
    } else {
        y
    }
}

/// Integer division truncating toward zero; x / 0 = 0.
pub fn idiv(x: i128, y: i128) -> i128 {
    if y == 0 {
        0
    } else {
        x / y
    }
}

/// Remainder with the dividend's sign; x % 0 = 0.
pub fn irem(x: i128, y: i128) -> i128 {
    if y == 0 {
        0
    } else {
        x % y
    }
}

/// Integer power modulo 2^bits (then wrapped by the caller); a negative
/// exponent gives 0 except for bases 1 and -1.
pub fn ipow(base: i128, exp: i128, dtype: DType) -> i128 {
    if exp < 0 {
        return match base {
            1 => 1,
            -1 => {
                if exp % 2 == 0 {
                    1
                } else {
                    -1
                }
            }
            _ => 0,
        };
    }
    // Square and multiply, reducing modulo 2^bits at every step.
    let w = |v: i128| super::wrap_int(v, dtype);
    let mut result = 1i128;
    let mut b = w(base);
    let mut e = exp as u128;
    while e > 0 {
        if e & 1 == 1 {
            result = w(result.wrapping_mul(b));
        }
        b = w(b.wrapping_mul(b));
        e >>= 1;
    }
    result
}

/// Left shift; shifting by the width or more (or a negative amount) gives 0.
pub fn ishl(x: i128, s: i128, dtype: DType) -> i128 {
    let bits = super::int_bits(dtype) as i128;
    if s < 0 || s >= bits {
        0
    } else {
        // Exact in i128 for 64-bit values shifted by up to 63, then wrapped.
        let unsigned = x.rem_euclid(1i128 << bits);
        super::wrap_int(((unsigned as u128) << s as u32) as i128, dtype)
    }
}

/// Right shift: arithmetic for signed types; past the width gives 0 or -1.
pub fn ishr(x: i128, s: i128, dtype: DType) -> i128 {
    let bits = super::int_bits(dtype) as i128;
    if s < 0 || s >= bits {
        if x < 0 {
            -1
        } else {
            0
        }
    } else {
        // i128's >> is arithmetic, and x is already in range.
        x >> s as u32
    }
}

/// Bitwise not within the dtype (`!x` in two's complement is `-x - 1`).
pub fn inot(x: i128) -> i128 {
    -x - 1
}

/// GELU, tanh approximation: `0.5 x (1 + tanh z)`; for `z < 0` through the
/// identity `1 + tanh z = 2 e^(2z) / (1 + e^(2z))`, which does not cancel.
pub fn gelu(x: f64) -> f64 {
    let c = (2.0 / std::f64::consts::PI).sqrt();
    let z = c * (x + 0.044715 * x * x * x);
    if z >= 0.0 {
        0.5 * x * (1.0 + z.tanh())
    } else {
        let e = (2.0 * z).exp();
        x * e / (1.0 + e)
    }
}

pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

pub fn softplus(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x > 0.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// The error function (Abramowitz-Stegun would be too coarse; this uses the
/// Maclaurin series near 0 and the continued fraction of erfc elsewhere).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.is_infinite() {
        return x.signum();
    }
    let a = x.abs();
    let r = if a < 2.5 {
        // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let mut term = a;
        let mut sum = a;
        let x2 = a * a;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let t = term / (2.0 * n + 1.0);
            sum += t;
            if t.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        let mut f = 0.0;
        for k in (1..200).rev() {
            f = (k as f64 / 2.0) / (a + f);
        }
        let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / (a + f);
        1.0 - erfc
    };
    r.copysign(x)
}

// ---------------------------------------------------------------------------
// Casts.

/// Casts a reference array to `to` with nx's documented rules: float to
/// float rounds to nearest even (done by the comparison), float to integer
/// truncates toward zero and saturates (NaN gives 0), integer to integer
/// wraps, anything to bool is `!= 0`, bool is 0/1.
pub fn cast(a: &RefArray, to: DType) -> RefArray {
    match (&a.data, to.is_float()) {
        (Data::F(v), true) => {
            // Round through the source dtype already happened; the comparison
            // rounds the exact value into `to`.
            RefArray::floats(to, &a.shape, v.clone())
        }
        (Data::I(v), true) => RefArray::floats(to, &a.shape, v.iter().map(|&x| x as f64).collect()),
        (Data::F(v), false) => {
            if to == DType::Bool {
                return RefArray::bools(&a.shape, v.iter().map(|&x| x != 0.0).collect());
            }
            let (lo, hi) = super::int_range(to);
            let ints = v
                .iter()
                .map(|&x| {
                    if x.is_nan() {
                        0
                    } else if x <= lo as f64 {
                        lo
                    } else if x >= hi as f64 {
                        hi
                    } else {
                        x.trunc() as i128
                    }
                })
                .collect();
            RefArray::ints(to, &a.shape, ints)
        }
        (Data::I(v), false) => RefArray::ints(to, &a.shape, v.clone()),
    }
}

/// Exact conversion of an integer to a float dtype, rounding once (the
/// comparison of an integer-to-float cast uses this when the integer is not
/// exactly representable in f64).
pub fn int_to_float_exact(x: i128, to: DType) -> f64 {
    let f = x as f64;
    if f as i128 == x || to == DType::F64 {
        return super::round_to_dtype(f, to);
    }
    // x is beyond 2^53: round the integer itself to the target precision.
    let mant = match to {
        DType::F32 => 24,
        DType::F16 => 11,
        DType::BF16 => 8,
        d => panic!("int_to_float_exact: {d}"),
    };
    let a = x.unsigned_abs();
    let bits = 128 - a.leading_zeros();
    let drop = bits.saturating_sub(mant);
    let q = a >> drop;
    let rem = a & ((1u128 << drop) - 1);
    let half = 1u128 << (drop - 1);
    let q = if rem > half || (rem == half && q & 1 == 1) {
        q + 1
    } else {
        q
    };
    let r = super::round_to_dtype(q as f64 * 2f64.powi(drop as i32), to);
    if x < 0 {
        -r
    } else {
        r
    }
}

// ---------------------------------------------------------------------------
// Movement.

pub fn reshape(a: &RefArray, shape: &[usize]) -> RefArray {
    a.reshaped(shape)
}

/// Output axis `i` is input axis `perm[i]`.
pub fn permute(a: &RefArray, perm: &[isize]) -> RefArray {
    let n = a.ndim();
    let p: Vec<usize> = perm.iter().map(|&x| axis(x, n)).collect();
    let shape: Vec<usize> = p.iter().map(|&i| a.shape[i]).collect();
    let ashape = a.shape.clone();
    a.select(&shape, |idx| {
        let mut src = vec![0; n];
        for (i, &pi) in p.iter().enumerate() {
            src[pi] = idx[i];
        }
        ravel(&src, &ashape)
    })
}

pub fn transpose(a: &RefArray) -> RefArray {
    let perm: Vec<isize> = (0..a.ndim() as isize).rev().collect();
    permute(a, &perm)
}

pub fn swapaxes(a: &RefArray, x: isize, y: isize) -> RefArray {
    let n = a.ndim();
    let (x, y) = (axis(x, n), axis(y, n));
    let mut perm: Vec<isize> = (0..n as isize).collect();
    perm[x] = y as isize;
    perm[y] = x as isize;
    permute(a, &perm)
}

pub fn moveaxis(a: &RefArray, src: isize, dst: isize) -> RefArray {
    let n = a.ndim();
    let (s, d) = (axis(src, n), axis(dst, n));
    // Output axis d is input axis s; the others keep their order.
    let mut rest: Vec<usize> = (0..n).filter(|&i| i != s).collect();
    rest.insert(d, s);
    let perm: Vec<isize> = rest.iter().map(|&i| i as isize).collect();
    permute(a, &perm)
}

pub fn squeeze(a: &RefArray, ax: isize) -> RefArray {
    let n = a.ndim();
    let x = axis(ax, n);
    assert_eq!(a.shape[x], 1);
    let mut s = a.shape.clone();
    s.remove(x);
    a.reshaped(&s)
}

pub fn unsqueeze(a: &RefArray, ax: isize) -> RefArray {
    let x = axis(ax, a.ndim() + 1);
    let mut s = a.shape.clone();
    s.insert(x, 1);
    a.reshaped(&s)
}

/// The indices an `nx::Slice` picks on an axis of length `n`: the range
/// `start..end` (negatives from the end, clamped), every `|step|`-th element,
/// walked backwards from the range's last element when `step < 0`.
pub fn slice_indices(start: isize, end: Option<isize>, step: isize, n: usize) -> Vec<usize> {
    assert!(step != 0);
    let norm = |i: isize| -> isize {
        let i = if i < 0 { i + n as isize } else { i };
        i.clamp(0, n as isize)
    };
    let lo = norm(start);
    let hi = end.map_or(n as isize, norm);
    let mut out = vec![];
    if step > 0 {
        let mut i = lo;
        while i < hi {
            out.push(i as usize);
            i += step;
        }
    } else {
        let mut i = hi - 1;
        while i >= lo {
            out.push(i as usize);
            i += step;
        }
    }
    out
}

/// Picks `picks[a]` along every axis `a`.
pub fn pick(a: &RefArray, picks: &[Vec<usize>]) -> RefArray {
    assert_eq!(picks.len(), a.ndim());
    let shape: Vec<usize> = picks.iter().map(|p| p.len()).collect();
    let ashape = a.shape.clone();
    a.select(&shape, |idx| {
        let src: Vec<usize> = idx.iter().enumerate().map(|(i, &j)| picks[i][j]).collect();
        ravel(&src, &ashape)
    })
}

pub fn slice(a: &RefArray, slices: &[nx::Slice]) -> RefArray {
    let picks: Vec<Vec<usize>> = (0..a.ndim())
        .map(|i| match slices.get(i) {
            Some(s) => slice_indices(s.start, s.end, s.step, a.shape[i]),
            None => (0..a.shape[i]).collect(),
        })
        .collect();
    pick(a, &picks)
}

pub fn narrow(a: &RefArray, ax: isize, start: usize, len: usize) -> RefArray {
    let x = axis(ax, a.ndim());
    let picks: Vec<Vec<usize>> = (0..a.ndim())
        .map(|i| {
            if i == x {
                (start..start + len).collect()
            } else {
                (0..a.shape[i]).collect()
            }
        })
        .collect();
    pick(a, &picks)
}

pub fn get(a: &RefArray, i: usize) -> RefArray {
    squeeze(&narrow(a, 0, i, 1), 0)
}

pub fn flip(a: &RefArray, axes: &[isize]) -> RefArray {
    let xs: Vec<usize> = axes.iter().map(|&x| axis(x, a.ndim())).collect();
    let picks: Vec<Vec<usize>> = (0..a.ndim())
        .map(|i| {
            let n = a.shape[i];
            if xs.contains(&i) {
                (0..n).rev().collect()
            } else {
                (0..n).collect()
            }
        })
        .collect();
    pick(a, &picks)
}

/// Constant padding: `pads[i] = (before, after)` for every axis.
pub fn pad(a: &RefArray, pads: &[(usize, usize)], value: f64) -> RefArray {
    assert_eq!(pads.len(), a.ndim());
    let shape: Vec<usize> = (0..a.ndim())
        .map(|i| pads[i].0 + a.shape[i] + pads[i].1)
        .collect();
    let ashape = a.shape.clone();
    a.select_or(&shape, value, |idx| {
        let mut src = vec![0; idx.len()];
        for i in 0..idx.len() {
            if idx[i] < pads[i].0 || idx[i] >= pads[i].0 + ashape[i] {
                return None;
            }
            src[i] = idx[i] - pads[i].0;
        }
        Some(ravel(&src, &ashape))
    })
}

pub fn concatenate(xs: &[RefArray], ax: isize) -> RefArray {
    let n = xs[0].ndim();
    let x = axis(ax, n);
    let mut shape = xs[0].shape.clone();
    shape[x] = xs.iter().map(|a| a.shape[x]).sum();
    // Flatten every input's values into one list and remember offsets.
    let mut all = xs[0].clone();
    let mut offsets = vec![0usize];
    let mut data = match &xs[0].data {
        Data::F(_) => Data::F(vec![]),
        Data::I(_) => Data::I(vec![]),
    };
    for a in xs {
        match (&mut data, &a.data) {
            (Data::F(d), Data::F(v)) => d.extend_from_slice(v),
            (Data::I(d), Data::I(v)) => d.extend_from_slice(v),
            _ => panic!("concatenate reference: mixed kinds"),
        }
        offsets.push(offsets.last().unwrap() + a.numel());
    }
    let total = *offsets.last().unwrap();
    all.shape = vec![total];
    all.data = data;
    all.select(&shape, |idx| {
        let mut pos = idx[x];
        let mut k = 0;
        while pos >= xs[k].shape[x] {
            pos -= xs[k].shape[x];
            k += 1;
        }
        let mut src = idx.to_vec();
        src[x] = pos;
        offsets[k] + ravel(&src, &xs[k].shape)
    })
}

pub fn stack(xs: &[RefArray], ax: isize) -> RefArray {
    let x = axis(ax, xs[0].ndim() + 1) as isize;
    let u: Vec<RefArray> = xs.iter().map(|a| unsqueeze(a, x)).collect();
    concatenate(&u, x)
}

pub fn split(a: &RefArray, sizes: &[usize], ax: isize) -> Vec<RefArray> {
    let mut start = 0;
    let mut out = vec![];
    for &s in sizes {
        out.push(narrow(a, ax, start, s));
        start += s;
    }
    out
}

/// Every element repeated `r` times along the axis (numpy's `repeat`).
pub fn repeat(a: &RefArray, r: usize, ax: isize) -> RefArray {
    let x = axis(ax, a.ndim());
    let picks: Vec<Vec<usize>> = (0..a.ndim())
        .map(|i| {
            if i == x {
                (0..a.shape[i] * r).map(|j| j / r).collect()
            } else {
                (0..a.shape[i]).collect()
            }
        })
        .collect();
    pick(a, &picks)
}

/// numpy's `tile`.
pub fn tile(a: &RefArray, reps: &[usize]) -> RefArray {
    let n = a.ndim().max(reps.len());
    let mut shape = vec![1; n - a.ndim()];
    shape.extend_from_slice(&a.shape);
    let mut r = vec![1; n - reps.len()];
    r.extend_from_slice(reps);
    let b = a.reshaped(&shape);
    let out: Vec<usize> = (0..n).map(|i| shape[i] * r[i]).collect();
    let bshape = b.shape.clone();
    b.select(&out, |idx| {
        let src: Vec<usize> = (0..n).map(|i| idx[i] % bshape[i]).collect();
        ravel(&src, &bshape)
    })
}

/// `out[i] = a[(i - shift) mod n]` along the axis.
pub fn roll(a: &RefArray, shift: isize, ax: isize) -> RefArray {
    let x = axis(ax, a.ndim());
    let n = a.shape[x] as isize;
    let picks: Vec<Vec<usize>> = (0..a.ndim())
        .map(|i| {
            if i == x {
                (0..n)
                    .map(|j| (j - shift).rem_euclid(n.max(1)) as usize)
                    .collect()
            } else {
                (0..a.shape[i]).collect()
            }
        })
        .collect();
    pick(a, &picks)
}

// ---------------------------------------------------------------------------
// Reductions.

/// Groups the elements of `a` by their position outside `axes`: returns the
/// output shape (with or without kept axes) and, for each output element, the
/// flat positions of its inputs in row-major order.
pub fn reduction_groups(
    a: &RefArray,
    axes: &[isize],
    keepdims: bool,
) -> (Vec<usize>, Vec<Vec<usize>>) {
    // An empty `axes` reduces nothing (numpy's `axis=()`).
    let n = a.ndim();
    let xs: Vec<usize> = axes.iter().map(|&x| axis(x, n)).collect();
    let kept_shape: Vec<usize> = (0..n)
        .map(|i| if xs.contains(&i) { 1 } else { a.shape[i] })
        .collect();
    let mut groups = vec![vec![]; numel(&kept_shape)];
    for (k, idx) in all_indices(&a.shape).iter().enumerate() {
        let o: Vec<usize> = (0..n)
            .map(|i| if xs.contains(&i) { 0 } else { idx[i] })
            .collect();
        groups[ravel(&o, &kept_shape)].push(k);
    }
    let shape = if keepdims {
        kept_shape
    } else {
        (0..n)
            .filter(|i| !xs.contains(i))
            .map(|i| a.shape[i])
            .collect()
    };
    (shape, groups)
}

/// Reduces floats with `f` over each group (the group's values in order).
pub fn reduce_f(
    a: &RefArray,
    axes: &[isize],
    keepdims: bool,
    f: impl Fn(&[f64]) -> f64,
) -> RefArray {
    let (shape, groups) = reduction_groups(a, axes, keepdims);
    let v = a.f();
    let out = groups
        .iter()
        .map(|g| f(&g.iter().map(|&k| v[k]).collect::<Vec<_>>()))
        .collect();
    RefArray::floats(a.dtype, &shape, out)
}

/// Reduces integers exactly with `f` (result wraps into `a`'s dtype).
pub fn reduce_i(
    a: &RefArray,
    axes: &[isize],
    keepdims: bool,
    f: impl Fn(&[i128]) -> i128,
) -> RefArray {
    let (shape, groups) = reduction_groups(a, axes, keepdims);
    let v = a.i();
    let out = groups
        .iter()
        .map(|g| f(&g.iter().map(|&k| v[k]).collect::<Vec<_>>()))
        .collect();
    RefArray::ints(a.dtype, &shape, out)
}

/// The flat positions along `axis` for every other index: returns for each
/// "line" the list of flat positions in order of the axis.
pub fn lines(shape: &[usize], ax: usize) -> Vec<Vec<usize>> {
    let mut other = shape.to_vec();
    other[ax] = 1;
    all_indices(&other)
        .into_iter()
        .map(|base| {
            (0..shape[ax])
                .map(|j| {
                    let mut idx = base.clone();
                    idx[ax] = j;
                    ravel(&idx, shape)
                })
                .collect()
        })
        .collect()
}

/// Maps every line along `axis` (floats) through `f`, same shape.
pub fn along_axis_f(a: &RefArray, ax: isize, f: impl Fn(&[f64]) -> Vec<f64>) -> RefArray {
    let x = axis(ax, a.ndim());
    let v = a.f();
    let mut out = vec![0.0; a.numel()];
    for line in lines(&a.shape, x) {
        let vals: Vec<f64> = line.iter().map(|&k| v[k]).collect();
        for (k, r) in line.iter().zip(f(&vals)) {
            out[*k] = r;
        }
    }
    RefArray::floats(a.dtype, &a.shape, out)
}

/// Maps every line along `axis` (integers) through `f`, same shape (wraps).
pub fn along_axis_i(a: &RefArray, ax: isize, f: impl Fn(&[i128]) -> Vec<i128>) -> RefArray {
    let x = axis(ax, a.ndim());
    let v = a.i();
    let mut out = vec![0; a.numel()];
    for line in lines(&a.shape, x) {
        let vals: Vec<i128> = line.iter().map(|&k| v[k]).collect();
        for (k, r) in line.iter().zip(f(&vals)) {
            out[*k] = r;
        }
    }
    RefArray::ints(a.dtype, &a.shape, out)
}

pub fn unravel_in(k: usize, shape: &[usize]) -> Vec<usize> {
    unravel(k, shape)
}

// ---------------------------------------------------------------------------
// Linear algebra.

/// Matrix product of 2-D arrays, f64 or exact integer arithmetic.
pub fn matmul2(a: &RefArray, b: &RefArray) -> RefArray {
    let (m, k) = (a.shape[0], a.shape[1]);
    let (k2, n) = (b.shape[0], b.shape[1]);
    assert_eq!(k, k2);
    match (&a.data, &b.data) {
        (Data::F(x), Data::F(y)) => {
            let mut out = vec![0.0; m * n];
            for i in 0..m {
                for j in 0..n {
                    out[i * n + j] = (0..k).map(|p| x[i * k + p] * y[p * n + j]).sum();
                }
            }
            RefArray::floats(a.dtype, &[m, n], out)
        }
        (Data::I(x), Data::I(y)) => {
            let mut out = vec![0i128; m * n];
            for i in 0..m {
                for j in 0..n {
                    out[i * n + j] = (0..k)
                        .map(|p| x[i * k + p].wrapping_mul(y[p * n + j]))
                        .fold(0i128, |s, v| s.wrapping_add(v));
                }
            }
            RefArray::ints(a.dtype, &[m, n], out)
        }
        _ => panic!("matmul2: mixed kinds"),
    }
}

/// numpy's `matmul`: 1-D operands are promoted (and the added axis removed),
/// leading axes broadcast.
pub fn matmul(a: &RefArray, b: &RefArray) -> RefArray {
    let a1 = a.ndim() == 1;
    let b1 = b.ndim() == 1;
    let a2 = if a1 { unsqueeze(a, 0) } else { a.clone() };
    let b2 = if b1 { unsqueeze(b, 1) } else { b.clone() };
    let (ra, rb) = (a2.ndim(), b2.ndim());
    let batch = broadcast_shapes(&a2.shape[..ra - 2], &b2.shape[..rb - 2]);
    let (m, k) = (a2.shape[ra - 2], a2.shape[ra - 1]);
    let n = b2.shape[rb - 1];
    let mut sa = batch.clone();
    sa.extend([m, k]);
    let mut sb = batch.clone();
    sb.extend([b2.shape[rb - 2], n]);
    let a3 = broadcast_to(&a2, &sa);
    let b3 = broadcast_to(&b2, &sb);
    let nb = numel(&batch);
    let mut parts = vec![];
    for bi in 0..nb {
        let am = a3.select(&[m, k], |idx| bi * m * k + idx[0] * k + idx[1]);
        let bm = b3.select(&[sb[sb.len() - 2], n], |idx| {
            bi * sb[sb.len() - 2] * n + idx[0] * n + idx[1]
        });
        parts.push(matmul2(&am, &bm));
    }
    let mut shape = batch.clone();
    shape.extend([m, n]);
    let flat = if parts.is_empty() {
        RefArray::from_f64s(a.dtype, &[0], vec![])
    } else {
        concatenate(
            &parts
                .iter()
                .map(|p| p.reshaped(&[m * n]))
                .collect::<Vec<_>>(),
            0,
        )
    };
    let mut out = flat.reshaped(&shape);
    if a1 {
        let r = out.ndim();
        out = squeeze(&out, r as isize - 2);
    }
    if b1 {
        out = squeeze(&out, -1);
    }
    out
}

/// Every axis of a rank-`n` array (for `sum_all` and friends).
pub fn all_axes(n: usize) -> Vec<isize> {
    (0..n as isize).collect()
}

pub fn sum(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    if a.is_float() {
        reduce_f(a, axes, keepdims, |v| v.iter().sum())
    } else {
        reduce_i(a, axes, keepdims, |v| {
            v.iter().fold(0i128, |s, &x| s.wrapping_add(x))
        })
    }
}

pub fn prod(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    if a.is_float() {
        reduce_f(a, axes, keepdims, |v| v.iter().product())
    } else {
        reduce_i(a, axes, keepdims, |v| {
            v.iter().fold(1i128, |s, &x| s.wrapping_mul(x))
        })
    }
}

pub fn mean(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    reduce_f(a, axes, keepdims, |v| {
        v.iter().sum::<f64>() / v.len() as f64
    })
}

pub fn var(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    reduce_f(a, axes, keepdims, |v| {
        let m = v.iter().sum::<f64>() / v.len() as f64;
        v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
    })
}

pub fn std(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    map_f(&var(a, axes, keepdims), f64::sqrt)
}

/// NaN-propagating maximum; on bool "any".
pub fn max(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    if a.is_float() {
        reduce_f(a, axes, keepdims, |v| {
            if v.iter().any(|x| x.is_nan()) {
                f64::NAN
            } else {
                v.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            }
        })
    } else {
        reduce_i(a, axes, keepdims, |v| *v.iter().max().unwrap())
    }
}

pub fn min(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    if a.is_float() {
        reduce_f(a, axes, keepdims, |v| {
            if v.iter().any(|x| x.is_nan()) {
                f64::NAN
            } else {
                v.iter().cloned().fold(f64::INFINITY, f64::min)
            }
        })
    } else {
        reduce_i(a, axes, keepdims, |v| *v.iter().min().unwrap())
    }
}

pub fn logsumexp(a: &RefArray, axes: &[isize], keepdims: bool) -> RefArray {
    reduce_f(a, axes, keepdims, |v| {
        if v.iter().any(|x| x.is_nan()) {
            return f64::NAN;
        }
        if v.contains(&f64::INFINITY) {
            return f64::INFINITY;
        }
        let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            return m;
        }
        m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
    })
}

/// `all`/`any`: a bool array over the truthiness (`!= 0`, NaN is true).
pub fn all_any(a: &RefArray, axes: &[isize], keepdims: bool, any: bool) -> RefArray {
    let t = map_pred(a, |x| x != 0.0, |x| x != 0);
    let (shape, groups) = reduction_groups(&t, axes, keepdims);
    let v = t.i();
    let out = groups
        .iter()
        .map(|g| {
            if any {
                g.iter().any(|&k| v[k] != 0)
            } else {
                g.iter().all(|&k| v[k] != 0)
            }
        })
        .collect();
    RefArray::bools(&shape, out)
}

/// Index of the first maximum (or minimum) along `axis`, as I32; a NaN
/// counts as the extreme (the first NaN wins).
pub fn arg(a: &RefArray, ax: isize, keepdims: bool, is_max: bool) -> RefArray {
    let x = axis(ax, a.ndim());
    let (shape, groups) = reduction_groups(a, &[x as isize], keepdims);
    let out = groups
        .iter()
        .map(|g| {
            let vals: Vec<f64> = g.iter().map(|&k| a.get_f64(k)).collect();
            let ints: Option<Vec<i128>> =
                (!a.is_float()).then(|| g.iter().map(|&k| a.i()[k]).collect());
            let mut best = 0usize;
            for j in 0..vals.len() {
                if a.is_float() {
                    if vals[best].is_nan() {
                        break;
                    }
                    if vals[j].is_nan() {
                        best = j;
                        break;
                    }
                    if (is_max && vals[j] > vals[best]) || (!is_max && vals[j] < vals[best]) {
                        best = j;
                    }
                } else {
                    let v = ints.as_ref().unwrap();
                    if (is_max && v[j] > v[best]) || (!is_max && v[j] < v[best]) {
                        best = j;
                    }
                }
            }
            best as i128
        })
        .collect();
    RefArray::ints(DType::I32, &shape, out)
}

pub fn softmax(a: &RefArray, ax: isize) -> RefArray {
    along_axis_f(a, ax, |v| {
        let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = v.iter().map(|x| (x - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    })
}

pub fn log_softmax(a: &RefArray, ax: isize) -> RefArray {
    along_axis_f(a, ax, |v| {
        let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = v.iter().map(|x| (x - m).exp()).sum();
        v.iter().map(|x| x - m - s.ln()).collect()
    })
}

pub fn cumsum(a: &RefArray, ax: isize) -> RefArray {
    if a.is_float() {
        along_axis_f(a, ax, |v| {
            let mut s = 0.0;
            v.iter()
                .map(|x| {
                    s += x;
                    s
                })
                .collect()
        })
    } else {
        along_axis_i(a, ax, |v| {
            let mut s = 0i128;
            v.iter()
                .map(|&x| {
                    s = s.wrapping_add(x);
                    s
                })
                .collect()
        })
    }
}

pub fn cumprod(a: &RefArray, ax: isize) -> RefArray {
    if a.is_float() {
        along_axis_f(a, ax, |v| {
            let mut s = 1.0;
            v.iter()
                .map(|x| {
                    s *= x;
                    s
                })
                .collect()
        })
    } else {
        along_axis_i(a, ax, |v| {
            let mut s = 1i128;
            v.iter()
                .map(|&x| {
                    s = super::wrap_int(s.wrapping_mul(x), a.dtype);
                    s
                })
                .collect()
        })
    }
}

// ---------------------------------------------------------------------------
// Indexing.

fn norm_index(i: i128, n: usize) -> usize {
    let j = if i < 0 { i + n as i128 } else { i };
    assert!(
        j >= 0 && (j as usize) < n,
        "reference: index {i} out of range for {n}"
    );
    j as usize
}

/// numpy `take` along `axis`: shape `pre ++ idx.shape ++ post`.
pub fn take(a: &RefArray, idx: &RefArray, ax: isize) -> RefArray {
    let x = axis(ax, a.ndim());
    let pre = &a.shape[..x];
    let post = &a.shape[x + 1..];
    let mut shape = pre.to_vec();
    shape.extend_from_slice(&idx.shape);
    shape.extend_from_slice(post);
    let ki = idx.ndim();
    let ashape = a.shape.clone();
    let iv = idx.i().to_vec();
    let ishape = idx.shape.clone();
    a.select(&shape, |o| {
        let ipos = ravel(&o[x..x + ki], &ishape);
        let j = norm_index(iv[ipos], ashape[x]);
        let mut src = o[..x].to_vec();
        src.push(j);
        src.extend_from_slice(&o[x + ki..]);
        ravel(&src, &ashape)
    })
}

/// numpy `take_along_axis`: idx broadcasts against `a` off `axis`.
pub fn take_along_axis(a: &RefArray, idx: &RefArray, ax: isize) -> RefArray {
    let x = axis(ax, a.ndim());
    let n = a.ndim();
    let mut sa = a.shape.clone();
    sa[x] = 1;
    let mut si = idx.shape.clone();
    si[x] = 1;
    let mut shape = broadcast_shapes(&sa, &si);
    shape[x] = idx.shape[x];
    let ashape = a.shape.clone();
    let ishape = idx.shape.clone();
    let iv = idx.i().to_vec();
    a.select(&shape, |o| {
        let ipos: Vec<usize> = (0..n)
            .map(|d| if ishape[d] == 1 { 0 } else { o[d] })
            .collect();
        let j = norm_index(iv[ravel(&ipos, &ishape)], ashape[x]);
        let src: Vec<usize> = (0..n)
            .map(|d| {
                if d == x {
                    j
                } else if ashape[d] == 1 {
                    0
                } else {
                    o[d]
                }
            })
            .collect();
        ravel(&src, &ashape)
    })
}

/// torch `gather(axis, idx)`: shape of idx, no broadcasting.
pub fn gather(a: &RefArray, ax: isize, idx: &RefArray) -> RefArray {
    let x = axis(ax, a.ndim());
    let ashape = a.shape.clone();
    let ishape = idx.shape.clone();
    let iv = idx.i().to_vec();
    a.select(&idx.shape, |o| {
        let j = norm_index(iv[ravel(o, &ishape)], ashape[x]);
        let mut src = o.to_vec();
        src[x] = j;
        ravel(&src, &ashape)
    })
}

/// torch `scatter_add(axis, idx, src)` on a copy of `a`.
pub fn scatter_add(a: &RefArray, ax: isize, idx: &RefArray, src: &RefArray) -> RefArray {
    let x = axis(ax, a.ndim());
    let iv = idx.i().to_vec();
    let mut out_f: Vec<f64> = if a.is_float() { a.f().to_vec() } else { vec![] };
    let mut out_i: Vec<i128> = if a.is_float() { vec![] } else { a.i().to_vec() };
    for p in all_indices(&idx.shape) {
        let j = norm_index(iv[ravel(&p, &idx.shape)], a.shape[x]);
        let mut d = p.clone();
        d[x] = j;
        let k = ravel(&d, &a.shape);
        let s = ravel(&p, &src.shape);
        if a.is_float() {
            out_f[k] += src.f()[s];
        } else {
            out_i[k] = out_i[k].wrapping_add(src.i()[s]);
        }
    }
    if a.is_float() {
        RefArray::floats(a.dtype, &a.shape, out_f)
    } else {
        RefArray::ints(a.dtype, &a.shape, out_i)
    }
}

/// `segment_sum(data, ids, num)` as nx documents it: shape `[num, rest..]`
/// of zeros, `data[i, ..]` added into row `ids[i]` (negative ids count from
/// the end; the entries hold only ids in `[-num, num)`).
pub fn segment_sum(data: &RefArray, ids: &RefArray, num: usize) -> RefArray {
    assert_eq!(ids.ndim(), 1);
    assert_eq!(ids.shape[0], data.shape[0]);
    let mut shape = data.shape.clone();
    shape[0] = num;
    let iv = ids.i().to_vec();
    let mut out_f = vec![0.0; numel(&shape)];
    let mut out_i = vec![0i128; numel(&shape)];
    for p in all_indices(&data.shape) {
        let mut d = p.clone();
        d[0] = norm_index(iv[p[0]], num);
        let (k, s) = (ravel(&d, &shape), ravel(&p, &data.shape));
        if data.is_float() {
            out_f[k] += data.f()[s];
        } else {
            out_i[k] += data.i()[s];
        }
    }
    if data.is_float() {
        RefArray::floats(data.dtype, &shape, out_f)
    } else {
        RefArray::ints(data.dtype, &shape, out_i)
    }
}

/// `a.index_add(axis, idx, src)`: a copy of `a` with the slice `j` of
/// `src` along `axis` added into the slice `idx[j]` (negative indices count
/// from the end).
pub fn index_add(a: &RefArray, ax: isize, idx: &RefArray, src: &RefArray) -> RefArray {
    let x = axis(ax, a.ndim());
    assert_eq!(idx.ndim(), 1);
    let iv = idx.i().to_vec();
    let mut want = a.shape.clone();
    want[x] = iv.len();
    assert_eq!(src.shape, want, "reference index_add: source shape");
    let mut out_f: Vec<f64> = if a.is_float() { a.f().to_vec() } else { vec![] };
    let mut out_i: Vec<i128> = if a.is_float() { vec![] } else { a.i().to_vec() };
    for p in all_indices(&src.shape) {
        let mut d = p.clone();
        d[x] = norm_index(iv[p[x]], a.shape[x]);
        let (k, s) = (ravel(&d, &a.shape), ravel(&p, &src.shape));
        if a.is_float() {
            out_f[k] += src.f()[s];
        } else {
            out_i[k] += src.i()[s];
        }
    }
    if a.is_float() {
        RefArray::floats(a.dtype, &a.shape, out_f)
    } else {
        RefArray::ints(a.dtype, &a.shape, out_i)
    }
}

/// A pool's padding, per spatial axis: explicit pairs, or `None` for
/// JAX's SAME (output `ceil(n / stride)`, the total padding
/// `max((out - 1) * stride + window - n, 0)`, the odd one at the end), or
/// all zeros for VALID (`Some(vec![])`).
pub fn pool_pads(
    spatial: &[usize],
    window: &[usize],
    strides: &[usize],
    pads: Option<&[(usize, usize)]>,
) -> Vec<(usize, usize)> {
    match pads {
        Some([]) => vec![(0, 0); spatial.len()],
        Some(p) => p.to_vec(),
        None => (0..spatial.len())
            .map(|d| {
                let out = spatial[d].div_ceil(strides[d]);
                let total = ((out - 1) * strides[d] + window[d]).saturating_sub(spatial[d]);
                (total / 2, total - total / 2)
            })
            .collect(),
    }
}

/// The output shape of a pool over `[N, C, spatial..]` and, per output
/// position (row-major), the flat positions of its window's in-bounds
/// input elements. `pads`: resolved (`pool_pads`).
fn pool_windows(
    a: &RefArray,
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let sp = a.ndim() - 2;
    assert!((1..=3).contains(&sp) && window.len() == sp && strides.len() == sp);
    let mut shape = a.shape[..2].to_vec();
    for d in 0..sp {
        let padded = a.shape[2 + d] + pads[d].0 + pads[d].1;
        shape.push((padded - window[d]) / strides[d] + 1);
    }
    let wins = all_indices(&shape)
        .into_iter()
        .map(|o| {
            let mut inside = vec![];
            for w in all_indices(window) {
                let mut src = o[..2].to_vec();
                let mut ok = true;
                for d in 0..sp {
                    let pos = (o[2 + d] * strides[d] + w[d]) as isize - pads[d].0 as isize;
                    ok &= pos >= 0 && (pos as usize) < a.shape[2 + d];
                    src.push(pos.max(0) as usize);
                }
                if ok {
                    inside.push(ravel(&src, &a.shape));
                }
            }
            inside
        })
        .collect();
    (shape, wins)
}

/// Max pool: the largest in-bounds element of each window (NaN if any is
/// NaN); padding counts as -inf (the dtype's lowest integer), so a window
/// entirely in the padding gives that.
pub fn max_pool(
    a: &RefArray,
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> RefArray {
    let (shape, wins) = pool_windows(a, window, strides, pads);
    if a.is_float() {
        let v = a.f();
        let out = wins
            .iter()
            .map(|ks| {
                if ks.iter().any(|&k| v[k].is_nan()) {
                    f64::NAN
                } else {
                    ks.iter().map(|&k| v[k]).fold(f64::NEG_INFINITY, f64::max)
                }
            })
            .collect();
        RefArray::floats(a.dtype, &shape, out)
    } else {
        let v = a.i();
        let lowest = super::int_range(a.dtype).0;
        let out = wins
            .iter()
            .map(|ks| ks.iter().map(|&k| v[k]).fold(lowest, i128::max))
            .collect();
        RefArray::ints(a.dtype, &shape, out)
    }
}

/// Average pool: each window's sum of in-bounds elements divided by their
/// number (padding not counted).
pub fn avg_pool(
    a: &RefArray,
    window: &[usize],
    strides: &[usize],
    pads: &[(usize, usize)],
) -> RefArray {
    let (shape, wins) = pool_windows(a, window, strides, pads);
    let v = a.f();
    let out = wins
        .iter()
        .map(|ks| ks.iter().map(|&k| v[k]).sum::<f64>() / ks.len() as f64)
        .collect();
    RefArray::floats(a.dtype, &shape, out)
}

/// `one_hot`: F32, rows of zeros for values outside `0..n`.
pub fn one_hot(a: &RefArray, n: usize) -> RefArray {
    let mut shape = a.shape.clone();
    shape.push(n);
    let v = a.i();
    let out = all_indices(&shape)
        .iter()
        .map(|idx| {
            let k = ravel(&idx[..idx.len() - 1], &a.shape);
            (v[k] == idx[idx.len() - 1] as i128) as i32 as f64
        })
        .collect();
    RefArray::floats(DType::F32, &shape, out)
}

// ---------------------------------------------------------------------------
// More linear algebra.

/// numpy `dot`.
pub fn dot(a: &RefArray, b: &RefArray) -> RefArray {
    if a.ndim() == 0 || b.ndim() == 0 {
        return zip_num(a, b, |x, y| x * y, i128::wrapping_mul);
    }
    let ca = a.ndim() - 1;
    let cb = b.ndim().saturating_sub(2);
    let k = a.shape[ca];
    assert_eq!(k, b.shape[cb]);
    let mut shape: Vec<usize> = a.shape[..ca].to_vec();
    let bo: Vec<usize> = (0..b.ndim()).filter(|&d| d != cb).collect();
    shape.extend(bo.iter().map(|&d| b.shape[d]));
    let na = ca;
    let idxs = all_indices(&shape);
    let term = |o: &[usize], p: usize| -> (usize, usize) {
        let mut ia = o[..na].to_vec();
        ia.push(p);
        let mut ib = vec![0; b.ndim()];
        for (t, &d) in bo.iter().enumerate() {
            ib[d] = o[na + t];
        }
        ib[cb] = p;
        (ravel(&ia, &a.shape), ravel(&ib, &b.shape))
    };
    if a.is_float() {
        let (x, y) = (a.f(), b.f());
        let v = idxs
            .iter()
            .map(|o| {
                (0..k)
                    .map(|p| {
                        let (i, j) = term(o, p);
                        x[i] * y[j]
                    })
                    .sum()
            })
            .collect();
        RefArray::floats(a.dtype, &shape, v)
    } else {
        let (x, y) = (a.i(), b.i());
        let v = idxs
            .iter()
            .map(|o| {
                (0..k).fold(0i128, |s, p| {
                    let (i, j) = term(o, p);
                    s.wrapping_add(x[i].wrapping_mul(y[j]))
                })
            })
            .collect();
        RefArray::ints(a.dtype, &shape, v)
    }
}

/// numpy `outer` over the flattened inputs.
pub fn outer(a: &RefArray, b: &RefArray) -> RefArray {
    let (m, n) = (a.numel(), b.numel());
    let ac = a.reshaped(&[m, 1]);
    let bc = b.reshaped(&[1, n]);
    zip_num(&ac, &bc, |x, y| x * y, i128::wrapping_mul)
}

/// `tril` (`lower`) / `triu` over the last two axes.
pub fn triangle(a: &RefArray, k: isize, lower: bool) -> RefArray {
    let n = a.ndim();
    let shape = a.shape.clone();
    a.select_or(&shape, 0.0, |o| {
        let (i, j) = (o[n - 2] as isize, o[n - 1] as isize);
        let keep = if lower { j <= i + k } else { j >= i + k };
        keep.then(|| ravel(o, &shape))
    })
}
