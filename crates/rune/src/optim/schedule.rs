//! Learning-rate schedules: a value per step count, with Optax's formulas.
//!
//! A [`Schedule`] is evaluated twice over: on the host with
//! [`Schedule::at`] (an `f64`, for logging and tests), and inside an
//! optimizer's `update` on the state's step count *as a tensor*
//! (`at_count`), in F32 as Optax computes it, so that one compiled training
//! step serves every step count.

use nx::{DType, Tensor};
use std::f64::consts::PI;

/// A value as a function of the step count (Optax's schedules).
///
/// Built by [`constant`], [`linear_schedule`], [`cosine_decay`],
/// [`warmup_cosine_decay`], [`exponential_decay`] and
/// [`piecewise_constant`]; an `f64` converts into a constant schedule, so
/// every optimizer's `lr: impl Into<Schedule>` takes either.
///
/// ```
/// use rune::optim;
/// let s = optim::warmup_cosine_decay(0.0, 1.0, 10, 110, 0.1);
/// assert_eq!(s.at(0), 0.0);
/// assert!((s.at(5) - 0.5).abs() < 1e-12);             // halfway up the warmup
/// assert_eq!(s.at(10), 1.0);                           // the peak
/// assert!((s.at(60) - 0.55).abs() < 1e-12);           // halfway down: (1 + 0.1) / 2
/// assert!((s.at(1000) - 0.1).abs() < 1e-12);          // the end value from then on
/// let c: optim::Schedule = 1e-3.into();
/// assert_eq!(c.at(123), 1e-3);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    kind: Kind,
}

/// The formulas. Fields are Optax's arguments.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Constant(f64),
    /// `(init - end) · (1 - min(step, steps) / steps) + end`.
    Linear {
        init: f64,
        end: f64,
        transition_steps: u64,
    },
    /// `init · ((1 - alpha) · ½(1 + cos(π · min(step, steps) / steps)) + alpha)`.
    Cosine {
        init: f64,
        decay_steps: u64,
        alpha: f64,
    },
    /// Linear from `init` to `peak` over `warmup_steps`, then a cosine from
    /// `peak` to `end` over the remaining `decay_steps - warmup_steps`.
    WarmupCosine {
        init: f64,
        peak: f64,
        warmup_steps: u64,
        decay_steps: u64,
        end: f64,
    },
    /// `init · rate^(step / transition_steps)` (the exponent floored when
    /// `staircase`).
    Exponential {
        init: f64,
        rate: f64,
        transition_steps: u64,
        staircase: bool,
    },
    /// `init` times the scale of every boundary the step has reached,
    /// boundaries in increasing order.
    Piecewise {
        init: f64,
        boundaries_and_scales: Vec<(u64, f64)>,
    },
}

/// `value` at every step.
///
/// ```
/// assert_eq!(rune::optim::constant(0.5).at(7), 0.5);
/// ```
pub fn constant(value: f64) -> Schedule {
    Schedule {
        kind: Kind::Constant(value),
    }
}

/// From `init` to `end` linearly over `transition_steps`, then `end`
/// (Optax's `linear_schedule`; `transition_steps == 0` is the constant
/// `init`, as there).
///
/// ```
/// let s = rune::optim::linear_schedule(1.0, 0.0, 4);
/// assert_eq!([s.at(0), s.at(1), s.at(4), s.at(9)], [1.0, 0.75, 0.0, 0.0]);
/// ```
pub fn linear_schedule(init: f64, end: f64, transition_steps: u64) -> Schedule {
    if transition_steps == 0 {
        return constant(init);
    }
    Schedule {
        kind: Kind::Linear {
            init,
            end,
            transition_steps,
        },
    }
}

/// Cosine decay from `init` to `alpha · init` over `decay_steps`, then
/// `alpha · init` (Optax's `cosine_decay_schedule`). Panics when
/// `decay_steps` is 0, as Optax raises.
///
/// ```
/// let s = rune::optim::cosine_decay(2.0, 10, 0.0);
/// assert_eq!(s.at(0), 2.0);
/// assert!((s.at(5) - 1.0).abs() < 1e-12 && s.at(10).abs() < 1e-12);
/// ```
pub fn cosine_decay(init: f64, decay_steps: u64, alpha: f64) -> Schedule {
    assert!(
        decay_steps > 0,
        "optim::cosine_decay: decay_steps must be positive, got 0"
    );
    Schedule {
        kind: Kind::Cosine {
            init,
            decay_steps,
            alpha,
        },
    }
}

