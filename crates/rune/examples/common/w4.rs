//! W4, shared by the benchmarks that run it (`bench_jit`,
//! `bench_pmap`): `value_and_grad` + SGD of the 784-512-512-10 relu MLP on
//! a batch of 128 (the includer also includes `common/splitmix.rs` as
//! `splitmix`).
#![allow(dead_code)] // each includer uses a subset

use crate::splitmix::SplitMix;
use rune::prelude::*;

#[derive(Ptree, Clone)]
pub struct Layer {
    pub w: Tensor,
    pub b: Tensor,
}

/// He-initialized weights and zero biases of an MLP with these layer sizes.
pub fn mlp_params(rng: &mut SplitMix, sizes: &[usize]) -> Vec<Layer> {
    sizes
        .windows(2)
        .map(|s| Layer {
            w: rng.normal_tensor(&[s[0], s[1]], (2.0 / s[0] as f32).sqrt()),
            b: Tensor::zeros(&[s[1]], DType::F32),
        })
        .collect()
}

pub type W4In = (Vec<Layer>, Tensor, Tensor);

/// W4's parameters, batch and labels (fixed seed).
pub fn w4_inputs() -> W4In {
    let mut rng = SplitMix(0);
    let params = mlp_params(&mut rng, &[784, 512, 512, 10]);
    let x = rng.normal_tensor(&[128, 784], 1.0);
    let labels: Vec<i32> = (0..128).map(|_| (rng.next_u64() % 10) as i32).collect();
    (params, x, Tensor::from_vec(labels, &[128, 1]))
}

/// Mean cross-entropy of the MLP's logits.
pub fn w4_loss(p: &Vec<Layer>, x: &Tensor, y: &Tensor) -> Tensor {
    let mut h = x.clone();
    for l in &p[..p.len() - 1] {
        h = (h.matmul(&l.w) + &l.b).relu();
    }
    let last = &p[p.len() - 1];
    let logits = h.matmul(&last.w) + &last.b;
    -logits.log_softmax(-1).take_along_axis(y, 1).mean_all()
}

/// One step: the loss and the parameters after SGD with rate 0.01.
pub fn w4_step((p, x, y): &W4In) -> (Tensor, Vec<Layer>) {
    let (l, g) = rune::value_and_grad(|p: &Vec<Layer>| w4_loss(p, x, y), p);
    (l, p.map2_leaves(&g, &mut |w, g| w - g * 0.01))
}
