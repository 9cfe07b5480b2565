//! What the traces rune pushes by tag (forward mode, reverse mode, vmap's
//! batching) share: a trace's [`Tag`] (its identity, and whether it is
//! still running), [`enter`] and the [`Scope`] that ends it, and
//! [`TaggedTracer`], the one `nx::Tracer` type of those traces (the aval,
//! level and tag every tracer holds, around the trace's own per-value
//! state), with the downcast that finds a trace's own tracers
//! ([`TaggedTracer::of`]); and the three traces' rules for multi-output
//! operations ([`multi_op_rule`]), which the module defining such an
//! operation registers (JAX's `primitive_jvps`/`primitive_batchers` tables),
//! so that no trace imports the operations it transforms.

use nx::trace::{Trace, Tracer};
use nx::{Aval, Tensor};
use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Identifies one trace; tracers point to it, and it says whether the
/// trace is still running (a differentiation tracer escaping it becomes its
/// value).
pub(crate) struct Tag {
    alive: AtomicBool,
}

impl Tag {
    pub(crate) fn new() -> Arc<Tag> {
        Arc::new(Tag {
            alive: AtomicBool::new(true),
        })
    }
    pub(crate) fn end(&self) {
        self.alive.store(false, Ordering::Release);
    }
    pub(crate) fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// An active trace: popped, and its tracers marked escaped, when dropped
/// (also when the traced function panics).
pub(crate) struct Scope {
    pub tag: Arc<Tag>,
    pub _guard: nx::trace::TraceGuard,
}

impl Drop for Scope {
    fn drop(&mut self) {
        self.tag.end();
    }
}

/// Pushes a new trace built by `make(level, tag)` with a fresh tag; returns
/// a handle on it (traces are cheap handles) and the scope that ends it.
pub(crate) fn enter<T: Trace + Clone + 'static>(
    make: impl FnOnce(usize, Arc<Tag>) -> T,
) -> (T, Scope) {
    let tag = Tag::new();
    let mut handle = None;
    let guard = nx::trace::push_trace(
        |level| {
            let trace = make(level, tag.clone());
            handle = Some(trace.clone());
            trace
        },
        false,
    );
    let trace = handle.expect("push_trace builds the trace");
    (trace, Scope { tag, _guard: guard })
}

/// A tagged trace's per-value state (a primal and its tangent, a value and
/// its tape variable, a batched value).
pub(crate) trait TracerState: Send + Sync + 'static {
    /// The value the tracer stands for, if it has one: what `to_vec`/`item`
    /// read, and what later operations use once its trace has returned (a
    /// differentiation tracer escaping through an auxiliary output). `None`
    /// (a batched value) makes both an error.
    fn value(&self) -> Option<&Tensor>;
    /// Why the value cannot be read (`aval`: what the function sees), for
    /// a state whose `value` is `None`.
    fn unreadable(&self, aval: &Aval) -> ! {
        panic!(
            "a traced value of shape {:?} cannot be read here",
            aval.shape
        )
    }
}

/// The tracer of a tagged trace: its state, what the function above sees
/// (`aval`), and its trace's level and tag.
pub(crate) struct TaggedTracer<S> {
    pub state: S,
    aval: Aval,
    level: usize,
    tag: Arc<Tag>,
}

impl<S: TracerState> TaggedTracer<S> {
    /// A tensor traced by the trace at `level` tagged `tag`.
    pub(crate) fn wrap(state: S, aval: Aval, level: usize, tag: &Arc<Tag>) -> Tensor {
        Tensor::from_tracer(TaggedTracer {
            state,
            aval,
            level,
            tag: tag.clone(),
        })
    }

    /// `t`'s state if `t` is a tracer of the trace tagged `tag` (else `t`
    /// is a constant to that trace).
    pub(crate) fn of<'a>(t: &'a Tensor, tag: &Arc<Tag>) -> Option<&'a S> {
        t.tracer()
            .and_then(|tr| tr.as_any().downcast_ref::<TaggedTracer<S>>())
            .filter(|tr| Arc::ptr_eq(&tr.tag, tag))
            .map(|tr| &tr.state)
    }

    /// Whether `t` is a tracer of some trace with this kind of state.
    pub(crate) fn is(t: &Tensor) -> bool {
        t.tracer()
            .is_some_and(|tr| tr.as_any().is::<TaggedTracer<S>>())
    }
}

impl<S: TracerState> Tracer for TaggedTracer<S> {
    fn aval(&self) -> &Aval {
        &self.aval
    }
    fn level(&self) -> usize {
        self.level
    }
    fn read(&self) -> Tensor {
        match self.state.value() {
            Some(v) => v.clone(),
            None => self.state.unreadable(&self.aval),
        }
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn escaped_value(&self) -> Option<Tensor> {
        if self.tag.is_alive() {
            None
        } else {
            self.state.value().cloned()
        }
    }
}

/// A transformation's rule for a multi-output operation: the trace (each
/// rule downcasts it to its own trace type), the operation, the inputs.
pub(crate) type MultiOpRule = fn(&dyn Any, &Arc<dyn nx::MultiOp>, &[&Tensor]) -> Vec<Tensor>;

/// The transformations whose traces apply [`MultiOpRule`]s.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Transformation {
    Jvp = 0,
    Vjp = 1,
    Batch = 2,
}

/// The rules of rune's one multi-output operation, the staged loop
/// (`loops.rs`), registered before the first loop is bound.
static MULTI_OP_RULES: OnceLock<[MultiOpRule; 3]> = OnceLock::new();

/// Registers the rules for multi-output operations, indexed by
/// [`Transformation`]; later calls keep the first registration.
pub(crate) fn register_multi_op_rules(rules: [MultiOpRule; 3]) {
    MULTI_OP_RULES.get_or_init(|| rules);
}

/// `t`'s rule for `op`, applied by `trace`.
pub(crate) fn multi_op_rule(
    t: Transformation,
    trace: &dyn Any,
    op: &Arc<dyn nx::MultiOp>,
    inputs: &[&Tensor],
) -> Vec<Tensor> {
    let rules = MULTI_OP_RULES.get().unwrap_or_else(|| {
        panic!(
            "{}: no {t:?} rule is registered for this operation (internal error)",
            op.name()
        )
    });
    rules[t as usize](trace, op, inputs)
}
