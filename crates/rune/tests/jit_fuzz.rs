//! Differential fuzzer: random programs of 3-20 operations, run under `jit`
//! and eagerly, must agree.
//!
//! A program is data (`Prog`: inputs and a list of `Instr`s over a growing
//! list of values), generated from a seed by a small deterministic PRNG with
//! every shape and dtype tracked statically, and interpreted on tensors, so
//! the same program runs eagerly and under a staging trace, and a failure
//! prints a replayable reproducer (the case's seed and the program).
//!
//! The menu: unary and binary elementwise ops (with broadcasting: the second
//! operand is fitted to a shape broadcast-compatible with the first by
//! movement ops), casts between float and integer dtypes (f16/bf16
//! included), views (reshape, permute, slice with steps including negative
//! ones, flip, broadcast, expand, unsqueeze), compare + where, reductions
//! (sum/max/mean over random axes, keepdims or not), matmul, gathers
//! (`take`), scatter-adds (`segment_sum` and `index_add`) and max/avg pools
//! (tiling, overlapping, SAME and explicitly padded windows over 1 to 3
//! spatial axes), each by captured indices in range (repeats, negatives,
//! both bounds), anywhere a scan's body too, non-contiguous
//! inputs (transposed, stride-2 and reversed views), captured constants, an
//! `scan`s (staged as loops: a carry over the rows of a value, a body of
//! 1-4 instructions from the same menu, scans of scans, each `unroll` from
//! one step per iteration to fully unrolled; in a gradient through a scan
//! whose values are not all finite, a NaN where eager has a number is
//! accepted: the loop's reverse pass multiplies a zero cotangent by the
//! step's partial, as JAX's does, where eager's tape skips the step; an
//! input no step's vjp reaches gets no cotangent at all, as in JAX), an
//! in-place writeback (`assign` on an input leaf, the last statement; the
//! outputs are copied before it, since eager views of the leaf would alias
//! it; `view_of_an_assigned_input_aliases` checks jit follows eager there), and for float programs the
//! gradient of the program's sum with respect to its first input
//! (`rune::grad` inside `jit`, against eager `rune::grad`).
//!
//! **Bound.** Programs of elementwise and movement operations must be
//! bit-exact (NaN payloads aside, as in `jit_op_table.rs`): tolk compiles
//! them into C that reproduces the eager kernels bit for bit. Programs with
//! reductions or matmuls (including the reductions a gradient adds, found
//! in the staged graph) must agree within a relative 1e-4 (f32; 4e-3 f16,
//! 3e-2 bf16, 1e-10 f64) of `1 + |eager| + scale`, where `scale` is the
//! largest magnitude among the values the result depends on (the staged
//! program run eagerly, `magnitudes`): a reduction whose input is
//! computed compiles into one kernel that accumulates in f64 (eager: f32
//! lanes into f64 block totals), and a product of a fused (contiguous)
//! operand sums in another order than of a strided view, so sums differ in
//! their last bits — relative to their terms, which is why the bound scales
//! with them: a gradient that cancels to near zero keeps a residue of its
//! terms' ulps (seed 3003220: terms near 200, jit 2.1e-4 against eager
//! 4.6e-5, beyond `1e-4 * (1 + |eager|)`). The downstream ops of these small
//! programs amplify that by far less than the bound; the counts say how
//! many cases had a scale past 100. (A comparison on a value within an ulp of its threshold
//! could still flip; the CI seeds are fixed and pass.) In such programs a
//! float cast to an integer or compared after the reduction can land on
//! another integer or boolean (a sum of f32 values near 2^31 floored and
//! cast to i32), so their non-float results are checked for shape and
//! dtype only. Matrix products and
//! the other primitives (the backward pass's scatter/pad/...) run as library
//! steps through the same eager kernel on the same values. The only
//! difference in what those kernels see is layout: a non-contiguous input or
//! a fused intermediate reaches a library step as a contiguous buffer, where
//! eager passes a strided view. That changes nothing for elementwise work,
//! and the fuzzer checks that it changes nothing for reductions and GEMM
//! either (they accumulate in an order set by the reduced extent, not by
//! strides). A program that contains no reduction and no matmul is reported
//! as such in the counts ("elementwise/movement-only").
//!
//! CI: `every_random_program_under_jit_equals_eager` runs `CI_CASES` cases,
//! `BATCH` programs per jitted function (one C compile per batch; a failing
//! batch is rerun program by program to name the program), from a first
//! seed taken from the commit under test (`first_seed`; `JIT_FUZZ_SEED`
//! overrides it), so each landing covers programs no earlier one did. A
//! failure prints the case's seed, its program, and the one-line commands
//! that rerun it alone (`JIT_FUZZ_ONLY=seed`) and shrink it
//! (`JIT_FUZZ_SHRINK=seed`, `common/fuzz_shrink.rs`).
//! `random_programs_on_the_emulated_cuda_device_equal_eager` does the same
//! on the emulated CUDA device; `JIT_FUZZ_DEVICE=CUDA` runs the long mode
//! and `JIT_FUZZ_ONLY` there.
//!
//! Long mode, 10^4 cases with the generated C built with AddressSanitizer
//! and UBSan (`TOLK_SANITIZE=1` makes tolk add
//! `-fsanitize=address,undefined -fno-omit-frame-pointer`, and the ASan
//! runtime must be loaded first into the test process):
//!
//! ```text
//! BIN=$(cargo test --release -p rune --test jit_fuzz --no-run 2>&1 \
//!       | grep -o 'target/release/deps/jit_fuzz-[0-9a-f]*')
//! TOLK_SANITIZE=1 JITCACHE=0 ASAN_OPTIONS=detect_leaks=0 \
//!   UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 JIT_FUZZ_PROGRESS=1 \
//!   LD_PRELOAD=$(gcc -print-file-name=libasan.so) $BIN --ignored --nocapture long_fuzz
//! ```
//!
//! (The test binary is run directly so that the preload applies to it and
//! not to cargo and rustc; `cargo test --release -p rune --test jit_fuzz --
//! --ignored` runs the same cases unsanitized. `detect_leaks=0`:
//! LeakSanitizer would report the Rust runtime's own allocations at exit. `JIT_FUZZ_CASES=n` and `JIT_FUZZ_SEED=s` set the
//! count and the first seed; `JIT_FUZZ_ONLY=s` runs the one case with seed
//! `s` and prints its program.)

