//! The CUDA dialect ([`Cuda`]): CUDA C++ for NVRTC, the second dialect of
//! the same lowering (tinygrad's `CStyleLanguage` model). The per-element
//! expressions are the C dialect's ([`super::c`]): the same helpers, the
//! same algorithms as nx's eager kernels, compiled as device functions
//! (NVRTC's `-default-device`, with [`PRELUDE`] standing in for the C
//! headers NVRTC lacks and `--fmad=false` so that nothing is fused the CPU
//! does not fuse). f16 and bf16 stay raw `uint16_t` bits converted by the C
//! prelude's software conversions (the wheels' NVRTC ships no
//! `cuda_fp16.h`).
//!
//! The frame differs from C's (the loops scheduled for
//! [`crate::lower::Target::GPU`]):
//! - a kernel is `extern "C" __global__ void name(void *b0, ..., int64_t lo,
//!   int64_t hi)`: the buffers as parameters (no pointer table to upload),
//!   no return value (no guarded fast forms: [`Dialect::unary_vectorized`](super::Dialect::unary_vectorized) has
//!   none);
//! - the kept dims are flattened into one grid-stride loop over the output
//!   points `lo..hi` (`lo + blockIdx.x * blockDim.x + threadIdx.x`, stepping
//!   by the grid's size), each point's indices recovered by division: an
//!   elementwise or movement kernel is one thread per output point;
//! - a reduction is one thread per output, folding its reduced loops in the
//!   CPU's fixed order ([`crate::lower::ACCS`] accumulators, merged
//!   pairwise): the same result run to run, and the same bits as the CPU's
//!   kernel; no column tiles, no streaming stores.
//!
//! - a gather is an indexed load like the C dialect's; a scatter kernel's
//!   threads part its outer loop (one per element of the updates' last
//!   dim, each setting and adding into its own elements in eager's order),
//!   or, unsplit, one thread runs it ([`super::Dialect::single_thread`]).
//!
//! Library steps with a rule of their own (windows `simplify` leaves, the
//! first maxima of windows, arg-reductions, running sums and products,
//! gathers and scatter-adds by computed indices) are rendered by
//! [`super::cuda_library`]. What is not rendered yet: the other library
//! steps (convolutions, sorts, top-k, threefry) — [`crate::cuda::render`] refuses a program
//! holding one, naming its primitives and the device.
//!
//! Not bit-identical yet: the functions the C dialect takes from the
//! system libm (tan, exp2, expm1, the f64 transcendentals, powf, fmod,
//! atan2, ...) are CUDA's libdevice here, which may round differently from
//! glibc in the last place; the ported ones (f32 exp, tanh, log, log1p,
//! sin, cos, sigmoid, erf, the half conversions, every integer rule and
//! cast) are the CPU's code.

use super::c;
use nx::{BinaryOp, CmpOp, DType, UnaryOp};

/// The CUDA dialect. `fma`: whether nx's f32 polynomials fuse their
/// multiply-adds on this host (its CPU level has FMA), so that the device
/// computes the same bits as the CPU device.
pub struct Cuda {
    /// Fuse where nx's kernels fuse (`tk_mla_f32`).
    pub fma: bool,
}

impl Cuda {
    /// The dialect matching this host's nx kernels.
    pub fn for_host() -> Cuda {
        use nx::CpuLevel;
        let fma = matches!(
            nx::cpu_features(),
            CpuLevel::X86_64V3 | CpuLevel::X86_64V4 | CpuLevel::Neon
        );
        Cuda { fma }
    }
}

/// CUDA's stand-ins for the C headers and builtins the C prelude uses
/// (emitted before it).
pub const PRELUDE: &str = include_str!("cuda_prelude.h");

/// Threads per block the kernels are launched with (and declared for).
pub const BLOCK: usize = 256;

/// NVRTC's options for the kernels: every function a device function (the
/// C prelude's helpers are unannotated), no contraction of `a * b + c`
/// (the CPU's kernels fuse only where nx does), IEEE division and square
/// root, no flush to zero (NVRTC's defaults, stated).
pub const NVRTC_OPTIONS: &[&str] = &[
    "-default-device",
    "--fmad=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--ftz=false",
    "-std=c++17",
];

impl super::Dialect for Cuda {
    fn prelude(&self) -> String {
        let fma = if self.fma { "#define __FMA__ 1\n" } else { "" };
        format!("{PRELUDE}{fma}{}", c::PRELUDE)
    }
    fn ty(&self, dtype: DType) -> &'static str {
        c::c_type(dtype)
    }
    fn unary(&self, op: UnaryOp, dtype: DType, x: &str) -> String {
        c::unary(op, dtype, x)
    }
    fn unary_vectorized(&self, _: UnaryOp, _: DType, _: &str) -> Option<(String, String)> {
        None
    }
    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> String {
        c::binary(op, dtype, a, b)
    }
    fn compare(&self, op: CmpOp, dtype: DType, a: &str, b: &str) -> String {
        c::compare(op, dtype, a, b)
    }
    fn select(&self, dtype: DType, cond: &str, a: &str, b: &str) -> String {
        c::select(dtype, cond, a, b)
    }
    fn cast(&self, from: DType, to: DType, x: &str) -> String {
        c::cast(from, to, x)
    }
    fn literal(&self, dtype: DType, v: f64) -> String {
        c::literal(dtype, v)
    }
    fn kernel_signature(&self, name: &str, _small: bool, buffers: usize) -> String {
        let mut params = String::new();
        for k in 0..buffers {
            params.push_str(&format!("void *b{k}, "));
        }
        format!(
            "extern \"C\" __global__ void __launch_bounds__({BLOCK}) \
             {name}({params}int64_t lo, int64_t hi)"
        )
    }
    fn buffer(&self, k: usize) -> String {
        format!("b{k}")
    }
    fn ret(&self, _guard_failed: &str) -> String {
        "return;".into()
    }
    fn loop_header(&self, var: &str, from: &str, to: &str, outer: bool) -> String {
        if outer {
            format!(
                "for (int64_t {var} = {from} + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; \
                 {var} < {to}; {var} += (int64_t)gridDim.x * blockDim.x) {{"
            )
        } else {
            format!("for (int64_t {var} = {from}; {var} < {to}; {var}++) {{")
        }
    }
    fn single_thread(&self) -> Option<&'static str> {
        Some("if (blockIdx.x != 0 || threadIdx.x != 0) return;")
    }
}
