//! The types forward and reverse mode share with the derivative rules they
//! call (`rules.rs`, `linalg_derivatives.rs`) and with custom rules
//! (`custom.rs`): reverse rules ([`Rule`] for a tape node, [`PrimRule`] for
//! one primitive), residuals checked against in-place writes ([`Saved`],
//! [`Residual`], [`stale`]), and sums of symbolic-zero tangents
//! ([`add_opt`]). The traces themselves are `jvp.rs` and `vjp.rs`; the
//! functions users call are `differentiate.rs`.

use crate::rules::Partial;
use nx::{Prim, Tensor};

/// A node's reverse rule: output cotangents (None = zero) to input
/// cotangents (None = zero or not needed).
pub(crate) type Rule = Box<dyn Fn(&[Option<Tensor>]) -> Vec<Option<Tensor>>>;

/// A reverse rule: the output cotangent (and the primitive, for `Saved::get`)
/// to the input cotangents.
pub(crate) type PrimRule = Box<dyn Fn(&Tensor, &Prim) -> Vec<Option<Tensor>>>;

/// Something a reverse rule keeps from the forward pass, and the tensor in
/// it whose storage must not be written before the backward pass.
pub(crate) trait Residual {
    fn tensor(&self) -> Option<&Tensor>;
}

impl Residual for Tensor {
    fn tensor(&self) -> Option<&Tensor> {
        Some(self)
    }
}

impl Residual for Partial {
    fn tensor(&self) -> Option<&Tensor> {
        match self {
            Partial::By(d) => Some(d),
            _ => None,
        }
    }
}

/// A residual and the write count of its storage when it was saved (one
/// relaxed atomic load; None for constants and tracers of other traces,
/// whose values are fresh results).
pub(crate) struct Saved<T> {
    value: T,
    version: Option<u64>,
}

impl<T: Residual> Saved<T> {
    pub(crate) fn new(value: T) -> Saved<T> {
        let version = value.tensor().and_then(Tensor::version);
        Saved { value, version }
    }

    /// The residual, after checking that nothing wrote its storage since it
    /// was saved; `op` is the primitive that saved it (named in the panic).
    pub(crate) fn get(&self, op: &Prim) -> &T {
        if !self.is_unwritten() {
            stale(&op.name());
        }
        &self.value
    }

    /// True unless the residual's storage was written since it was saved.
    pub(crate) fn is_unwritten(&self) -> bool {
        match (self.version, self.value.tensor()) {
            (Some(saved), Some(t)) => t.version() == Some(saved),
            _ => true,
        }
    }
}

/// The panic for a residual written in place after it was recorded.
pub(crate) fn stale(op: &str) -> ! {
    panic!(
        "backward pass: a tensor that `{op}` saved for its gradient was modified in place \
         (assign/blit) after the forward pass recorded it, so the gradient would be computed \
         at the new value; differentiate at a `.copy()` of a tensor (or capture a `.copy()`) \
         that is mutated while a pullback or gradient still needs it"
    )
}

/// Sum of two optional (None = zero) tensors.
pub(crate) fn add_opt(a: Option<Tensor>, b: Option<Tensor>) -> Option<Tensor> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}