#[path = "common/bits.rs"]
mod bits;
#[path = "common/compiled_call.rs"]
mod compiled_call;
use compiled_call::compiled_call;
#[path = "../../nx/tests/common/mod.rs"]
mod common;

use rune::prelude::*;
use std::time::Instant;

const CI_CASES: usize = 300;
const BATCH: usize = 12;

include!("common/fuzz_programs.rs");
include!("common/fuzz_shrink.rs");

// ---------------------------------------------------------------------------
// Comparison.

/// `same_bits` for programs without reductions or matmuls; with them,
/// closeness (see the module's "Bound"): a reduction whose input is computed
/// compiles into one kernel accumulating in f64, while eager accumulates f32
/// lanes into f64 block totals, so their sums differ in the last bits.
///
/// `loosest` is the least precise float dtype of the program (a sum in f32
/// cast to f64 carries f32's error into an f64 output). `quantized`: the
/// program turns floats into integers or booleans after a reduction, so its
/// non-float results are compared by shape and dtype only. `scale`: the
/// largest magnitude among the values the result depends on
/// (`magnitudes`); the bound is `tol * (1 + |eager| + scale)`.
#[allow(clippy::too_many_arguments)]
fn agree(
    what: &str,
    got: &Tensor,
    want: &Tensor,
    exact: bool,
    loosest: DType,
    quantized: bool,
    scale: f64,
    zero_times_nonfinite: bool,
) -> Result<(), String> {
    if quantized && !got.dtype().is_float() {
        return bits::same_type(got, want).map_err(|e| format!("{what}: {e}"));
    }
    if exact || !got.dtype().is_float() || got.dtype() != want.dtype() {
        return same_bits(what, got, want);
    }
    let tol = tolerance(got.dtype()).max(tolerance(loosest));
    if got.shape() != want.shape() {
        return same_bits(what, got, want);
    }
    // Rounding residues scale with the magnitudes that were summed, not
    // with the result's (a gradient that cancels to near zero).
    let tol_abs = tol * (1.0 + scale);
    let (g, w) = (
        got.cast(DType::F64).to_vec::<f64>(),
        want.cast(DType::F64).to_vec::<f64>(),
    );
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a.is_nan() && b.is_nan())
            || a == b
            || (a - b).abs() <= tol_abs + tol * b.abs()
            || (zero_times_nonfinite && a.is_nan());
        if !ok {
            return Err(format!(
                "{what}, element {i}: jit {a:e}, eager {b:e} (beyond {tol:e} of 1 + |eager| + {scale:e})\njit:   {got}\neager: {want}"
            ));
        }
    }
    Ok(())
}

