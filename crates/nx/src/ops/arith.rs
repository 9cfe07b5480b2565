//! Operator overloads: `+ - * / %` and unary `-` on `Tensor` and `&Tensor`,
//! with tensors and with `f64` scalars (which take the tensor's dtype).

use crate::tensor::Tensor;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

macro_rules! binop {
    ($Trait:ident, $method:ident) => {
        impl $Trait<&Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(self, rhs)
            }
        }
        impl $Trait<Tensor> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(self, &rhs)
            }
        }
        impl $Trait<&Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(&self, rhs)
            }
        }
        impl $Trait<Tensor> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(&self, &rhs)
            }
        }
        impl $Trait<f64> for &Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                Tensor::$method(self, &self.scalar_like(rhs))
            }
        }
        impl $Trait<f64> for Tensor {
            type Output = Tensor;
            fn $method(self, rhs: f64) -> Tensor {
                Tensor::$method(&self, &self.scalar_like(rhs))
            }
        }
        impl $Trait<&Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: &Tensor) -> Tensor {
                Tensor::$method(&rhs.scalar_like(self), rhs)
            }
        }
        impl $Trait<Tensor> for f64 {
            type Output = Tensor;
            fn $method(self, rhs: Tensor) -> Tensor {
                Tensor::$method(&rhs.scalar_like(self), &rhs)
            }
        }
    };
}

binop!(Add, add);
binop!(Sub, sub);
binop!(Mul, mul);
binop!(Div, div);
binop!(Rem, rem);

impl Neg for &Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    fn neg(self) -> Tensor {
        Tensor::neg(&self)
    }
}
