//! c_ops against nx's eager kernels, bit for bit: every (op, dtype) pair the
//! eager kernel accepts is rendered as one C function over an array of edge
//! cases and random values; all of them go into one shared object (one
//! compiler run), whose results are compared with the eager ones.

#[path = "../../nx/tests/common/skip.rs"]
mod skip;

use nx::{bind, BinaryOp, CmpOp, DType, Prim, Tensor, UnaryOp};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use tolk::codegen::c as c_ops;

const ALL_UNARY: [UnaryOp; 31] = {
    use UnaryOp::*;
    [
        Neg, Abs, Sign, Sqrt, Rsqrt, Recip, Exp, Exp2, Log, Log2, Log1p, Expm1, Sin, Cos, Tan,
        Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh, Atanh, Erf, Sigmoid, Floor, Ceil, Round,
        Trunc, Not,
    ]
};
const ALL_BINARY: [BinaryOp; 14] = {
    use BinaryOp::*;
    [
        Add, Sub, Mul, Div, Rem, Pow, Max, Min, Atan2, And, Or, Xor, Shl, Shr,
    ]
};
const ALL_CMP: [CmpOp; 6] = [
    CmpOp::Lt,
    CmpOp::Le,
    CmpOp::Gt,
    CmpOp::Ge,
    CmpOp::Eq,
    CmpOp::Ne,
];

fn unary_ok(op: UnaryOp, d: DType) -> bool {
    use UnaryOp::*;
    if d.is_float() {
        op != Not
    } else if d == DType::Bool {
        true // Not, and the identity for the rest (the bool kernel's rule)
    } else {
        matches!(op, Neg | Abs | Sign | Not | Floor | Ceil | Round | Trunc)
    }
}

fn binary_ok(op: BinaryOp, d: DType) -> bool {
    use BinaryOp::*;
    if d.is_float() {
        !matches!(op, And | Or | Xor | Shl | Shr)
    } else if d == DType::Bool {
        matches!(op, And | Or | Xor | Min | Max | Mul | Add | Sub)
    } else {
        op != Atan2
    }
}

// ---- values -------------------------------------------------------------

