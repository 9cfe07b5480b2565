//! Normalization layers: `LayerNorm` and `RmsNorm` (over the last axis of
//! each example) and `BatchNorm` (over the batch, per channel, with its
//! running statistics `BatchStats` kept apart from the trained leaves).

use nx::{DType, Ptree, Tensor};

use super::{check_float, check_last_axis};

/// Layer normalization over the last axis: `(x − mean) / sqrt(var + eps) ·
/// scale + bias`, with the biased variance.
///
/// ```
/// use rune::prelude::*;
/// let ln = rune::nn::LayerNorm::new(4);
/// let y = ln.forward(&Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]));
/// // mean 2.5, variance 1.25
/// let want: Vec<f32> = [-1.5f32, -0.5, 0.5, 1.5].iter().map(|d| d / (1.25f32 + 1e-5).sqrt()).collect();
/// assert!(y.to_vec::<f32>().iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct LayerNorm {
    /// The gain `[dim]`, ones.
    pub scale: Tensor,
    /// The shift `[dim]`, zeros.
    pub bias: Tensor,
    /// Added to the variance (1e-5).
    #[ptree(ignore)]
    pub eps: f64,
}

impl LayerNorm {
    /// A layer normalizing `dim` features, `eps` 1e-5.
    pub fn new(dim: usize) -> LayerNorm {
        LayerNorm {
            scale: Tensor::ones(&[dim], DType::F32),
            bias: Tensor::zeros(&[dim], DType::F32),
            eps: 1e-5,
        }
    }

    /// `x [.., dim]` normalized over its last axis; panics naming
    /// `LayerNorm` on another last axis.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        check_float("LayerNorm", x);
        check_last_axis("LayerNorm", x, self.scale.shape()[0], "dim");
        let centered = x - x.mean(&[-1], true);
        let var = centered.square().mean(&[-1], true);
        centered / (var + self.eps).sqrt() * &self.scale + &self.bias
    }
}

/// Root-mean-square normalization over the last axis: `x / sqrt(mean(x²)
/// + eps) · scale` (no centering, no bias).
///
/// ```
/// use rune::prelude::*;
/// let rms = rune::nn::RmsNorm::new(2);
/// let y = rms.forward(&Tensor::from_slice(&[3.0f32, 4.0], &[2]));
/// let r = (12.5f32 + 1e-6).sqrt();
/// assert_eq!(y.to_vec::<f32>(), vec![3.0 / r, 4.0 / r]);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct RmsNorm {
    /// The gain `[dim]`, ones.
    pub scale: Tensor,
    /// Added to the mean square (1e-6).
    #[ptree(ignore)]
    pub eps: f64,
}

impl RmsNorm {
    /// A layer normalizing `dim` features, `eps` 1e-6.
    pub fn new(dim: usize) -> RmsNorm {
        RmsNorm {
            scale: Tensor::ones(&[dim], DType::F32),
            eps: 1e-6,
        }
    }

    /// `x [.., dim]` normalized over its last axis; panics naming `RmsNorm`
    /// on another last axis.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        check_float("RmsNorm", x);
        check_last_axis("RmsNorm", x, self.scale.shape()[0], "dim");
        let mean_square = x.square().mean(&[-1], true);
        x / (mean_square + self.eps).sqrt() * &self.scale
    }
}

/// The running statistics of a [`BatchNorm`], per channel: a parameter
/// tree of its own, carried beside the model's parameters (not trained).
#[derive(Ptree, Clone, Debug)]
pub struct BatchStats {
    /// Running mean `[channels]`, zeros at first.
    pub mean: Tensor,
    /// Running (biased) variance `[channels]`, ones at first.
    pub var: Tensor,
}

impl BatchStats {
    /// The statistics before any batch: mean 0, variance 1.
    pub fn new(channels: usize) -> BatchStats {
        BatchStats {
            mean: Tensor::zeros(&[channels], DType::F32),
            var: Tensor::ones(&[channels], DType::F32),
        }
    }
}

