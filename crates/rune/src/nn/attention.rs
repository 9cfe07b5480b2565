//! Attention: `dot_product_attention` (JAX's `jax.nn.dot_product_attention`
//! layout), `causal_mask`, and the `MultiHeadAttention` layer built on them.

use nx::{DType, Ptree, Tensor};

use super::{check_float, check_last_axis, Linear};

/// What a masked-out logit becomes: JAX's large negative number
/// (`-0.7 · f32::MAX`), finite so that a fully masked row gives a uniform
/// softmax rather than NaN, as in JAX.
const MASKED_LOGIT: f64 = -0.7 * f32::MAX as f64;

/// Whether an array of shape `from` broadcasts (numpy's rule) to `to`.
fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// Scaled dot-product attention: `softmax(q·kᵀ / sqrt(head_dim)) · v` per
/// head, with `q [.., T, heads, head_dim]`, `k` and `v [.., S, heads,
/// head_dim]` (JAX's `[B, T, N, H]` layout; the leading axes may be any,
/// or none); the result is `[.., T, heads, head_dim]`. `mask` (`Bool`,
/// true = attend) broadcasts to the logits `[.., heads, T, S]`; masked
/// logits become a large negative number, as in JAX.
///
/// ```
/// use rune::prelude::*;
/// let q = Tensor::zeros(&[1, 2, 1, 1], DType::F32);
/// let k = Tensor::zeros(&[1, 2, 1, 1], DType::F32);
/// let v = Tensor::from_slice(&[1.0f32, 3.0], &[1, 2, 1, 1]);
/// // Equal logits: the first position sees only itself, the second both.
/// let y = rune::nn::dot_product_attention(&q, &k, &v, Some(&rune::nn::causal_mask(2)));
/// assert_eq!(y.to_vec::<f32>(), vec![1.0, 2.0]);
/// ```
pub fn dot_product_attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Tensor {
    const WHO: &str = "dot_product_attention";
    check_float(WHO, q);
    let (qs, ks) = (q.shape(), k.shape());
    let r = qs.len();
    if r < 3
        || ks.len() != r
        || v.shape() != ks
        || qs[..r - 3] != ks[..r - 3]
        || qs[r - 2..] != ks[r - 2..]
    {
        panic!(
            "{WHO}: expected q [.., T, heads, head_dim] and k, v [.., S, heads, head_dim] with \
             the same leading axes, heads and head_dim, got q {qs:?}, k {ks:?}, v {:?}",
            v.shape()
        );
    }
    let head_dim = qs[r - 1];
    // [.., heads, T, head_dim] · [.., heads, head_dim, S] = [.., heads, T, S]
    let q_heads = q.swapaxes(-3, -2);
    let k_heads_t = k.swapaxes(-3, -2).swapaxes(-1, -2);
    let logits = q_heads.matmul(&k_heads_t) / (head_dim as f64).sqrt();
    let logits = match mask {
        None => logits,
        Some(mask) => {
            if mask.dtype() != DType::Bool || !broadcasts_to(mask.shape(), logits.shape()) {
                panic!(
                    "{WHO}: expected a Bool mask that broadcasts to the logits [.., heads, T, S] \
                     = {:?}, got {:?} {:?}",
                    logits.shape(),
                    mask.dtype(),
                    mask.shape()
                );
            }
            Tensor::where_(mask, &logits, &logits.scalar_like(MASKED_LOGIT))
        }
    };
    logits
        .softmax(-1)
        .matmul(&v.swapaxes(-3, -2))
        .swapaxes(-3, -2)
}

/// The causal mask of a sequence of `t` positions: `Bool [t, t]`, true
/// where the key position is at or before the query position (`j <= i`).
///
/// ```
/// let m = rune::nn::causal_mask(2);
/// assert_eq!(m.to_vec::<bool>(), vec![true, false, true, true]);
/// ```
pub fn causal_mask(t: usize) -> Tensor {
    let query = Tensor::iota(&[t, t], 0, DType::I32);
    let key = Tensor::iota(&[t, t], 1, DType::I32);
    key.less_equal(&query)
}

/// Multi-head self-attention: the input `x [.., T, dim]` is projected to
/// queries, keys and values (`q`, `k`, `v`: `Linear(dim, dim)`), split into
/// `heads` contiguous blocks of `dim / heads` features, attended with
/// [`dot_product_attention`] and projected back by `o`.
///
/// ```
/// use rune::prelude::*;
/// use rune::nn;
/// let mha = nn::MultiHeadAttention::new(&rune::rng::key(0), 16, 4);
/// let x = rune::rng::normal(&rune::rng::key(1), &[2, 5, 16], DType::F32);
/// let y = mha.forward(&x, Some(&nn::causal_mask(5)));
/// assert_eq!(y.shape(), &[2, 5, 16]);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct MultiHeadAttention {
    /// The query projection.
    pub q: Linear,
    /// The key projection.
    pub k: Linear,
    /// The value projection.
    pub v: Linear,
    /// The output projection.
    pub o: Linear,
    /// The number of heads; `dim` is a multiple of it.
    #[ptree(ignore)]
    pub heads: usize,
}

impl MultiHeadAttention {
    /// `heads` heads over `dim` features, the four projections drawn from
    /// `key`; panics naming `MultiHeadAttention` unless `heads` divides `dim`.
    pub fn new(key: &Tensor, dim: usize, heads: usize) -> MultiHeadAttention {
        if heads == 0 || !dim.is_multiple_of(heads) {
            panic!("MultiHeadAttention: dim ({dim}) must be a multiple of heads ({heads})");
        }
        let keys = crate::rng::split(key, 4);
        let linear = |i: usize| Linear::new(&keys.get(i), dim, dim);
        MultiHeadAttention {
            q: linear(0),
            k: linear(1),
            v: linear(2),
            o: linear(3),
            heads,
        }
    }

    /// Self-attention over `x [.., T, dim]` (usually `[B, T, dim]`); `mask`
    /// (`Bool`, true = attend) broadcasts to `[.., heads, T, T]`, e.g.
    /// [`causal_mask`]`(T)`. Panics naming `MultiHeadAttention` on another
    /// last axis.
    pub fn forward(&self, x: &Tensor, mask: Option<&Tensor>) -> Tensor {
        const WHO: &str = "MultiHeadAttention";
        check_float(WHO, x);
        let dim = self.q.w.shape()[0];
        check_last_axis(WHO, x, dim, "dim");
        if x.ndim() < 2 {
            panic!(
                "{WHO}: expected an input of shape [.., T, {dim}], got {:?}",
                x.shape()
            );
        }
        let mut split_shape = x.shape().to_vec();
        split_shape.pop();
        split_shape.extend([self.heads, dim / self.heads]);
        let split = |proj: &Linear| proj.forward(x).reshape(&split_shape);
        let attended =
            dot_product_attention(&split(&self.q), &split(&self.k), &split(&self.v), mask);
        self.o.forward(&attended.reshape(x.shape()))
    }
}
