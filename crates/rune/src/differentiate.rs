//! The differentiation functions users call: `grad`, `value_and_grad`,
//! `value_and_grad_aux`, `vjp`, `vjp_fun` (with its `Pullback`), `jvp`,
//! `jvp_aux`, `hvp`, and the float-input checks the entry points share.
//! Each runs the function once under a jvp or vjp trace (`jvp.rs`,
//! `vjp.rs`) on the parameter tree's leaves.

use crate::jvp::JvpTrace;
use crate::scope::enter;
use crate::vjp::{Tape, VjpTrace};
use nx::{Aval, Ptree, Tensor};
use std::marker::PhantomData;
use std::rc::Rc;

/// A function recorded on a tape: what a backward pass needs.
struct Recorded {
    tape: Rc<Tape>,
    /// Tape variable of each parameter leaf (None: not differentiated).
    inputs: Vec<Option<usize>>,
    input_avals: Vec<Aval>,
    /// Tape variable of each output leaf (None: does not depend on the inputs).
    outputs: Vec<Option<usize>>,
    output_avals: Vec<Aval>,
}

/// Runs `f` on `params` under a new vjp trace; returns `f`'s result with its
/// tensor leaves `outs(&result)` replaced by values, and the recording.
fn record<P: Ptree, R>(
    params: &P,
    f: impl FnOnce(&P) -> R,
    outs: impl FnOnce(&R) -> Vec<Tensor>,
) -> (R, Vec<Tensor>, Recorded) {
    let tape = Rc::new(Tape::default());
    let (trace, scope) = enter(|level, tag| VjpTrace {
        level,
        tag,
        tape: tape.clone(),
    });
    let leaves = params.leaves();
    let mut inputs = Vec::with_capacity(leaves.len());
    let traced: Vec<Tensor> = leaves
        .iter()
        .map(|leaf| {
            if leaf.dtype().is_inexact() {
                let t = trace.input(leaf.clone());
                inputs.push(trace.unpack(&t).1);
                t
            } else {
                inputs.push(None);
                leaf.clone()
            }
        })
        .collect();
    let result = f(&params.with_leaves(&traced));
    let (values, outputs): (Vec<Tensor>, Vec<Option<usize>>) =
        outs(&result).iter().map(|t| trace.unpack(t)).unzip();
    drop(scope);
    let rec = Recorded {
        tape,
        inputs,
        input_avals: leaves.iter().map(Tensor::aval).collect(),
        output_avals: values.iter().map(Tensor::aval).collect(),
        outputs,
    };
    (result, values, rec)
}

impl Recorded {
    /// Pulls `cts` (one per output leaf, already checked) back to one
    /// cotangent per parameter leaf, zeros where nothing flowed.
    fn pull(&self, cts: &[Tensor], consume: bool) -> Vec<Tensor> {
        self.pull_sparse(cts, consume)
            .into_iter()
            .zip(&self.input_avals)
            .map(|(ct, aval)| ct.unwrap_or_else(|| Tensor::zeros(&aval.shape, aval.dtype)))
            .collect()
    }

    /// [`Recorded::pull`] with `None` where nothing flowed.
    fn pull_sparse(&self, cts: &[Tensor], consume: bool) -> Vec<Option<Tensor>> {
        let seeds: Vec<(usize, Tensor)> = self
            .outputs
            .iter()
            .zip(cts)
            .filter_map(|(var, ct)| var.map(|v| (v, ct.clone())))
            .collect();
        let wanted: Vec<usize> = self.inputs.iter().flatten().copied().collect();
        let mut got = self.tape.backward(seeds, &wanted, consume).into_iter();
        self.inputs
            .iter()
            .map(|var| var.and_then(|_| got.next().flatten()))
            .collect()
    }

    /// Panics unless `cts` has one leaf per output leaf, each of its shape and dtype.
    fn check_cotangents(&self, func: &str, cts: &[Tensor]) {
        if cts.len() != self.output_avals.len() {
            panic!(
                "{func}: the cotangent has {} leaves but the output has {}",
                cts.len(),
                self.output_avals.len()
            );
        }
        for (i, (ct, aval)) in cts.iter().zip(&self.output_avals).enumerate() {
            if ct.shape() != aval.shape.as_slice() {
                panic!(
                    "{func}: cotangent leaf {i} has shape {:?} but the output leaf has shape {:?}",
                    ct.shape(),
                    aval.shape
                );
            }
            if ct.dtype() != aval.dtype {
                panic!(
                    "{func}: cotangent leaf {i} has dtype {} but the output leaf has dtype {}",
                    ct.dtype(),
                    aval.dtype
                );
            }
        }
    }
}

