//! The primitive set. Every public operation on `Tensor` is a composition of
//! these; every transformation (and the eager backend) gives each one a rule,
//! matched exhaustively so that a new primitive cannot be half-supported.
//!
//! Primitives are strict: their inputs are already validated and normalized by
//! the public operation that binds them (same shapes for elementwise ops,
//! non-negative sorted axes, ...). `out_aval` is the shape/dtype rule.

use crate::dtype::DType;
use crate::layout::Layout;
use crate::shape::numel;

/// Abstract value: what a trace knows about a tensor without its data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Aval {
    /// The tensor's shape (row-major sizes, one per axis).
    pub shape: Vec<usize>,
    /// The tensor's element type.
    pub dtype: DType,
}

impl Aval {
    /// An abstract value of `shape` and `dtype`.
    pub fn new(shape: &[usize], dtype: DType) -> Aval {
        Aval {
            shape: shape.to_vec(),
            dtype,
        }
    }
    /// The number of elements (the product of the shape; 1 for a scalar).
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }
}

/// An elementwise operation of one input ([`Prim::Unary`]); the output has
/// the input's shape and dtype (except where [`UnaryOp::complex_to_real`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    /// `-x` (wrapping on integers).
    Neg,
    /// `|x|` (wrapping on integers: `abs(MIN) = MIN`); the modulus on complex, as its real dtype.
    Abs,
    /// -1, 0 or 1 by the sign of `x`; on floats 0, -0.0 and NaN are kept as they are.
    Sign,
    /// `sqrt(x)`.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// `1 / x`.
    Recip,
    /// `e^x`.
    Exp,
    /// `2^x`.
    Exp2,
    /// The natural logarithm `ln(x)`.
    Log,
    /// The base-2 logarithm.
    Log2,
    /// `ln(1 + x)`, accurate near 0.
    Log1p,
    /// `e^x - 1`, accurate near 0.
    Expm1,
    /// `sin(x)` (radians).
    Sin,
    /// `cos(x)` (radians).
    Cos,
    /// `tan(x)` (radians).
    Tan,
    /// `asin(x)`.
    Asin,
    /// `acos(x)`.
    Acos,
    /// `atan(x)`.
    Atan,
    /// `sinh(x)`.
    Sinh,
    /// `cosh(x)`.
    Cosh,
    /// `tanh(x)`.
    Tanh,
    /// `asinh(x)`.
    Asinh,
    /// `acosh(x)`.
    Acosh,
    /// `atanh(x)`.
    Atanh,
    /// The error function `erf(x)`.
    Erf,
    /// The logistic function `1 / (1 + e^-x)`.
    Sigmoid,
    /// Rounds toward -inf (identity on integers).
    Floor,
    /// Rounds toward +inf (identity on integers).
    Ceil,
    /// Rounds to the nearest integer, ties to even, as numpy and JAX
    /// (identity on integers).
    Round,
    /// Rounds toward zero (identity on integers).
    Trunc,
    /// Logical not on `Bool`, bitwise not on integers.
    Not,
    /// The real part of a complex tensor (`C64` -> `F32`, `C128` -> `F64`).
    /// `Real`, `Imag`, `Conj` and `Angle` are bound on complex inputs only
    /// (the public operations handle real inputs without a primitive).
    Real,
    /// The imaginary part of a complex tensor, as its real dtype.
    Imag,
    /// The complex conjugate.
    Conj,
    /// The argument `atan2(im, re)` of a complex tensor, as its real dtype.
    Angle,
}

impl UnaryOp {
    /// Whether the result of this operation on a complex input is real
    /// (`Abs`, `Real`, `Imag`, `Angle`): the output's dtype is then the
    /// input's `real_dtype`.
    pub fn complex_to_real(self) -> bool {
        matches!(
            self,
            UnaryOp::Abs | UnaryOp::Real | UnaryOp::Imag | UnaryOp::Angle
        )
    }
}

