//! The convolutional network of `train_cnn` and `train_fashion` on
//! `rune::nn` layers, and its training step on `rune::optim`: two blocks
//! of 3x3 convolution (SAME padding) + relu + 2x2 max-pool, a dense relu
//! layer and a linear head over 10 classes; He-initialized weights.

use rune::nx::{ConvOpts, Padding};
use rune::prelude::*;
use rune::{nn, optim, rng};

#[derive(Ptree, Clone)]
pub struct Cnn {
    pub conv1: nn::Conv,
    pub conv2: nn::Conv,
    pub dense: nn::Linear,
    pub head: nn::Linear,
}

impl Cnn {
    /// For `side x side` grey images, with `c1` and `c2` channels and a
    /// dense layer of `hidden`.
    pub fn new(key: &Tensor, side: usize, c1: usize, c2: usize, hidden: usize) -> Cnn {
        let k = rng::split(key, 8);
        let same = ConvOpts {
            padding: Padding::Same,
            ..Default::default()
        };
        let he = |i: usize, w: &Tensor| nn::init::he_normal(&k.get(i), w.shape(), DType::F32);
        let mut m = Cnn {
            conv1: nn::Conv::new(&k.get(0), 1, c1, &[3, 3], same.clone()),
            conv2: nn::Conv::new(&k.get(1), c1, c2, &[3, 3], same),
            dense: nn::Linear::new(&k.get(2), c2 * (side / 4) * (side / 4), hidden),
            head: nn::Linear::new(&k.get(3), hidden, 10),
        };
        (m.conv1.w, m.conv2.w) = (he(4, &m.conv1.w), he(5, &m.conv2.w));
        (m.dense.w, m.head.w) = (he(6, &m.dense.w), he(7, &m.head.w));
        m
    }

    /// Logits `[n, 10]` for images `[n, 1, side, side]`.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let pool = |h: Tensor| h.relu().max_pool(&[2, 2], &[2, 2], Padding::Valid);
        let h = pool(self.conv2.forward(&pool(self.conv1.forward(x))));
        let h = h.reshape(&[x.shape()[0], self.dense.w.shape()[0]]);
        self.head.forward(&self.dense.forward(&h).relu())
    }

    /// The mean cross-entropy against the labels `y`.
    pub fn loss(&self, x: &Tensor, y: &Tensor) -> Tensor {
        nn::cross_entropy(&self.forward(x), y).mean_all()
    }
}

/// One step of `opt` on the minibatch `(x, y)`: the loss, the model, the state.
pub fn train_step(
    opt: &optim::Optimizer,
    (model, state, x, y): &(Cnn, optim::OptState, Tensor, Tensor),
) -> (Tensor, Cnn, optim::OptState) {
    let (loss, grads) = value_and_grad(|m: &Cnn| m.loss(x, y), model);
    let (updates, state) = opt.update(&grads, state, model);
    (loss, optim::apply_updates(model, &updates), state)
}
