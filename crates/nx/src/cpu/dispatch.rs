//! Run-time CPU dispatch for the eager kernels whose speed depends on the
//! instruction set (elementwise maps, the f32 math inside them, reductions,
//! threefry, casts). This module owns the choice of level ([`CpuLevel`],
//! detected once at first use) and the only `unsafe` of the scheme: the
//! `#[target_feature]` trampolines that run a [`Kernel`] compiled for a level.
//!
//! nx is built for the target's baseline (a crate depending on it gets no
//! `target-cpu=native`), so each hot loop is written once as a [`Kernel`]
//! whose `run` is `#[inline(always)]`, and [`run`] instantiates it three times
//! on x86-64: baseline, inside a `#[target_feature]` function for x86-64-v3
//! (AVX2, FMA, F16C, BMI) and one for x86-64-v4 (AVX-512 F/BW/CD/DQ/VL), where
//! LLVM vectorizes it for that level's registers. On aarch64 NEON is part of
//! the baseline, so the baseline instantiation is the NEON one.
//!
//! Bits: Rust never contracts `a * b + c` into an FMA, so every kernel gives
//! the same bits at every level, except the f32 polynomials of `math.rs`,
//! whose `mla` fuses exactly when the level has FMA (`Kernel::run`'s `FMA`),
//! as tolk's C (built with `-march=native`) fuses when the host has it: eager
//! and jit then agree bit for bit. So x86-64-v3 and -v4 agree bit for bit
//! everywhere; the baseline differs from them only in those polynomials'
//! last bits (each within its documented error bound, with FMA and without).

use std::fmt;

use crate::DType;
use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level the eager kernels are compiled for; see
/// [`cpu_features`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CpuLevel {
    /// The target's baseline on an architecture without other levels.
    Generic,
    /// aarch64 with NEON (its baseline).
    Neon,
    /// x86-64 baseline (SSE2).
    X86_64,
    /// x86-64-v3: AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE.
    X86_64V3,
    /// x86-64-v4: x86-64-v3 plus AVX-512 F, BW, CD, DQ, VL.
    X86_64V4,
}

impl CpuLevel {
    /// The name used by [`Display`](fmt::Display) and `NX_CPU_LEVEL`.
    pub fn name(self) -> &'static str {
        match self {
            CpuLevel::Generic => "generic",
            CpuLevel::Neon => "neon",
            CpuLevel::X86_64 => "x86-64",
            CpuLevel::X86_64V3 => "x86-64-v3",
            CpuLevel::X86_64V4 => "x86-64-v4",
        }
    }

    /// The best level this machine supports (detected now, uncached).
    pub fn best() -> CpuLevel {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let v3 = has!("sse3")
                && has!("ssse3")
                && has!("sse4.1")
                && has!("sse4.2")
                && has!("popcnt")
                && has!("avx")
                && has!("avx2")
                && has!("bmi1")
                && has!("bmi2")
                && has!("f16c")
                && has!("fma")
                && has!("lzcnt")
                && has!("movbe");
            let v4 = v3
                && has!("avx512f")
                && has!("avx512bw")
                && has!("avx512cd")
                && has!("avx512dq")
                && has!("avx512vl");
            if v4 {
                CpuLevel::X86_64V4
            } else if v3 {
                CpuLevel::X86_64V3
            } else {
                CpuLevel::X86_64
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            CpuLevel::Neon
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            CpuLevel::Generic
        }
    }

    /// The levels this machine can run, baseline first.
    pub fn supported() -> Vec<CpuLevel> {
        let all: &[CpuLevel] = match CpuLevel::best() {
            CpuLevel::X86_64V4 => &[CpuLevel::X86_64, CpuLevel::X86_64V3, CpuLevel::X86_64V4],
            CpuLevel::X86_64V3 => &[CpuLevel::X86_64, CpuLevel::X86_64V3],
            l => return vec![l],
        };
        all.to_vec()
    }

    fn code(self) -> u8 {
        self as u8 + 1
    }

    fn from_code(c: u8) -> CpuLevel {
        [
            CpuLevel::Generic,
            CpuLevel::Neon,
            CpuLevel::X86_64,
            CpuLevel::X86_64V3,
            CpuLevel::X86_64V4,
        ][c as usize - 1]
    }
}

impl fmt::Display for CpuLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The chosen level's code (`CpuLevel::code`), 0 before the first use.
/// Only ever holds a level the machine supports (the safety condition of the
/// trampolines below).
static LEVEL: AtomicU8 = AtomicU8::new(0);

