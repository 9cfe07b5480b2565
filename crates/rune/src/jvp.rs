//! Forward mode: the jvp trace. A tracer carries a primal value and its
//! tangent; each primitive's rule computes the output tangent with ordinary
//! tensor operations (so forward mode nests with everything else).
//!
//! A zero tangent is symbolic: an operation whose inputs all have zero
//! tangents (or whose derivative is zero) returns a plain value, not a tracer.

use crate::autodiff::add_opt;
use crate::gradient_control::is_inactive;
use crate::rules::{
    binary_partials, complex_to_real_coeff, cumprod_jvp, extremum_weights, prod_others, reduce_sum,
    unary_partial, WindowSpec,
};
use crate::scope::{Tag, TaggedTracer, TracerState};
use nx::trace::{with_ceiling, CustomJvpCall, CustomVjpCall};
use nx::{bind, BinaryOp, CumOp, F64Bits, Prim, ReduceOp, Tensor, Trace, UnaryOp};
use std::any::Any;
use std::sync::Arc;

/// A jvp tracer's state: a primal value and its tangent.
pub(crate) struct Dual {
    pub primal: Tensor,
    pub tangent: Tensor,
}

impl TracerState for Dual {
    fn value(&self) -> Option<&Tensor> {
        Some(&self.primal)
    }
}

#[derive(Clone)]
pub(crate) struct JvpTrace {
    pub level: usize,
    pub tag: Arc<Tag>,
}

impl JvpTrace {
    /// `t` as a tracer of this trace: its primal and tangent (None when `t`
    /// is a constant to this trace).
    pub(crate) fn unpack(&self, t: &Tensor) -> (Tensor, Option<Tensor>) {
        match TaggedTracer::<Dual>::of(t, &self.tag) {
            Some(d) => (d.primal.clone(), Some(d.tangent.clone())),
            None => (t.clone(), None),
        }
    }

    /// A tracer of this trace, or the primal itself when the tangent is zero.
    pub(crate) fn pack(&self, primal: Tensor, tangent: Option<Tensor>) -> Tensor {
        match tangent {
            Some(tangent) if primal.dtype().is_inexact() => {
                let aval = primal.aval();
                TaggedTracer::wrap(Dual { primal, tangent }, aval, self.level, &self.tag)
            }
            _ => primal,
        }
    }
}