/// An elementwise operation of two inputs of one shape and dtype
/// ([`Prim::Binary`]); the output has that shape and dtype (except
/// [`BinaryOp::Complex`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b` (wrapping on integers).
    Add,
    /// `a - b` (wrapping on integers).
    Sub,
    /// `a * b` (wrapping on integers).
    Mul,
    /// `a / b`. Integer division truncates toward zero; division by zero gives 0.
    Div,
    /// `a % b`: the remainder with the sign of the dividend (C's fmod, Rust's
    /// `%`); an integer remainder by zero gives 0.
    Rem,
    /// `a^b`; on integers by repeated squaring (wrapping), and a negative exponent gives 0 except for bases 1 and -1.
    Pow,
    /// The larger of `a` and `b`, NaN-propagating (`max(-0.0, 0.0) = 0.0`).
    Max,
    /// The smaller of `a` and `b`, NaN-propagating (`min(-0.0, 0.0) = -0.0`).
    Min,
    /// `atan2(a, b)`: the angle of the point `(x = b, y = a)`, in `[-pi, pi]`.
    Atan2,
    /// Logical on `Bool`, bitwise on integers.
    And,
    /// Logical or on `Bool`, bitwise or on integers.
    Or,
    /// Logical exclusive or on `Bool`, bitwise on integers.
    Xor,
    /// `a << b` (integers). Shifting by a negative amount or by the bit
    /// width or more gives 0.
    Shl,
    /// `a >> b` (integers; arithmetic on signed types). Shifting by a
    /// negative amount or by the bit width or more gives 0 (-1 for a negative
    /// `a`).
    Shr,
    /// `re + i im` from two real (`F32` or `F64`) operands of one dtype: the
    /// one binary operation whose output dtype differs (`C64` or `C128`).
    Complex,
}

/// An elementwise comparison ([`Prim::Compare`]): two inputs of one shape
/// and dtype, a `Bool` output of that shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a < b`.
    Lt,
    /// `a <= b`.
    Le,
    /// `a > b`.
    Gt,
    /// `a >= b`.
    Ge,
    /// `a == b` (false when either is NaN).
    Eq,
    /// `a != b` (true when either is NaN).
    Ne,
}

/// The combining operation of [`Prim::Reduce`] and [`Prim::ReduceWindow`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (wrapping on integers); 0 over an empty axis.
    Sum,
    /// The product (wrapping on integers); 1 over an empty axis.
    Prod,
    /// The maximum, NaN-propagating.
    Max,
    /// The minimum, NaN-propagating.
    Min,
}

/// Which extreme [`Prim::ArgReduce`] locates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgOp {
    /// The index of the maximum (the first on ties; the first NaN wins).
    Argmax,
    /// The index of the minimum (the first on ties; the first NaN wins).
    Argmin,
}

/// Which transform `Prim::Fft` computes (XLA's `FftType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FftKind {
    /// Complex to complex, `X_k = sum_j x_j e^{-2 pi i jk/n}` (unnormalized).
    Fft,
    /// Complex to complex, `x_j = (1/n) sum_k X_k e^{+2 pi i jk/n}` (scaled
    /// by one over the product of the lengths, as XLA's).
    Ifft,
    /// Real to complex: the FFT's first `n/2 + 1` entries along the last axis.
    Rfft,
    /// Complex (the `n/2 + 1` Hermitian half on the last axis) to real: the
    /// inverse of `Rfft`, scaled like `Ifft`; the imaginary parts of the
    /// zero-frequency (and, for even `n`, the Nyquist) entries are ignored.
    Irfft,
}

/// The running operation of [`Prim::Cumulative`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CumOp {
    /// The running sum.
    Sum,
    /// The running product.
    Prod,
}

/// An `f64` parameter of a primitive (a fill value), compared and hashed
/// by its bits: `0.0` and `-0.0` differ, a NaN equals a NaN of the same
/// bits only (sign and payload count). So `Prim`'s derived `Eq` and `Hash`
/// never merge two primitives that compute different bits.
///
/// `Debug` prints the value as `f64` does, except a NaN other than
/// `f64::NAN`, which prints its bits (`NaN(0x7ff8000000000001)`): a
/// compiled program's cache key encodes a primitive by its `Debug` text.
#[derive(Clone, Copy)]
pub struct F64Bits(pub f64);

impl F64Bits {
    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }

    /// The value's bits (what equality and hashing compare).
    pub fn to_bits(self) -> u64 {
        self.0.to_bits()
    }
}

impl From<f64> for F64Bits {
    fn from(v: f64) -> F64Bits {
        F64Bits(v)
    }
}

impl PartialEq for F64Bits {
    fn eq(&self, other: &F64Bits) -> bool {
        self.to_bits() == other.to_bits()
    }
}

impl Eq for F64Bits {}

impl std::hash::Hash for F64Bits {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.to_bits().hash(h)
    }
}

impl std::fmt::Debug for F64Bits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_nan() && self.to_bits() != f64::NAN.to_bits() {
            write!(f, "NaN({:#018x})", self.to_bits())
        } else {
            std::fmt::Debug::fmt(&self.0, f)
        }
    }
}