/// Panics unless `x`, the one tensor `func` differentiates with respect
/// to, is a float or complex tensor (as JAX's jacfwd/jacrev raise).
pub(crate) fn require_float_input(func: &str, x: &Tensor) {
    let dtype = x.dtype();
    if !dtype.is_inexact() {
        let kind = if dtype == nx::DType::Bool {
            "boolean"
        } else {
            "integer"
        };
        panic!(
            "{func}: the input has {kind} dtype {dtype}; differentiate with respect to a float tensor"
        );
    }
}

/// Panics unless every leaf of `params` is a float (or complex) tensor.
pub(crate) fn require_float_leaves<P: Ptree>(func: &str, params: &P) {
    for (i, leaf) in params.leaves().iter().enumerate() {
        if !leaf.dtype().is_inexact() {
            panic!(
                "{func}: parameter leaf {i} has dtype {}; only float leaves can be differentiated \
                 (hold integer or boolean data in the closure or the auxiliary output)",
                leaf.dtype()
            );
        }
    }
}

/// Panics unless `out` is a float tensor with exactly one element.
fn require_scalar(func: &str, out: &Tensor) {
    if out.numel() != 1 {
        panic!(
            "{func}: the objective must be a scalar (exactly one element), got shape {:?}; \
             use vjp to differentiate a non-scalar output against a cotangent",
            out.shape()
        );
    }
    if !out.dtype().is_float() {
        panic!(
            "{func}: the objective must be a float scalar, got dtype {}",
            out.dtype()
        );
    }
}

fn value_and_grad_impl<P: Ptree, A>(
    func: &str,
    f: impl FnOnce(&P) -> (Tensor, A),
    params: &P,
) -> ((Tensor, A), P) {
    require_float_leaves(func, params);
    let ((_, aux), values, rec) = record(params, f, |(out, _)| vec![out.clone()]);
    let value = values.into_iter().next().expect("one output");
    require_scalar(func, &value);
    let grads = rec.pull(&[Tensor::ones(value.shape(), value.dtype())], true);
    ((value, aux), params.with_leaves(&grads))
}

/// The gradient of the scalar objective `f` at `params`, with `params`'
/// structure. Leaves that do not reach the result get zeros.
///
/// Panics if a leaf of `params` is not a float tensor, or if `f(params)` is
/// not a scalar (a tensor with exactly one element).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0, 3.0], &[3]);
/// let g = rune::grad(|x: &Tensor| x.square().sum_all(), &x);
/// assert_eq!(g.to_vec::<f64>(), vec![2.0, 4.0, 6.0]);
/// ```
pub fn grad<P: Ptree>(f: impl Fn(&P) -> Tensor, params: &P) -> P {
    value_and_grad_impl("grad", |p| (f(p), ()), params).1
}

/// `(f(params), grad(f, params))` in one forward and one backward pass.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(3.0f32);
/// let (v, g) = rune::value_and_grad(|x: &Tensor| x * x, &x);
/// assert_eq!((v.item::<f32>(), g.item::<f32>()), (9.0, 6.0));
/// ```
pub fn value_and_grad<P: Ptree>(f: impl Fn(&P) -> Tensor, params: &P) -> (Tensor, P) {
    let ((value, ()), g) = value_and_grad_impl("value_and_grad", |p| (f(p), ()), params);
    (value, g)
}

/// Like [`value_and_grad`] for an objective that also returns auxiliary
/// data, which is returned as-is and does not contribute to the gradient.
/// Tensors in it computed from `params` hold their values (they can be read
/// and used after the call).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(2.0f64);
/// let ((v, aux), g) = rune::value_and_grad_aux(|x: &Tensor| (x * x, x.exp()), &x);
/// assert_eq!((v.item::<f64>(), g.item::<f64>()), (4.0, 4.0));
/// assert_eq!(aux.item::<f64>(), 2.0f64.exp());
/// ```
pub fn value_and_grad_aux<P: Ptree, A>(
    f: impl Fn(&P) -> (Tensor, A),
    params: &P,
) -> ((Tensor, A), P) {
    value_and_grad_impl("value_and_grad_aux", f, params)
}

