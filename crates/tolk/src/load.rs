//! Loading: a built shared object is mapped and its kernels' entry points
//! looked up; code needed only in rare cases ([`Lazy`]) is built and loaded
//! on first use.

use std::path::Path;
use std::sync::OnceLock;

/// A loaded shared object and its kernels' entry points.
pub struct Loaded {
    // Keeps the code mapped while the function pointers are in use.
    _lib: libloading::Library,
    /// The kernels' entry points, in the order their symbols were asked for.
    pub fns: Vec<KernelFn>,
}

/// `int k(void *const *b, int64_t lo, int64_t hi)`: nonzero when a guard
/// failed and the kernel's exact form must recompute its results.
pub type KernelFn = unsafe extern "C" fn(*const *mut u8, i64, i64) -> i32;

thread_local! {
    /// How many shared objects this thread has asked the loader to map.
    static MAPPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// How many shared objects this thread has asked the host's loader to map
/// (successfully or not) since it started: lets a test show that a refused
/// file had none of its code mapped (the count is the thread's own, so
/// other threads' loads do not blur it).
pub fn mapped_on_this_thread() -> usize {
    MAPPED.with(|m| m.get())
}

/// Loads `path` and looks up `names`.
pub fn load(path: &Path, names: &[String]) -> Result<Loaded, String> {
    MAPPED.with(|m| m.set(m.get() + 1));
    // SAFETY: loading runs the object's initializers; tolk's shared objects
    // are generated C with none (no constructors, no global state).
    let lib = unsafe { libloading::Library::new(path) }
        .map_err(|e| format!("jit: cannot load {}: {e}", path.display()))?;
    let mut fns = Vec::with_capacity(names.len());
    for n in names {
        // SAFETY: every exported kernel has exactly the `KernelFn` signature
        // (the dialect's `kernel_signature` writes them all with it).
        let f: libloading::Symbol<KernelFn> = unsafe { lib.get(n.as_bytes()) }
            .map_err(|e| format!("jit: {} lacks kernel {n}: {e}", path.display()))?;
        fns.push(*f);
    }
    Ok(Loaded { _lib: lib, fns })
}

/// Loads a shared object given as bytes (an exported program's): they are
/// written to a file of a fresh directory only this user may enter,
/// mapped, and both removed (the mapping outlives the file). No compiler
/// runs; `Err` when the directory cannot be made, or the loader refuses
/// the bytes (not a shared object for this host, a library it needs
/// missing) or a symbol is missing.
pub fn load_bytes(so: &[u8], names: &[String]) -> Result<Loaded, String> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = std::env::temp_dir().join(format!("tolk-load-{}", crate::cache::unique_suffix()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join("kernels.so");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o700)
        .open(&path)
        .and_then(|mut f| f.write_all(so))
        .map_err(|e| format!("cannot write {}: {e}", path.display()));
    let loaded = written.and_then(|()| load(&path, names));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_dir(&dir);
    loaded
}

/// Source built and loaded only when first needed (kernels' exact forms,
/// run when an input was beyond a fast form's range), then kept; or, for
/// an exported program, its shared object's bytes, loaded on first need.
pub struct Lazy {
    source: String,
    names: Vec<String>,
    /// The built shared object, when it came built (no compiler runs).
    built: Option<Vec<u8>>,
    loaded: OnceLock<Result<Loaded, String>>,
}

impl Lazy {
    /// Code that defines the functions `names`.
    pub fn new(source: String, names: Vec<String>) -> Lazy {
        Lazy {
            source,
            names,
            built: None,
            loaded: OnceLock::new(),
        }
    }

    /// Code that defines the functions `names`, built already into the
    /// shared object `so`: `get` maps it ([`load_bytes`]) and builds
    /// nothing (an exported program's exact forms, loaded where no
    /// compiler may be).
    pub fn built(source: String, names: Vec<String>, so: Vec<u8>) -> Lazy {
        Lazy {
            source,
            names,
            built: Some(so),
            loaded: OnceLock::new(),
        }
    }

    /// Function `i` of the names given to [`Lazy::new`], building (or, for
    /// code given built, mapping) and loading the code on the first call.
    ///
    /// # Panics
    ///
    /// If the code does not build (a compiler that ran for the rest of the
    /// program failing now) or, given built, does not load.
    pub fn get(&self, i: usize) -> KernelFn {
        let loaded = self.loaded.get_or_init(|| {
            if let Some(so) = &self.built {
                return load_bytes(so, &self.names);
            }
            let so =
                crate::build::scratch_dir().join(format!("{}.so", crate::cache::unique_suffix()));
            crate::build::build_units(std::slice::from_ref(&self.source), &so, &[])?;
            let loaded = load(&so, &self.names);
            let _ = std::fs::remove_file(&so); // the mapping outlives the file
            loaded
        });
        match loaded {
            Ok(l) => l.fns[i],
            Err(e) => panic!("tolk: building the kernels' exact forms failed: {e}"),
        }
    }
}
