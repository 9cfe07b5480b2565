//! Movement: reshaping, axis permutations, broadcasting, slicing, flipping
//! (all views where the layout allows), copies and in-place assignment, and
//! the composites built from them (padding, joining, splitting, repeating).

use crate::prim::Prim;
use crate::shape::{normalize_axes, normalize_axis, numel};
use crate::tensor::Tensor;
use crate::trace::bind;
use std::ops::{Range, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive};

/// One axis of a `slice`: the indices `start..end` (negatives count from the
/// end, `end: None` means to the end), every `step`-th one.
///
/// A negative step walks the same range backwards, starting from its last
/// element: `Slice::from(..).step(-1)` reverses an axis and
/// `Slice::from(1..4).step(-1)` picks indices 3, 2, 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    /// The first index of the range (negative counts from the end).
    pub start: isize,
    /// One past the last index of the range (negative counts from the end);
    /// `None` is the end of the axis.
    pub end: Option<isize>,
    /// Take every `step`-th index; negative walks backwards. Non-zero.
    pub step: isize,
}

impl Slice {
    /// `start..end` by `step`.
    pub fn new(start: isize, end: Option<isize>, step: isize) -> Slice {
        Slice { start, end, step }
    }

    /// The whole axis.
    pub fn all() -> Slice {
        Slice::new(0, None, 1)
    }

    /// The same range with another step.
    pub fn step(self, step: isize) -> Slice {
        Slice { step, ..self }
    }

    /// `(first index, count, step)` on an axis of length `n`.
    fn resolve(&self, n: usize) -> (usize, usize, isize) {
        if self.step == 0 {
            panic!("slice: step must be non-zero");
        }
        let clampi = |i: isize| -> usize {
            let i = if i < 0 { i + n as isize } else { i };
            i.clamp(0, n as isize) as usize
        };
        let lo = clampi(self.start);
        let hi = self.end.map_or(n, clampi);
        if hi <= lo {
            return (0, 0, self.step);
        }
        let k = self.step.unsigned_abs();
        let count = (hi - lo).div_ceil(k);
        if self.step > 0 {
            (lo, count, self.step)
        } else {
            (hi - 1, count, self.step)
        }
    }
}

impl From<Range<isize>> for Slice {
    fn from(r: Range<isize>) -> Slice {
        Slice::new(r.start, Some(r.end), 1)
    }
}
impl From<RangeFrom<isize>> for Slice {
    fn from(r: RangeFrom<isize>) -> Slice {
        Slice::new(r.start, None, 1)
    }
}
impl From<RangeTo<isize>> for Slice {
    fn from(r: RangeTo<isize>) -> Slice {
        Slice::new(0, Some(r.end), 1)
    }
}
impl From<RangeFull> for Slice {
    fn from(_: RangeFull) -> Slice {
        Slice::all()
    }
}
impl From<RangeInclusive<isize>> for Slice {
    fn from(r: RangeInclusive<isize>) -> Slice {
        let end = *r.end();
        Slice::new(*r.start(), if end == -1 { None } else { Some(end + 1) }, 1)
    }
}
impl From<RangeToInclusive<isize>> for Slice {
    fn from(r: RangeToInclusive<isize>) -> Slice {
        Slice::new(0, if r.end == -1 { None } else { Some(r.end + 1) }, 1)
    }
}

