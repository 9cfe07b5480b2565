//! Sorting: `sort`, `argsort` and `top_k`. The permutations are integer
//! primitives (`Prim::Argsort`, `Prim::TopK`, no derivative); the values
//! are taken with `Gather` (take_along_axis), so gradients flow to the
//! selected elements and batching comes from `Gather`'s rule.
//!
//! The order is JAX's: stable in both directions (equal keys keep their
//! order), NaN last ascending and first descending, -0.0 equal to 0.0.

use crate::prim::Prim;
use crate::shape::normalize_axis;
use crate::tensor::Tensor;
use crate::trace::bind;

impl Tensor {
    /// The elements sorted along `axis` (stable; ascending with NaN last,
    /// or `descending` with NaN first; -0.0 and 0.0 are equal). Every dtype.
    /// Gradients flow to the elements at their new positions.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[3.0f32, f32::NAN, 1.0, 2.0], &[4]);
    /// let s = x.sort(-1, false).to_vec::<f32>();
    /// assert_eq!(&s[..3], &[1.0, 2.0, 3.0]);
    /// assert!(s[3].is_nan());
    /// assert_eq!(x.sort(0, true).to_vec::<f32>()[1..], [3.0, 2.0, 1.0]);
    /// ```
    pub fn sort(&self, axis: isize, descending: bool) -> Tensor {
        let a = self.sort_axis("sort", axis);
        let idx = bind(
            Prim::Argsort {
                axis: a,
                descending,
            },
            &[self],
        );
        self.take_along_axis(&idx, a as isize)
    }

    /// The stable permutation (`I32`) that sorts along `axis`, in the order
    /// of [`Tensor::sort`]: `x.take_along_axis(&x.argsort(a, d), a)` is
    /// `x.sort(a, d)`. Equal elements keep their order in both directions.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[2i32, 1, 2, 0], &[4]);
    /// assert_eq!(x.argsort(0, false).to_vec::<i32>(), vec![3, 1, 0, 2]);
    /// assert_eq!(x.argsort(0, true).to_vec::<i32>(), vec![0, 2, 1, 3]);
    /// ```
    pub fn argsort(&self, axis: isize, descending: bool) -> Tensor {
        let a = self.sort_axis("argsort", axis);
        bind(
            Prim::Argsort {
                axis: a,
                descending,
            },
            &[self],
        )
    }

    /// The `k` largest elements along the last axis, largest first, and
    /// their indices (`I32`): ties go to the lower index, NaN counts as the
    /// largest (the first `k` of `sort(-1, true)`). Gradients flow to the
    /// selected elements.
    ///
    /// ```
    /// use nx::Tensor;
    /// let x = Tensor::from_slice(&[1.0f32, 5.0, 3.0, 5.0], &[4]);
    /// let (v, i) = x.top_k(2);
    /// assert_eq!(v.to_vec::<f32>(), vec![5.0, 5.0]);
    /// assert_eq!(i.to_vec::<i32>(), vec![1, 3]);
    /// ```
    pub fn top_k(&self, k: usize) -> (Tensor, Tensor) {
        if self.ndim() == 0 {
            panic!("top_k: expects a tensor of rank at least 1, got a scalar");
        }
        let n = self.shape()[self.ndim() - 1];
        if k > n {
            panic!(
                "top_k: k = {k} is larger than the last axis (size {n}) of shape {:?}",
                self.shape()
            );
        }
        let idx = bind(Prim::TopK { k }, &[self]);
        (self.take_along_axis(&idx, -1), idx)
    }

    /// `axis` normalized for a sort of `self` (rank at least 1, sizes that
    /// fit `I32` indices).
    fn sort_axis(&self, op: &str, axis: isize) -> usize {
        if self.ndim() == 0 {
            panic!("{op}: expects a tensor of rank at least 1, got a scalar");
        }
        let a = normalize_axis(op, axis, self.ndim());
        if self.shape()[a] > i32::MAX as usize {
            panic!(
                "{op}: axis {a} has {} elements, more than I32 indices can address",
                self.shape()[a]
            );
        }
        a
    }
}