/// A primitive with its static parameters.
///
/// Equality and hashing are derived; the fill values (`Full`'s and `Pad`'s
/// `value`) are [`F64Bits`], compared by their bits: `0.0` and `-0.0`
/// differ and a NaN fill equals itself, so two equal primitives compute the
/// same bits, and `Prim` can key a hash map (CSE, the cache key).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Prim {
    /// A new tensor of `shape` filled with `value` (converted to `dtype`). No inputs.
    Full {
        /// The output's shape.
        shape: Vec<usize>,
        /// The output's dtype.
        dtype: DType,
        /// The fill value, converted to `dtype`.
        value: F64Bits,
    },
    /// `0, 1, 2, ...` along `axis`, broadcast over the other axes. No inputs.
    Iota {
        /// The output's shape.
        shape: Vec<usize>,
        /// The axis along which the values count up.
        axis: usize,
        /// The output's dtype.
        dtype: DType,
    },
    /// Elementwise, one input.
    Unary(UnaryOp),
    /// Elementwise, two inputs of one shape and dtype.
    Binary(BinaryOp),
    /// Elementwise comparison of two inputs of one shape and dtype; `Bool` out.
    Compare(CmpOp),
    /// `where(cond, a, b)`: `cond` is `Bool`; all three share one shape.
    Where,
    /// Converts every element to the given dtype, as [`Tensor::cast`](crate::Tensor::cast)
    /// describes (never complex to real: the operation refuses it).
    Cast(DType),
    /// Reduces over `axes` (sorted, distinct), which disappear from the shape.
    Reduce {
        /// The combining operation.
        op: ReduceOp,
        /// The reduced axes (sorted, distinct).
        axes: Vec<usize>,
    },
    /// Index (`I32`) of the first extreme value along `axis`, which disappears.
    ArgReduce {
        /// Maximum or minimum.
        op: ArgOp,
        /// The searched axis.
        axis: usize,
    },
    /// Inclusive running sum or product along `axis`.
    Cumulative {
        /// Running sum or product.
        op: CumOp,
        /// The axis along which it runs.
        axis: usize,
    },
    /// Same elements in row-major order, new shape.
    Reshape {
        /// The new shape (same number of elements).
        shape: Vec<usize>,
    },
    /// Numpy broadcasting to `shape` (input dims aligned on the right).
    Broadcast {
        /// The target shape.
        shape: Vec<usize>,
    },
    /// Output axis `i` is input axis `perm[i]`.
    Permute {
        /// A permutation of `0..rank`.
        perm: Vec<usize>,
    },
    /// `start..end` by `step` (> 0) on every axis.
    Slice {
        /// First index per axis.
        start: Vec<usize>,
        /// One past the last index per axis (exclusive).
        end: Vec<usize>,
        /// Stride per axis (> 0).
        step: Vec<usize>,
    },
    /// Reverses the order of the elements along `axes`.
    Flip {
        /// The reversed axes.
        axes: Vec<usize>,
    },
    /// Pads `lo[i]` elements before and `hi[i]` after axis `i` with `value`.
    Pad {
        /// Elements added before each axis.
        lo: Vec<usize>,
        /// Elements added after each axis.
        hi: Vec<usize>,
        /// The padding value, converted to the input's dtype.
        value: F64Bits,
    },
    /// Joins the inputs (same dtype, shapes equal except on `axis`).
    Concat {
        /// The axis the inputs are joined along.
        axis: usize,
    },
    /// A fresh contiguous copy.
    Copy,
    /// A copy through which gradients do not flow (`rune::detach`): identity
    /// with a zero derivative.
    StopGradient,
    /// `take_along_axis(x, idx, axis)`: `idx` (I32/I64) has `x`'s rank and,
    /// off `axis`, its sizes; out has `idx`'s shape.
    Gather {
        /// The axis indexed by `idx`.
        axis: usize,
    },
    /// `scatter_add(x, idx, updates, axis)`: the transpose of `Gather`;
    /// `updates` has `idx`'s shape; out is `x` with the updates added.
    ScatterAdd {
        /// The axis indexed by `idx`.
        axis: usize,
    },
    /// XLA's dot_general: out = batch dims, then lhs free dims, then rhs free dims.
    DotGeneral {
        /// Batch axes of the lhs, paired in order with `rhs_batch`.
        lhs_batch: Vec<usize>,
        /// Batch axes of the rhs.
        rhs_batch: Vec<usize>,
        /// Contracted axes of the lhs, paired in order with `rhs_contract`.
        lhs_contract: Vec<usize>,
        /// Contracted axes of the rhs.
        rhs_contract: Vec<usize>,
    },
    /// Writes `src` (same shape and dtype) into `dst` in place; returns `dst`.
    Assign,
    /// Threefry-2x32 with 20 rounds (Salmon et al. 2011; Random123's rotation
    /// constants and key-schedule parity `0x1BD11BDA`, as JAX's
    /// `threefry2x32`): inputs `key` and `counter`, both `U32` of one shape
    /// `[..., 2]` whose last axis holds a pair; out is the hashed counter
    /// pairs, same shape. No derivative (integers).
    Threefry2x32,
    /// XLA's `conv_general_dilated` in the layouts input `[N, C, spatial...]`,
    /// kernel `[O, C / feature_group_count, spatial...]`, output `[N, O,
    /// spatial...]` (1 to 3 spatial dims; one entry per spatial dim in each
    /// vector). `padding` is applied to the lhs-dilated input, `(lo, hi)` per
    /// spatial dim; a negative entry crops (the transposes of a convolution
    /// need that, as in XLA). Floats only.
    Conv {
        /// Window strides per spatial dim (>= 1).
        strides: Vec<usize>,
        /// `(lo, hi)` padding per spatial dim (negative crops).
        padding: Vec<(isize, isize)>,
        /// Input dilation per spatial dim (>= 1; > 1 for transposed convolutions).
        lhs_dilation: Vec<usize>,
        /// Kernel dilation per spatial dim (>= 1; atrous convolution).
        rhs_dilation: Vec<usize>,
        /// Number of channel groups (1 for a dense convolution, `C` for depthwise).
        feature_group_count: usize,
    },
    /// XLA's `reduce_window` with `op` `Sum` or `Max` over every axis:
    /// `window`, `strides` (>= 1) and `padding` (`(lo, hi)` pairs) have one
    /// entry per axis; padding counts as 0 (sum) or the lowest value (max:
    /// -inf, an integer's minimum). Out size per axis:
    /// `(n + lo + hi - window) / stride + 1` (the padded size is at least
    /// the window).
    ReduceWindow {
        /// `Sum` or `Max`.
        op: ReduceOp,
        /// Window size per axis.
        window: Vec<usize>,
        /// Window stride per axis (>= 1).
        strides: Vec<usize>,
        /// `(lo, hi)` padding per axis.
        padding: Vec<(usize, usize)>,
    },
    /// The index (`I32`) of the first maximum of each window of
    /// `ReduceWindow { op: Max, .. }` with the same parameters, padding
    /// elements counted as the lowest value in row-major window order (JAX's
    /// `select_and_scatter_add` choice). The index is row-major over the
    /// input's axes `flat_from..` (those before have window 1, stride 1 and
    /// no padding); a padding element that wins gives the index one past
    /// the end (`prod(shape[flat_from..])`). No derivative (integers).
    WindowArgmax {
        /// Window size per axis.
        window: Vec<usize>,
        /// Window stride per axis (>= 1).
        strides: Vec<usize>,
        /// `(lo, hi)` padding per axis.
        padding: Vec<(usize, usize)>,
        /// The first axis the index is taken over.
        flat_from: usize,
    },
    /// The permutation (`I32`) that stably sorts along `axis`: ascending
    /// with NaN last, or descending with NaN first; -0.0 equals 0.0; equal
    /// keys keep their order in both directions. Same shape as the input.
    /// No derivative (integers).
    Argsort {
        /// The sorted axis.
        axis: usize,
        /// Largest first when true.
        descending: bool,
    },
    /// The first `k` entries of the descending `Argsort` along the last
    /// axis (`I32`; the largest first, NaN largest, ties to the lower
    /// index): out is the input's shape with `k` on the last axis. No
    /// derivative (integers).
    TopK {
        /// How many indices to keep (at most the last axis's size).
        k: usize,
    },
    // linear algebra (eager only: jit refuses them; kernels in `cpu/linalg_kernels.rs`,
    // public operations in `nx::linalg`). Matrices are the last two axes,
    // every leading axis is a batch axis, and operands share their leading
    // shape.
    /// The lower Cholesky factor `L` (`L Lᵀ = A`) of `[..., n, n]`, read
    /// from the lower triangle only; the upper triangle of `L` is zero. A
    /// matrix that is not positive definite gives all NaN (as JAX).
    Cholesky,
    /// Solves `op(A) X = B` (`left`) or `X op(A) = B` with `A` `[..., m, m]`
    /// triangular (only its `lower` or upper triangle is read; with
    /// `unit_diagonal` its diagonal is taken as ones), `op(A) = Aᵀ` when
    /// `transpose`; `B` is `[..., m, k]` (left) or `[..., k, m]` (right).
    TriangularSolve {
        /// Read `A`'s lower triangle (else its upper one).
        lower: bool,
        /// Solve `op(A) X = B` (else `X op(A) = B`).
        left: bool,
        /// Use `Aᵀ` for `op(A)` (else `A`).
        transpose: bool,
        /// Take `A`'s diagonal as ones.
        unit_diagonal: bool,
    },
    /// Solves `A X = B` by LU with partial pivoting: `A` `[..., n, n]`, `B`
    /// `[..., n, k]`. A singular `A` gives infinities/NaNs (no error).
    Solve,
    /// `(sign, log|det A|)` of `[..., n, n]` packed as `[..., 2]` (a
    /// primitive has one output); singular: `(0, -inf)`.
    Slogdet,
    /// The orthonormal factor `Q` of a Householder QR of `[..., m, n]`:
    /// `[..., m, min(m, n)]`, or `[..., m, m]` when `complete` (`R` is
    /// `triu(Qᵀ A)`, computed by `linalg::qr` from it).
    Qr {
        /// Give the square `[..., m, m]` `Q` (else the reduced one).
        complete: bool,
    },
    /// Symmetric eigendecomposition of `[..., n, n]` (faer's), packed as
    /// `[..., n + 1, n]`: eigenvectors as the columns of the first `n`
    /// rows, eigenvalues ascending in the last row.
    Eigh,
    /// Singular value decomposition of `[..., m, n]` (faer's), packed as
    /// `[..., m·ku + k + kv·n]`: `u` (`m`×`ku`, row-major), the singular
    /// values descending (`k = min(m, n)`), `vt` (`kv`×`n`, row-major);
    /// `ku = kv = k`, or `ku = m`, `kv = n` when `full_matrices`.
    Svd {
        /// Give square `u` and `vt` (else the reduced ones).
        full_matrices: bool,
    },
    /// JAX's `fft_p` (eager only, like linear algebra: kernel in
    /// `cpu/fft.rs`, public operations in `nx::fft`): the `kind` transform
    /// over the trailing `lengths.len()` axes (1 or more), every leading
    /// axis a batch axis. `lengths` are the signal lengths: the input's
    /// trailing sizes, except `Irfft`'s last input size `n/2 + 1`; `Rfft`'s
    /// output has `n/2 + 1` on the last axis. `Fft`/`Ifft` take and give
    /// C64/C128, `Rfft` F32/F64 to C64/C128, `Irfft` the reverse.
    Fft {
        /// Which transform.
        kind: FftKind,
        /// The signal lengths of the transformed trailing axes.
        lengths: Vec<usize>,
    },
}

