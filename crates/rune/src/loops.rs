//! `scan` under jit: the body is staged once as a [`tolk::Loop`] (a
//! multi-output operation bound with `nx::trace::bind_multi`), and each
//! transformation has one rule for it, as JAX has for its `scan`:
//!
//! - forward mode carries tangents through the carry (which carries get a
//!   tangent is found by staging until it stops changing);
//! - reverse mode runs the forward loop with each step's carry stacked as
//!   an extra output, then a loop in the opposite direction whose body is
//!   the vector-Jacobian product of one step at its saved carry (the step's
//!   forward work is recomputed inside it, as `remat` of the body would);
//!   the cotangents of the loop-invariant inputs accumulate in its carry;
//! - vmap batches the body: every carry is batched, per-step inputs keep
//!   their batch axis after the scanned one.
//!
//! Each rule builds the new body by staging a function that evaluates the
//! old body under the transformation (`Graph::eval` binds its equations).

use crate::batch::BatchTrace;
use crate::jvp::JvpTrace;
use crate::scope::enter;
use crate::stage::{raise, stage_body, JitError};
use crate::vjp::VjpTrace;
use nx::trace::{bind_multi, MultiOp};
use nx::{Aval, Ptree, Tensor};
use std::sync::Arc;
use tolk::{Loop, Var};

/// The loop behind a multi-output operation a trace met.
pub(crate) fn as_loop(op: &Arc<dyn MultiOp>) -> &Loop {
    op.as_any()
        .downcast_ref::<Loop>()
        .unwrap_or_else(|| panic!("{}: not an operation rune defines", op.name()))
}

/// Registers this module's rules for the loop with the traces
/// (`scope::multi_op_rule`); each downcasts its trace.
fn register_rules() {
    crate::scope::register_multi_op_rules(
        std::any::TypeId::of::<Loop>(),
        [
            |t, op, ins| jvp(t.downcast_ref().expect("a JvpTrace"), as_loop(op), ins),
            |t, op, ins| vjp(t.downcast_ref().expect("a VjpTrace"), as_loop(op), ins),
            |t, op, ins| batch(t.downcast_ref().expect("a BatchTrace"), as_loop(op), ins),
        ],
    );
}

/// Binds `lp` on `inputs` (to the traces below the current ceiling).
fn bind_loop(lp: Loop, inputs: &[Tensor]) -> Vec<Tensor> {
    register_rules();
    let op: Arc<dyn MultiOp> = Arc::new(lp);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    bind_multi(&op, &refs)
}

/// Tensor avals with the leading (scanned) axis removed.
fn slice_aval(x: &Tensor) -> Aval {
    Aval::new(&x.shape()[1..], x.dtype())
}

/// The scan run step by step (each step's operations go to the traces on
/// the stack, or run eagerly).
pub(crate) fn traced_scan<C: Ptree, X: Ptree, Y: Ptree>(
    f: &impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
    len: usize,
) -> (C, Y) {
    let leaves = xs.leaves();
    let mut carry = init.map_leaves(&mut |t| t.clone());
    let mut outputs: Vec<Vec<Tensor>> = Vec::new();
    let mut template: Option<Y> = None;
    for i in 0..len {
        let x = xs.with_leaves(&leaves.iter().map(|l| l.get(i)).collect::<Vec<_>>());
        let (next, y) = f(&carry, &x);
        carry = next;
        let ys = y.leaves();
        if outputs.is_empty() {
            outputs = vec![Vec::with_capacity(len); ys.len()];
        }
        if ys.len() != outputs.len() {
            panic!(
                "scan: step {i} returned {} output leaves, the first step {}",
                ys.len(),
                outputs.len()
            );
        }
        for (acc, y) in outputs.iter_mut().zip(ys) {
            acc.push(y);
        }
        template.get_or_insert(y);
    }
    let stacked: Vec<Tensor> = outputs.iter().map(|ys| Tensor::stack(ys, 0)).collect();
    let ys = template.expect("at least one step").with_leaves(&stacked);
    (carry, ys)
}

