//! What the traces rune pushes by tag (forward mode, reverse mode, vmap's
//! batching) share: a trace's [`Tag`] (its identity, and whether it is
//! still running), [`enter`] and the [`Scope`] that ends it, and
//! [`TaggedTracer`], the one `nx::Tracer` type of those traces (the aval,
//! level and tag every tracer holds, around the trace's own per-value
//! state), with the downcast that finds a trace's own tracers
//! ([`TaggedTracer::of`]); and the three traces' rules for multi-output
//! operations ([`multi_op_rule`], by the operation's type), which the
//! module defining such an operation registers (JAX's `primitive_jvps`/`primitive_batchers` tables),
//! so that no trace imports the operations it transforms.

use nx::trace::{Trace, Tracer};
use nx::{Aval, Tensor};
use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

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

/// The rules for multi-output operations, by the operation's type: a
/// second multi-output type never gets another's rules. rune's one such
/// operation is the staged loop (`loops.rs`), registered before the first
/// loop is bound.
static MULTI_OP_RULES: RwLock<Vec<(TypeId, [MultiOpRule; 3])>> = RwLock::new(Vec::new());

/// Registers the rules for the multi-output operations of type `op`
/// (`nx::MultiOp::as_any`'s type), indexed by [`Transformation`]; later
/// calls for the same type keep the first registration.
pub(crate) fn register_multi_op_rules(op: TypeId, rules: [MultiOpRule; 3]) {
    let known = |table: &[(TypeId, [MultiOpRule; 3])]| table.iter().any(|(t, _)| *t == op);
    if known(&MULTI_OP_RULES.read().unwrap_or_else(|e| e.into_inner())) {
        return;
    }
    let mut table = MULTI_OP_RULES.write().unwrap_or_else(|e| e.into_inner());
    if !known(&table) {
        table.push((op, rules));
    }
}

/// `t`'s rule for `op` (the one registered for its type), applied by
/// `trace`.
pub(crate) fn multi_op_rule(
    t: Transformation,
    trace: &dyn Any,
    op: &Arc<dyn nx::MultiOp>,
    inputs: &[&Tensor],
) -> Vec<Tensor> {
    let ty = op.as_any().type_id();
    let rule = MULTI_OP_RULES
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(k, _)| *k == ty)
        .map(|(_, rules)| rules[t as usize]);
    let rule = rule.unwrap_or_else(|| {
        panic!(
            "{}: no {t:?} rule is registered for this operation (internal error)",
            op.name()
        )
    });
    rule(trace, op, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nx::MultiOp;

    /// Two multi-output operations of different types: `Twice` returns
    /// its input twice, `Thrice` three times.
    struct Twice;
    struct Thrice;

    impl MultiOp for Twice {
        fn name(&self) -> String {
            "twice".into()
        }
        fn eval(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
            vec![inputs[0].clone(), inputs[0].clone()]
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    impl MultiOp for Thrice {
        fn name(&self) -> String {
            "thrice".into()
        }
        fn eval(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
            vec![inputs[0].clone(); 3]
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
        fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
            self
        }
    }

    /// A rule that says which operation and transformation it belongs to:
    /// `10 * op + transformation` as a scalar, once per output of `eval`.
    fn tagged<const OP: u32, const T: u32>(
        _trace: &dyn Any,
        op: &Arc<dyn nx::MultiOp>,
        inputs: &[&Tensor],
    ) -> Vec<Tensor> {
        op.eval(inputs)
            .iter()
            .map(|_| Tensor::from_slice(&[(10 * OP + T) as f32], &[1]))
            .collect()
    }

    fn apply(t: Transformation, op: &Arc<dyn nx::MultiOp>) -> Vec<f32> {
        let x = Tensor::from_slice(&[0.0f32], &[1]);
        multi_op_rule(t, &(), op, &[&x])
            .iter()
            .map(|y| y.to_vec::<f32>()[0])
            .collect()
    }

    #[test]
    fn multi_op_rules_are_keyed_by_the_operations_type() {
        let twice: Arc<dyn nx::MultiOp> = Arc::new(Twice);
        let thrice: Arc<dyn nx::MultiOp> = Arc::new(Thrice);
        register_multi_op_rules(
            TypeId::of::<Twice>(),
            [tagged::<1, 0>, tagged::<1, 1>, tagged::<1, 2>],
        );
        // `Thrice` has no rules yet: it must not get `Twice`'s.
        let missing = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            apply(Transformation::Jvp, &thrice)
        }));
        let message = missing.expect_err("thrice has no rule");
        let message = message
            .downcast_ref::<String>()
            .expect("a formatted panic message");
        assert_eq!(
            message,
            "thrice: no Jvp rule is registered for this operation (internal error)"
        );
        register_multi_op_rules(
            TypeId::of::<Thrice>(),
            [tagged::<2, 0>, tagged::<2, 1>, tagged::<2, 2>],
        );
        assert_eq!(apply(Transformation::Jvp, &twice), [10.0, 10.0]);
        assert_eq!(apply(Transformation::Vjp, &twice), [11.0, 11.0]);
        assert_eq!(apply(Transformation::Batch, &twice), [12.0, 12.0]);
        assert_eq!(apply(Transformation::Jvp, &thrice), [20.0, 20.0, 20.0]);
        assert_eq!(apply(Transformation::Vjp, &thrice), [21.0, 21.0, 21.0]);
        assert_eq!(apply(Transformation::Batch, &thrice), [22.0, 22.0, 22.0]);
        // A second registration for a type keeps the first.
        register_multi_op_rules(
            TypeId::of::<Twice>(),
            [tagged::<3, 0>, tagged::<3, 1>, tagged::<3, 2>],
        );
        assert_eq!(apply(Transformation::Vjp, &twice), [11.0, 11.0]);
    }
}