impl Tensor {
    /// The same elements in row-major order under a new shape (a view when
    /// the strides allow it).
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0, nx::DType::I32).reshape(&[2, 3]);
    /// assert_eq!(x.shape(), &[2, 3]);
    /// assert_eq!(x.reshape(&[3, 2]).get(1).to_vec::<i32>(), vec![2, 3]);
    /// ```
    ///
    /// Panics when `shape` holds a different number of elements.
    pub fn reshape(&self, shape: &[usize]) -> Tensor {
        if numel(shape) != self.numel() {
            panic!(
                "reshape: cannot reshape a tensor of shape {:?} ({} elements) into shape {shape:?} ({} elements)",
                self.shape(),
                self.numel(),
                numel(shape)
            );
        }
        if shape == self.shape() {
            return self.clone();
        }
        bind(
            Prim::Reshape {
                shape: shape.to_vec(),
            },
            &[self],
        )
    }

    /// The elements as one axis.
    pub fn flatten(&self) -> Tensor {
        self.reshape(&[self.numel()])
    }

    /// Reorders the axes: output axis `i` is input axis `perm[i]` (negative
    /// entries count from the end). A view; nothing is copied.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::arange(0.0, 6.0, 1.0, nx::DType::I32).reshape(&[1, 2, 3]);
    /// let y = x.permute(&[2, 0, 1]);
    /// assert_eq!(y.shape(), &[3, 1, 2]);
    /// assert_eq!(y.to_vec::<i32>(), vec![0, 3, 1, 4, 2, 5]);
    /// ```
    ///
    /// Panics unless `perm` is a permutation of the axes.
    pub fn permute(&self, perm: &[isize]) -> Tensor {
        let n = self.ndim();
        if perm.len() != n {
            panic!(
                "permute: got {} axes {perm:?} for a tensor of rank {n}",
                perm.len()
            );
        }
        let p: Vec<usize> = perm
            .iter()
            .map(|&a| normalize_axis("permute", a, n))
            .collect();
        let mut seen = vec![false; n];
        for &a in &p {
            if seen[a] {
                panic!("permute: {perm:?} is not a permutation of the axes");
            }
            seen[a] = true;
        }
        if p.iter().enumerate().all(|(i, &a)| i == a) {
            return self.clone();
        }
        bind(Prim::Permute { perm: p }, &[self])
    }

    /// Reverses the order of all axes (numpy's `.T`).
    pub fn transpose(&self) -> Tensor {
        let perm: Vec<isize> = (0..self.ndim() as isize).rev().collect();
        self.permute(&perm)
    }

    /// Exchanges two axes.
    pub fn swapaxes(&self, a: isize, b: isize) -> Tensor {
        let n = self.ndim();
        let (a, b) = (
            normalize_axis("swapaxes", a, n),
            normalize_axis("swapaxes", b, n),
        );
        let mut perm: Vec<isize> = (0..n as isize).collect();
        perm.swap(a, b);
        self.permute(&perm)
    }

    /// Moves axis `src` to position `dst`, keeping the others in order.
    pub fn moveaxis(&self, src: isize, dst: isize) -> Tensor {
        let n = self.ndim();
        let (s, d) = (
            normalize_axis("moveaxis", src, n),
            normalize_axis("moveaxis", dst, n),
        );
        let mut perm: Vec<isize> = (0..n as isize).filter(|&a| a != s as isize).collect();
        perm.insert(d, s as isize);
        self.permute(&perm)
    }

    /// Numpy broadcasting to `shape` (a view; size-1 and missing leading axes repeat).
    pub fn broadcast_to(&self, shape: &[usize]) -> Tensor {
        let ok = shape.len() >= self.ndim()
            && self
                .shape()
                .iter()
                .zip(&shape[shape.len() - self.ndim()..])
                .all(|(&a, &b)| a == b || a == 1);
        if !ok {
            panic!(
                "broadcast_to: cannot broadcast shape {:?} to {shape:?}",
                self.shape()
            );
        }
        self.broadcast_unchecked(shape)
    }

    /// Same as `broadcast_to`.
    pub fn expand(&self, shape: &[usize]) -> Tensor {
        self.broadcast_to(shape)
    }

    /// Removes axis `axis`, which must have size 1.
    pub fn squeeze(&self, axis: isize) -> Tensor {
        let a = normalize_axis("squeeze", axis, self.ndim());
        if self.shape()[a] != 1 {
            panic!(
                "squeeze: axis {axis} has size {}, not 1 (shape {:?})",
                self.shape()[a],
                self.shape()
            );
        }
        let mut shape = self.shape().to_vec();
        shape.remove(a);
        self.reshape(&shape)
    }

    /// Inserts a size-1 axis at position `axis` (in the result's axes).
    pub fn unsqueeze(&self, axis: isize) -> Tensor {
        let a = normalize_axis("unsqueeze", axis, self.ndim() + 1);
        let mut shape = self.shape().to_vec();
        shape.insert(a, 1);
        self.reshape(&shape)
    }

    /// Slices axis by axis; fewer entries than axes leave the rest whole.
    ///
    /// ```
    /// use nx::{Tensor, Slice};
    /// let x = Tensor::from_slice(&[0i32, 1, 2, 3, 4, 5], &[2, 3]);
    /// let y = x.slice(&[Slice::all(), Slice::from(..).step(-1)]);
    /// assert_eq!(y.to_vec::<i32>(), vec![2, 1, 0, 5, 4, 3]);
    /// ```
    pub fn slice(&self, slices: &[Slice]) -> Tensor {
        let n = self.ndim();
        if slices.len() > n {
            panic!(
                "slice: {} slices for a tensor of rank {n} (shape {:?})",
                slices.len(),
                self.shape()
            );
        }
        let mut start = vec![0; n];
        let mut end = self.shape().to_vec();
        let mut step = vec![1; n];
        let mut flip = vec![];
        for (a, s) in slices.iter().enumerate() {
            let (first, count, st) = s.resolve(self.shape()[a]);
            let k = st.unsigned_abs();
            if st > 0 {
                start[a] = first;
                end[a] = if count == 0 {
                    first
                } else {
                    first + (count - 1) * k + 1
                };
            } else {
                // Take the same elements in increasing order, then flip.
                let lo = first + 1 - if count == 0 { 1 } else { (count - 1) * k + 1 };
                start[a] = lo;
                end[a] = if count == 0 { lo } else { first + 1 };
                flip.push(a);
            }
            step[a] = k;
        }
        let identity = start.iter().all(|&s| s == 0)
            && end.as_slice() == self.shape()
            && step.iter().all(|&s| s == 1);
        let mut out = if identity {
            self.clone()
        } else {
            bind(Prim::Slice { start, end, step }, &[self])
        };
        if !flip.is_empty() {
            out = bind(Prim::Flip { axes: flip }, &[&out]);
        }
        out
    }

    /// `len` elements of `axis` from `start`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Tensor {
        let a = normalize_axis("narrow", axis, self.ndim());
        let n = self.shape()[a];
        if start + len > n {
            panic!(
                "narrow: range {start}..{} is out of bounds for axis {axis} of size {n}",
                start + len
            );
        }
        let mut slices = vec![Slice::all(); a + 1];
        slices[a] = Slice::new(start as isize, Some((start + len) as isize), 1);
        self.slice(&slices)
    }

    /// `x[i]`: element `i` of axis 0, which disappears.
    pub fn get(&self, i: usize) -> Tensor {
        if self.ndim() == 0 {
            panic!("get: cannot index a 0-d tensor");
        }
        if i >= self.shape()[0] {
            panic!(
                "get: index {i} is out of bounds for axis 0 of size {}",
                self.shape()[0]
            );
        }
        self.narrow(0, i, 1).squeeze(0)
    }

    /// Reverses the listed axes (a view).
    pub fn flip(&self, axes: &[isize]) -> Tensor {
        let axes = normalize_axes("flip", axes, self.ndim());
        if axes.is_empty() {
            return self.clone();
        }
        bind(Prim::Flip { axes }, &[self])
    }

    /// A row-major contiguous tensor with the same elements (`self` if it already is one).
    pub fn contiguous(&self) -> Tensor {
        if self.is_contiguous() {
            return self.clone();
        }
        self.copy()
    }

    /// A fresh copy that shares nothing with `self`.
    pub fn copy(&self) -> Tensor {
        bind(Prim::Copy, &[self])
    }

    /// Writes `src` (broadcast to `self`'s shape, same dtype) into `self` in
    /// place, through views too. Overlapping source and destination are fine.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    /// x.assign(&x.flip(&[0]));
    /// assert_eq!(x.to_vec::<f32>(), vec![3.0, 2.0, 1.0]);
    /// ```
    pub fn assign(&self, src: &Tensor) {
        super::check_same_dtype("assign", self, src);
        if self
            .strides()
            .is_some_and(|s| s.iter().zip(self.shape()).any(|(&st, &n)| st == 0 && n > 1))
        {
            panic!("assign: the destination is a broadcast view whose elements alias one another");
        }
        let src = src.broadcast_to_for("assign", self.shape());
        bind(Prim::Assign, &[self, &src]);
    }

    /// Same as `assign`.
    pub fn blit(&self, src: &Tensor) {
        self.assign(src)
    }

    pub(crate) fn broadcast_to_for(&self, op: &str, shape: &[usize]) -> Tensor {
        match crate::shape::try_broadcast_shapes(self.shape(), shape) {
            Some(s) if s == shape => self.broadcast_unchecked(shape),
            _ => panic!(
                "{op}: shape {:?} cannot be broadcast to {shape:?}",
                self.shape()
            ),
        }
    }
}