struct Rng(u64);
impl Rng {
    /// splitmix64
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Interesting real values (rounded into each float dtype by `float_bits`).
fn interesting_reals() -> Vec<f64> {
    let mut v = vec![
        0.0,
        1.0,
        0.5,
        1.5,
        2.5,
        3.5,
        -0.5,
        0.25,
        0.75,
        2.0,
        3.0,
        10.0,
        100.0,
        0.1,
        1e-3,
        1e-8,
        1e-30,
        1e-38,
        1e-40,
        1e-45,
        1e-310,
        1e30,
        1e38,
        3.4e38,
        1e300,
        65504.0,
        65519.0,
        65520.0,
        88.7,
        88.72283,
        89.0,
        87.33654,
        103.27893,
        104.0,
        110.0,
        700.0,
        709.78,
        710.0,
        745.2,
        0.84375,
        0.9,
        0.999,
        1.25,
        2.857,
        4.0,
        5.9,
        6.0,
        27.0,
        28.0,
        1.0000001,
        0.49999997,
        127.0,
        127.5,
        128.0,
        255.0,
        255.5,
        256.0,
        32767.5,
        32768.0,
        65535.0,
        65536.0,
        2147483647.0,
        2147483648.0,
        2147483649.0,
        4294967295.0,
        4294967296.0,
        9.223372036854775e18,
        9.223372036854776e18,
        1.8446744073709552e19,
        1e19,
        1e20,
        16777217.0,
        3.14159265358979,
        1.0 / 3.0,
        0.6931471805599453,
        // double-rounding traps for f64 -> f16/bf16: just above a tie
        1.0 + 2f64.powi(-11) + 2f64.powi(-40),
        1.0 + 2f64.powi(-8) + 2f64.powi(-40),
        1.0 + 2f64.powi(-11),
        1.0 + 2f64.powi(-8),
    ];
    let neg: Vec<f64> = v.iter().map(|x| -x).collect();
    v.extend(neg);
    v.extend([
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
    ]);
    v
}

/// Bit patterns of `d` to test: edge cases, then `extra` random ones.
fn float_bits(d: DType, rng: &mut Rng, extra: usize) -> Vec<u64> {
    let mut out: Vec<u64> = Vec::new();
    let reals = interesting_reals();
    match d {
        DType::F32 => {
            out.extend(reals.iter().map(|&x| (x as f32).to_bits() as u64));
            out.extend([
                0x7fc0_0000,
                0xffc0_0000,
                0x7fc1_2345,
                0x7f80_0001,
                0xffa0_0000,
                0x0000_0001,
                0x8000_0001,
                0x007f_ffff,
                0x7f7f_ffff,
                0xff7f_ffff,
            ]);
            for i in 0..extra {
                let x = match i % 3 {
                    0 => f32::from_bits(rng.next() as u32),
                    1 => ((rng.unit() - 0.5) * 40.0) as f32,
                    _ => {
                        let m = (rng.unit() * 60.0 - 30.0).exp();
                        (if rng.next() & 1 == 0 { m } else { -m }) as f32
                    }
                };
                out.push(x.to_bits() as u64);
            }
        }
        DType::F64 => {
            out.extend(reals.iter().map(|&x| x.to_bits()));
            out.extend([
                0x7ff8_0000_0000_0000,
                0xfff8_0000_0000_0000,
                0x7ff8_0000_1234_5678,
                0x7ff0_0000_0000_0001,
                0x0000_0000_0000_0001,
                0x000f_ffff_ffff_ffff,
            ]);
            for i in 0..extra {
                let x = match i % 3 {
                    0 => f64::from_bits(rng.next()),
                    1 => (rng.unit() - 0.5) * 40.0,
                    _ => {
                        let m = (rng.unit() * 120.0 - 60.0).exp();
                        if rng.next() & 1 == 0 {
                            m
                        } else {
                            -m
                        }
                    }
                };
                out.push(x.to_bits());
            }
        }
        // Every bit pattern.
        DType::F16 | DType::BF16 => out.extend(0..=0xffffu64),
        _ => unreachable!(),
    }
    out
}

/// A small set of float bit patterns whose pairs are all tested.
fn float_pair_set(d: DType) -> Vec<u64> {
    let reals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        2.0,
        3.0,
        -3.0,
        0.1,
        7.25,
        -100.0,
        1e-40,
        1e30,
        -1e30,
        65504.0,
        1e300,
        2147483648.0,
    ];
    let mut v: Vec<u64> = match d {
        DType::F32 => reals.iter().map(|&x| (x as f32).to_bits() as u64).collect(),
        DType::F64 => reals.iter().map(|&x: &f64| x.to_bits()).collect(),
        DType::F16 => reals
            .iter()
            .map(|&x| nx::half::f16::from_f64(x).to_bits() as u64)
            .collect(),
        DType::BF16 => reals
            .iter()
            .map(|&x| nx::half::bf16::from_f64(x).to_bits() as u64)
            .collect(),
        _ => unreachable!(),
    };
    let (inf, nan, qnan2, snan) = match d {
        DType::F32 => (
            0x7f80_0000u64,
            0x7fc0_0000u64,
            0xffc0_0001u64,
            0x7f80_0001u64,
        ),
        DType::F64 => (
            0x7ff0_0000_0000_0000,
            0x7ff8_0000_0000_0000,
            0xfff8_0000_0000_0001,
            0x7ff0_0000_0000_0001,
        ),
        DType::F16 => (0x7c00, 0x7e00, 0xfe01, 0x7c01),
        _ => (0x7f80, 0x7fc0, 0xffc1, 0x7f81),
    };
    let sign = 1u64 << (d.size_in_bytes() * 8 - 1);
    v.extend([inf, inf | sign, nan, qnan2, snan, 1, 1 | sign]);
    v
}

