//! The flagship example's data, shared by `train_mlp` and `data_parallel`:
//! three interleaved spirals (2-D points, 3 classes); and a hand-written
//! 2-HIDDEN-HIDDEN-3 tanh perceptron with its mean cross-entropy loss, the
//! model of `data_parallel`, `bench_generality`'s FLAGSHIP row and
//! `tests/cuda_emulated.rs` (`train_mlp` builds the same shape from `nn::Linear`).

use std::f64::consts::PI;

use rune::prelude::*;

use super::splitmix::SplitMix;

pub const CLASSES: usize = 3;
pub const POINTS_PER_CLASS: usize = 1500;
pub const HELD_OUT: usize = 900;
pub const TURNS: f64 = 2.0; // how many times each arm winds around the origin
pub const NOISE: f64 = 0.03; // standard deviation of the jitter added to each point
pub const HIDDEN: usize = 64;

/// A 2-HIDDEN-HIDDEN-3 perceptron with tanh activations.
#[derive(Ptree, Clone)]
pub struct Mlp {
    pub w1: Tensor,
    pub b1: Tensor,
    pub w2: Tensor,
    pub b2: Tensor,
    pub w3: Tensor,
    pub b3: Tensor,
}

impl Mlp {
    /// Glorot-style initialization from nx's implicit RNG; zero biases.
    pub fn init(sizes: [usize; 4]) -> Mlp {
        let dense = |fan_in: usize, fan_out: usize| {
            let w = Tensor::randn(&[fan_in, fan_out], DType::F32) * (1.0 / fan_in as f64).sqrt();
            (w, Tensor::zeros(&[fan_out], DType::F32))
        };
        let (w1, b1) = dense(sizes[0], sizes[1]);
        let (w2, b2) = dense(sizes[1], sizes[2]);
        let (w3, b3) = dense(sizes[2], sizes[3]);
        Mlp {
            w1,
            b1,
            w2,
            b2,
            w3,
            b3,
        }
    }

    /// Logits `[batch, CLASSES]` for points `[batch, 2]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let h = (x.matmul(&self.w1) + &self.b1).tanh();
        let h = (h.matmul(&self.w2) + &self.b2).tanh();
        h.matmul(&self.w3) + &self.b3
    }
}

/// Mean cross-entropy of the logits of `x` against the `I32` labels `y`.
pub fn loss(p: &Mlp, x: &Tensor, y: &Tensor) -> Tensor {
    let log_probs = p.forward(x).log_softmax(-1);
    -log_probs.take_along_axis(&y.unsqueeze(1), 1).mean_all()
}

/// Fraction of the points of `x` whose most likely class is their label.
pub fn accuracy(p: &Mlp, x: &Tensor, y: &Tensor) -> f64 {
    let predicted = p.forward(x).argmax(-1, false);
    predicted.equal(y).cast(DType::F32).mean_all().item::<f32>() as f64
}

/// `CLASSES` spiral arms, `POINTS_PER_CLASS` points each, shuffled:
/// points `[n, 2]` (F32) and labels `[n]` (I32).
pub fn spirals(rng: &mut SplitMix) -> (Tensor, Tensor) {
    let n = POINTS_PER_CLASS;
    let mut xs = Vec::new();
    let mut ys = Vec::new();
    for class in 0..CLASSES {
        // radius uniform in [0.1, 1]; the angle winds TURNS times along the arm,
        // and the arms start 2*pi/CLASSES apart
        let r = Tensor::rand(&[n], DType::F32) * 0.9 + 0.1;
        let theta = &r * (2.0 * PI * TURNS) + 2.0 * PI * class as f64 / CLASSES as f64;
        let px = &r * theta.cos() + Tensor::randn(&[n], DType::F32) * NOISE;
        let py = &r * theta.sin() + Tensor::randn(&[n], DType::F32) * NOISE;
        xs.push(Tensor::stack(&[px, py], 1));
        ys.push(Tensor::full(&[n], class as f64, DType::I32));
    }
    let (x, y) = (Tensor::concatenate(&xs, 0), Tensor::concatenate(&ys, 0));
    let perm = Tensor::from_vec(rng.permutation(CLASSES * n), &[CLASSES * n]);
    (x.take(&perm, 0), y.take(&perm, 0))
}
