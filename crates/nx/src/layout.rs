//! How a tensor's elements sit in its storage: shape, strides (in elements,
//! possibly zero or negative) and offset. Every movement operation that can be
//! a view is a function from one `Layout` to another here; nothing is copied.
//! Also the one rule for merging neighbouring dims that walk memory as one
//! ([`merge_dims`], [`merge_to_one`]), which the strided kernels and tolk's
//! loop nests use to shorten their loops.

use crate::shape::{contiguous_strides, numel};

/// Where each element of a concrete tensor lies in its storage: element
/// `idx` is at `offset + sum(idx[i] * strides[i])`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The size of each axis.
    pub shape: Vec<usize>,
    /// The step, in elements, between neighbours along each axis (zero for a
    /// broadcast axis, negative for a flipped one).
    pub strides: Vec<isize>,
    /// The storage index, in elements, of the first element.
    pub offset: usize,
}

impl Layout {
    /// The row-major layout of `shape` at offset 0.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// Row-major contiguous (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            return true;
        }
        let mut acc = 1isize;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.shape[i] as isize;
        }
        true
    }

    /// Storage index of the element at a multi-index.
    pub fn index_of(&self, idx: &[usize]) -> usize {
        let mut off = self.offset as isize;
        for (i, s) in idx.iter().zip(&self.strides) {
            off += *i as isize * s;
        }
        off as usize
    }

    /// Lowest and highest storage index touched (None when empty).
    pub fn span(&self) -> Option<(usize, usize)> {
        if self.numel() == 0 {
            return None;
        }
        let (mut lo, mut hi) = (self.offset as isize, self.offset as isize);
        for (&n, &s) in self.shape.iter().zip(&self.strides) {
            let ext = (n as isize - 1) * s;
            if ext < 0 {
                lo += ext
            } else {
                hi += ext
            }
        }
        Some((lo as usize, hi as usize))
    }

    /// The same elements under a new shape, if the strides allow it without a copy.
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        // An empty tensor touches no element: any strides will do.
        if self.is_contiguous() || self.numel() == 0 {
            return Some(Layout {
                shape: shape.to_vec(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        // Split/merge runs of axes that are contiguous with one another
        // (numpy's `_attempt_nocopy_reshape`).
        let old: Vec<(usize, isize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&n, _)| n != 1)
            .map(|(&n, &s)| (n, s))
            .collect();
        let mut new_strides = vec![0isize; shape.len()];
        let (mut oi, mut ni) = (0usize, 0usize);
        while ni < shape.len() && shape[ni] == 1 {
            ni += 1;
        }
        while oi < old.len() && ni < shape.len() {
            let (mut op, mut np) = (old[oi].0, shape[ni]);
            let (oj0, nj0) = (oi, ni);
            let (mut oj, mut nj) = (oi + 1, ni + 1);
            while op != np {
                if np < op {
                    np *= shape[nj];
                    nj += 1;
                } else {
                    op *= old[oj].0;
                    oj += 1;
                }
            }
            for k in oj0..oj - 1 {
                if old[k].1 != old[k + 1].1 * old[k + 1].0 as isize {
                    return None;
                }
            }
            // Innermost stride of the run, then build outward.
            new_strides[nj - 1] = old[oj - 1].1;
            for k in (nj0..nj - 1).rev() {
                new_strides[k] = new_strides[k + 1] * shape[k + 1] as isize;
            }
            oi = oj;
            ni = nj;
            while ni < shape.len() && shape[ni] == 1 {
                ni += 1;
            }
        }
        if oi != old.len() || shape[ni..].iter().any(|&n| n != 1) {
            return None;
        }
        Some(Layout {
            shape: shape.to_vec(),
            strides: new_strides,
            offset: self.offset,
        })
    }

    /// The view whose axis `i` is axis `perm[i]` of this one.
    pub fn permute(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// Numpy broadcasting to `shape` (dims aligned on the right; size-1 and
    /// missing dims get stride 0). The caller has checked compatibility.
    pub fn broadcast(&self, shape: &[usize]) -> Layout {
        let lead = shape.len() - self.shape.len();
        let mut strides = vec![0isize; shape.len()];
        for (i, (&n, &s)) in self.shape.iter().zip(&self.strides).enumerate() {
            strides[lead + i] = if n == 1 && shape[lead + i] != 1 { 0 } else { s };
        }
        Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        }
    }

    /// Elements `start, start + step, ...` below `end` on each axis (step > 0).
    pub fn slice(&self, start: &[usize], end: &[usize], step: &[usize]) -> Layout {
        let mut offset = self.offset as isize;
        let mut shape = Vec::with_capacity(self.shape.len());
        let mut strides = Vec::with_capacity(self.shape.len());
        for i in 0..self.shape.len() {
            let n = if end[i] > start[i] {
                (end[i] - start[i]).div_ceil(step[i])
            } else {
                0
            };
            if n > 0 {
                offset += start[i] as isize * self.strides[i];
            }
            shape.push(n);
            strides.push(self.strides[i] * step[i] as isize);
        }
        // An empty view reads nothing; offset 0 keeps every later slice of
        // its storage in bounds.
        let offset = if shape.contains(&0) {
            0
        } else {
            offset as usize
        };
        Layout {
            shape,
            strides,
            offset,
        }
    }

    /// Reverses the given axes.
    pub fn flip(&self, axes: &[usize]) -> Layout {
        let mut l = self.clone();
        let mut offset = l.offset as isize;
        for &a in axes {
            if l.shape[a] > 0 {
                offset += (l.shape[a] as isize - 1) * l.strides[a];
            }
            l.strides[a] = -l.strides[a];
        }
        l.offset = if l.shape.contains(&0) {
            0
        } else {
            offset as usize
        };
        l
    }
}

/// Dims merged where every operand steps through them as one (see
/// [`merge_dims`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergedDims {
    /// The merged sizes, outermost first; empty when every dim had size 1
    /// (a single element).
    pub shape: Vec<usize>,
    /// Per operand, its stride along each merged dim (the stride of the
    /// innermost dim merged into it).
    pub strides: Vec<Vec<isize>>,
}

