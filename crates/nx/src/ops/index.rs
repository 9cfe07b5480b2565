//! Indexing: take, take_along_axis, gather, scatter_add, index_add,
//! segment_sum, one_hot.
//!
//! All of them reshape and broadcast their operands into the form the
//! `Gather` and `ScatterAdd` primitives take (an index tensor of the data's
//! rank whose sizes match the data's off the indexed axis), as views. Index
//! tensors are I32 or I64; negative indices count from the end (numpy), and
//! an index outside `[-n, n)` panics when the kernel reads it, naming the
//! primitive (`gather` or `scatter_add`), the index and the axis size
//! (under `rune::jit`, with the same message, before any kernel runs).

use super::{check_same_dtype, require_index};
use crate::prim::{F64Bits, Prim};
use crate::shape::{normalize_axis, try_broadcast_shapes};
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

impl Tensor {
    /// Numpy's `take` along `axis`: picks the entries `idx` (any shape) of
    /// `axis`, so the result's shape is `shape[..axis] ++ idx.shape ++
    /// shape[axis + 1..]`. Negative indices count from the end.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[10.0f32, 11.0, 12.0, 20.0, 21.0, 22.0], &[2, 3]);
    /// let i = Tensor::from_slice(&[2i64, 0, -1], &[3]);
    /// let y = x.take(&i, 1);
    /// assert_eq!(y.shape(), &[2, 3]);
    /// assert_eq!(y.to_vec::<f32>(), vec![12.0, 10.0, 12.0, 22.0, 20.0, 22.0]);
    /// ```
    pub fn take(&self, idx: &Tensor, axis: isize) -> Tensor {
        require_index("take", idx);
        let a = normalize_axis("take", axis, self.ndim());
        if idx.ndim() == 0 {
            return self
                .take(&idx.reshape(&[1]), a as isize)
                .squeeze(a as isize);
        }
        let shape = self.shape();
        let (pre, post) = (&shape[..a], &shape[a + 1..]);
        // The gather reads `self` itself along `axis` by the indices
        // flattened to k and broadcast over the other axes; the result
        // [pre, k, post] is reshaped to pre ++ idx.shape ++ post. (With
        // `self` broadcast over idx's other axes instead, the gradient
        // would scatter into that larger shape and sum it back.)
        let k = idx.numel();
        let mut gathered: Vec<usize> = pre.to_vec();
        gathered.push(k);
        gathered.extend_from_slice(post);
        let mut is: Vec<usize> = vec![1; pre.len()];
        is.push(k);
        is.extend(std::iter::repeat(1).take(post.len()));
        let i = idx.reshape(&is).broadcast_unchecked(&gathered);
        let mut out: Vec<usize> = pre.to_vec();
        out.extend_from_slice(idx.shape());
        out.extend_from_slice(post);
        bind(Prim::Gather { axis: a }, &[self, &i]).reshape(&out)
    }

    /// Numpy's `take_along_axis`: `out[.., j, ..] = self[.., idx[.., j, ..], ..]`
    /// along `axis`. `idx` has `self`'s rank; off `axis`, the two shapes
    /// broadcast against each other (numpy's rule). The result has the
    /// broadcast shape, with `idx`'s size along `axis`.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 9.0, 2.0, 4.0], &[2, 3]);
    /// let i = Tensor::from_slice(&[1i32, 0], &[2, 1]);
    /// assert_eq!(x.take_along_axis(&i, 1).to_vec::<f32>(), vec![5.0, 9.0]);
    /// ```
    pub fn take_along_axis(&self, idx: &Tensor, axis: isize) -> Tensor {
        require_index("take_along_axis", idx);
        if idx.ndim() != self.ndim() {
            panic!(
                "take_along_axis: indices must have the same rank as the tensor, got shapes {:?} and {:?}",
                self.shape(),
                idx.shape()
            );
        }
        let a = normalize_axis("take_along_axis", axis, self.ndim());
        let (mut xs, mut is) = (self.shape().to_vec(), idx.shape().to_vec());
        xs[a] = 1;
        is[a] = 1;
        let mut common = try_broadcast_shapes(&xs, &is).unwrap_or_else(|| {
            panic!(
                "take_along_axis: shapes {:?} and {:?} cannot be broadcast together off axis {a}",
                self.shape(),
                idx.shape()
            )
        });
        common[a] = self.shape()[a];
        let x = self.broadcast_unchecked(&common);
        common[a] = idx.shape()[a];
        let i = idx.broadcast_unchecked(&common);
        bind(Prim::Gather { axis: a }, &[&x, &i])
    }