/// The instruction-set level the eager CPU kernels run at: chosen at the
/// first kernel call as the best this machine supports
/// ([`CpuLevel::best`]), or lower when the environment variable
/// `NX_CPU_LEVEL` names a lower level (`x86-64`, `x86-64-v3`; a level the
/// machine lacks is ignored). Prints as `x86-64-v4`, `x86-64-v3`, `x86-64`,
/// `neon` or `generic`.
///
/// Matrix products (the `gemm` crate) pick their own kernels at run time in
/// the same way. A level below the host's makes f32 exp/tanh/log/sin/cos and
/// sigmoid differ in their last bits from `tolk`'s jit kernels, which are
/// compiled for the host.
///
/// ```
/// let level = nx::cpu_features();
/// println!("eager kernels: {level}");
/// assert_eq!(level, nx::CpuLevel::best());
/// ```
pub fn cpu_features() -> CpuLevel {
    level()
}

#[inline]
pub(crate) fn level() -> CpuLevel {
    match LEVEL.load(Ordering::Relaxed) {
        0 => choose(),
        c => CpuLevel::from_code(c),
    }
}

#[cold]
fn choose() -> CpuLevel {
    let supported = CpuLevel::supported();
    let l = std::env::var("NX_CPU_LEVEL")
        .ok()
        .and_then(|v| supported.iter().copied().find(|l| l.name() == v.trim()))
        .unwrap_or(*supported.last().unwrap());
    LEVEL.store(l.code(), Ordering::Relaxed);
    l
}

/// Makes the kernels run at `level` (`None`: back to the detected best), for
/// tests that compare levels. Panics when the machine lacks `level`.
#[doc(hidden)]
pub fn force_cpu_level(level: Option<CpuLevel>) {
    let l = level.unwrap_or_else(CpuLevel::best);
    assert!(
        CpuLevel::supported().contains(&l),
        "this machine cannot run {l} kernels"
    );
    LEVEL.store(l.code(), Ordering::Relaxed);
}

/// A hot loop, compiled by [`run`] once per level. Implementations put the
/// loop in an `#[inline(always)]` function taking its slices as arguments
/// (so that LLVM knows they do not alias) and call it from an
/// `#[inline(always)]` `run`.
pub(crate) trait Kernel {
    type Output;
    /// Whether [`run`] compiles this kernel once per level (the default) or
    /// at the baseline only. Kernels on integers, bools and complex numbers
    /// say false (see [`gains_from_levels`]): each instantiation per level
    /// is LLVM work in every build, and only the float kernels measured
    /// faster at the wider levels.
    const PER_LEVEL: bool = true;
    /// The loop; `FMA` is whether the level fuses `math::mla`.
    fn run<const FMA: bool>(self) -> Self::Output;
}

/// Runs `k` compiled for the chosen level.
#[inline(always)]
pub(crate) fn run<K: Kernel>(k: K) -> K::Output {
    // A branch on a constant: the monomorphized `run` of a baseline-only
    // kernel contains no trampoline, so none is compiled.
    if !K::PER_LEVEL {
        return k.run::<false>();
    }
    match level() {
        // SAFETY: `LEVEL` only holds levels the machine supports
        // (`choose`, `force_cpu_level`), so these features exist.
        #[cfg(target_arch = "x86_64")]
        CpuLevel::X86_64V4 => unsafe { run_v4(k) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        CpuLevel::X86_64V3 => unsafe { run_v3(k) },
        _ => k.run::<false>(),
    }
}

/// Whether a kernel over these element types is worth compiling per level:
/// when one of them is a real float (f16/bf16 conversions use F16C, f32/f64
/// loops widen with AVX2/AVX-512 and the math polynomials fuse with FMA).
pub(crate) const fn gains_from_levels(dtypes: &[DType]) -> bool {
    let mut i = 0;
    while i < dtypes.len() {
        if dtypes[i].is_float() {
            return true;
        }
        i += 1;
    }
    false
}

/// # Safety
/// The CPU must support x86-64-v3 (`CpuLevel::best()` at least `X86_64V3`).
#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,bmi1,bmi2,f16c,fma,lzcnt,movbe"
)]
unsafe fn run_v3<K: Kernel>(k: K) -> K::Output {
    k.run::<true>()
}

/// # Safety
/// The CPU must support x86-64-v4 (`CpuLevel::best()` is `X86_64V4`).
#[cfg(target_arch = "x86_64")]
#[target_feature(
    enable = "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,bmi1,bmi2,f16c,fma,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl"
)]
unsafe fn run_v4<K: Kernel>(k: K) -> K::Output {
    k.run::<true>()
}