/// What kind of computation a primitive is: the first fact every compiler
/// pass asks of it (see [`Prim::class`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrimClass {
    /// Each output element from the same element of each input:
    /// unary, binary, compare, where, cast, copy, stop_gradient.
    Elementwise,
    /// The same elements seen through another layout of the one input
    /// ([`Prim::view_layout`]): reshape, broadcast, permute, slice, flip.
    View,
    /// No inputs, each element a function of its index: full, iota.
    Fill,
    /// Inputs placed at offsets in the output, a fill value elsewhere:
    /// pad, concat.
    Shifted,
    /// A fold over axes that disappear: reduce.
    Reduction,
    /// Each output element from an element of the first input that the
    /// second input (an index tensor) picks along an axis: gather.
    Indexed,
    /// The first input with the elements of the third added at positions
    /// the second (an index tensor) picks along an axis, in order:
    /// scatter_add.
    Scatter,
    /// A kernel of its own, never fused: products, convolutions,
    /// sorts, windows, cumulative ops, arg-reductions, threefry.
    Library,
    /// Eager only (jit refuses it): linear algebra and FFT.
    EagerOnly,
    /// Writes its second input into its first in place: assign.
    InPlace,
}

impl Prim {
    /// The primitive's [`PrimClass`].
    pub fn class(&self) -> PrimClass {
        match self {
            Prim::Unary(_)
            | Prim::Binary(_)
            | Prim::Compare(_)
            | Prim::Where
            | Prim::Cast(_)
            | Prim::Copy
            | Prim::StopGradient => PrimClass::Elementwise,
            Prim::Reshape { .. }
            | Prim::Broadcast { .. }
            | Prim::Permute { .. }
            | Prim::Slice { .. }
            | Prim::Flip { .. } => PrimClass::View,
            Prim::Full { .. } | Prim::Iota { .. } => PrimClass::Fill,
            Prim::Pad { .. } | Prim::Concat { .. } => PrimClass::Shifted,
            Prim::Reduce { .. } => PrimClass::Reduction,
            Prim::Gather { .. } => PrimClass::Indexed,
            Prim::ScatterAdd { .. } => PrimClass::Scatter,
            Prim::ArgReduce { .. }
            | Prim::Cumulative { .. }
            | Prim::DotGeneral { .. }
            | Prim::Conv { .. }
            | Prim::Threefry2x32
            | Prim::ReduceWindow { .. }
            | Prim::WindowArgmax { .. }
            | Prim::Argsort { .. }
            | Prim::TopK { .. } => PrimClass::Library,
            Prim::Cholesky
            | Prim::TriangularSolve { .. }
            | Prim::Solve
            | Prim::Slogdet
            | Prim::Qr { .. }
            | Prim::Eigh
            | Prim::Svd { .. }
            | Prim::Fft { .. } => PrimClass::EagerOnly,
            Prim::Assign => PrimClass::InPlace,
        }
    }