/// `scan` under jit: `f` staged once into a loop of `len / unroll`
/// iterations of `unroll` steps each; the `len % unroll` remaining steps
/// are traced one by one after it. `1 <= unroll < len`.
pub(crate) fn staged_scan<C: Ptree, X: Ptree, Y: Ptree>(
    f: &impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
    len: usize,
    unroll: usize,
) -> (C, Y) {
    let init_leaves = init.leaves();
    let x_leaves = xs.leaves();
    let nc = init_leaves.len();
    let k = unroll.max(1);
    let iterations = len / k;
    let main = iterations * k;
    // Per iteration, `k` rows of each xs leaf: [iterations, k, ...].
    let loop_xs: Vec<Tensor> = x_leaves
        .iter()
        .map(|x| {
            let x = if main < len {
                x.narrow(0, 0, main)
            } else {
                x.clone()
            };
            if k > 1 {
                let mut shape = vec![iterations, k];
                shape.extend_from_slice(&x.shape()[1..]);
                x.reshape(&shape)
            } else {
                x
            }
        })
        .collect();
    let mut avals: Vec<Aval> = init_leaves.iter().map(Tensor::aval).collect();
    avals.extend(loop_xs.iter().map(slice_aval));
    let mut template: Option<Y> = None;
    let (body, captures) = stage_body(&avals, |ins| {
        let mut carry = init.with_leaves(&ins[..nc]);
        let mut ys: Vec<Vec<Tensor>> = Vec::new();
        for j in 0..k {
            let x: Vec<Tensor> = if k > 1 {
                ins[nc..].iter().map(|x| x.get(j)).collect()
            } else {
                ins[nc..].to_vec()
            };
            let (next, y) = f(&carry, &xs.with_leaves(&x));
            check_carry(&init_leaves, &next.leaves());
            carry = next;
            let y_leaves = y.leaves();
            if j == 0 {
                ys = vec![Vec::with_capacity(k); y_leaves.len()];
            }
            for (acc, t) in ys.iter_mut().zip(y_leaves) {
                acc.push(t);
            }
            template.get_or_insert(y);
        }
        let mut outs = carry.leaves();
        outs.extend(ys.iter().map(|acc| {
            if k > 1 {
                Tensor::stack(acc, 0)
            } else {
                acc[0].clone()
            }
        }));
        outs
    });
    let lp = Loop {
        body,
        length: iterations,
        n_consts: captures.len(),
        n_carry: nc,
        reverse: false,
    };
    let mut ins = captures;
    ins.extend(init_leaves);
    ins.extend(loop_xs);
    let outs = bind_loop(lp, &ins);
    let mut carry = init.with_leaves(&outs[..nc]);
    let mut ys: Vec<Tensor> = outs[nc..]
        .iter()
        .map(|y| {
            if k > 1 {
                let mut shape = vec![main];
                shape.extend_from_slice(&y.shape()[2..]);
                y.reshape(&shape)
            } else {
                y.clone()
            }
        })
        .collect();
    if main < len {
        let rest: Vec<Tensor> = x_leaves
            .iter()
            .map(|x| x.narrow(0, main, len - main))
            .collect();
        let (c, y_rest) = traced_scan(f, &carry, &xs.with_leaves(&rest), len - main);
        carry = c;
        ys = ys
            .iter()
            .zip(y_rest.leaves())
            .map(|(a, b)| Tensor::concatenate(&[a.clone(), b], 0))
            .collect();
    }
    let ys = template.expect("the body ran").with_leaves(&ys);
    (carry, ys)
}

/// A staged loop's carry keeps its shapes and dtypes from step to step.
fn check_carry(init: &[Tensor], next: &[Tensor]) {
    if init.len() != next.len() {
        raise(JitError::new(format!(
            "scan: the body returns a carry of {} leaves for a carry of {}; the carry keeps its \
             structure from step to step",
            next.len(),
            init.len()
        )));
    }
    for (i, (a, b)) in init.iter().zip(next).enumerate() {
        if a.shape() != b.shape() || a.dtype() != b.dtype() {
            raise(JitError::new(format!(
                "scan: the body returns carry leaf {i} as {}{:?}, the carry is {}{:?}; under jit \
                 the carry keeps its shape and dtype from step to step",
                b.dtype(),
                b.shape(),
                a.dtype(),
                a.shape()
            )));
        }
    }
}