fn int_bits(d: DType, rng: &mut Rng, extra: usize) -> Vec<u64> {
    let bits = d.size_in_bytes() as u32 * 8;
    let mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut v: Vec<i64> = vec![
        0, 1, 2, 3, 5, 7, 8, 15, 16, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 1000, 65535,
        -1, -2, -3, -7, -8, -64, -65, -128, -129,
    ];
    let (min, max) = if d.is_signed_int() {
        (-(1i64 << (bits - 2)) * 2, (mask >> 1) as i64)
    } else {
        (0, mask as i64)
    };
    v.extend([min, max, min.wrapping_add(1), max.wrapping_sub(1)]);
    let mut out: Vec<u64> = v.iter().map(|&x| x as u64 & mask).collect();
    for i in 0..extra {
        let r = rng.next();
        out.push(match i % 2 {
            0 => r & mask,
            _ => (r % 200).wrapping_sub(100) & mask,
        });
    }
    out
}

fn values(d: DType, rng: &mut Rng, extra: usize) -> Vec<u64> {
    match d {
        DType::Bool => vec![0, 1],
        d if d.is_float() => float_bits(d, rng, extra),
        d => int_bits(d, rng, extra),
    }
}

fn pair_set(d: DType, rng: &mut Rng) -> Vec<u64> {
    match d {
        DType::Bool => vec![0, 1],
        d if d.is_float() => float_pair_set(d),
        d => {
            let mut v = int_bits(d, rng, 0);
            v.truncate(40);
            v
        }
    }
}

fn is_nan(d: DType, b: u64) -> bool {
    match d {
        DType::F32 => f32::from_bits(b as u32).is_nan(),
        DType::F64 => f64::from_bits(b).is_nan(),
        DType::F16 => b & 0x7fff > 0x7c00,
        DType::BF16 => b & 0x7fff > 0x7f80,
        _ => false,
    }
}

// ---- tensors <-> bytes ------------------------------------------------------

fn tensor(d: DType, bits: &[u64]) -> Tensor {
    nx::with_dtype!(d, T => {
        // Little-endian: the element is the low bytes of its u64 pattern.
        let v: Vec<T> = bits.iter().map(|b| unsafe { std::mem::transmute_copy::<u64, T>(b) }).collect();
        Tensor::from_vec(v, &[bits.len()])
    })
}

fn bytes(t: &Tensor) -> Vec<u8> {
    nx::with_dtype!(t.dtype(), T => {
        let v = t.to_vec::<T>();
        let n = v.len() * std::mem::size_of::<T>();
        unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, n) }.to_vec()
    })
}

fn elem(d: DType, bytes: &[u8], i: usize) -> u64 {
    let s = d.size_in_bytes();
    let mut b = [0u8; 8];
    b[..s].copy_from_slice(&bytes[i * s..(i + 1) * s]);
    u64::from_le_bytes(b)
}

// ---- cases ------------------------------------------------------------------

struct Case {
    name: String,
    expr: String,
    ins: Vec<(DType, Vec<u8>)>,
    out: DType,
    want: Vec<u8>,
    n: usize,
    /// Elements where any NaN is accepted for a NaN (Rust's payload is unspecified).
    loose: Vec<bool>,
}

fn operand(k: usize) -> String {
    format!("x{k}[i]")
}

/// Each operand appears at most once in the expression (so it is evaluated
/// at most once, whatever the caller substitutes).
fn check_single_use(c: &Case) {
    for k in 0..c.ins.len() {
        let uses = c.expr.matches(&operand(k)).count();
        assert!(
            uses <= 1,
            "{}: operand {k} used {uses} times in {}",
            c.name,
            c.expr
        );
    }
}

fn case(name: String, expr: String, ins: &[&Tensor], want: Tensor, loose: Vec<bool>) -> Case {
    let n = want.numel();
    Case {
        name,
        expr,
        ins: ins.iter().map(|t| (t.dtype(), bytes(t))).collect(),
        out: want.dtype(),
        want: bytes(&want),
        n,
        loose,
    }
}

