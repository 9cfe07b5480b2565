//! User-defined derivative rules: `custom_vjp`, `custom_jvp`, and `remat`
//! (a `custom_vjp` whose backward rule re-runs the function).
//!
//! A call is handled by the trace of the highest level among its inputs'
//! tracers, as a primitive would be (`nx::trace::bind_custom_vjp`,
//! `bind_custom_jvp`, which call that trace's `process_custom_vjp_call`,
//! `process_custom_jvp_call`): the innermost reverse (forward) trace uses
//! the user's rule and runs the function's own operations on the values
//! below it, so enclosing transformations still see them. This file turns
//! the user's functions on parameter trees into functions on leaves, with
//! the checks of what the user's rules return.

use crate::autodiff::{stale, Saved};
use nx::trace::{bind_custom_jvp, bind_custom_vjp, CustomBwd, CustomJvpCall, CustomVjpCall};
use nx::{Ptree, Tensor};
use std::cell::RefCell;
use std::rc::Rc;

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
    let bwd: Bwd<Q, R> =
        Rc::new(move |r: &R, ct: &Q| bwd(r, ct).leaves().into_iter().map(Some).collect());
    custom_vjp_dyn("custom_vjp", &fwd, bwd, params)
}

/// A backward rule on leaves: one cotangent per parameter leaf, `None`
/// where it gets none.
type Bwd<Q, R> = Rc<dyn Fn(&R, &Q) -> Vec<Option<Tensor>>>;

fn custom_vjp_dyn<P, Q, R>(
    func: &'static str,
    fwd: &dyn Fn(&P) -> (Q, R),
    bwd: Bwd<Q, R>,
    params: &P,
) -> Q
where
    P: Ptree + 'static,
    Q: Ptree + 'static,
    R: 'static,
{
    // The output's structure (its tensors replaced by placeholders), from
    // the forward function's last run.
    let template: RefCell<Option<Rc<Q>>> = RefCell::new(None);
    let fwd_leaves = |leaves: &[Tensor]| -> (Vec<Tensor>, CustomBwd) {
        let (out, residual) = fwd(&params.with_leaves(leaves));
        let in_avals: Vec<_> = leaves.iter().map(Tensor::aval).collect();
        let placeholder = Tensor::zeros(&[0], nx::DType::F32);
        let shape = Rc::new(out.map_leaves(&mut |_| placeholder.clone()));
        *template.borrow_mut() = Some(shape.clone());
        let bwd = bwd.clone();
        let bwd_leaves: CustomBwd = Box::new(move |cts: &[Tensor]| {
            let grads = bwd(&residual, &shape.with_leaves(cts));
            if grads.len() != in_avals.len() {
                panic!(
                    "{func}: bwd returned {} cotangent leaves for {} parameter leaves",
                    grads.len(),
                    in_avals.len()
                );
            }
            let given = grads.iter().zip(&in_avals).enumerate();
            for (i, (g, a)) in given.filter_map(|(i, (g, a))| Some((i, (g.as_ref()?, a)))) {
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
            grads
        });
        (out.leaves(), bwd_leaves)
    };
    let call = CustomVjpCall {
        name: func,
        fwd: &fwd_leaves,
    };
    let outs = bind_custom_vjp(&call, &params.leaves());
    let template = template.take().expect("the forward function ran");
    template.with_leaves(&outs)
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
    // The output's structure, from the last run of `f` or the rule.
    let template: RefCell<Option<Q>> = RefCell::new(None);
    let keep = |q: Q| {
        let leaves = q.leaves();
        *template.borrow_mut() = Some(q);
        leaves
    };
    let fun = |leaves: &[Tensor]| keep(f(&params.with_leaves(leaves)));
    let jvp = |primals: &[Tensor], tangents: &[Tensor]| {
        let (out, tout) = jvp_rule(&params.with_leaves(primals), &params.with_leaves(tangents));
        let (outs, touts) = (keep(out), tout.leaves());
        if outs.len() != touts.len() {
            panic!(
                "custom_jvp: the rule returned {} tangent leaves for {} output leaves",
                touts.len(),
                outs.len()
            );
        }
        for (i, (o, t)) in outs.iter().zip(&touts).enumerate() {
            if o.shape() != t.shape() {
                panic!(
                    "custom_jvp: the rule's tangent leaf {i} has shape {:?} but its output leaf has shape {:?}",
                    t.shape(),
                    o.shape()
                );
            }
        }
        (outs, touts)
    };
    let call = CustomJvpCall {
        name: "custom_jvp",
        fun: &fun,
        jvp: &jvp,
    };
    let outs = bind_custom_jvp(&call, &params.leaves());
    let template = template.take().expect("the function or its rule ran");
    template.with_leaves(&outs)
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
            crate::differentiate::vjp_leaves("remat", |q: &P| recompute(q), p, ct)
        }),
        params,
    )
}