/// How many of a loop's inputs are consts, carries and xs.
fn groups(lp: &Loop) -> (usize, usize, usize) {
    (
        lp.n_consts,
        lp.n_carry,
        lp.body.inputs.len() - lp.n_consts - lp.n_carry,
    )
}

/// Forward mode: the loop over (primal, tangent) pairs.
pub(crate) fn jvp(trace: &JvpTrace, lp: &Loop, inputs: &[&Tensor]) -> Vec<Tensor> {
    let (primals, tangents): (Vec<Tensor>, Vec<Option<Tensor>>) =
        inputs.iter().map(|t| trace.unpack(t)).unzip();
    let (nk, nc, _) = groups(lp);
    let float = |t: &Tensor| t.dtype().is_inexact();
    // Which inputs carry a tangent; a carry does when its initial value
    // does or when a step gives it one (staged until that stops changing).
    let mut has: Vec<bool> = tangents
        .iter()
        .zip(&primals)
        .map(|(t, p)| t.is_some() && float(p))
        .collect();
    if crate::gradient_control::is_inactive(trace.level) || !has.iter().any(|&h| h) {
        return bind_loop(lp.clone(), &primals);
    }
    loop {
        let (body, out_has) = jvp_body(lp, &primals, &has);
        let carry_grew = (0..nc).any(|i| out_has[i] && !has[nk + i]);
        if carry_grew {
            for i in 0..nc {
                has[nk + i] |= out_has[i];
            }
            continue;
        }
        // Loop inputs: each group's primals, then the tangents it carries.
        let tangent_of = |i: usize| {
            tangents[i]
                .clone()
                .unwrap_or_else(|| primals[i].zeros_like())
        };
        let mut ins = Vec::new();
        for range in [0..nk, nk..nk + nc, nk + nc..primals.len()] {
            ins.extend(primals[range.clone()].iter().cloned());
            ins.extend(range.filter(|&i| has[i]).map(tangent_of));
        }
        let n_kt = (0..nk).filter(|&i| has[i]).count();
        let n_ct = (nk..nk + nc).filter(|&i| has[i]).count();
        let new = Loop {
            body,
            length: lp.length,
            n_consts: nk + n_kt,
            n_carry: nc + n_ct,
            reverse: lp.reverse,
        };
        let outs = bind_loop(new, &ins);
        // Outputs: carries, their tangents, ys, their tangents; each group
        // packed as (primal, tangent where it has one).
        let pack = |group: &[Tensor], has: &[bool]| -> Vec<Tensor> {
            let (primals, mut tangents) = group.split_at(has.len());
            primals
                .iter()
                .zip(has)
                .map(|(p, &h)| {
                    let t = h.then(|| {
                        let (t, rest) = tangents.split_first().expect("one tangent per flag");
                        tangents = rest;
                        t.clone()
                    });
                    trace.pack(p.clone(), t)
                })
                .collect()
        };
        let mut result = pack(&outs[..nc + n_ct], &has[nk..nk + nc]);
        result.extend(pack(&outs[nc + n_ct..], &out_has[nc..]));
        return result;
    }
}