    /// PyTorch's `gather(dim, index)`: `out[.., j, ..] = self[.., index[.., j, ..], ..]`
    /// along `axis`. This is `take_along_axis` without broadcasting: `idx`
    /// has `self`'s rank and, off `axis`, sizes no larger than `self`'s (as
    /// in PyTorch, only the leading part of `self` is read then). The result
    /// has `idx`'s shape. Unlike PyTorch, negative indices count from the end.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    /// let i = Tensor::from_slice(&[0i64, 0, 1, 0], &[2, 2]);
    /// assert_eq!(x.gather(1, &i).to_vec::<i32>(), vec![1, 1, 4, 3]);
    /// ```
    pub fn gather(&self, axis: isize, idx: &Tensor) -> Tensor {
        require_index("gather", idx);
        if idx.ndim() != self.ndim() {
            panic!(
                "gather: indices must have the same rank as the tensor, got shapes {:?} and {:?}",
                self.shape(),
                idx.shape()
            );
        }
        let a = normalize_axis("gather", axis, self.ndim());
        let x = self.leading_part("gather", a, idx.shape(), "index", "input");
        bind(Prim::Gather { axis: a }, &[&x, idx])
    }

    /// PyTorch's `scatter_add(dim, index, src)`, returning a new tensor: a
    /// copy of `self` with `out[.., index[.., j, ..], ..] += src[.., j, ..]`
    /// along `axis` for every position of `index` (repeated indices add up).
    /// `idx` has `self`'s rank; its sizes are no larger than `src`'s, and
    /// off `axis` no larger than `self`'s (only the leading part of `src` is
    /// read). Negative indices count from the end.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::zeros(&[3], nx::DType::F32);
    /// let i = Tensor::from_slice(&[0i32, 2, 0], &[3]);
    /// let s = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    /// assert_eq!(x.scatter_add(0, &i, &s).to_vec::<f32>(), vec![4.0, 0.0, 2.0]);
    /// ```
    pub fn scatter_add(&self, axis: isize, idx: &Tensor, src: &Tensor) -> Tensor {
        require_index("scatter_add", idx);
        check_same_dtype("scatter_add", self, src);
        if idx.ndim() != self.ndim() || src.ndim() != self.ndim() {
            panic!(
                "scatter_add: the tensor, indices and source must have one rank, got shapes {:?}, {:?} and {:?}",
                self.shape(),
                idx.shape(),
                src.shape()
            );
        }
        let a = normalize_axis("scatter_add", axis, self.ndim());
        // Only the leading part of `src` (idx's shape) is scattered.
        let n = self.ndim();
        if (0..n).any(|d| idx.shape()[d] > src.shape()[d]) {
            panic!(
                "scatter_add: index shape {:?} exceeds the source shape {:?}",
                idx.shape(),
                src.shape()
            );
        }
        let src = src.leading(idx.shape());
        if (0..n).any(|d| d != a && idx.shape()[d] > self.shape()[d]) {
            panic!(
                "scatter_add: index shape {:?} exceeds the tensor shape {:?} off axis {a}",
                idx.shape(),
                self.shape()
            );
        }
        if (0..n).all(|d| d == a || idx.shape()[d] == self.shape()[d]) {
            return bind(Prim::ScatterAdd { axis: a }, &[self, idx, &src]);
        }
        // Index smaller than `self` off `axis`: scatter into zeros of the
        // leading part's shape, pad back to `self`'s shape and add.
        let mut part = idx.shape().to_vec();
        part[a] = self.shape()[a];
        let z = Tensor::zeros(&part, self.dtype());
        let s = bind(Prim::ScatterAdd { axis: a }, &[&z, idx, &src]);
        let hi: Vec<usize> = (0..n).map(|d| self.shape()[d] - part[d]).collect();
        let s = bind(
            Prim::Pad {
                lo: vec![0; n],
                hi,
                value: F64Bits(0.0),
            },
            &[&s],
        );
        bind(Prim::Binary(crate::prim::BinaryOp::Add), &[self, &s])
    }

    /// JAX's `x.at[idx].add(src)` along `axis` (PyTorch's `index_add`),
    /// returning a new tensor: a copy of `self` with `src[.., j, ..]` added
    /// into `self[.., idx[j], ..]` for every `j` in order (repeated indices
    /// add up). `idx` is a 1-D I32 or I64 tensor of length `k`; `src` has
    /// `self`'s dtype and shape except for size `k` along `axis`.
    ///
    /// Negative indices count from the end (numpy, as nx's other indexing
    /// operations); an index outside `[-n, n)` panics naming `scatter_add`,
    /// the index and the axis size (JAX's `.at[].add` drops such updates).
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    /// let i = Tensor::from_slice(&[2i32, 0, 2], &[3]);
    /// let s = Tensor::from_slice(&[10.0f32, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
    /// // Column j of s is added into column i[j] of x.
    /// let y = x.index_add(1, &i, &s);
    /// assert_eq!(y.to_vec::<f32>(), vec![21.0, 2.0, 43.0, 54.0, 5.0, 106.0]);
    /// ```
    pub fn index_add(&self, axis: isize, idx: &Tensor, src: &Tensor) -> Tensor {
        require_index("index_add", idx);
        check_same_dtype("index_add", self, src);
        if idx.ndim() != 1 {
            panic!(
                "index_add: indices must be 1-D, got shape {:?}",
                idx.shape()
            );
        }
        let a = normalize_axis("index_add", axis, self.ndim());
        let mut want = self.shape().to_vec();
        want[a] = idx.shape()[0];
        if src.shape() != want.as_slice() {
            panic!(
                "index_add: the source must have shape {want:?} (the tensor's {:?} with {} indices along axis {a}), got {:?}",
                self.shape(),
                idx.shape()[0],
                src.shape()
            );
        }
        let mut is = vec![1; self.ndim()];
        is[a] = idx.shape()[0];
        let i = idx.reshape(&is).broadcast_unchecked(&want);
        bind(Prim::ScatterAdd { axis: a }, &[self, &i, src])
    }