/// Batch normalization of axis 1 (the channels of `[N, C, ..]`, or the
/// features of `[N, C]`): in training each channel is normalized by the
/// batch's mean and biased variance over every other axis, and the
/// running statistics move to `momentum · old + (1 − momentum) · batch`;
/// in evaluation the running statistics are used.
///
/// ```
/// use rune::prelude::*;
/// use rune::nn::{BatchNorm, BatchStats};
/// let bn = BatchNorm::new(1);
/// let x = Tensor::from_slice(&[1.0f32, 3.0], &[2, 1]);
/// let (y, stats) = bn.forward_train(&x, &BatchStats::new(1));
/// let s = (1.0f32 + 1e-5).sqrt(); // batch mean 2, variance 1
/// assert_eq!(y.to_vec::<f32>(), vec![-1.0 / s, 1.0 / s]);
/// assert!((stats.mean.item::<f32>() - 0.2).abs() < 1e-6); // 0.9 * 0 + 0.1 * 2
/// assert!((stats.var.item::<f32>() - 1.0).abs() < 1e-6);  // 0.9 * 1 + 0.1 * 1
/// let y_eval = bn.forward_eval(&x, &stats); // (x - 0.2) / sqrt(1 + 1e-5)
/// assert!((y_eval.to_vec::<f32>()[1] - 2.8 / s).abs() < 1e-6);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct BatchNorm {
    /// The gain per channel `[channels]`, ones.
    pub scale: Tensor,
    /// The shift per channel `[channels]`, zeros.
    pub bias: Tensor,
    /// Added to the variance (1e-5).
    #[ptree(ignore)]
    pub eps: f64,
    /// The weight of the old running statistics in each update (0.9).
    #[ptree(ignore)]
    pub momentum: f64,
}

impl BatchNorm {
    /// A layer over `channels` channels, `eps` 1e-5, momentum 0.9; its
    /// statistics start as [`BatchStats::new`]`(channels)`.
    pub fn new(channels: usize) -> BatchNorm {
        BatchNorm {
            scale: Tensor::ones(&[channels], DType::F32),
            bias: Tensor::zeros(&[channels], DType::F32),
            eps: 1e-5,
            momentum: 0.9,
        }
    }

    /// Normalizes `x [N, C, ..]` by its own statistics per channel and
    /// returns it with the updated running statistics.
    pub fn forward_train(&self, x: &Tensor, stats: &BatchStats) -> (Tensor, BatchStats) {
        self.check("forward_train", x, stats);
        let axes: Vec<isize> = (0..x.ndim() as isize).filter(|&a| a != 1).collect();
        let mean = x.mean(&axes, true);
        let centered = x - &mean;
        let var = centered.square().mean(&axes, true);
        let y = self.affine(&(centered / (&var + self.eps).sqrt()), x.ndim());
        let channels = [self.scale.shape()[0]];
        let m = self.momentum;
        let running = BatchStats {
            mean: &stats.mean * m + mean.reshape(&channels) * (1.0 - m),
            var: &stats.var * m + var.reshape(&channels) * (1.0 - m),
        };
        (y, running)
    }

    /// Normalizes `x [N, C, ..]` by the running statistics `stats`.
    pub fn forward_eval(&self, x: &Tensor, stats: &BatchStats) -> Tensor {
        self.check("forward_eval", x, stats);
        let shape = Self::channel_shape(self.scale.shape()[0], x.ndim());
        let normalized =
            (x - stats.mean.reshape(&shape)) / (stats.var.reshape(&shape) + self.eps).sqrt();
        self.affine(&normalized, x.ndim())
    }

    /// `[1, C, 1, ..]`: a per-channel vector broadcast against `[N, C, ..]`.
    fn channel_shape(channels: usize, ndim: usize) -> Vec<usize> {
        let mut shape = vec![1; ndim];
        shape[1] = channels;
        shape
    }

    /// `normalized · scale + bias`, per channel.
    fn affine(&self, normalized: &Tensor, ndim: usize) -> Tensor {
        let shape = Self::channel_shape(self.scale.shape()[0], ndim);
        normalized * self.scale.reshape(&shape) + self.bias.reshape(&shape)
    }

    /// Panics naming `BatchNorm` unless `x` is `[N, C, ..]` and `stats`
    /// holds `C` channels.
    fn check(&self, method: &str, x: &Tensor, stats: &BatchStats) {
        let who = format!("BatchNorm::{method}");
        check_float(&who, x);
        let c = self.scale.shape()[0];
        if x.ndim() < 2 || x.shape()[1] != c {
            panic!(
                "{who}: expected an input of shape [N, {c}, ..] (channels = {c}), got {:?}",
                x.shape()
            );
        }
        if stats.mean.shape() != [c] || stats.var.shape() != [c] {
            panic!(
                "{who}: expected statistics of shape [{c}], got mean {:?} and var {:?}",
                stats.mean.shape(),
                stats.var.shape()
            );
        }
    }
}
