//! Whether this machine can run CUDA: the driver (`libcuda.so.1`, with at
//! least one device) and NVRTC ([`crate::nvrtc`]), probed before anything
//! else touches CUDA, so that a missing piece is a message naming it (rune
//! turns it into the unavailable-device panic), never a crash inside a
//! CUDA library.

use crate::cache::CudaTarget;
use crate::nvrtc::Nvrtc;
use std::ffi::{c_char, c_int};

/// The names tried for the driver library.
pub const DRIVER_NAMES: &[&str] = &["libcuda.so.1", "libcuda.so"];

/// What the probe found: the first device's identity, as the cache key
/// needs it.
pub type Found = CudaTarget;

/// Probes the CUDA driver (loads it, `cuInit`, counts devices, names
/// device 0) and NVRTC. `Err` says what is missing: "no CUDA driver
/// (...)", "no CUDA device (...)" or "no NVRTC (...)".
pub fn probe() -> Result<Found, String> {
    let (device, capability, driver) = probe_driver()?;
    let nvrtc = Nvrtc::get().map_err(|e| format!("no NVRTC ({e})"))?;
    Ok(CudaTarget {
        device,
        capability,
        driver,
        nvrtc: nvrtc.version(),
    })
}

fn probe_driver() -> Result<(String, (i32, i32), i32), String> {
    let mut errors = Vec::new();
    let mut lib = None;
    for name in DRIVER_NAMES {
        // SAFETY (why sound): loading the driver runs only its
        // initializers, which have no preconditions; `lib` outlives every
        // call through its symbols below.
        match unsafe { libloading::Library::new(name) } {
            Ok(l) => {
                lib = Some(l);
                break;
            }
            Err(e) => errors.push(format!("{name}: {e}")),
        }
    }
    let Some(lib) = lib else {
        return Err(format!("no CUDA driver ({})", errors.join("; ")));
    };
    type Init = unsafe extern "C" fn(u32) -> c_int;
    type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
    type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    // CUdevice_attribute values (cuda.h): compute capability major, minor.
    const CC_MAJOR: c_int = 75;
    const CC_MINOR: c_int = 76;
    // SAFETY (why sound): each symbol is looked up with the signature
    // cuda.h declares for it (CUresult is an int, CUdevice an int); every
    // out-pointer is valid for the call; the name buffer's length is
    // passed; `lib` is alive throughout.
    unsafe {
        let sym = |n: &[u8]| {
            lib.get::<*const ()>(n)
                .map(|s| *s)
                .map_err(|e| format!("no CUDA driver (libcuda lacks a symbol: {e})"))
        };
        let init: Init = std::mem::transmute(sym(b"cuInit\0")?);
        let version: IntOut = std::mem::transmute(sym(b"cuDriverGetVersion\0")?);
        let count: IntOut = std::mem::transmute(sym(b"cuDeviceGetCount\0")?);
        let get: DeviceGet = std::mem::transmute(sym(b"cuDeviceGet\0")?);
        let name: Name = std::mem::transmute(sym(b"cuDeviceGetName\0")?);
        let attr: Attr = std::mem::transmute(sym(b"cuDeviceGetAttribute\0")?);
        let r = init(0);
        if r != 0 {
            return Err(format!("no CUDA device (cuInit failed with CUresult {r})"));
        }
        let mut n = 0;
        let r = count(&mut n);
        if r != 0 || n == 0 {
            return Err(format!(
                "no CUDA device (cuDeviceGetCount: CUresult {r}, {n} devices)"
            ));
        }
        let mut driver = 0;
        version(&mut driver);
        let mut dev = 0;
        get(&mut dev, 0);
        let mut buf = [0 as c_char; 256];
        name(buf.as_mut_ptr(), buf.len() as c_int, dev);
        let model = std::ffi::CStr::from_ptr(buf.as_ptr())
            .to_string_lossy()
            .into_owned();
        let (mut major, mut minor) = (0, 0);
        attr(&mut major, CC_MAJOR, dev);
        attr(&mut minor, CC_MINOR, dev);
        // The driver stays loaded for the process (its state is global).
        std::mem::forget(lib);
        Ok((model, (major, minor), driver))
    }
}
