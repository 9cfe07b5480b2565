//! User-defined derivative rules: `custom_vjp`, `custom_jvp`, and `remat`
//! (a `custom_vjp` whose backward rule re-runs the function).
//!
//! A call is handled by the trace of the highest level among its inputs'
//! tracers, as a primitive would be: the innermost reverse (forward)
//! trace uses the user's rule and runs the function's own operations on the
//! values below it, so enclosing transformations still see them.

use crate::batch::BatchTrace;
use crate::gradient_control::is_inactive;
use crate::jvp::JvpTrace;
use crate::vjp::{stale, Rule, Saved, VjpTrace};
use nx::trace::{ceiling, trace_at, with_ceiling, Trace};
use nx::{Ptree, Tensor};
use std::rc::Rc;

/// The trace that owns a call on `leaves`: the one of the highest level
/// among their (live) tracers, below the current ceiling.
fn owning_trace(leaves: &[Tensor]) -> Option<Rc<dyn Trace>> {
    let ceiling = ceiling();
    leaves
        .iter()
        .filter_map(|t| t.tracer())
        .filter(|tr| tr.escaped_value().is_none())
        .map(|tr| tr.level())
        .filter(|&level| level < ceiling)
        .max()
        .map(trace_at)
}

/// Under `vmap` with a differentiation trace below it, a custom rule must
/// stay visible to that trace: the call is made once per lane on the lanes'
/// values (below the batch trace) and the results are stacked back. Returns
/// None (run the function batched, as usual) when no input is traced below
/// the batch trace.
fn per_lane<P: Ptree, Q: Ptree>(bt: &BatchTrace, params: &P, call: impl Fn(&P) -> Q) -> Option<Q> {
    let (values, batched): (Vec<Tensor>, Vec<bool>) =
        params.leaves().iter().map(|t| bt.unpack(t)).unzip();
    if bt.size == 0 || !values.iter().any(Tensor::is_traced) {
        return None;
    }
    with_ceiling(bt.level, || {
        let lanes: Vec<Q> = (0..bt.size)
            .map(|i| {
                let lane: Vec<Tensor> = values
                    .iter()
                    .zip(&batched)
                    .map(|(v, &b)| if b { v.get(i) } else { v.clone() })
                    .collect();
                call(&params.with_leaves(&lane))
            })
            .collect();
        let per_lane: Vec<Vec<Tensor>> = lanes.iter().map(Ptree::leaves).collect();
        let stacked: Vec<Tensor> = (0..per_lane[0].len())
            .map(|j| {
                let parts: Vec<Tensor> = per_lane.iter().map(|l| l[j].clone()).collect();
                bt.pack(Tensor::stack(&parts, 0))
            })
            .collect();
        Some(lanes[0].with_leaves(&stacked))
    })
}

/// `fwd(params).0`, differentiated in reverse mode with `bwd`: under the
/// innermost reverse-mode transformation (`grad`, `vjp`), `fwd`'s own
/// operations are not differentiated; `bwd(&residual, &cotangent)` gives the
/// parameter cotangents instead (each leaf of its parameter leaf's shape and
/// dtype), where `residual` is what `fwd` returned alongside its result.
/// Enclosing transformations see `fwd`'s operations.
///
/// Panics if the call is differentiated in forward mode (`jvp`, `hvp`);
/// define a [`custom_jvp`] rule for that.
///
/// ```
/// use rune::prelude::*;
/// // A clipped gradient for the identity: forward is x, backward clips.
/// let clip = |x: &Tensor| rune::custom_vjp(
///     |x: &Tensor| (x.clone(), ()),
///     |_: &(), ct: &Tensor| ct.clamp(-1.0, 1.0),
///     x,
/// );
/// let x = Tensor::scalar(2.0f64);
/// let g = rune::grad(|x: &Tensor| clip(&(x * 5.0)), &x);
/// assert_eq!(g.item::<f64>(), 5.0); // ct = 1 passes the clip, times 5
/// ```
pub fn custom_vjp<P, Q, R>(
    fwd: impl Fn(&P) -> (Q, R),
    bwd: impl Fn(&R, &Q) -> P + 'static,
    params: &P,
) -> Q
where
    P: Ptree + 'static,
    Q: Ptree + 'static,
    R: 'static,
{
    custom_vjp_dyn("custom_vjp", &fwd, Rc::new(bwd), params)
}