impl Trace for JvpTrace {
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        let (primals, tangents): (Vec<Tensor>, Vec<Option<Tensor>>) =
            inputs.iter().map(|t| self.unpack(t)).unzip();
        if prim == Prim::Assign && tangents.iter().any(Option::is_some) {
            panic!(
                "assign: cannot write to or from a tensor being differentiated (inside jvp); \
                 build a new tensor instead (where_, concatenate, pad)"
            );
        }
        let refs: Vec<&Tensor> = primals.iter().collect();
        let out = bind(prim.clone(), &refs);
        if is_inactive(self.level) || !out.dtype().is_inexact() {
            return out;
        }
        let tangent = jvp_rule(&prim, &primals, &tangents, &out);
        self.pack(out, tangent)
    }

    fn process_multi(&self, op: &Arc<dyn nx::MultiOp>, inputs: &[&Tensor]) -> Vec<Tensor> {
        crate::scope::multi_op_rule(crate::scope::Transformation::Jvp, self, op, inputs)
    }

    /// The user's rule replaces the function's operations: it runs on the
    /// primals and tangents below this trace.
    fn process_custom_jvp_call(&self, call: &CustomJvpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        if is_inactive(self.level) {
            return (call.fun)(inputs);
        }
        let (primals, tangents): (Vec<Tensor>, Vec<Tensor>) = inputs
            .iter()
            .map(|t| {
                let (p, t) = self.unpack(t);
                let t = t.unwrap_or_else(|| p.zeros_like());
                (p, t)
            })
            .unzip();
        let (outs, touts) = with_ceiling(self.level, || (call.jvp)(&primals, &tangents));
        outs.into_iter()
            .zip(touts)
            .map(|(o, t)| self.pack(o, Some(t)))
            .collect()
    }

    /// A reverse rule cannot serve forward mode.
    fn process_custom_vjp_call(&self, call: &CustomVjpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        if !is_inactive(self.level) {
            panic!(
                "{}: differentiated in forward mode (jvp, hvp, jacfwd); \
                 define a custom_jvp rule for that",
                call.name
            );
        }
        (call.fwd)(inputs).0
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The output tangent of `prim` at `primals` given the input tangents (None
/// = zero), and the primal output `out`. `None` means a zero tangent.
fn jvp_rule(prim: &Prim, xs: &[Tensor], ts: &[Option<Tensor>], out: &Tensor) -> Option<Tensor> {
    // Applies a primitive that is linear in its first input to its tangent.
    let linear = |t: &Option<Tensor>| t.as_ref().map(|t| bind(prim.clone(), &[t]));
    match prim {
        Prim::Full { .. } | Prim::Iota { .. } => None,
        // Linear over the reals: the same map on the tangent.
        Prim::Unary(UnaryOp::Real | UnaryOp::Imag | UnaryOp::Conj) => linear(&ts[0]),
        Prim::Binary(BinaryOp::Complex) => {
            let (re, im) = (ts[0].as_ref(), ts[1].as_ref());
            let zero = || xs[0].zeros_like();
            re.or(im)?;
            let re = re.cloned().unwrap_or_else(zero);
            let im = im.cloned().unwrap_or_else(zero);
            Some(Tensor::complex(&re, &im))
        }
        Prim::Unary(op @ (UnaryOp::Abs | UnaryOp::Angle)) if xs[0].dtype().is_complex() => {
            let t = ts[0].as_ref()?;
            Some((t * complex_to_real_coeff(*op, &xs[0], out)).real())
        }
        Prim::Unary(op) => {
            let t = ts[0].as_ref()?;
            unary_partial(*op, &xs[0], out).apply(t)
        }
        Prim::Binary(op) => {
            let needs = [ts[0].is_some(), ts[1].is_some()];
            let [px, py] = binary_partials(*op, &xs[0], &xs[1], out, needs);
            let a = ts[0].as_ref().and_then(|t| px.apply(t));
            let b = ts[1].as_ref().and_then(|t| py.apply(t));
            add_opt(a, b)
        }
        Prim::Compare(_) | Prim::ArgReduce { .. } | Prim::StopGradient => None,
        // Integer outputs.
        Prim::Threefry2x32
        | Prim::WindowArgmax { .. }
        | Prim::Argsort { .. }
        | Prim::TopK { .. } => None,
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => {
            let t = ts[0].as_ref()?;
            match op {
                ReduceOp::Sum => linear(&ts[0]),
                _ => {
                    let spec = WindowSpec {
                        window: window.clone(),
                        strides: strides.clone(),
                        padding: padding.clone(),
                    };
                    if spec.tiles(out.shape()) {
                        Some(spec.max_select_tiled(t, &xs[0], out))
                    } else {
                        Some(spec.select(t, &spec.argmax(&xs[0])))
                    }
                }
            }
        }
        Prim::Where => {
            if ts[1].is_none() && ts[2].is_none() {
                return None;
            }
            let a = ts[1].clone().unwrap_or_else(|| xs[1].zeros_like());
            let b = ts[2].clone().unwrap_or_else(|| xs[2].zeros_like());
            Some(bind(Prim::Where, &[&xs[0], &a, &b]))
        }
        Prim::Cast(dtype) => {
            if dtype.is_inexact() && xs[0].dtype().is_inexact() {
                linear(&ts[0])
            } else {
                None
            }
        }
        Prim::Reduce { op, axes } => {
            let t = ts[0].as_ref()?;
            match op {
                ReduceOp::Sum => linear(&ts[0]),
                ReduceOp::Prod => Some(reduce_sum(&(t * prod_others(&xs[0], axes)), axes)),
                ReduceOp::Max | ReduceOp::Min => {
                    Some(reduce_sum(&(t * extremum_weights(&xs[0], out, axes)), axes))
                }
            }
        }
        Prim::Cumulative { op, axis } => match op {
            CumOp::Sum => linear(&ts[0]),
            CumOp::Prod => Some(cumprod_jvp(&xs[0], ts[0].as_ref()?, *axis)),
        },
        Prim::Reshape { .. }
        | Prim::Broadcast { .. }
        | Prim::Permute { .. }
        | Prim::Slice { .. }
        | Prim::Flip { .. }
        | Prim::Copy => linear(&ts[0]),
        Prim::Pad { lo, hi, .. } => ts[0].as_ref().map(|t| {
            let zero_pad = Prim::Pad {
                lo: lo.clone(),
                hi: hi.clone(),
                value: F64Bits(0.0),
            };
            bind(zero_pad, &[t])
        }),
        Prim::Concat { .. } => {
            if ts.iter().all(Option::is_none) {
                return None;
            }
            let parts: Vec<Tensor> = ts
                .iter()
                .zip(xs)
                .map(|(t, x)| t.clone().unwrap_or_else(|| x.zeros_like()))
                .collect();
            let refs: Vec<&Tensor> = parts.iter().collect();
            Some(bind(prim.clone(), &refs))
        }
        Prim::Gather { .. } => ts[0].as_ref().map(|t| bind(prim.clone(), &[t, &xs[1]])),
        Prim::ScatterAdd { .. } => {
            if ts[0].is_none() && ts[2].is_none() {
                return None;
            }
            let base = ts[0].clone().unwrap_or_else(|| xs[0].zeros_like());
            let upd = ts[2].clone().unwrap_or_else(|| xs[2].zeros_like());
            Some(bind(prim.clone(), &[&base, &xs[1], &upd]))
        }
        // Bilinear, as a product.
        Prim::DotGeneral { .. } | Prim::Conv { .. } => {
            let a = ts[0].as_ref().map(|t| bind(prim.clone(), &[t, &xs[1]]));
            let b = ts[1].as_ref().map(|t| bind(prim.clone(), &[&xs[0], t]));
            add_opt(a, b)
        }
        Prim::Assign => unreachable!("assign of differentiated values is refused above"),
        // linear algebra
        Prim::Cholesky => Some(crate::linalg_derivatives::cholesky_jvp(
            out,
            ts[0].as_ref()?,
        )),
        Prim::TriangularSolve { .. } => crate::linalg_derivatives::triangular_solve_jvp(
            prim,
            &xs[0],
            out,
            ts[0].as_ref(),
            ts[1].as_ref(),
        ),
        Prim::Solve => {
            crate::linalg_derivatives::solve_jvp(&xs[0], out, ts[0].as_ref(), ts[1].as_ref())
        }
        Prim::Slogdet => Some(crate::linalg_derivatives::slogdet_jvp(
            &xs[0],
            ts[0].as_ref()?,
        )),
        Prim::Qr { complete } => Some(crate::linalg_derivatives::qr_jvp(
            *complete,
            &xs[0],
            out,
            ts[0].as_ref()?,
        )),
        Prim::Eigh => Some(crate::linalg_derivatives::eigh_jvp(out, ts[0].as_ref()?)),
        Prim::Svd { full_matrices } => Some(crate::linalg_derivatives::svd_jvp(
            *full_matrices,
            &xs[0],
            out,
            ts[0].as_ref()?,
        )),
        // Linear: the same transform of the tangent.
        Prim::Fft { .. } => linear(&ts[0]),
    }
}
