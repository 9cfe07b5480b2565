//! Element types: the `DType` tag every tensor carries and the `Element` trait
//! that ties each tag to its Rust type. Conversions between element types live
//! here so that `cast`, scalar broadcasting and the reference tests agree.

use half::{bf16, f16};
use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub enum DType {
    Bool,
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F16,
    BF16,
    F32,
    F64,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 13] = [
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
    ];

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Signed or unsigned integer (not `Bool`).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
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
pub trait Element:
    Copy + Send + Sync + PartialEq + PartialOrd + Default + fmt::Debug + 'static
{
    const DTYPE: DType;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    fn to_i128(self) -> i128;
    fn from_i128(v: i128) -> Self;

    /// Converts to another element type: from a float through `f64` (exact),
    /// from an integer or bool through `i128` (exact), so that every
    /// conversion rounds once: integer to integer wraps, integer to float
    /// rounds to nearest even (64-bit integers beyond 2^53 included).
    #[inline(always)]
    fn cast<U: Element>(self) -> U {
        if Self::DTYPE.is_float() {
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

/// Runs `$body` with `$T` bound to the Rust element type of `$dtype`.
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
        }
    }};
}
