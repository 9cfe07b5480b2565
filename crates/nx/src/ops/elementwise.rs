//! Elementwise operations: math, arithmetic, comparisons, logic, selection,
//! casts, and the activation functions composed from them.

use super::{
    broadcast_pair, require_float, require_inexact, require_numeric, require_ordered, require_real,
};
use crate::prim::{BinaryOp, CmpOp, Prim, UnaryOp};
use crate::tensor::Tensor;
use crate::trace::bind;
use crate::DType;

fn unary(x: &Tensor, op: UnaryOp) -> Tensor {
    bind(Prim::Unary(op), &[x])
}

fn binary(name: &str, a: &Tensor, b: &Tensor, op: BinaryOp) -> Tensor {
    let (a, b) = broadcast_pair(name, a, b);
    bind(Prim::Binary(op), &[&a, &b])
}

fn compare(name: &str, a: &Tensor, b: &Tensor, op: CmpOp) -> Tensor {
    let (a, b) = broadcast_pair(name, a, b);
    bind(Prim::Compare(op), &[&a, &b])
}

macro_rules! float_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Tensor {
            require_float(stringify!($name), self);
            unary(self, UnaryOp::$op)
        }
    )*};
}

macro_rules! inexact_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Tensor {
            require_inexact(stringify!($name), self);
            unary(self, UnaryOp::$op)
        }
    )*};
}

macro_rules! real_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Tensor {
            require_real(stringify!($name), self);
            unary(self, UnaryOp::$op)
        }
    )*};
}

macro_rules! numeric_unary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self) -> Tensor {
            require_numeric(stringify!($name), self);
            unary(self, UnaryOp::$op)
        }
    )*};
}

macro_rules! numeric_binary {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Tensor {
            require_numeric(stringify!($name), self);
            binary(stringify!($name), self, other, BinaryOp::$op)
        }
    )*};
}

/// Comparisons that need an order: complex tensors are refused.
macro_rules! ordering {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Tensor {
            if self.dtype().is_complex() {
                panic!("{}: complex numbers have no order (only equal and not_equal compare them)", stringify!($name));
            }
            compare(stringify!($name), self, other, CmpOp::$op)
        }
    )*};
}