    /// One-hot encoding of an integer tensor as `F32`: shape `shape ++
    /// [num_classes]`, with 1 where the last index equals the value. Values
    /// outside `0..num_classes` (negative ones too) give a row of zeros, as
    /// `jax.nn.one_hot`.
    ///
    /// ```
    /// use nx::Tensor;
    /// let y = Tensor::from_slice(&[2i32, 0], &[2]).one_hot(3);
    /// assert_eq!(y.to_vec::<f32>(), vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
    /// ```
    pub fn one_hot(&self, num_classes: usize) -> Tensor {
        if !self.dtype().is_int() {
            panic!("one_hot: expects an integer tensor, got {}", self.dtype());
        }
        // Compare in i64 for narrow types, so that classes beyond the dtype's
        // range never match (an iota in the narrow type would wrap).
        let x = if self.dtype().size_in_bytes() < 8 {
            self.cast(DType::I64)
        } else {
            self.clone()
        };
        let classes = Tensor::iota(&[num_classes], 0, x.dtype());
        x.unsqueeze(-1).equal(&classes).cast(DType::F32)
    }

    /// The leading `shape` part of `self` (a slice view), checking that
    /// `shape` fits off `axis`.
    fn leading_part(&self, op: &str, axis: usize, shape: &[usize], what: &str, of: &str) -> Tensor {
        if (0..self.ndim()).any(|d| d != axis && shape[d] > self.shape()[d]) {
            panic!(
                "{op}: {what} shape {shape:?} exceeds the {of} shape {:?} off axis {axis}",
                self.shape()
            );
        }
        let mut want = shape.to_vec();
        want[axis] = self.shape()[axis];
        self.leading(&want)
    }

    /// `self[..shape[0], ..shape[1], ...]` (a view), `shape` fitting inside.
    fn leading(&self, shape: &[usize]) -> Tensor {
        if shape == self.shape() {
            return self.clone();
        }
        let n = self.ndim();
        bind(
            Prim::Slice {
                start: vec![0; n],
                end: shape.to_vec(),
                step: vec![1; n],
            },
            &[self],
        )
    }
}

/// JAX's `jax.ops.segment_sum`: the rows of `data` summed by segment.
/// `data` has shape `[N, ...]` and `segment_ids` is a 1-D I32 or I64
/// tensor of length `N`; the result has shape `[num_segments, ...]` and
/// `data`'s dtype, zeros where no row lands, with `data[i]` added into
/// `out[segment_ids[i]]` in order of `i` (so float sums round the same way
/// on every run, and under `rune::jit`). It is `scatter_add` along axis 0
/// into zeros, with the ids broadcast over `data`'s other axes.
///
/// Deviations from JAX, both the rule of nx's other indexing operations:
/// an id outside `[-num_segments, num_segments)` panics naming
/// `scatter_add`, the id and `num_segments` (JAX drops that row), and a
/// negative id counts from the end (`-1` is the last segment; JAX drops
/// it too). The ids need not be sorted (JAX's `indices_are_sorted` is only
/// a hint there).
///
/// ```
/// let data = nx::Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
/// let ids = nx::Tensor::from_slice(&[2i32, 0, 2], &[3]);
/// let s = nx::segment_sum(&data, &ids, 4);
/// assert_eq!(s.shape(), &[4, 2]);
/// assert_eq!(s.to_vec::<f32>(), vec![3.0, 4.0, 0.0, 0.0, 6.0, 8.0, 0.0, 0.0]);
/// ```
pub fn segment_sum(data: &Tensor, segment_ids: &Tensor, num_segments: usize) -> Tensor {
    require_index("segment_sum", segment_ids);
    if data.ndim() == 0 || segment_ids.ndim() != 1 || segment_ids.shape()[0] != data.shape()[0] {
        panic!(
            "segment_sum: expects data of shape [N, ...] and 1-D segment ids of length N, got shapes {:?} and {:?}",
            data.shape(),
            segment_ids.shape()
        );
    }
    let mut out = data.shape().to_vec();
    out[0] = num_segments;
    let zeros = Tensor::zeros(&out, data.dtype());
    let mut is = vec![1; data.ndim()];
    is[0] = data.shape()[0];
    let ids = segment_ids.reshape(&is).broadcast_unchecked(data.shape());
    bind(Prim::ScatterAdd { axis: 0 }, &[&zeros, &ids, data])
}
