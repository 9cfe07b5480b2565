//! The C dialect ([`C`]): the C rendering of every elementwise primitive
//! (`Prim::Unary`, `Binary`, `Compare`, `Where`, `Cast`, and the constants
//! of `Full`/`Pad`), bit-exact with nx's eager kernels
//! (`nx/src/cpu/elementwise.rs`, `cpu/math.rs`, `dtype.rs`), the helpers
//! they call (`c_prelude.h`, emitted once per translation unit as
//! [`PRELUDE`]), the kernel frame, and the flags the C compiler takes. The
//! loops and statements are [`super::render`]'s.
//!
//! How each family matches Rust:
//! - f32/f64: the same IEEE operations in the same order; the libm calls Rust
//!   makes (tan, exp2, f64 log1p, powf, `%` = fmod, f64 sin, ...) are the same
//!   glibc functions. What Rust writes itself is ported: nx's `exp_f32` (Exp
//!   and Sigmoid on f32), `tanh_f32`, `ln_f32`, `ln_1p_f32`, `sin_f32`,
//!   `cos_f32`, `atan_f32` and `erf_f32` (Tanh, Log, Log1p, Sin, Cos, Atan
//!   and Erf on f32; f16/bf16 keep libm's tanhf/logf/sinf/cosf/atanf and the
//!   `libm` crate's erff, as half does; sin/cos call glibc's sinf/cosf
//!   beyond |x| = 32768, which kernels do in a second run, see
//!   [`unary_vectorized`], which also has exp's faster form), with FMA when the target has it, as
//!   `cfg!(target_feature)` decides in Rust; std's asinh/acosh/atanh
//!   formulas, and the `libm` crate's erff/erf for f16/bf16 and f64 (FreeBSD
//!   msun, with its own expf/exp/scalbn; nx's Erf does not use glibc's erf). `-ffp-contract=off`
//!   keeps gcc from fusing `a*b+c`.
//! - f16/bf16 are raw `uint16_t` bits: every operation converts to f32,
//!   computes, and rounds back, exactly where the `half` crate does (so Rsqrt
//!   rounds twice and Sigmoid rounds after each step); Neg flips the sign bit;
//!   Abs goes through f32 (it quiets a NaN, as `num_traits::Float::abs` for
//!   half does). f16 conversions use F16C when compiled for it (as half does
//!   with target-cpu=native), else a port of half's software conversion (same
//!   bits). Exp on f16/bf16 is glibc `expf`, not `exp_f32` (nx's `exp_fast`
//!   is only specialised for f32).
//! - integers: wrapping arithmetic done in unsigned types (no signed-overflow
//!   UB), x/0 = 0, x%0 = 0, MIN/-1 = MIN, shifts out of range give 0 or -1,
//!   nx's `ipow`.
//! - casts follow `Element::cast`: from a float through f64; to an integer
//!   truncating and saturating with NaN -> 0 (clamped before the C
//!   conversion, which would be UB); to f16/bf16 by "round to odd" f32 first,
//!   so the result is rounded once; between integers wrapping.
//!
//! Assumptions beyond ISO C (true for gcc and clang): converting an
//! out-of-range value to a signed integer type wraps, and the compiler uses
//! round-to-nearest SSE arithmetic (x86-64; FLT_EVAL_METHOD 0).
//!
//! NaN payloads match too (the tests compare every bit, signaling NaNs
//! included). One case is tolerated by the tests without being needed today:
//! an arithmetic op with two NaN operands, whose payload Rust leaves
//! unspecified (LLVM may commute the operands; x86 returns the first one's).
//! Same-type float casts are the identity, as Rust's compiled
//! `(x as f64) as f32` is (a signaling NaN stays signaling).
//!
//! Nothing is known to differ. Not covered: clang (not installed where this
//! was tested) and targets without FMA (the C side then drops FMA exactly as
//! nx does, but it was only tested with FMA).

use nx::{BinaryOp, CmpOp, DType, Element, UnaryOp};

/// The C dialect (gcc or clang, `-march=native`).
pub struct C;

/// Compiles a small kernel at `-O1` (gcc only; clang ignores `optimize`,
/// so its kernels all build at the flags' level).
const SMALL_ATTR: &str = "#if defined(__GNUC__) && !defined(__clang__)\n#define TK_SMALL __attribute__((optimize(\"O1\")))\n#else\n#define TK_SMALL\n#endif\n";