fn build_cases() -> Vec<Case> {
    let mut rng = Rng(0x5eed);
    let mut cases = Vec::new();
    for d in DType::ALL {
        let xs = values(d, &mut rng, 6000);
        let x = tensor(d, &xs);
        for op in ALL_UNARY.into_iter().filter(|&op| unary_ok(op, d)) {
            let want = bind(Prim::Unary(op), &[&x]);
            let expr = c_ops::unary(op, d, &operand(0));
            // The fast form where its guard passes, the exact one elsewhere:
            // the kernels' two passes in one expression (GNU C).
            if let Some((fast, key)) = c_ops::unary_vectorized(op, d, "x") {
                let expr = format!(
                    "({{ {} x = {}; TK_GUARD_FAILED({key}) ? {} : {fast}; }})",
                    c_ops::c_type(d),
                    operand(0),
                    c_ops::unary(op, d, "x")
                );
                cases.push(case(
                    format!("fast {op:?} {d}"),
                    expr,
                    &[&x],
                    want.clone(),
                    vec![],
                ));
            }
            cases.push(case(format!("{op:?} {d}"), expr, &[&x], want, vec![]));
        }

        // Binary ops: all pairs of a small set, then random pairs.
        let set = pair_set(d, &mut rng);
        let (mut a, mut b): (Vec<u64>, Vec<u64>) = (Vec::new(), Vec::new());
        for &p in &set {
            for &q in &set {
                a.push(p);
                b.push(q);
            }
        }
        if d != DType::Bool {
            for _ in 0..4000 {
                a.push(xs[(rng.next() % xs.len() as u64) as usize]);
                b.push(xs[(rng.next() % xs.len() as u64) as usize]);
            }
            // Small second operands (shift amounts, exponents, divisors).
            for _ in 0..1000 {
                a.push(xs[(rng.next() % xs.len() as u64) as usize]);
                b.push(if d.is_float() {
                    tensor_bits_of(d, (rng.next() % 9) as f64 - 2.0)
                } else {
                    (rng.next() % 70).wrapping_sub(2) & int_mask(d)
                });
            }
        }
        let loose: Vec<bool> = a
            .iter()
            .zip(&b)
            .map(|(&p, &q)| is_nan(d, p) && is_nan(d, q))
            .collect();
        let (ta, tb) = (tensor(d, &a), tensor(d, &b));
        for op in ALL_BINARY.into_iter().filter(|&op| binary_ok(op, d)) {
            let want = bind(Prim::Binary(op), &[&ta, &tb]);
            let expr = c_ops::binary(op, d, &operand(0), &operand(1));
            let name = format!("{op:?} {d}");
            cases.push(case(name, expr, &[&ta, &tb], want, loose.clone()));
        }
        for op in ALL_CMP {
            let want = bind(Prim::Compare(op), &[&ta, &tb]);
            let expr = c_ops::compare(op, d, &operand(0), &operand(1));
            cases.push(case(format!("{op:?} {d}"), expr, &[&ta, &tb], want, vec![]));
        }
        let c: Vec<u64> = (0..a.len()).map(|_| rng.next() & 1).collect();
        let tc = tensor(DType::Bool, &c);
        let want = bind(Prim::Where, &[&tc, &ta, &tb]);
        let expr = c_ops::select(d, &operand(0), &operand(1), &operand(2));
        cases.push(case(
            format!("where {d}"),
            expr,
            &[&tc, &ta, &tb],
            want,
            vec![],
        ));

        for to in DType::ALL {
            let want = bind(Prim::Cast(to), &[&x]);
            let expr = c_ops::cast(d, to, &operand(0));
            cases.push(case(format!("cast {d}->{to}"), expr, &[&x], want, vec![]));
        }
    }
    cases
}

