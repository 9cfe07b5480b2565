//! Reverse mode: the vjp trace and its tape.
//!
//! A tracer is a value plus a variable on a tape. Each primitive applied to
//! a tracer runs on the values and appends a node holding its reverse rule:
//! a closure over exactly the residuals that rule needs (often a partial
//! derivative computed during the forward pass, as JAX's linearize does).
//! The backward pass walks the nodes in reverse with ordinary tensor
//! operations, so it can itself be differentiated or transformed.
//!
//! Every residual is kept as a [`Saved`], which records its storage's write
//! count: a backward pass over a value written in place since (`assign`)
//! panics instead of differentiating at the wrong point.

use crate::autodiff::{PrimRule, Rule, Saved};
use crate::gradient_control::is_inactive;
use crate::rules::{
    binary_partials, complex_to_real_coeff, conv_transpose_lhs, conv_transpose_rhs, cumprod_vjp,
    dot_transpose_lhs, extremum_weights, inverse_perm, prod_others, reverse_cumsum, sum_to_shape,
    unary_partial, unreduce, unslice, Partial, WindowSpec,
};
use crate::scope::{Tag, TaggedTracer, TracerState};
use nx::trace::{with_ceiling, CustomJvpCall, CustomVjpCall};
use nx::{bind, Aval, BinaryOp, CumOp, Prim, ReduceOp, Tensor, Trace, UnaryOp};
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

struct Node {
    /// The tape variable of each input, None for constants.
    inputs: Vec<Option<usize>>,
    outputs: Vec<usize>,
    rule: Rule,
}

/// The recorded computation: variables (their shapes and dtypes) and the
/// nodes that produced them, in execution order.
#[derive(Default)]
pub(crate) struct Tape {
    vars: RefCell<Vec<Aval>>,
    nodes: RefCell<Vec<Node>>,
}

impl Tape {
    pub(crate) fn new_var(&self, aval: Aval) -> usize {
        let mut vars = self.vars.borrow_mut();
        vars.push(aval);
        vars.len() - 1
    }

    /// Records a node; returns its output variables.
    pub(crate) fn push(&self, inputs: Vec<Option<usize>>, outs: &[Aval], rule: Rule) -> Vec<usize> {
        let outputs: Vec<usize> = outs.iter().map(|a| self.new_var(a.clone())).collect();
        self.nodes.borrow_mut().push(Node {
            inputs,
            outputs: outputs.clone(),
            rule,
        });
        outputs
    }

    /// Runs the backward pass from `seeds` (variable, cotangent) and returns
    /// the cotangents of `wanted` (None where nothing flowed). With `consume`,
    /// nodes are dropped as they are processed, freeing their residuals
    /// early; the tape cannot be walked again.
    pub(crate) fn backward(
        &self,
        seeds: Vec<(usize, Tensor)>,
        wanted: &[usize],
        consume: bool,
    ) -> Vec<Option<Tensor>> {
        let mut cts: Vec<Option<Tensor>> = vec![None; self.vars.borrow().len()];
        for (var, ct) in seeds {
            accumulate(&mut cts[var], ct);
        }
        let mut step = |node: &Node| {
            let outs: Vec<Option<Tensor>> = node.outputs.iter().map(|&v| cts[v].take()).collect();
            if outs.iter().all(Option::is_none) {
                return;
            }
            let ins = (node.rule)(&outs);
            for (input, ct) in node.inputs.iter().zip(ins) {
                if let (Some(var), Some(ct)) = (input, ct) {
                    accumulate(&mut cts[*var], ct);
                }
            }
        };
        if consume {
            let mut nodes = std::mem::take(&mut *self.nodes.borrow_mut());
            while let Some(node) = nodes.pop() {
                step(&node);
            }
        } else {
            for node in self.nodes.borrow().iter().rev() {
                step(node);
            }
        }
        wanted.iter().map(|&v| cts[v].take()).collect()
    }
}

fn accumulate(slot: &mut Option<Tensor>, ct: Tensor) {
    *slot = Some(match slot.take() {
        Some(prev) => prev + ct,
        None => ct,
    });
}

/// A vjp tracer's state: a value and its variable on the tape.
pub(crate) struct OnTape {
    pub value: Tensor,
    pub var: usize,
}

impl TracerState for OnTape {
    fn value(&self) -> Option<&Tensor> {
        Some(&self.value)
    }
}

#[derive(Clone)]
pub(crate) struct VjpTrace {
    pub level: usize,
    pub tag: Arc<Tag>,
    pub tape: Rc<Tape>,
}

impl VjpTrace {
    /// `t`'s value and tape variable (None when `t` is a constant here).
    pub(crate) fn unpack(&self, t: &Tensor) -> (Tensor, Option<usize>) {
        match TaggedTracer::<OnTape>::of(t, &self.tag) {
            Some(v) => (v.value.clone(), Some(v.var)),
            None => (t.clone(), None),
        }
    }