macro_rules! comparison {
    ($($(#[$doc:meta])* $name:ident => $op:ident),* $(,)?) => {$(
        $(#[$doc])*
        pub fn $name(&self, other: &Tensor) -> Tensor {
            compare(stringify!($name), self, other, CmpOp::$op)
        }
    )*};
}

impl Tensor {
    // Float or complex (principal branches for complex, as numpy).
    // Each panics on an integer or bool tensor.
    inexact_unary! {
        /// Elementwise square root (the principal one for complex).
        sqrt => Sqrt,
        /// `1 / sqrt(x)`.
        rsqrt => Rsqrt,
        /// `1 / x`.
        recip => Recip,
        /// Elementwise `e^x`.
        exp => Exp,
        /// Natural logarithm.
        log => Log,
        /// Elementwise sine (radians).
        sin => Sin,
        /// Elementwise cosine (radians).
        cos => Cos,
        /// Elementwise tangent (radians).
        tan => Tan,
        /// Elementwise hyperbolic sine.
        sinh => Sinh,
        /// Elementwise hyperbolic cosine.
        cosh => Cosh,
        /// Elementwise hyperbolic tangent.
        tanh => Tanh,
    }

    // Real floats only: each panics on any other dtype.
    float_unary! {
        /// Elementwise `2^x`.
        exp2 => Exp2,
        /// Elementwise base-2 logarithm.
        log2 => Log2,
        /// `log(1 + x)`, accurate near 0.
        log1p => Log1p,
        /// `exp(x) - 1`, accurate near 0.
        expm1 => Expm1,
        /// Elementwise arcsine.
        asin => Asin,
        /// Elementwise arccosine.
        acos => Acos,
        /// Elementwise arctangent.
        atan => Atan,
        /// Elementwise inverse hyperbolic sine.
        asinh => Asinh,
        /// Elementwise inverse hyperbolic cosine.
        acosh => Acosh,
        /// Elementwise inverse hyperbolic tangent.
        atanh => Atanh,
        /// Elementwise error function.
        erf => Erf,
        /// `1 / (1 + exp(-x))`.
        sigmoid => Sigmoid,
    }

    // Any dtype but bool (each panics on bool).
    numeric_unary! {
        /// Elementwise negation (wrapping on integers).
        neg => Neg,
        /// Absolute value; of a complex tensor, its modulus as the real dtype
        /// (`C64` -> `F32`, `C128` -> `F64`).
        abs => Abs,
    }

    // Real numbers: each panics on bool and complex tensors.
    real_unary! {
        /// -1, 0 or 1 (NaN stays NaN, -0 stays -0).
        sign => Sign,
        /// Rounds toward -inf (identity on integers).
        floor => Floor,
        /// Rounds toward +inf (identity on integers).
        ceil => Ceil,
        /// Rounds half to even, as numpy and JAX.
        round => Round,
        /// Rounds toward zero (identity on integers).
        trunc => Trunc,
    }

    // Operands broadcast to a common shape; each panics on bool operands, on
    // a dtype mismatch (no implicit promotion) or on shapes that do not
    // broadcast.
    numeric_binary! {
        /// Elementwise `self + other` (wrapping on integers).
        add => Add,
        /// Elementwise `self - other` (wrapping on integers).
        sub => Sub,
        /// Elementwise `self * other` (wrapping on integers).
        mul => Mul,
        /// Float division; integer division truncates toward zero (x / 0 = 0).
        div => Div,
        /// `self ^ other`; for integers a negative exponent gives 0 (except
        /// for bases 1 and -1); for complex tensors the principal value.
        pow => Pow,
    }

    /// Remainder with the sign of the dividend (Rust's `%`); x % 0 = 0 for integers.
    pub fn rem(&self, other: &Tensor) -> Tensor {
        require_real("rem", self);
        binary("rem", self, other, BinaryOp::Rem)
    }

    // Operands broadcast; each panics on complex tensors or a dtype mismatch.
    ordering! {
        /// Elementwise `self < other`, as `Bool`.
        less => Lt,
        /// Elementwise `self <= other`, as `Bool`.
        less_equal => Le,
        /// Elementwise `self > other`, as `Bool`.
        greater => Gt,
        /// Elementwise `self >= other`, as `Bool`.
        greater_equal => Ge,
    }

    // Operands broadcast; each panics on a dtype mismatch.
    comparison! {
        /// Elementwise `self == other`, as `Bool` (NaN equals nothing).
        equal => Eq,
        /// Elementwise `self != other`, as `Bool`.
        not_equal => Ne,
    }

    /// `x * x`.
    pub fn square(&self) -> Tensor {
        require_numeric("square", self);
        self.mul(self)
    }

    /// Elementwise maximum; NaN wins.
    pub fn maximum(&self, other: &Tensor) -> Tensor {
        require_ordered("maximum", self);
        binary("maximum", self, other, BinaryOp::Max)
    }

    /// Elementwise minimum; NaN wins.
    pub fn minimum(&self, other: &Tensor) -> Tensor {
        require_ordered("minimum", self);
        binary("minimum", self, other, BinaryOp::Min)
    }

    /// `atan2(self, other)`, the angle of the point `(other, self)`.
    pub fn atan2(&self, other: &Tensor) -> Tensor {
        require_float("atan2", self);
        binary("atan2", self, other, BinaryOp::Atan2)
    }

    /// Clamps every element into `[lo, hi]`.
    pub fn clamp(&self, lo: f64, hi: f64) -> Tensor {
        require_real("clamp", self);
        if lo > hi {
            panic!("clamp: lower bound {lo} is above upper bound {hi}");
        }
        self.maximum(&self.scalar_like(lo))
            .minimum(&self.scalar_like(hi))
    }

    /// `max(x, 0)`; NaN stays NaN. Written as `where(x <= 0, 0, x)` so that
    /// its derivative is a selection (0 at 0, as in JAX and PyTorch) rather
    /// than `maximum`'s tie-splitting one.
    pub fn relu(&self) -> Tensor {
        require_real("relu", self);
        let zero = self.scalar_like(0.0);
        Tensor::where_(&self.less_equal(&zero), &zero, self)
    }

    /// GELU with the tanh approximation (JAX's default `approximate=True`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, computed as the
    /// equal `x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3))`, which avoids the
    /// cancellation of `1 + tanh(..)` for negative `x`.
    pub fn gelu(&self) -> Tensor {
        require_float("gelu", self);
        let c = 2.0 * (2.0 / std::f64::consts::PI).sqrt();
        let inner = (self + &(self.mul(self).mul(self) * 0.044715)) * c;
        self * &inner.sigmoid()
    }

    /// `log(1 + exp(x))`, computed without overflow.
    pub fn softplus(&self) -> Tensor {
        require_float("softplus", self);
        // max(x, 0) + log1p(exp(-|x|)), with -|x| as min(x, -x): both
        // derivatives split their tie at 0 (1/2 and 0), summing to the true
        // 1/2 (abs's derivative is 1 at 0, as in JAX).
        self.maximum(&self.scalar_like(0.0)) + self.minimum(&self.neg()).exp().log1p()
    }

    /// `x * sigmoid(x)`.
    pub fn silu(&self) -> Tensor {
        require_float("silu", self);
        self * &self.sigmoid()
    }

    /// Elementwise "is NaN", as `Bool` (all false for non-float dtypes).
    pub fn isnan(&self) -> Tensor {
        if self.dtype().is_float() {
            self.not_equal(self)
        } else {
            Tensor::full(self.shape(), 0.0, DType::Bool)
        }
    }

    /// Elementwise "is +inf or -inf", as `Bool` (all false for non-float dtypes).
    pub fn isinf(&self) -> Tensor {
        if self.dtype().is_float() {
            self.abs().equal(&self.scalar_like(f64::INFINITY))
        } else {
            Tensor::full(self.shape(), 0.0, DType::Bool)
        }
    }

    /// Elementwise "is neither infinite nor NaN", as `Bool` (all true for
    /// non-float dtypes).
    pub fn isfinite(&self) -> Tensor {
        if self.dtype().is_float() {
            self.abs().less(&self.scalar_like(f64::INFINITY))
        } else {
            Tensor::full(self.shape(), 1.0, DType::Bool)
        }
    }

    /// The tensor as `Bool` (non-zero is true); `Bool` tensors pass through.
    fn truthy(&self) -> Tensor {
        if self.dtype() == DType::Bool {
            self.clone()
        } else {
            self.not_equal(&self.scalar_like(0.0))
        }
    }

    /// Elementwise logical and of the operands' truth values (non-zero is
    /// true), broadcasting; a `Bool` result.
    pub fn logical_and(&self, other: &Tensor) -> Tensor {
        binary(
            "logical_and",
            &self.truthy(),
            &other.truthy(),
            BinaryOp::And,
        )
    }

    /// Elementwise logical or of the operands' truth values (non-zero is true).
    pub fn logical_or(&self, other: &Tensor) -> Tensor {
        binary("logical_or", &self.truthy(), &other.truthy(), BinaryOp::Or)
    }

    /// Elementwise logical exclusive or of the operands' truth values.
    pub fn logical_xor(&self, other: &Tensor) -> Tensor {
        binary(
            "logical_xor",
            &self.truthy(),
            &other.truthy(),
            BinaryOp::Xor,
        )
    }

    /// Elementwise logical not of the truth value (non-zero is true), as `Bool`.
    pub fn logical_not(&self) -> Tensor {
        unary(&self.truthy(), UnaryOp::Not)
    }

    fn require_bits(&self, op: &str) {
        if self.dtype().is_inexact() {
            panic!(
                "{op}: expects an integer or bool tensor, got {}",
                self.dtype()
            );
        }
    }

    /// Elementwise bitwise and (logical on `Bool`), broadcasting.
    ///
    /// # Panics
    ///
    /// On float or complex operands, or a dtype mismatch.
    pub fn bitwise_and(&self, other: &Tensor) -> Tensor {
        self.require_bits("bitwise_and");
        binary("bitwise_and", self, other, BinaryOp::And)
    }

    /// Elementwise bitwise or (logical on `Bool`), broadcasting.
    ///
    /// # Panics
    ///
    /// On float or complex operands, or a dtype mismatch.
    pub fn bitwise_or(&self, other: &Tensor) -> Tensor {
        self.require_bits("bitwise_or");
        binary("bitwise_or", self, other, BinaryOp::Or)
    }

    /// Elementwise bitwise exclusive or (logical on `Bool`), broadcasting.
    ///
    /// # Panics
    ///
    /// On float or complex operands, or a dtype mismatch.
    pub fn bitwise_xor(&self, other: &Tensor) -> Tensor {
        self.require_bits("bitwise_xor");
        binary("bitwise_xor", self, other, BinaryOp::Xor)
    }

    /// Elementwise bitwise not (logical on `Bool`). Panics on float or
    /// complex tensors.
    pub fn bitwise_not(&self) -> Tensor {
        self.require_bits("bitwise_not");
        unary(self, UnaryOp::Not)
    }

    /// Shifts left by `other` bits; shifting by the bit width or more gives 0.
    pub fn shift_left(&self, other: &Tensor) -> Tensor {
        if !self.dtype().is_int() {
            panic!(
                "shift_left: expects an integer tensor, got {}",
                self.dtype()
            );
        }
        binary("shift_left", self, other, BinaryOp::Shl)
    }

    /// Shifts right by `other` bits (arithmetic for signed types).
    pub fn shift_right(&self, other: &Tensor) -> Tensor {
        if !self.dtype().is_int() {
            panic!(
                "shift_right: expects an integer tensor, got {}",
                self.dtype()
            );
        }
        binary("shift_right", self, other, BinaryOp::Shr)
    }

    /// Elementwise `cond ? a : b`, broadcasting all three.
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let x = Tensor::from_slice(&[-1.0f32, 2.0, -3.0], &[3]);
    /// let zero = Tensor::scalar(0.0f32);
    /// let r = Tensor::where_(&x.less(&zero), &zero, &x);
    /// assert_eq!(r.to_vec::<f32>(), vec![0.0, 2.0, 0.0]);
    /// ```
    ///
    /// # Panics
    ///
    /// When `cond` is not `Bool`, `a` and `b` differ in dtype, or the shapes
    /// do not broadcast.
    pub fn where_(cond: &Tensor, a: &Tensor, b: &Tensor) -> Tensor {
        if cond.dtype() != DType::Bool {
            panic!("where_: the condition must be bool, got {}", cond.dtype());
        }
        super::check_same_dtype("where_", a, b);
        let shape = crate::shape::broadcast_shapes("where_", a.shape(), b.shape());
        let shape = crate::shape::broadcast_shapes("where_", cond.shape(), &shape);
        let (c, a, b) = (
            cond.broadcast_unchecked(&shape),
            a.broadcast_unchecked(&shape),
            b.broadcast_unchecked(&shape),
        );
        bind(Prim::Where, &[&c, &a, &b])
    }

    /// Converts every element to `dtype`: floats round to nearest even,
    /// float to integer truncates toward zero and saturates (NaN gives 0),
    /// integer to integer wraps (to 4 bits for `I4`/`U4`), non-zero is
    /// `true`; a real value becomes a complex one with imaginary part 0.
    ///
    /// ```
    /// use nx::{Tensor, DType};
    /// let x = Tensor::from_slice(&[-1.7f32, 0.5, 2.9, f32::NAN], &[4]);
    /// assert_eq!(x.cast(DType::I32).to_vec::<i32>(), vec![-1, 0, 2, 0]);
    /// assert_eq!(x.cast(DType::Bool).to_vec::<bool>(), vec![true, true, true, true]);
    /// ```
    ///
    /// # Panics
    ///
    /// When casting a complex tensor to a real dtype (which would drop the
    /// imaginary part silently): use [`Tensor::real`] or [`Tensor::abs`].
    pub fn cast(&self, dtype: DType) -> Tensor {
        if self.dtype() == dtype {
            return self.clone();
        }
        if self.dtype().is_complex() && !dtype.is_complex() {
            panic!(
                "cast: casting {} to {dtype} would drop the imaginary part; use real() or abs() first",
                self.dtype()
            );
        }
        bind(Prim::Cast(dtype), &[self])
    }
}