/// The body of the jvp loop for inputs with tangents `has`: inputs grouped
/// as consts, const tangents, carries, carry tangents, xs, x tangents;
/// outputs as carries, carry tangents (those `has` gives one), ys, y
/// tangents (those that have one). Also says which body outputs got a
/// tangent.
fn jvp_body(lp: &Loop, primals: &[Tensor], has: &[bool]) -> (tolk::Graph, Vec<bool>) {
    let (nk, nc, _) = groups(lp);
    let body_avals: Vec<Aval> = lp
        .body
        .inputs
        .iter()
        .map(|&v| lp.body.aval(v).clone())
        .collect();
    let mut avals = Vec::new();
    for range in [0..nk, nk..nk + nc, nk + nc..primals.len()] {
        avals.extend(body_avals[range.clone()].iter().cloned());
        avals.extend(range.filter(|&i| has[i]).map(|i| body_avals[i].clone()));
    }
    let mut out_has = Vec::new();
    let (graph, captures) = stage_body(&avals, |ins| {
        // Unpack the grouped inputs into (primal, tangent) per body input.
        let mut pairs: Vec<(Tensor, Option<Tensor>)> = Vec::new();
        let mut at = 0;
        for range in [0..nk, nk..nk + nc, nk + nc..primals.len()] {
            let n = range.len();
            let ps = &ins[at..at + n];
            at += n;
            let mut ts = Vec::new();
            for i in range.clone() {
                if has[i] {
                    ts.push(Some(ins[at].clone()));
                    at += 1;
                } else {
                    ts.push(None);
                }
            }
            pairs.extend(ps.iter().cloned().zip(ts));
        }
        let (trace, scope) = enter(|level, tag| JvpTrace { level, tag });
        let packed: Vec<Tensor> = pairs.into_iter().map(|(p, t)| trace.pack(p, t)).collect();
        let outs = lp.body.eval(&packed);
        let unpacked: Vec<(Tensor, Option<Tensor>)> =
            outs.iter().map(|t| trace.unpack(t)).collect();
        drop(scope);
        out_has = unpacked.iter().map(|(_, t)| t.is_some()).collect();
        let mut result: Vec<Tensor> = Vec::new();
        for (range, carries) in [(0..nc, true), (nc..unpacked.len(), false)] {
            result.extend(unpacked[range.clone()].iter().map(|(p, _)| p.clone()));
            for i in range {
                let (p, t) = &unpacked[i];
                // A carry's tangent slot exists when its input has one (a
                // step that drops it gives zeros); a y's when it has one.
                let slot = if carries { has[nk + i] } else { t.is_some() };
                if slot {
                    result.push(t.clone().unwrap_or_else(|| p.zeros_like()));
                }
            }
        }
        result
    });
    assert!(
        captures.is_empty(),
        "scan: a loop body captures nothing once staged"
    );
    (graph, out_has)
}

/// Reverse mode: the forward loop, also stacking what the reverse loop
/// needs, and a tape node whose rule runs the reverse loop.
///
/// The reverse loop's body is the vector-Jacobian product of one step,
/// staged over the step's consts, carries and inputs and the cotangents.
/// Its equations that need no cotangent (the step's forward work) move to
/// the forward loop (JAX's partial evaluation): the values they give that
/// the rest reads are stacked there, one slice per step, and read back.
pub(crate) fn vjp(trace: &VjpTrace, lp: &Loop, inputs: &[&Tensor]) -> Vec<Tensor> {
    let (values, vars): (Vec<Tensor>, Vec<Option<usize>>) =
        inputs.iter().map(|t| trace.unpack(t)).unzip();
    let needs: Vec<bool> = vars
        .iter()
        .zip(&values)
        .map(|(v, x)| v.is_some() && x.dtype().is_inexact())
        .collect();
    if crate::gradient_control::is_inactive(trace.level) || !needs.iter().any(|&n| n) {
        return bind_loop(lp.clone(), &values);
    }
    let rev = Reverse::new(lp, &needs);
    let mut outs = bind_loop(rev.forward.clone(), &values);
    let stacked = outs.split_off(lp.body.outputs.len());
    let out_avals: Vec<Aval> = outs.iter().map(Tensor::aval).collect();
    let saved = values.clone();
    let rule: crate::autodiff::Rule = Box::new(move |cts| rev.run(&saved, &stacked, cts));
    let tape_vars = trace.tape.push(vars, &out_avals, rule);
    outs.into_iter()
        .zip(tape_vars)
        .map(|(o, v)| {
            if o.dtype().is_inexact() {
                trace.pack(o, v)
            } else {
                o
            }
        })
        .collect()
}

