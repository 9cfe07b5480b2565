//! Element types: the `DType` tag every tensor carries and the `Element` trait
//! that ties each tag to its Rust type. Conversions between element types live
//! here so that `cast`, scalar broadcasting and the reference tests agree.

use half::{bf16, f16};
pub use num_complex::Complex;
use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    /// Boolean (`bool`), one per byte.
    Bool,
    /// 8-bit unsigned integer (`u8`).
    U8,
    /// 16-bit unsigned integer (`u16`).
    U16,
    /// 32-bit unsigned integer (`u32`).
    U32,
    /// 64-bit unsigned integer (`u64`).
    U64,
    /// 8-bit signed integer (`i8`).
    I8,
    /// 16-bit signed integer (`i16`).
    I16,
    /// 32-bit signed integer (`i32`).
    I32,
    /// 64-bit signed integer (`i64`).
    I64,
    /// IEEE half precision float (`half::f16`).
    F16,
    /// bfloat16 (`half::bf16`): `f32`'s exponent range, 7 stored mantissa bits.
    BF16,
    /// IEEE single precision float (`f32`).
    F32,
    /// IEEE double precision float (`f64`).
    F64,
    /// Complex with `f32` parts (`Complex<f32>`).
    C64,
    /// Complex with `f64` parts (`Complex<f64>`).
    C128,
    /// 4-bit signed integer (`nx::I4`), one per byte.
    I4,
    /// 4-bit unsigned integer (`nx::U4`), one per byte.
    U4,
}

impl DType {
    /// The 13 real dtypes every operation accepts (`Bool` through `F64`), in
    /// declaration order. The complex and 4-bit dtypes, which only some
    /// operations accept, are in [`DType::EVERY`].
    pub const ALL: [DType; 13] = {
        let mut all = [DType::Bool; 13];
        let mut i = 0;
        while i < 13 {
            all[i] = DType::EVERY[i];
            i += 1;
        }
        all
    };

    /// Every dtype: [`DType::ALL`], then `C64`, `C128`, `I4`, `U4`.
    pub const EVERY: [DType; 17] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
        DType::I4,
        DType::U4,
    ];

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 | DType::I4 | DType::U4 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
        }
    }

    /// A real floating-point dtype (`F16`, `BF16`, `F32`, `F64`; not complex).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// `C64` or `C128`.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// A real float or a complex dtype: what differentiation accepts.
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// `I4` or `U4`.
    pub fn is_4bit(self) -> bool {
        matches!(self, DType::I4 | DType::U4)
    }

    /// The dtype of a complex dtype's parts (`C64` -> `F32`, `C128` -> `F64`);
    /// every other dtype is its own.
    pub fn real_dtype(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// The complex dtype holding values of this one: `F64`, `C128` and the
    /// 64-bit integers give `C128`, every other dtype `C64` (numpy's rule).
    pub fn complex_dtype(self) -> DType {
        match self {
            DType::F64 | DType::C128 | DType::I64 | DType::U64 => DType::C128,
            _ => DType::C64,
        }
    }

    /// Signed or unsigned integer (not `Bool`).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// `I8`, `I16`, `I32`, `I64` or `I4`.
    pub fn is_signed_int(self) -> bool {
        matches!(
            self,
            DType::I8 | DType::I16 | DType::I32 | DType::I64 | DType::I4
        )
    }

    /// `U8`, `U16`, `U32`, `U64` or `U4`.
    pub fn is_unsigned_int(self) -> bool {
        matches!(
            self,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 | DType::U4
        )
    }

    /// Short lowercase name: `f32`, `i64`, `bool`, ...
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::I4 => "i4",
            DType::U4 => "u4",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that can be the element of a tensor.
///
/// Conversions: `from_f64` rounds to nearest (even) for floats, saturates and
/// truncates toward zero for integers (NaN gives 0), and tests `!= 0` for
/// `bool`; `from_i128` wraps for integers (two's complement truncation, as
/// numpy's integer casts do). `cast` picks the exact path between two types.
///
/// Complex types convert to and from real ones through their real part
/// (`to_f64` drops the imaginary part, `from_f64` sets it to 0); `Tensor::cast`
/// refuses complex-to-real casts, so only `real`/`abs` drop a part.
pub trait Element: Copy + Send + Sync + PartialEq + Default + fmt::Debug + 'static {
    /// The dtype tag of this type.
    const DTYPE: DType;
    /// The value as an `f64` (exact for every type but 64-bit integers
    /// beyond 2^53; a complex gives its real part).
    fn to_f64(self) -> f64;
    /// An `f64` converted to this type (see the trait's conversion rules).
    fn from_f64(v: f64) -> Self;
    /// The value as an `i128` (floats truncate toward zero and saturate,
    /// NaN gives 0; a complex gives its real part, truncated).
    fn to_i128(self) -> i128;
    /// An `i128` converted to this type (integers wrap, floats round to
    /// nearest even, `bool` tests `!= 0`).
    fn from_i128(v: i128) -> Self;

    /// The value as a complex number (real types: imaginary part 0).
    #[inline(always)]
    fn to_c128(self) -> Complex<f64> {
        Complex::new(self.to_f64(), 0.0)
    }

    /// A complex value converted to this type (real types keep the real part).
    #[inline(always)]
    fn from_c128(v: Complex<f64>) -> Self {
        Self::from_f64(v.re)
    }

    /// Converts to another element type: from a float through `f64` (exact),
    /// from an integer or bool through `i128` (exact), from a complex through
    /// `Complex<f64>`, so that every conversion rounds once: integer to
    /// integer wraps, integer to float rounds to nearest even (64-bit
    /// integers beyond 2^53 included).
    #[inline(always)]
    fn cast<U: Element>(self) -> U {
        if Self::DTYPE.is_complex() {
            U::from_c128(self.to_c128())
        } else if Self::DTYPE.is_float() {
            U::from_f64(self.to_f64())
        } else {
            U::from_i128(self.to_i128())
        }
    }
}

