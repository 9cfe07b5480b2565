//! The persistent compilation cache: one entry per program, two files in
//! the cache directory: `<key>.so` (the kernels) and `<key>.meta` (the plan,
//! the kernels' entry points, a hash of the `.so`, and the source of the
//! kernels' exact forms, built only if needed).
//!
//! The key covers the simplified program's structure, the codegen flags,
//! the C compiler's identity and version, the host's instruction-set
//! features (the code is built with `-march=native`) and the running
//! executable. Both files are written under temporary names and renamed
//! (the `.so` first), so a reader sees whole files or none; a reader
//! checks the `.meta`'s own checksum and the `.so`'s hash before loading, so
//! a truncated, corrupt or foreign entry is a miss, never a crash.

use crate::graph::Var;
use crate::hash::hash;
use crate::plan::{Plan, Step};
use nx::DType;
use std::path::{Path, PathBuf};

/// Bumped whenever the entry format or the generated code's conventions change.
const FORMAT: &str = "tolk-cache-8";

/// The cache directory: `$XDG_CACHE_HOME/tolk/rune_jit`, XDG's default
/// `~/.cache` (`~/Library/Caches` on macOS); `None` when `JITCACHE=0` or no
/// home directory is known.
pub fn dir() -> Option<PathBuf> {
    if std::env::var("JITCACHE").is_ok_and(|v| v == "0") {
        return None;
    }
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => {
            let home = PathBuf::from(std::env::var_os("HOME")?);
            if cfg!(target_os = "macos") {
                home.join("Library/Caches")
            } else {
                home.join(".cache")
            }
        }
    };
    Some(base.join("tolk").join("rune_jit"))
}

/// The running executable's identity: path, size and modification time.
fn executable_identity() -> String {
    let Ok(exe) = std::env::current_exe() else {
        return "unknown".into();
    };
    let meta = std::fs::metadata(&exe).ok();
    let len = meta.as_ref().map(|m| m.len()).unwrap_or(0);
    let mtime = meta
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{} {len} {mtime}", exe.display())
}

/// The host's instruction-set features the C compiler may use.
pub fn cpu_features() -> String {
    // Only x86-64 appends features (elsewhere the architecture stands alone).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut f = String::from(std::env::consts::ARCH);
    #[cfg(target_arch = "x86_64")]
    {
        macro_rules! feats {
            ($($name:tt),*) => {$(
                if std::arch::is_x86_feature_detected!($name) {
                    f.push(' ');
                    f.push_str($name);
                }
            )*};
        }
        feats!(
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "bmi2",
            "avx512f",
            "avx512bw",
            "avx512dq",
            "avx512vl",
            "avx512fp16",
            "avx512bf16"
        );
    }
    f
}

/// The cache key of a program.
pub fn key(structure: &str, flags: &[&str], compiler: &str) -> String {
    hash(&[
        FORMAT.as_bytes(),
        structure.as_bytes(),
        flags.join(" ").as_bytes(),
        compiler.as_bytes(),
        cpu_features().as_bytes(),
        executable_identity().as_bytes(),
    ])
}

/// What identifies the CUDA toolchain and device a program's PTX/cubin
/// was built for: part of a CUDA program's cache key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaTarget {
    /// The device's model (`cuDeviceGetName`: "NVIDIA H200").
    pub device: String,
    /// Its compute capability (major, minor).
    pub capability: (i32, i32),
    /// The driver's version (`cuDriverGetVersion`: 13000 for 13.0).
    pub driver: i32,
    /// NVRTC's version (major, minor).
    pub nvrtc: (i32, i32),
}

/// The cache key of a CUDA program: its structure and NVRTC options, the
/// device model and capability, the driver's and NVRTC's versions (a new
/// driver or NVRTC may compile the same source differently), the host's
/// CPU features (the CUDA dialect fuses multiply-adds where the host's nx
/// kernels do) and the executable. Never equal to a CPU program's key.
pub fn cuda_key(structure: &str, options: &[&str], target: &CudaTarget) -> String {
    let t = format!(
        "cuda device={} sm_{}{} driver={} nvrtc={}.{}",
        target.device,
        target.capability.0,
        target.capability.1,
        target.driver,
        target.nvrtc.0,
        target.nvrtc.1
    );
    hash(&[
        FORMAT.as_bytes(),
        structure.as_bytes(),
        options.join(" ").as_bytes(),
        t.as_bytes(),
        cpu_features().as_bytes(),
        executable_identity().as_bytes(),
    ])
}

