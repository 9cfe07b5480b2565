//! Gradient control: `detach` (a primitive with a zero derivative) and
//! `no_grad` (the differentiation traces active when it is entered stop
//! recording for its extent: their rules forward values only).

use nx::{bind, Prim, Tensor};
use std::cell::Cell;

thread_local! {
    /// Differentiation traces at or below this level are inactive.
    static INACTIVE_UP_TO: Cell<usize> = const { Cell::new(0) };
}

/// True when the differentiation trace at `level` is inside `no_grad`.
pub(crate) fn is_inactive(level: usize) -> bool {
    level <= INACTIVE_UP_TO.with(|c| c.get())
}

/// A copy of `t` through which gradients do not flow: a constant to every
/// enclosing `grad`, `vjp` and `jvp`. Use it to hold a value fixed inside a
/// differentiated function.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(3.0f64);
/// // d/dx [x * detach(x)] = detach(x) = 3
/// let g = rune::grad(|x: &Tensor| x * rune::detach(x), &x);
/// assert_eq!(g.item::<f64>(), 3.0);
/// ```
pub fn detach(t: &Tensor) -> Tensor {
    bind(Prim::StopGradient, &[t])
}

/// Runs `f` with gradient tracking disabled: tensors it produces are
/// constants of the surrounding differentiation (`grad`, `vjp`, `jvp`).
/// Transformations started inside `f` work as usual.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(2.0f64);
/// // The no_grad part (x * x) is a constant: d/dx [x + const] = 1.
/// let g = rune::grad(|x: &Tensor| x + rune::no_grad(|| x * x), &x);
/// assert_eq!(g.item::<f64>(), 1.0);
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            INACTIVE_UP_TO.with(|c| c.set(self.0));
        }
    }
    let depth = nx::trace::depth();
    let _restore = Restore(INACTIVE_UP_TO.with(|c| c.replace(c.get().max(depth))));
    f()
}