    /// A tracer of this trace for `value`, on variable `var`.
    pub(crate) fn pack(&self, value: Tensor, var: usize) -> Tensor {
        let aval = value.aval();
        TaggedTracer::wrap(OnTape { value, var }, aval, self.level, &self.tag)
    }

    /// A fresh input variable (a parameter leaf).
    pub(crate) fn input(&self, value: Tensor) -> Tensor {
        let var = self.tape.new_var(value.aval());
        self.pack(value, var)
    }
}

impl Trace for VjpTrace {
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        let (values, vars): (Vec<Tensor>, Vec<Option<usize>>) =
            inputs.iter().map(|t| self.unpack(t)).unzip();
        if prim == Prim::Assign && vars.iter().any(Option::is_some) {
            panic!(
                "assign: cannot write to or from a tensor being differentiated (inside grad/vjp); \
                 build a new tensor instead (where_, concatenate, pad)"
            );
        }
        let refs: Vec<&Tensor> = values.iter().collect();
        let out = bind(prim.clone(), &refs);
        if is_inactive(self.level) || !out.dtype().is_inexact() {
            return out;
        }
        let needs: Vec<bool> = vars
            .iter()
            .zip(&values)
            .map(|(v, x)| v.is_some() && x.dtype().is_inexact())
            .collect();
        match vjp_rule(&prim, &values, &out, &needs) {
            Some(rule) => {
                // The node keeps `prim` only to name it if a residual went stale.
                let wrapped: Rule = Box::new(move |cts| match &cts[0] {
                    Some(ct) => rule(ct, &prim),
                    None => vec![],
                });
                let var = self.tape.push(vars, &[out.aval()], wrapped)[0];
                self.pack(out, var)
            }
            None => out,
        }
    }

    fn process_multi(&self, op: &Arc<dyn nx::MultiOp>, inputs: &[&Tensor]) -> Vec<Tensor> {
        crate::scope::multi_op_rule(crate::scope::Transformation::Vjp, self, op, inputs)
    }

    /// A forward rule cannot serve reverse mode.
    fn process_custom_jvp_call(&self, call: &CustomJvpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        if !is_inactive(self.level) {
            panic!(
                "{}: differentiated in reverse mode (grad, vjp); define a custom_vjp rule for \
                 that",
                call.name
            );
        }
        (call.fun)(inputs)
    }

    /// The forward function runs on the values below this trace (not
    /// recorded); one tape node holds the user's reverse rule.
    fn process_custom_vjp_call(&self, call: &CustomVjpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        if is_inactive(self.level) {
            return (call.fwd)(inputs).0;
        }
        let (values, vars): (Vec<Tensor>, Vec<Option<usize>>) =
            inputs.iter().map(|t| self.unpack(t)).unzip();
        let (outs, bwd) = with_ceiling(self.level, || (call.fwd)(&values));
        let out_avals: Vec<Aval> = outs.iter().map(Tensor::aval).collect();
        let avals = out_avals.clone();
        let rule: Rule = Box::new(move |cts| {
            let cts: Vec<Tensor> = cts
                .iter()
                .zip(&out_avals)
                .map(|(ct, a)| {
                    ct.clone()
                        .unwrap_or_else(|| Tensor::zeros(&a.shape, a.dtype))
                })
                .collect();
            bwd(&cts)
        });
        let out_vars = self.tape.push(vars, &avals, rule);
        outs.into_iter()
            .zip(out_vars)
            .map(|(o, var)| {
                if o.dtype().is_inexact() {
                    self.pack(o, var)
                } else {
                    o
                }
            })
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The reverse rule of `prim` applied to `xs` (giving `out`), for the inputs
/// in `needs`; None when the derivative is zero (nothing is recorded).
/// Each arm keeps only the residuals its rule reads.
fn vjp_rule(prim: &Prim, xs: &[Tensor], out: &Tensor, needs: &[bool]) -> Option<PrimRule> {
    let shape0 = xs[0].shape().to_vec();
    let rule: PrimRule = match prim {
        Prim::Full { .. }
        | Prim::Iota { .. }
        | Prim::Compare(_)
        | Prim::ArgReduce { .. }
        | Prim::StopGradient => return None,
        // Integer outputs.
        Prim::Threefry2x32
        | Prim::WindowArgmax { .. }
        | Prim::Argsort { .. }
        | Prim::TopK { .. } => return None,
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => {
            let spec = WindowSpec {
                window: window.clone(),
                strides: strides.clone(),
                padding: padding.clone(),
            };
            match op {
                ReduceOp::Sum => Box::new(move |ct, _| vec![Some(spec.sum_transpose(ct, &shape0))]),
                _ if spec.tiles(out.shape()) => {
                    let (x, m) = (Saved::new(xs[0].clone()), Saved::new(out.clone()));
                    Box::new(move |ct, op| {
                        vec![Some(spec.max_transpose_tiled(ct, x.get(op), m.get(op)))]
                    })
                }
                _ => {
                    let idx = Saved::new(spec.argmax(&xs[0]));
                    Box::new(move |ct, op| vec![Some(spec.scatter(ct, idx.get(op), &shape0))])
                }
            }
        }
        // Transposes of the real-linear maps, with JAX's convention (a real
        // part's cotangent is the real axis, an imaginary part's -i).
        Prim::Unary(UnaryOp::Real) => {
            Box::new(|ct, _| vec![Some(Tensor::complex(ct, &ct.zeros_like()))])
        }
        Prim::Unary(UnaryOp::Imag) => {
            Box::new(|ct, _| vec![Some(Tensor::complex(&ct.zeros_like(), &-ct))])
        }
        Prim::Unary(UnaryOp::Conj) => Box::new(|ct, _| vec![Some(ct.conj())]),
        Prim::Binary(BinaryOp::Complex) => {
            let needs = [needs[0], needs[1]];
            Box::new(move |ct, _| vec![needs[0].then(|| ct.real()), needs[1].then(|| -ct.imag())])
        }
        Prim::Unary(op @ (UnaryOp::Abs | UnaryOp::Angle)) if xs[0].dtype().is_complex() => {
            let c = Saved::new(complex_to_real_coeff(*op, &xs[0], out));
            Box::new(move |ct, op| vec![Some(Tensor::complex(ct, &ct.zeros_like()) * c.get(op))])
        }
        Prim::Unary(op) => {
            let p = unary_partial(*op, &xs[0], out);
            if matches!(p, Partial::Zero) {
                return None;
            }
            let p = Saved::new(p);
            Box::new(move |ct, op| vec![p.get(op).apply(ct)])
        }
        Prim::Binary(op) => {
            let [px, py] = binary_partials(*op, &xs[0], &xs[1], out, [needs[0], needs[1]]);
            let (px, py) = (Saved::new(px), Saved::new(py));
            Box::new(move |ct, op| vec![px.get(op).apply(ct), py.get(op).apply(ct)])
        }
        Prim::Where => {
            let (cond, on_true, on_false) = (Saved::new(xs[0].clone()), needs[1], needs[2]);
            Box::new(move |ct, op| {
                let cond = cond.get(op);
                let zero = ct.scalar_like(0.0).broadcast_to(ct.shape());
                vec![
                    None,
                    on_true.then(|| bind(Prim::Where, &[cond, ct, &zero])),
                    on_false.then(|| bind(Prim::Where, &[cond, &zero, ct])),
                ]
            })
        }
        Prim::Cast(_) => {
            let src = xs[0].dtype();
            if !src.is_inexact() {
                return None;
            }
            // Real to complex: the transpose keeps the real part (JAX's).
            Box::new(move |ct, _| {
                let ct = if src.is_complex() {
                    ct.clone()
                } else {
                    ct.real()
                };
                vec![Some(ct.cast(src))]
            })
        }
        Prim::Reduce { op, axes } => {
            let axes = axes.clone();
            match op {
                ReduceOp::Sum => Box::new(move |ct, _| vec![Some(unreduce(ct, &shape0, &axes))]),
                ReduceOp::Prod => {
                    let others = Saved::new(prod_others(&xs[0], &axes));
                    Box::new(move |ct, op| {
                        vec![Some(unreduce(ct, &shape0, &axes) * others.get(op))]
                    })
                }
                ReduceOp::Max | ReduceOp::Min => {
                    let w = Saved::new(extremum_weights(&xs[0], out, &axes));
                    Box::new(move |ct, op| vec![Some(unreduce(ct, &shape0, &axes) * w.get(op))])
                }
            }
        }
        Prim::Cumulative { op, axis } => {
            let axis = *axis;
            match op {
                CumOp::Sum => Box::new(move |ct, _| vec![Some(reverse_cumsum(ct, axis))]),
                CumOp::Prod => {
                    let x = Saved::new(xs[0].clone());
                    Box::new(move |ct, op| vec![Some(cumprod_vjp(x.get(op), ct, axis))])
                }
            }
        }
        Prim::Reshape { .. } => Box::new(move |ct, _| vec![Some(ct.reshape(&shape0))]),
        Prim::Broadcast { .. } => Box::new(move |ct, _| vec![Some(sum_to_shape(ct, &shape0))]),
        Prim::Permute { perm } => {
            let inv = inverse_perm(perm);
            Box::new(move |ct, _| vec![Some(bind(Prim::Permute { perm: inv.clone() }, &[ct]))])
        }
        Prim::Slice { start, step, .. } => {
            let (start, step) = (start.clone(), step.clone());
            Box::new(move |ct, _| vec![Some(unslice(ct, &shape0, &start, &step))])
        }
        Prim::Flip { .. } => Box::new(move |ct, flip| vec![Some(bind(flip.clone(), &[ct]))]),
        Prim::Pad { lo, .. } => {
            let start = lo.clone();
            let end: Vec<usize> = lo.iter().zip(&shape0).map(|(l, n)| l + n).collect();
            let step = vec![1; lo.len()];
            Box::new(move |ct, _| {
                let slice = Prim::Slice {
                    start: start.clone(),
                    end: end.clone(),
                    step: step.clone(),
                };
                vec![Some(bind(slice, &[ct]))]
            })
        }
        Prim::Concat { axis } => {
            let axis = *axis;
            let sizes: Vec<usize> = xs.iter().map(|x| x.shape()[axis]).collect();
            Box::new(move |ct, _| {
                let mut offset = 0;
                sizes
                    .iter()
                    .map(|&n| {
                        let part = ct.narrow(axis as isize, offset, n);
                        offset += n;
                        Some(part)
                    })
                    .collect()
            })
        }
        Prim::Copy => Box::new(|ct, _| vec![Some(ct.clone())]),
        Prim::Gather { axis } => {
            let (idx, axis, dtype) = (Saved::new(xs[1].clone()), *axis, xs[0].dtype());
            Box::new(move |ct, op| {
                let zeros = Tensor::zeros(&shape0, dtype);
                vec![
                    Some(bind(Prim::ScatterAdd { axis }, &[&zeros, idx.get(op), ct])),
                    None,
                ]
            })
        }
        Prim::ScatterAdd { axis } => {
            let (idx, axis) = (Saved::new(xs[1].clone()), *axis);
            Box::new(move |ct, op| {
                vec![
                    Some(ct.clone()),
                    None,
                    Some(bind(Prim::Gather { axis }, &[ct, idx.get(op)])),
                ]
            })
        }
        Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        } => {
            let (lb, rb, lc, rc) = (
                lhs_batch.clone(),
                rhs_batch.clone(),
                lhs_contract.clone(),
                rhs_contract.clone(),
            );
            let (x_ndim, y_ndim) = (xs[0].ndim(), xs[1].ndim());
            // Each cotangent needs the other operand only.
            let y = needs[0].then(|| Saved::new(xs[1].clone()));
            let x = needs[1].then(|| Saved::new(xs[0].clone()));
            Box::new(move |ct, op| {
                let dx = y
                    .as_ref()
                    .map(|y| dot_transpose_lhs(ct, x_ndim, y.get(op), &lb, &rb, &lc, &rc, false));
                let dy = x
                    .as_ref()
                    .map(|x| dot_transpose_lhs(ct, y_ndim, x.get(op), &rb, &lb, &rc, &lc, true));
                vec![dx, dy]
            })
        }
        Prim::Conv { .. } => {
            let (x_shape, w_shape) = (shape0.clone(), xs[1].shape().to_vec());
            // Each cotangent needs the other operand only.
            let w = needs[0].then(|| Saved::new(xs[1].clone()));
            let x = needs[1].then(|| Saved::new(xs[0].clone()));
            Box::new(move |ct, op| {
                let dx = w
                    .as_ref()
                    .map(|w| conv_transpose_lhs(ct, w.get(op), &x_shape, op));
                let dw = x
                    .as_ref()
                    .map(|x| conv_transpose_rhs(ct, x.get(op), &w_shape, op));
                vec![dx, dw]
            })
        }
        Prim::Assign => unreachable!("assign of differentiated values is refused above"),
        // linear algebra
        Prim::Cholesky => crate::linalg_derivatives::cholesky_vjp(out),
        Prim::TriangularSolve { .. } => {
            crate::linalg_derivatives::triangular_solve_vjp(prim, &xs[0], out, needs)
        }
        Prim::Solve => crate::linalg_derivatives::solve_vjp(&xs[0], out, needs),
        Prim::Slogdet => crate::linalg_derivatives::slogdet_vjp(&xs[0]),
        Prim::Qr { complete } => crate::linalg_derivatives::qr_vjp(*complete, &xs[0], out),
        Prim::Eigh => crate::linalg_derivatives::eigh_vjp(out),
        Prim::Svd { full_matrices } => {
            crate::linalg_derivatives::svd_vjp(*full_matrices, &xs[0], out)
        }
        Prim::Fft { kind, lengths } => {
            let (kind, lengths) = (*kind, lengths.clone());
            Box::new(move |ct, _| vec![Some(crate::rules::fft_transpose(kind, &lengths, ct))])
        }
    };
    Some(rule)
}
