//! Helpers shared by rune's integration tests (`mod common;` in each).
#![allow(dead_code)] // each test file uses a subset

use rune::prelude::*;

/// An f64 tensor of `shape` from `v`.
pub fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

/// The message of the panic `f` raises (fails the test if it does not panic).
pub fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
