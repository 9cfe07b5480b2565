//! Bit-exact tensor comparison for the jit tests (`#[path =
//! "common/bits.rs"] mod bits;`): the raw bits of every element, so that
//! comparisons are exact (-0.0 != 0.0) and dtype-agnostic, with NaN equal to
//! NaN whatever its payload (Rust leaves the payload of an operation on two
//! NaNs unspecified; `tolk::codegen::c` documents it).
#![allow(dead_code)] // each test file uses a subset

use rune::prelude::*;

/// Every element's bits, widened to u64.
pub fn bits(t: &Tensor) -> Vec<u64> {
    fn wide<T: nx::Element>(t: &Tensor, f: impl Fn(T) -> u64) -> Vec<u64> {
        t.to_vec::<T>().into_iter().map(f).collect()
    }
    match t.dtype() {
        DType::Bool => wide(t, |x: bool| x as u64),
        DType::U8 => wide(t, |x: u8| x as u64),
        DType::U16 => wide(t, |x: u16| x as u64),
        DType::U32 => wide(t, |x: u32| x as u64),
        DType::U64 => wide(t, |x: u64| x),
        DType::I8 => wide(t, |x: i8| x as u8 as u64),
        DType::I16 => wide(t, |x: i16| x as u16 as u64),
        DType::I32 => wide(t, |x: i32| x as u32 as u64),
        DType::I64 => wide(t, |x: i64| x as u64),
        DType::F16 => wide(t, |x: half::f16| x.to_bits() as u64),
        DType::BF16 => wide(t, |x: half::bf16| x.to_bits() as u64),
        DType::F32 => wide(t, |x: f32| x.to_bits() as u64),
        DType::F64 => wide(t, |x: f64| x.to_bits()),
        DType::I4 => wide(t, |x: nx::I4| x.0 as u8 as u64),
        DType::U4 => wide(t, |x: nx::U4| x.0 as u64),
        d => panic!("bits: {d} elements do not fit in 64 bits"),
    }
}

/// Whether `b` is the bit pattern of a NaN of `dtype`.
pub fn is_nan_bits(dtype: DType, b: u64) -> bool {
    match dtype {
        DType::F16 => (b & 0x7c00) == 0x7c00 && (b & 0x03ff) != 0,
        DType::BF16 => (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0,
        DType::F32 => f32::from_bits(b as u32).is_nan(),
        DType::F64 => f64::from_bits(b).is_nan(),
        _ => false,
    }
}

/// `got` and `want` have the same dtype and shape.
pub fn same_type(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "jit gives {} {:?}, eager {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    Ok(())
}

/// `got` and `want` have the same dtype, shape and bits (NaNs aside).
pub fn same_bits(got: &Tensor, want: &Tensor) -> Result<(), String> {
    same_type(got, want)?;
    let (g, w) = (bits(got), bits(want));
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        if a != b && !(is_nan_bits(got.dtype(), *a) && is_nan_bits(got.dtype(), *b)) {
            return Err(format!(
                "element {i}: jit bits {a:#x}, eager bits {b:#x}\njit:   {got}\neager: {want}"
            ));
        }
    }
    Ok(())
}