/// The composites: padding, joining, splitting, repeating and rolling, built
/// from the views above and the `Pad`/`Concat` primitives.
impl Tensor {
    /// Pads every axis with `value` (converted to the dtype): `pads[i] =
    /// (before, after)` for axis `i`, exactly one pair per axis. Always a
    /// fresh tensor.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1i32, 2], &[2]);
    /// assert_eq!(x.pad(&[(1, 2)], 9.0).to_vec::<i32>(), vec![9, 1, 2, 9, 9]);
    /// ```
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Tensor {
        if pads.len() != self.ndim() {
            panic!(
                "pad: expected {} (before, after) pairs, one per axis of shape {:?}, got {}",
                self.ndim(),
                self.shape(),
                pads.len()
            );
        }
        bind(
            Prim::Pad {
                lo: pads.iter().map(|p| p.0).collect(),
                hi: pads.iter().map(|p| p.1).collect(),
                value: value.into(),
            },
            &[self],
        )
    }

    /// Joins tensors of one dtype along an existing axis; their shapes must
    /// agree on every other axis. Always a fresh tensor.
    pub fn concatenate(xs: &[Tensor], axis: isize) -> Tensor {
        let Some(first) = xs.first() else {
            panic!("concatenate: needs at least one tensor");
        };
        let a = normalize_axis("concatenate", axis, first.ndim());
        for (i, x) in xs.iter().enumerate().skip(1) {
            if x.dtype() != first.dtype() {
                panic!(
                    "concatenate: dtype mismatch: tensor 0 is {} (shape {:?}) but tensor {i} is {} (shape {:?})",
                    first.dtype(),
                    first.shape(),
                    x.dtype(),
                    x.shape()
                );
            }
            let agree = x.ndim() == first.ndim()
                && (0..first.ndim()).all(|d| d == a || x.shape()[d] == first.shape()[d]);
            if !agree {
                panic!(
                    "concatenate: shapes {:?} (tensor 0) and {:?} (tensor {i}) must agree except on axis {axis}",
                    first.shape(),
                    x.shape()
                );
            }
        }
        let refs: Vec<&Tensor> = xs.iter().collect();
        bind(Prim::Concat { axis: a }, &refs)
    }

