//! Dispatch: `bind` sends a primitive application either to the eager CPU
//! backend or to the transformation (trace) that owns it.
//!
//! Traces live on a thread-local stack; a trace's level is its position there
//! (1 = bottom). A traced tensor carries a `Tracer` that knows its level.
//! `bind` picks the highest level among the inputs' tracers and the dynamic
//! traces (those that see every operation, constants included, such as jit's
//! staging trace or `with_debug`); with none, it runs the eager kernel.
//! Levels keep nested transformations apart: an outer `grad`'s tracer meeting
//! an inner one's is a constant to the inner trace, never confused with it.
//!
//! While a trace processes a primitive, the *ceiling* is its level: tensor
//! operations its rule performs go to the traces below it (or the eager
//! kernels), never back to itself or to traces above. Pushing a new trace
//! lifts the ceiling for the new trace's extent.

use crate::prim::{Aval, Prim};
use crate::tensor::Tensor;
use std::any::Any;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

/// A transformation's interpretation of primitives.
pub trait Trace {
    /// Applies `prim` to `inputs`. At least one input is a tracer of this
    /// trace, or the trace is dynamic. Inputs of lower levels (or concrete
    /// tensors) are constants to this trace. To run an operation on
    /// lower-level values, call ordinary tensor operations on them (or
    /// `bind_below(level, ...)` to skip this trace, as a dynamic trace must).
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor;
    /// For transformations that find a trace by level (`trace_at`) and need
    /// its concrete type (custom differentiation rules do).
    fn as_any(&self) -> &dyn Any;
    /// Called when the implicit global generator (`Tensor::rand`, `randn`,
    /// `randint`) draws while this dynamic trace is active. A trace that
    /// cannot accept host-drawn values as constants (jit's staging: the draw
    /// would be frozen into the program) panics here; the default accepts.
    fn implicit_random(&self, _op: &str) {}
    /// Called when an operation that only runs eagerly (linear algebra:
    /// `op` is its name, as `linalg::solve`) is applied while this dynamic
    /// trace is active. A trace that compiles (jit's staging) panics here;
    /// the default accepts.
    fn eager_only(&self, _op: &str) {}
    /// Applies a multi-output operation defined outside nx (a staged loop)
    /// to `inputs`. The default refuses it, naming the operation: a trace
    /// that can meet one (every trace rune defines) overrides this.
    fn process_multi(&self, op: &std::sync::Arc<dyn MultiOp>, _inputs: &[&Tensor]) -> Vec<Tensor> {
        panic!(
            "{}: this transformation does not support the operation",
            op.name()
        )
    }
    /// Applies a function with a user-defined forward-mode rule (JAX's
    /// `process_custom_jvp_call`; see [`bind_custom_jvp`]). The default
    /// runs the function itself, so this trace sees its operations: right
    /// for every trace but those that differentiate (forward mode uses the
    /// rule; reverse mode refuses it) or map over lanes.
    fn process_custom_jvp_call(&self, call: &CustomJvpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        (call.fun)(inputs)
    }
    /// Applies a function with a user-defined reverse-mode rule (JAX's
    /// `process_custom_vjp_call`; see [`bind_custom_vjp`]). The default
    /// runs the forward function and drops its backward rule, so this trace
    /// sees the forward operations.
    fn process_custom_vjp_call(&self, call: &CustomVjpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        (call.fwd)(inputs).0
    }
}

/// A function with a user-defined forward-mode derivative (rune's
/// `custom_jvp`), on its input leaves.
pub struct CustomJvpCall<'a> {
    /// What messages call it.
    pub name: &'a str,
    /// The function: input leaves to output leaves.
    pub fun: &'a dyn Fn(&[Tensor]) -> Vec<Tensor>,
    /// The rule: input leaves and their tangents to the output leaves and
    /// their tangents (one per output leaf, of its shape).
    pub jvp: &'a dyn Fn(&[Tensor], &[Tensor]) -> (Vec<Tensor>, Vec<Tensor>),
}

