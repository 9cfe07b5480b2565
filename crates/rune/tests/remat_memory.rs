//! What `remat` keeps alive, measured with nx's live-storage counters. In a
//! test binary of its own: the counters are process-wide, and other tests
//! running in parallel threads would move them.

use rune::prelude::*;

/// Peak bytes of live storage during `f()`, above what was live before.
fn peak_during<R>(f: impl FnOnce() -> R) -> usize {
    nx::storage::clear_cache();
    let before = nx::storage::live_bytes();
    nx::storage::reset_peak_bytes();
    let out = f();
    let peak = nx::storage::peak_bytes() - before;
    drop(out);
    peak
}

#[test]
fn remat_frees_the_recomputed_output_before_its_backward_pass() {
    let n = 1 << 20;
    let act = n * 4;
    let x = Tensor::from_vec((0..n).map(|i| (i % 97) as f32 / 97.0).collect(), &[n]);
    let peak = peak_during(|| {
        rune::grad(
            |x: &Tensor| rune::remat(|x: &Tensor| x.sin(), x).sum_all(),
            &x,
        )
    });
    // The recomputation makes sin(x) and its derivative cos(x); sin(x) is
    // dropped before the backward pass, so at most two [n] buffers live at
    // once (cos(x) and the cotangent times it, the returned gradient).
    assert!(
        peak <= 2 * act + 4096,
        "peak {} bytes is more than two activations ({act} bytes each)",
        peak
    );
}