fn tolerance(d: DType) -> f64 {
    match d {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        DType::F32 => 1e-4,
        DType::F64 => 1e-10,
        _ => 0.0,
    }
}

fn same_bits(what: &str, got: &Tensor, want: &Tensor) -> Result<(), String> {
    bits::same_bits(got, want).map_err(|e| format!("{what}, {e}"))
}

/// Per variable of `g`: the largest finite magnitude among the float values
/// it depends on (itself included), from running `g`'s equations eagerly on
/// `args` (the case's fresh leaves). A sum's rounding error is relative to
/// its terms, and a gradient's terms are these values and their products.
fn magnitudes(g: &tolk::Graph, args: &[Tensor]) -> Vec<f64> {
    let mut vals: Vec<Option<Tensor>> = vec![None; g.avals.len()];
    let mut scale = vec![0.0f64; g.avals.len()];
    let own = |t: &Tensor| -> f64 {
        if !t.dtype().is_float() {
            return 0.0;
        }
        t.cast(DType::F64)
            .to_vec::<f64>()
            .into_iter()
            .filter(|x| x.is_finite())
            .fold(0.0, |m, x| m.max(x.abs()))
    };
    for (&v, t) in g.inputs.iter().zip(args) {
        scale[v] = own(t);
        vals[v] = Some(t.clone());
    }
    for (v, t) in &g.consts {
        scale[*v] = own(t);
        vals[*v] = Some(t.clone());
    }
    for e in &g.eqns {
        let ins: Vec<&Tensor> = e
            .inputs
            .iter()
            .map(|&i| vals[i].as_ref().unwrap())
            .collect();
        let before = e.inputs.iter().map(|&i| scale[i]).fold(0.0, f64::max);
        match &e.op {
            tolk::Op::Prim(p) => {
                let out = nx::raw::eval(p.clone(), &ins);
                scale[e.out()] = before.max(own(&out));
                vals[e.out()] = Some(out);
            }
            tolk::Op::Loop(lp) => {
                // Every value of every step counts.
                let (nk, nc) = (lp.n_consts, lp.n_carry);
                let mut carry: Vec<Tensor> =
                    ins[nk..nk + nc].iter().map(|t| (*t).clone()).collect();
                let mut inner = before;
                for i in 0..lp.length {
                    let t = if lp.reverse { lp.length - 1 - i } else { i };
                    let mut args: Vec<Tensor> = ins[..nk].iter().map(|t| (*t).clone()).collect();
                    args.extend(carry.iter().cloned());
                    args.extend(ins[nk + nc..].iter().map(|x| x.get(t)));
                    inner = magnitudes(&lp.body, &args)
                        .into_iter()
                        .fold(inner, f64::max);
                    carry = lp.body.eval(&args)[..nc].to_vec();
                }
                for (&o, t) in e.outs.iter().zip(lp.eval(&ins)) {
                    scale[o] = inner;
                    vals[o] = Some(t);
                }
            }
        }
    }
    scale
}

/// Whether `g` (or a loop body inside it) casts a float to an integer or
/// compares floats: a value within the bound can land on another integer.
fn quantizes(g: &tolk::Graph) -> bool {
    g.eqns.iter().any(|e| {
        let from = g.aval(e.inputs.first().copied().unwrap_or(e.outs[0])).dtype;
        match &e.op {
            tolk::Op::Prim(nx::Prim::Cast(to)) => from.is_float() && !to.is_float(),
            tolk::Op::Prim(nx::Prim::Compare(_)) => from.is_float(),
            tolk::Op::Prim(_) => false,
            tolk::Op::Loop(lp) => quantizes(&lp.body),
        }
    })
}

/// Whether `g` or a loop body inside it has an equation `pick` selects.
fn has_eqn(g: &tolk::Graph, pick: &dyn Fn(&nx::Prim) -> bool) -> bool {
    g.eqns.iter().any(|e| match &e.op {
        tolk::Op::Prim(p) => pick(p),
        tolk::Op::Loop(lp) => has_eqn(&lp.body, pick),
    })
}