fn int_mask(d: DType) -> u64 {
    let bits = d.size_in_bytes() * 8;
    if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The bit pattern of the float `v` in dtype `d`.
fn tensor_bits_of(d: DType, v: f64) -> u64 {
    let t = Tensor::full(&[1], v, d);
    elem(d, &bytes(&t), 0)
}

// ---- C ------------------------------------------------------------------------

fn c_source(cases: &[Case], literal_fns: &str) -> String {
    let mut s = String::from(c_ops::PRELUDE);
    s.push('\n');
    for (k, c) in cases.iter().enumerate() {
        let _ = writeln!(s, "/* {} */", c.name);
        let _ = writeln!(
            s,
            "void tk_case_{k}(const void *const *in, void *out, long n) {{"
        );
        for (j, (d, _)) in c.ins.iter().enumerate() {
            let t = c_ops::c_type(*d);
            let _ = writeln!(s, "    const {t} *restrict x{j} = (const {t} *)in[{j}];");
        }
        let t = c_ops::c_type(c.out);
        let _ = writeln!(s, "    {t} *restrict o = ({t} *)out;");
        let _ = writeln!(s, "    for (long i = 0; i < n; i++) o[i] = {};\n}}", c.expr);
    }
    s.push_str(literal_fns);
    s
}

fn compiler() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".to_string())
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tolk_c_ops_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn compile(cc: &str, src: &Path, so: &Path, extra: &[&str]) {
    let t = std::time::Instant::now();
    let out = Command::new(cc)
        .args(tolk::build::flags())
        .args(extra)
        .args(["-shared", "-fPIC", "-o"])
        .arg(so)
        .arg(src)
        .arg("-lm")
        .output()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{cc} {}: {:.1}s", src.display(), t.elapsed().as_secs_f64());
}

type CaseFn = unsafe extern "C" fn(*const *const u8, *mut u8, std::os::raw::c_long);

fn describe(d: DType, b: u64) -> String {
    match d {
        DType::F32 => format!("{:e} (0x{b:08x})", f32::from_bits(b as u32)),
        DType::F64 => format!("{:e} (0x{b:016x})", f64::from_bits(b)),
        DType::F16 => format!("{} (0x{b:04x})", nx::half::f16::from_bits(b as u16)),
        DType::BF16 => format!("{} (0x{b:04x})", nx::half::bf16::from_bits(b as u16)),
        _ => format!("0x{b:x}"),
    }
}

// ---- literals -------------------------------------------------------------------

fn literal_values() -> Vec<f64> {
    let mut v = interesting_reals();
    v.extend([
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff8_0000_1234_5678),
        -0.0,
    ]);
    v.extend([
        -2147483648.0,
        -9.223372036854775808e18,
        300.0,
        -300.0,
        1e-320,
    ]);
    v
}

fn literal_fns() -> String {
    let mut s = String::new();
    for d in DType::ALL {
        let t = c_ops::c_type(d);
        let _ = writeln!(s, "void tk_literals_{}(void *out) {{", d.name());
        let _ = writeln!(s, "    {t} *o = ({t} *)out;");
        for (i, &v) in literal_values().iter().enumerate() {
            let _ = writeln!(s, "    o[{i}] = {};", c_ops::literal(d, v));
        }
        s.push_str("}\n");
    }
    s
}