macro_rules! int_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { v as $t }
            #[inline(always)]
            fn to_i128(self) -> i128 { self as i128 }
            #[inline(always)]
            fn from_i128(v: i128) -> Self { v as $t }
        }
    )*};
}
int_element!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32, i64 => I64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as u8 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn to_i128(self) -> i128 {
        self as i128
    }
    #[inline(always)]
    fn from_i128(v: i128) -> Self {
        v != 0
    }
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_i128(self) -> i128 {
        self as i128
    }
    #[inline(always)]
    fn from_i128(v: i128) -> Self {
        v as f32
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_i128(self) -> i128 {
        self as i128
    }
    #[inline(always)]
    fn from_i128(v: i128) -> Self {
        v as f64
    }
}

/// `v` rounded to f32 "to odd": truncated toward zero, with the last
/// mantissa bit set when inexact. Rounding that to nearest even into a format
/// with at least two fewer mantissa bits (f16, bf16) rounds `v` correctly,
/// which going through f32 with nearest-even rounding would not (a double
/// rounding), nor does `half`'s own f64 conversion (it drops the low 32 bits
/// of the f64 mantissa, or goes through f32, before rounding).
#[inline(always)]
fn f64_to_f32_odd(v: f64) -> f32 {
    let t = v as f32;
    if t as f64 == v || v.is_nan() {
        return t;
    }
    let mut bits = t.to_bits();
    if (t as f64).abs() > v.abs() {
        bits -= 1; // step back toward zero (from infinity: to f32::MAX)
    }
    f32::from_bits(bits | 1)
}

/// `v` (at most 64 bits wide) rounded to f32 to odd, as `f64_to_f32_odd`.
#[inline(always)]
fn i128_to_f32_odd(v: i128) -> f32 {
    let t = v as f32;
    let back = t as i128;
    if back == v {
        return t;
    }
    let mut bits = t.to_bits();
    if back.unsigned_abs() > v.unsigned_abs() {
        bits -= 1;
    }
    f32::from_bits(bits | 1)
}

macro_rules! half_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 { <$t>::to_f64(self) }
            // Round to nearest even (once), keep subnormals, overflow to
            // infinity: via f32 rounded to odd, then `half`'s f32 conversion,
            // which is exact round-to-nearest-even.
            #[inline(always)]
            fn from_f64(v: f64) -> Self { <$t>::from_f32(f64_to_f32_odd(v)) }
            #[inline(always)]
            fn to_i128(self) -> i128 { <$t>::to_f64(self) as i128 }
            #[inline(always)]
            fn from_i128(v: i128) -> Self { <$t>::from_f32(i128_to_f32_odd(v)) }
        }
    )*};
}
half_element!(f16 => F16, bf16 => BF16);

macro_rules! complex_element {
    ($($t:ty => $d:ident),*) => {$(
        impl Element for Complex<$t> {
            const DTYPE: DType = DType::$d;
            #[inline(always)]
            fn to_f64(self) -> f64 { self.re as f64 }
            #[inline(always)]
            fn from_f64(v: f64) -> Self { Complex::new(v as $t, 0.0) }
            #[inline(always)]
            fn to_i128(self) -> i128 { self.re as i128 }
            #[inline(always)]
            fn from_i128(v: i128) -> Self { Complex::new(v as $t, 0.0) }
            #[inline(always)]
            fn to_c128(self) -> Complex<f64> { Complex::new(self.re as f64, self.im as f64) }
            #[inline(always)]
            fn from_c128(v: Complex<f64>) -> Self { Complex::new(v.re as $t, v.im as $t) }
        }
    )*};
}
complex_element!(f32 => C64, f64 => C128);

