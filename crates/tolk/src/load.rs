//! Loading: a built shared object is mapped and its kernels' entry points
//! looked up.

use std::path::Path;

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
        // (the dialect's `kernel_signature` writes them all with it).
        let f: libloading::Symbol<KernelFn> = unsafe { lib.get(n.as_bytes()) }
            .map_err(|e| format!("jit: {} lacks kernel {n}: {e}", path.display()))?;
        fns.push(*f);
    }
    Ok(Loaded { _lib: lib, fns })
}