#[test]
fn every_elementwise_op_matches_eager_bit_for_bit() {
    let cases = build_cases();
    for c in &cases {
        check_single_use(c);
    }
    let dir = scratch_dir("ops");
    let (src, so) = (dir.join("ops.c"), dir.join("ops.so"));
    std::fs::write(&src, c_source(&cases, &literal_fns())).unwrap();
    compile(&compiler(), &src, &so, &[]);
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();

    let mut failures = Vec::new();
    let mut loose_used = 0;
    for (k, c) in cases.iter().enumerate() {
        let f: libloading::Symbol<CaseFn> =
            unsafe { lib.get(format!("tk_case_{k}\0").as_bytes()) }.unwrap();
        let ptrs: Vec<*const u8> = c.ins.iter().map(|(_, b)| b.as_ptr()).collect();
        let mut got = vec![0u8; c.want.len()];
        unsafe { f(ptrs.as_ptr(), got.as_mut_ptr(), c.n as _) };
        let mut bad = 0;
        let mut first = String::new();
        for i in 0..c.n {
            let (g, w) = (elem(c.out, &got, i), elem(c.out, &c.want, i));
            let loose_ok = c.loose.get(i) == Some(&true) && is_nan(c.out, g) && is_nan(c.out, w);
            loose_used += (g != w && loose_ok) as usize;
            let ok = g == w || loose_ok;
            if !ok {
                if bad == 0 {
                    let args: Vec<String> = c
                        .ins
                        .iter()
                        .map(|(d, b)| describe(*d, elem(*d, b, i)))
                        .collect();
                    first = format!(
                        "f({}) = {}, eager {}",
                        args.join(", "),
                        describe(c.out, g),
                        describe(c.out, w)
                    );
                }
                bad += 1;
            }
        }
        if bad > 0 {
            failures.push(format!(
                "{} [{}]: {bad}/{} differ, e.g. {first}",
                c.name, c.expr, c.n
            ));
        }
    }

    // Literals against Prim::Full.
    let vals = literal_values();
    for d in DType::ALL {
        let f: libloading::Symbol<unsafe extern "C" fn(*mut u8)> =
            unsafe { lib.get(format!("tk_literals_{}\0", d.name()).as_bytes()) }.unwrap();
        let mut got = vec![0u8; vals.len() * d.size_in_bytes()];
        unsafe { f(got.as_mut_ptr()) };
        for (i, &v) in vals.iter().enumerate() {
            let want = bind(
                Prim::Full {
                    shape: vec![],
                    dtype: d,
                    value: v.into(),
                },
                &[],
            );
            let (g, w) = (elem(d, &got, i), elem(d, &bytes(&want), 0));
            if g != w {
                failures.push(format!(
                    "literal {d} {v:e} [{}]: {} vs eager {}",
                    c_ops::literal(d, v),
                    describe(d, g),
                    describe(d, w)
                ));
            }
        }
    }
    eprintln!(
        "{} cases checked; {loose_used} two-NaN results differed only in payload",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tk_exp_f32_fast` (the vectorized form of f32 Exp) gives the exact
/// form's bits for every f32 its guard lets through (checked over all 2^32
/// bit patterns, in C, in a few seconds), and the guard lets through every
/// x <= 68 (-inf and subnormals included).
#[test]
fn fast_exp_equals_exact_exp_for_every_f32_its_guard_passes() {
    let (fast, key) = c_ops::unary_vectorized(UnaryOp::Exp, DType::F32, "x").unwrap();
    let exact = c_ops::unary(UnaryOp::Exp, DType::F32, "x");
    let src = format!(
        "{}\n\
         /* Over every f32: [0] how many pass the guard, [1] how many of those\n\
          * differ, [2] how many x <= 68 fail it; [3] whether the guards'\n\
          * threshold is not the limit's bits. */\n\
         void tk_check(uint64_t lo, uint64_t hi, uint64_t *counts) {{\n\
             uint64_t pass = 0, differ = 0, refused = 0;\n\
             for (uint64_t u = lo; u < hi; u++) {{\n\
                 float x = tk_f32_from_bits((uint32_t)u);\n\
                 uint64_t in = !TK_GUARD_FAILED({key});\n\
                 pass += in;\n\
                 differ += in & (tk_f32_bits({fast}) != tk_f32_bits({exact}));\n\
                 refused += !in & (x <= 68.0f);\n\
             }}\n\
             counts[0] = pass; counts[1] = differ; counts[2] = refused;\n\
             counts[3] = TK_GUARD_MAX != tk_f32_bits(TK_EXP_FAST_T_LIMIT);\n\
         }}\n",
        c_ops::PRELUDE
    );
    let dir = scratch_dir("exp_fast");
    let (c, so) = (dir.join("exp_fast.c"), dir.join("exp_fast.so"));
    std::fs::write(&c, src).unwrap();
    compile(&compiler(), &c, &so, &[]);
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let check: libloading::Symbol<unsafe extern "C" fn(u64, u64, *mut u64)> =
        unsafe { lib.get(b"tk_check\0") }.unwrap();
    // The 2^32 patterns in one part per core.
    let parts = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let per_part: Vec<[u64; 4]> = std::thread::scope(|sc| {
        let check = &check;
        let handles: Vec<_> = (0..parts)
            .map(|p| {
                sc.spawn(move || {
                    let (lo, hi) = ((p << 32) / parts, ((p + 1) << 32) / parts);
                    let mut c = [0u64; 4];
                    unsafe { check(lo, hi, c.as_mut_ptr()) };
                    c
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut counts = [0u64; 4];
    for c in &per_part {
        for i in 0..3 {
            counts[i] += c[i];
        }
        counts[3] |= c[3];
    }
    // All negative non-NaN patterns, and the positive ones up to 68.
    let at_least = (0x8000_0000u64 - 0x7f_ffff) + u64::from(68f32.to_bits()) + 1;
    assert!(
        counts[0] >= at_least,
        "{} pass, want >= {at_least}",
        counts[0]
    );
    assert_eq!(
        counts[1..],
        [0, 0, 0],
        "[differ, refused, TK_GUARD_MAX is not the limit's bits]"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The prelude is valid C99 and C11 (pedantic, warnings as errors) for gcc
/// under CFLAGS, and its software f16 conversions (used without F16C) give
/// the hardware's bits.
#[test]
fn prelude_builds_with_gcc_and_soft_f16_matches_f16c() {
    let gcc = "gcc";
    if Command::new(gcc).arg("--version").output().is_err() {
        skip::skip("gcc", "no gcc on the PATH");
        return;
    }
    let dir = scratch_dir("gcc");
    let src = dir.join("check.c");
    let mut s = String::from(c_ops::PRELUDE);
    s.push_str(
        r#"
long tk_soft_f16_mismatches(void) {
    long bad = 0;
    uint32_t h, e, m;
    for (h = 0; h < 0x10000u; h++)
        if (tk_f32_bits(tk_f16_to_f32_soft((uint16_t)h)) != tk_f32_bits(tk_f16_to_f32((uint16_t)h))) bad++;
    /* every f32 in f16's subnormal and low normal range, a stride elsewhere */
    for (e = 101; e <= 114; e++)
        for (m = 0; m < (1u << 23); m++) {
            uint32_t b = (e << 23) | m;
            if (tk_f32_to_f16_soft(tk_f32_from_bits(b)) != tk_f32_to_f16(tk_f32_from_bits(b))) bad++;
            b |= 0x80000000u;
            if (tk_f32_to_f16_soft(tk_f32_from_bits(b)) != tk_f32_to_f16(tk_f32_from_bits(b))) bad++;
        }
    for (h = 0; h < 0xffffffffu - 61; h += 61)
        if (tk_f32_to_f16_soft(tk_f32_from_bits(h)) != tk_f32_to_f16(tk_f32_from_bits(h))) bad++;
    return bad;
}
"#,
    );
    std::fs::write(&src, s).unwrap();
    for std in ["-std=c99", "-std=c11"] {
        let so = dir.join(format!("check{std}.so"));
        compile(
            gcc,
            &src,
            &so,
            &[std, "-pedantic", "-Wall", "-Werror", "-Wno-unused-function"],
        );
    }
    let so = dir.join("check-std=c11.so");
    let lib = unsafe { libloading::Library::new(&so) }.unwrap();
    let f: libloading::Symbol<unsafe extern "C" fn() -> std::os::raw::c_long> =
        unsafe { lib.get(b"tk_soft_f16_mismatches\0") }.unwrap();
    assert_eq!(
        unsafe { f() },
        0,
        "software f16 conversion differs from F16C"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// clang gets `CFLAGS` without gcc's own flags (it refuses `--param` names
/// it does not know), gcc all of them; clang is told by the version line,
/// not the compiler's path.
#[test]
fn clang_gets_cflags_without_gccs_own() {
    assert_eq!(c_ops::cflags(false), c_ops::CFLAGS.to_vec());
    let clang = c_ops::cflags(true);
    assert!(clang
        .iter()
        .all(|f| !f.starts_with("--param") && !f.starts_with("-fvect-cost-model")));
    assert!(clang.contains(&"-ffp-contract=off") && clang.contains(&"-march=native"));
    assert!(tolk::build::names_clang(
        "/usr/bin/cc: Debian clang version 16.0.6"
    ));
    assert!(tolk::build::names_clang(
        "cc: Apple clang version 15.0.0 (clang-1500.3.9.4)"
    ));
    assert!(!tolk::build::names_clang(
        "cc: cc (Debian 12.2.0-14+deb12u1) 12.2.0"
    ));
    assert!(!tolk::build::names_clang(
        "/opt/clang-shim/cc: gcc (GCC) 13.2.0"
    ));
}
