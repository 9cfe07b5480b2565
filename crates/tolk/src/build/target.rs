//! The CPUs an exported program's kernels are built for.
//!
//! jit builds for the host (`-march=native`): its code runs where it was
//! built. An export is shipped, so its kernels are built for a named
//! instruction-set level ([`CpuTarget`]) that the machines it is meant
//! for all have, and the file records which CPU features that level's
//! code may use; the loader refuses a level the host lacks, by name.
//!
//! The generated C is the same for every level (it depends on the host
//! only through the last-level cache's size, a threshold for streaming
//! stores): only the compiler's `-march` differs. Levels with FMA
//! (x86-64-v3 and up, aarch64) give the same bits as jit on such a host;
//! x86-64-v2 lacks FMA, so its f32 `exp`/`log`/`tanh`/sigmoid polynomials
//! differ from them in their last bits, as nx's eager kernels do at their
//! baseline level (`nx::CpuLevel`).

use std::fmt;
use std::str::FromStr;

/// An instruction-set level an exported program's kernels are built for.
///
/// ```
/// use tolk::export::CpuTarget;
/// let t: CpuTarget = "x86-64-v3".parse().unwrap();
/// assert_eq!(t, CpuTarget::X86_64V3);
/// assert_eq!(t.to_string(), "x86-64-v3");
/// assert!(t.features().contains(&"avx2".to_string()));
/// assert!("pentium".parse::<CpuTarget>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuTarget {
    /// x86-64-v2: SSE4.2, SSSE3, POPCNT, CMPXCHG16B (every x86-64 server
    /// since about 2009). No FMA.
    X86_64V2,
    /// x86-64-v3: v2 plus AVX, AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE
    /// (Intel since Haswell, 2013; AMD since Zen, 2017).
    X86_64V3,
    /// x86-64-v4: v3 plus AVX-512 F, BW, CD, DQ, VL.
    X86_64V4,
    /// The exporting host's CPU (`-march=native`, what jit builds for):
    /// the file requires every feature that host has.
    Native,
    /// aarch64's baseline (ARMv8-A, NEON). Built with a cross compiler
    /// on other architectures (`$TOLK_CC_AARCH64`, else
    /// `aarch64-linux-gnu-gcc`).
    Aarch64,
}

impl CpuTarget {
    /// Every target, in order of [`rank`](Self::rank) within an architecture.
    pub const ALL: [CpuTarget; 5] = [
        CpuTarget::X86_64V2,
        CpuTarget::X86_64V3,
        CpuTarget::X86_64V4,
        CpuTarget::Native,
        CpuTarget::Aarch64,
    ];

    /// Its name: `x86-64-v2`, `x86-64-v3`, `x86-64-v4`, `native`, `aarch64`.
    pub fn name(self) -> &'static str {
        match self {
            CpuTarget::X86_64V2 => "x86-64-v2",
            CpuTarget::X86_64V3 => "x86-64-v3",
            CpuTarget::X86_64V4 => "x86-64-v4",
            CpuTarget::Native => "native",
            CpuTarget::Aarch64 => "aarch64",
        }
    }

    /// The architecture its code is for, as `std::env::consts::ARCH`
    /// names it (`native`: the host's).
    pub fn arch(self) -> &'static str {
        match self {
            CpuTarget::X86_64V2 | CpuTarget::X86_64V3 | CpuTarget::X86_64V4 => "x86_64",
            CpuTarget::Native => std::env::consts::ARCH,
            CpuTarget::Aarch64 => "aarch64",
        }
    }

    /// The portable default for an export from this host: x86-64-v2 on
    /// x86-64, the baseline on aarch64, the host's CPU elsewhere.
    pub fn portable() -> CpuTarget {
        match std::env::consts::ARCH {
            "x86_64" => CpuTarget::X86_64V2,
            "aarch64" => CpuTarget::Aarch64,
            _ => CpuTarget::Native,
        }
    }

    /// Which of several targets a loader prefers when the host runs them
    /// all (higher first): `native` (built for the exporting host, the
    /// fastest where it runs at all), then the wider levels.
    pub fn rank(self) -> u8 {
        match self {
            CpuTarget::X86_64V2 | CpuTarget::Aarch64 => 0,
            CpuTarget::X86_64V3 => 1,
            CpuTarget::X86_64V4 => 2,
            CpuTarget::Native => 3,
        }
    }

    /// The CPU features its code may use, as Rust's
    /// `is_x86_feature_detected!` names them (the names
    /// [`host_cpu_features`] lists). For
    /// `native`, this host's (so call it on the exporting host). aarch64's
    /// baseline needs nothing beyond the architecture.
    pub fn features(self) -> Vec<String> {
        const V2: &[&str] = &["cmpxchg16b", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"];
        const V3: &[&str] = &[
            "avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave",
        ];
        const V4: &[&str] = &["avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"];
        let levels: &[&[&str]] = match self {
            CpuTarget::X86_64V2 => &[V2],
            CpuTarget::X86_64V3 => &[V2, V3],
            CpuTarget::X86_64V4 => &[V2, V3, V4],
            CpuTarget::Native => return host_cpu_features(),
            CpuTarget::Aarch64 => &[],
        };
        levels
            .iter()
            .flat_map(|l| l.iter().map(|f| f.to_string()))
            .collect()
    }

    /// The compiler flag that selects it.
    pub fn march_flag(self) -> &'static str {
        match self {
            CpuTarget::X86_64V2 => "-march=x86-64-v2",
            CpuTarget::X86_64V3 => "-march=x86-64-v3",
            CpuTarget::X86_64V4 => "-march=x86-64-v4",
            CpuTarget::Native => "-march=native",
            CpuTarget::Aarch64 => "-march=armv8-a",
        }
    }
}

