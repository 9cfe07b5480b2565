//! Helpers shared by rune's integration tests (`mod common;` in each).
#![allow(dead_code)] // each test file uses a subset

use rune::prelude::*;

/// An f64 tensor of `shape` from `v`.
pub fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

#[path = "../../../nx/tests/common/panics.rs"]
mod panics;
pub use panics::panic_message;

/// Checks that jit refuses `f` on `p` at trace time: `try_call` returns a
/// `JitError` naming `op` and saying it runs eagerly, `call` panics with
/// the same message, and no trace is left on the stack.
#[track_caller]
pub fn check_refused<P: Ptree, Q: Ptree>(f: &rune::Jit<impl Fn(&P) -> Q, P, Q>, p: &P, op: &str) {
    let e: rune::JitError = match f.try_call(p) {
        Ok(_) => panic!("{op}: expected a JitError"),
        Err(e) => e,
    };
    let m = e.message().to_string();
    assert!(m.contains(op), "message lacks {op:?}: {m}");
    assert!(m.contains("runs eagerly outside jit"), "{m}");
    assert_eq!(
        panic_message(|| drop(f.call(p))),
        m,
        "call panics with the message"
    );
    assert_eq!(rune::nx::trace::depth(), 0, "a trace was left on the stack");
}