/// What an entry's `.meta` holds.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The program's plan of steps over buffers.
    pub plan: Plan,
    /// Per kernel, as the plan indexes them.
    pub kernels: Vec<KernelMeta>,
    /// The translation unit of the kernels' exact forms (empty if none).
    pub exact: String,
}

/// What the runtime needs of a compiled kernel besides its code.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelMeta {
    /// Its function's symbol.
    pub name: String,
    /// The symbol of its exact form, in [`Entry::exact`]'s unit, when it
    /// has guarded fast forms.
    pub exact_name: Option<String>,
    /// The extent of its outer loop.
    pub outer: usize,
    /// Its work per iteration point ([`Kernel::weight`](crate::fuse::Kernel::weight)).
    pub weight: usize,
    /// The dtypes of the buffers it writes.
    pub out_dtypes: Vec<DType>,
    /// The shape of the buffers it writes.
    pub shape: Vec<usize>,
}

fn join(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

fn split(s: &str) -> Option<Vec<usize>> {
    if s.is_empty() {
        return Some(Vec::new());
    }
    s.split(',').map(|x| x.parse().ok()).collect()
}

fn dtype_from_name(n: &str) -> Option<DType> {
    use DType::*;
    [
        Bool, U8, U16, U32, U64, I8, I16, I32, I64, F16, BF16, F32, F64,
    ]
    .into_iter()
    .find(|d| d.name() == n)
}

/// The text of an entry's plan, kernels and exact forms: the serialization
/// the cache's `.meta` files hold after their header, and what an exported
/// program ([`crate::export`]) stores per program. [`parse_entry_text`]
/// reads it back.
pub fn entry_text(e: &Entry) -> String {
    let mut s = String::new();
    for k in &e.kernels {
        s.push_str(&format!(
            "kernel {} {} {} {} {} [{}]\n",
            k.name,
            k.exact_name.as_deref().unwrap_or("-"),
            k.outer,
            k.weight,
            k.out_dtypes
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(","),
            join(&k.shape)
        ));
    }
    for (step, frees) in e.plan.steps.iter().zip(&e.plan.frees) {
        match step {
            Step::Kernel { kernel, outs, args } => {
                s.push_str(&format!("k {kernel} [{}] [{}]", join(outs), join(args)))
            }
            Step::Library { eqn } => s.push_str(&format!("l {eqn}")),
        }
        s.push_str(&format!(" free [{}]\n", join(frees)));
    }
    // Last, as it is: the lines above never hold "exact ".
    s.push_str(&format!("exact {}\n{}", e.exact.len(), e.exact));
    s
}

fn encode(e: &Entry, so_hash: &str) -> String {
    let mut s = format!("{FORMAT}\nso {so_hash}\n{}", entry_text(e));
    let sum = hash(&[s.as_bytes()]);
    s.push_str(&format!("end {sum}\n"));
    s
}

fn bracket(s: &str) -> Option<Vec<usize>> {
    split(s.strip_prefix('[')?.strip_suffix(']')?)
}

fn decode(text: &str) -> Option<(Entry, String)> {
    let body_end = text.rfind("end ")?;
    let (body, tail) = text.split_at(body_end);
    if tail.trim_end() != format!("end {}", hash(&[body.as_bytes()])) {
        return None;
    }
    let body = body.strip_prefix(FORMAT)?.strip_prefix('\n')?;
    let (so_line, rest) = body.split_once('\n')?;
    let so_hash = so_line.strip_prefix("so ")?.to_string();
    Some((parse_entry_text(rest)?, so_hash))
}

/// Reads [`entry_text`]'s text back: `None` when it is not such a text
/// (a line of another form, a number that does not parse, an exact
/// source of another length than its header says). Values are not
/// checked against any program here (the loader does that).
pub fn parse_entry_text(text: &str) -> Option<Entry> {
    // The exact source is last and may hold anything: split it off first.
    let at = if text.starts_with("exact ") {
        0
    } else {
        text.find("\nexact ")? + 1
    };
    let (body, tail) = text.split_at(at);
    let (len, exact) = tail.strip_prefix("exact ")?.split_once('\n')?;
    if exact.len() != len.parse::<usize>().ok()? {
        return None;
    }
    let mut kernels = Vec::new();
    let mut plan = Plan {
        steps: Vec::new(),
        frees: Vec::new(),
    };
    for line in body.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        match w.as_slice() {
            ["kernel", name, exact_name, outer, weight, dt, shape] => kernels.push(KernelMeta {
                name: name.to_string(),
                exact_name: (*exact_name != "-").then(|| exact_name.to_string()),
                outer: outer.parse().ok()?,
                weight: weight.parse().ok()?,
                out_dtypes: dt.split(',').map(dtype_from_name).collect::<Option<_>>()?,
                shape: bracket(shape)?,
            }),
            ["k", k, outs, args, "free", frees] => {
                plan.steps.push(Step::Kernel {
                    kernel: k.parse().ok()?,
                    outs: bracket(outs)?,
                    args: bracket(args)?,
                });
                plan.frees.push(bracket(frees)?);
            }
            ["l", eqn, "free", frees] => {
                plan.steps.push(Step::Library {
                    eqn: eqn.parse().ok()?,
                });
                plan.frees.push(bracket(frees)?);
            }
            _ => return None,
        }
    }
    Some(Entry {
        plan,
        kernels,
        exact: exact.to_string(),
    })
}