    /// The layout a [`PrimClass::View`] primitive gives its input's
    /// elements when the input has layout `l`; `None` when a reshape
    /// cannot be expressed by strides (the input must be copied first).
    ///
    /// # Panics
    ///
    /// If the primitive is not a view.
    pub fn view_layout(&self, l: &Layout) -> Option<Layout> {
        match self {
            Prim::Reshape { shape } => l.reshape(shape),
            Prim::Broadcast { shape } => Some(l.broadcast(shape)),
            Prim::Permute { perm } => Some(l.permute(perm)),
            Prim::Slice { start, end, step } => Some(l.slice(start, end, step)),
            Prim::Flip { axes } => Some(l.flip(axes)),
            p => panic!("nx: {} is not a view", p.name()),
        }
    }

    /// The primitive's name, as debug logs print it.
    pub fn name(&self) -> String {
        match self {
            Prim::Full { .. } => "full".into(),
            Prim::Iota { .. } => "iota".into(),
            Prim::Unary(op) => format!("{op:?}").to_lowercase(),
            Prim::Binary(op) => format!("{op:?}").to_lowercase(),
            Prim::Compare(op) => format!("{op:?}").to_lowercase(),
            Prim::Where => "where".into(),
            Prim::Cast(_) => "cast".into(),
            Prim::Reduce { op, .. } => format!("reduce_{op:?}").to_lowercase(),
            Prim::ArgReduce { op, .. } => format!("{op:?}").to_lowercase(),
            Prim::Cumulative { op, .. } => format!("cum{op:?}").to_lowercase(),
            Prim::Reshape { .. } => "reshape".into(),
            Prim::Broadcast { .. } => "broadcast".into(),
            Prim::Permute { .. } => "permute".into(),
            Prim::Slice { .. } => "slice".into(),
            Prim::Flip { .. } => "flip".into(),
            Prim::Pad { .. } => "pad".into(),
            Prim::Concat { .. } => "concat".into(),
            Prim::Copy => "copy".into(),
            Prim::StopGradient => "stop_gradient".into(),
            Prim::Gather { .. } => "gather".into(),
            Prim::ScatterAdd { .. } => "scatter_add".into(),
            Prim::DotGeneral { .. } => "dot_general".into(),
            Prim::Assign => "assign".into(),
            Prim::Threefry2x32 => "threefry2x32".into(),
            Prim::Conv { .. } => "conv".into(),
            Prim::ReduceWindow { op, .. } => format!("reduce_window_{op:?}").to_lowercase(),
            Prim::WindowArgmax { .. } => "window_argmax".into(),
            Prim::Argsort { .. } => "argsort".into(),
            Prim::TopK { .. } => "top_k".into(),
            // linear algebra
            Prim::Cholesky => "cholesky".into(),
            Prim::TriangularSolve { .. } => "triangular_solve".into(),
            Prim::Solve => "solve".into(),
            Prim::Slogdet => "slogdet".into(),
            Prim::Qr { .. } => "qr".into(),
            Prim::Eigh => "eigh".into(),
            Prim::Svd { .. } => "svd".into(),
            Prim::Fft { kind, .. } => format!("{kind:?}").to_lowercase(),
        }
    }

