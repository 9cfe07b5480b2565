//! The pre-LN causal transformer block of the generality workload W15,
//! at any size: `bench_generality` runs it at W15's (B 8, T 128, D 256, 8
//! heads, MLP 1024), `bench_probe` at two others.

use rune::prelude::*;

/// Batch, sequence length, model width, heads, MLP width.
#[derive(Clone, Copy)]
pub struct Dims {
    pub b: usize,
    pub t: usize,
    pub d: usize,
    pub h: usize,
    pub f: usize,
}

/// The block's ten parameters.
#[derive(Ptree, Clone)]
pub struct Block {
    pub wq: Tensor,
    pub wk: Tensor,
    pub wv: Tensor,
    pub wo: Tensor,
    pub w1: Tensor,
    pub w2: Tensor,
    pub b1: Tensor,
    pub b2: Tensor,
    pub g1: Tensor,
    pub g2: Tensor,
}

/// LayerNorm over the last axis, no bias: `(z - mean)/√(var + 1e-5)·g`.
pub fn ln(z: &Tensor, g: &Tensor) -> Tensor {
    let m = z.mean(&[-1], true);
    let v = (z - &m).square().mean(&[-1], true);
    (z - &m) / (v + 1e-5).sqrt() * g
}

/// The block on `x` [b, t, d]: causal self-attention, then the gelu (tanh
/// form) MLP, each after a LayerNorm and added to its input.
pub fn block(p: &Block, x: &Tensor, Dims { b, t, d, h, .. }: Dims) -> Tensor {
    let y = ln(x, &p.g1);
    let heads = |z: Tensor| z.reshape(&[b, t, h, d / h]).permute(&[0, 2, 1, 3]);
    let (q, k, v) = (
        heads(y.matmul(&p.wq)),
        heads(y.matmul(&p.wk)),
        heads(y.matmul(&p.wv)),
    );
    let s = q.matmul(&k.permute(&[0, 1, 3, 2])) / ((d / h) as f64).sqrt();
    // Causal: position i sees positions j <= i.
    let causal =
        Tensor::iota(&[t, t], 1, DType::I64).less_equal(&Tensor::iota(&[t, t], 0, DType::I64));
    let s = Tensor::where_(&causal, &s, &s.scalar_like(-1e9));
    let a = s.softmax(-1).matmul(&v);
    let x = x + a.permute(&[0, 2, 1, 3]).reshape(&[b, t, d]).matmul(&p.wo);
    let y = ln(&x, &p.g2);
    &x + (y.matmul(&p.w1) + &p.b1).gelu().matmul(&p.w2) + &p.b2
}

/// One SGD step (lr 0.01) on the mean squared error of the block's output
/// against `tgt`: `(loss, updated parameters)`.
pub fn sgd_step(p: &Block, x: &Tensor, tgt: &Tensor, dims: Dims) -> (Tensor, Block) {
    let (l, g) = rune::value_and_grad(|p: &Block| (block(p, x, dims) - tgt).square().mean_all(), p);
    (l, p.map2_leaves(&g, &mut |a, b| a - 0.01 * b))
}