/// A backward rule of a [`CustomVjpCall`]: the output leaves' cotangents
/// to the input leaves' cotangents (closing over what the forward function
/// kept); `None` where an input gets none (a symbolic zero: `remat` of a
/// function that never reads that input).
pub type CustomBwd = Box<dyn Fn(&[Tensor]) -> Vec<Option<Tensor>>>;

/// A function with a user-defined reverse-mode derivative (rune's
/// `custom_vjp` and `remat`), on its input leaves.
pub struct CustomVjpCall<'a> {
    /// What messages call it.
    pub name: &'a str,
    /// The forward function: input leaves to the output leaves and the
    /// backward rule for this application.
    pub fwd: &'a dyn Fn(&[Tensor]) -> (Vec<Tensor>, CustomBwd),
}

/// Applies a function with a custom forward-mode rule to `inputs`: the
/// owning trace's [`Trace::process_custom_jvp_call`], or the function
/// itself when no trace owns them. The owner is the trace of the highest
/// level among the inputs' live tracers below the ceiling (dynamic traces
/// own no such call).
pub fn bind_custom_jvp(call: &CustomJvpCall, inputs: &[Tensor]) -> Vec<Tensor> {
    match custom_owner(inputs) {
        Some(trace) => trace.process_custom_jvp_call(call, inputs),
        None => (call.fun)(inputs),
    }
}

/// Applies a function with a custom reverse-mode rule to `inputs`: the
/// owning trace's [`Trace::process_custom_vjp_call`], or the forward
/// function when no trace owns them.
pub fn bind_custom_vjp(call: &CustomVjpCall, inputs: &[Tensor]) -> Vec<Tensor> {
    match custom_owner(inputs) {
        Some(trace) => trace.process_custom_vjp_call(call, inputs),
        None => (call.fwd)(inputs).0,
    }
}

/// The trace that owns a custom-rule call on `inputs`: the one of the
/// highest level among their live (not escaped) tracers below the current
/// ceiling. Dynamic traces do not own such calls: they see the operations
/// the owner runs.
fn custom_owner(inputs: &[Tensor]) -> Option<Rc<dyn Trace>> {
    let ceiling = ceiling();
    inputs
        .iter()
        .filter_map(|t| t.tracer())
        .filter(|tr| tr.escaped_value().is_none())
        .map(|tr| tr.level())
        .filter(|&level| level < ceiling)
        .max()
        .map(trace_at)
}

/// An operation with several outputs whose rules live in the crate that
/// defines it (JAX's higher-order primitives: rune's staged `scan` loop).
/// Traces reach the concrete operation through [`MultiOp::as_any`].
pub trait MultiOp: Send + Sync + 'static {
    /// The name used in messages and printouts.
    fn name(&self) -> String;
    /// Runs the operation on concrete inputs (no trace owns it).
    fn eval(&self, inputs: &[&Tensor]) -> Vec<Tensor>;
    /// The operation as `Any`, so that a trace can downcast it.
    fn as_any(&self) -> &dyn Any;
    /// The shared operation as `Any`, so that a trace can keep it as its
    /// concrete type (`Arc::downcast`).
    fn into_any(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn Any + Send + Sync>;
}

/// The per-tensor state of a trace (primal and tangent, node on a tape, ...).
pub trait Tracer: Send + Sync + 'static {
    /// What the computation above this tracer sees: its shape and dtype.
    fn aval(&self) -> &Aval;
    /// The level of the trace this tracer belongs to.
    fn level(&self) -> usize;
    /// The value behind this tracer, for `to_vec`/`item`. A trace that cannot
    /// produce one (a staged or batched value) panics with its own message.
    fn read(&self) -> Tensor;
    /// The tracer as `Any`, so that its trace can downcast it to its own type.
    fn as_any(&self) -> &dyn Any;
    /// For a tracer whose transformation has returned: the value it stood
    /// for, which later operations use as a constant (a differentiation
    /// tracer escaping through an auxiliary output). `None`, the default,
    /// makes such use an error.
    fn escaped_value(&self) -> Option<Tensor> {
        None
    }
}

