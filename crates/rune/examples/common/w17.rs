//! W17 of the generality workloads (`shared/bench/generality`): one SGD
//! step of a two-layer graph network on a random graph (1024 nodes, 8192
//! edges: gathers forward, scatter-adds backward); shared by
//! `bench_generality` and `bench_gpu`. The includer also includes
//! `common/splitmix.rs` as `splitmix`.

use crate::splitmix::SplitMix;
use rune::prelude::*;

pub const W17_NODES: usize = 1024;
pub const W17_EDGES: usize = 8192;

/// W17's parameters: two message-passing layers and a readout.
#[derive(Ptree, Clone)]
pub struct Gnn {
    pub w1: Tensor,
    pub w2: Tensor,
    pub w3: Tensor,
}

/// W17's graph, features and targets.
pub struct Graph {
    pub src: Tensor,
    pub dst: Tensor,
    pub x: Tensor,
    pub y: Tensor,
}

/// The parameters and the graph (fixed seed; the README's order: `src`,
/// `dst`, `x`, `y`, then `W1`, `W2`, `w3`).
pub fn w17_inputs() -> (Gnn, Graph) {
    let mut rng = SplitMix(17);
    let mut edges = || {
        let v: Vec<i32> = (0..W17_EDGES)
            .map(|_| (rng.next_u64() % W17_NODES as u64) as i32)
            .collect();
        Tensor::from_slice(&v, &[W17_EDGES])
    };
    let (src, dst) = (edges(), edges());
    let x = rng.normal_tensor(&[W17_NODES, 32], 1.0);
    let y = rng.normal_tensor(&[W17_NODES], 1.0);
    let p = Gnn {
        w1: rng.normal_tensor(&[32, 64], 1.0 / 32f32.sqrt()),
        w2: rng.normal_tensor(&[64, 64], 1.0 / 8.0),
        w3: rng.normal_tensor(&[64, 1], 1.0 / 8.0),
    };
    (p, Graph { src, dst, x, y })
}

/// One message-passing layer: `relu(z + segment_sum(z[src], dst) / 8)`
/// with `z = h @ w`.
pub fn gnn_layer(g: &Graph, h: &Tensor, w: &Tensor) -> Tensor {
    let z = h.matmul(w);
    let messages = nx::segment_sum(&z.take(&g.src, 0), &g.dst, W17_NODES);
    (&z + messages / 8.0).relu()
}

/// The mean squared error of the readout against the targets.
pub fn gnn_loss(p: &Gnn, g: &Graph) -> Tensor {
    let h = gnn_layer(g, &gnn_layer(g, &g.x, &p.w1), &p.w2);
    let pred = h.matmul(&p.w3).squeeze(1);
    (pred - &g.y).square().mean_all()
}

/// `value_and_grad` of the loss plus SGD (lr 0.01); the graph is captured.
pub fn w17_fn(g: Graph) -> impl Fn(&Gnn) -> (Tensor, Gnn) {
    move |p: &Gnn| {
        let (l, grads) = rune::value_and_grad(|p: &Gnn| gnn_loss(p, &g), p);
        (l, p.map2_leaves(&grads, &mut |w, g| w - g * 0.01))
    }
}
