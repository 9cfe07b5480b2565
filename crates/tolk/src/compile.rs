//! The system C compiler: builds a program's kernels into one shared object
//! and loads it. `$CC`, else `cc`; flags from `c_ops::CFLAGS` (gcc's own left out for clang; chosen by
//! measurement: `-O2 -fvect-cost-model=dynamic` vectorizes the fused loops
//! as `-O3` does at a fifth of the compile time).

use crate::c_ops;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The compiler command.
pub fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The compiler's identity and version (`cc --version`'s first line), once
/// per process; `Err` when it cannot be run.
///
/// Running the compiler costs 1-2 ms, a sixth of a warm-cache first call
/// (W8), so with the persistent cache on the line is also kept on disk,
/// beside the cache (`$XDG_CACHE_HOME/tolk/cc-<stamp>.version`), under a
/// name derived from the resolved compiler binary's path, size and
/// modification time: a later process that finds it reads it instead of
/// running the compiler, and a changed compiler (a new binary) has a new
/// name. With `JITCACHE=0` nothing is read or written there.
pub fn compiler_identity() -> Result<String, String> {
    static ID: OnceLock<Result<String, String>> = OnceLock::new();
    ID.get_or_init(|| {
        let cc = compiler();
        let stored = crate::cache::dir()
            .and_then(|d| Some(d.parent()?.to_path_buf()))
            .zip(binary_stamp(&cc))
            .map(|(dir, stamp)| {
                dir.join(format!(
                    "cc-{}.version",
                    crate::cache::hash(&[stamp.as_bytes()])
                ))
            });
        if let Some(line) = stored
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        {
            if !line.is_empty() {
                return Ok(line);
            }
        }
        match Command::new(&cc).arg("--version").output() {
            Ok(o) if o.status.success() => {
                let v = String::from_utf8_lossy(&o.stdout);
                let line = format!("{cc}: {}", v.lines().next().unwrap_or(""));
                if let Some(p) = stored {
                    // Best effort, written whole then renamed (a reader
                    // never sees part of it).
                    let tmp = p.with_extension(format!("tmp-{}", unique_suffix()));
                    let _ = std::fs::create_dir_all(p.parent().unwrap_or(Path::new(".")))
                        .and_then(|()| std::fs::write(&tmp, &line))
                        .and_then(|()| std::fs::rename(&tmp, &p));
                    let _ = std::fs::remove_file(&tmp);
                }
                Ok(line)
            }
            _ => Err(no_compiler(&cc)),
        }
    })
    .clone()
}

/// The compiler command `cc` resolved to its binary (through `PATH` and
/// symbolic links), with the binary's size and modification time; `None`
/// when it cannot be found.
fn binary_stamp(cc: &str) -> Option<String> {
    let path = if cc.contains('/') {
        PathBuf::from(cc)
    } else {
        std::env::split_paths(&std::env::var_os("PATH")?)
            .map(|d| d.join(cc))
            .find(|p| p.is_file())?
    };
    let real = std::fs::canonicalize(path).ok()?;
    let meta = std::fs::metadata(&real).ok()?;
    let mtime = meta
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    Some(format!(
        "{cc} {} {} {}",
        real.display(),
        meta.len(),
        mtime.as_nanos()
    ))
}

fn no_compiler(cc: &str) -> String {
    format!(
        "jit: the C compiler `{cc}` could not be run; jit compiles kernels with the system C \
         compiler: install one (e.g. `apt install gcc`, or Xcode's command line tools on macOS) \
         or point the CC environment variable at it"
    )
}

/// Flags added when `TOLK_SANITIZE=1`: the kernels are built with
/// AddressSanitizer and UBSan (for fuzzing the generated code). The process
/// must then have the sanitizer runtimes loaded first, e.g.
/// `LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)`.
/// Part of the persistent cache's key (through [`flags`]).
pub fn sanitize_flags() -> &'static [&'static str] {
    static ON: OnceLock<bool> = OnceLock::new();
    if *ON.get_or_init(|| std::env::var("TOLK_SANITIZE").is_ok_and(|v| v == "1")) {
        &["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    } else {
        &[]
    }
}

/// Whether `$CC` is clang, by its version line (Apple's included).
pub fn is_clang() -> bool {
    compiler_identity().is_ok_and(|id| names_clang(&id))
}

/// Whether a [`compiler_identity`] line (`path: first --version line`)
/// names clang: by the version line only, not by the compiler's path.
pub fn names_clang(identity: &str) -> bool {
    let version = identity.split_once(": ").map_or(identity, |(_, v)| v);
    version.contains("clang")
}

/// Every flag a kernel build uses besides `-shared -fPIC -o`: `c_ops::CFLAGS`
/// (less gcc's own for clang, [`c_ops::cflags`]) and, with
/// `TOLK_SANITIZE=1`, [`sanitize_flags`].
pub fn flags() -> Vec<&'static str> {
    let mut f = c_ops::cflags(is_clang());
    f.extend_from_slice(sanitize_flags());
    f
}