impl fmt::Display for CpuTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for CpuTarget {
    type Err = String;

    /// A target by its [`name`](CpuTarget::name).
    fn from_str(s: &str) -> Result<CpuTarget, String> {
        CpuTarget::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = CpuTarget::ALL.iter().map(|t| t.name()).collect();
                format!("unknown CPU target {s:?}; known: {}", names.join(", "))
            })
    }
}

/// The host's instruction-set features, as the names Rust's
/// `is_x86_feature_detected!` knows them (on x86-64; elsewhere none: the
/// architecture stands alone). Kernels built for [`CpuTarget::Native`]
/// may use any of them: an exported program records the exporting
/// host's list, and a host lacking one of them refuses to load it. The
/// list is broader than the disk cache's key ([`crate::cache::cpu_features`]) so
/// that no feature the compiler may use goes unrecorded.
pub fn host_cpu_features() -> Vec<String> {
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut f: Vec<String> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! feats {
            ($($name:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($name) {
                    f.push($name.to_string());
                }
            )*};
        }
        feats!(
            "sse",
            "sse2",
            "sse3",
            "ssse3",
            "sse4.1",
            "sse4.2",
            "popcnt",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "bmi1",
            "bmi2",
            "lzcnt",
            "movbe",
            "aes",
            "pclmulqdq",
            "sha",
            "adx",
            "rdrand",
            "rdseed",
            "fxsr",
            "xsave",
            "xsaveopt",
            "xsavec",
            "xsaves",
            "cmpxchg16b",
            "avx512f",
            "avx512cd",
            "avx512bw",
            "avx512dq",
            "avx512vl",
            "avx512ifma",
            "avx512vbmi",
            "avx512vbmi2",
            "avx512vnni",
            "avx512bitalg",
            "avx512vpopcntdq",
            "avx512bf16",
            "avx512fp16",
            "avx512vp2intersect",
            "gfni",
            "vaes",
            "vpclmulqdq",
            "avxvnni"
        );
    }
    f
}

#[cfg(test)]
mod tests {
    use super::CpuTarget;
    use crate::build::flags_for;

    #[test]
    fn names_parse_back_and_levels_nest() {
        for t in CpuTarget::ALL {
            assert_eq!(t.name().parse::<CpuTarget>(), Ok(t));
        }
        let (v2, v3, v4) = (
            CpuTarget::X86_64V2.features(),
            CpuTarget::X86_64V3.features(),
            CpuTarget::X86_64V4.features(),
        );
        assert!(v2.iter().all(|f| v3.contains(f)) && v3.iter().all(|f| v4.contains(f)));
        assert!(!v2.contains(&"fma".to_string()) && v3.contains(&"fma".to_string()));
        // Every feature a level needs is one the host's list can report.
        let known = [
            "cmpxchg16b",
            "popcnt",
            "sse3",
            "sse4.1",
            "sse4.2",
            "ssse3",
            "avx",
            "avx2",
            "bmi1",
            "bmi2",
            "f16c",
            "fma",
            "lzcnt",
            "movbe",
            "xsave",
            "avx512f",
            "avx512bw",
            "avx512cd",
            "avx512dq",
            "avx512vl",
        ];
        assert!(v4.iter().all(|f| known.contains(&f.as_str())));
    }

    #[test]
    fn a_targets_flags_replace_native() {
        for clang in [false, true] {
            let f = flags_for(CpuTarget::X86_64V2, clang);
            assert!(f.contains(&"-march=x86-64-v2") && !f.contains(&"-march=native"));
            assert!(flags_for(CpuTarget::Native, clang).contains(&"-march=native"));
            let arm = flags_for(CpuTarget::Aarch64, clang);
            assert!(arm.contains(&"-march=armv8-a"));
            assert!(!arm.iter().any(|f| f.starts_with("-mprefer-vector-width")));
            // Everything else is jit's.
            assert_eq!(f.len(), flags_for(CpuTarget::Native, clang).len());
        }
    }
}