/// A loop's reverse mode, staged: the forward loop that stacks the
/// residuals and the reverse loop's body.
struct Reverse {
    /// The loop, its outputs followed by the stacked carries the reverse
    /// body reads and the stacked residuals.
    forward: Loop,
    /// The reverse loop's body: inputs consts; cotangents of the float
    /// carries, then the consts' accumulated cotangents (its carry); the
    /// kept carries, the xs, the float ys' cotangents and the residuals
    /// (its per-step inputs); outputs the new carry cotangents, the new
    /// accumulators, the xs' cotangents.
    body: tolk::Graph,
    length: usize,
    reverse: bool,
    n_consts: usize,
    n_carry: usize,
    float_c: Vec<usize>,
    float_y: Vec<usize>,
    need_k: Vec<usize>,
    need_x: Vec<usize>,
    /// The carries (by index) the reverse body reads.
    kept_carries: Vec<usize>,
    out_avals: Vec<Aval>,
    body_avals: Vec<Aval>,
    /// Per output of the reverse body: zero at every step (it reads no
    /// cotangent), so the matching input's cotangent is a symbolic zero.
    zero: Vec<bool>,
}

impl Reverse {
    fn new(lp: &Loop, needs: &[bool]) -> Reverse {
        let (nk, nc, nx_) = groups(lp);
        let n_y = lp.body.outputs.len() - nc;
        let inexact = |a: &Aval| a.dtype.is_inexact();
        let body_avals: Vec<Aval> = lp
            .body
            .inputs
            .iter()
            .map(|&v| lp.body.aval(v).clone())
            .collect();
        let out_avals: Vec<Aval> = lp
            .body
            .outputs
            .iter()
            .map(|&v| lp.body.aval(v).clone())
            .collect();
        let float_c: Vec<usize> = (0..nc).filter(|&i| inexact(&body_avals[nk + i])).collect();
        let float_y: Vec<usize> = (0..n_y).filter(|&j| inexact(&out_avals[nc + j])).collect();
        let need_k: Vec<usize> = (0..nk).filter(|&i| needs[i]).collect();
        let need_x: Vec<usize> = (0..nx_).filter(|&i| needs[nk + nc + i]).collect();
        // The whole step's vjp: consts; carry cotangents, accumulators;
        // carries, xs, y cotangents.
        let mut avals: Vec<Aval> = body_avals[..nk].to_vec();
        avals.extend(float_c.iter().map(|&i| body_avals[nk + i].clone()));
        avals.extend(need_k.iter().map(|&i| body_avals[i].clone()));
        avals.extend(body_avals[nk..].iter().cloned());
        avals.extend(float_y.iter().map(|&j| out_avals[nc + j].clone()));
        let (full, captures) = stage_body(&avals, |ins| {
            let consts = &ins[..nk];
            let ct_c = &ins[nk..nk + float_c.len()];
            let acc = &ins[nk + float_c.len()..nk + float_c.len() + need_k.len()];
            let rest = &ins[nk + float_c.len() + need_k.len()..];
            let (carry, rest) = rest.split_at(nc);
            let (x, ct_y) = rest.split_at(nx_);
            let mut step: Vec<Tensor> = consts.to_vec();
            step.extend_from_slice(carry);
            step.extend_from_slice(x);
            let wrt: Vec<usize> = need_k
                .iter()
                .copied()
                .chain(float_c.iter().map(|&i| nk + i))
                .chain(need_x.iter().map(|&i| nk + nc + i))
                .collect();
            let params: Vec<Tensor> = wrt.iter().map(|&i| step[i].clone()).collect();
            let mut cot: Vec<Tensor> = ct_c.to_vec();
            cot.extend_from_slice(ct_y);
            let (_, grads) = crate::vjp(
                |p: &Vec<Tensor>| {
                    let mut full = step.clone();
                    for (&i, t) in wrt.iter().zip(p) {
                        full[i] = t.clone();
                    }
                    let outs = lp.body.eval(&full);
                    float_c
                        .iter()
                        .map(|&i| outs[i].clone())
                        .chain(float_y.iter().map(|&j| outs[nc + j].clone()))
                        .collect::<Vec<Tensor>>()
                },
                &params,
                &cot,
            );
            let (g_k, rest) = grads.split_at(need_k.len());
            let (g_c, g_x) = rest.split_at(float_c.len());
            let mut out: Vec<Tensor> = g_c.to_vec();
            out.extend(acc.iter().zip(g_k).map(|(a, g)| a + g));
            out.extend_from_slice(g_x);
            out
        });
        assert!(
            captures.is_empty(),
            "scan: a loop body captures nothing once staged"
        );
        let (nct, nacc) = (float_c.len(), need_k.len());
        // A step's vjp is linear in the cotangents: an output that reads
        // none of them (the carries' and ys', not the accumulators) is zero
        // at every step, as for an x the body never reads. Such inputs get
        // no cotangent (a symbolic zero, as JAX's scan transpose gives), not
        // a stacked zero that an outer rule would multiply by its partial
        // (0 * inf is NaN where eager has no term: seeds 9103882, 9107446).
        let n_in = full.inputs.len();
        let zero = {
            let is_ct = |i: usize| (nk..nk + nct).contains(&i) || i >= n_in - float_y.len();
            let reads = reads_inputs(&full, &is_ct);
            full.outputs.iter().map(|&v| !reads[v]).collect()
        };
        // Partial evaluation: the inputs known without cotangents are the
        // consts, the carries and the xs.
        let known_input =
            |i: usize| i < nk || (i >= nk + nct + nacc && i < nk + nct + nacc + nc + nx_);
        let split = split_known(&full, &known_input);
        // The forward loop: the step, the known equations over its own
        // inputs, the kept carries and the residuals stacked.
        let mut forward = lp.clone();
        let f = &mut forward.body;
        let mut to_f: Vec<Option<Var>> = vec![None; full.avals.len()];
        for (i, &v) in full.inputs.iter().enumerate() {
            if known_input(i) {
                let j = if i < nk { i } else { i - nct - nacc };
                to_f[v] = Some(f.inputs[j]);
            }
        }
        for (e, class) in full.eqns.iter().zip(&split.class) {
            if *class != Class::Unknown {
                copy_eqn(f, &mut to_f, &full, e);
            }
        }
        let carry_vars: Vec<Var> = full.inputs[nk + nct + nacc..nk + nct + nacc + nc].to_vec();
        let kept_carries: Vec<usize> = (0..nc)
            .filter(|&j| split.read_by_rest[carry_vars[j]])
            .collect();
        for &j in &kept_carries {
            let v = f.inputs[nk + j];
            f.outputs.push(v);
        }
        for &r in &split.residuals {
            f.outputs.push(to_f[r].expect("a known value"));
        }
        // The reverse body: the constants again, the unknown equations.
        let mut body = tolk::Graph::default();
        let mut to_b: Vec<Option<Var>> = vec![None; full.avals.len()];
        let mut input = |body: &mut tolk::Graph, v: Var| {
            let n = body.new_var(full.aval(v).clone());
            body.inputs.push(n);
            to_b[v] = Some(n);
        };
        for i in 0..nk + nct + nacc {
            input(&mut body, full.inputs[i]);
        }
        for &j in &kept_carries {
            input(&mut body, carry_vars[j]);
        }
        for i in nk + nct + nacc + nc..full.inputs.len() {
            input(&mut body, full.inputs[i]);
        }
        for &r in &split.residuals {
            input(&mut body, r);
        }
        for (e, class) in full.eqns.iter().zip(&split.class) {
            if *class != Class::Known {
                copy_eqn(&mut body, &mut to_b, &full, e);
            }
        }
        body.outputs = full
            .outputs
            .iter()
            .map(|&v| to_b[v].expect("an output of the reverse body"))
            .collect();
        Reverse {
            forward,
            body,
            length: lp.length,
            reverse: lp.reverse,
            n_consts: nk,
            n_carry: nc,
            float_c,
            float_y,
            need_k,
            need_x,
            kept_carries,
            out_avals,
            body_avals,
            zero,
        }
    }