/// Marks a map's innermost loop as free of dependences between iterations
/// (each writes its own elements of outputs that never alias the inputs):
/// without it gcc vectorizes a loop only after checking at run time that
/// its pointers do not overlap, and gives up past about ten checks (a map
/// with eight outputs stayed scalar, 13x slower).
const INDEPENDENT_ATTR: &str = "#if defined(__clang__)\n#define TK_INDEPENDENT _Pragma(\"clang loop vectorize(assume_safety)\")\n#elif defined(__GNUC__)\n#define TK_INDEPENDENT _Pragma(\"GCC ivdep\")\n#else\n#define TK_INDEPENDENT\n#endif\n";

impl super::Dialect for C {
    fn prelude(&self) -> String {
        format!("{PRELUDE}{SMALL_ATTR}{INDEPENDENT_ATTR}")
    }
    fn independent_loop(&self) -> Option<&'static str> {
        Some("TK_INDEPENDENT")
    }
    fn ty(&self, dtype: DType) -> &'static str {
        c_type(dtype)
    }
    fn unary(&self, op: UnaryOp, dtype: DType, x: &str) -> String {
        unary(op, dtype, x)
    }
    fn unary_vectorized(&self, op: UnaryOp, dtype: DType, x: &str) -> Option<(String, String)> {
        unary_vectorized(op, dtype, x)
    }
    fn binary(&self, op: BinaryOp, dtype: DType, a: &str, b: &str) -> String {
        binary(op, dtype, a, b)
    }
    fn compare(&self, op: CmpOp, dtype: DType, a: &str, b: &str) -> String {
        compare(op, dtype, a, b)
    }
    fn select(&self, dtype: DType, c: &str, a: &str, b: &str) -> String {
        select(dtype, c, a, b)
    }
    fn cast(&self, from: DType, to: DType, x: &str) -> String {
        cast(from, to, x)
    }
    fn literal(&self, dtype: DType, v: f64) -> String {
        literal(dtype, v)
    }
    fn kernel_signature(&self, name: &str, small: bool, _buffers: usize) -> String {
        let attr = if small { "TK_SMALL " } else { "" };
        format!("{attr}int {name}(void *const *b, int64_t lo, int64_t hi)")
    }
}

/// C source defining the helpers the expressions below call (static inline
/// functions; declares libm's functions and includes only `<stdint.h>` and
/// `<string.h>`: F16C's conversions are the compilers' builtins).
pub const PRELUDE: &str = include_str!("c_prelude.h");

/// The C compiler flags to use besides `-shared -fPIC -o` (and `-lm`).
/// No fast-math: every rewrite it allows changes bits. `-fno-math-errno` only
/// drops the errno side effect (lets gcc inline and vectorize `sqrtf`).
/// `-mprefer-vector-width=512`: gcc otherwise keeps to 256-bit vectors on
/// AVX-512 machines; the fused loops are compute-bound on nx's `exp` and
/// friends, and `exp(x) * y + 1` on 4M f32 (2 threads) went 2.27 -> 1.85 ms.
/// Lane width changes no result (each lane computes the scalar operations).
/// `vect-epilogues-nomask=0`: a vectorized loop's remainder runs scalar
/// instead of through a second, narrower vector loop (9% less compile time
/// on an MLP training step's; the remainders are under 16 elements).
/// `-fno-thread-jumps`: jump threading copies a loop's body per outcome of
/// a mask on the loop index (the masked loads of a `pad`, `concat` or roll,
/// `i >= 1`, `i < 63`), after which gcc cannot count the loop's iterations
/// and leaves it scalar: a pendulum ring's RK4 step, whose rolls sit in the
/// same loop as its sin and cos, ran 1.4x slower.
/// `-Werror=implicit-function-declaration`: the prelude declares libm's
/// functions itself (see there), so a missing one fails every compiler
/// version alike.
pub const CFLAGS: &[&str] = &[
    "-O2",
    "-fvect-cost-model=dynamic",
    "-march=native",
    "-ffp-contract=off",
    "-fno-math-errno",
    "-mprefer-vector-width=512",
    "--param=vect-epilogues-nomask=0",
    "-fno-thread-jumps",
    "-Werror=implicit-function-declaration",
];

/// The flags of [`CFLAGS`] that only gcc takes (clang refuses `--param`
/// names it does not know, and has no such cost model).
const GCC_ONLY: &[&str] = &[
    "-fvect-cost-model=dynamic",
    "--param=vect-epilogues-nomask=0",
    "-fno-thread-jumps",
];