type Bwd<P, Q, R> = Rc<dyn Fn(&R, &Q) -> P>;

fn custom_vjp_dyn<P, Q, R>(
    func: &'static str,
    fwd: &dyn Fn(&P) -> (Q, R),
    bwd: Bwd<P, Q, R>,
    params: &P,
) -> Q
where
    P: Ptree + 'static,
    Q: Ptree + 'static,
    R: 'static,
{
    let leaves = params.leaves();
    let Some(trace) = owning_trace(&leaves) else {
        return fwd(params).0;
    };
    if let Some(jt) = trace.as_any().downcast_ref::<JvpTrace>() {
        if !is_inactive(jt.level) {
            panic!(
                "{func}: differentiated in forward mode (jvp, hvp, jacfwd); \
                 define a custom_jvp rule for that"
            );
        }
    }
    if let Some(bt) = trace.as_any().downcast_ref::<BatchTrace>() {
        let lane = |p: &P| custom_vjp_dyn(func, fwd, bwd.clone(), p);
        if let Some(out) = per_lane(bt, params, lane) {
            return out;
        }
    }
    let Some(vt) = trace.as_any().downcast_ref::<VjpTrace>() else {
        // Other transformations see the forward computation itself.
        return fwd(params).0;
    };
    if is_inactive(vt.level) {
        return fwd(params).0;
    }
    let (values, vars): (Vec<Tensor>, Vec<Option<usize>>) =
        leaves.iter().map(|t| vt.unpack(t)).unzip();
    let (out, residual) = with_ceiling(vt.level, || fwd(&params.with_leaves(&values)));
    let out_leaves = out.leaves();
    let out_avals: Vec<_> = out_leaves.iter().map(Tensor::aval).collect();
    let in_avals: Vec<_> = values.iter().map(Tensor::aval).collect();
    // Only the structure of the output is kept, not its tensors.
    let placeholder = Tensor::zeros(&[0], nx::DType::F32);
    let template = out.map_leaves(&mut |_| placeholder.clone());
    let rule: Rule = Box::new(move |cts| {
        let cts: Vec<Tensor> = cts
            .iter()
            .zip(&out_avals)
            .map(|(ct, a)| {
                ct.clone()
                    .unwrap_or_else(|| Tensor::zeros(&a.shape, a.dtype))
            })
            .collect();
        let grads = bwd(&residual, &template.with_leaves(&cts)).leaves();
        if grads.len() != in_avals.len() {
            panic!(
                "{func}: bwd returned {} cotangent leaves for {} parameter leaves",
                grads.len(),
                in_avals.len()
            );
        }
        for (i, (g, a)) in grads.iter().zip(&in_avals).enumerate() {
            if g.shape() != a.shape.as_slice() || g.dtype() != a.dtype {
                panic!(
                    "{func}: bwd's cotangent leaf {i} is {:?} {} but its parameter leaf is {:?} {}",
                    g.shape(),
                    g.dtype(),
                    a.shape,
                    a.dtype
                );
            }
        }
        grads.into_iter().map(Some).collect()
    });
    let avals: Vec<_> = out_leaves.iter().map(Tensor::aval).collect();
    let out_vars = vt.tape.push(vars, &avals, rule);
    let traced: Vec<Tensor> = out_leaves
        .into_iter()
        .zip(out_vars)
        .map(|(o, var)| {
            if o.dtype().is_inexact() {
                vt.pack(o, var)
            } else {
                o
            }
        })
        .collect();
    out.with_leaves(&traced)
}

/// `f(params)`, differentiated in forward mode with `jvp_rule`: under the
/// innermost forward-mode transformation (`jvp`, `hvp`),
/// `jvp_rule(&params, &tangents)` gives both the result and its tangent,
/// replacing `f`'s operations.
///
/// Panics if the call is differentiated in reverse mode (`grad`, `vjp`);
/// define a [`custom_vjp`] rule for that.
///
/// ```
/// use rune::prelude::*;
/// // sin with a (deliberately) custom derivative rule.
/// let my_sin = |x: &Tensor| rune::custom_jvp(
///     |x: &Tensor| x.sin(),
///     |x: &Tensor, t: &Tensor| (x.sin(), x.cos() * t),
///     x,
/// );
/// let x = Tensor::scalar(0.0f64);
/// let (_, dy) = rune::jvp(|x: &Tensor| my_sin(x), &x, &Tensor::scalar(3.0f64));
/// assert_eq!(dy.item::<f64>(), 3.0);
/// ```
pub fn custom_jvp<P: Ptree, Q: Ptree>(
    f: impl Fn(&P) -> Q,
    jvp_rule: impl Fn(&P, &P) -> (Q, Q),
    params: &P,
) -> Q {
    custom_jvp_dyn(&f, &jvp_rule, params)
}

