//! Skipping a test whose resource is missing, honestly: it says SKIPPED
//! on stderr and passes, unless the resource is one `RUNE_TEST_REQUIRE`
//! names (space- or comma-separated: `nvrtc`, `gcc`, `examples`,
//! `fashion-mnist`), where it fails. `.ci/run` names what it installs, so
//! a skip there is a failure rather than an `ok`.

/// Skips (returns) or, when `RUNE_TEST_REQUIRE` names `resource`, panics.
#[track_caller]
pub fn skip(resource: &str, why: &str) {
    let required = std::env::var("RUNE_TEST_REQUIRE").unwrap_or_default();
    if required.split([' ', ',']).any(|r| r == resource) {
        panic!("{resource} is required (RUNE_TEST_REQUIRE) but missing: {why}");
    }
    let line = "=".repeat(78);
    eprintln!("\n{line}\nSKIPPED ({resource} missing): {why}\n{line}\n");
}