/// [`CFLAGS`] for the compiler at hand: without `GCC_ONLY`'s for clang.
pub fn cflags(clang: bool) -> Vec<&'static str> {
    CFLAGS
        .iter()
        .copied()
        .filter(|f| !(clang && GCC_ONLY.contains(f)))
        .collect()
}

/// The C type that holds one element of `dtype` in memory.
pub fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool | DType::U8 => "uint8_t",
        DType::U16 | DType::F16 | DType::BF16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::F32 => "float",
        DType::F64 => "double",
        d @ (DType::C64 | DType::C128 | DType::I4 | DType::U4) => refused(d),
    }
}

/// Complex and 4-bit tensors never reach the compiler: staging refuses them.
fn refused(d: DType) -> ! {
    panic!("tolk: {d} tensors are refused when a function is staged")
}

/// The suffix of the prelude's per-type helpers (`tk_add_i32`, `tk_f16_add`).
fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        d => d.name(),
    }
}

/// The f32 (or f64) C function Rust std calls for `op` (its libm function or
/// the prelude's port of std's own formula); `None` for ops with their own rule.
fn float_fn(op: UnaryOp, f64: bool) -> Option<&'static str> {
    use UnaryOp::*;
    let (f, d) = match op {
        Abs => ("fabsf", "fabs"),
        Sqrt => ("sqrtf", "sqrt"),
        Exp2 => ("exp2f", "exp2"),
        Log => ("tk_log_f32", "log"),
        Log2 => ("log2f", "log2"),
        Log1p => ("tk_log1p_f32", "log1p"),
        Expm1 => ("expm1f", "expm1"),
        Sin => ("tk_sin_f32", "sin"),
        Cos => ("tk_cos_f32", "cos"),
        Tan => ("tanf", "tan"),
        Asin => ("asinf", "asin"),
        Acos => ("acosf", "acos"),
        Atan => ("tk_atan_f32", "atan"),
        Sinh => ("sinhf", "sinh"),
        Cosh => ("coshf", "cosh"),
        Tanh => ("tk_tanh_f32", "tanh"),
        Asinh => ("tk_asinh_f32", "tk_asinh_f64"),
        Acosh => ("tk_acosh_f32", "tk_acosh_f64"),
        Atanh => ("tk_atanh_f32", "tk_atanh_f64"),
        Erf => ("tk_erf_f32", "tk_erf_f64"),
        Floor => ("floorf", "floor"),
        Ceil => ("ceilf", "ceil"),
        Trunc => ("truncf", "trunc"),
        Round => ("tk_round_f32", "tk_round_f64"),
        Sign => ("tk_sign_f32", "tk_sign_f64"),
        Sigmoid => ("tk_sigmoid_f32", "tk_sigmoid_f64"),
        Real | Imag | Conj | Angle => refused(DType::C64),
        // f32's Exp, Tanh, Log, Sin and Cos are nx's exp_f32, tanh_f32,
        // ln_f32, sin_f32 and cos_f32 (cpu/math.rs); f64's are libm's (nx's
        // exp_fast/tanh_fast/ln_fast/sin_kernel/cos_kernel defaults).
        Exp => ("tk_exp_f32", "exp"),
        Neg | Rsqrt | Recip | Not => return None,
    };
    Some(if f64 { d } else { f })
}