fn custom_jvp_dyn<P: Ptree, Q: Ptree>(
    f: &dyn Fn(&P) -> Q,
    jvp_rule: &dyn Fn(&P, &P) -> (Q, Q),
    params: &P,
) -> Q {
    let leaves = params.leaves();
    let Some(trace) = owning_trace(&leaves) else {
        return f(params);
    };
    if let Some(vt) = trace.as_any().downcast_ref::<VjpTrace>() {
        if !is_inactive(vt.level) {
            panic!(
                "custom_jvp: differentiated in reverse mode (grad, vjp); \
                 define a custom_vjp rule for that"
            );
        }
    }
    if let Some(bt) = trace.as_any().downcast_ref::<BatchTrace>() {
        if let Some(out) = per_lane(bt, params, |p: &P| custom_jvp_dyn(f, jvp_rule, p)) {
            return out;
        }
    }
    let Some(jt) = trace.as_any().downcast_ref::<JvpTrace>() else {
        return f(params);
    };
    if is_inactive(jt.level) {
        return f(params);
    }
    let (primals, tangents): (Vec<Tensor>, Vec<Tensor>) = leaves
        .iter()
        .map(|t| {
            let (p, t) = jt.unpack(t);
            let t = t.unwrap_or_else(|| p.zeros_like());
            (p, t)
        })
        .unzip();
    let (out, tout) = with_ceiling(jt.level, || {
        jvp_rule(
            &params.with_leaves(&primals),
            &params.with_leaves(&tangents),
        )
    });
    let (outs, touts) = (out.leaves(), tout.leaves());
    if outs.len() != touts.len() {
        panic!(
            "custom_jvp: the rule returned {} tangent leaves for {} output leaves",
            touts.len(),
            outs.len()
        );
    }
    let traced: Vec<Tensor> = outs
        .into_iter()
        .zip(touts)
        .enumerate()
        .map(|(i, (o, t))| {
            if o.shape() != t.shape() {
                panic!(
                    "custom_jvp: the rule's tangent leaf {i} has shape {:?} but its output leaf has shape {:?}",
                    t.shape(),
                    o.shape()
                );
            }
            jt.pack(o, Some(t))
        })
        .collect();
    out.with_leaves(&traced)
}

/// `f(params)`, recomputed during the backward pass instead of having its
/// intermediate results kept on the tape: reverse-mode differentiation
/// trades compute for memory. Gradients are unchanged.
///
/// Panics if differentiated in forward mode (it is a `custom_vjp` rule
/// underneath).
///
/// ```
/// use rune::prelude::*;
/// let layer = |x: &Tensor| x.tanh().sin();
/// let x = Tensor::from_slice(&[0.5f64, -1.0], &[2]);
/// let g1 = rune::grad(|x: &Tensor| rune::remat(layer, x).sum_all(), &x);
/// let g2 = rune::grad(|x: &Tensor| layer(x).sum_all(), &x);
/// assert_eq!(g1.to_vec::<f64>(), g2.to_vec::<f64>());
/// ```
pub fn remat<P, Q>(f: impl Fn(&P) -> Q + 'static, params: &P) -> Q
where
    P: Ptree + 'static,
    Q: Ptree + 'static,
{
    let f = Rc::new(f);
    let recompute = f.clone();
    // The residual is the inputs, each with its storage's write count: the
    // recomputation must see the values the forward pass saw.
    let keep = |p: &P| {
        let saved: Vec<Saved<Tensor>> = p.leaves().into_iter().map(Saved::new).collect();
        (p.map_leaves(&mut |t| t.clone()), saved)
    };
    custom_vjp_dyn(
        "remat",
        &|p: &P| (f(p), keep(p)),
        Rc::new(move |(p, saved): &(P, Vec<Saved<Tensor>>), ct: &Q| {
            if !saved.iter().all(Saved::is_unwritten) {
                stale("remat");
            }
            crate::autodiff::vjp_grads("remat", |q: &P| recompute(q), p, ct)
        }),
        params,
    )
}
