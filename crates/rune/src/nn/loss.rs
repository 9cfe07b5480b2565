//! Losses: `cross_entropy` (integer labels, per example) and `mse`.

use nx::Tensor;

use super::{check_float, check_ids};

/// The softmax cross-entropy of `logits [.., C]` against integer `labels
/// [..]` (I32 or I64, in `0..C`), per example: `logsumexp(logits) −
/// logits[label]` (Optax's `softmax_cross_entropy_with_integer_labels`).
/// Take `.mean_all()` for a batch's loss. A label out of range panics
/// naming `cross_entropy` (for labels traced by `jit`, the compiled gather
/// checks them when the program runs).
///
/// ```
/// use rune::prelude::*;
/// let logits = Tensor::from_slice(&[0.0f32, 0.0, 0.0, 0.0], &[1, 4]);
/// let l = rune::nn::cross_entropy(&logits, &Tensor::from_slice(&[2i32], &[1]));
/// assert!((l.item::<f32>() - 4f32.ln()).abs() < 1e-6);
/// ```
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Tensor {
    check_float("cross_entropy", logits);
    let shape = logits.shape();
    if shape.is_empty() || labels.shape() != &shape[..shape.len() - 1] {
        panic!(
            "cross_entropy: expected logits [.., C] and labels [..] (the logits' shape without \
             its last axis), got logits {:?} and labels {:?}",
            shape,
            labels.shape()
        );
    }
    let classes = shape[shape.len() - 1];
    check_ids("cross_entropy", labels, classes, "label");
    let picked = logits
        .take_along_axis(&labels.unsqueeze(-1), -1)
        .squeeze(-1);
    logits.logsumexp(&[-1], false) - picked
}

/// The mean squared error `mean((pred − target)²)`, a 0-d tensor. The
/// shapes must be equal (no broadcasting: `[N, 1]` against `[N]` is
/// almost always a mistake).
///
/// ```
/// use rune::prelude::*;
/// let p = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
/// let t = Tensor::from_slice(&[0.0f32, 4.0], &[2]);
/// assert_eq!(rune::nn::mse(&p, &t).item::<f32>(), 2.5);
/// ```
pub fn mse(pred: &Tensor, target: &Tensor) -> Tensor {
    check_float("mse", pred);
    if pred.shape() != target.shape() {
        panic!(
            "mse: expected a target of the prediction's shape {:?}, got {:?}",
            pred.shape(),
            target.shape()
        );
    }
    (pred - target).square().mean_all()
}