// ---------------------------------------------------------------------------
// Running cases.

/// One case ready to run: the program and its leaves (fresh tensors for the
/// jit and for the eager run, since a writeback mutates them).
struct Case {
    seed: u64,
    prog: Prog,
}

fn leaves(p: &Prog) -> (Vec<Tensor>, Vec<Tensor>) {
    let mut args = vec![];
    let mut caps = vec![];
    for i in &p.inputs {
        if i.captured {
            caps.push(make_input(i));
        } else {
            args.push(make_input(i));
        }
    }
    (args, caps)
}

/// Eager outputs, then the args after the call.
fn eager(p: &Prog) -> (Vec<Tensor>, Vec<Tensor>) {
    let (args, caps) = leaves(p);
    let outs = run(p, &args, &caps);
    (outs, args)
}

/// Runs `cases` as one jitted function (each on its own leaves) and checks
/// each against eager; per case what differs, or `Ok(scale)`: the largest
/// magnitude scale its outputs were compared with (0 when bit for bit).
fn check_batch(cases: &[&Case], device: &str) -> Result<Vec<Result<f64, String>>, String> {
    let mut all_args = vec![];
    let mut all_caps = vec![];
    let mut spans = vec![];
    for c in cases {
        let (a, k) = leaves(&c.prog);
        spans.push((all_args.len(), a.len()));
        all_args.extend(a);
        all_caps.push(k);
    }
    let f = |xs: &Vec<Tensor>| -> Vec<Vec<Tensor>> {
        cases
            .iter()
            .zip(&spans)
            .zip(&all_caps)
            .map(|((c, &(lo, n)), caps)| run(&c.prog, &xs[lo..lo + n], caps))
            .collect()
    };
    let jf = if device == "CPU" {
        rune::jit(f)
    } else {
        let opts = rune::JitOpts {
            device: device.into(),
            donate: false,
        };
        rune::jit_with(f, opts)
    };
    let got = compiled_call(&jf, &all_args)?;
    Ok(cases
        .iter()
        .zip(&spans)
        .zip(&got)
        .zip(&all_caps)
        .map(|(((c, &(lo, n)), outs), caps)| {
            let (want, want_args) = eager(&c.prog);
            if outs.len() != want.len() {
                return Err(format!("{} outputs, eager {}", outs.len(), want.len()));
            }
            // A gradient adds reductions (the transpose of a broadcast), which
            // fuse with their computed input like any other: exact only if the
            // staged program has none.
            let mine = all_args[lo..lo + n].to_vec();
            let staged = rune::make_graph(|xs: &Vec<Tensor>| run(&c.prog, xs, caps), &mine);
            let reduces = has_eqn(&staged, &|p| matches!(p, nx::Prim::Reduce { .. }));
            let exact = !c.prog.library && !reduces;
            // A float value that differs within the bound and is then cast
            // to an integer (or compared) can land on another integer: a
            // sum of f32 values near 2^31 (ulp 256) floored and cast to
            // i32, then multiplied (seed 3000878). Non-float results of
            // such programs are checked for shape and dtype only.
            let quantized = !exact && quantizes(&staged);
            let loosest = staged
                .avals
                .iter()
                .map(|a| a.dtype)
                .filter(|d| d.is_float())
                .max_by(|a, b| tolerance(*a).total_cmp(&tolerance(*b)))
                .unwrap_or(DType::F64);
            let scale = magnitudes(&staged, &leaves(&c.prog).0);
            // Reverse mode of a staged scan, as JAX's, gives every step a
            // cotangent for each input the step's vjp reaches (zero at a
            // step where nothing flows to it; an input it never reaches
            // gets none, `loops::Reverse::zero`), where the eager tape
            // skips a step's rule with none: where a partial derivative is
            // NaN or infinite (values past f32's range, a NaN input), the
            // loop's 0 * partial is NaN and eager has no term. (`scale`
            // counts finite values only: the inputs' 1e30, exactly 1e30 in
            // an f64 program, is the sign that `exp` of it overflowed; seed
            // 1000082 missed the acceptance by `> 1e30`.)
            let nonfinite = want.iter().any(|w| {
                w.dtype().is_float()
                    && w.cast(DType::F64)
                        .to_vec::<f64>()
                        .iter()
                        .any(|x| !x.is_finite())
            }) || scale.iter().any(|&m| m >= 1e30);
            let zero_times_nonfinite = c.prog.grad
                && c.prog.instrs.iter().any(|i| matches!(i, Instr::Scan(..)))
                && nonfinite;
            for (j, (g, w)) in outs.iter().zip(&want).enumerate() {
                let s = scale[staged.outputs[j]];
                let what = format!("output {j}");
                agree(
                    &what,
                    g,
                    w,
                    exact,
                    loosest,
                    quantized,
                    s,
                    zero_times_nonfinite,
                )?;
            }
            for (j, (g, w)) in all_args[lo..lo + n].iter().zip(&want_args).enumerate() {
                let v = staged.writebacks.iter().rev().find(|wb| wb.0 == j);
                let s = scale[v.map_or(staged.inputs[j], |wb| wb.1)];
                agree(
                    &format!("argument {j} after the call"),
                    g,
                    w,
                    exact,
                    loosest,
                    quantized,
                    s,
                    false,
                )?;
            }
            let widest = staged.outputs.iter().map(|&v| scale[v]).fold(0.0, f64::max);
            Ok(if exact { 0.0 } else { widest })
        })
        .collect())
}