    /// Joins tensors of one shape and dtype along a new axis `axis` (an axis
    /// of the result, so `-1` appends it last).
    pub fn stack(xs: &[Tensor], axis: isize) -> Tensor {
        let Some(first) = xs.first() else {
            panic!("stack: needs at least one tensor");
        };
        let a = normalize_axis("stack", axis, first.ndim() + 1);
        for (i, x) in xs.iter().enumerate().skip(1) {
            if x.dtype() != first.dtype() {
                panic!(
                    "stack: dtype mismatch: tensor 0 is {} but tensor {i} is {}",
                    first.dtype(),
                    x.dtype()
                );
            }
            if x.shape() != first.shape() {
                panic!(
                    "stack: shapes {:?} (tensor 0) and {:?} (tensor {i}) must be equal",
                    first.shape(),
                    x.shape()
                );
            }
        }
        let parts: Vec<Tensor> = xs.iter().map(|x| x.unsqueeze(a as isize)).collect();
        Tensor::concatenate(&parts, a as isize)
    }

    /// Cuts `axis` into consecutive pieces of the given sizes, which must sum
    /// to the axis length. The pieces are views of `self`.
    ///
    /// For equal sections, use [`Tensor::chunk`].
    pub fn split(&self, sizes: &[usize], axis: isize) -> Vec<Tensor> {
        let a = normalize_axis("split", axis, self.ndim());
        let n = self.shape()[a];
        let total: usize = sizes.iter().sum();
        if total != n {
            panic!(
                "split: sizes {sizes:?} sum to {total} but axis {axis} of shape {:?} has length {n}",
                self.shape()
            );
        }
        let mut at = 0;
        sizes
            .iter()
            .map(|&k| {
                let part = self.narrow(a as isize, at, k);
                at += k;
                part
            })
            .collect()
    }

