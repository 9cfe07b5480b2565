//! Control flow: `scan`, `cond`, `while_loop`. Loops run step by step on
//! the host (so every transformation sees every step); predicates are read,
//! which concretizes them: under `vmap`, a predicate that depends on the
//! mapped inputs cannot be read (its lanes could disagree).

use crate::batch::BatchTracer;
use nx::{DType, Ptree, Tensor};

/// Folds `f` over slices of `xs` along axis 0: `f(&carry, &x_i)` returns the
/// next carry and a per-step output. Returns the final carry and the
/// outputs stacked along a new axis 0 (every leaf of `Y`; `Y = ()` gives
/// `()`). Every leaf of `xs` is sliced; their lengths must agree.
/// Differentiating traces every step. Under `jit`, `f` is traced once and
/// the compiled program runs the loop (see [`scan_with`]).
///
/// Panics if a leaf of `xs` is a scalar, or `xs` is empty along axis 0.
///
/// ```
/// use rune::prelude::*;
/// let xs = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
/// let (total, running) = rune::scan(|c: &Tensor, x: &Tensor| (c + x, c + x), &Tensor::scalar(0.0f32), &xs);
/// assert_eq!(total.item::<f32>(), 6.0);
/// assert_eq!(running.to_vec::<f32>(), vec![1.0, 3.0, 6.0]);
/// ```
pub fn scan<C: Ptree, X: Ptree, Y: Ptree>(
    f: impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
) -> (C, Y) {
    scan_with(f, init, xs, ScanOpts::default())
}

/// How [`scan_with`] stages its loop under `jit`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanOpts {
    /// Body copies per iteration of the compiled loop (JAX's `unroll`): 1
    /// runs one step per iteration; `k` runs `k` (the last `len % k` steps
    /// after the loop); a value at least the length unrolls the whole loop
    /// into straight-line code. Eager scans ignore it.
    pub unroll: usize,
}

impl Default for ScanOpts {
    fn default() -> ScanOpts {
        ScanOpts { unroll: 1 }
    }
}

/// [`scan`] with options. Under `jit`, `f` is traced once into a loop of
/// the compiled program (its carry must keep its shapes and dtypes, or the
/// call raises `JitError`); `grad` of it runs a reverse loop, `jvp` carries
/// tangents through the carry, `vmap` batches the body. Outside `jit`, each
/// step runs (and is differentiated or batched) as it comes.
///
/// Panics as [`scan`]; also if `opts.unroll` is 0.
///
/// ```
/// use rune::prelude::*;
/// let xs = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[5]);
/// let sum = jit(|xs: &Tensor| {
///     let step = |c: &Tensor, x: &Tensor| (c + x, ());
///     rune::scan_with(step, &Tensor::scalar(0.0f32), xs, ScanOpts { unroll: 2 }).0
/// });
/// assert_eq!(sum.call(&xs).item::<f32>(), 15.0);
/// ```
pub fn scan_with<C: Ptree, X: Ptree, Y: Ptree>(
    f: impl Fn(&C, &X) -> (C, Y),
    init: &C,
    xs: &X,
    opts: ScanOpts,
) -> (C, Y) {
    if opts.unroll == 0 {
        panic!("scan_with: unroll must be at least 1, got 0");
    }
    let leaves = xs.leaves();
    if leaves.is_empty() {
        panic!("scan: xs has no tensor leaves to slice along axis 0");
    }
    let mut len = None;
    for (i, leaf) in leaves.iter().enumerate() {
        if leaf.ndim() == 0 {
            panic!("scan: xs leaf {i} is a scalar (shape []); scan slices axis 0");
        }
        let n = leaf.shape()[0];
        match len {
            None => len = Some(n),
            Some(m) if m != n => panic!(
                "scan: the leaves of xs disagree on their length along axis 0: {m} and {n} (leaf {i})"
            ),
            _ => {}
        }
    }
    let len = len.unwrap_or(0);
    if len == 0 {
        panic!("scan: xs is empty along axis 0 (length 0); there is no step to run");
    }
    if opts.unroll < len && crate::stage::staging_active() {
        return crate::loops::staged_scan(&f, init, xs, len, opts.unroll);
    }
    crate::loops::traced_scan(&f, init, xs, len)
}

/// Reads a scalar boolean predicate, refusing one that differs across the
/// lanes of an enclosing `vmap`.
fn read_predicate(func: &str, pred: &Tensor) -> bool {
    if pred.dtype() != DType::Bool || pred.numel() != 1 {
        panic!(
            "{func}: the predicate must be a scalar bool tensor, got {:?} {}",
            pred.shape(),
            pred.dtype()
        );
    }
    if BatchTracer::is(pred) {
        panic!(
            "{func}: the predicate depends on the mapped inputs of vmap, so its lanes could \
             disagree; compute both branches and select with where_ instead"
        );
    }
    pred.item::<bool>()
}

/// Runs `then_` if the scalar `Bool` predicate holds, else `else_`. Reading
/// the predicate concretizes it: inside `vmap`, a predicate that depends on
/// the mapped inputs panics.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::scalar(3.0f32);
/// let y = rune::cond(&x.greater(&x.scalar_like(0.0)), || x.sqrt(), || x.neg());
/// assert_eq!(y.item::<f32>(), 3.0f32.sqrt());
/// ```
pub fn cond<T>(pred: &Tensor, then_: impl FnOnce() -> T, else_: impl FnOnce() -> T) -> T {
    if read_predicate("cond", pred) {
        then_()
    } else {
        else_()
    }
}

/// Iterates `body` on the carry while `cond(&carry)` (a scalar `Bool`
/// tensor) holds. Reading the predicate concretizes it, as in [`cond`].
/// Differentiating traces every iteration taken.
///
/// ```
/// use rune::prelude::*;
/// let x = Tensor::from_slice(&[1.0f32, 0.5], &[2]);
/// let y = rune::while_loop(|c: &Tensor| c.sum_all().less(&Tensor::scalar(10.0f32)), |c: &Tensor| c * 2.0, &x);
/// assert_eq!(y.to_vec::<f32>(), vec![8.0, 4.0]);
/// ```
pub fn while_loop<C: Ptree>(cond: impl Fn(&C) -> Tensor, body: impl Fn(&C) -> C, init: &C) -> C {
    let mut carry = init.map_leaves(&mut |t| t.clone());
    while read_predicate("while_loop", &cond(&carry)) {
        carry = body(&carry);
    }
    carry
}
