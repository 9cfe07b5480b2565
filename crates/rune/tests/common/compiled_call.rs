//! The checked call of a jitted batch of programs, shared by `jit_fuzz.rs`
//! and `jit_op_table.rs` (`#[path]`-included by each).

use rune::prelude::*;

/// `jf` on `args`, run by its compiled kernels: the first call, which may
/// run eagerly while the batch's C compiles (`tolk::Options::quick_first`),
/// runs on copies of the arguments (any writebacks land there), and the
/// second is the one returned. A panic or a `JitError` is an `Err` saying
/// which, with its message.
pub fn compiled_call<Q: Ptree, F: Fn(&Vec<Tensor>) -> Q>(
    jf: &rune::Jit<F, Vec<Tensor>, Q>,
    args: &Vec<Tensor>,
) -> Result<Q, String> {
    let copies: Vec<Tensor> = args.iter().map(|t| t.copy()).collect();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        jf.try_call(&copies)?;
        jf.try_call(args)
    }))
    .map_err(|p| format!("panicked: {}", panic_text(p)))?
    .map_err(|e| format!("JitError: {}", e.message()))
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(non-string panic)".into())
}