/// A C expression computing `op(x)` for an element of `dtype`, where `x` is a
/// C expression of `c_type(dtype)`; the result has `c_type(dtype)`. `x` is
/// evaluated once. Panics for pairs the eager kernel rejects.
pub fn unary(op: UnaryOp, dtype: DType, x: &str) -> String {
    use UnaryOp::*;
    match dtype {
        DType::F32 | DType::F64 => {
            let (one, f64) = if dtype == DType::F64 {
                ("1.0", true)
            } else {
                ("1.0f", false)
            };
            match op {
                Neg => format!("(-({x}))"),
                Recip => format!("({one} / ({x}))"),
                Rsqrt => format!("({one} / {}({x}))", float_fn(Sqrt, f64).unwrap()),
                Not => panic!("not on a float tensor is rejected by the op"),
                _ => format!("{}({x})", float_fn(op, f64).unwrap()),
            }
        }
        DType::F16 | DType::BF16 => {
            let p = suffix(dtype);
            let one = if dtype == DType::F16 {
                "0x3C00u"
            } else {
                "0x3F80u"
            };
            match op {
                Neg => format!("tk_{p}_neg({x})"),
                Abs => format!("tk_{p}_abs({x})"),
                Sqrt => format!("tk_{p}_sqrt({x})"),
                Exp => format!("tk_{p}_exp({x})"),
                Sign => format!("tk_{p}_sign({x})"),
                Round => format!("tk_{p}_round({x})"),
                Sigmoid => format!("tk_{p}_sigmoid({x})"),
                Recip => format!("tk_{p}_div({one}, {x})"),
                Rsqrt => format!("tk_{p}_div({one}, tk_{p}_sqrt({x}))"),
                Not => panic!("not on a float tensor is rejected by the op"),
                // Everything else: half's `from_f32(self.to_f32().op())`,
                // which calls libm's f32 function (nx's polynomial tanh,
                // log, log1p, sin and cos are only specialised for f32).
                _ => format!(
                    "tk_f32_to_{p}({}(tk_{p}_to_f32({x})))",
                    match op {
                        Tanh => "tanhf",
                        Log => "logf",
                        Log1p => "log1pf",
                        Sin => "sinf",
                        Cos => "cosf",
                        Atan => "atanf",
                        Erf => "tk_libm_erff",
                        _ => float_fn(op, false).unwrap(),
                    }
                ),
            }
        }
        // The bool kernel: Not is logical, every other unary op is the identity.
        DType::Bool => match op {
            Not => format!("((uint8_t)!({x}))"),
            _ => format!("({x})"),
        },
        _ => {
            let (t, s) = (c_type(dtype), suffix(dtype));
            match op {
                Neg => format!("tk_neg_{s}({x})"),
                Abs => format!("tk_abs_{s}({x})"),
                Sign => format!("tk_sign_{s}({x})"),
                Not => format!("(({t})~({x}))"),
                Floor | Ceil | Round | Trunc => format!("({x})"),
                _ => panic!("{op:?} on an integer tensor is rejected by the op"),
            }
        }
    }
}

/// The vectorizable form of an op whose exact form ([`unary`]) is slower
/// for rare inputs: `(fast, key)`, two C expressions in `x`. `key` is a
/// `uint32_t` that exceeds `TK_GUARD_MAX` where `x` is out of the fast
/// form's range; elsewhere `fast` equals `unary`'s value
/// bit for bit, and out of it `fast` is meaningless (but computed without
/// UB). A kernel computes `fast` for every element, keeps the largest key,
/// and when it passed `TK_GUARD_MAX`, runs again with `unary` (render.rs does). Today:
/// - f32 Sin and Cos for |x| <= 32768, beyond which the exact form calls
///   libm (nx's `sin_f32_slice`/`cos_f32_slice` do the same in two passes);
/// - f32 Exp for every x but NaN and x > 68.9 (`tk_exp_f32_fast`: the
///   scale by 2^n is an integer add and one multiplication instead of ten
///   vector ops; the key is of its rounded `x·log2 e`, so -inf and the
///   underflowing inputs of a masked softmax stay on the fast path), and
///   f32 Sigmoid through it (`e^-|x|`: only NaN re-runs).
///
/// `x` is named twice: pass a variable.
pub fn unary_vectorized(op: UnaryOp, dtype: DType, x: &str) -> Option<(String, String)> {
    let trig = |fast: &str| {
        let key = format!("tk_guard_key_f32({x}, TK_TRIG_LIMIT)");
        (format!("{fast}({x})"), key)
    };
    let exp_key = |arg: &str| format!("tk_exp_f32_fast_key({arg})");
    match (op, dtype) {
        (UnaryOp::Sin, DType::F32) => Some(trig("tk_sin_f32_fast")),
        (UnaryOp::Cos, DType::F32) => Some(trig("tk_cos_f32_fast")),
        (UnaryOp::Exp, DType::F32) => Some((format!("tk_exp_f32_fast({x})"), exp_key(x))),
        (UnaryOp::Sigmoid, DType::F32) => Some((
            format!("tk_sigmoid_f32_fast({x})"),
            exp_key(&format!("-fabsf({x})")),
        )),
        _ => None,
    }
}