/// `(f(params), grads)`: the vector-Jacobian product of `f` at `params`
/// against `cotangent` (one leaf per output leaf, of its shape and dtype).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
/// let ct = Tensor::from_slice(&[1.0f64, 10.0], &[2]);
/// let (y, g) = rune::vjp(|x: &Tensor| x.square(), &x, &ct);
/// assert_eq!(y.to_vec::<f64>(), vec![1.0, 4.0]);
/// assert_eq!(g.to_vec::<f64>(), vec![2.0, 40.0]);
/// ```
pub fn vjp<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, params: &P, cotangent: &Q) -> (Q, P) {
    let (out, values, rec) = record(params, f, |q| q.leaves());
    let cts = cotangent.leaves();
    rec.check_cotangents("vjp", &cts);
    let grads = rec.pull(&cts, true);
    (out.with_leaves(&values), params.with_leaves(&grads))
}

/// `vjp(f, params, cotangent).1` on leaves, with `f`'s outputs freed before
/// the backward pass (`remat`'s recomputation needs only the tape); `None`
/// for a leaf no cotangent reaches: a symbolic zero, not a zero tensor that
/// an outer rule would multiply by its partial.
pub(crate) fn vjp_leaves<P: Ptree, Q: Ptree>(
    func: &str,
    f: impl Fn(&P) -> Q,
    params: &P,
    cotangent: &Q,
) -> Vec<Option<Tensor>> {
    let (_, _, rec) = record(params, f, |q| q.leaves());
    let cts = cotangent.leaves();
    rec.check_cotangents(func, &cts);
    rec.pull_sparse(&cts, true)
}

/// The backward pass of a function recorded by [`vjp_fun`]: call it with a
/// cotangent (one leaf per output leaf, of its shape and dtype) to get the
/// vector-Jacobian product, as many times as needed. Calls under another
/// transformation (vmap, jvp, grad) transform the backward pass.
/// Not thread-safe.
pub struct Pullback<P, Q> {
    rec: Recorded,
    params: P,
    _out: PhantomData<fn(&Q)>,
}

impl<P: Ptree, Q: Ptree> Pullback<P, Q> {
    /// The vector-Jacobian product against `cotangent`: one backward pass,
    /// `f` is not run again.
    ///
    /// Panics if a cotangent leaf's shape or dtype differs from its output leaf's.
    pub fn call(&self, cotangent: &Q) -> P {
        let cts = cotangent.leaves();
        self.rec.check_cotangents("vjp_fun: pullback", &cts);
        self.params.with_leaves(&self.rec.pull(&cts, false))
    }
}

/// `(f(params), pullback)`: records `f` once; `pullback.call(&ct)` is the
/// vector-Jacobian product against `ct`.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
/// let (y, pb) = rune::vjp_fun(|x: &Tensor| x.sin(), &x);
/// let g1 = pb.call(&Tensor::from_slice(&[1.0f64, 0.0], &[2]));
/// let g2 = pb.call(&Tensor::from_slice(&[0.0f64, 1.0], &[2]));
/// assert_eq!(g1.to_vec::<f64>(), vec![1.0f64.cos(), 0.0]);
/// assert_eq!(g2.to_vec::<f64>(), vec![0.0, 2.0f64.cos()]);
/// # let _ = y;
/// ```
pub fn vjp_fun<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, params: &P) -> (Q, Pullback<P, Q>) {
    let (out, values, rec) = record(params, f, |q| q.leaves());
    let pullback = Pullback {
        rec,
        params: params.map_leaves(&mut |t| t.clone()),
        _out: PhantomData,
    };
    (out.with_leaves(&values), pullback)
}