struct Frame {
    trace: Rc<dyn Trace>,
    dynamic: bool,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
    /// Mirror of the stack's length, so the eager fast path skips the RefCell.
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// Only traces of level below the ceiling receive operations.
    static CEILING: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Pops its trace when dropped (also on unwinding).
pub struct TraceGuard {
    level: usize,
    ceiling: usize,
}

impl TraceGuard {
    /// The level of the trace this guard pushed (its 1-based depth on the
    /// thread's trace stack).
    pub fn level(&self) -> usize {
        self.level
    }
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        STACK.with(|s| {
            let mut s = s.borrow_mut();
            debug_assert_eq!(s.len(), self.level, "traces popped out of order");
            s.truncate(self.level - 1);
            DEPTH.with(|d| d.set(s.len()));
        });
        CEILING.with(|c| c.set(self.ceiling));
    }
}

/// Restores the previous ceiling when dropped.
struct CeilingGuard(usize);

impl CeilingGuard {
    fn set(level: usize) -> CeilingGuard {
        CeilingGuard(CEILING.with(|c| c.replace(level)))
    }
}

impl Drop for CeilingGuard {
    fn drop(&mut self) {
        CEILING.with(|c| c.set(self.0));
    }
}

/// The current ceiling: operations go to traces of level below it.
pub fn ceiling() -> usize {
    CEILING.with(|c| c.get())
}

/// Runs `f` with the ceiling at `level`: its operations skip the trace at
/// `level` and those above. A transformation's rule uses it to run user code
/// (a custom rule, a rematerialized function) on the values below it.
pub fn with_ceiling<R>(level: usize, f: impl FnOnce() -> R) -> R {
    let _guard = CeilingGuard::set(level);
    f()
}

/// Pushes a trace built for the next level; it stays active until the guard drops.
/// A `dynamic` trace sees every operation bound while it is active, even on
/// tensors that are not its tracers.
pub fn push_trace<T: Trace + 'static>(make: impl FnOnce(usize) -> T, dynamic: bool) -> TraceGuard {
    let level = DEPTH.with(|d| d.get()) + 1;
    let trace: Rc<dyn Trace> = Rc::new(make(level));
    STACK.with(|s| {
        let mut s = s.borrow_mut();
        s.push(Frame { trace, dynamic });
        DEPTH.with(|d| d.set(s.len()));
    });
    let ceiling = CEILING.with(|c| c.replace(usize::MAX));
    TraceGuard { level, ceiling }
}

/// The trace at `level` (1 = bottom). Panics if there is none.
pub fn trace_at(level: usize) -> Rc<dyn Trace> {
    STACK.with(|s| {
        let s = s.borrow();
        match s.get(level.wrapping_sub(1)) {
            Some(frame) => frame.trace.clone(),
            None => panic!("trace_at: no trace at level {level} (depth {})", s.len()),
        }
    })
}

/// Tells the active dynamic traces that the implicit generator is drawing
/// for `op` (see `Trace::implicit_random`).
pub(crate) fn notify_implicit_random(op: &str) {
    for t in dynamic_traces() {
        t.implicit_random(op);
    }
}

/// Tells the active dynamic traces that the eager-only operation `op` is
/// being applied (see `Trace::eager_only`).
pub(crate) fn notify_eager_only(op: &str) {
    for t in dynamic_traces() {
        t.eager_only(op);
    }
}

/// The dynamic traces below the ceiling (none, without allocating, when no
/// trace is active).
fn dynamic_traces() -> Vec<Rc<dyn Trace>> {
    if DEPTH.with(|d| d.get()) == 0 {
        return Vec::new();
    }
    let limit = ceiling().saturating_sub(1);
    STACK.with(|s| {
        let s = s.borrow();
        s.iter()
            .take(limit)
            .filter(|f| f.dynamic)
            .map(|f| f.trace.clone())
            .collect()
    })
}

/// Number of traces active on this thread.
pub fn depth() -> usize {
    DEPTH.with(|d| d.get())
}