    /// The cotangents of the loop's inputs (`None` where not needed), given
    /// its inputs `values`, what the forward loop stacked for the reverse
    /// one (the kept carries, then the residuals) and the cotangents of its
    /// outputs.
    fn run(
        &self,
        values: &[Tensor],
        stacked: &[Tensor],
        cts: &[Option<Tensor>],
    ) -> Vec<Option<Tensor>> {
        let (nk, nc) = (self.n_consts, self.n_carry);
        let zeros = |a: &Aval| Tensor::zeros(&a.shape, a.dtype);
        let mut ins: Vec<Tensor> = values[..nk].to_vec();
        for &i in &self.float_c {
            ins.push(cts[i].clone().unwrap_or_else(|| zeros(&self.out_avals[i])));
        }
        ins.extend(self.need_k.iter().map(|&i| zeros(&self.body_avals[i])));
        let (carries, residuals) = stacked.split_at(self.kept_carries.len());
        ins.extend(carries.iter().cloned());
        ins.extend(values[nk + nc..].iter().cloned());
        for &j in &self.float_y {
            let a = &self.out_avals[nc + j];
            let mut shape = vec![self.length];
            shape.extend_from_slice(&a.shape);
            ins.push(
                cts[nc + j]
                    .clone()
                    .unwrap_or_else(|| Tensor::zeros(&shape, a.dtype)),
            );
        }
        ins.extend(residuals.iter().cloned());
        let back = Loop {
            body: self.body.clone(),
            length: self.length,
            n_consts: nk,
            n_carry: self.float_c.len() + self.need_k.len(),
            reverse: !self.reverse,
        };
        let outs = bind_loop(back, &ins);
        let (g_c, rest) = outs.split_at(self.float_c.len());
        let (g_k, g_x) = rest.split_at(self.need_k.len());
        let (zero_c, rest) = self.zero.split_at(self.float_c.len());
        let (zero_k, zero_x) = rest.split_at(self.need_k.len());
        let mut result: Vec<Option<Tensor>> = vec![None; values.len()];
        let nonzero = |g: &Tensor, zero: &bool| (!zero).then(|| g.clone());
        for ((&i, g), z) in self.need_k.iter().zip(g_k).zip(zero_k) {
            result[i] = nonzero(g, z);
        }
        for ((&i, g), z) in self.float_c.iter().zip(g_c).zip(zero_c) {
            result[nk + i] = nonzero(g, z);
        }
        for ((&i, g), z) in self.need_x.iter().zip(g_x).zip(zero_x) {
            result[nk + nc + i] = nonzero(g, z);
        }
        result
    }
}

