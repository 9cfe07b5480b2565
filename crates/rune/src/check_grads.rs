//! `check_grads`: reverse-mode gradients against central differences along
//! a few deterministic directions, on real and complex leaves.
//!
//! With JAX's convention the gradient `g` of a real objective at a complex
//! leaf `z` is the conjugate Wirtinger form (`∂f/∂x - i ∂f/∂y`), so the
//! derivative along a complex direction `v` is `real(sum(g * v))` — the
//! identity JAX's `check_vjp` tests through its inner product
//! `real(sum(conj(t) * conj(vjp(conj(ct)))))` against the numerical JVP. A
//! complex objective is checked as its real and imaginary parts (the
//! cotangents 1 and i of JAX's check).

use nx::{DType, Ptree, Tensor};

/// Options of [`check_grads_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CheckGradsOpts {
    /// Relative tolerance on each directional derivative.
    pub tol: f64,
    /// Central-difference step.
    pub eps: f64,
}

impl Default for CheckGradsOpts {
    fn default() -> Self {
        CheckGradsOpts {
            tol: 1e-2,
            eps: 1e-4,
        }
    }
}

/// How many directions are checked.
const DIRECTIONS: u64 = 3;

/// Compares the reverse-mode gradient of the scalar objective `f` at `params`
/// against central differences along deterministic directions, with the
/// default options (`tol` 1e-2 relative, `eps` 1e-4). `Err` describes the
/// first disagreement. Use f64 parameters for reliable results.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[0.3f64, -1.2, 2.0], &[3]);
/// assert!(rune::check_grads(|x: &Tensor| x.sin().sum_all(), &x).is_ok());
/// ```
pub fn check_grads<P: Ptree>(f: impl Fn(&P) -> Tensor, params: &P) -> Result<(), String> {
    check_grads_with(f, params, CheckGradsOpts::default())
}

/// [`check_grads`] with explicit tolerance and step.
pub fn check_grads_with<P: Ptree>(
    f: impl Fn(&P) -> Tensor,
    params: &P,
    opts: CheckGradsOpts,
) -> Result<(), String> {
    crate::differentiate::require_float_leaves("check_grads", params);
    let complex_out = crate::no_grad(|| f(params)).dtype().is_complex();
    if complex_out {
        check_real(|p: &P| f(p).sum_all().real(), params, opts, " (real part)")?;
        check_real(
            |p: &P| f(p).sum_all().imag(),
            params,
            opts,
            " (imaginary part)",
        )
    } else {
        check_real(f, params, opts, "")
    }
}

/// The check for a real objective; `part` names which part of a complex
/// objective it is in the error.
fn check_real<P: Ptree>(
    f: impl Fn(&P) -> Tensor,
    params: &P,
    opts: CheckGradsOpts,
    part: &str,
) -> Result<(), String> {
    let g = crate::grad(&f, params);
    let leaves = params.leaves();
    let grads = g.leaves();
    let eval = |p: &P| f(p).cast(DType::F64).sum_all().item::<f64>();
    for k in 0..DIRECTIONS {
        let dirs: Vec<Tensor> = leaves
            .iter()
            .enumerate()
            .map(|(i, leaf)| direction(leaf, k * 1_000_003 + i as u64))
            .collect();
        // real(sum(g * v)): JAX's convention makes this the directional
        // derivative on complex leaves too (see the module docs).
        let analytic: f64 = grads
            .iter()
            .zip(&dirs)
            .map(|(g, d)| (g * d).real().cast(DType::F64).sum_all().item::<f64>())
            .sum();
        let step = |sign: f64| {
            let moved: Vec<Tensor> = leaves
                .iter()
                .zip(&dirs)
                .map(|(x, d)| x + d * (sign * opts.eps))
                .collect();
            eval(&params.with_leaves(&moved))
        };
        let numeric = (step(1.0) - step(-1.0)) / (2.0 * opts.eps);
        let err = (analytic - numeric).abs();
        let scale = analytic.abs().max(numeric.abs());
        if !(err <= opts.tol * scale || err <= opts.tol * opts.eps) {
            return Err(format!(
                "check_grads{part}: along direction {k}, the reverse-mode derivative is {analytic:.6e} \
                 but the central difference is {numeric:.6e} (relative error {:.2e} > tol {})",
                err / scale.max(f64::MIN_POSITIVE),
                opts.tol
            ));
        }
    }
    Ok(())
}

/// A deterministic direction of `like`'s shape and dtype with entries in
/// [-1, 1] (splitmix64 of `seed` and the element index); on a complex leaf
/// both parts are drawn (a real direction would miss the imaginary axis).
fn direction(like: &Tensor, seed: u64) -> Tensor {
    let d = like.dtype();
    if d.is_complex() {
        let part = |s: u64| real_direction(like.shape(), s).cast(d.real_dtype());
        return Tensor::complex(&part(seed), &part(seed ^ 0x5DEE_CE66_D1CE_4E5B));
    }
    real_direction(like.shape(), seed).cast(d)
}

fn real_direction(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n as u64)
        .map(|i| {
            let mut z = seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(i.wrapping_mul(0xD1B5_4A32_D192_ED03))
                .wrapping_add(0x2545_F491_4F6C_DD1D);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect();
    Tensor::from_vec(data, shape)
}