/// A 4-bit signed integer, `-8..=7`, stored one per byte. The `i8` holds the
/// value itself; tensors keep it normalized: every value entering a tensor
/// (from a slice, a cast, arithmetic) keeps its low 4 bits, sign-extended
/// (two's complement wrapping, as integer casts wrap), so `I4(9)` is stored
/// as `I4(-7)`. Arithmetic wraps; float-to-I4 casts truncate toward zero and
/// saturate at -8 and 7 (NaN gives 0), like every float-to-integer cast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct I4(pub i8);

/// A 4-bit unsigned integer, `0..=15`, stored one per byte; values entering a
/// tensor keep their low 4 bits (wrapping), float casts saturate at 0 and 15.
/// See [`I4`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct U4(pub u8);

impl I4 {
    /// The smallest value, -8.
    pub const MIN: I4 = I4(-8);
    /// The largest value, 7.
    pub const MAX: I4 = I4(7);
    /// The low 4 bits of `v`, sign-extended.
    #[inline(always)]
    pub fn wrapping(v: i8) -> I4 {
        I4(((v as u8) << 4) as i8 >> 4)
    }
}

impl U4 {
    /// The smallest value, 0.
    pub const MIN: U4 = U4(0);
    /// The largest value, 15.
    pub const MAX: U4 = U4(15);
    /// The low 4 bits of `v`.
    #[inline(always)]
    pub fn wrapping(v: u8) -> U4 {
        U4(v & 15)
    }
}

impl fmt::Display for I4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Display for U4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl Element for I4 {
    const DTYPE: DType = DType::I4;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.0 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        // Rust's float-to-int cast truncates, saturates and maps NaN to 0.
        I4((v as i8).clamp(-8, 7))
    }
    #[inline(always)]
    fn to_i128(self) -> i128 {
        self.0 as i128
    }
    #[inline(always)]
    fn from_i128(v: i128) -> Self {
        I4::wrapping(v as i8)
    }
}

impl Element for U4 {
    const DTYPE: DType = DType::U4;
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self.0 as f64
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        U4((v as u8).min(15))
    }
    #[inline(always)]
    fn to_i128(self) -> i128 {
        self.0 as i128
    }
    #[inline(always)]
    fn from_i128(v: i128) -> Self {
        U4::wrapping(v as u8)
    }
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`, for the
/// 13 real dtypes of [`DType::ALL`]; the complex and 4-bit dtypes panic (the
/// operations that accept them dispatch with [`with_any_dtype!`](crate::with_any_dtype!) or by hand,
/// and `cpu::eval` refuses the others first, naming the primitive).
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {{
        use $crate::DType;
        match $dtype {
            DType::Bool => {
                type $T = bool;
                $body
            }
            DType::U8 => {
                type $T = u8;
                $body
            }
            DType::U16 => {
                type $T = u16;
                $body
            }
            DType::U32 => {
                type $T = u32;
                $body
            }
            DType::U64 => {
                type $T = u64;
                $body
            }
            DType::I8 => {
                type $T = i8;
                $body
            }
            DType::I16 => {
                type $T = i16;
                $body
            }
            DType::I32 => {
                type $T = i32;
                $body
            }
            DType::I64 => {
                type $T = i64;
                $body
            }
            DType::F16 => {
                type $T = $crate::half::f16;
                $body
            }
            DType::BF16 => {
                type $T = $crate::half::bf16;
                $body
            }
            DType::F32 => {
                type $T = f32;
                $body
            }
            DType::F64 => {
                type $T = f64;
                $body
            }
            d @ (DType::C64 | DType::C128 | DType::I4 | DType::U4) => {
                panic!("this operation does not support {d} tensors")
            }
        }
    }};
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`, for
/// every dtype (`DType::EVERY`): for code that only moves elements.
#[macro_export]
macro_rules! with_any_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {{
        use $crate::DType;
        match $dtype {
            DType::C64 => {
                type $T = $crate::Complex<f32>;
                $body
            }
            DType::C128 => {
                type $T = $crate::Complex<f64>;
                $body
            }
            DType::I4 => {
                type $T = $crate::I4;
                $body
            }
            DType::U4 => {
                type $T = $crate::U4;
                $body
            }
            d => $crate::with_dtype!(d, $T => $body),
        }
    }};
}
