//! Staging (jit's trace): a dynamic trace that records every primitive it
//! sees as an equation of a `tolk::Graph` instead of running it.
//!
//! Tracer = a variable of the graph being built. Concrete tensors reaching
//! the trace (captures) become constants. Whole-tensor `assign` on an input
//! leaf becomes a writeback; reading a staged value, implicit RNG, drawing
//! from a key that does not depend on the inputs, assigning to a capture or
//! into a view raise `JitError` (as a panic whose payload is the error, which
//! `Jit::try_call` catches).

use nx::trace::{push_trace, MultiOp, Trace, TraceGuard, Tracer};
use nx::{Aval, Prim, PrimClass, Tensor};
use std::any::Any;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tolk::{Eqn, Graph, Loop, Op, Var};

/// Why a function cannot be compiled: it reads a traced value (a branch on
/// a tensor), assigns to a capture or into a view, uses an operation or a
/// dtype the compiler does not support, or draws from the implicit random
/// generator or a key that does not depend on its inputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JitError {
    message: String,
}

impl JitError {
    /// An error carrying `message`.
    pub fn new(message: impl Into<String>) -> JitError {
        JitError {
            message: message.into(),
        }
    }

    /// What went wrong and what to do instead.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for JitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for JitError {}

/// Raises `e` during tracing (caught by `Jit::try_call`).
pub(crate) fn raise(e: JitError) -> ! {
    quiet_jit_panics();
    std::panic::panic_any(e)
}

/// Installs (once) a panic hook that stays silent for `JitError` payloads
/// (they are caught and reported by `call`/`try_call`) and defers to the
/// previous hook for every other panic.
fn quiet_jit_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<JitError>().is_none() {
                previous(info);
            }
        }));
    });
}

pub(crate) struct StageTracer {
    level: usize,
    aval: Aval,
    /// The variable this tensor holds now (an `assign` rebinds it).
    var: AtomicUsize,
    /// Index of the input leaf this tracer is, if it is one.
    input: Option<usize>,
    /// Produced by a movement primitive: a view in eager mode, so it must
    /// see later in-place updates of its source.
    view: Option<ViewOf>,
    /// Bumped whenever `var` changes (an assign, or a view refreshed).
    generation: AtomicUsize,
}

/// What a view tracer is a view of.
struct ViewOf {
    source: Tensor,
    prim: Prim,
    /// The source's generation when `var` was last computed.
    seen: AtomicUsize,
}

/// A tensor's staging generation (0 for a concrete tensor).
fn generation(t: &Tensor) -> usize {
    t.tracer()
        .and_then(|tr| tr.as_any().downcast_ref::<StageTracer>())
        .map_or(0, |s| s.generation.load(Ordering::Relaxed))
}