/// Applies a primitive: the eager kernel, or the owning trace's rule.
pub fn bind(prim: Prim, inputs: &[&Tensor]) -> Tensor {
    if DEPTH.with(|d| d.get()) == 0 {
        if inputs.iter().any(|t| t.is_traced()) {
            let owned = resolve_escaped(inputs);
            let refs: Vec<&Tensor> = owned.iter().collect();
            if let Some(t) = refs.iter().find(|t| t.is_traced()) {
                panic!(
                    "{}: a traced tensor ({:?}) is used outside the transformation that created it",
                    prim.name(),
                    t
                );
            }
            return crate::cpu::eval(prim, &refs);
        }
        return crate::cpu::eval(prim, inputs);
    }
    bind_below(ceiling(), prim, inputs)
}

/// The inputs with escaped tracers replaced by the values they stood for.
fn resolve_escaped(inputs: &[&Tensor]) -> Vec<Tensor> {
    inputs
        .iter()
        .map(|t| {
            let mut t = (*t).clone();
            while let Some(v) = t.tracer().and_then(|tr| tr.escaped_value()) {
                t = v;
            }
            t
        })
        .collect()
}

/// Like `bind`, but considers only traces of level below `ceiling`.
pub fn bind_below(ceiling: usize, prim: Prim, inputs: &[&Tensor]) -> Tensor {
    if inputs
        .iter()
        .any(|t| t.tracer().is_some_and(|tr| tr.escaped_value().is_some()))
    {
        let owned = resolve_escaped(inputs);
        let refs: Vec<&Tensor> = owned.iter().collect();
        return bind_below(ceiling, prim, &refs);
    }
    match owner(ceiling, || prim.name(), inputs) {
        Some((top, trace)) => {
            let _guard = CeilingGuard::set(top);
            trace.process(prim, inputs)
        }
        None => crate::cpu::eval(prim, inputs),
    }
}

/// Applies a multi-output operation: its `eval`, or the owning trace's
/// `process_multi` (found as for [`bind`]).
pub fn bind_multi(op: &std::sync::Arc<dyn MultiOp>, inputs: &[&Tensor]) -> Vec<Tensor> {
    bind_multi_below(ceiling(), op, inputs)
}

/// Like [`bind_multi`], but considers only traces of level below `ceiling`.
pub fn bind_multi_below(
    ceiling: usize,
    op: &std::sync::Arc<dyn MultiOp>,
    inputs: &[&Tensor],
) -> Vec<Tensor> {
    let owned = resolve_escaped(inputs);
    let inputs: Vec<&Tensor> = owned.iter().collect();
    match owner(ceiling, || op.name(), &inputs) {
        Some((top, trace)) => {
            let _guard = CeilingGuard::set(top);
            trace.process_multi(op, &inputs)
        }
        None => {
            if let Some(t) = inputs.iter().find(|t| t.is_traced()) {
                panic!(
                    "{}: a traced tensor ({:?}) is used outside the transformation that created it",
                    op.name(),
                    t
                );
            }
            op.eval(&inputs)
        }
    }
}

/// The trace that owns an operation on `inputs` below `ceiling`, with its
/// level: the highest level among the inputs' tracers and the dynamic
/// traces; `None` for the eager kernels.
fn owner(
    ceiling: usize,
    name: impl Fn() -> String,
    inputs: &[&Tensor],
) -> Option<(usize, Rc<dyn Trace>)> {
    let mut top = 0;
    for t in inputs {
        if let Some(tr) = t.tracer() {
            let level = tr.level();
            if level >= ceiling {
                panic!(
                    "{}: a tracer of level {level} reached a trace below it",
                    name()
                );
            }
            top = top.max(level);
        }
    }
    STACK.with(|s| {
        let s = s.borrow();
        if top > s.len() {
            panic!(
                "{}: a traced tensor is used outside the transformation that created it",
                name()
            );
        }
        let limit = s.len().min(ceiling.saturating_sub(1));
        if let Some(dyn_level) = (top..limit).rev().find(|&i| s[i].dynamic).map(|i| i + 1) {
            top = top.max(dyn_level);
        }
        (top > 0).then(|| (top, s[top - 1].trace.clone()))
    })
}
