//! Building: the system C compiler turns a program's translation units into
//! one shared object. `$CC`, else `cc`; flags from the C dialect's
//! [`CFLAGS`](crate::codegen::c::CFLAGS) (gcc's own left out for clang;
//! chosen by measurement: `-O2 -fvect-cost-model=dynamic` vectorizes the
//! fused loops as `-O3` does at a fifth of the compile time).

mod target;

pub use target::{host_cpu_features, CpuTarget};

use crate::cache::unique_suffix;
use crate::codegen::c;
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
/// (a warm-cache first call), so with the persistent cache on the line is also kept on disk,
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
                    crate::hash::hash(&[stamp.as_bytes()])
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
        match version_line(&cc) {
            Some(line) => {
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
            None => Err(no_compiler(&cc)),
        }
    })
    .clone()
}

/// `cc: <cc --version's first line>`, `None` when `cc` cannot be run.
fn version_line(cc: &str) -> Option<String> {
    let o = Command::new(cc).arg("--version").output().ok()?;
    if !o.status.success() {
        return None;
    }
    let v = String::from_utf8_lossy(&o.stdout);
    Some(format!("{cc}: {}", v.lines().next().unwrap_or("")))
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

/// Every flag a kernel build uses besides `-shared -fPIC -o`: [`c::CFLAGS`]
/// (less gcc's own for clang, [`c::cflags`]) and, with
/// `TOLK_SANITIZE=1`, [`sanitize_flags`].
pub fn flags() -> Vec<&'static str> {
    let mut f = c::cflags(is_clang());
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
    let mut flags = flags();
    flags.extend_from_slice(extra_flags);
    build_with(units, out, &compiler(), &flags)
}

/// The compiler command that builds for `target`: `$CC` (else `cc`),
/// except for aarch64 on another architecture, where a cross compiler
/// does: `$TOLK_CC_AARCH64`, else `aarch64-linux-gnu-gcc`.
pub fn compiler_for(target: CpuTarget) -> String {
    if target.arch() == std::env::consts::ARCH {
        return compiler();
    }
    std::env::var("TOLK_CC_AARCH64")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "aarch64-linux-gnu-gcc".into())
}

/// [`flags`] for a build for `target`, by a compiler that is clang or
/// not: `-march=native` replaced by the target's `-march`, and for
/// aarch64 without x86's `-mprefer-vector-width`.
pub fn flags_for(target: CpuTarget, clang: bool) -> Vec<&'static str> {
    let mut f: Vec<&'static str> = c::cflags(clang)
        .into_iter()
        .map(|f| {
            if f == "-march=native" {
                target.march_flag()
            } else {
                f
            }
        })
        .filter(|f| target.arch() == "x86_64" || !f.starts_with("-mprefer-vector-width"))
        .collect();
    f.extend_from_slice(sanitize_flags());
    f
}

/// Builds `units` into the shared object `out` for `target` (what an
/// export ships; never cached: its flags differ from jit's) and returns
/// the identity of the compiler that built them ([`compiler_identity`]'s
/// form). `Err` says plainly when no compiler for the target can be run
/// (aarch64 from an x86-64 host without a cross compiler) or the compiler
/// does not know the level (gcc before 11, clang before 12).
pub fn build_units_for(units: &[String], out: &Path, target: CpuTarget) -> Result<String, String> {
    let cc = compiler_for(target);
    let identity = compiler_identity_for(target)?;
    let flags = flags_for(target, names_clang(&identity));
    build_with(units, out, &cc, &flags).map_err(|e| {
        if target == CpuTarget::Native {
            e
        } else {
            format!(
                "{} could not build the kernels for {target} ({}; gcc 11 and clang 12 \
                 and later know the x86-64 levels): {e}",
                cc,
                target.march_flag()
            )
        }
    })?;
    Ok(identity)
}

/// The identity of [`compiler_for`]`(target)` ([`compiler_identity`]'s
/// form); `Err` says plainly that it cannot be run (for aarch64 from
/// another architecture: no cross compiler) and how to get one.
pub fn compiler_identity_for(target: CpuTarget) -> Result<String, String> {
    let cc = compiler_for(target);
    if cc == compiler() {
        compiler_identity()
    } else {
        version_line(&cc).ok_or_else(|| {
            format!(
                "cannot build kernels for {target} on this {} host: the cross compiler \
                 `{cc}` could not be run; install one (e.g. `apt install gcc-aarch64-linux-gnu`), \
                 point TOLK_CC_AARCH64 at it, or export on an {} host",
                std::env::consts::ARCH,
                target.arch()
            )
        })
    }
}

/// Compiles `units` with `cc` and `flags` (every flag but `-shared -fPIC
/// -c -o`) and links them into `out`.
fn build_with(units: &[String], out: &Path, cc: &str, flags: &[&str]) -> Result<(), String> {
    let dir = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)
        .map_err(|e| format!("jit: cannot create {}: {e}", dir.display()))?;
    let uniq = unique_suffix();
    let so_tmp = dir.join(format!("tmp-{uniq}.so"));
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
    let result = if units.len() == 1 {
        Command::new(cc)
            .args(flags)
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
                Command::new(cc)
                    .args(flags)
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
                    first_error.get_or_insert(no_compiler(cc));
                }
            }
        }
        if let Some(e) = first_error {
            cleanup(&[&so_tmp]);
            return Err(e);
        }
        Command::new(cc)
            .args(sanitize_flags())
            .args(["-shared", "-o"])
            .arg(&so_tmp)
            .args(&o_paths)
            .arg("-lm")
            .output()
    };
    cleanup(&[]);
    let o = result.map_err(|_| no_compiler(cc))?;
    if !o.status.success() {
        let _ = std::fs::remove_file(&so_tmp);
        return Err(failed(&o));
    }
    std::fs::rename(&so_tmp, out).map_err(|e| format!("jit: cannot write {}: {e}", out.display()))
}

/// A scratch directory for builds that are not cached.
pub fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join("tolk-scratch")
}