impl Tracer for StageTracer {
    fn aval(&self) -> &Aval {
        &self.aval
    }
    fn level(&self) -> usize {
        self.level
    }
    fn read(&self) -> Tensor {
        raise(JitError::new(
            "jit: the function reads the value of a traced tensor (item, to_vec, or the \
             predicate of a cond/while_loop that depends on the inputs); the value is only known \
             when the compiled program runs. Compute it without reading (Tensor::where_ selects \
             between branches), or read it outside the jitted function",
        ))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl StageTracer {
    fn var(&self) -> Var {
        self.var.load(Ordering::Relaxed)
    }
}

#[derive(Default)]
struct State {
    /// Staging a loop's body: tensors of other traces (and concrete ones)
    /// become captures (the graph's constants, made the loop's leading
    /// inputs by [`stage_body`]) instead of an error.
    body: bool,
    graph: Graph,
    /// Captured tensors already made constants, by handle identity.
    consts: HashMap<usize, Var>,
    /// Per variable: whether it depends on an input.
    depends: Vec<bool>,
}

pub(crate) struct StageTrace {
    level: usize,
    state: Rc<RefCell<State>>,
}

fn new_var(st: &mut State, aval: Aval, depends: bool) -> Var {
    st.depends.push(depends);
    st.graph.new_var(aval)
}

/// The variable for `t`: its own if it is a tracer of the staging trace at
/// `level`, a constant if concrete.
fn var_of(level: usize, st: &mut State, t: &Tensor) -> Var {
    match t.tracer() {
        Some(tr) => match tr.as_any().downcast_ref::<StageTracer>() {
            Some(s) if s.level == level => {
                if let Some(v) = &s.view {
                    // Eager views alias their source: after the source was
                    // assigned in place, re-apply the view to its new value.
                    let src = var_of(level, st, &v.source);
                    let g = generation(&v.source);
                    if g != v.seen.load(Ordering::Relaxed) {
                        let depends = st.depends[src];
                        let out = new_var(st, s.aval.clone(), depends);
                        st.graph
                            .eqns
                            .push(Eqn::prim(v.prim.clone(), vec![src], out));
                        s.var.store(out, Ordering::Relaxed);
                        v.seen.store(g, Ordering::Relaxed);
                        s.generation.fetch_add(1, Ordering::Relaxed);
                    }
                }
                s.var()
            }
            _ if st.body => capture(st, t),
            _ => panic!(
                "jit: internal error: a tensor traced by another transformation reached the \
                     staging trace"
            ),
        },
        None => capture(st, t),
    }
}

/// The constant standing for `t` (a capture: concrete, or in a loop's body
/// a tensor of another trace), made once per tensor.
fn capture(st: &mut State, t: &Tensor) -> Var {
    if let Some(&v) = st.consts.get(&t.id()) {
        return v;
    }
    // In a body, a traced capture is an input of the loop (it may depend on
    // the jitted function's inputs); a concrete one is a constant.
    let depends = st.body && t.is_traced();
    let v = new_var(st, t.aval(), depends);
    st.graph.consts.push((v, t.clone()));
    st.consts.insert(t.id(), v);
    v
}

fn tracer(
    level: usize,
    aval: Aval,
    var: Var,
    input: Option<usize>,
    view: Option<ViewOf>,
) -> Tensor {
    Tensor::from_tracer(StageTracer {
        level,
        aval,
        var: AtomicUsize::new(var),
        input,
        view,
        generation: AtomicUsize::new(0),
    })
}

impl StageTrace {
    fn assign(&self, dst: &Tensor, src: &Tensor) -> Tensor {
        let Some(d) = dst
            .tracer()
            .and_then(|t| t.as_any().downcast_ref::<StageTracer>())
        else {
            raise(JitError::new(
                "jit: the function assigns to a tensor it captures; captures are compile-time \
                 constants. Thread mutable state through the inputs instead (assign to an input \
                 leaf, or return the new value)",
            ))
        };
        if d.view.is_some() {
            raise(JitError::new(
                "jit: the function assigns into a view (a reshape, slice, transpose, ... of \
                 another tensor), which the compiler does not support; compute the whole new \
                 value and assign it to the input leaf itself",
            ))
        }
        let mut st = self.state.borrow_mut();
        let v = var_of(self.level, &mut st, src);
        d.var.store(v, Ordering::Relaxed);
        d.generation.fetch_add(1, Ordering::Relaxed);
        if let Some(i) = d.input {
            st.graph.writebacks.retain(|(j, _)| *j != i);
            st.graph.writebacks.push((i, v));
        }
        dst.clone()
    }
}

impl Trace for StageTrace {
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        if prim == Prim::Assign {
            return self.assign(inputs[0], inputs[1]);
        }
        // Linear algebra and FFT (reached directly only by a bound
        // primitive or a derivative rule; the public operations already
        // called `eager_only`).
        if prim.class() == PrimClass::EagerOnly {
            let module = if matches!(prim, Prim::Fft { .. }) {
                "fft"
            } else {
                "linalg"
            };
            self.eager_only(&format!("{module}::{}", prim.name()));
        }
        let mut st = self.state.borrow_mut();
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| var_of(self.level, &mut st, t))
            .collect();
        if prim == Prim::Threefry2x32 && !st.depends[vars[0]] {
            drop(st);
            raise(JitError::new(
                "jit: the function draws random values from a key that does not depend on its \
                 inputs (a captured rune::rng key); the draw would be a compile-time constant \
                 replayed on every call. Pass the key as an input (split or fold_in it for fresh \
                 values each call)",
            ))
        }
        let avals: Vec<&Aval> = vars.iter().map(|&v| st.graph.aval(v)).collect();
        let aval = prim.out_aval(&avals);
        if let Some(d) = avals
            .iter()
            .map(|a| a.dtype)
            .chain([aval.dtype])
            .find(|d| d.is_complex() || d.is_4bit())
        {
            drop(st);
            refuse_dtype(d, &format!("{}", prim.name()));
        }
        let depends = vars.iter().any(|&v| st.depends[v]);
        let out = new_var(&mut st, aval.clone(), depends);
        let view = (prim.class() == PrimClass::View).then(|| ViewOf {
            source: inputs[0].clone(),
            prim: prim.clone(),
            seen: AtomicUsize::new(generation(inputs[0])),
        });
        st.graph.eqns.push(Eqn::prim(prim, vars, out));
        drop(st);
        tracer(self.level, aval, out, None, view)
    }

