//! Linear algebra: matmul, dot, outer, tril, triu.
//!
//! Products bind `Prim::DotGeneral` on views (broadcasts, reshapes and
//! unit axes cost no copies; the kernel multiplies transposed and sliced
//! operands in place). Operands must share one dtype.

use super::check_same_dtype;
use crate::prim::{BinaryOp, Prim};
use crate::shape::{numel, try_broadcast_shapes};
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

fn dot_general(a: &Tensor, b: &Tensor, batch: &[usize], ca: usize, cb: usize) -> Tensor {
    bind(
        Prim::DotGeneral {
            lhs_batch: batch.to_vec(),
            rhs_batch: batch.to_vec(),
            lhs_contract: vec![ca],
            rhs_contract: vec![cb],
        },
        &[a, b],
    )
}

impl Tensor {
    /// Numpy's `matmul`: the matrix product over the last two axes, batched
    /// over the leading ones, which broadcast. A 1-D `self` is a row (a
    /// leading 1, removed from the result), a 1-D `other` a column (a
    /// trailing 1, removed). 0-d operands are refused.
    ///
    /// ```
    /// use nx::Tensor;
    /// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// let v = Tensor::from_slice(&[1.0f32, 1.0], &[2]);
    /// assert_eq!(a.matmul(&v).to_vec::<f32>(), vec![3.0, 7.0]);
    /// assert_eq!(a.matmul(&a).shape(), &[2, 2]);
    /// ```
    pub fn matmul(&self, other: &Tensor) -> Tensor {
        check_same_dtype("matmul", self, other);
        let (sa, sb) = (self.shape(), other.shape());
        if sa.is_empty() || sb.is_empty() {
            panic!("matmul: 0-d operands are not allowed, got shapes {sa:?} and {sb:?}");
        }
        let a = if sa.len() == 1 {
            self.unsqueeze(0)
        } else {
            self.clone()
        };
        let b = if sb.len() == 1 {
            other.unsqueeze(-1)
        } else {
            other.clone()
        };
        let (na, nb) = (a.ndim(), b.ndim());
        let (m, ka) = (a.shape()[na - 2], a.shape()[na - 1]);
        let (kb, n) = (b.shape()[nb - 2], b.shape()[nb - 1]);
        if ka != kb {
            panic!("matmul: shapes {sa:?} and {sb:?} are not aligned: {ka} != {kb}");
        }
        let (ba, bb) = (&a.shape()[..na - 2], &b.shape()[..nb - 2]);
        let batch = try_broadcast_shapes(ba, bb).unwrap_or_else(|| {
            panic!(
                "matmul: the batch dimensions of shapes {sa:?} and {sb:?} cannot be broadcast together"
            )
        });
        let nbt = batch.len();
        let with = |tail: [usize; 2]| -> Vec<usize> {
            let mut s = batch.clone();
            s.extend(tail);
            s
        };
        let a = a.broadcast_unchecked(&with([m, ka]));
        let out = if numel(bb) == 1 {
            // One rhs matrix for every batch: the batch axes are free axes of
            // the lhs, so a contiguous lhs makes a single large product.
            let b = b.reshape(&[kb, n]);
            dot_general(&a, &b, &[], nbt + 1, 0)
        } else {
            let b = b.broadcast_unchecked(&with([kb, n]));
            let bax: Vec<usize> = (0..nbt).collect();
            dot_general(&a, &b, &bax, nbt + 1, nbt)
        };
        let mut shape = batch.clone();
        if sa.len() > 1 {
            shape.push(m);
        }
        if sb.len() > 1 {
            shape.push(n);
        }
        out.reshape(&shape)
    }

    /// Numpy's `dot`: for 1-D·1-D the inner product (0-d), for 2-D·2-D the
    /// matrix product, for N-D·1-D the sum over the last axes, and in
    /// general the sum over the last axis of `self` and the second-to-last of
    /// `other` (the result has `self`'s other axes, then `other`'s). A 0-d
    /// operand multiplies elementwise.
    ///
    /// ```
    /// use nx::Tensor;
    /// let u = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3]);
    /// assert_eq!(u.dot(&u).item::<f64>(), 14.0);
    /// ```
    pub fn dot(&self, other: &Tensor) -> Tensor {
        check_same_dtype("dot", self, other);
        if self.ndim() == 0 || other.ndim() == 0 {
            return self.mul(other);
        }
        let ca = self.ndim() - 1;
        let cb = other.ndim().saturating_sub(2);
        let (ka, kb) = (self.shape()[ca], other.shape()[cb]);
        if ka != kb {
            panic!(
                "dot: shapes {:?} and {:?} are not aligned: {ka} (dim {ca}) != {kb} (dim {cb})",
                self.shape(),
                other.shape()
            );
        }
        dot_general(self, other, &[], ca, cb)
    }

    /// Numpy's `outer`: `out[i, j] = a[i] * b[j]` over the flattened inputs.
    ///
    /// ```
    /// use nx::Tensor;
    /// let a = Tensor::from_slice(&[1i32, 2], &[2]);
    /// let b = Tensor::from_slice(&[1i32, 10, 100], &[3]);
    /// assert_eq!(a.outer(&b).to_vec::<i32>(), vec![1, 10, 100, 2, 20, 200]);
    /// ```
    pub fn outer(&self, other: &Tensor) -> Tensor {
        check_same_dtype("outer", self, other);
        let (m, n) = (self.numel(), other.numel());
        let a = self.reshape(&[m, 1]).broadcast_unchecked(&[m, n]);
        let b = other.reshape(&[1, n]).broadcast_unchecked(&[m, n]);
        bind(Prim::Binary(BinaryOp::Mul), &[&a, &b])
    }

    /// The lower triangle of the last two axes: entries `[i, j]` with
    /// `j <= i + k` are kept, the others zeroed (`k > 0` keeps diagonals
    /// above the main one, `k < 0` drops diagonals below it).
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let x = Tensor::ones(&[2, 2], DType::I32);
    /// assert_eq!(x.tril(0).to_vec::<i32>(), vec![1, 0, 1, 1]);
    /// ```
    pub fn tril(&self, k: isize) -> Tensor {
        self.triangle("tril", k, true)
    }

    /// The upper triangle of the last two axes: entries `[i, j]` with
    /// `j >= i + k` are kept, the others zeroed.
    pub fn triu(&self, k: isize) -> Tensor {
        self.triangle("triu", k, false)
    }

    fn triangle(&self, op: &str, k: isize, lower: bool) -> Tensor {
        let nd = self.ndim();
        if nd < 2 {
            panic!(
                "{op}: expects a tensor of rank 2 or more, got shape {:?}",
                self.shape()
            );
        }
        let (r, c) = (self.shape()[nd - 2], self.shape()[nd - 1]);
        let rows = Tensor::iota(&[r, c], 0, DType::I64);
        let cols = Tensor::iota(&[r, c], 1, DType::I64);
        let diag = &rows + k as f64;
        let keep = if lower {
            cols.less_equal(&diag)
        } else {
            cols.greater_equal(&diag)
        };
        Tensor::where_(&keep, self, &self.scalar_like(0.0))
    }
}
