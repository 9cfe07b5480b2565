//! `vmap` and `vmap_with`: map a function over an axis of its parameter
//! leaves by running it once under the batch trace (`batch.rs`).

use crate::batch::BatchTrace;
use crate::scope::enter;
use nx::{Ptree, Tensor};

/// Options of [`vmap_with`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmapOpts {
    /// The mapped axis of each parameter leaf, in traversal order: `Some(i)`
    /// maps axis `i` (negative from the end), `None` passes the leaf whole.
    /// `None` here maps axis 0 of every leaf.
    pub in_axes: Option<Vec<Option<isize>>>,
    /// Where the batch axis goes in every output leaf (negative from the end).
    pub out_axis: isize,
}

/// Maps `f` over axis 0 of every leaf of `params`: `f` sees each example
/// without its mapped axis, and every output leaf gains a batch axis at 0.
/// Values `f` closes over are constants of the map; an output that does not
/// depend on the mapped inputs is broadcast along the batch axis.
///
/// ```
/// use rune::prelude::*;
/// let xs = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
/// // Each example is a [2] vector; its sum is a scalar: the result is [3].
/// let sums = rune::vmap(|x: &Tensor| { assert_eq!(x.shape(), &[2]); x.sum_all() }, &xs);
/// assert_eq!(sums.to_vec::<f32>(), vec![3.0, 7.0, 11.0]);
/// ```
pub fn vmap<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, params: &P) -> Q {
    vmap_with(f, params, VmapOpts::default())
}

/// [`vmap`] with explicit `in_axes` and `out_axis`.
///
/// Panics if `in_axes` does not have one entry per leaf, maps no leaf, names
/// an axis out of bounds (a scalar leaf has none), or if the mapped axes'
/// sizes disagree.
///
/// ```
/// use rune::prelude::*;
/// let w = Tensor::from_slice(&[1.0f32, 10.0], &[2]);
/// let xs = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
/// // Map over the columns of xs (axis 1); w is shared.
/// let out = rune::vmap_with(
///     |(w, x): &(Tensor, Tensor)| w * x,
///     &(w, xs),
///     rune::VmapOpts { in_axes: Some(vec![None, Some(1)]), out_axis: 1 },
/// );
/// assert_eq!(out.shape(), &[2, 3]);
/// assert_eq!(out.to_vec::<f32>(), vec![1.0, 2.0, 3.0, 40.0, 50.0, 60.0]);
/// ```
pub fn vmap_with<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, params: &P, opts: VmapOpts) -> Q {
    let leaves = params.leaves();
    let axes = opts.in_axes.unwrap_or_else(|| vec![Some(0); leaves.len()]);
    if axes.len() != leaves.len() {
        panic!(
            "vmap: in_axes has {} entries but the parameters have {} leaves (one entry per leaf, in traversal order)",
            axes.len(),
            leaves.len()
        );
    }
    if axes.iter().all(Option::is_none) {
        panic!("vmap: in_axes maps no leaf (every entry is None); map at least one axis");
    }
    let mut size: Option<(usize, usize)> = None; // (size, leaf)
    let axes: Vec<Option<usize>> = leaves
        .iter()
        .zip(&axes)
        .enumerate()
        .map(|(i, (leaf, axis))| {
            let axis = (*axis)?;
            let nd = leaf.ndim() as isize;
            if nd == 0 {
                panic!("vmap: leaf {i} is a scalar (shape []): it has no axis {axis} to map");
            }
            let a = if axis < 0 { axis + nd } else { axis };
            if a < 0 || a >= nd {
                panic!(
                    "vmap: in_axes entry {axis} for leaf {i} is out of bounds for its shape {:?}",
                    leaf.shape()
                );
            }
            let n = leaf.shape()[a as usize];
            match size {
                None => size = Some((n, i)),
                Some((m, j)) if m != n => panic!(
                    "vmap: mapped axis sizes disagree: leaf {j} has {m} along its mapped axis, leaf {i} has {n}"
                ),
                _ => {}
            }
            Some(a as usize)
        })
        .collect();
    let size = size.expect("at least one mapped leaf").0;

    let (trace, scope) = enter(|level, tag| BatchTrace { level, tag, size });
    let traced: Vec<Tensor> = leaves
        .iter()
        .zip(&axes)
        .map(|(leaf, axis)| match axis {
            Some(a) => trace.pack(leaf.moveaxis(*a as isize, 0)),
            None => leaf.clone(),
        })
        .collect();
    let out = f(&params.with_leaves(&traced));
    let results: Vec<Tensor> = out
        .leaves()
        .iter()
        .map(|t| {
            let (value, batched) = trace.unpack(t);
            let value = if batched {
                value
            } else {
                trace.lift(&value, false).contiguous()
            };
            let nd = value.ndim() as isize;
            let out_axis = if opts.out_axis < 0 {
                opts.out_axis + nd
            } else {
                opts.out_axis
            };
            if out_axis < 0 || out_axis >= nd {
                panic!(
                    "vmap: out_axis {} is out of bounds for an output of shape {:?} (with the batch axis)",
                    opts.out_axis,
                    value.shape()
                );
            }
            value.moveaxis(0, out_axis)
        })
        .collect();
    drop(scope);
    out.with_leaves(&results)
}
