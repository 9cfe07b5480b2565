//! The optimizers by name — `sgd`, `adam`, `adamw`, `lion`, `rmsprop`,
//! `adagrad` — each a `chain` of building blocks exactly as Optax builds
//! it, with their option structs (Optax's defaults).

use super::schedule::Schedule;
use super::transform::{
    add_decayed_weights, scale_by_adam, scale_by_learning_rate, scale_by_lion, scale_by_rms,
    scale_by_rss, scale_by_stddev, trace, AdamOpts,
};
use super::{chain, Mask, Optimizer};

/// Options of [`sgd`] (Optax's defaults: no momentum).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SgdOpts {
    /// The momentum's decay; 0 is plain SGD (no `trace` state).
    pub momentum: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
}

/// Stochastic gradient descent, with momentum when `opts.momentum > 0`:
/// `chain(trace(momentum, nesterov), scale_by_learning_rate(lr))` (Optax's
/// `sgd`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::from_slice(&[1.0f32], &[1]);
/// let opt = optim::sgd(0.1, optim::SgdOpts { momentum: 0.9, nesterov: false });
/// let g = Tensor::from_slice(&[1.0f32], &[1]);
/// let (u0, s) = opt.update(&g, &opt.init(&p), &p);
/// let (u1, _) = opt.update(&g, &s, &p);
/// assert!((u0.item::<f32>() + 0.1).abs() < 1e-7 && (u1.item::<f32>() + 0.19).abs() < 1e-7);
/// ```
pub fn sgd(lr: impl Into<Schedule>, opts: SgdOpts) -> Optimizer {
    let mut parts = Vec::new();
    if opts.momentum != 0.0 {
        parts.push(trace(opts.momentum, opts.nesterov));
    }
    parts.push(scale_by_learning_rate(lr));
    chain(parts)
}

/// Adam: `chain(scale_by_adam(opts), scale_by_learning_rate(lr))` (Optax's
/// `adam`: bias correction from count 1, `eps` outside the square root).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::from_slice(&[1.0f32, 1.0], &[2]);
/// let opt = optim::adam(0.1, optim::AdamOpts::default());
/// let g = Tensor::from_slice(&[0.5f32, -2.0], &[2]);
/// let (u, s) = opt.update(&g, &opt.init(&p), &p);
/// let p = optim::apply_updates(&p, &u);
/// // The first step moves each parameter by lr against its gradient's sign.
/// assert!(p.to_vec::<f32>().iter().zip([0.9, 1.1]).all(|(a, b)| (a - b).abs() < 1e-6));
/// assert_eq!(s.count().item::<i32>(), 1);
/// ```
pub fn adam(lr: impl Into<Schedule>, opts: AdamOpts) -> Optimizer {
    chain(vec![scale_by_adam(opts), scale_by_learning_rate(lr)])
}

/// Options of [`adamw`] (Optax's defaults).
#[derive(Clone, Debug)]
pub struct AdamWOpts {
    /// The first moment's decay (0.9).
    pub b1: f64,
    /// The second moment's decay (0.999).
    pub b2: f64,
    /// Added to the root of the second moment (1e-8).
    pub eps: f64,
    /// The decoupled weight decay (1e-4).
    pub weight_decay: f64,
    /// The leaves the weight decay applies to (`None`: all).
    pub mask: Option<Mask>,
}

impl Default for AdamWOpts {
    fn default() -> Self {
        AdamWOpts {
            b1: 0.9,
            b2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-4,
            mask: None,
        }
    }
}

/// Adam with decoupled weight decay, the update `-lr·(adam + wd·p)`:
/// `chain(scale_by_adam, add_decayed_weights(wd, mask),
/// scale_by_learning_rate(lr))` (Optax's `adamw`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let opt = optim::adamw(
///     optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5),
///     optim::AdamWOpts { weight_decay: 0.1, mask: Some(optim::mask(|p: &str| p.ends_with("w"))), ..Default::default() },
/// );
/// let p = Tensor::ones(&[4], DType::F32);
/// let (u, _) = opt.update(&p, &opt.init(&p), &p);
/// assert_eq!(u.to_vec::<f32>(), vec![0.0; 4]); // the warmup starts at 0
/// ```
pub fn adamw(lr: impl Into<Schedule>, opts: AdamWOpts) -> Optimizer {
    let AdamWOpts {
        b1,
        b2,
        eps,
        weight_decay,
        mask,
    } = opts;
    chain(vec![
        scale_by_adam(AdamOpts { b1, b2, eps }),
        add_decayed_weights(weight_decay, mask),
        scale_by_learning_rate(lr),
    ])
}