    /// Whether the eager kernel of this primitive has a loop for inputs of
    /// `dtype`. Every primitive takes the 13 real dtypes its operation
    /// allows; the complex and 4-bit dtypes reach only the primitives listed
    /// here (`cpu::eval` refuses the others, naming the primitive).
    pub fn accepts(&self, dtype: DType) -> bool {
        let moves = matches!(
            self,
            Prim::Full { .. }
                | Prim::Where
                | Prim::Cast(_)
                | Prim::Reshape { .. }
                | Prim::Broadcast { .. }
                | Prim::Permute { .. }
                | Prim::Slice { .. }
                | Prim::Flip { .. }
                | Prim::Pad { .. }
                | Prim::Concat { .. }
                | Prim::Copy
                | Prim::StopGradient
                | Prim::Gather { .. }
                | Prim::Assign
        );
        if dtype.is_complex() {
            moves
                || match self {
                    Prim::Unary(op) => matches!(
                        op,
                        UnaryOp::Neg
                            | UnaryOp::Abs
                            | UnaryOp::Sqrt
                            | UnaryOp::Rsqrt
                            | UnaryOp::Recip
                            | UnaryOp::Exp
                            | UnaryOp::Log
                            | UnaryOp::Sin
                            | UnaryOp::Cos
                            | UnaryOp::Tan
                            | UnaryOp::Sinh
                            | UnaryOp::Cosh
                            | UnaryOp::Tanh
                            | UnaryOp::Real
                            | UnaryOp::Imag
                            | UnaryOp::Conj
                            | UnaryOp::Angle
                    ),
                    Prim::Binary(op) => matches!(
                        op,
                        BinaryOp::Add
                            | BinaryOp::Sub
                            | BinaryOp::Mul
                            | BinaryOp::Div
                            | BinaryOp::Pow
                    ),
                    Prim::Compare(op) => matches!(op, CmpOp::Eq | CmpOp::Ne),
                    // Sums and products only: complex numbers have no order.
                    Prim::Reduce { op, .. } => matches!(op, ReduceOp::Sum | ReduceOp::Prod),
                    Prim::Cumulative { .. } | Prim::DotGeneral { .. } | Prim::ScatterAdd { .. } => {
                        true
                    }
                    Prim::Fft { kind, .. } => {
                        matches!(kind, FftKind::Fft | FftKind::Ifft | FftKind::Irfft)
                    }
                    _ => false,
                }
        } else if dtype.is_4bit() {
            moves
                || matches!(self, Prim::Compare(_))
                || matches!(self, Prim::Unary(op) if matches!(op, UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Not | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc))
                || matches!(self, Prim::Binary(op) if !matches!(op, BinaryOp::Atan2 | BinaryOp::Complex))
        } else {
            true
        }
    }