    fn process_multi(&self, op: &Arc<dyn MultiOp>, inputs: &[&Tensor]) -> Vec<Tensor> {
        let Ok(lp) = op.clone().into_any().downcast::<Loop>() else {
            panic!("jit: {} cannot be staged", op.name());
        };
        let mut st = self.state.borrow_mut();
        let vars: Vec<Var> = inputs
            .iter()
            .map(|t| var_of(self.level, &mut st, t))
            .collect();
        let depends = vars.iter().any(|&v| st.depends[v]);
        let avals = lp.out_avals();
        let outs: Vec<Var> = avals
            .iter()
            .map(|a| new_var(&mut st, a.clone(), depends))
            .collect();
        st.graph.eqns.push(Eqn {
            op: Op::Loop(lp),
            inputs: vars,
            outs: outs.clone(),
        });
        drop(st);
        avals
            .into_iter()
            .zip(outs)
            .map(|(a, v)| tracer(self.level, a, v, None, None))
            .collect()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn eager_only(&self, op: &str) {
        raise(JitError::new(format!(
            "jit: {op} is an operation the compiler does not support (linear algebra and FFT \
             run eagerly); it runs eagerly outside jit. Call it outside the jitted function (on \
             the concrete results of a jitted call) instead"
        )))
    }

    fn implicit_random(&self, op: &str) {
        raise(JitError::new(format!(
            "jit: the function draws from the implicit random generator (Tensor::{op}); inside \
             jit the draw would be a compile-time constant replayed on every call. Pass a \
             rune::rng key as an input and draw with rune::rng instead"
        )))
    }
}

/// Complex and 4-bit tensors have no code generation: refused by dtype, at
/// the first primitive (or input leaf) that carries one.
fn refuse_dtype(d: nx::DType, at: &str) -> ! {
    let kind = if d.is_complex() {
        "complex"
    } else {
        "4-bit integer"
    };
    raise(JitError::new(format!(
        "jit: {at} has dtype {d}: {kind} tensors are not supported by the compiler, so work \
         on {d} tensors runs eagerly outside jit. Call those operations outside the jitted \
         function (and jit the rest of the computation)"
    )))
}

/// Pushes a staging trace (dynamic: it sees every operation) recording
/// into `state`.
fn push_stage(state: State) -> (Rc<RefCell<State>>, TraceGuard) {
    let state = Rc::new(RefCell::new(state));
    let shared = state.clone();
    let guard = push_trace(
        move |level| StageTrace {
            level,
            state: shared,
        },
        true,
    );
    (state, guard)
}

/// A staging session: the trace on the stack and where its equations go.
pub(crate) struct Staging {
    level: usize,
    state: Rc<RefCell<State>>,
    guard: Option<TraceGuard>,
}

impl Staging {
    /// Pushes a staging trace; `leaves` become the graph's inputs, and the
    /// returned tracers stand for them.
    /// `aliases[j]` is the first leaf identical to leaf `j` (`j` itself if
    /// none): such leaves share one tracer, so an assign through either is
    /// seen through both, as in eager mode.
    pub(crate) fn begin(leaves: &[Tensor], aliases: &[usize]) -> (Staging, Vec<Tensor>) {
        let (state, guard) = push_stage(State::default());
        let level = guard.level();
        let tracers = {
            let mut st = state.borrow_mut();
            let mut out: Vec<Tensor> = Vec::with_capacity(leaves.len());
            for (i, leaf) in leaves.iter().enumerate() {
                let d = leaf.dtype();
                if d.is_complex() || d.is_4bit() {
                    drop(st);
                    refuse_dtype(d, &format!("an input leaf (number {i})"));
                }
                let v = new_var(&mut st, leaf.aval(), true);
                st.graph.inputs.push(v);
                let t = if aliases[i] == i {
                    tracer(level, leaf.aval(), v, Some(i), None)
                } else {
                    out[aliases[i]].clone()
                };
                out.push(t);
            }
            out
        };
        let staging = Staging {
            level,
            state,
            guard: Some(guard),
        };
        (staging, tracers)
    }