#[derive(Default, Debug)]
struct Counts {
    cases: usize,
    elementwise_only: usize,
    with_library: usize,
    grad: usize,
    /// Cases with a `scan` (a staged loop).
    scans: usize,
    /// Cases with a gather (`take`), a scatter-add (`segment_sum`,
    /// `index_add`) or a pool, and those with one inside a scan's body.
    gathers: usize,
    scatters: usize,
    pools: usize,
    in_scan_bodies: usize,
    assign: usize,
    noncontiguous_inputs: usize,
    captured: usize,
    eager_panics: usize,
    /// Cases compared within a bound whose magnitude scale passed 100 (the
    /// bound is widest there).
    scaled_past_100: usize,
    /// On a device: cases refused naming it (operations it does not run).
    refused: usize,
    failures: Vec<String>,
}

/// Whether `instrs` (with `in_body`: only those inside a scan's body),
/// scans' bodies included, hold an instruction `pick` selects.
fn has_instr(instrs: &[Instr], pick: &dyn Fn(&Instr) -> bool, in_body: bool) -> bool {
    instrs.iter().any(|i| match i {
        Instr::Scan(_, _, body, _) => has_instr(&body.instrs, pick, false),
        i => !in_body && pick(i),
    })
}

/// Whether the program runs eagerly (the generator tracks shapes, but an
/// operation may still refuse an operand, e.g. a dtype it does not take).
fn eager_ok(p: &Prog) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| eager(p))).is_ok();
    std::panic::set_hook(hook);
    ok
}

/// `n` cases from `first_seed` on `device` (`"CPU"`, or `"CUDA"` on the
/// emulated device), `batch` programs per jitted function.
fn fuzz(first_seed: u64, n: usize, batch: usize, device: &str) -> Counts {
    let mut counts = Counts::default();
    let mut pending: Vec<Case> = vec![];
    let mut seed = first_seed;
    let flush = |pending: &mut Vec<Case>, counts: &mut Counts| {
        let refs: Vec<&Case> = pending.iter().collect();
        let results = match check_batch(&refs, device) {
            Ok(r) => r,
            Err(_) => refs
                .iter()
                .map(|c| check_batch(&[c], device).and_then(|mut r| r.remove(0)))
                .collect(),
        };
        for (c, r) in pending.iter().zip(results) {
            match r {
                Ok(scale) => counts.scaled_past_100 += (scale > 100.0) as usize,
                // Refused at trace time, naming the device.
                Err(e)
                    if device != "CPU" && e.starts_with("JitError") && e.contains("\"CUDA\"") =>
                {
                    counts.refused += 1
                }
                Err(e) => counts.failures.push(format!(
                    "seed {}: {e}\nprogram: {:#?}\nreproduce: {}",
                    c.seed,
                    c.prog,
                    reproducer(c.seed, device)
                )),
            }
        }
        pending.clear();
        if std::env::var_os("JIT_FUZZ_PROGRESS").is_some() {
            eprintln!(
                "jit_fuzz: {} cases, {} failures",
                counts.cases,
                counts.failures.len()
            );
            if let Some(f) = counts.failures.last() {
                eprintln!("{f}");
            }
        }
    };
    while counts.cases < n {
        let prog = generate(seed);
        let this = seed;
        seed += 1;
        if !eager_ok(&prog) {
            counts.eager_panics += 1;
            continue;
        }
        counts.cases += 1;
        if prog.library {
            counts.with_library += 1;
        } else {
            counts.elementwise_only += 1;
        }
        counts.grad += prog.grad as usize;
        counts.scans += prog.instrs.iter().any(|i| matches!(i, Instr::Scan(..))) as usize;
        let gather = |i: &Instr| matches!(i, Instr::Take(..));
        let scatter = |i: &Instr| matches!(i, Instr::SegmentSum(..) | Instr::IndexAdd(..));
        let pool = |i: &Instr| matches!(i, Instr::Pool(..));
        counts.gathers += has_instr(&prog.instrs, &gather, false) as usize;
        counts.scatters += has_instr(&prog.instrs, &scatter, false) as usize;
        counts.pools += has_instr(&prog.instrs, &pool, false) as usize;
        counts.in_scan_bodies += has_instr(
            &prog.instrs,
            &|i: &Instr| gather(i) || scatter(i) || pool(i),
            true,
        ) as usize;
        counts.assign += prog.assign.is_some() as usize;
        counts.noncontiguous_inputs +=
            prog.inputs.iter().any(|i| i.layout != NonContig::No) as usize;
        counts.captured += prog.inputs.iter().any(|i| i.captured) as usize;
        pending.push(Case { seed: this, prog });
        if pending.len() == batch {
            flush(&mut pending, &mut counts);
        }
    }
    if !pending.is_empty() {
        flush(&mut pending, &mut counts);
    }
    counts
}

