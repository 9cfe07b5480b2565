//! `Dropout`: zeroes a random fraction of its input while training, with
//! the key passed explicitly (no hidden state, so it traces, vmaps and
//! replays).

use nx::{Ptree, Tensor};

use super::check_float;

/// Inverted dropout: with a key, each element is zeroed with probability
/// `rate` and the others scaled by `1 / (1 − rate)`, so the expectation is
/// unchanged; without a key (evaluation) it is the identity.
///
/// ```
/// use rune::prelude::*;
/// let drop = rune::nn::Dropout::new(0.5);
/// let x = Tensor::ones(&[1000], DType::F32);
/// let y = drop.forward(&x, Some(&rune::rng::key(0))).to_vec::<f32>();
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// assert_eq!(drop.forward(&x, None).to_vec::<f32>(), x.to_vec::<f32>());
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct Dropout {
    /// The probability of zeroing an element, in [0, 1].
    #[ptree(ignore)]
    pub rate: f64,
}

impl Dropout {
    /// Dropout with probability `rate`; panics naming `Dropout` outside [0, 1].
    pub fn new(rate: f64) -> Dropout {
        if !(0.0..=1.0).contains(&rate) {
            panic!("Dropout: rate must be in [0, 1], got {rate}");
        }
        Dropout { rate }
    }

    /// `x` with dropout drawn from `key`, or `x` itself when `key` is
    /// `None`. A rate of 1 gives zeros.
    pub fn forward(&self, x: &Tensor, key: Option<&Tensor>) -> Tensor {
        check_float("Dropout", x);
        let Some(key) = key else {
            return x.clone();
        };
        if self.rate == 0.0 {
            return x.clone();
        }
        let zero = x.scalar_like(0.0);
        if self.rate == 1.0 {
            return x * zero;
        }
        let keep = crate::rng::bernoulli(key, 1.0 - self.rate, x.shape());
        Tensor::where_(&keep, &(x / (1.0 - self.rate)), &zero)
    }
}