/// Merges the dims of `shape` that every operand walks as one: size-1 dims
/// are dropped, then a dim merges into the next one when, for every
/// operand, its stride is the next dim's stride times the next dim's size
/// (a full pass over the inner dim lands where one step of the outer one
/// does; two broadcast dims, stride 0, merge too). `strides` holds one
/// stride list per operand, each as long as `shape`. The result visits the
/// same elements in the same (row-major) order with fewer, longer loops.
///
/// ```
/// use nx::layout::merge_dims;
/// // A contiguous [2, 3, 4] and its broadcast of a [4] row: the outer two
/// // dims merge for both, the row stays apart for the broadcast operand.
/// let m = merge_dims(&[2, 3, 4], &[&[12, 4, 1], &[0, 0, 1]]);
/// assert_eq!(m.shape, vec![6, 4]);
/// assert_eq!(m.strides, vec![vec![4, 1], vec![0, 1]]);
/// ```
pub fn merge_dims(shape: &[usize], strides: &[&[isize]]) -> MergedDims {
    let mut merged = MergedDims {
        shape: Vec::with_capacity(shape.len()),
        strides: vec![Vec::with_capacity(shape.len()); strides.len()],
    };
    for (i, &n) in shape.iter().enumerate().filter(|&(_, &n)| n != 1) {
        let mergeable = !merged.shape.is_empty()
            && merged
                .strides
                .iter()
                .zip(strides)
                .all(|(m, s)| *m.last().expect("one stride per dim") == s[i] * n as isize);
        if mergeable {
            *merged.shape.last_mut().expect("checked non-empty") *= n;
            for (m, s) in merged.strides.iter_mut().zip(strides) {
                *m.last_mut().expect("one stride per dim") = s[i];
            }
        } else {
            merged.shape.push(n);
            for (m, s) in merged.strides.iter_mut().zip(strides) {
                m.push(s[i]);
            }
        }
    }
    merged
}

/// All of `shape`'s dims as one `(size, stride)` for one operand's
/// `strides`, when they merge into one by [`merge_dims`]'s rule; `None`
/// when they do not. No dims, or only size-1 ones, give `(1, 0)` (an empty
/// dim gives `(0, its stride)`).
///
/// ```
/// use nx::layout::merge_to_one;
/// assert_eq!(merge_to_one(&[2, 1, 3], &[3, 99, 1]), Some((6, 1)));
/// assert_eq!(merge_to_one(&[2, 3], &[1, 2]), None); // transposed
/// ```
pub fn merge_to_one(shape: &[usize], strides: &[isize]) -> Option<(usize, isize)> {
    merge_pairs_to_one(shape.iter().copied().zip(strides.iter().copied()))
}

/// [`merge_to_one`] over `(size, stride)` pairs, outermost first, without
/// allocating (a matrix product plans with it on every call).
///
/// ```
/// use nx::layout::merge_pairs_to_one;
/// assert_eq!(merge_pairs_to_one([(2, 3), (1, 99), (3, 1)]), Some((6, 1)));
/// assert_eq!(merge_pairs_to_one([(2, 1), (3, 2)]), None); // transposed
/// assert_eq!(merge_pairs_to_one([]), Some((1, 0)));
/// ```
pub fn merge_pairs_to_one(
    dims: impl IntoIterator<Item = (usize, isize)>,
) -> Option<(usize, isize)> {
    let mut merged: Option<(usize, isize)> = None;
    for (n, s) in dims.into_iter().filter(|&(n, _)| n != 1) {
        merged = Some(match merged {
            None => (n, s),
            // [`merge_dims`]'s rule: the outer stride steps over the inner dim.
            Some((m, outer)) if outer == s * n as isize => (m * n, s),
            Some(_) => return None,
        });
    }
    Some(merged.unwrap_or((1, 0)))
}
