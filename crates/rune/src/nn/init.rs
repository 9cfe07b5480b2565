//! `nn::init`: the initializers of the layers' parameters, JAX's
//! `jax.nn.initializers` formulas with the fans read from rune's layouts.
//! Each is `(&key, &shape, dtype) -> Tensor` and a pure function of its key.
//!
//! Fans: a matrix `[d_in, d_out]` (`Linear::w`) has fan-in `d_in` and
//! fan-out `d_out` (JAX's default axes); a kernel `[O, I, k..]` (`Conv::w`,
//! rune's layout) has fan-in `I·prod(k)` and fan-out `O·prod(k)` (where JAX
//! would need `in_axis`/`out_axis` for this layout). Shapes of rank under 2
//! have no fans and panic, as in JAX.
//!
//! ```
//! use rune::prelude::*;
//! use rune::{nn, rng};
//! let w = nn::init::glorot_uniform(&rng::key(0), &[64, 32], DType::F32);
//! let limit = (6.0f32 / (64.0 + 32.0)).sqrt();
//! assert!(w.to_vec::<f32>().iter().all(|v| v.abs() <= limit));
//! ```

use nx::{DType, Tensor};

use crate::rng;

/// `(fan_in, fan_out)` of a weight of `shape` (see the module doc).
fn fans(who: &str, shape: &[usize]) -> (f64, f64) {
    match shape {
        [d_in, d_out] => (*d_in as f64, *d_out as f64),
        [o, i, k @ ..] if !k.is_empty() => {
            let receptive: usize = k.iter().product();
            ((i * receptive) as f64, (o * receptive) as f64)
        }
        _ => panic!(
            "nn::init::{who}: needs a weight of rank 2 ([d_in, d_out]) or more \
             ([O, I, k..]) to compute its fans, got shape {shape:?}"
        ),
    }
}

/// The standard deviation of a standard normal truncated to [-2, 2]
/// (JAX's `variance_scaling` divides by it so that the truncated draw has
/// the asked variance).
const TRUNCATED_NORMAL_STD: f64 = 0.879_625_661_034_239_8;

/// A truncated normal on [-2, 2] scaled to variance `variance`: JAX's
/// `variance_scaling(.., "truncated_normal")`.
fn scaled_truncated_normal(key: &Tensor, shape: &[usize], dtype: DType, variance: f64) -> Tensor {
    let std = variance.sqrt() / TRUNCATED_NORMAL_STD;
    rng::truncated_normal(key, -2.0, 2.0, shape, dtype) * std
}

/// LeCun normal (JAX's `lecun_normal`): a truncated normal of variance
/// `1 / fan_in`. The default of `Linear` and `Conv` weights.
///
/// ```
/// use rune::prelude::*;
/// let w = rune::nn::init::lecun_normal(&rune::rng::key(0), &[400, 300], DType::F32);
/// let var = w.square().mean_all().item::<f32>();
/// assert!((var * 400.0 - 1.0).abs() < 0.05);
/// ```
pub fn lecun_normal(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    let (fan_in, _) = fans("lecun_normal", shape);
    scaled_truncated_normal(key, shape, dtype, 1.0 / fan_in)
}

/// He (Kaiming) normal (JAX's `he_normal`): a truncated normal of variance
/// `2 / fan_in`, for layers followed by a relu.
pub fn he_normal(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    let (fan_in, _) = fans("he_normal", shape);
    scaled_truncated_normal(key, shape, dtype, 2.0 / fan_in)
}

/// Glorot (Xavier) uniform (JAX's `glorot_uniform`): uniform on
/// `[-l, l)` with `l = sqrt(6 / (fan_in + fan_out))`.
pub fn glorot_uniform(key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    let (fan_in, fan_out) = fans("glorot_uniform", shape);
    let limit = (6.0 / (fan_in + fan_out)).sqrt();
    (rng::uniform(key, shape, dtype) * 2.0 - 1.0) * limit
}

/// Zeros; the key is unused (the signature is every initializer's).
pub fn zeros(_key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    Tensor::zeros(shape, dtype)
}

/// Ones; the key is unused (the signature is every initializer's).
pub fn ones(_key: &Tensor, shape: &[usize], dtype: DType) -> Tensor {
    Tensor::ones(shape, dtype)
}