    /// Pops the trace and returns the graph with `outputs` as its outputs.
    pub(crate) fn finish(mut self, outputs: &[Tensor]) -> Graph {
        let mut st = self.state.borrow_mut();
        let outs: Vec<Var> = outputs
            .iter()
            .map(|t| var_of(self.level, &mut st, t))
            .collect();
        self.guard.take();
        let mut g = std::mem::take(&mut st.graph);
        g.outputs = outs;
        g
    }
}

/// Whether a jit staging trace is active below the ceiling: `scan` then
/// stages its body once as a loop instead of tracing every step.
pub(crate) fn staging_active() -> bool {
    let top = nx::trace::depth().min(nx::trace::ceiling().saturating_sub(1));
    (1..=top).any(|l| nx::trace::trace_at(l).as_any().is::<StageTrace>())
}

/// Stages `f` once as a loop body over fresh inputs of `avals` (JAX's
/// closure conversion): returns the body graph, whose leading inputs are
/// the tensors `f` captured (concrete or traced by another transformation),
/// and those captures, which the loop takes as its leading inputs.
pub(crate) fn stage_body(
    avals: &[Aval],
    f: impl FnOnce(&[Tensor]) -> Vec<Tensor>,
) -> (Graph, Vec<Tensor>) {
    let (state, guard) = push_stage(State {
        body: true,
        ..State::default()
    });
    let level = guard.level();
    let inputs: Vec<Tensor> = {
        let mut st = state.borrow_mut();
        avals
            .iter()
            .map(|a| {
                let v = new_var(&mut st, a.clone(), true);
                st.graph.inputs.push(v);
                tracer(level, a.clone(), v, None, None)
            })
            .collect()
    };
    let outputs = f(&inputs);
    let mut st = state.borrow_mut();
    let outs: Vec<Var> = outputs.iter().map(|t| var_of(level, &mut st, t)).collect();
    drop(guard);
    let mut g = std::mem::take(&mut st.graph);
    g.outputs = outs;
    let captures: Vec<(Var, Tensor)> = std::mem::take(&mut g.consts);
    let mut ins: Vec<Var> = captures.iter().map(|(v, _)| *v).collect();
    ins.extend(g.inputs.iter().copied());
    g.inputs = ins;
    (g, captures.into_iter().map(|(_, t)| t).collect())
}