fn report(c: &Counts, secs: f64) {
    println!(
        "{} cases in {secs:.1} s: {} elementwise/movement-only, {} with reductions or matmul, \
         {} grad, {} with a scan, {} with a gather, {} with a scatter-add, {} with a pool, \
         {} with one of those three inside a scan, {} with a writeback, \
         {} with non-contiguous inputs, {} with captures \
         ({} generated programs skipped: they panic eagerly; {} compared within a bound \
         scaled past 100 by their values' magnitudes); {} failures",
        c.cases,
        c.elementwise_only,
        c.with_library,
        c.grad,
        c.scans,
        c.gathers,
        c.scatters,
        c.pools,
        c.in_scan_bodies,
        c.assign,
        c.noncontiguous_inputs,
        c.captured,
        c.eager_panics,
        c.scaled_past_100,
        c.failures.len()
    );
    for f in c.failures.iter().take(5) {
        println!("---\n{f}");
    }
    assert!(
        c.failures.is_empty(),
        "{} of {} cases differ (first: {})",
        c.failures.len(),
        c.cases,
        c.failures[0]
    );
}

/// The one-line command that reruns case `seed` alone (and prints its
/// program), and the one that shrinks it.
fn reproducer(seed: u64, device: &str) -> String {
    let (env, test) = match device {
        "CPU" => ("", "every_random_program_under_jit_equals_eager"),
        _ => (
            "JIT_FUZZ_DEVICE=CUDA ",
            "every_random_program_under_jit_equals_eager",
        ),
    };
    format!(
        "{env}JIT_FUZZ_ONLY={seed} cargo test --release -p rune --test jit_fuzz {test} -- --nocapture\n\
         shrink: JIT_FUZZ_SHRINK={seed} cargo test --release -p rune --test jit_fuzz \
         shrink_a_failing_seed -- --ignored --nocapture"
    )
}

