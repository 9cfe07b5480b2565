//! The panic message of a closure, for tests of "panics if" messages.
//! Included with `#[path = "common/panics.rs"] mod panics;` by test files
//! that do not need the rest of `common` (the op table is slow to build),
//! and re-exported by rune's `tests/common`.

/// The message of the panic `f` raises (fails the test if it does not panic).
pub fn panic_message(f: impl FnOnce()) -> String {
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}