/// The entry's paths.
pub fn paths(dir: &Path, key: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{key}.so")),
        dir.join(format!("{key}.meta")),
    )
}

/// Reads a valid entry: `None` when missing, truncated, corrupt, or when
/// its `.so` is not the one the `.meta` describes.
pub fn read(dir: &Path, key: &str) -> Option<Entry> {
    let (so, meta) = paths(dir, key);
    let text = std::fs::read_to_string(&meta).ok()?;
    let (entry, so_hash) = decode(&text)?;
    let bytes = std::fs::read(&so).ok()?;
    if hash(&[&bytes]) != so_hash {
        return None;
    }
    // A used entry is kept: `evict_old` goes by modification time.
    for p in [&so, &meta] {
        let now = std::time::SystemTime::now();
        let _ = std::fs::File::options()
            .append(true)
            .open(p)
            .and_then(|f| f.set_modified(now));
    }
    Some(entry)
}

/// Writes the `.meta` of an entry whose `.so` is already in place.
pub fn write_meta(dir: &Path, key: &str, entry: &Entry) -> Result<(), String> {
    let (so, meta) = paths(dir, key);
    let bytes = std::fs::read(&so).map_err(|e| format!("jit cache: {e}"))?;
    let text = encode(entry, &hash(&[&bytes]));
    let tmp = dir.join(format!("tmp-{}.meta", unique_suffix()));
    std::fs::write(&tmp, text).map_err(|e| format!("jit cache: {e}"))?;
    std::fs::rename(&tmp, &meta).map_err(|e| format!("jit cache: {e}"))
}

/// A CUDA module's image (PTX from NVRTC; the emulated device's shared
/// object) cached under [`cuda_key`]: `<key>.cumod`, its bytes after a
/// line holding their hash. `None` when missing, truncated or corrupt.
pub fn read_module(dir: &Path, key: &str) -> Option<Vec<u8>> {
    let path = dir.join(format!("{key}.cumod"));
    let bytes = std::fs::read(&path).ok()?;
    let nl = bytes.iter().position(|&b| b == b'\n')?;
    let (head, body) = (&bytes[..nl], &bytes[nl + 1..]);
    if head != hash(&[body]).as_bytes() {
        return None;
    }
    let _ = std::fs::File::options()
        .append(true)
        .open(&path)
        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
    Some(body.to_vec())
}

/// Writes a module's image for [`read_module`] (a temporary name, then
/// renamed: readers see a whole file or none).
pub fn write_module(dir: &Path, key: &str, image: &[u8]) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("jit cache: {e}"))?;
    let mut text = hash(&[image]).into_bytes();
    text.push(b'\n');
    text.extend_from_slice(image);
    let tmp = dir.join(format!("tmp-{}.cumod", unique_suffix()));
    std::fs::write(&tmp, text).map_err(|e| format!("jit cache: {e}"))?;
    std::fs::rename(&tmp, dir.join(format!("{key}.cumod"))).map_err(|e| format!("jit cache: {e}"))
}

/// Entries older than this are removed when a process first writes one (each
/// rebuild of an executable keys new entries, so old ones would pile up).
const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(14 * 24 * 3600);
/// Temporary files a crashed writer left behind, after this long.
const TMP_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Removes entries not written for `MAX_AGE` and stale temporary files.
/// Best effort: a file another process is using stays mapped there.
pub fn evict_old(dir: &Path) {
    let Ok(read) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for e in read.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let limit = if name.starts_with("tmp-") {
            TMP_MAX_AGE
        } else if name.ends_with(".so") || name.ends_with(".meta") || name.ends_with(".cumod") {
            MAX_AGE
        } else {
            continue;
        };
        let age = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| now.duration_since(t).ok());
        if age.is_some_and(|a| a > limit) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// A name no other process or thread uses at the same time.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Checks `Var` is what the plan stores (a plain index).
