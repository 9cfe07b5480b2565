//! Clipping: `clip` (each element to ±max_delta) and `clip_by_global_norm`
//! (every leaf scaled by one factor when the norm over all leaves exceeds
//! the maximum), as Optax's.

use super::state::Leaves;
use super::transform::Transform;
use super::Optimizer;
use nx::{DType, Tensor, Tree};

#[derive(Debug)]
struct Clip {
    max_delta: f64,
}

impl Transform for Clip {
    fn kind(&self) -> String {
        "clip".into()
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        _: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        let clipped = updates
            .iter()
            .map(|g| g.clamp(-self.max_delta, self.max_delta))
            .collect();
        (clipped, state.clone())
    }
}

/// Each update element clipped to `[-max_delta, max_delta]` (Optax's
/// `clip`). Panics when `max_delta` is negative.
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = Tensor::from_slice(&[-3.0f32, 0.5, 2.0], &[3]);
/// let opt = optim::clip(1.0);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert_eq!(u.to_vec::<f32>(), vec![-1.0, 0.5, 1.0]);
/// ```
pub fn clip(max_delta: f64) -> Optimizer {
    assert!(
        max_delta >= 0.0,
        "optim::clip: max_delta must be non-negative, got {max_delta}"
    );
    Optimizer::new(Clip { max_delta })
}

#[derive(Debug)]
struct ClipByGlobalNorm {
    max_norm: f64,
}

impl Transform for ClipByGlobalNorm {
    fn kind(&self) -> String {
        "clip_by_global_norm".into()
    }

    fn update(
        &self,
        updates: Vec<Tensor>,
        state: &Tree,
        _: &Leaves<'_>,
        _: &Tree,
    ) -> (Vec<Tensor>, Tree) {
        if updates.is_empty() {
            return (updates, state.clone());
        }
        let norm = global_norm(&updates);
        // Optax selects `g` or `g / norm * max_norm` per leaf; the factor is
        // computed once here so that eagerly each leaf costs one product
        // (the same value up to the rounding of max_norm / norm).
        let within = norm.less(&norm.scalar_like(self.max_norm));
        let factor = Tensor::where_(&within, &norm.scalar_like(1.0), &(self.max_norm / &norm));
        let clipped = updates
            .iter()
            .map(|g| g * &factor.cast(g.dtype()))
            .collect();
        (clipped, state.clone())
    }
}

/// The norm over every leaf: the square root of the sum, leaf by leaf in
/// order (as Optax's `sum` over the leaves), of each leaf's sum of squares
/// (F64 when a leaf is F64, else F32).
///
/// The leaves' sums are added as scalars, not concatenated and summed:
/// tolk fuses a concatenation into the reduction that reads it, and each
/// element of a 96-way concatenation then selects among 96 inputs (W19's
/// update spent 1.1 of its 2.3 ms there).
fn global_norm(leaves: &[Tensor]) -> Tensor {
    let dtype = if leaves.iter().any(|g| g.dtype() == DType::F64) {
        DType::F64
    } else {
        DType::F32
    };
    leaves
        .iter()
        .map(|g| partial_sums_of_squares(g).cast(dtype).sum_all())
        .reduce(|a, b| a + b)
        .unwrap_or_else(|| Tensor::zeros(&[], dtype))
        .sqrt()
}

/// The sums of `g²` over each row of `g` (a vector's: its one sum, as
/// `[1]`). Summed by rows rather than whole: under `jit`, tolk fuses the
/// square into a reduction that keeps an axis (split across threads by
/// rows), while it leaves a large full reduction to nx's threaded kernel,
/// which needs the squares stored first, a pass more over the leaf.
fn partial_sums_of_squares(g: &Tensor) -> Tensor {
    if g.ndim() < 2 {
        return g.square().sum_all().reshape(&[1]);
    }
    let inner: Vec<isize> = (1..g.ndim() as isize).collect();
    g.square().sum(&inner, false)
}

/// Every update scaled by `max_norm / norm` when the global norm (the
/// Euclidean norm of all leaves together) is `max_norm` or more, else
/// unchanged (Optax's `clip_by_global_norm`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let g = (Tensor::from_slice(&[3.0f32], &[1]), Tensor::from_slice(&[4.0f32], &[1])); // norm 5
/// let opt = optim::clip_by_global_norm(1.0);
/// let (u, _) = opt.update(&g, &opt.init(&g), &g);
/// assert!((u.0.item::<f32>() - 0.6).abs() < 1e-6 && (u.1.item::<f32>() - 0.8).abs() < 1e-6);
/// ```
pub fn clip_by_global_norm(max_norm: f64) -> Optimizer {
    Optimizer::new(ClipByGlobalNorm { max_norm })
}