/// A C expression computing `op(a, b)` for two elements of `dtype`; the
/// result has `c_type(dtype)`. Each operand is evaluated once.
pub fn binary(op: BinaryOp, dtype: DType, a: &str, b: &str) -> String {
    use BinaryOp::*;
    match dtype {
        DType::F32 | DType::F64 => {
            let (s, f) = if dtype == DType::F64 {
                ("f64", "")
            } else {
                ("f32", "f")
            };
            match op {
                Add => format!("(({a}) + ({b}))"),
                Sub => format!("(({a}) - ({b}))"),
                Mul => format!("(({a}) * ({b}))"),
                Div => format!("(({a}) / ({b}))"),
                Rem => format!("fmod{f}({a}, {b})"),
                Pow => format!("pow{f}({a}, {b})"),
                Atan2 => format!("atan2{f}({a}, {b})"),
                Max => format!("tk_max_{s}({a}, {b})"),
                Min => format!("tk_min_{s}({a}, {b})"),
                And | Or | Xor | Shl | Shr | Complex => {
                    panic!("{op:?} on a float tensor is rejected by the op")
                }
            }
        }
        DType::F16 | DType::BF16 => {
            let name = match op {
                Add => "add",
                Sub => "sub",
                Mul => "mul",
                Div => "div",
                Rem => "rem",
                Pow => "pow",
                Atan2 => "atan2",
                Max => "max",
                Min => "min",
                And | Or | Xor | Shl | Shr | Complex => {
                    panic!("{op:?} on a float tensor is rejected by the op")
                }
            };
            format!("tk_{}_{name}({a}, {b})", suffix(dtype))
        }
        DType::Bool => {
            let c = match op {
                And | Min | Mul => '&',
                Or | Max | Add => '|',
                Xor | Sub => '^',
                _ => panic!("{op:?} on a bool tensor is rejected by the op"),
            };
            format!("((uint8_t)(({a}) {c} ({b})))")
        }
        _ => {
            let (t, s) = (c_type(dtype), suffix(dtype));
            let name = match op {
                And => return format!("(({t})(({a}) & ({b})))"),
                Or => return format!("(({t})(({a}) | ({b})))"),
                Xor => return format!("(({t})(({a}) ^ ({b})))"),
                Add => "add",
                Sub => "sub",
                Mul => "mul",
                Div => "div",
                Rem => "rem",
                Pow => "pow",
                Max => "max",
                Min => "min",
                Shl => "shl",
                Shr => "shr",
                Atan2 | Complex => panic!("{op:?} on an integer tensor is rejected by the op"),
            };
            format!("tk_{name}_{s}({a}, {b})")
        }
    }
}

/// A C expression comparing two elements of `dtype`; the result is a
/// `uint8_t` 0 or 1. f16/bf16 compare as their (exact) f32 values, which is
/// what half's bitwise PartialOrd/PartialEq amount to.
pub fn compare(op: CmpOp, dtype: DType, a: &str, b: &str) -> String {
    let c = match op {
        CmpOp::Lt => "<",
        CmpOp::Le => "<=",
        CmpOp::Gt => ">",
        CmpOp::Ge => ">=",
        CmpOp::Eq => "==",
        CmpOp::Ne => "!=",
    };
    match dtype {
        DType::F16 | DType::BF16 => {
            let p = suffix(dtype);
            format!("((uint8_t)(tk_{p}_to_f32({a}) {c} tk_{p}_to_f32({b})))")
        }
        _ => format!("((uint8_t)(({a}) {c} ({b})))"),
    }
}

/// `where(c, a, b)` for elements of `dtype`; `c` is a `uint8_t` 0/1. Only one
/// of `a` and `b` is evaluated.
pub fn select(dtype: DType, c: &str, a: &str, b: &str) -> String {
    format!("(({}) (({c}) ? ({a}) : ({b})))", c_type(dtype))
}