/// Options of [`lion`] (Optax's defaults).
#[derive(Clone, Debug)]
pub struct LionOpts {
    /// The interpolation of the update's sign (0.9).
    pub b1: f64,
    /// The moment's decay (0.99).
    pub b2: f64,
    /// The decoupled weight decay (1e-3).
    pub weight_decay: f64,
    /// The leaves the weight decay applies to (`None`: all).
    pub mask: Option<Mask>,
}

impl Default for LionOpts {
    fn default() -> Self {
        LionOpts {
            b1: 0.9,
            b2: 0.99,
            weight_decay: 1e-3,
            mask: None,
        }
    }
}

/// Lion (Chen et al., 2023): `chain(scale_by_lion(b1, b2),
/// add_decayed_weights(wd, mask), scale_by_learning_rate(lr))` (Optax's
/// `lion`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::zeros(&[2], DType::F32);
/// let opt = optim::lion(0.01, optim::LionOpts::default());
/// let (u, _) = opt.update(&Tensor::from_slice(&[3.0f32, -1e-3], &[2]), &opt.init(&p), &p);
/// assert_eq!(u.to_vec::<f32>(), vec![-0.01, 0.01]); // -lr times the sign
/// ```
pub fn lion(lr: impl Into<Schedule>, opts: LionOpts) -> Optimizer {
    chain(vec![
        scale_by_lion(opts.b1, opts.b2),
        add_decayed_weights(opts.weight_decay, opts.mask),
        scale_by_learning_rate(lr),
    ])
}

/// Options of [`rmsprop`] (Optax's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsPropOpts {
    /// The decay of the moving averages (0.9).
    pub decay: f64,
    /// Added inside the square root (1e-8).
    pub eps: f64,
    /// Momentum after the learning rate (0: none, no `trace` state).
    pub momentum: f64,
    /// Divide by the standard deviation of the gradient, not its root mean
    /// square (false).
    pub centered: bool,
}

impl Default for RmsPropOpts {
    fn default() -> Self {
        RmsPropOpts {
            decay: 0.9,
            eps: 1e-8,
            momentum: 0.0,
            centered: false,
        }
    }
}

/// RMSProp: `chain(scale_by_rms or scale_by_stddev (centered),
/// scale_by_learning_rate(lr), trace(momentum))` (Optax's `rmsprop` with
/// `initial_scale` 0, `eps` inside the square root, no bias correction).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::zeros(&[1], DType::F32);
/// let opt = optim::rmsprop(0.01, optim::RmsPropOpts::default());
/// let (u, _) = opt.update(&Tensor::from_slice(&[2.0f32], &[1]), &opt.init(&p), &p);
/// // nu = 0.1 * 4, so the update is -0.01 * 2 / sqrt(0.4).
/// assert!((u.item::<f32>() + 0.02 / 0.4f32.sqrt()).abs() < 1e-7);
/// ```
pub fn rmsprop(lr: impl Into<Schedule>, opts: RmsPropOpts) -> Optimizer {
    let scaling = if opts.centered {
        scale_by_stddev(opts.decay, opts.eps)
    } else {
        scale_by_rms(opts.decay, opts.eps)
    };
    let mut parts = vec![scaling, scale_by_learning_rate(lr)];
    if opts.momentum != 0.0 {
        parts.push(trace(opts.momentum, false));
    }
    chain(parts)
}

/// Options of [`adagrad`] (Optax's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdagradOpts {
    /// The sum of squares' starting value (0.1).
    pub initial_accumulator_value: f64,
    /// Added inside the square root (1e-7).
    pub eps: f64,
}

impl Default for AdagradOpts {
    fn default() -> Self {
        AdagradOpts {
            initial_accumulator_value: 0.1,
            eps: 1e-7,
        }
    }
}

/// Adagrad: `chain(scale_by_rss(initial_accumulator_value, eps),
/// scale_by_learning_rate(lr))` (Optax's `adagrad`).
///
/// ```
/// use rune::prelude::*;
/// use rune::optim;
/// let p = Tensor::zeros(&[1], DType::F32);
/// let opt = optim::adagrad(0.1, optim::AdagradOpts::default());
/// let (u, _) = opt.update(&Tensor::from_slice(&[1.0f32], &[1]), &opt.init(&p), &p);
/// assert!((u.item::<f32>() + 0.1 / 1.1f32.sqrt()).abs() < 1e-7);
/// ```
pub fn adagrad(lr: impl Into<Schedule>, opts: AdagradOpts) -> Optimizer {
    chain(vec![
        scale_by_rss(opts.initial_accumulator_value, opts.eps),
        scale_by_learning_rate(lr),
    ])
}