/// Runs `f` under a new jvp trace with `tangents` attached to `params`'
/// leaves; `outs` picks the tensor leaves of the result to differentiate.
/// Returns the result, and those leaves' primals and tangents.
fn forward<P: Ptree, R>(
    func: &str,
    f: impl FnOnce(&P) -> R,
    params: &P,
    tangents: &P,
    outs: impl FnOnce(&R) -> Vec<Tensor>,
) -> (R, Vec<Tensor>, Vec<Tensor>) {
    let leaves = params.leaves();
    let tleaves = tangents.leaves();
    if leaves.len() != tleaves.len() {
        panic!(
            "{func}: the tangents have {} leaves but the parameters have {}",
            tleaves.len(),
            leaves.len()
        );
    }
    for (i, (p, t)) in leaves.iter().zip(&tleaves).enumerate() {
        if p.shape() != t.shape() {
            panic!(
                "{func}: tangent leaf {i} has shape {:?} but its parameter leaf has shape {:?}",
                t.shape(),
                p.shape()
            );
        }
        if p.dtype().is_inexact() && p.dtype() != t.dtype() {
            panic!(
                "{func}: tangent leaf {i} has dtype {} but its parameter leaf has dtype {}",
                t.dtype(),
                p.dtype()
            );
        }
    }
    let (trace, scope) = enter(|level, tag| JvpTrace { level, tag });
    let traced: Vec<Tensor> = leaves
        .iter()
        .zip(tleaves)
        .map(|(p, t)| trace.pack(p.clone(), Some(t)))
        .collect();
    let result = f(&params.with_leaves(&traced));
    let (primals, tangents): (Vec<Tensor>, Vec<Tensor>) = outs(&result)
        .iter()
        .map(|t| {
            let (p, t) = trace.unpack(t);
            let t = t.unwrap_or_else(|| p.zeros_like());
            (p, t)
        })
        .unzip();
    drop(scope);
    (result, primals, tangents)
}

/// `(f(params), df)`: the Jacobian-vector product of `f` at `params` along
/// `tangents` (same structure as `params`, each leaf of its parameter
/// leaf's shape), in one forward pass.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(0.0f64);
/// let (y, dy) = rune::jvp(|x: &Tensor| x.sin(), &x, &Tensor::scalar(2.0f64));
/// assert_eq!((y.item::<f64>(), dy.item::<f64>()), (0.0, 2.0));
/// ```
pub fn jvp<P: Ptree, Q: Ptree>(f: impl Fn(&P) -> Q, params: &P, tangents: &P) -> (Q, Q) {
    let (out, primals, tans) = forward("jvp", f, params, tangents, |q| q.leaves());
    (out.with_leaves(&primals), out.with_leaves(&tans))
}

/// Like [`jvp`] for a function that also returns auxiliary data, returned
/// as-is (its tensors hold their values).
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(3.0f64);
/// let ((y, dy), aux) = rune::jvp_aux(|x: &Tensor| (x * x, x + 1.0), &x, &Tensor::scalar(1.0f64));
/// assert_eq!((y.item::<f64>(), dy.item::<f64>(), aux.item::<f64>()), (9.0, 6.0, 4.0));
/// ```
pub fn jvp_aux<P: Ptree, Q: Ptree, A>(
    f: impl Fn(&P) -> (Q, A),
    params: &P,
    tangents: &P,
) -> ((Q, Q), A) {
    let ((out, aux), primals, tans) = forward("jvp_aux", f, params, tangents, |(q, _)| q.leaves());
    ((out.with_leaves(&primals), out.with_leaves(&tans)), aux)
}

/// The Hessian of the scalar objective `f` at `params` times `v`, with
/// `params`' structure, without forming the Hessian (forward over reverse).
/// Panics if a leaf of `params` is not a float tensor.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
/// let v = Tensor::from_slice(&[1.0f64, 0.0], &[2]);
/// // f = sum(x^3): H = diag(6x)
/// let hv = rune::hvp(|x: &Tensor| x.pow(&x.full_like(3.0)).sum_all(), &x, &v);
/// assert_eq!(hv.to_vec::<f64>(), vec![6.0, 0.0]);
/// ```
pub fn hvp<P: Ptree>(f: impl Fn(&P) -> Tensor, params: &P, v: &P) -> P {
    require_float_leaves("hvp", params);
    jvp(|p: &P| grad(&f, p), params, v).1
}