/// Appends equation `e` of `src` to `dst`, its inputs renamed by `map`
/// (each already there) and its outputs new variables of `dst`, recorded
/// in `map`.
fn copy_eqn(dst: &mut tolk::Graph, map: &mut [Option<Var>], src: &tolk::Graph, e: &tolk::Eqn) {
    let inputs = e
        .inputs
        .iter()
        .map(|&v| map[v].expect("scan: an equation read before it is placed"))
        .collect();
    let outs: Vec<Var> = e
        .outs
        .iter()
        .map(|&o| dst.new_var(src.aval(o).clone()))
        .collect();
    for (&o, &n) in e.outs.iter().zip(&outs) {
        map[o] = Some(n);
    }
    dst.eqns.push(tolk::Eqn {
        op: e.op.clone(),
        inputs,
        outs,
    });
}

/// How partial evaluation sorts a reverse body's equations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    /// Reads no input (a fill, and what is computed from fills only): in
    /// both loops.
    Constant,
    /// Computable from the known inputs alone: in the forward loop.
    Known,
    /// Reads a cotangent: in the reverse loop.
    Unknown,
}

struct Split {
    class: Vec<Class>,
    /// Known values (not inputs, not constants) that unknown equations or
    /// the outputs read: stacked by the forward loop.
    residuals: Vec<Var>,
    /// Per variable: whether an unknown equation or an output reads it.
    read_by_rest: Vec<bool>,
}

/// Per variable of `g`: whether it depends on an input `i` with `of(i)`.
fn reads_inputs(g: &tolk::Graph, of: &dyn Fn(usize) -> bool) -> Vec<bool> {
    let mut reads = vec![false; g.avals.len()];
    for (i, &v) in g.inputs.iter().enumerate() {
        reads[v] = of(i);
    }
    for e in &g.eqns {
        if e.inputs.iter().any(|&v| reads[v]) {
            for &o in &e.outs {
                reads[o] = true;
            }
        }
    }
    reads
}

