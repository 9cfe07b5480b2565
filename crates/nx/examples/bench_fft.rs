//! FFT timings (issue 13), eager, one JSON line per row (`bench/fft.py`
//! runs this beside numpy's `np.fft` and jax.jit):
//!
//! - F1 `fft` of 2^20 complex64 (one signal, `FftNorm::Backward`);
//! - F2 `rfft` of 2^20 f32;
//! - F1k / F2k the `Prim::Fft` kernel alone (the public functions add
//!   nothing for these inputs but argument checks).
//!
//! `cargo run --release -p nx --example bench_fft [-- --only F1]`

use nx::fft::{self, FftNorm};
use nx::{DType, FftKind, Prim, Tensor};

// The rune benches' timing (plain std code), shared rather than copied.
#[path = "../../rune/examples/common/timing.rs"]
mod timing;
use timing::{bench, emit, wanted};

fn main() {
    nx::seed(0);
    let n = 1 << 20;
    let re = Tensor::randn(&[n], DType::F32);
    let z = Tensor::complex(&re, &Tensor::randn(&[n], DType::F32));
    let norm = FftNorm::Backward;
    if wanted("F1") {
        let r = bench(|| fft::fft(&z, None, -1, norm), 3, 30);
        emit("F1", "fft 2^20 c64", "ms", r);
    }
    if wanted("F1k") {
        let p = Prim::Fft {
            kind: FftKind::Fft,
            lengths: vec![n],
        };
        let r = bench(|| nx::bind(p.clone(), &[&z]), 3, 30);
        emit("F1k", "Prim::Fft alone", "ms", r);
    }
    if wanted("F2") {
        let r = bench(|| fft::rfft(&re, None, -1, norm), 3, 30);
        emit("F2", "rfft 2^20 f32", "ms", r);
    }
    if wanted("F2k") {
        let p = Prim::Fft {
            kind: FftKind::Rfft,
            lengths: vec![n],
        };
        let r = bench(|| nx::bind(p.clone(), &[&re]), 3, 30);
        emit("F2k", "Prim::Fft (rfft) alone", "ms", r);
    }
}