/// Linear warmup from `init` to `peak` over `warmup_steps`, then cosine
/// decay to `end` at step `decay_steps` (which counts the warmup), then
/// `end` (Optax's `warmup_cosine_decay_schedule`). Panics unless
/// `decay_steps > warmup_steps`, as Optax raises.
///
/// ```
/// let s = rune::optim::warmup_cosine_decay(0.0, 1e-3, 100, 10_000, 1e-5);
/// assert_eq!(s.at(100), 1e-3);
/// assert!((s.at(10_000) - 1e-5).abs() < 1e-18);
/// ```
pub fn warmup_cosine_decay(
    init: f64,
    peak: f64,
    warmup_steps: u64,
    decay_steps: u64,
    end: f64,
) -> Schedule {
    assert!(
        decay_steps > warmup_steps,
        "optim::warmup_cosine_decay: decay_steps ({decay_steps}) must exceed warmup_steps \
         ({warmup_steps}): it counts the warmup"
    );
    Schedule {
        kind: Kind::WarmupCosine {
            init,
            peak,
            warmup_steps,
            decay_steps,
            end,
        },
    }
}

/// `init · rate^(step / transition_steps)`, the exponent floored to an
/// integer when `staircase` (Optax's `exponential_decay`;
/// `transition_steps == 0` or `rate == 0` is the constant `init`, as there).
///
/// ```
/// let s = rune::optim::exponential_decay(1.0, 0.5, 2, true);
/// assert_eq!([s.at(0), s.at(1), s.at(2), s.at(5)], [1.0, 1.0, 0.5, 0.25]);
/// ```
pub fn exponential_decay(init: f64, rate: f64, transition_steps: u64, staircase: bool) -> Schedule {
    if transition_steps == 0 || rate == 0.0 {
        return constant(init);
    }
    Schedule {
        kind: Kind::Exponential {
            init,
            rate,
            transition_steps,
            staircase,
        },
    }
}

/// `init`, multiplied by `scale` from each `boundary` step on (Optax's
/// `piecewise_constant_schedule`; the pairs may come in any order). Panics
/// on a negative scale, as Optax raises.
///
/// ```
/// let s = rune::optim::piecewise_constant(1.0, &[(10, 0.1), (5, 0.5)]);
/// assert_eq!([s.at(4), s.at(5), s.at(9), s.at(10)], [1.0, 0.5, 0.5, 0.05]);
/// ```
pub fn piecewise_constant(init: f64, boundaries_and_scales: &[(u64, f64)]) -> Schedule {
    if let Some((b, s)) = boundaries_and_scales.iter().find(|(_, s)| *s < 0.0) {
        panic!("optim::piecewise_constant: scales must be non-negative, got {s} at boundary {b}");
    }
    let mut sorted = boundaries_and_scales.to_vec();
    sorted.sort_by_key(|(boundary, _)| *boundary);
    Schedule {
        kind: Kind::Piecewise {
            init,
            boundaries_and_scales: sorted,
        },
    }
}

impl From<f64> for Schedule {
    fn from(value: f64) -> Schedule {
        constant(value)
    }
}

impl From<f32> for Schedule {
    fn from(value: f32) -> Schedule {
        constant(value as f64)
    }
}

impl Schedule {
    /// The value at step `step`, in `f64`.
    ///
    /// ```
    /// assert!((rune::optim::linear_schedule(0.0, 1.0, 10).at(3) - 0.3).abs() < 1e-12);
    /// ```
    pub fn at(&self, step: u64) -> f64 {
        let step = step as f64;
        match &self.kind {
            Kind::Constant(v) => *v,
            Kind::Linear {
                init,
                end,
                transition_steps,
            } => linear_at(*init, *end, *transition_steps as f64, step),
            Kind::Cosine {
                init,
                decay_steps,
                alpha,
            } => cosine_at(*init, *decay_steps as f64, *alpha, step),
            Kind::WarmupCosine {
                init,
                peak,
                warmup_steps,
                decay_steps,
                end,
            } => {
                let warmup = *warmup_steps as f64;
                if step < warmup {
                    linear_at(*init, *peak, warmup, step)
                } else {
                    let alpha = if *peak == 0.0 { 0.0 } else { end / peak };
                    cosine_at(*peak, *decay_steps as f64 - warmup, alpha, step - warmup)
                }
            }
            Kind::Exponential {
                init,
                rate,
                transition_steps,
                staircase,
            } => {
                let mut p = step / *transition_steps as f64;
                if *staircase {
                    p = p.floor();
                }
                if step <= 0.0 {
                    *init
                } else {
                    init * rate.powf(p)
                }
            }
            Kind::Piecewise {
                init,
                boundaries_and_scales,
            } => boundaries_and_scales
                .iter()
                .filter(|(boundary, _)| step >= *boundary as f64)
                .fold(*init, |v, (_, scale)| v * scale),
        }
    }

