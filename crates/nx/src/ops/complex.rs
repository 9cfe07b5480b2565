//! Complex numbers' own operations: `real`, `imag`, `conj`, `angle` and
//! `Tensor::complex`. On real inputs they need no primitive (numpy's
//! results: `real` and `conj` are the input, `imag` zeros, `angle` 0 or π).

use super::{broadcast_pair, require_numeric};
use crate::prim::{BinaryOp, Prim, UnaryOp};
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

impl Tensor {
    /// The real part: `F32` for `C64`, `F64` for `C128`; a real tensor is
    /// its own real part.
    ///
    /// ```
    /// use nx::{Complex, Tensor};
    /// let z = Tensor::from_slice(&[Complex::new(1.0f32, 2.0), Complex::new(-3.0, 0.5)], &[2]);
    /// assert_eq!(z.real().to_vec::<f32>(), vec![1.0, -3.0]);
    /// assert_eq!(z.imag().to_vec::<f32>(), vec![2.0, 0.5]);
    /// ```
    pub fn real(&self) -> Tensor {
        require_numeric("real", self);
        if self.dtype().is_complex() {
            bind(Prim::Unary(UnaryOp::Real), &[self])
        } else {
            self.clone()
        }
    }

    /// The imaginary part, as the real dtype (`F32` for `C64`, `F64` for
    /// `C128`); zeros for a real tensor.
    pub fn imag(&self) -> Tensor {
        require_numeric("imag", self);
        if self.dtype().is_complex() {
            bind(Prim::Unary(UnaryOp::Imag), &[self])
        } else {
            self.zeros_like()
        }
    }

    /// The complex conjugate; a real tensor is its own conjugate.
    pub fn conj(&self) -> Tensor {
        require_numeric("conj", self);
        if self.dtype().is_complex() {
            bind(Prim::Unary(UnaryOp::Conj), &[self])
        } else {
            self.clone()
        }
    }

    /// The argument `atan2(im, re)` in `[-π, π]`, as the real dtype; of a
    /// real float tensor, 0 for non-negative values and π for negative ones
    /// (`atan2(0, x)`, so π also for -0.0, as numpy).
    pub fn angle(&self) -> Tensor {
        if self.dtype().is_complex() {
            return bind(Prim::Unary(UnaryOp::Angle), &[self]);
        }
        if !self.dtype().is_float() {
            panic!(
                "angle: expects a float or complex tensor, got {}",
                self.dtype()
            );
        }
        self.zeros_like().atan2(self)
    }

    /// `re + i im`, broadcasting: `F32` parts give `C64`, `F64` parts `C128`.
    ///
    /// ```
    /// use nx::{Complex, DType, Tensor};
    /// let re = Tensor::from_slice(&[1.0f64, 2.0], &[2]);
    /// let z = Tensor::complex(&re, &Tensor::scalar(-1.0f64));
    /// assert_eq!(z.dtype(), DType::C128);
    /// assert_eq!(z.to_vec::<Complex<f64>>(), vec![Complex::new(1.0, -1.0), Complex::new(2.0, -1.0)]);
    /// ```
    pub fn complex(re: &Tensor, im: &Tensor) -> Tensor {
        if !matches!(re.dtype(), DType::F32 | DType::F64) {
            panic!(
                "complex: the parts must be f32 or f64 tensors, got {} (cast them first)",
                re.dtype()
            );
        }
        let (re, im) = broadcast_pair("complex", re, im);
        bind(Prim::Binary(BinaryOp::Complex), &[&re, &im])
    }
}