    /// Cuts `axis` into pieces of `ceil(len / n)` elements (views), the last
    /// one possibly smaller: `torch.chunk`. There may be fewer than `n`
    /// pieces (length 6 in 4 chunks gives 3 pieces of 2); an empty axis gives
    /// one empty piece.
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let x = Tensor::arange(0.0, 5.0, 1.0, DType::I32);
    /// let c: Vec<_> = x.chunk(2, 0).iter().map(|t| t.to_vec::<i32>()).collect();
    /// assert_eq!(c, vec![vec![0, 1, 2], vec![3, 4]]);
    /// ```
    pub fn chunk(&self, n: usize, axis: isize) -> Vec<Tensor> {
        if n == 0 {
            panic!("chunk: the number of chunks must be positive, got 0");
        }
        let a = normalize_axis("chunk", axis, self.ndim());
        let len = self.shape()[a];
        if len == 0 {
            return vec![self.clone()];
        }
        let size = len.div_ceil(n);
        let sizes: Vec<usize> = (0..len.div_ceil(size))
            .map(|i| size.min(len - i * size))
            .collect();
        self.split(&sizes, a as isize)
    }

    /// Repeats each element `repeats` times along `axis`: `numpy.repeat`
    /// (`[1, 2]` twice gives `[1, 1, 2, 2]`). With `repeats == 1` the result
    /// may share storage with `self` (as `reshape` does); otherwise it is fresh.
    pub fn repeat(&self, repeats: usize, axis: isize) -> Tensor {
        let a = normalize_axis("repeat", axis, self.ndim());
        let mut wide = self.shape().to_vec();
        wide.insert(a + 1, repeats);
        let mut out = self.shape().to_vec();
        out[a] *= repeats;
        self.unsqueeze(a as isize + 1)
            .broadcast_to(&wide)
            .reshape(&out)
    }

    /// Repeats the whole tensor `reps[i]` times along axis `i`: `numpy.tile`.
    /// Shorter `reps` are padded with leading 1s; a longer one gives the
    /// tensor leading size-1 axes first. When every rep is 1 the result may
    /// share storage with `self` (as `reshape` does); otherwise it is fresh.
    pub fn tile(&self, reps: &[usize]) -> Tensor {
        let n = self.ndim().max(reps.len());
        let mut shape = vec![1; n - self.ndim()];
        shape.extend_from_slice(self.shape());
        let mut r = vec![1; n - reps.len()];
        r.extend_from_slice(reps);
        // [1, s0, 1, s1, ...] broadcast to [r0, s0, r1, s1, ...].
        let split: Vec<usize> = shape.iter().flat_map(|&s| [1, s]).collect();
        let wide: Vec<usize> = (0..n).flat_map(|i| [r[i], shape[i]]).collect();
        let out: Vec<usize> = (0..n).map(|i| r[i] * shape[i]).collect();
        self.reshape(&split).broadcast_to(&wide).reshape(&out)
    }

    /// Rotates the elements of `axis` by `shift` places (`numpy.roll` along
    /// one axis): element `i` moves to `(i + shift) mod len`. A fresh tensor.
    pub fn roll(&self, shift: isize, axis: isize) -> Tensor {
        let a = normalize_axis("roll", axis, self.ndim());
        let n = self.shape()[a];
        let k = if n == 0 {
            0
        } else {
            shift.rem_euclid(n as isize) as usize
        };
        let ai = a as isize;
        Tensor::concatenate(&[self.narrow(ai, n - k, k), self.narrow(ai, 0, n - k)], ai)
    }
}