    /// Shape and dtype of the output, given those of the inputs.
    pub fn out_aval(&self, ins: &[&Aval]) -> Aval {
        match self {
            Prim::Full { shape, dtype, .. } | Prim::Iota { shape, dtype, .. } => {
                Aval::new(shape, *dtype)
            }
            Prim::Unary(op) if op.complex_to_real() => {
                Aval::new(&ins[0].shape, ins[0].dtype.real_dtype())
            }
            Prim::Binary(BinaryOp::Complex) => {
                Aval::new(&ins[0].shape, ins[0].dtype.complex_dtype())
            }
            Prim::Unary(_)
            | Prim::Binary(_)
            | Prim::Copy
            | Prim::StopGradient
            | Prim::Assign
            | Prim::Threefry2x32 => ins[0].clone(),
            Prim::Compare(_) => Aval::new(&ins[0].shape, DType::Bool),
            Prim::Where => ins[1].clone(),
            Prim::Cast(d) => Aval::new(&ins[0].shape, *d),
            Prim::Reduce { axes, .. } => Aval {
                shape: drop_axes(&ins[0].shape, axes),
                dtype: ins[0].dtype,
            },
            Prim::ArgReduce { axis, .. } => Aval {
                shape: drop_axes(&ins[0].shape, &[*axis]),
                dtype: DType::I32,
            },
            Prim::Cumulative { .. } | Prim::Flip { .. } | Prim::ScatterAdd { .. } => ins[0].clone(),
            Prim::Reshape { shape } | Prim::Broadcast { shape } => Aval::new(shape, ins[0].dtype),
            Prim::Permute { perm } => Aval {
                shape: perm.iter().map(|&p| ins[0].shape[p]).collect(),
                dtype: ins[0].dtype,
            },
            Prim::Slice { start, end, step } => Aval {
                shape: (0..start.len())
                    .map(|i| end[i].saturating_sub(start[i]).div_ceil(step[i]))
                    .collect(),
                dtype: ins[0].dtype,
            },
            Prim::Pad { lo, hi, .. } => Aval {
                shape: (0..lo.len())
                    .map(|i| lo[i] + ins[0].shape[i] + hi[i])
                    .collect(),
                dtype: ins[0].dtype,
            },
            Prim::Concat { axis } => {
                let mut shape = ins[0].shape.clone();
                shape[*axis] = ins.iter().map(|a| a.shape[*axis]).sum();
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Gather { .. } => Aval::new(&ins[1].shape, ins[0].dtype),
            Prim::ReduceWindow {
                window,
                strides,
                padding,
                ..
            } => Aval::new(
                &window_out_shape(&ins[0].shape, window, strides, padding),
                ins[0].dtype,
            ),
            Prim::WindowArgmax {
                window,
                strides,
                padding,
                ..
            } => Aval::new(
                &window_out_shape(&ins[0].shape, window, strides, padding),
                DType::I32,
            ),
            Prim::Argsort { .. } => Aval::new(&ins[0].shape, DType::I32),
            Prim::TopK { k } => {
                let mut shape = ins[0].shape.clone();
                *shape.last_mut().expect("top_k: rank >= 1") = *k;
                Aval::new(&shape, DType::I32)
            }
            Prim::DotGeneral {
                lhs_batch,
                rhs_batch,
                lhs_contract,
                rhs_contract,
            } => {
                let (l, r) = (&ins[0].shape, &ins[1].shape);
                let mut shape: Vec<usize> = lhs_batch.iter().map(|&a| l[a]).collect();
                shape.extend(
                    (0..l.len())
                        .filter(|a| !lhs_batch.contains(a) && !lhs_contract.contains(a))
                        .map(|a| l[a]),
                );
                shape.extend(
                    (0..r.len())
                        .filter(|a| !rhs_batch.contains(a) && !rhs_contract.contains(a))
                        .map(|a| r[a]),
                );
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Conv {
                strides,
                padding,
                lhs_dilation,
                rhs_dilation,
                ..
            } => {
                let (x, w) = (&ins[0].shape, &ins[1].shape);
                let mut shape = vec![x[0], w[0]];
                for d in 0..strides.len() {
                    shape.push(conv_out_size(
                        x[2 + d],
                        w[2 + d],
                        strides[d],
                        padding[d],
                        lhs_dilation[d],
                        rhs_dilation[d],
                    ));
                }
                Aval::new(&shape, ins[0].dtype)
            }
            // linear algebra
            Prim::Cholesky => ins[0].clone(),
            Prim::TriangularSolve { .. } | Prim::Solve => ins[1].clone(),
            Prim::Slogdet => {
                let s = &ins[0].shape;
                let mut shape = s[..s.len() - 2].to_vec();
                shape.push(2);
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Qr { complete } => {
                let s = &ins[0].shape;
                let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
                let mut shape = s[..s.len() - 2].to_vec();
                shape.extend([m, if *complete { m } else { m.min(n) }]);
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Eigh => {
                let s = &ins[0].shape;
                let n = s[s.len() - 1];
                let mut shape = s[..s.len() - 2].to_vec();
                shape.extend([n + 1, n]);
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Svd { full_matrices } => {
                let s = &ins[0].shape;
                let (m, n) = (s[s.len() - 2], s[s.len() - 1]);
                let mut shape = s[..s.len() - 2].to_vec();
                shape.push(svd_packed_len(m, n, *full_matrices));
                Aval::new(&shape, ins[0].dtype)
            }
            Prim::Fft { kind, lengths } => {
                let mut shape = ins[0].shape.clone();
                let last = shape.len() - 1;
                let n = lengths[lengths.len() - 1];
                let dtype = match kind {
                    FftKind::Fft | FftKind::Ifft => ins[0].dtype,
                    FftKind::Rfft => {
                        shape[last] = n / 2 + 1;
                        ins[0].dtype.complex_dtype()
                    }
                    FftKind::Irfft => {
                        shape[last] = n;
                        ins[0].dtype.real_dtype()
                    }
                };
                Aval::new(&shape, dtype)
            }
        }
    }
}

/// The last-axis length of a packed `Prim::Svd` output of an `m`×`n` matrix.
pub(crate) fn svd_packed_len(m: usize, n: usize, full_matrices: bool) -> usize {
    let k = m.min(n);
    let (ku, kv) = if full_matrices { (m, n) } else { (k, k) };
    m * ku + k + kv * n
}

/// `(n - 1) * d + 1` (0 for `n == 0`): the size of `n` elements `d` apart.
pub fn dilate_size(n: usize, d: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) * d + 1
    }
}

/// One spatial output size of a convolution (XLA's rule; 0 when the dilated
/// kernel does not fit the padded, dilated input).
pub fn conv_out_size(
    input: usize,
    kernel: usize,
    stride: usize,
    pad: (isize, isize),
    lhs_dilation: usize,
    rhs_dilation: usize,
) -> usize {
    let padded = dilate_size(input, lhs_dilation) as isize + pad.0 + pad.1;
    let k = dilate_size(kernel, rhs_dilation) as isize;
    if padded < k {
        0
    } else {
        ((padded - k) / stride as isize) as usize + 1
    }
}

/// The output shape of a window reduction: per axis,
/// `(n + lo + hi - window) / stride + 1` (the padded size is at least the
/// window; the public operations check it).
pub fn window_out_shape(
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    padding: &[(usize, usize)],
) -> Vec<usize> {
    (0..shape.len())
        .map(|d| (shape[d] + padding[d].0 + padding[d].1 - window[d]) / strides[d] + 1)
        .collect()
}

/// `shape` without the listed axes.
pub fn drop_axes(shape: &[usize], axes: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &n)| n)
        .collect()
}
