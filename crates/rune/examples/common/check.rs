//! The benchmarks' gate before timing (`bench_jit`, `bench_generality`,
//! `bench_gpu`): a jitted result compared once with eager's, and a
//! workload's panic (a jit error, a failed check) turned into an error row,
//! so a wrong or failing program is reported and never timed. The includer
//! also includes `common/timing.rs` as `timing`.
#![allow(dead_code)] // each includer uses a subset

use crate::timing::json_str;
use rune::prelude::*;

/// Prints an error row for workload `id`: `what` failed with `msg`.
pub fn error_row(id: &str, what: &str, msg: &str) {
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": {}, \"error\": {}}}",
        json_str(what),
        json_str(msg)
    );
}

/// Runs one workload; a panic prints an error row naming it and returns
/// false, so the other workloads still run.
pub fn guarded(id: &str, f: impl FnOnce()) -> bool {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(()) => true,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(non-string panic)".into());
            error_row(id, "workload failed", &msg);
            false
        }
    }
}

/// Compares jitted against eager leaf by leaf and prints a check row with
/// the worst relative error; panics (so the workload is reported as
/// failed, not timed) unless each leaf's largest absolute difference is
/// within `rtol` of that eager leaf's largest magnitude (plus a tiny
/// absolute floor). A NaN where the other has a number fails; `rtol = 0`
/// demands bit-identical leaves of the same dtype.
pub fn check<T: Ptree>(id: &str, what: &str, jitted: &T, eager: &T, rtol: f64) {
    let (jl, el) = (jitted.leaves(), eager.leaves());
    assert_eq!(jl.len(), el.len(), "{id} {what}: leaf counts differ");
    let mut worst = 0f64;
    for (i, (j, e)) in jl.iter().zip(&el).enumerate() {
        assert_eq!(j.shape(), e.shape(), "{id} {what}: leaf {i}: shapes differ");
        let (jv, ev) = (
            j.cast(DType::F64).to_vec::<f64>(),
            e.cast(DType::F64).to_vec::<f64>(),
        );
        let (mut err, mut scale) = (0f64, 0f64);
        for (a, b) in jv.iter().zip(&ev) {
            // A NaN on one side only fails the check (max ignores NaN);
            // equal infinities differ by nothing.
            err = if a.is_nan() != b.is_nan() {
                f64::INFINITY
            } else if a == b || a.is_nan() {
                err
            } else {
                err.max((a - b).abs())
            };
            scale = scale.max(b.abs());
        }
        if rtol == 0.0 {
            assert_eq!(j.dtype(), e.dtype(), "{id} {what}: leaf {i}: dtypes differ");
            let same = jv.iter().zip(&ev).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "{id} {what}: jit differs from eager (leaf {i}, max abs diff {err:e}); expected bit-identical"
            );
            continue;
        }
        assert!(
            err <= rtol * scale + 1e-30,
            "{id} {what}: jit differs from eager: leaf {i} max abs diff {err:e} > {rtol:e} x max |eager| {scale:e}"
        );
        worst = worst.max(err / scale.max(1e-30));
    }
    println!(
        "{{\"id\": \"{id}\", \"framework\": \"ours\", \"variant\": \"check: {what}\", \"max_rel_err\": {worst:e}, \"tolerance\": {rtol:e}}}"
    );
}
