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
use crate::jvp::{enter, JvpTrace};
use crate::stage::{raise, stage_body, JitError};
use crate::vjp::VjpTrace;
use nx::trace::{bind_multi, MultiOp};
use nx::{Aval, Ptree, Tensor};
use std::sync::Arc;
use tolk::Loop;

/// The loop behind a multi-output operation a trace met.
pub(crate) fn as_loop(op: &Arc<dyn MultiOp>) -> &Loop {
    op.as_any()
        .downcast_ref::<Loop>()
        .unwrap_or_else(|| panic!("{}: not an operation rune defines", op.name()))
}

/// Binds `lp` on `inputs` (to the traces below the current ceiling).
fn bind_loop(lp: Loop, inputs: &[Tensor]) -> Vec<Tensor> {
    let op: Arc<dyn MultiOp> = Arc::new(lp);
    let refs: Vec<&Tensor> = inputs.iter().collect();
    bind_multi(&op, &refs)
}

/// Tensor avals with the leading (scanned) axis removed.
fn slice_aval(x: &Tensor) -> Aval {
    Aval::new(&x.shape()[1..], x.dtype())
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
        let (c, y_rest) =
            crate::control::traced_scan(f, &carry, &xs.with_leaves(&rest), len - main);
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
    let n_out_y = lp.body.outputs.len() - nc;
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
        // Outputs: carries, their tangents, ys, their tangents.
        let mut result = Vec::with_capacity(nc + n_out_y);
        let mut next_t = nc;
        for (i, p) in outs[..nc].iter().enumerate() {
            let t = has[nk + i].then(|| {
                next_t += 1;
                outs[next_t - 1].clone()
            });
            result.push(trace.pack(p.clone(), t));
        }
        let ys = &outs[nc + n_ct..];
        let mut next_t = n_out_y;
        for (j, p) in ys[..n_out_y].iter().enumerate() {
            let t = out_has[nc + j].then(|| {
                next_t += 1;
                ys[next_t - 1].clone()
            });
            result.push(trace.pack(p.clone(), t));
        }
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

/// Reverse mode: the forward loop, with the carries stacked, and a tape
/// node whose rule runs the reverse loop.
pub(crate) fn vjp(trace: &VjpTrace, lp: &Loop, inputs: &[&Tensor]) -> Vec<Tensor> {
    let (values, vars): (Vec<Tensor>, Vec<Option<usize>>) =
        inputs.iter().map(|t| trace.unpack(t)).unzip();
    let (nk, nc, _) = groups(lp);
    let needs: Vec<bool> = vars
        .iter()
        .zip(&values)
        .map(|(v, x)| v.is_some() && x.dtype().is_inexact())
        .collect();
    if crate::gradient_control::is_inactive(trace.level) || !needs.iter().any(|&n| n) {
        return bind_loop(lp.clone(), &values);
    }
    // The forward loop also stacks each step's incoming carries.
    let mut fwd = lp.clone();
    let carry_in: Vec<usize> = fwd.body.inputs[nk..nk + nc].to_vec();
    fwd.body.outputs.extend(carry_in);
    let mut outs = bind_loop(fwd, &values);
    let carries = outs.split_off(lp.body.outputs.len());
    let out_avals: Vec<Aval> = outs.iter().map(Tensor::aval).collect();
    let lp = lp.clone();
    let saved = values.clone();
    let rule: crate::vjp::Rule =
        Box::new(move |cts| reverse_loop(&lp, &saved, &carries, &needs, cts));
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

/// The cotangents of a loop's inputs (`None` where not `needs`), given its
/// inputs `values`, the carries each step started from (stacked), and the
/// cotangents of its outputs.
fn reverse_loop(
    lp: &Loop,
    values: &[Tensor],
    carries: &[Tensor],
    needs: &[bool],
    cts: &[Option<Tensor>],
) -> Vec<Option<Tensor>> {
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
    // Differentiated: float carries, and the consts and xs that need it.
    let float_c: Vec<usize> = (0..nc).filter(|&i| inexact(&body_avals[nk + i])).collect();
    let float_y: Vec<usize> = (0..n_y).filter(|&j| inexact(&out_avals[nc + j])).collect();
    let need_k: Vec<usize> = (0..nk).filter(|&i| needs[i]).collect();
    let need_x: Vec<usize> = (0..nx_).filter(|&i| needs[nk + nc + i]).collect();
    let zeros = |a: &Aval| Tensor::zeros(&a.shape, a.dtype);
    // The reverse loop: consts = the loop's consts; carry = cotangents of
    // the float carries, then the consts' accumulated cotangents; xs = the
    // carries each step began with, the xs, the float ys' cotangents.
    let mut avals: Vec<Aval> = body_avals[..nk].to_vec();
    avals.extend(float_c.iter().map(|&i| body_avals[nk + i].clone()));
    avals.extend(need_k.iter().map(|&i| body_avals[i].clone()));
    avals.extend(body_avals[nk..].iter().cloned());
    avals.extend(float_y.iter().map(|&j| out_avals[nc + j].clone()));
    let (body, captures) = stage_body(&avals, |ins| {
        let consts = &ins[..nk];
        let ct_c = &ins[nk..nk + float_c.len()];
        let acc = &ins[nk + float_c.len()..nk + float_c.len() + need_k.len()];
        let rest = &ins[nk + float_c.len() + need_k.len()..];
        let (carry, rest) = rest.split_at(nc);
        let (x, ct_y) = rest.split_at(nx_);
        let mut step: Vec<Tensor> = consts.to_vec();
        step.extend_from_slice(carry);
        step.extend_from_slice(x);
        // Differentiated inputs, by body input index.
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
    let mut ins = captures;
    let n_captures = ins.len();
    ins.extend(values[..nk].iter().cloned());
    for &i in &float_c {
        ins.push(cts[i].clone().unwrap_or_else(|| zeros(&out_avals[i])));
    }
    ins.extend(need_k.iter().map(|&i| zeros(&body_avals[i])));
    ins.extend(carries.iter().cloned());
    ins.extend(values[nk + nc..].iter().cloned());
    for &j in &float_y {
        let a = &out_avals[nc + j];
        let mut shape = vec![lp.length];
        shape.extend_from_slice(&a.shape);
        ins.push(
            cts[nc + j]
                .clone()
                .unwrap_or_else(|| Tensor::zeros(&shape, a.dtype)),
        );
    }
    let back = Loop {
        body,
        length: lp.length,
        n_consts: n_captures + nk,
        n_carry: float_c.len() + need_k.len(),
        reverse: !lp.reverse,
    };
    let outs = bind_loop(back, &ins);
    let (g_c, rest) = outs.split_at(float_c.len());
    let (g_k, g_x) = rest.split_at(need_k.len());
    let mut result: Vec<Option<Tensor>> = vec![None; values.len()];
    for (&i, g) in need_k.iter().zip(g_k) {
        result[i] = Some(g.clone());
    }
    for (&i, g) in float_c.iter().zip(g_c) {
        if needs[nk + i] {
            result[nk + i] = Some(g.clone());
        }
    }
    for (&i, g) in need_x.iter().zip(g_x) {
        result[nk + nc + i] = Some(g.clone());
    }
    result
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