/// Sorts `g`'s equations by what they depend on, input `i` known when
/// `known_input(i)`.
fn split_known(g: &tolk::Graph, known_input: &dyn Fn(usize) -> bool) -> Split {
    #[derive(Clone, Copy, PartialEq)]
    enum V {
        Constant,
        Known,
        Unknown,
    }
    let mut kind = vec![V::Unknown; g.avals.len()];
    for (i, &v) in g.inputs.iter().enumerate() {
        kind[v] = if known_input(i) { V::Known } else { V::Unknown };
    }
    let mut class = Vec::with_capacity(g.eqns.len());
    for e in &g.eqns {
        let c = if e.inputs.iter().any(|&v| kind[v] == V::Unknown) {
            Class::Unknown
        } else if e.inputs.iter().all(|&v| kind[v] == V::Constant) {
            Class::Constant
        } else {
            Class::Known
        };
        let k = match c {
            Class::Unknown => V::Unknown,
            Class::Constant => V::Constant,
            Class::Known => V::Known,
        };
        for &o in &e.outs {
            kind[o] = k;
        }
        class.push(c);
    }
    let mut read_by_rest = vec![false; g.avals.len()];
    for (e, c) in g.eqns.iter().zip(&class) {
        if *c == Class::Unknown {
            for &v in &e.inputs {
                read_by_rest[v] = true;
            }
        }
    }
    for &v in &g.outputs {
        read_by_rest[v] = true;
    }
    let is_input: Vec<bool> = {
        let mut b = vec![false; g.avals.len()];
        for &v in &g.inputs {
            b[v] = true;
        }
        b
    };
    let residuals = (0..g.avals.len())
        .filter(|&v| read_by_rest[v] && kind[v] == V::Known && !is_input[v])
        .collect();
    Split {
        class,
        residuals,
        read_by_rest,
    }
}

/// vmap: every carry batched, per-step inputs with their batch axis after
/// the scanned one, the body mapped over the batched inputs.
pub(crate) fn batch(trace: &BatchTrace, lp: &Loop, inputs: &[&Tensor]) -> Vec<Tensor> {
    let (values, batched): (Vec<Tensor>, Vec<bool>) =
        inputs.iter().map(|t| trace.unpack(t)).unzip();
    let (nk, nc, _) = groups(lp);
    let size = trace.size;
    // The loop's inputs: consts as they are, carries lifted, batched xs
    // with their batch axis moved after the scanned axis.
    let mut ins: Vec<Tensor> = Vec::with_capacity(values.len());
    let mut mapped: Vec<bool> = Vec::with_capacity(values.len());
    for (i, (v, &b)) in values.iter().zip(&batched).enumerate() {
        if i < nk {
            ins.push(v.clone());
            mapped.push(b);
        } else if i < nk + nc {
            ins.push(trace.lift(v, b));
            mapped.push(true);
        } else if b {
            ins.push(v.moveaxis(0, 1));
            mapped.push(true);
        } else {
            ins.push(v.clone());
            mapped.push(false);
        }
    }
    let avals: Vec<Aval> = lp
        .body
        .inputs
        .iter()
        .zip(&mapped)
        .map(|(&v, &m)| {
            let a = lp.body.aval(v);
            if m {
                let mut shape = vec![size];
                shape.extend_from_slice(&a.shape);
                Aval::new(&shape, a.dtype)
            } else {
                a.clone()
            }
        })
        .collect();
    let (body, captures) = stage_body(&avals, |args| {
        let in_axes: Vec<Option<isize>> = mapped.iter().map(|&m| m.then_some(0)).collect();
        crate::vmap_with(
            |a: &Vec<Tensor>| lp.body.eval(a),
            &args.to_vec(),
            crate::VmapOpts {
                in_axes: Some(in_axes),
                out_axis: 0,
            },
        )
    });
    assert!(
        captures.is_empty(),
        "scan: a loop body captures nothing once staged"
    );
    let new = Loop {
        body,
        length: lp.length,
        n_consts: nk,
        n_carry: nc,
        reverse: lp.reverse,
    };
    let outs = bind_loop(new, &ins);
    outs.into_iter()
        .enumerate()
        .map(|(i, o)| {
            if i < nc {
                trace.pack(o)
            } else {
                trace.pack(o.moveaxis(1, 0))
            }
        })
        .collect()
}