/// A C expression converting an element of `from` to `to`, as
/// `Element::cast` does.
pub fn cast(from: DType, to: DType, x: &str) -> String {
    let to_t = c_type(to);
    if from.is_float() {
        // The f64 value (`Element::to_f64`); exact.
        let d = match from {
            DType::F16 => format!("((double)tk_f16_to_f32({x}))"),
            DType::BF16 => format!("((double)tk_bf16_to_f32({x}))"),
            DType::F32 => format!("((double)({x}))"),
            _ => format!("({x})"),
        };
        match to {
            // Same-type casts are the identity (Rust's folds to it as well;
            // f16/bf16 still round-trip through f32 below, quieting a NaN).
            DType::F32 if from == DType::F32 => format!("({x})"),
            DType::F64 if from == DType::F64 => format!("({x})"),
            DType::F32 => format!("((float){d})"),
            DType::F64 => d,
            DType::F16 | DType::BF16 => {
                let p = suffix(to);
                // from_f64 = from_f32(f64_to_f32_odd(v)); a value that came
                // from f16/bf16/f32 is exact in f32, where rounding to odd is
                // the identity.
                let f = match from {
                    DType::F64 => format!("tk_f64_to_f32_odd({x})"),
                    DType::F32 => format!("({x})"),
                    _ => format!("tk_{}_to_f32({x})", suffix(from)),
                };
                format!("tk_f32_to_{p}({f})")
            }
            DType::Bool => format!("((uint8_t)({d} != 0.0))"),
            _ => format!("tk_f64_to_{}({d})", suffix(to)),
        }
    } else {
        // Integers and bool: exact in int64_t/uint64_t, which stands in for
        // Rust's i128.
        match to {
            DType::Bool => format!("((uint8_t)(({x}) != 0))"),
            // Narrow integers (and bool) widen to int32_t first: exact, and
            // GCC vectorizes int32-to-float but not uint8-to-float
            // conversions (a 0/1 mask cast to f32 ran 5x slower).
            DType::F32 | DType::F64
                if matches!(
                    from,
                    DType::Bool | DType::U8 | DType::I8 | DType::U16 | DType::I16
                ) =>
            {
                format!("(({to_t})(int32_t)({x}))")
            }
            // C's integer-to-float conversion rounds to nearest even, like
            // Rust's `as`.
            DType::F32 | DType::F64 => format!("(({to_t})({x}))"),
            DType::F16 | DType::BF16 => {
                let f = if from == DType::U64 {
                    format!("tk_u64_to_f32_odd({x})")
                } else {
                    format!("tk_i64_to_f32_odd((int64_t)({x}))")
                };
                format!("tk_f32_to_{}({f})", suffix(to))
            }
            _ => format!("(({to_t})({x}))"),
        }
    }
}

/// A C literal of `dtype` for `v`, converted as `Prim::Full` does
/// (`<T as Element>::from_f64(v)`). Finite floats print in shortest
/// round-trip decimal (the C compiler rounds it back to the same value);
/// a NaN is a bit cast so its payload and sign survive.
pub fn literal(dtype: DType, v: f64) -> String {
    match dtype {
        DType::F32 => {
            let x = <f32 as Element>::from_f64(v);
            if x.is_nan() {
                format!("tk_f32_from_bits(0x{:08x}u)", x.to_bits())
            } else if x.is_infinite() {
                if x > 0.0 { "INFINITY" } else { "(-INFINITY)" }.to_string()
            } else {
                format!("({x:e}f)")
            }
        }
        DType::F64 => {
            let x = <f64 as Element>::from_f64(v);
            if x.is_nan() {
                format!("tk_f64_from_bits(0x{:016x}ull)", x.to_bits())
            } else if x.is_infinite() {
                if x > 0.0 {
                    "((double)INFINITY)"
                } else {
                    "(-(double)INFINITY)"
                }
                .to_string()
            } else {
                format!("({x:e})")
            }
        }
        DType::F16 => format!(
            "((uint16_t)0x{:04x}u)",
            <nx::half::f16 as Element>::from_f64(v).to_bits()
        ),
        DType::BF16 => format!(
            "((uint16_t)0x{:04x}u)",
            <nx::half::bf16 as Element>::from_f64(v).to_bits()
        ),
        DType::Bool => format!("((uint8_t){})", <bool as Element>::from_f64(v) as u8),
        DType::U8 => format!("((uint8_t){}u)", <u8 as Element>::from_f64(v)),
        DType::U16 => format!("((uint16_t){}u)", <u16 as Element>::from_f64(v)),
        DType::U32 => format!("((uint32_t){}u)", <u32 as Element>::from_f64(v)),
        DType::U64 => format!("((uint64_t){}ull)", <u64 as Element>::from_f64(v)),
        DType::I8 => format!("((int8_t){})", <i8 as Element>::from_f64(v)),
        DType::I16 => format!("((int16_t){})", <i16 as Element>::from_f64(v)),
        DType::I32 => match <i32 as Element>::from_f64(v) {
            // -2147483648 would be the negation of an out-of-range literal.
            i32::MIN => "INT32_MIN".to_string(),
            n => format!("((int32_t){n})"),
        },
        DType::I64 => match <i64 as Element>::from_f64(v) {
            i64::MIN => "INT64_MIN".to_string(),
            n => format!("((int64_t){n}ll)"),
        },
        d @ (DType::C64 | DType::C128 | DType::I4 | DType::U4) => refused(d),
    }
}
