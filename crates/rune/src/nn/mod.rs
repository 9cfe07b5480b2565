//! `rune::nn`: layers, losses and initializers in the style of Equinox.
//! This module owns the shared shape checks of the layers; each layer
//! lives in a file of its own kind (`linear.rs`, `conv.rs`, `norm.rs`,
//! `dropout.rs`, `attention.rs`), the losses in `loss.rs` and the
//! initializers in `init.rs`.
//!
//! A layer is a `#[derive(Ptree, Clone)]` struct whose trainable tensors
//! are public fields (its leaves) and whose settings (`eps`, a
//! convolution's options, a head count) are public `#[ptree(ignore)]`
//! metadata. Layers are built from an explicit PRNG key, hold F32
//! parameters, and are used through `forward`; a model is a struct of
//! layers, itself a parameter tree, so `grad`, `vmap`, `jit` and
//! `nx::save` see through it. A wrong input shape panics with the layer's
//! name and the shape it expected.
//!
//! ```
//! use rune::prelude::*;
//! use rune::{nn, rng};
//!
//! #[derive(Ptree, Clone)]
//! struct Net { l1: nn::Linear, norm: nn::LayerNorm, l2: nn::Linear }
//!
//! impl Net {
//!     fn new(key: &Tensor) -> Net {
//!         let k = rng::split(key, 2);
//!         Net {
//!             l1: nn::Linear::new(&k.get(0), 8, 32),
//!             norm: nn::LayerNorm::new(32),
//!             l2: nn::Linear::new(&k.get(1), 32, 4),
//!         }
//!     }
//!     fn forward(&self, x: &Tensor) -> Tensor {
//!         self.l2.forward(&self.norm.forward(&self.l1.forward(x)).gelu())
//!     }
//! }
//!
//! let net = Net::new(&rng::key(0));
//! let x = rng::normal(&rng::key(1), &[16, 8], DType::F32);
//! let labels = Tensor::from_vec((0..16).map(|i| i % 4).collect::<Vec<i32>>(), &[16]);
//! let loss = |p: &Net| nn::cross_entropy(&p.forward(&x), &labels).mean_all();
//! let (l, g) = value_and_grad(loss, &net);
//! assert!(l.item::<f32>() > 0.0);
//! assert_eq!(g.l1.w.shape(), &[8, 32]);
//! assert_eq!(net.leaf_paths(), ["l1.w", "l1.b", "norm.scale", "norm.bias", "l2.w", "l2.b"]);
//! ```

mod attention;
mod conv;
mod dropout;
pub mod init;
mod linear;
mod loss;
mod norm;

pub use attention::{causal_mask, dot_product_attention, MultiHeadAttention};
pub use conv::Conv;
pub use dropout::Dropout;
pub use linear::{Embedding, Linear};
pub use loss::{cross_entropy, mse};
pub use norm::{BatchNorm, BatchStats, LayerNorm, RmsNorm};

use nx::Tensor;

/// Panics naming `layer` unless `x` has at least one axis and its last
/// axis has `dim` entries; `what` says what the last axis holds
/// (`d_in`, `dim`, ...).
fn check_last_axis(layer: &str, x: &Tensor, dim: usize, what: &str) {
    if x.ndim() == 0 || x.shape()[x.ndim() - 1] != dim {
        panic!(
            "{layer}: expected an input of shape [.., {dim}] (last axis = {what} = {dim}), got {:?}",
            x.shape()
        );
    }
}

/// Panics naming `who` unless `x` is floating point (the layers compute in
/// their input's dtype: F32, or F64 for a finite-difference check).
fn check_float(who: &str, x: &Tensor) {
    if !x.dtype().is_float() {
        panic!(
            "{who}: expected a floating-point input, got {:?}",
            x.dtype()
        );
    }
}

/// Panics naming `who` unless `ids` holds integer ids in `0..count`:
/// the dtype must be I32 or I64, and concrete ids (not traced by `jit` or
/// `vmap`, whose values are unknown while tracing) are read and checked,
/// negative ones included. Traced ids get the gather's own check when the
/// program runs.
fn check_ids(who: &str, ids: &Tensor, count: usize, what: &str) {
    let values: Vec<i64> = match ids.dtype() {
        nx::DType::I32 if !ids.is_traced() => {
            ids.to_vec::<i32>().into_iter().map(i64::from).collect()
        }
        nx::DType::I64 if !ids.is_traced() => ids.to_vec::<i64>(),
        nx::DType::I32 | nx::DType::I64 => return,
        d => panic!("{who}: {what} must be I32 or I64, got {d:?}"),
    };
    if let Some(bad) = values.iter().find(|&&i| i < 0 || i >= count as i64) {
        panic!("{who}: {what} {bad} out of range 0..{count}");
    }
}