const _: fn(Var) -> usize = |v| v;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prim_cases::{every_prim, one_field_changes};
    use nx::{F64Bits, Prim};
    use std::time::{Duration, SystemTime};

    #[test]
    fn cuda_keys_change_with_device_driver_nvrtc_and_options_and_differ_from_cpu_keys() {
        let h200 = CudaTarget {
            device: "NVIDIA H200".into(),
            capability: (9, 0),
            driver: 13000,
            nvrtc: (13, 0),
        };
        let base = cuda_key("s", &["--fmad=false"], &h200);
        assert_eq!(base, cuda_key("s", &["--fmad=false"], &h200.clone()));
        let with = |f: &dyn Fn(&mut CudaTarget)| {
            let mut t = h200.clone();
            f(&mut t);
            cuda_key("s", &["--fmad=false"], &t)
        };
        let others = [
            with(&|t| t.device = "NVIDIA A100-SXM4-80GB".into()),
            with(&|t| t.capability = (8, 0)),
            with(&|t| t.driver = 12080),
            with(&|t| t.nvrtc = (12, 9)),
            cuda_key("s", &["--fmad=true"], &h200),
            cuda_key("t", &["--fmad=false"], &h200),
            key("s", &["--fmad=false"], "cuda"),
        ];
        for (i, k) in others.iter().enumerate() {
            assert_ne!(*k, base, "variant {i} kept the key");
        }
    }

    #[test]
    fn old_entries_and_stale_temporaries_are_evicted_fresh_ones_kept() {
        let dir = std::env::temp_dir().join(format!("tolk-evict-{}", unique_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let age = |name: &str, secs: u64| {
            let p = dir.join(name);
            std::fs::write(&p, b"x").unwrap();
            let f = std::fs::File::options().append(true).open(&p).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(secs))
                .unwrap();
        };
        age("old.so", 20 * 24 * 3600);
        age("old.meta", 20 * 24 * 3600);
        age("new.so", 60);
        age("tmp-1.c", 2 * 3600);
        age("tmp-2.c", 60);
        age("other.txt", 30 * 24 * 3600);
        evict_old(&dir);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["new.so", "other.txt", "tmp-2.c"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A program of one equation applying `p` to one `[2, 3]` input: its
    /// cache key (the avals are the same for every `p`, so only the
    /// primitive can tell two keys apart).
    fn key_of(p: &Prim) -> String {
        let mut g = crate::graph::Graph::default();
        let x = g.new_var(nx::Aval::new(&[2, 3], DType::F32));
        let y = g.new_var(nx::Aval::new(&[2, 3], DType::F32));
        g.inputs = vec![x];
        g.eqns.push(crate::graph::Eqn::prim(p.clone(), vec![x], y));
        g.outputs = vec![y];
        key(&g.structure_key(), &["-O2"], "cc 1.0")
    }

    /// Two primitives that differ in any one field (a fill value by its
    /// bits: the sign of a zero, a NaN's sign and payload) never compare
    /// equal and never share a cache key: CSE and the disk cache never
    /// merge them. Equal ones share both.
    #[test]
    fn prims_differing_in_one_field_never_compare_equal_nor_share_a_cache_key() {
        let bases = every_prim();
        assert_eq!(
            bases.len(),
            37,
            "one base per primitive (a new one: add it here and to one_field_changes)"
        );
        let mut all: Vec<Prim> = bases.clone();
        for p in &bases {
            assert_eq!(*p, p.clone());
            assert_eq!(key_of(p), key_of(&p.clone()), "{p:?} keys like itself");
            for q in one_field_changes(p) {
                assert_ne!(*p, q, "{p:?} and {q:?} compare equal");
                assert_ne!(key_of(p), key_of(&q), "{p:?} and {q:?} share a key");
                all.push(q);
            }
        }
        assert!(all.len() > 100, "{} primitives", all.len());
        // Across the whole set: equal primitives exactly when equal keys.
        let distinct: std::collections::HashSet<&Prim> = all.iter().collect();
        let keys: std::collections::HashSet<String> = all.iter().map(key_of).collect();
        assert_eq!(distinct.len(), keys.len());
        assert_eq!(
            key_of(&Prim::Full {
                shape: vec![2, 3],
                dtype: DType::F32,
                value: F64Bits(f64::NAN),
            }),
            key_of(&Prim::Full {
                shape: vec![2, 3],
                dtype: DType::F32,
                value: F64Bits(f64::from_bits(f64::NAN.to_bits())),
            }),
            "a NaN of the same bits keys like itself"
        );
    }
}