    /// The value when it does not depend on the step: an optimizer then
    /// multiplies by the number itself, in each leaf's dtype.
    pub(crate) fn as_constant(&self) -> Option<f64> {
        match self.kind {
            Kind::Constant(v) => Some(v),
            _ => None,
        }
    }

    /// The value at `count` (an integer tensor, 0-d outside `vmap`), as an
    /// F32 tensor of `count`'s shape: Optax's arithmetic, in F32 as Optax
    /// computes it, with no host read, so it traces under `jit`.
    pub(crate) fn at_count(&self, count: &Tensor) -> Tensor {
        let step = count.cast(DType::F32);
        let value = |v: f64| step.scalar_like(v);
        match &self.kind {
            Kind::Constant(v) => value(*v).broadcast_to(step.shape()),
            Kind::Linear {
                init,
                end,
                transition_steps,
            } => linear_tensor(*init, *end, *transition_steps as f64, &step),
            Kind::Cosine {
                init,
                decay_steps,
                alpha,
            } => cosine_tensor(*init, *decay_steps as f64, *alpha, &step),
            Kind::WarmupCosine {
                init,
                peak,
                warmup_steps,
                decay_steps,
                end,
            } => {
                let warmup = *warmup_steps as f64;
                let alpha = if *peak == 0.0 { 0.0 } else { end / peak };
                // No warmup: Optax's linear_schedule over 0 steps is the
                // constant `init` (and never selected here).
                let rising = if *warmup_steps == 0 {
                    value(*init).broadcast_to(step.shape())
                } else {
                    linear_tensor(*init, *peak, warmup, &step)
                };
                let falling = cosine_tensor(
                    *peak,
                    *decay_steps as f64 - warmup,
                    alpha,
                    &(&step - warmup),
                );
                // Optax's join_schedules: the second schedule counts from
                // the boundary.
                Tensor::where_(&step.less(&value(warmup)), &rising, &falling)
            }
            Kind::Exponential {
                init,
                rate,
                transition_steps,
                staircase,
            } => {
                let mut p = &step / *transition_steps as f64;
                if *staircase {
                    p = p.floor();
                }
                let decayed = value(*rate).pow(&p) * *init;
                Tensor::where_(
                    &step.less_equal(&value(0.0)),
                    &value(*init).broadcast_to(step.shape()),
                    &decayed,
                )
            }
            Kind::Piecewise {
                init,
                boundaries_and_scales,
            } => {
                let mut v = value(*init).broadcast_to(step.shape());
                for (boundary, scale) in boundaries_and_scales {
                    let reached = step.greater_equal(&value(*boundary as f64));
                    v = Tensor::where_(&reached, &(&v * *scale), &v);
                }
                v
            }
        }
    }
}

fn linear_at(init: f64, end: f64, transition_steps: f64, step: f64) -> f64 {
    let frac = 1.0 - step.clamp(0.0, transition_steps) / transition_steps;
    (init - end) * frac + end
}

fn cosine_at(init: f64, decay_steps: f64, alpha: f64, step: f64) -> f64 {
    let cosine = 0.5 * (1.0 + (PI * step.min(decay_steps) / decay_steps).cos());
    init * ((1.0 - alpha) * cosine + alpha)
}

/// [`linear_at`] on a tensor, in Optax's order of operations.
fn linear_tensor(init: f64, end: f64, transition_steps: f64, step: &Tensor) -> Tensor {
    let frac = 1.0 - step.clamp(0.0, transition_steps) / transition_steps;
    frac * (init - end) + end
}

/// [`cosine_at`] on a tensor, in Optax's order of operations.
fn cosine_tensor(init: f64, decay_steps: f64, alpha: f64, step: &Tensor) -> Tensor {
    let reached = step.minimum(&step.scalar_like(decay_steps));
    let cosine = ((reached * PI / decay_steps).cos() + 1.0) * 0.5;
    (cosine * (1.0 - alpha) + alpha) * init
}
