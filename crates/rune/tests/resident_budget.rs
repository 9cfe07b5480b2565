//! `RUNE_JIT_RESIDENT_BUDGET` (issue 11): past the budget, device buffers
//! no longer referenced are reclaimed before a call allocates more, and
//! `RUNE_JIT_DEBUG=1` says so; under the default budget nothing is
//! reclaimed; a budget that is not a number of bytes is refused by name.
//!
//! The budget is read from the environment, so each case runs this test
//! binary again as a child process (`current_exe`, filtered to `child`).

use rune::prelude::*;
use std::process::Command;

const CHILD_ENV: &str = "RUNE_RESIDENT_BUDGET_TEST_CHILD";
const N: usize = 1 << 20; // 4 MiB of f32, 2 MiB per device

/// The child's body (a no-op unless run as a child): a 4 MiB output is
/// dropped unread (its device buffers are freed into the allocator's
/// cache), then the next call allocates as much again.
#[test]
fn child() {
    if std::env::var(CHILD_ENV).is_err() {
        return;
    }
    let f = rune::pmap(|x: &Tensor| x * 2.0, &["CPU:1", "CPU:2"]);
    let x = Tensor::arange(0.0, N as f64, 1.0, DType::F32);
    let first = f.call(&x);
    assert_eq!(rune::jit_stats().resident_bytes, (N * 4) as u64);
    drop(first);
    assert_eq!(rune::jit_stats().resident_bytes, 0);
    let second = f.call(&x);
    let got = second.to_vec::<f32>();
    assert!(got.iter().enumerate().all(|(i, &v)| v == 2.0 * i as f32));
    println!("CHILD-OK");
}

fn run_child(budget: Option<&str>) -> (bool, String, String) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("RUNE_JIT_DEBUG", "1")
        .env_remove("RUNE_JIT_RESIDENT_BUDGET");
    if let Some(b) = budget {
        c.env("RUNE_JIT_RESIDENT_BUDGET", b);
    }
    let out = c.output().expect("run the child");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn past_the_budget_freed_device_buffers_are_reclaimed_before_a_call() {
    let (ok, stdout, stderr) = run_child(Some("1048576"));
    assert!(ok && stdout.contains("CHILD-OK"), "{stdout}\n{stderr}");
    let reclaims: Vec<&str> = stderr.lines().filter(|l| l.contains("reclaimed")).collect();
    assert!(
        !reclaims.is_empty(),
        "a 1 MiB budget with 4 MiB freed must reclaim; log:\n{stderr}"
    );
    assert!(
        reclaims
            .iter()
            .all(|l| l.contains("RUNE_JIT_RESIDENT_BUDGET")),
        "{reclaims:?}"
    );
}

#[test]
fn under_the_default_budget_nothing_is_reclaimed() {
    let (ok, stdout, stderr) = run_child(None);
    assert!(ok && stdout.contains("CHILD-OK"), "{stdout}\n{stderr}");
    assert!(
        !stderr.contains("reclaimed"),
        "the default budget is a few GiB; log:\n{stderr}"
    );
    // Both calls were logged, so the check above had something to read.
    assert_eq!(
        stderr.lines().filter(|l| l.contains("transfers")).count(),
        2,
        "{stderr}"
    );
}

#[test]
fn a_budget_that_is_not_a_number_of_bytes_is_refused_by_name() {
    let (ok, _, stderr) = run_child(Some("lots"));
    assert!(!ok, "the child must fail");
    assert!(
        stderr.contains("RUNE_JIT_RESIDENT_BUDGET must be a number of bytes")
            && stderr.contains("\"lots\""),
        "{stderr}"
    );
}
