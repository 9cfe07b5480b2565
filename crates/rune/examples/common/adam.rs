//! Adam (Kingma and Ba, 2015) over any parameter tree, for the examples
//! whose jitted training step takes the optimizer state as input: the step
//! count is a 0-d tensor of the state and the bias-corrected step size is
//! computed from it inside the step, so the step compiles once and nothing
//! but the batch changes from call to call.

use rune::prelude::*;

pub const BETA1: f64 = 0.9;
pub const BETA2: f64 = 0.999;
pub const EPS: f64 = 1e-8;

/// The parameters, their first and second moments, and the step count
/// `t` (0-d F32).
#[derive(Ptree, Clone)]
pub struct Adam<P: Ptree> {
    pub params: P,
    pub m: P,
    pub v: P,
    pub t: Tensor,
}

impl<P: Ptree> Adam<P> {
    /// Step 0: zero moments.
    pub fn new(params: P) -> Adam<P> {
        // Two zero trees, not one twice: distinct buffers for m and v.
        Adam {
            m: params.map_leaves(&mut |t| t.zeros_like()),
            v: params.map_leaves(&mut |t| t.zeros_like()),
            params,
            t: Tensor::scalar(0.0f32),
        }
    }

    /// One update with gradients `grads` and step size `lr` (corrected by
    /// `sqrt(1 - b2^t) / (1 - b1^t)`, with `b^t = exp(t ln b)`).
    pub fn step(&self, grads: &P, lr: f64) -> Adam<P> {
        let t = &self.t + 1.0;
        let pow = |b: f64| (&t * b.ln()).exp();
        let lr = (1.0 - pow(BETA2)).sqrt() / (1.0 - pow(BETA1)) * lr;
        let m = self
            .m
            .map2_leaves(grads, &mut |m, g| m * BETA1 + g * (1.0 - BETA1));
        let v = self
            .v
            .map2_leaves(grads, &mut |v, g| v * BETA2 + g.square() * (1.0 - BETA2));
        let steps = m.map2_leaves(&v, &mut |m, v| m * &lr / (v.sqrt() + EPS));
        let params = self.params.map2_leaves(&steps, &mut |p, s| p - s);
        Adam { params, m, v, t }
    }
}
