//! Walking strided operands in row-major order. Kernels with a general
//! (non-contiguous) path use `Walk`: it collapses dimensions that are
//! contiguous in every operand (`crate::layout::merge_dims`), then visits the remaining innermost rows with
//! each operand's starting offset, so the inner loop is a plain strided loop.

use crate::dtype::Element;
use crate::layout::merge_dims;
use crate::tensor::Value;

/// Row-major traversal of `shape` for `K` operands with their own strides.
pub(crate) struct Walk<const K: usize> {
    /// Collapsed shape; the last entry is the row length (at least one entry).
    shape: Vec<usize>,
    strides: [Vec<isize>; K],
    offsets: [isize; K],
}

impl<const K: usize> Walk<K> {
    pub fn new(shape: &[usize], strides: [&[isize]; K], offsets: [usize; K]) -> Walk<K> {
        let merged = merge_dims(shape, &strides);
        let mut cshape = merged.shape;
        let mut per_operand = merged.strides.into_iter();
        let mut cstrides: [Vec<isize>; K] =
            std::array::from_fn(|_| per_operand.next().expect("one stride list per operand"));
        if cshape.is_empty() {
            cshape.push(if shape.contains(&0) { 0 } else { 1 });
            for s in cstrides.iter_mut() {
                s.push(0);
            }
        }
        Walk {
            shape: cshape,
            strides: cstrides,
            offsets: offsets.map(|o| o as isize),
        }
    }

    /// Length of one row.
    pub fn row_len(&self) -> usize {
        *self.shape.last().unwrap()
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.shape[..self.shape.len() - 1].iter().product()
    }

    /// Each operand's stride along a row.
    pub fn row_strides(&self) -> [isize; K] {
        std::array::from_fn(|k| *self.strides[k].last().unwrap())
    }

    /// Calls `f(row, offsets)` for rows `r0..r1`, with each operand's offset
    /// of the row's first element.
    pub fn for_rows(&self, r0: usize, r1: usize, mut f: impl FnMut(usize, [isize; K])) {
        if r0 >= r1 || self.row_len() == 0 {
            return;
        }
        let outer = &self.shape[..self.shape.len() - 1];
        let nd = outer.len();
        let mut idx = vec![0usize; nd];
        let mut rem = r0;
        for d in (0..nd).rev() {
            idx[d] = rem % outer[d];
            rem /= outer[d];
        }
        let mut offs: [isize; K] = std::array::from_fn(|k| {
            self.offsets[k]
                + (0..nd)
                    .map(|d| idx[d] as isize * self.strides[k][d])
                    .sum::<isize>()
        });
        for r in r0..r1 {
            f(r, offs);
            // Increment the multi-index (odometer) and the offsets with it.
            for d in (0..nd).rev() {
                idx[d] += 1;
                for k in 0..K {
                    offs[k] += self.strides[k][d];
                }
                if idx[d] < outer[d] {
                    break;
                }
                for k in 0..K {
                    offs[k] -= self.strides[k][d] * outer[d] as isize;
                }
                idx[d] = 0;
            }
        }
    }
}

/// The elements of a concrete tensor in row-major order.
pub(crate) fn to_vec<T: Element>(v: &Value) -> Vec<T> {
    let data = v.storage.read::<T>();
    let n = v.layout.numel();
    if n == 0 {
        // The offset of an empty view may lie past the end of its storage.
        return Vec::new();
    }
    if v.layout.is_contiguous() {
        return data[v.layout.offset..v.layout.offset + n].to_vec();
    }
    let mut out = Vec::with_capacity(n);
    let walk = Walk::new(&v.layout.shape, [&v.layout.strides], [v.layout.offset]);
    let [s] = walk.row_strides();
    let len = walk.row_len();
    walk.for_rows(0, walk.rows(), |_, [o]| {
        for i in 0..len as isize {
            out.push(data[(o + i * s) as usize]);
        }
    });
    out
}