/// The CI run's first seed: `JIT_FUZZ_SEED`, else one taken from the
/// commit being tested (so every landing covers programs no earlier one
/// did), else 1 outside a git checkout.
fn first_seed() -> u64 {
    if let Ok(s) = std::env::var("JIT_FUZZ_SEED") {
        return s.parse().expect("JIT_FUZZ_SEED is a number");
    }
    let head = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| u64::from_str_radix(String::from_utf8_lossy(&o.stdout).get(..12)?, 16).ok());
    match head {
        // Past the long mode's default range (1,000,000 on).
        Some(h) => 100_000_000 + h % 1_000_000_000,
        None => 1,
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_random_program_under_jit_equals_eager() {
    if let Ok(s) = std::env::var("JIT_FUZZ_ONLY") {
        let seed: u64 = s.parse().unwrap();
        let device = std::env::var("JIT_FUZZ_DEVICE").unwrap_or_else(|_| "CPU".into());
        if device != "CPU" {
            tolk::device::emulated::install_for_tests();
        }
        println!("{:#?}", generate(seed));
        let c = fuzz(seed, 1, 1, &device);
        return report(&c, 0.0);
    }
    let start = Instant::now();
    let first = first_seed();
    let n = env_usize("JIT_FUZZ_CI_CASES", CI_CASES);
    println!(
        "jit_fuzz: seeds {first}..{} (JIT_FUZZ_SEED={first} reruns them)",
        first + n as u64
    );
    let c = fuzz(first, n, BATCH, "CPU");
    report(&c, start.elapsed().as_secs_f64());
    assert!(c.elementwise_only > 50 && c.with_library > 50 && c.grad > 30 && c.assign > 30);
    assert!(c.gathers > 30 && c.scatters > 30 && c.pools > 20 && c.in_scan_bodies > 20);
}

/// The CI seeds' first programs under jit on `"CUDA"`, run on the emulated
/// device (`tolk::device::emulated`), against eager with the same bounds
/// (every reduction is a kernel there, so only programs without one are
/// held bit for bit): staged scans driven from the host, gathers,
/// scatter-adds and pools as kernels, products through the device gemm;
/// programs with an operation the device does not run are refused naming
/// it and counted. With `RUNE_TEST_REAL_CUDA=1` the same programs run on
/// the real driver instead (`bench/gpu_check.sh` does).
#[test]
fn random_programs_on_the_emulated_cuda_device_equal_eager() {
    if !std::env::var("RUNE_TEST_REAL_CUDA").is_ok_and(|v| v == "1") {
        tolk::device::emulated::install_for_tests();
    }
    let start = Instant::now();
    let n = env_usize("JIT_FUZZ_CUDA_CASES", 120);
    let c = fuzz(first_seed(), n, BATCH, "CUDA");
    println!(
        "on the emulated CUDA device: {} of {} cases run, {} refused naming the device",
        c.cases - c.refused,
        c.cases,
        c.refused
    );
    report(&c, start.elapsed().as_secs_f64());
    assert!(
        c.cases - c.refused > n / 2,
        "only {} ran",
        c.cases - c.refused
    );
}

/// The long mode (see the module doc for the sanitized command).
#[test]
#[ignore = "long: 10^4 cases; run with --ignored (sanitized command in the module doc)"]
fn long_fuzz() {
    let start = Instant::now();
    let n = env_usize("JIT_FUZZ_CASES", 10_000);
    let first = env_usize("JIT_FUZZ_SEED", 1_000_000) as u64;
    let device = std::env::var("JIT_FUZZ_DEVICE").unwrap_or_else(|_| "CPU".into());
    if device != "CPU" {
        tolk::device::emulated::install_for_tests();
    }
    let c = fuzz(first, n, 25, &device);
    if device != "CPU" {
        println!(
            "on {device}: {} of {} cases run, {} refused naming the device",
            c.cases - c.refused,
            c.cases,
            c.refused
        );
    }
    report(&c, start.elapsed().as_secs_f64());
}

/// `JIT_FUZZ_SHRINK=seed`: the smallest variant of that seed's program
/// that still differs under jit (see `common/fuzz_shrink.rs`).
#[test]
#[ignore = "a tool: JIT_FUZZ_SHRINK=seed prints a failing program shrunk"]
fn shrink_a_failing_seed() {
    let seed: u64 = std::env::var("JIT_FUZZ_SHRINK")
        .expect("JIT_FUZZ_SHRINK=seed")
        .parse()
        .unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let small = shrink(&generate(seed));
    std::panic::set_hook(hook);
    println!("{small:#?}");
    let case = Case { seed, prog: small };
    println!("{:?}", check_batch(&[&case], "CPU"));
}

/// A view of an input leaf taken before `assign` on that leaf: eagerly the
/// view aliases the leaf and sees the new value; what does jit return?
#[test]
fn view_of_an_assigned_input_aliases() {
    let f = |x: &Tensor| {
        let v = x.reshape(&[4]);
        x.assign(&(x * 2.0));
        v.add(&v)
    };
    let x0 = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    let want = f(&x0.copy());
    let x1 = x0.copy();
    let got = rune::jit(f).call(&x1);
    assert_eq!(got.to_vec::<f32>(), want.to_vec::<f32>());
}
