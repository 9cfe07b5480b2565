//! Shape arithmetic shared by the operations and the shape rules: axis
//! normalization, broadcasting, element counts. Errors here are the
//! user-facing panics, so every message names the operation.

/// Number of elements of a shape (1 for a scalar).
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major (C order) strides, in elements, of a contiguous tensor.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    strides
}

/// Resolves a possibly negative axis against `ndim` dimensions.
///
/// Panics naming `op` when the axis is out of range.
pub fn normalize_axis(op: &str, axis: isize, ndim: usize) -> usize {
    let n = ndim as isize;
    if axis < -n || axis >= n {
        panic!("{op}: axis {axis} is out of range for a tensor of rank {ndim}");
    }
    if axis < 0 {
        (axis + n) as usize
    } else {
        axis as usize
    }
}

/// Resolves a list of axes, sorted, rejecting duplicates.
pub fn normalize_axes(op: &str, axes: &[isize], ndim: usize) -> Vec<usize> {
    let mut out: Vec<usize> = axes.iter().map(|&a| normalize_axis(op, a, ndim)).collect();
    out.sort_unstable();
    for w in out.windows(2) {
        if w[0] == w[1] {
            panic!("{op}: axis {} is repeated in {axes:?}", w[0]);
        }
    }
    out
}

/// The numpy broadcast of two shapes, or `None` if they are incompatible.
pub fn try_broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
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
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// The numpy broadcast of two shapes; panics naming `op` if incompatible.
pub fn broadcast_shapes(op: &str, a: &[usize], b: &[usize]) -> Vec<usize> {
    try_broadcast_shapes(a, b)
        .unwrap_or_else(|| panic!("{op}: shapes {a:?} and {b:?} cannot be broadcast together"))
}