/// Compiles `source` into the shared object `out` (written to a temporary
/// name beside it, then renamed, so a reader never sees a partial file).
pub fn build(source: &str, out: &Path, extra_flags: &[&str]) -> Result<(), String> {
    build_units(&[source.to_string()], out, extra_flags)
}

/// Like [`build`] for several translation units, compiled by concurrent
/// compiler processes (one core each) and linked into one shared object.
pub fn build_units(units: &[String], out: &Path, extra_flags: &[&str]) -> Result<(), String> {
    compiler_identity()?;
    let dir = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("jit: cannot create {}: {e}", dir.display()))?;
    let uniq = unique_suffix();
    let so_tmp = dir.join(format!("tmp-{uniq}.so"));
    let cc = compiler();
    let c_paths: Vec<PathBuf> = (0..units.len())
        .map(|i| dir.join(format!("tmp-{uniq}-{i}.c")))
        .collect();
    let o_paths: Vec<PathBuf> = (0..units.len())
        .map(|i| dir.join(format!("tmp-{uniq}-{i}.o")))
        .collect();
    let cleanup = |extra: &[&PathBuf]| {
        for p in c_paths.iter().chain(&o_paths).chain(extra.iter().copied()) {
            let _ = std::fs::remove_file(p);
        }
    };
    for (p, src) in c_paths.iter().zip(units) {
        std::fs::write(p, src).map_err(|e| format!("jit: cannot write {}: {e}", p.display()))?;
    }
    let failed = |o: &std::process::Output| {
        format!(
            "jit: internal error: the generated C did not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let flags = flags();
    let result = if units.len() == 1 {
        Command::new(&cc)
            .args(&flags)
            .args(extra_flags)
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so_tmp)
            .arg(&c_paths[0])
            .arg("-lm")
            .output()
    } else {
        let children: Vec<std::io::Result<std::process::Child>> = c_paths
            .iter()
            .zip(&o_paths)
            .map(|(c, o)| {
                Command::new(&cc)
                    .args(&flags)
                    .args(extra_flags)
                    .args(["-fPIC", "-c", "-o"])
                    .arg(o)
                    .arg(c)
                    .stderr(std::process::Stdio::piped())
                    .stdout(std::process::Stdio::null())
                    .spawn()
            })
            .collect();
        let mut first_error = None;
        for child in children {
            match child.and_then(|c| c.wait_with_output()) {
                Ok(o) if o.status.success() => {}
                Ok(o) => {
                    first_error.get_or_insert(failed(&o));
                }
                Err(_) => {
                    first_error.get_or_insert(no_compiler(&cc));
                }
            }
        }
        if let Some(e) = first_error {
            cleanup(&[&so_tmp]);
            return Err(e);
        }
        Command::new(&cc)
            .args(sanitize_flags())
            .args(["-shared", "-o"])
            .arg(&so_tmp)
            .args(&o_paths)
            .arg("-lm")
            .output()
    };
    cleanup(&[]);
    let o = result.map_err(|_| no_compiler(&cc))?;
    if !o.status.success() {
        let _ = std::fs::remove_file(&so_tmp);
        return Err(failed(&o));
    }
    std::fs::rename(&so_tmp, out).map_err(|e| format!("jit: cannot write {}: {e}", out.display()))
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

/// A loaded shared object and its kernels' entry points.
pub struct Loaded {
    // Keeps the code mapped while the function pointers are in use.
    _lib: libloading::Library,
    /// The kernels' entry points, in the order their symbols were asked for.
    pub fns: Vec<KernelFn>,
}

/// `void k(void *const *b, int64_t lo, int64_t hi)`.
pub type KernelFn = unsafe extern "C" fn(*const *mut u8, i64, i64);

/// Loads `path` and looks up `names`.
pub fn load(path: &Path, names: &[String]) -> Result<Loaded, String> {
    // SAFETY: loading runs the object's initializers; tolk's shared objects
    // are generated C with none (no constructors, no global state).
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("jit: cannot load {}: {e}", path.display()))?;
    let mut fns = Vec::with_capacity(names.len());
    for n in names {
        // SAFETY: every exported kernel has exactly the `KernelFn` signature
        // (render.rs writes them all with it).
        let f: libloading::Symbol<KernelFn> = unsafe { lib.get(n.as_bytes()) }
            .map_err(|e| format!("jit: {} lacks kernel {n}: {e}", path.display()))?;
        fns.push(*f);
    }
    Ok(Loaded { _lib: lib, fns })
}

/// A scratch directory for builds that are not cached.
pub fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join("tolk-scratch")
}
