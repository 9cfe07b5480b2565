//! The op table: every public operation of nx, with sample inputs of each
//! dtype it takes and an independent reference (`super::refs`).
//!
//! An entry (`OpCase`) is data: its inputs, a function running the operation
//! on tensors (any tensors of the inputs' avals: concrete, views, or tracers
//! of a transformation), and a reference function over `RefArray`s. Generic
//! tests take `all_cases()` and run every entry through some check (eager vs
//! reference here; later eager vs jit, vmap vs a loop, gradients), so a new
//! operation gets all of them by adding entries.

use super::refs as r;
use super::{
    int_range, pseudo_random, tensor, tensor_i, vector, RefArray, Tol, FLOATS, INTS, NUMERIC,
};
use nx::{DType, Slice, Tensor};
use std::sync::Arc;

pub type RunFn = Arc<dyn Fn(&[Tensor]) -> Vec<Tensor> + Send + Sync>;
pub type RefFn = Arc<dyn Fn(&[RefArray]) -> Vec<RefArray> + Send + Sync>;

/// One entry of the op table.
#[derive(Clone)]
pub struct OpCase {
    /// The public operation exercised (`"add"`, `"Tensor::where_"`, `"op +"`, ...).
    pub op: &'static str,
    /// Unique name: the op, the dtype and what is special about the inputs.
    pub name: String,
    pub inputs: Vec<Tensor>,
    /// Runs the operation (and only it) on tensors shaped like `inputs`.
    pub run: RunFn,
    /// The naive reference on the inputs' values.
    pub reference: RefFn,
    /// Multiplies the dtype's default tolerance (0: exact).
    pub tol_scale: f64,
    /// The sign of zero results must match.
    pub signed_zeros: bool,
}

impl OpCase {
    /// A single-output entry.
    pub fn new(
        op: &'static str,
        variant: impl AsRef<str>,
        inputs: Vec<Tensor>,
        run: impl Fn(&[Tensor]) -> Tensor + Send + Sync + 'static,
        reference: impl Fn(&[RefArray]) -> RefArray + Send + Sync + 'static,
    ) -> OpCase {
        OpCase {
            op,
            name: format!("{op}/{}", variant.as_ref()),
            inputs,
            run: Arc::new(move |x| vec![run(x)]),
            reference: Arc::new(move |x| vec![reference(x)]),
            tol_scale: 1.0,
            signed_zeros: false,
        }
    }

    /// An entry with several outputs (`split`, `chunk`).
    pub fn multi(
        op: &'static str,
        variant: impl AsRef<str>,
        inputs: Vec<Tensor>,
        run: impl Fn(&[Tensor]) -> Vec<Tensor> + Send + Sync + 'static,
        reference: impl Fn(&[RefArray]) -> Vec<RefArray> + Send + Sync + 'static,
    ) -> OpCase {
        OpCase {
            op,
            name: format!("{op}/{}", variant.as_ref()),
            inputs,
            run: Arc::new(run),
            reference: Arc::new(reference),
            tol_scale: 1.0,
            signed_zeros: false,
        }
    }

    pub fn tol(mut self, scale: f64) -> OpCase {
        self.tol_scale = scale;
        self
    }

    pub fn exact(self) -> OpCase {
        self.tol(0.0)
    }

    pub fn signed_zeros(mut self) -> OpCase {
        self.signed_zeros = true;
        self
    }

    /// The reference outputs for `inputs`.
    pub fn expected_for(&self, inputs: &[Tensor]) -> Vec<RefArray> {
        let refs: Vec<RefArray> = inputs.iter().map(RefArray::from_tensor).collect();
        (self.reference)(&refs)
    }

    /// The tolerance for an output of `dtype`.
    pub fn tolerance(&self, dtype: DType) -> Tol {
        let mut t = Tol::for_dtype(dtype, self.tol_scale);
        t.signed_zeros = self.signed_zeros;
        t
    }

    /// Checks outputs `got` against the reference on `inputs`.
    pub fn check_outputs(&self, inputs: &[Tensor], got: &[Tensor], ctx: &str) {
        let expected = self.expected_for(inputs);
        assert_eq!(
            got.len(),
            expected.len(),
            "{}{ctx}: {} outputs, the reference has {}",
            self.name,
            got.len(),
            expected.len()
        );
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let c = format!("{}{ctx} (output {i})", self.name);
            super::assert_matches(g, e, &self.tolerance(e.dtype), &c);
        }
    }

    /// Runs the entry eagerly on its inputs and checks it against the reference.
    pub fn check(&self) {
        let got = (self.run)(&self.inputs);
        self.check_outputs(&self.inputs, &got, "");
    }
}

// ---------------------------------------------------------------------------
// Input helpers.

/// Interesting integers of `dtype`: small values, both signs, the extremes.
pub fn int_samples(dtype: DType) -> Vec<i128> {
    let (lo, hi) = int_range(dtype);
    let mut v = vec![0, 1, 2, 3, 7, 100, hi, hi - 1];
    if dtype.is_signed_int() {
        v.extend([-1, -2, -7, -100, lo, lo + 1]);
    } else {
        v.extend([hi / 2, hi / 2 + 1]);
    }
    v
}

/// Interesting floats: zeros of both signs, small and large, inf, NaN.
pub const SPECIALS: [f64; 11] = [
    0.0,
    -0.0,
    1.0,
    -2.5,
    3.0,
    0.001,
    -7.25,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    0.5,
];

fn col(dtype: DType, v: &[f64]) -> Tensor {
    tensor(dtype, &[v.len(), 1], v)
}

fn row(dtype: DType, v: &[f64]) -> Tensor {
    tensor(dtype, &[1, v.len()], v)
}

fn col_i(dtype: DType, v: &[i128]) -> Tensor {
    tensor_i(dtype, &[v.len(), 1], v)
}

fn row_i(dtype: DType, v: &[i128]) -> Tensor {
    tensor_i(dtype, &[1, v.len()], v)
}

/// A `[2, 3, 4]` tensor of `dtype` with distinct values (bool: a pattern).
pub fn block(dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..24)
        .map(|i| match dtype {
            DType::Bool => ((i * 7) % 3 == 0) as i32 as f64,
            DType::U8 | DType::U16 | DType::U32 | DType::U64 => (i * 5 % 24) as f64,
            d if d.is_float() => (i as f64 - 11.5) * 0.25,
            _ => (i * 5 % 24) as f64 - 11.0,
        })
        .collect();
    tensor(dtype, &[2, 3, 4], &v)
}

/// Dtypes the movement operations are tried on.
pub const MOVE_DTYPES: [DType; 6] = [
    DType::F32,
    DType::F64,
    DType::I64,
    DType::U8,
    DType::Bool,
    DType::BF16,
];

// ---------------------------------------------------------------------------
// The table.

/// Every entry of the op table.
pub fn all_cases() -> Vec<OpCase> {
    let mut c = vec![];
    creation(&mut c);
    unary_float(&mut c);
    unary_numeric(&mut c);
    binary(&mut c);
    activations(&mut c);
    comparisons_and_logic(&mut c);
    bitwise(&mut c);
    casts(&mut c);
    operators(&mut c);
    movement(&mut c);
    composites(&mut c);
    reductions(&mut c);
    indexing(&mut c);
    pools(&mut c);
    linalg(&mut c);
    c
}

/// Public operations the table must cover (each must appear as some entry's `op`).
pub const REQUIRED_OPS: &[&str] = &[
    // creation
    "zeros",
    "ones",
    "full",
    "zeros_like",
    "ones_like",
    "full_like",
    "scalar_like",
    "arange",
    "linspace",
    "eye",
    "iota",
    "from_slice",
    "from_vec",
    "scalar",
    // elementwise math
    "add",
    "sub",
    "mul",
    "div",
    "rem",
    "pow",
    "neg",
    "abs",
    "sign",
    "square",
    "sqrt",
    "rsqrt",
    "recip",
    "exp",
    "exp2",
    "log",
    "log2",
    "log1p",
    "expm1",
    "sin",
    "cos",
    "tan",
    "asin",
    "acos",
    "atan",
    "atan2",
    "sinh",
    "cosh",
    "tanh",
    "asinh",
    "acosh",
    "atanh",
    "erf",
    "floor",
    "ceil",
    "round",
    "trunc",
    "sigmoid",
    "relu",
    "gelu",
    "softplus",
    "silu",
    "clamp",
    "maximum",
    "minimum",
    // comparisons and logic
    "less",
    "less_equal",
    "greater",
    "greater_equal",
    "equal",
    "not_equal",
    "logical_and",
    "logical_or",
    "logical_xor",
    "logical_not",
    "isnan",
    "isinf",
    "isfinite",
    "Tensor::where_",
    // bitwise
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "bitwise_not",
    "shift_left",
    "shift_right",
    "cast",
    // operators
    "op +",
    "op -",
    "op *",
    "op /",
    "op %",
    "op neg",
    // movement
    "reshape",
    "flatten",
    "permute",
    "transpose",
    "swapaxes",
    "moveaxis",
    "expand",
    "broadcast_to",
    "squeeze",
    "unsqueeze",
    "slice",
    "narrow",
    "get",
    "flip",
    "contiguous",
    "copy",
    "assign",
    "blit",
    // indexing and windows
    "take",
    "take_along_axis",
    "gather",
    "scatter_add",
    "index_add",
    "segment_sum",
    "one_hot",
    "max_pool",
    "avg_pool",
];

fn creation(c: &mut Vec<OpCase>) {
    let shapes: [&[usize]; 4] = [&[], &[3], &[2, 3], &[0, 4]];
    for dt in nx::DType::ALL {
        for shape in shapes {
            let s = shape.to_vec();
            let v = format!("{dt}/{shape:?}");
            let s1 = s.clone();
            c.push(
                OpCase::new("zeros", &v, vec![], move |_| Tensor::zeros(&s1, dt), {
                    let s = s.clone();
                    move |_| RefArray::from_f64s(dt, &s, vec![0.0; super::numel(&s)])
                })
                .exact()
                .signed_zeros(),
            );
            let s1 = s.clone();
            c.push(
                OpCase::new("ones", &v, vec![], move |_| Tensor::ones(&s1, dt), {
                    let s = s.clone();
                    move |_| RefArray::from_f64s(dt, &s, vec![1.0; super::numel(&s)])
                })
                .exact(),
            );
        }
        // full: the value converts like a cast from f64.
        for value in [2.75, -3.5, 0.0, -0.0, 1e6, f64::NAN, f64::INFINITY, -1.0] {
            let s = vec![2, 2];
            c.push(
                OpCase::new(
                    "full",
                    format!("{dt}/{value}"),
                    vec![],
                    move |_| Tensor::full(&[2, 2], value, dt),
                    move |_| {
                        let src = RefArray::floats(DType::F64, &s, vec![value; 4]);
                        r::cast(&src, dt)
                    },
                )
                .exact()
                .signed_zeros(),
            );
        }
        // *_like take shape and dtype from their input.
        let x = block(dt);
        c.push(
            OpCase::new(
                "zeros_like",
                dt.name(),
                vec![x.clone()],
                |x| x[0].zeros_like(),
                |x| RefArray::from_f64s(x[0].dtype, &x[0].shape, vec![0.0; x[0].numel()]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "ones_like",
                dt.name(),
                vec![x.clone()],
                |x| x[0].ones_like(),
                |x| RefArray::from_f64s(x[0].dtype, &x[0].shape, vec![1.0; x[0].numel()]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "full_like",
                dt.name(),
                vec![x.clone()],
                |x| x[0].full_like(5.0),
                |x| RefArray::from_f64s(x[0].dtype, &x[0].shape, vec![5.0; x[0].numel()]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "scalar_like",
                dt.name(),
                vec![x.clone()],
                |x| x[0].scalar_like(-2.5),
                |x| r::cast(&RefArray::floats(DType::F64, &[], vec![-2.5]), x[0].dtype),
            )
            .exact(),
        );
        // eye
        for n in [0usize, 1, 3] {
            c.push(
                OpCase::new(
                    "eye",
                    format!("{dt}/{n}"),
                    vec![],
                    move |_| Tensor::eye(n, dt),
                    move |_| {
                        let v = (0..n * n).map(|k| (k / n == k % n) as i32 as f64).collect();
                        RefArray::from_f64s(dt, &[n, n], v)
                    },
                )
                .exact(),
            );
        }
    }
    // iota
    for (shape, ax, dt) in [
        (vec![4], 0, DType::I32),
        (vec![2, 3], 1, DType::F32),
        (vec![2, 3], 0, DType::I64),
        (vec![3, 0], 0, DType::U8),
        (vec![2, 2, 2], 2, DType::F16),
    ] {
        let s = shape.clone();
        c.push(
            OpCase::new(
                "iota",
                format!("{dt}/{shape:?}/{ax}"),
                vec![],
                move |_| Tensor::iota(&s, ax, dt),
                move |_| {
                    let v = super::all_indices(&shape)
                        .iter()
                        .map(|i| i[ax] as f64)
                        .collect();
                    RefArray::from_f64s(dt, &shape, v)
                },
            )
            .exact(),
        );
    }
    // arange: numpy's; n = ceil((end - start) / step), values start + i * step.
    for (start, end, step, dt) in [
        (0.0, 5.0, 1.0, DType::I64),
        (0.0, 10.0, 3.0, DType::I32),
        (1.0, 2.0, 0.25, DType::F32),
        (5.0, 0.0, -1.5, DType::F64),
        (0.0, 0.0, 1.0, DType::F32),
        (3.0, 1.0, 1.0, DType::I32),
        (-2.0, 2.0, 0.5, DType::F16),
        (0.0, 1.0, 0.1, DType::F64),
        (0.0, 5.0, 2.0, DType::U8),
        (-1.0, 1.0, 0.5, DType::BF16),
    ] {
        c.push(
            OpCase::new(
                "arange",
                format!("{dt}/{start}..{end}/{step}"),
                vec![],
                move |_| Tensor::arange(start, end, step, dt),
                move |_| {
                    let mut v = vec![];
                    let mut i = 0.0;
                    loop {
                        let x = start + i * step;
                        if (step > 0.0 && x >= end) || (step < 0.0 && x <= end) {
                            break;
                        }
                        v.push(x);
                        i += 1.0;
                    }
                    let n = v.len();
                    r::cast(&RefArray::floats(DType::F64, &[n], v), dt)
                },
            )
            .tol(2.0),
        );
    }
    // linspace: n points, both ends included.
    for (start, end, n, dt) in [
        (0.0, 1.0, 5usize, DType::F32),
        (-1.0, 1.0, 4, DType::F64),
        (2.0, 2.0, 1, DType::F64),
        (0.0, 1.0, 0, DType::F32),
        (0.0, 9.0, 4, DType::I32),
        (10.0, -10.0, 6, DType::F16),
        (1.0, 2.0, 3, DType::BF16),
    ] {
        c.push(
            OpCase::new(
                "linspace",
                format!("{dt}/{start}..={end}/{n}"),
                vec![],
                move |_| Tensor::linspace(start, end, n, dt),
                move |_| {
                    let v: Vec<f64> = (0..n)
                        .map(|i| {
                            if n == 1 {
                                start
                            } else if i == n - 1 {
                                end
                            } else {
                                start + (end - start) * i as f64 / (n - 1) as f64
                            }
                        })
                        .collect();
                    r::cast(&RefArray::floats(DType::F64, &[n], v), dt)
                },
            )
            .tol(4.0),
        );
    }
    // from_slice / from_vec / scalar, for every element type.
    c.push(
        OpCase::new(
            "from_slice",
            "f32",
            vec![],
            |_| Tensor::from_slice(&[1.5f32, -0.0, f32::INFINITY, 7.0, -2.25, 1e-40], &[2, 3]),
            |_| {
                RefArray::floats(
                    DType::F32,
                    &[2, 3],
                    vec![1.5, -0.0, f64::INFINITY, 7.0, -2.25, 1e-40f32 as f64],
                )
            },
        )
        .exact()
        .signed_zeros(),
    );
    c.push(OpCase::new(
        "from_slice",
        "i64",
        vec![],
        |_| Tensor::from_slice(&[i64::MIN, -1, 0, i64::MAX], &[4]),
        |_| {
            RefArray::ints(
                DType::I64,
                &[4],
                vec![i64::MIN as i128, -1, 0, i64::MAX as i128],
            )
        },
    ));
    c.push(OpCase::new(
        "from_slice",
        "bool",
        vec![],
        |_| Tensor::from_slice(&[true, false, true], &[3, 1]),
        |_| RefArray::bools(&[3, 1], vec![true, false, true]),
    ));
    c.push(OpCase::new(
        "from_slice",
        "u16",
        vec![],
        |_| Tensor::from_slice(&[u16::MAX, 0, 3], &[3]),
        |_| RefArray::ints(DType::U16, &[3], vec![65535, 0, 3]),
    ));
    c.push(
        OpCase::new(
            "from_slice",
            "f16",
            vec![],
            |_| {
                let v: Vec<half::f16> = [1.0, -65504.0, 6e-8, 0.1]
                    .iter()
                    .map(|&x| half::f16::from_f32(x))
                    .collect();
                Tensor::from_slice(&v, &[2, 2])
            },
            |_| {
                RefArray::floats(
                    DType::F16,
                    &[2, 2],
                    vec![
                        1.0,
                        -65504.0,
                        2f64.powi(-24) * 1.0,
                        super::round_to_f16(0.1f32 as f64),
                    ],
                )
            },
        )
        .exact(),
    );
    c.push(OpCase::new(
        "from_vec",
        "f64",
        vec![],
        |_| Tensor::from_vec(vec![1.0f64, 2.0, f64::NAN, -0.5], &[2, 2]),
        |_| RefArray::floats(DType::F64, &[2, 2], vec![1.0, 2.0, f64::NAN, -0.5]),
    ));
    c.push(OpCase::new(
        "from_vec",
        "i8",
        vec![],
        |_| Tensor::from_vec(vec![-128i8, 127, 0], &[3]),
        |_| RefArray::ints(DType::I8, &[3], vec![-128, 127, 0]),
    ));
    c.push(OpCase::new(
        "from_vec",
        "u64-empty",
        vec![],
        |_| Tensor::from_vec(Vec::<u64>::new(), &[0, 5]),
        |_| RefArray::ints(DType::U64, &[0, 5], vec![]),
    ));
    c.push(OpCase::new(
        "from_vec",
        "bf16",
        vec![],
        |_| {
            Tensor::from_vec(
                vec![half::bf16::from_f32(3.0), half::bf16::from_f32(-0.5)],
                &[2],
            )
        },
        |_| RefArray::floats(DType::BF16, &[2], vec![3.0, -0.5]),
    ));
    c.push(OpCase::new(
        "scalar",
        "f64",
        vec![],
        |_| Tensor::scalar(2.5f64),
        |_| RefArray::floats(DType::F64, &[], vec![2.5]),
    ));
    c.push(OpCase::new(
        "scalar",
        "u32",
        vec![],
        |_| Tensor::scalar(u32::MAX),
        |_| RefArray::ints(DType::U32, &[], vec![u32::MAX as i128]),
    ));
    c.push(OpCase::new(
        "scalar",
        "bool",
        vec![],
        |_| Tensor::scalar(true),
        |_| RefArray::bools(&[], vec![true]),
    ));
    c.push(OpCase::new(
        "scalar",
        "i16",
        vec![],
        |_| Tensor::scalar(-300i16),
        |_| RefArray::ints(DType::I16, &[], vec![-300]),
    ));
}

type UnaryFn = fn(&Tensor) -> Tensor;

/// Float-only unary math: `(name, op, reference, inputs, tolerance scale)`.
fn unary_float(c: &mut Vec<OpCase>) {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    type Row = (&'static str, UnaryFn, fn(f64) -> f64, Vec<f64>, f64);
    let list: Vec<Row> = vec![
        (
            "sqrt",
            Tensor::sqrt,
            f64::sqrt,
            vec![0.0, -0.0, 0.25, 2.0, 100.0, 1e-3, -1.0, inf, nan],
            1.0,
        ),
        (
            "rsqrt",
            Tensor::rsqrt,
            |x| 1.0 / x.sqrt(),
            vec![0.25, 2.0, 100.0, 1e-3, 0.0, -1.0, inf, nan, 3.0],
            1.5,
        ),
        (
            "recip",
            Tensor::recip,
            |x| 1.0 / x,
            vec![2.0, -0.5, 3.0, 1e-3, 0.0, -0.0, inf, -inf, nan],
            1.0,
        ),
        (
            "exp",
            Tensor::exp,
            f64::exp,
            vec![
                0.0, -0.0, 1.0, -1.0, 2.5, -10.0, 10.0, 80.0, 800.0, -800.0, inf, -inf, nan,
            ],
            1.0,
        ),
        (
            "exp2",
            Tensor::exp2,
            f64::exp2,
            vec![
                0.0, 1.0, -1.0, 0.5, 10.0, -24.0, 100.0, 200.0, -3.3, inf, -inf, nan,
            ],
            1.0,
        ),
        (
            "log",
            Tensor::log,
            f64::ln,
            vec![1.0, 2.5, 0.5, 100.0, 1e-3, 0.0, -0.0, -1.0, inf, nan, 3e4],
            1.0,
        ),
        (
            "log2",
            Tensor::log2,
            f64::log2,
            vec![1.0, 8.0, 0.125, 3.0, 100.0, 0.0, -1.0, inf, nan, 1e-3],
            1.0,
        ),
        (
            "log1p",
            Tensor::log1p,
            f64::ln_1p,
            vec![
                0.0, -0.0, 1e-5, -0.5, 1.0, 100.0, -1.0, -2.0, inf, nan, 3e-3,
            ],
            1.0,
        ),
        (
            "expm1",
            Tensor::expm1,
            f64::exp_m1,
            vec![
                0.0, -0.0, 1e-5, -1e-5, 1.0, -1.0, 5.0, -30.0, inf, -inf, nan,
            ],
            1.0,
        ),
        (
            "sin",
            Tensor::sin,
            f64::sin,
            vec![0.0, -0.0, 0.5, -1.0, 3.0, 10.0, 100.0, inf, nan, -2.0],
            1.0,
        ),
        (
            "cos",
            Tensor::cos,
            f64::cos,
            vec![0.0, -0.0, 0.5, -1.0, 3.0, 10.0, 100.0, inf, nan, -2.0],
            1.0,
        ),
        (
            "tan",
            Tensor::tan,
            f64::tan,
            vec![0.0, -0.0, 0.5, -1.0, 1.5, 3.0, 10.0, inf, nan],
            1.0,
        ),
        (
            "asin",
            Tensor::asin,
            f64::asin,
            vec![0.0, -0.0, 0.5, -0.9, 1.0, -1.0, 1.5, nan, 0.01],
            1.0,
        ),
        (
            "acos",
            Tensor::acos,
            f64::acos,
            vec![0.0, -0.0, 0.5, -0.9, 1.0, -1.0, 1.5, nan, 0.01],
            1.0,
        ),
        (
            "atan",
            Tensor::atan,
            f64::atan,
            vec![0.0, -0.0, 0.5, -3.0, 100.0, inf, -inf, nan],
            1.0,
        ),
        (
            "sinh",
            Tensor::sinh,
            f64::sinh,
            vec![
                0.0, -0.0, 0.5, -1.0, 5.0, -10.0, 100.0, 1e-3, inf, -inf, nan,
            ],
            1.5,
        ),
        (
            "cosh",
            Tensor::cosh,
            f64::cosh,
            vec![0.0, -0.0, 0.5, -1.0, 5.0, -10.0, 100.0, inf, -inf, nan],
            1.5,
        ),
        (
            "tanh",
            Tensor::tanh,
            f64::tanh,
            vec![0.0, -0.0, 0.5, -1.0, 5.0, -20.0, 1e-3, inf, -inf, nan],
            1.0,
        ),
        (
            "asinh",
            Tensor::asinh,
            f64::asinh,
            vec![0.0, -0.0, 0.5, -1.0, 5.0, -100.0, 1e4, 1e-3, inf, -inf, nan],
            1.5,
        ),
        (
            "acosh",
            Tensor::acosh,
            f64::acosh,
            vec![
                1.0,
                1.5,
                2.0,
                10.0,
                1000.0,
                0.5,
                inf,
                nan,
                1.0009765625,
                1.125,
            ],
            1.5,
        ),
        (
            "atanh",
            Tensor::atanh,
            f64::atanh,
            vec![0.0, -0.0, 0.5, -0.9, 0.99, 1.0, -1.0, 2.0, nan, 1e-3],
            1.5,
        ),
        (
            "erf",
            Tensor::erf,
            r::erf,
            vec![
                0.0, -0.0, 0.1, -0.5, 1.0, 2.0, -3.0, 5.0, inf, -inf, nan, 1e-3,
            ],
            1.5,
        ),
        (
            "sigmoid",
            Tensor::sigmoid,
            r::sigmoid,
            vec![
                0.0, 1.0, -1.0, 5.0, -10.0, -20.0, 50.0, -100.0, inf, -inf, nan,
            ],
            2.0,
        ),
    ];
    for (name, f, rf, vals, tol) in list {
        for dt in FLOATS {
            c.push(
                OpCase::new(
                    name,
                    dt.name(),
                    vec![vector(dt, &vals)],
                    move |x| f(&x[0]),
                    move |x| r::map_f(&x[0], rf),
                )
                .tol(tol)
                .signed_zeros(),
            );
        }
        // A 2-D non-contiguous input too.
        let x = tensor(
            DType::F32,
            &[3, 4],
            &pseudo_random(name.len() as u64, 12, 0.1, 0.9),
        )
        .transpose();
        c.push(
            OpCase::new(
                name,
                "f32/transposed",
                vec![x],
                move |x| f(&x[0]),
                move |x| r::map_f(&x[0], rf),
            )
            .tol(tol),
        );
    }
}

/// Unary operations on every numeric dtype.
fn unary_numeric(c: &mut Vec<OpCase>) {
    let inf = f64::INFINITY;
    let nan = f64::NAN;
    let fvals = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        -0.4,
        3.7,
        -3.7,
        4.5,
        1e7 + 0.5,
        inf,
        -inf,
        nan,
    ];
    type Ref = (fn(f64) -> f64, fn(i128) -> i128);
    let list: Vec<(&'static str, UnaryFn, Ref)> = vec![
        ("neg", Tensor::neg, (|x| -x, |x| -x)),
        ("abs", Tensor::abs, (f64::abs, |x| x.abs())),
        ("sign", Tensor::sign, (r::sign_f, |x| x.signum())),
        ("square", Tensor::square, (|x| x * x, |x| x.wrapping_mul(x))),
        ("floor", Tensor::floor, (f64::floor, |x| x)),
        ("ceil", Tensor::ceil, (f64::ceil, |x| x)),
        ("round", Tensor::round, (r::round_half_even, |x| x)),
        ("trunc", Tensor::trunc, (f64::trunc, |x| x)),
        (
            "relu",
            Tensor::relu,
            (
                |x| {
                    // NaN stays NaN.
                    if x.is_nan() || x > 0.0 {
                        x
                    } else {
                        0.0
                    }
                },
                |x| x.max(0),
            ),
        ),
    ];
    for (name, f, (ff, fi)) in list {
        for dt in NUMERIC {
            let x = if dt.is_float() {
                vector(dt, &fvals)
            } else {
                tensor_i(dt, &[int_samples(dt).len()], &int_samples(dt))
            };
            let case = OpCase::new(
                name,
                dt.name(),
                vec![x],
                move |x| f(&x[0]),
                move |x| r::map_num(&x[0], ff, fi),
            );
            // relu(-0) may be either zero; every other of these keeps the sign.
            c.push(if name == "relu" {
                case
            } else {
                case.signed_zeros()
            });
        }
    }
    // clamp(lo, hi): NaN stays NaN.
    for dt in NUMERIC {
        let (x, lo, hi) = if dt.is_float() {
            (vector(dt, &fvals), -1.5, 2.0)
        } else if dt.is_signed_int() {
            (
                tensor_i(dt, &[int_samples(dt).len()], &int_samples(dt)),
                -3.0,
                50.0,
            )
        } else {
            (
                tensor_i(dt, &[int_samples(dt).len()], &int_samples(dt)),
                2.0,
                50.0,
            )
        };
        c.push(OpCase::new(
            "clamp",
            dt.name(),
            vec![x],
            move |x| x[0].clamp(lo, hi),
            move |x| {
                r::map_num(
                    &x[0],
                    |v| if v.is_nan() { v } else { v.max(lo).min(hi) },
                    |v| v.max(lo as i128).min(hi as i128),
                )
            },
        ));
    }
}

fn float_pair_inputs(dt: DType) -> Vec<Tensor> {
    vec![col(dt, &SPECIALS), row(dt, &SPECIALS)]
}

fn int_pair_inputs(dt: DType, b: &[i128]) -> Vec<Tensor> {
    vec![col_i(dt, &int_samples(dt)), row_i(dt, b)]
}

type BinFn = fn(&Tensor, &Tensor) -> Tensor;

fn binary(c: &mut Vec<OpCase>) {
    type Ref = (fn(f64, f64) -> f64, fn(i128, i128) -> i128);
    let list: Vec<(&'static str, BinFn, Ref)> = vec![
        ("add", Tensor::add, (|x, y| x + y, |x, y| x + y)),
        ("sub", Tensor::sub, (|x, y| x - y, |x, y| x - y)),
        ("mul", Tensor::mul, (|x, y| x * y, i128::wrapping_mul)),
        ("div", Tensor::div, (|x, y| x / y, r::idiv)),
        ("rem", Tensor::rem, (|x, y| x % y, r::irem)),
        ("maximum", Tensor::maximum, (r::fmax, |x, y| x.max(y))),
        ("minimum", Tensor::minimum, (r::fmin, |x, y| x.min(y))),
    ];
    for (name, f, (ff, fi)) in list {
        for dt in NUMERIC {
            let inputs = if dt.is_float() {
                float_pair_inputs(dt)
            } else {
                let (lo, hi) = int_range(dt);
                int_pair_inputs(dt, &[0, 1, -1, 2, -3, 5, 100, hi, lo, lo + 1])
            };
            c.push(
                OpCase::new(
                    name,
                    format!("{dt}/outer"),
                    inputs,
                    move |x| f(&x[0], &x[1]),
                    move |x| r::zip_num(&x[0], &x[1], ff, fi),
                )
                .signed_zeros(),
            );
        }
        // Broadcasting a [3] against a [2, 3] view, and a 0-d operand.
        let a = tensor(DType::F64, &[3, 2], &[1.0, -2.0, 3.5, 4.0, -5.0, 6.25]).transpose();
        let b = vector(DType::F64, &[0.5, -1.5, 2.0]);
        c.push(OpCase::new(
            name,
            "f64/broadcast-view",
            vec![a, b],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip_f(&x[0], &x[1], ff),
        ));
        let a = tensor(DType::I32, &[2, 2], &[7.0, -9.0, 11.0, 0.0]);
        let s = Tensor::scalar(4i32);
        c.push(OpCase::new(
            name,
            "i32/scalar-right",
            vec![a.clone(), s.clone()],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip_i(&x[0], &x[1], fi),
        ));
        c.push(OpCase::new(
            name,
            "i32/scalar-left",
            vec![s, a],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip_i(&x[0], &x[1], fi),
        ));
        let e = Tensor::zeros(&[0, 3], DType::F32);
        let b = vector(DType::F32, &[1.0, 2.0, 3.0]);
        c.push(OpCase::new(
            name,
            "f32/empty",
            vec![e, b],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip_f(&x[0], &x[1], ff),
        ));
    }
    // bool maximum/minimum are or/and.
    let (p, q) = (
        tensor(DType::Bool, &[4], &[0.0, 0.0, 1.0, 1.0]),
        tensor(DType::Bool, &[4], &[0.0, 1.0, 0.0, 1.0]),
    );
    c.push(OpCase::new(
        "maximum",
        "bool",
        vec![p.clone(), q.clone()],
        |x| x[0].maximum(&x[1]),
        |x| r::zip_i(&x[0], &x[1], |a, b| a.max(b)),
    ));
    c.push(OpCase::new(
        "minimum",
        "bool",
        vec![p, q],
        |x| x[0].minimum(&x[1]),
        |x| r::zip_i(&x[0], &x[1], |a, b| a.min(b)),
    ));
    // pow
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    let bases = [
        0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, 4.0, inf, -inf, nan, -8.0,
    ];
    let exps = [
        0.0,
        -0.0,
        1.0,
        2.0,
        0.5,
        -1.0,
        -2.0,
        3.0,
        inf,
        -inf,
        nan,
        1.0 / 3.0,
    ];
    for dt in FLOATS {
        c.push(
            OpCase::new(
                "pow",
                dt.name(),
                vec![col(dt, &bases), row(dt, &exps)],
                |x| x[0].pow(&x[1]),
                |x| r::zip_f(&x[0], &x[1], f64::powf),
            )
            .signed_zeros(),
        );
    }
    for dt in INTS {
        let (_, hi) = int_range(dt);
        let d = dt;
        c.push(OpCase::new(
            "pow",
            dt.name(),
            int_pair_inputs(dt, &[0, 1, 2, 3, 5, -1, -2, 7, 63, hi]),
            |x| x[0].pow(&x[1]),
            move |x| r::zip_i(&x[0], &x[1], move |a, b| r::ipow(a, b, d)),
        ));
    }
    // atan2 of every pair of specials (zeros of both signs, infinities).
    for dt in FLOATS {
        c.push(
            OpCase::new(
                "atan2",
                dt.name(),
                float_pair_inputs(dt),
                |x| x[0].atan2(&x[1]),
                |x| r::zip_f(&x[0], &x[1], f64::atan2),
            )
            .signed_zeros(),
        );
    }
}

fn activations(c: &mut Vec<OpCase>) {
    // Composite activations are rounded at every step in the narrow types;
    // their inputs avoid the regions where that cancels badly.
    let wide = vec![
        0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 10.0, -10.0, 30.0, -30.0, 1e-3,
    ];
    let narrow = vec![0.0, 0.5, 1.0, 2.5, 3.0, 10.0, 0.25, -0.25, -0.5];
    type Row = (&'static str, UnaryFn, fn(f64) -> f64);
    let list: Vec<Row> = vec![
        ("gelu", Tensor::gelu, r::gelu),
        ("softplus", Tensor::softplus, r::softplus),
        ("silu", Tensor::silu, |x| x * r::sigmoid(x)),
    ];
    for (name, f, rf) in list {
        for dt in FLOATS {
            let vals = if matches!(dt, DType::F16 | DType::BF16) {
                &narrow
            } else {
                &wide
            };
            c.push(
                OpCase::new(
                    name,
                    dt.name(),
                    vec![vector(dt, vals)],
                    move |x| f(&x[0]),
                    move |x| r::map_f(&x[0], rf),
                )
                .tol(4.0),
            );
        }
    }
    // softplus stays finite and exact at the extremes.
    for dt in [DType::F32, DType::F64] {
        c.push(
            OpCase::new(
                "softplus",
                format!("{dt}/extremes"),
                vec![vector(
                    dt,
                    &[
                        100.0,
                        -100.0,
                        1e4,
                        -1e4,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        f64::NAN,
                    ],
                )],
                |x| x[0].softplus(),
                |x| r::map_f(&x[0], r::softplus),
            )
            .tol(2.0),
        );
    }
}

fn comparisons_and_logic(c: &mut Vec<OpCase>) {
    type Ref = (fn(f64, f64) -> bool, fn(i128, i128) -> bool);
    let list: Vec<(&'static str, BinFn, Ref)> = vec![
        ("less", Tensor::less, (|x, y| x < y, |x, y| x < y)),
        (
            "less_equal",
            Tensor::less_equal,
            (|x, y| x <= y, |x, y| x <= y),
        ),
        ("greater", Tensor::greater, (|x, y| x > y, |x, y| x > y)),
        (
            "greater_equal",
            Tensor::greater_equal,
            (|x, y| x >= y, |x, y| x >= y),
        ),
        ("equal", Tensor::equal, (|x, y| x == y, |x, y| x == y)),
        (
            "not_equal",
            Tensor::not_equal,
            (|x, y| x != y, |x, y| x != y),
        ),
    ];
    for (name, f, (ff, fi)) in list {
        for dt in DType::ALL {
            let inputs = if dt.is_float() {
                float_pair_inputs(dt)
            } else if dt == DType::Bool {
                vec![col_i(dt, &[0, 1]), row_i(dt, &[0, 1])]
            } else {
                let (lo, hi) = int_range(dt);
                int_pair_inputs(dt, &[0, 1, -1, 7, hi, lo])
            };
            c.push(OpCase::new(
                name,
                dt.name(),
                inputs,
                move |x| f(&x[0], &x[1]),
                move |x| r::zip_pred(&x[0], &x[1], ff, fi),
            ));
        }
    }
    // Logical operations: non-zero (and NaN) is true; mixed dtypes are fine.
    type LRef = fn(bool, bool) -> bool;
    let logical: Vec<(&'static str, BinFn, LRef)> = vec![
        ("logical_and", Tensor::logical_and, |a, b| a && b),
        ("logical_or", Tensor::logical_or, |a, b| a || b),
        ("logical_xor", Tensor::logical_xor, |a, b| a != b),
    ];
    for (name, f, lf) in logical {
        for dt in [DType::Bool, DType::F32, DType::I8, DType::U64, DType::F16] {
            let inputs = if dt.is_float() {
                float_pair_inputs(dt)
            } else if dt == DType::Bool {
                vec![col_i(dt, &[0, 1]), row_i(dt, &[0, 1])]
            } else {
                int_pair_inputs(dt, &[0, 1, -1, 2])
            };
            c.push(OpCase::new(
                name,
                dt.name(),
                inputs,
                move |x| f(&x[0], &x[1]),
                move |x| {
                    r::zip_pred(
                        &x[0],
                        &x[1],
                        move |a, b| lf(a != 0.0, b != 0.0),
                        move |a, b| lf(a != 0, b != 0),
                    )
                },
            ));
        }
        let a = vector(DType::F64, &[0.0, -0.0, f64::NAN, 2.0]);
        let b = tensor_i(DType::I32, &[4], &[1, 0, 0, 5]);
        c.push(OpCase::new(
            name,
            "f64-i32",
            vec![a, b],
            move |x| f(&x[0], &x[1]),
            move |x| {
                let (p, q) = (x[0].as_f64(), x[1].i().to_vec());
                RefArray::bools(&[4], (0..4).map(|k| lf(p[k] != 0.0, q[k] != 0)).collect())
            },
        ));
    }
    for dt in [DType::Bool, DType::F32, DType::I16, DType::U8, DType::BF16] {
        let x = if dt.is_float() {
            vector(dt, &SPECIALS)
        } else {
            tensor_i(dt, &[3], &[0, 1, 2])
        };
        c.push(OpCase::new(
            "logical_not",
            dt.name(),
            vec![x],
            |x| x[0].logical_not(),
            |x| r::map_pred(&x[0], |v| v == 0.0, |v| v == 0),
        ));
    }
    // isnan / isinf / isfinite
    type PRef = (fn(f64) -> bool, bool);
    let preds: Vec<(&'static str, UnaryFn, PRef)> = vec![
        ("isnan", Tensor::isnan, (f64::is_nan, false)),
        ("isinf", Tensor::isinf, (f64::is_infinite, false)),
        ("isfinite", Tensor::isfinite, (f64::is_finite, true)),
    ];
    for (name, f, (pf, int_answer)) in preds {
        for dt in DType::ALL {
            let x = if dt.is_float() {
                vector(
                    dt,
                    &[
                        0.0,
                        -0.0,
                        1.0,
                        f64::INFINITY,
                        f64::NEG_INFINITY,
                        f64::NAN,
                        1e300,
                        -65520.0,
                    ],
                )
            } else {
                tensor_i(dt, &[3], &[0, 1, -1])
            };
            c.push(OpCase::new(
                name,
                dt.name(),
                vec![x],
                move |x| f(&x[0]),
                move |x| r::map_pred(&x[0], pf, move |_| int_answer),
            ));
        }
    }
    // where_: three-way broadcasting.
    for dt in DType::ALL {
        let cond = tensor(DType::Bool, &[2, 1], &[1.0, 0.0]);
        let a = block(dt).get(0).get(0); // [4]
        let b = block(dt).get(1).narrow(0, 1, 1); // [1, 4]
        c.push(
            OpCase::new(
                "Tensor::where_",
                dt.name(),
                vec![cond, a, b],
                |x| Tensor::where_(&x[0], &x[1], &x[2]),
                |x| r::where_(&x[0], &x[1], &x[2]),
            )
            .signed_zeros(),
        );
    }
    let cond = tensor(DType::Bool, &[3], &[1.0, 0.0, 1.0]);
    let a = Tensor::scalar(1.5f32);
    let b = vector(DType::F32, &[f64::NAN, -0.0, 7.0]);
    c.push(
        OpCase::new(
            "Tensor::where_",
            "f32/scalar",
            vec![cond, a, b],
            |x| Tensor::where_(&x[0], &x[1], &x[2]),
            |x| r::where_(&x[0], &x[1], &x[2]),
        )
        .signed_zeros(),
    );
}

fn bitwise(c: &mut Vec<OpCase>) {
    type Ref = fn(i128, i128) -> i128;
    let list: Vec<(&'static str, BinFn, Ref)> = vec![
        ("bitwise_and", Tensor::bitwise_and, |a, b| a & b),
        ("bitwise_or", Tensor::bitwise_or, |a, b| a | b),
        ("bitwise_xor", Tensor::bitwise_xor, |a, b| a ^ b),
    ];
    // Two's complement in i128 agrees with the wrapped dtype on these.
    for (name, f, fi) in list {
        for dt in INTS {
            let (lo, hi) = int_range(dt);
            c.push(OpCase::new(
                name,
                dt.name(),
                int_pair_inputs(dt, &[0, 1, -1, 0x55, 6, hi, lo]),
                move |x| f(&x[0], &x[1]),
                move |x| r::zip_i(&x[0], &x[1], fi),
            ));
        }
        c.push(OpCase::new(
            name,
            "bool",
            vec![col_i(DType::Bool, &[0, 1]), row_i(DType::Bool, &[0, 1])],
            move |x| f(&x[0], &x[1]),
            move |x| r::zip_i(&x[0], &x[1], fi),
        ));
    }
    for dt in INTS {
        let s = int_samples(dt);
        c.push(OpCase::new(
            "bitwise_not",
            dt.name(),
            vec![tensor_i(dt, &[s.len()], &s)],
            |x| x[0].bitwise_not(),
            |x| r::map_i(&x[0], r::inot),
        ));
    }
    c.push(OpCase::new(
        "bitwise_not",
        "bool",
        vec![tensor_i(DType::Bool, &[2], &[0, 1])],
        |x| x[0].bitwise_not(),
        |x| r::map_i(&x[0], |v| 1 - v),
    ));
    for dt in INTS {
        let amounts = [0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64, -1, 100];
        let d = dt;
        c.push(OpCase::new(
            "shift_left",
            dt.name(),
            int_pair_inputs(dt, &amounts),
            |x| x[0].shift_left(&x[1]),
            move |x| r::zip_i(&x[0], &x[1], move |a, b| r::ishl(a, b, d)),
        ));
        c.push(OpCase::new(
            "shift_right",
            dt.name(),
            int_pair_inputs(dt, &amounts),
            |x| x[0].shift_right(&x[1]),
            move |x| r::zip_i(&x[0], &x[1], move |a, b| r::ishr(a, b, d)),
        ));
    }
}

/// Sample values of `dt` for the cast table.
fn cast_source(dt: DType) -> Tensor {
    let t = 2f64;
    match dt {
        DType::Bool => tensor_i(dt, &[2], &[0, 1]),
        DType::F64 => vector(
            dt,
            &[
                0.0,
                -0.0,
                1.5,
                -1.5,
                2.5,
                -2.7,
                300.0,
                -300.0,
                70000.0,
                -1e10,
                1e20,
                0.1,
                65519.0,
                65520.0,
                1e-7,
                3e-8,
                2.9e-8,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                // Ties of the narrow types decided by low bits of the f64.
                1.0 + t.powi(-11) + t.powi(-40),
                1.0 + t.powi(-8) + t.powi(-40),
                1.0 + t.powi(-24) + t.powi(-50),
                -(1.0 + t.powi(-11) + t.powi(-30)),
                1e-39,
                4e300,
                255.9,
                -128.5,
                2f64.powi(63),
                2f64.powi(64) * 0.75,
            ],
        ),
        DType::F32 => vector(
            dt,
            &[
                0.0,
                -0.0,
                1.5,
                -1.5,
                2.5,
                -2.7,
                300.0,
                -300.0,
                70000.0,
                -1e10,
                1e20,
                0.1,
                65519.0,
                65520.0,
                1e-7,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                1.0 + t.powi(-11) + t.powi(-23),
                1.0 + t.powi(-8) + t.powi(-23),
                -(1.0 + t.powi(-8) + t.powi(-20)),
                1e-39,
                255.9,
                -128.5,
                4294967296.0,
            ],
        ),
        DType::F16 | DType::BF16 => vector(
            dt,
            &[
                0.0,
                -0.0,
                1.5,
                -1.5,
                2.5,
                -2.75,
                300.0,
                -300.0,
                60000.0,
                0.1,
                6e-8,
                f64::NAN,
                f64::INFINITY,
                f64::NEG_INFINITY,
                255.9,
                -128.5,
            ],
        ),
        d => {
            let mut s = int_samples(d);
            if d == DType::I64 || d == DType::U64 {
                // Beyond 2^53: converting to f32/bf16 must round once.
                s.extend([
                    (1 << 60) + (1 << 36) + 1,
                    (1 << 60) + (1 << 52) + 1,
                    (1 << 53) + 1,
                ]);
            }
            tensor_i(d, &[s.len()], &s)
        }
    }
}

fn casts(c: &mut Vec<OpCase>) {
    for from in DType::ALL {
        for to in DType::ALL {
            c.push(
                OpCase::new(
                    "cast",
                    format!("{from}->{to}"),
                    vec![cast_source(from)],
                    move |x| x[0].cast(to),
                    move |x| cast_reference(&x[0], to),
                )
                .exact()
                .signed_zeros(),
            );
        }
    }
}

/// The cast reference, with integers beyond 2^53 rounded once to the target.
pub fn cast_reference(x: &RefArray, to: DType) -> RefArray {
    if !x.is_float() && to.is_float() {
        let v = x
            .i()
            .iter()
            .map(|&v| r::int_to_float_exact(v, to))
            .collect();
        return RefArray::floats(to, &x.shape, v);
    }
    r::cast(x, to)
}

fn operators(c: &mut Vec<OpCase>) {
    let a = tensor(DType::F32, &[2, 3], &[1.0, -2.0, 3.5, 0.0, 5.0, -6.5]);
    let b = vector(DType::F32, &[0.5, -4.0, 2.0]);
    let ai = tensor(DType::I64, &[2, 1], &[7.0, -9.0]);
    let bi = vector(DType::I64, &[2.0, -4.0, 0.0]);
    macro_rules! op_cases {
        ($name:expr, $op:tt, $ff:expr, $fi:expr) => {{
            c.push(OpCase::new($name, "ref-ref", vec![a.clone(), b.clone()], |x| &x[0] $op &x[1], |x| r::zip_f(&x[0], &x[1], $ff)));
            c.push(OpCase::new($name, "owned-ref", vec![a.clone(), b.clone()], |x| x[0].clone() $op &x[1], |x| r::zip_f(&x[0], &x[1], $ff)));
            c.push(OpCase::new($name, "ref-owned", vec![b.clone(), a.clone()], |x| &x[0] $op x[1].clone(), |x| r::zip_f(&x[0], &x[1], $ff)));
            c.push(OpCase::new($name, "owned-owned/i64", vec![ai.clone(), bi.clone()], |x| x[0].clone() $op x[1].clone(), |x| r::zip_i(&x[0], &x[1], $fi)));
            c.push(OpCase::new($name, "tensor-f64", vec![a.clone()], |x| &x[0] $op 2.0, |x| r::map_f(&x[0], |v| $ff(v, 2.0))));
            c.push(OpCase::new($name, "owned-f64", vec![a.clone()], |x| x[0].clone() $op 0.5, |x| r::map_f(&x[0], |v| $ff(v, 0.5))));
            c.push(OpCase::new($name, "f64-tensor", vec![a.clone()], |x| 1.0 $op &x[0], |x| r::map_f(&x[0], |v| $ff(1.0, v))));
            c.push(OpCase::new($name, "f64-owned", vec![a.clone()], |x| 3.0 $op x[0].clone(), |x| r::map_f(&x[0], |v| $ff(3.0, v))));
            c.push(OpCase::new($name, "i64-f64", vec![ai.clone()], |x| &x[0] $op 3.0, |x| r::map_i(&x[0], |v| $fi(v, 3))));
        }};
    }
    op_cases!("op +", +, |x: f64, y: f64| x + y, |x: i128, y: i128| x + y);
    op_cases!("op -", -, |x: f64, y: f64| x - y, |x: i128, y: i128| x - y);
    op_cases!("op *", *, |x: f64, y: f64| x * y, i128::wrapping_mul);
    op_cases!("op /", /, |x: f64, y: f64| x / y, r::idiv);
    op_cases!("op %", %, |x: f64, y: f64| x % y, r::irem);
    c.push(
        OpCase::new(
            "op neg",
            "ref",
            vec![a.clone()],
            |x| -&x[0],
            |x| r::map_f(&x[0], |v| -v),
        )
        .signed_zeros(),
    );
    c.push(OpCase::new(
        "op neg",
        "owned/i64",
        vec![ai.clone()],
        |x| -x[0].clone(),
        |x| r::map_i(&x[0], |v| -v),
    ));
    // A chain with a scalar in f16: each step rounds to f16.
    let h = vector(DType::F16, &[1.0, 2.0, -3.0, 0.5]);
    c.push(OpCase::new(
        "op *",
        "f16-chain",
        vec![h],
        |x| &x[0] * 2.0 + 1.0,
        |x| r::map_f(&x[0], |v| v * 2.0 + 1.0),
    ));
}

fn movement(c: &mut Vec<OpCase>) {
    for dt in MOVE_DTYPES {
        let x = block(dt);
        let xt = block(dt).permute(&[2, 0, 1]); // a non-contiguous [4, 2, 3]
        let d = dt.name();
        for shape in [
            vec![24],
            vec![4, 6],
            vec![2, 12],
            vec![3, 2, 4],
            vec![1, 24, 1],
        ] {
            let s = shape.clone();
            c.push(
                OpCase::new(
                    "reshape",
                    format!("{d}/{shape:?}"),
                    vec![x.clone()],
                    move |x| x[0].reshape(&s),
                    move |x| r::reshape(&x[0], &shape),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "reshape",
                format!("{d}/view-[4, 6]"),
                vec![xt.clone()],
                |x| x[0].reshape(&[4, 6]),
                |x| r::reshape(&x[0], &[4, 6]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "reshape",
                format!("{d}/split-view"),
                vec![xt.clone()],
                |x| x[0].reshape(&[2, 2, 3, 2]),
                |x| r::reshape(&x[0], &[2, 2, 3, 2]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "flatten",
                d,
                vec![xt.clone()],
                |x| x[0].flatten(),
                |x| r::reshape(&x[0], &[24]),
            )
            .exact(),
        );
        for perm in [[0isize, 1, 2], [2, 0, 1], [1, 2, 0], [-1, -3, -2]] {
            c.push(
                OpCase::new(
                    "permute",
                    format!("{d}/{perm:?}"),
                    vec![x.clone()],
                    move |x| x[0].permute(&perm),
                    move |x| r::permute(&x[0], &perm),
                )
                .exact(),
            );
            c.push(
                OpCase::new(
                    "permute",
                    format!("{d}/view/{perm:?}"),
                    vec![xt.clone()],
                    move |x| x[0].permute(&perm),
                    move |x| r::permute(&x[0], &perm),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "transpose",
                d,
                vec![x.clone()],
                |x| x[0].transpose(),
                |x| r::transpose(&x[0]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "transpose",
                format!("{d}/view"),
                vec![xt.clone()],
                |x| x[0].transpose(),
                |x| r::transpose(&x[0]),
            )
            .exact(),
        );
        for (a, b) in [(0isize, 2isize), (-1, 1), (1, 1)] {
            c.push(
                OpCase::new(
                    "swapaxes",
                    format!("{d}/{a},{b}"),
                    vec![x.clone()],
                    move |x| x[0].swapaxes(a, b),
                    move |x| r::swapaxes(&x[0], a, b),
                )
                .exact(),
            );
        }
        for (a, b) in [(0isize, 2isize), (2, 0), (-1, 1), (1, -1)] {
            c.push(
                OpCase::new(
                    "moveaxis",
                    format!("{d}/{a}->{b}"),
                    vec![xt.clone()],
                    move |x| x[0].moveaxis(a, b),
                    move |x| r::moveaxis(&x[0], a, b),
                )
                .exact(),
            );
        }
        let col = x.narrow(2, 1, 1); // [2, 3, 1], a view
        for shape in [vec![2, 3, 5], vec![4, 2, 3, 2]] {
            let s = shape.clone();
            c.push(
                OpCase::new(
                    "broadcast_to",
                    format!("{d}/{shape:?}"),
                    vec![col.clone()],
                    move |x| x[0].broadcast_to(&s),
                    move |x| r::broadcast_to(&x[0], &shape),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "expand",
                d,
                vec![x.get(1).get(2)],
                |x| x[0].expand(&[3, 4]),
                |x| r::broadcast_to(&x[0], &[3, 4]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "expand",
                format!("{d}/0d"),
                vec![x.get(1).get(2).get(3)],
                |x| x[0].expand(&[2, 0, 3]),
                |x| r::broadcast_to(&x[0], &[2, 0, 3]),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "squeeze",
                d,
                vec![col.clone()],
                |x| x[0].squeeze(-1),
                |x| r::squeeze(&x[0], -1),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "squeeze",
                format!("{d}/front"),
                vec![x.narrow(0, 1, 1)],
                |x| x[0].squeeze(0),
                |x| r::squeeze(&x[0], 0),
            )
            .exact(),
        );
        for a in [0isize, 1, 3, -1, -4] {
            c.push(
                OpCase::new(
                    "unsqueeze",
                    format!("{d}/{a}"),
                    vec![xt.clone()],
                    move |x| x[0].unsqueeze(a),
                    move |x| r::unsqueeze(&x[0], a),
                )
                .exact(),
            );
        }
        let slices: Vec<Vec<Slice>> = vec![
            vec![Slice::from(1..2)],
            vec![Slice::all(), Slice::from(..).step(2)],
            vec![Slice::all(), Slice::all(), Slice::from(..).step(-1)],
            vec![Slice::all(), Slice::all(), Slice::from(1..4).step(-1)],
            vec![Slice::all(), Slice::all(), Slice::from(1..4).step(-2)],
            vec![
                Slice::from(-1..),
                Slice::new(-3, None, 2),
                Slice::new(0, Some(-1), -2),
            ],
            vec![Slice::new(-10, Some(10), 3), Slice::new(2, Some(1), 1)],
            vec![Slice::all(), Slice::from(..=-2), Slice::from(1..=2)],
            vec![
                Slice::from(..1),
                Slice::from(..).step(-3),
                Slice::new(3, None, -1),
            ],
            // `0..=-1` (clippy calls it empty): through the end, as numpy's `0:`.
            vec![Slice::from(std::ops::RangeInclusive::new(0, -1))],
        ];
        for s in slices {
            let s2 = s.clone();
            let s3 = s.clone();
            c.push(
                OpCase::new(
                    "slice",
                    format!("{d}/{s:?}"),
                    vec![x.clone()],
                    move |x| x[0].slice(&s2),
                    move |x| r::slice(&x[0], &s3),
                )
                .exact(),
            );
            let s2 = s.clone();
            c.push(
                OpCase::new(
                    "slice",
                    format!("{d}/view/{s:?}"),
                    vec![xt.clone()],
                    move |x| x[0].slice(&s2),
                    move |x| r::slice(&x[0], &s),
                )
                .exact(),
            );
        }
        for (a, start, len) in [(0isize, 1usize, 1usize), (2, 1, 2), (-1, 0, 4), (1, 3, 0)] {
            c.push(
                OpCase::new(
                    "narrow",
                    format!("{d}/{a}/{start}+{len}"),
                    vec![x.clone()],
                    move |x| x[0].narrow(a, start, len),
                    move |x| r::narrow(&x[0], a, start, len),
                )
                .exact(),
            );
        }
        for i in [0usize, 1] {
            c.push(
                OpCase::new(
                    "get",
                    format!("{d}/{i}"),
                    vec![x.clone()],
                    move |x| x[0].get(i),
                    move |x| r::get(&x[0], i),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "get",
                format!("{d}/view"),
                vec![xt.clone()],
                |x| x[0].get(3).get(1),
                |x| r::get(&r::get(&x[0], 3), 1),
            )
            .exact(),
        );
        for axes in [vec![0isize], vec![2], vec![0, 1, 2], vec![-1, 0], vec![]] {
            let a2 = axes.clone();
            c.push(
                OpCase::new(
                    "flip",
                    format!("{d}/{axes:?}"),
                    vec![xt.clone()],
                    move |x| x[0].flip(&a2),
                    move |x| r::flip(&x[0], &axes),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "contiguous",
                d,
                vec![xt.clone()],
                |x| {
                    let y = x[0].contiguous();
                    assert!(y.is_contiguous(), "contiguous: result is not contiguous");
                    y
                },
                |x| x[0].clone(),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "copy",
                d,
                vec![xt.clone()],
                |x| {
                    let y = x[0].copy();
                    assert!(!y.shares_storage_with(&x[0]), "copy: result shares storage");
                    y
                },
                |x| x[0].clone(),
            )
            .exact(),
        );
        // assign through a view: write a row, return the whole (fresh) tensor.
        c.push(
            OpCase::new(
                "assign",
                d,
                vec![x.clone(), x.get(0).get(2).flip(&[0])],
                |x| {
                    let dst = x[0].copy();
                    dst.slice(&[Slice::all(), Slice::from(1..2)]).assign(&x[1]);
                    dst
                },
                |x| {
                    let (dst, src) = (&x[0], &x[1]);
                    let n = dst.numel();
                    let both =
                        r::concatenate(&[dst.reshaped(&[n]), src.reshaped(&[src.numel()])], 0);
                    let shape = dst.shape.clone();
                    both.select(&dst.shape, |i| {
                        if i[1] == 1 {
                            n + i[2]
                        } else {
                            super::ravel(i, &shape)
                        }
                    })
                },
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "blit",
                format!("{d}/overlap"),
                vec![x.clone()],
                |x| {
                    let dst = x[0].copy();
                    dst.blit(&dst.flip(&[0, 2]));
                    dst
                },
                |x| r::flip(&x[0], &[0, 2]),
            )
            .exact(),
        );
    }
}

fn composites(c: &mut Vec<OpCase>) {
    for dt in MOVE_DTYPES {
        let x = block(dt);
        let xt = block(dt).permute(&[2, 0, 1]); // [4, 2, 3], non-contiguous
        let d = dt.name();
        for (pads, value) in [
            (vec![(1usize, 2usize), (0, 0), (3, 1)], 7.0),
            (vec![(0, 0), (0, 0), (0, 0)], 0.0),
            (vec![(2, 0), (1, 1), (0, 2)], -1.0),
        ] {
            let p2 = pads.clone();
            c.push(
                OpCase::new(
                    "pad",
                    format!("{d}/{pads:?}/{value}"),
                    vec![xt.clone()],
                    move |x| x[0].pad(&p2, value),
                    move |x| {
                        // The fill converts like a cast from f64.
                        let fill =
                            r::cast(&RefArray::floats(DType::F64, &[], vec![value]), x[0].dtype)
                                .get_f64(0);
                        r::pad(&x[0], &pads, fill)
                    },
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "pad",
                format!("{d}/empty-axis"),
                vec![x.narrow(1, 0, 0)],
                |x| x[0].pad(&[(0, 1), (2, 1), (0, 0)], 1.0),
                |x| {
                    let fill = r::cast(&RefArray::floats(DType::F64, &[], vec![1.0]), x[0].dtype)
                        .get_f64(0);
                    r::pad(&x[0], &[(0, 1), (2, 1), (0, 0)], fill)
                },
            )
            .exact(),
        );
        for ax in [0isize, 1, 2, -1] {
            // Three inputs with different lengths on `ax`: one contiguous, a
            // narrowed view, a flipped view.
            let a = usize::try_from(if ax < 0 { ax + 3 } else { ax }).unwrap();
            let n = x.shape()[a];
            let inputs = vec![
                x.clone(),
                x.narrow(ax, 1, n - 1),
                x.flip(&[ax]).narrow(ax, 0, 1),
            ];
            c.push(
                OpCase::new(
                    "Tensor::concatenate",
                    format!("{d}/{ax}"),
                    inputs,
                    move |x| Tensor::concatenate(x, ax),
                    move |x| r::concatenate(x, ax),
                )
                .exact(),
            );
        }
        c.push(
            OpCase::new(
                "Tensor::concatenate",
                format!("{d}/one"),
                vec![xt.clone()],
                |x| Tensor::concatenate(x, 1),
                |x| r::concatenate(x, 1),
            )
            .exact(),
        );
        c.push(
            OpCase::new(
                "Tensor::concatenate",
                format!("{d}/with-empty"),
                vec![x.narrow(0, 0, 0), x.clone(), x.narrow(0, 1, 0)],
                |x| Tensor::concatenate(x, 0),
                |x| r::concatenate(x, 0),
            )
            .exact(),
        );
        for ax in [0isize, 1, 3, -1, -2] {
            let inputs = vec![x.clone(), x.flip(&[1]), xt.permute(&[1, 2, 0])];
            c.push(
                OpCase::new(
                    "Tensor::stack",
                    format!("{d}/{ax}"),
                    inputs,
                    move |x| Tensor::stack(x, ax),
                    move |x| r::stack(x, ax),
                )
                .exact(),
            );
        }
        for (sizes, ax) in [
            (vec![1usize, 2], 2isize),
            (vec![0, 2, 0, 2], 0),
            (vec![2], 1),
            (vec![1, 1, 1], -1),
        ] {
            let s2 = sizes.clone();
            c.push(OpCase::multi(
                "split",
                format!("{d}/{sizes:?}/{ax}"),
                vec![xt.clone()],
                move |x| x[0].split(&s2, ax),
                move |x| r::split(&x[0], &sizes, ax),
            ));
        }
        for (n, ax) in [(2usize, 0isize), (3, 0), (4, 2), (2, -1), (1, 1), (5, 2)] {
            c.push(OpCase::multi(
                "chunk",
                format!("{d}/{n}/{ax}"),
                vec![xt.clone()],
                move |x| x[0].chunk(n, ax),
                move |x| chunk_ref(&x[0], n, ax),
            ));
        }
        c.push(OpCase::multi(
            "chunk",
            format!("{d}/empty"),
            vec![x.narrow(2, 0, 0)],
            |x| x[0].chunk(3, 2),
            |x| chunk_ref(&x[0], 3, 2),
        ));
        for (k, ax) in [(2usize, 0isize), (3, 2), (1, 1), (0, 1), (2, -2)] {
            c.push(
                OpCase::new(
                    "repeat",
                    format!("{d}/{k}/{ax}"),
                    vec![xt.clone()],
                    move |x| x[0].repeat(k, ax),
                    move |x| r::repeat(&x[0], k, ax),
                )
                .exact(),
            );
        }
        for reps in [
            vec![2usize, 1, 3],
            vec![2],
            vec![1, 1, 1],
            vec![2, 1, 1, 2],
            vec![0, 1],
        ] {
            let r2 = reps.clone();
            c.push(
                OpCase::new(
                    "tile",
                    format!("{d}/{reps:?}"),
                    vec![xt.clone()],
                    move |x| x[0].tile(&r2),
                    move |x| r::tile(&x[0], &reps),
                )
                .exact(),
            );
        }
        for (shift, ax) in [(1isize, 0isize), (-1, 2), (5, 1), (0, 0), (-7, -1), (4, 0)] {
            c.push(
                OpCase::new(
                    "roll",
                    format!("{d}/{shift}/{ax}"),
                    vec![xt.clone()],
                    move |x| x[0].roll(shift, ax),
                    move |x| r::roll(&x[0], shift, ax),
                )
                .exact(),
            );
        }
    }
    // 0-d and 1-d inputs.
    let s = Tensor::scalar(3.5f32);
    c.push(
        OpCase::new(
            "Tensor::stack",
            "f32/0d",
            vec![s.clone(), s.clone()],
            |x| Tensor::stack(x, 0),
            |x| r::stack(x, 0),
        )
        .exact(),
    );
    c.push(
        OpCase::new(
            "tile",
            "f32/0d",
            vec![s.clone()],
            |x| x[0].tile(&[3]),
            |x| r::tile(&x[0], &[3]),
        )
        .exact(),
    );
    c.push(
        OpCase::new(
            "pad",
            "f32/0d",
            vec![s],
            |x| x[0].pad(&[], 1.0),
            |x| r::pad(&x[0], &[], 1.0),
        )
        .exact(),
    );
    let v = vector(DType::I16, &[1.0, 2.0, 3.0, 4.0, 5.0]);
    c.push(
        OpCase::new(
            "roll",
            "i16/1d",
            vec![v.clone()],
            |x| x[0].roll(2, 0),
            |x| r::roll(&x[0], 2, 0),
        )
        .exact(),
    );
    c.push(
        OpCase::new(
            "repeat",
            "i16/1d",
            vec![v],
            |x| x[0].repeat(2, 0),
            |x| r::repeat(&x[0], 2, 0),
        )
        .exact(),
    );
}

/// `torch.chunk`: pieces of `ceil(len / n)` elements, the last smaller; an
/// empty axis gives one empty piece.
pub fn chunk_ref(a: &RefArray, n: usize, ax: isize) -> Vec<RefArray> {
    let x = r::axis(ax, a.ndim());
    let len = a.shape[x];
    if len == 0 {
        return vec![a.clone()];
    }
    let size = len.div_ceil(n);
    let mut out = vec![];
    let mut start = 0;
    while start < len {
        let l = size.min(len - start);
        out.push(r::narrow(a, ax, start, l));
        start += l;
    }
    out
}

type ReduceFn = fn(&Tensor, &[isize], bool) -> Tensor;
type ReduceRef = fn(&RefArray, &[isize], bool) -> RefArray;

/// Axes lists tried on the `[2, 3, 4]` block: none, one (both signs),
/// several (unsorted), all.
const AXES: [&[isize]; 6] = [&[], &[0], &[-1], &[2, 0], &[1], &[0, 1, 2]];

fn reduction_inputs(dt: DType) -> Vec<(String, Tensor)> {
    let mut v = vec![
        ("block".to_string(), block(dt)),
        ("view".to_string(), block(dt).permute(&[2, 0, 1]).flip(&[1])),
    ];
    if dt.is_float() {
        let inf = f64::INFINITY;
        v.push((
            "specials".to_string(),
            tensor(
                dt,
                &[3, 4],
                &[
                    1.0,
                    f64::NAN,
                    3.0,
                    -1.0,
                    inf,
                    2.0,
                    -inf,
                    0.0,
                    -0.0,
                    5.0,
                    5.0,
                    -2.0,
                ],
            ),
        ));
    }
    v
}

fn reductions(c: &mut Vec<OpCase>) {
    // (name, op, reference, dtypes, tolerance scale for floats)
    let numeric: Vec<DType> = NUMERIC.to_vec();
    let floats: Vec<DType> = FLOATS.to_vec();
    let all: Vec<DType> = DType::ALL.to_vec();
    let list: Vec<(&'static str, ReduceFn, ReduceRef, &Vec<DType>, f64)> = vec![
        ("sum", Tensor::sum, r::sum, &numeric, 4.0),
        ("prod", Tensor::prod, r::prod, &numeric, 8.0),
        ("mean", Tensor::mean, r::mean, &floats, 4.0),
        ("var", Tensor::var, r::var, &floats, 8.0),
        ("std", Tensor::std, r::std, &floats, 8.0),
        ("logsumexp", Tensor::logsumexp, r::logsumexp, &floats, 4.0),
        ("max", Tensor::max, r::max, &all, 0.0),
        ("min", Tensor::min, r::min, &all, 0.0),
        (
            "all",
            Tensor::all,
            |a, x, k| r::all_any(a, x, k, false),
            &all,
            0.0,
        ),
        (
            "any",
            Tensor::any,
            |a, x, k| r::all_any(a, x, k, true),
            &all,
            0.0,
        ),
    ];
    for (name, f, rf, dtypes, tol) in list {
        for &dt in dtypes {
            for (what, x) in reduction_inputs(dt) {
                let n = x.ndim();
                for axes in AXES {
                    // The specials input is 2-D.
                    if axes.iter().any(|&a| a >= n as isize) {
                        continue;
                    }
                    for keepdims in [false, true] {
                        let ax = axes.to_vec();
                        let ax2 = ax.clone();
                        c.push(
                            OpCase::new(
                                name,
                                format!("{dt}/{what}/{axes:?}/{keepdims}"),
                                vec![x.clone()],
                                move |x| f(&x[0], &ax, keepdims),
                                move |x| rf(&x[0], &ax2, keepdims),
                            )
                            .tol(tol),
                        );
                    }
                }
            }
            // Over an empty axis: sum 0, prod 1, mean NaN, all true, any false.
            if !matches!(name, "max" | "min" | "logsumexp") {
                let e = Tensor::zeros(&[2, 0, 3], dt);
                c.push(
                    OpCase::new(
                        name,
                        format!("{dt}/empty-axis"),
                        vec![e],
                        move |x| f(&x[0], &[1], false),
                        move |x| rf(&x[0], &[1], false),
                    )
                    .tol(tol),
                );
            }
        }
    }
    for dt in NUMERIC {
        c.push(
            OpCase::new(
                "sum_all",
                dt.name(),
                vec![block(dt)],
                |x| x[0].sum_all(),
                |x| r::sum(&x[0], &r::all_axes(3), false),
            )
            .tol(4.0),
        );
    }
    for dt in FLOATS {
        c.push(
            OpCase::new(
                "mean_all",
                dt.name(),
                vec![block(dt).transpose()],
                |x| x[0].mean_all(),
                |x| r::mean(&x[0], &r::all_axes(3), false),
            )
            .tol(4.0),
        );
    }
    // argmax / argmin: first index on ties, NaN wins.
    for dt in DType::ALL {
        for (what, x) in reduction_inputs(dt) {
            for ax in 0..x.ndim() as isize {
                for keepdims in [false, true] {
                    for (name, is_max) in [("argmax", true), ("argmin", false)] {
                        let a = if ax == 1 {
                            -1 - (x.ndim() as isize - 2)
                        } else {
                            ax
                        };
                        c.push(OpCase::new(
                            name,
                            format!("{dt}/{what}/{a}/{keepdims}"),
                            vec![x.clone()],
                            move |x| {
                                if is_max {
                                    x[0].argmax(a, keepdims)
                                } else {
                                    x[0].argmin(a, keepdims)
                                }
                            },
                            move |x| r::arg(&x[0], a, keepdims, is_max),
                        ));
                    }
                }
            }
        }
        // Ties: the first index.
        let t = tensor_i(
            if dt.is_float() { DType::I32 } else { dt },
            &[5],
            &[1, 1, 0, 1, 0],
        );
        let t = if dt.is_float() { t.cast(dt) } else { t };
        c.push(OpCase::new(
            "argmax",
            format!("{dt}/ties"),
            vec![t.clone()],
            |x| x[0].argmax(0, false),
            |x| r::arg(&x[0], 0, false, true),
        ));
        c.push(OpCase::new(
            "argmin",
            format!("{dt}/ties"),
            vec![t],
            |x| x[0].argmin(0, false),
            |x| r::arg(&x[0], 0, false, false),
        ));
    }
    // softmax / log_softmax along each axis; a -inf entry; large values.
    type AxisFn = fn(&Tensor, isize) -> Tensor;
    type AxisRef = fn(&RefArray, isize) -> RefArray;
    let along: Vec<(&'static str, AxisFn, AxisRef)> = vec![
        ("softmax", Tensor::softmax, r::softmax),
        ("log_softmax", Tensor::log_softmax, r::log_softmax),
    ];
    for (name, f, rf) in along {
        for dt in FLOATS {
            for ax in [0isize, 1, -1] {
                c.push(
                    OpCase::new(
                        name,
                        format!("{dt}/{ax}"),
                        vec![block(dt)],
                        move |x| f(&x[0], ax),
                        move |x| rf(&x[0], ax),
                    )
                    .tol(4.0),
                );
            }
            let big = tensor(
                dt,
                &[2, 3],
                &[1000.0, 1001.0, 999.0, f64::NEG_INFINITY, 0.0, -3.0],
            );
            let big = if matches!(dt, DType::F16) {
                tensor(
                    dt,
                    &[2, 3],
                    &[100.0, 101.0, 99.0, f64::NEG_INFINITY, 0.0, -3.0],
                )
            } else {
                big
            };
            c.push(
                OpCase::new(
                    name,
                    format!("{dt}/stable"),
                    vec![big],
                    move |x| f(&x[0], 1),
                    move |x| rf(&x[0], 1),
                )
                .tol(4.0),
            );
        }
    }
    // cumsum / cumprod
    type CumFn = fn(&Tensor, isize) -> Tensor;
    let cum: Vec<(&'static str, CumFn, AxisRef, f64)> = vec![
        ("cumsum", Tensor::cumsum, r::cumsum, 4.0),
        ("cumprod", Tensor::cumprod, r::cumprod, 8.0),
    ];
    for (name, f, rf, tol) in cum {
        for dt in NUMERIC {
            for ax in [0isize, 1, 2, -1] {
                c.push(
                    OpCase::new(
                        name,
                        format!("{dt}/{ax}"),
                        vec![block(dt).flip(&[2])],
                        move |x| f(&x[0], ax),
                        move |x| rf(&x[0], ax),
                    )
                    .tol(tol),
                );
            }
        }
        // Wrapping integers.
        let w = tensor_i(DType::I8, &[4], &[100, 100, -128, 3]);
        c.push(OpCase::new(
            name,
            "i8/wrap",
            vec![w],
            move |x| f(&x[0], 0),
            move |x| rf(&x[0], 0),
        ));
        let e = Tensor::zeros(&[0, 3], DType::F32);
        c.push(OpCase::new(
            name,
            "f32/empty",
            vec![e],
            move |x| f(&x[0], 0),
            move |x| rf(&x[0], 0),
        ));
    }
}

fn indexing(c: &mut Vec<OpCase>) {
    for dt in MOVE_DTYPES {
        let x = block(dt);
        let d = dt.name();
        for idt in [DType::I32, DType::I64] {
            let i = idt.name();
            let cases: Vec<(Vec<usize>, Vec<i128>, isize)> = vec![
                (vec![3], vec![1, 0, 1], 0),
                (vec![], vec![2], 1),
                (vec![2, 2], vec![3, -1, 0, -4], 2),
                (vec![4], vec![-1, -2, -3, 0], -2),
                (vec![0], vec![], 2),
            ];
            for (ishape, ivals, ax) in cases {
                let idx = tensor_i(idt, &ishape, &ivals);
                c.push(
                    OpCase::new(
                        "take",
                        format!("{d}/{i}/{ishape:?}/{ax}"),
                        vec![x.clone(), idx],
                        move |x| x[0].take(&x[1], ax),
                        move |x| r::take(&x[0], &x[1], ax),
                    )
                    .exact(),
                );
            }
            // take_along_axis: same rank; broadcasting off the axis.
            let t1 = tensor_i(idt, &[2, 3, 2], &[3, 0, -1, 2, 1, 1, 0, 0, 2, 3, -4, 1]);
            c.push(
                OpCase::new(
                    "take_along_axis",
                    format!("{d}/{i}/full"),
                    vec![x.clone(), t1],
                    |x| x[0].take_along_axis(&x[1], 2),
                    |x| r::take_along_axis(&x[0], &x[1], 2),
                )
                .exact(),
            );
            let t2 = tensor_i(idt, &[2, 1, 1], &[2, -3]);
            c.push(
                OpCase::new(
                    "take_along_axis",
                    format!("{d}/{i}/broadcast"),
                    vec![x.clone(), t2],
                    |x| x[0].take_along_axis(&x[1], 1),
                    |x| r::take_along_axis(&x[0], &x[1], 1),
                )
                .exact(),
            );
            let t3 = tensor_i(idt, &[3, 1, 4], &[0, 1, 1, 0, 1, 1, 0, 0, -1, -2, 0, 1]);
            c.push(
                OpCase::new(
                    "take_along_axis",
                    format!("{d}/{i}/axis0"),
                    vec![x.narrow(1, 0, 1), t3],
                    |x| x[0].take_along_axis(&x[1], 0),
                    |x| r::take_along_axis(&x[0], &x[1], 0),
                )
                .exact(),
            );
            // gather: idx shape fits inside x off the axis.
            let g = tensor_i(idt, &[2, 2, 3], &[0, 1, 2, 2, 2, 0, -1, 0, 1, 1, 1, 1]);
            c.push(
                OpCase::new(
                    "gather",
                    format!("{d}/{i}/1"),
                    vec![x.clone(), g.clone()],
                    |x| x[0].gather(1, &x[1]),
                    |x| r::gather(&x[0], 1, &x[1]),
                )
                .exact(),
            );
            let g0 = tensor_i(idt, &[3, 1, 2], &[1, 0, 0, 0, 1, -1]);
            c.push(
                OpCase::new(
                    "gather",
                    format!("{d}/{i}/0"),
                    vec![x.clone(), g0],
                    |x| x[0].gather(0, &x[1]),
                    |x| r::gather(&x[0], 0, &x[1]),
                )
                .exact(),
            );
            c.push(
                OpCase::new(
                    "gather",
                    format!("{d}/{i}/view"),
                    vec![x.permute(&[0, 2, 1]), g],
                    |x| x[0].gather(-1, &x[1]),
                    |x| r::gather(&x[0], -1, &x[1]),
                )
                .exact(),
            );
        }
    }
    // scatter_add: numeric dtypes, repeated indices add up.
    for dt in NUMERIC {
        let base = block(dt);
        let idx = tensor_i(
            DType::I64,
            &[2, 2, 3],
            &[0, 2, 2, 2, 2, 0, -1, 0, 1, 1, 1, 1],
        );
        let src = tensor(
            dt,
            &[2, 3, 4],
            &(0..24).map(|v| (v % 5) as f64).collect::<Vec<_>>(),
        );
        c.push(
            OpCase::new(
                "scatter_add",
                format!("{dt}/1"),
                vec![base.clone(), idx, src.clone()],
                |x| x[0].scatter_add(1, &x[1], &x[2]),
                |x| r::scatter_add(&x[0], 1, &x[1], &x[2]),
            )
            .tol(2.0),
        );
        let idx0 = tensor_i(DType::I32, &[3, 1, 2], &[1, 0, 0, 0, 1, -1]);
        let src0 = tensor(
            dt,
            &[3, 3, 4],
            &(0..36).map(|v| (v % 7) as f64 - 2.0).collect::<Vec<_>>(),
        )
        .flip(&[0]);
        c.push(
            OpCase::new(
                "scatter_add",
                format!("{dt}/0"),
                vec![base.clone(), idx0, src0],
                |x| x[0].scatter_add(0, &x[1], &x[2]),
                |x| r::scatter_add(&x[0], 0, &x[1], &x[2]),
            )
            .tol(2.0),
        );
    }
    // segment_sum: repeated ids, both bounds, negative ids (from the end),
    // segments no row lands in, empty ids.
    for dt in NUMERIC {
        let d = dt.name();
        // One element per tensor at an extreme of the integer dtype (its
        // largest value; 2^63 for 64-bit types, which wraps to i64's
        // lowest), so that sums wrap.
        let (_, hi) = int_range(if dt.is_float() { DType::I8 } else { dt });
        let extreme = if hi > 1 << 62 {
            2f64.powi(63)
        } else {
            hi as f64
        };
        let vals = |n: usize, seed: usize| -> Vec<f64> {
            (0..n)
                .map(|k| {
                    let v = ((k * 7 + seed) % 9) as f64;
                    if dt.is_float() {
                        (v - 4.0) * 0.75 + 0.125 * (k % 3) as f64
                    } else if k == 1 {
                        extreme
                    } else if dt.is_signed_int() {
                        v - 4.0
                    } else {
                        v
                    }
                })
                .collect()
        };
        let cases: Vec<(&str, Vec<usize>, Vec<i128>, usize)> = vec![
            ("repeated", vec![6, 3], vec![0, 2, 2, 1, 0, 2], 4),
            ("bounds_negative", vec![6, 3], vec![-1, 0, 3, -4, 3, -1], 4),
            ("rank1", vec![5], vec![1, 1, -2, 0, 1], 3),
            ("rank3", vec![4, 2, 3], vec![2, -3, 0, 2], 3),
            ("one_segment", vec![3, 2], vec![0, -1, 0], 1),
            ("empty", vec![0, 3], vec![], 3),
        ];
        for (k, (what, shape, ids, num)) in cases.into_iter().enumerate() {
            let idt = if k % 2 == 0 { DType::I32 } else { DType::I64 };
            let data = tensor(dt, &shape, &vals(super::numel(&shape), k));
            let ids = tensor_i(idt, &[ids.len()], &ids);
            c.push(
                OpCase::new(
                    "segment_sum",
                    format!("{d}/{}/{what}", idt.name()),
                    vec![data, ids],
                    move |x| nx::segment_sum(&x[0], &x[1], num),
                    move |x| r::segment_sum(&x[0], &x[1], num),
                )
                .tol(2.0),
            );
        }
        // index_add: repeated indices add up in order, both bounds, negative
        // ones, any axis, empty indices (a copy).
        let base = block(dt);
        let cases: Vec<(&str, isize, Vec<i128>)> = vec![
            ("axis1_repeated", 1, vec![2, 0, 2, -1, -3]),
            ("last_bounds", -1, vec![3, -4, 0, 3]),
            ("axis0_negative", 0, vec![1, 1, -2]),
            ("empty", 1, vec![]),
        ];
        for (k, (what, ax, idx)) in cases.into_iter().enumerate() {
            let idt = if k % 2 == 0 { DType::I64 } else { DType::I32 };
            let a = r::axis(ax, 3);
            let mut ss = vec![2, 3, 4];
            ss[a] = idx.len();
            let src = tensor(dt, &ss, &vals(super::numel(&ss), k + 3));
            let idx = tensor_i(idt, &[idx.len()], &idx);
            c.push(
                OpCase::new(
                    "index_add",
                    format!("{d}/{}/{what}", idt.name()),
                    vec![base.clone(), idx, src],
                    move |x| x[0].index_add(ax, &x[1], &x[2]),
                    move |x| r::index_add(&x[0], ax, &x[1], &x[2]),
                )
                .tol(2.0),
            );
        }
    }
    // one_hot: integers; out-of-range and negative values give zero rows.
    for dt in INTS {
        let (lo, hi) = int_range(dt);
        let v = tensor_i(dt, &[2, 3], &[0, 2, 1, -1, hi, lo]);
        for n in [0usize, 3, 5] {
            c.push(
                OpCase::new(
                    "one_hot",
                    format!("{dt}/{n}"),
                    vec![v.clone()],
                    move |x| x[0].one_hot(n),
                    move |x| r::one_hot(&x[0], n),
                )
                .exact(),
            );
        }
    }
}

/// Pool inputs: `distinct` values (a permutation of a ramp), `ties` (a
/// few values repeated; integers with the dtype's extremes), or
/// `specials` (signed zeros, infinities, NaN among the ramp).
fn pool_input(dt: DType, shape: &[usize], kind: &str) -> Tensor {
    let n = super::numel(shape);
    let (lo, hi) = int_range(if dt.is_float() { DType::I8 } else { dt });
    let vals: Vec<f64> = (0..n)
        .map(|i| {
            let k = (i * 37 + 11) % n;
            let ramp = k as f64 - (n / 2) as f64;
            match kind {
                "distinct" if dt.is_float() => ramp * 0.125,
                "distinct" if dt.is_signed_int() => ramp,
                "distinct" => k as f64,
                "ties" if !dt.is_float() && i == 1 => hi as f64,
                "ties" if !dt.is_float() && i == 2 => lo as f64,
                "ties" if dt.is_float() => ((i * 7) % 5) as f64 * 0.5 - 1.0,
                "ties" => ((i * 7) % 5) as f64,
                "specials" if i % 4 == 0 => SPECIALS[(i / 4) % SPECIALS.len()],
                "specials" => ramp * 0.125,
                _ => unreachable!(),
            }
        })
        .collect();
    tensor(dt, shape, &vals)
}

/// A pool's geometry: input shape, window, strides, padding (`None`:
/// SAME, `Some(vec![])`: VALID, else explicit pairs).
type PoolGeom = (
    &'static str,
    Vec<usize>,
    Vec<usize>,
    Vec<usize>,
    Option<Vec<(usize, usize)>>,
);

fn pool_geoms() -> Vec<PoolGeom> {
    vec![
        (
            "tiling_2x2",
            vec![2, 3, 6, 4],
            vec![2, 2],
            vec![2, 2],
            Some(vec![]),
        ),
        (
            "overlap_3x3_same",
            vec![2, 3, 6, 4],
            vec![3, 3],
            vec![1, 1],
            None,
        ),
        (
            "3x2_s2x1_same",
            vec![2, 3, 6, 4],
            vec![3, 2],
            vec![2, 1],
            None,
        ),
        (
            "2x3_s1x2_explicit",
            vec![2, 3, 6, 4],
            vec![2, 3],
            vec![1, 2],
            Some(vec![(1, 0), (2, 1)]),
        ),
        (
            "1d_w3_s2_valid",
            vec![2, 2, 7],
            vec![3],
            vec![2],
            Some(vec![]),
        ),
        ("1d_w4_s3_same", vec![2, 2, 7], vec![4], vec![3], None),
        (
            "3d_2x2x2",
            vec![1, 2, 3, 4, 4],
            vec![2, 2, 2],
            vec![1, 2, 2],
            Some(vec![]),
        ),
        // The first window lies entirely in the padding (max: -inf, the
        // lowest integer).
        (
            "1d_padding_only_window",
            vec![1, 2, 5],
            vec![2],
            vec![1],
            Some(vec![(2, 0)]),
        ),
    ]
}

fn pool_padding(p: &Option<Vec<(usize, usize)>>) -> nx::Padding {
    match p {
        None => nx::Padding::Same,
        Some(v) if v.is_empty() => nx::Padding::Valid,
        Some(v) => nx::Padding::Explicit(v.clone()),
    }
}

/// max_pool (every numeric dtype) and avg_pool (floats): tiling,
/// overlapping and padded windows (SAME, explicit), 1-D to 3-D, ties,
/// extremes and special floats.
fn pools(c: &mut Vec<OpCase>) {
    let some = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::U8,
    ];
    for (geom, shape, window, strides, pad) in pool_geoms() {
        let every = ["tiling_2x2", "2x3_s1x2_explicit", "1d_padding_only_window"].contains(&geom);
        let kinds: &[&str] = if ["tiling_2x2", "overlap_3x3_same"].contains(&geom) {
            &["distinct", "ties", "specials"]
        } else {
            &["distinct"]
        };
        for &kind in kinds {
            let max_dtypes: Vec<DType> = match kind {
                "distinct" if every => NUMERIC.to_vec(),
                "distinct" => some.to_vec(),
                "ties" => vec![DType::F32, DType::F64, DType::I8, DType::U8, DType::I64],
                _ => FLOATS.to_vec(),
            };
            let spatial = shape[2..].to_vec();
            let pads = r::pool_pads(&spatial, &window, &strides, pad.as_deref());
            for dt in max_dtypes {
                let (w, s, p, q) = (window.clone(), strides.clone(), pad.clone(), pads.clone());
                let (w2, s2) = (window.clone(), strides.clone());
                c.push(
                    OpCase::new(
                        "max_pool",
                        format!("{dt}/{geom}/{kind}"),
                        vec![pool_input(dt, &shape, kind)],
                        move |x| x[0].max_pool(&w, &s, pool_padding(&p)),
                        move |x| r::max_pool(&x[0], &w2, &s2, &q),
                    )
                    .exact(),
                );
            }
            if geom == "1d_padding_only_window" || kind == "ties" {
                continue;
            }
            for dt in FLOATS {
                let (w, s, p, q) = (window.clone(), strides.clone(), pad.clone(), pads.clone());
                let (w2, s2) = (window.clone(), strides.clone());
                c.push(
                    OpCase::new(
                        "avg_pool",
                        format!("{dt}/{geom}/{kind}"),
                        vec![pool_input(dt, &shape, kind)],
                        move |x| x[0].avg_pool(&w, &s, pool_padding(&p)),
                        move |x| r::avg_pool(&x[0], &w2, &s2, &q),
                    )
                    .tol(2.0),
                );
            }
        }
    }
}

fn linalg(c: &mut Vec<OpCase>) {
    let mm_dtypes = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::I8,
    ];
    for dt in mm_dtypes {
        let d = dt.name();
        let vals = |seed: u64, n: usize| -> Vec<f64> {
            if dt.is_float() {
                pseudo_random(seed, n, -2.0, 2.0)
                    .iter()
                    .map(|v| (v * 8.0).round() / 8.0)
                    .collect()
            } else {
                super::pseudo_random_ints(seed, n, 0, 5)
            }
        };
        let shapes: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![2, 3], vec![3, 4]),
            (vec![3], vec![3, 4]),
            (vec![2, 3], vec![3]),
            (vec![3], vec![3]),
            (vec![2, 1, 2, 3], vec![3, 3, 2]),
            (vec![4, 2, 3], vec![3, 5]),
            (vec![2, 0], vec![0, 3]),
            (vec![0, 2, 3], vec![3, 1]),
            (vec![1, 7], vec![7, 1]),
        ];
        for (k, (sa, sb)) in shapes.into_iter().enumerate() {
            let a = tensor(dt, &sa, &vals(k as u64, super::numel(&sa)));
            let b = tensor(dt, &sb, &vals(100 + k as u64, super::numel(&sb)));
            c.push(
                OpCase::new(
                    "matmul",
                    format!("{d}/{sa:?}@{sb:?}"),
                    vec![a, b],
                    |x| x[0].matmul(&x[1]),
                    |x| r::matmul(&x[0], &x[1]),
                )
                .tol(4.0),
            );
        }
        // Transposed and strided operands.
        let a = tensor(dt, &[3, 2], &vals(50, 6)).transpose();
        let b = tensor(dt, &[4, 6], &vals(51, 24))
            .slice(&[Slice::all(), Slice::from(..).step(-2)])
            .transpose();
        c.push(
            OpCase::new(
                "matmul",
                format!("{d}/views"),
                vec![a, b],
                |x| x[0].matmul(&x[1]),
                |x| r::matmul(&x[0], &x[1]),
            )
            .tol(4.0),
        );
        // dot
        let dshapes: Vec<(Vec<usize>, Vec<usize>)> = vec![
            (vec![4], vec![4]),
            (vec![2, 3], vec![3, 2]),
            (vec![2, 3, 4], vec![4]),
            (vec![2, 3, 4], vec![5, 4, 2]),
            (vec![], vec![2, 2]),
            (vec![3], vec![3, 2]),
        ];
        for (k, (sa, sb)) in dshapes.into_iter().enumerate() {
            let a = tensor(dt, &sa, &vals(200 + k as u64, super::numel(&sa)));
            let b = tensor(dt, &sb, &vals(300 + k as u64, super::numel(&sb)));
            c.push(
                OpCase::new(
                    "dot",
                    format!("{d}/{sa:?}.{sb:?}"),
                    vec![a, b],
                    |x| x[0].dot(&x[1]),
                    |x| r::dot(&x[0], &x[1]),
                )
                .tol(4.0),
            );
        }
        let a = tensor(dt, &[3], &vals(400, 3));
        let b = tensor(dt, &[2, 2], &vals(401, 4)).transpose();
        c.push(
            OpCase::new(
                "outer",
                d,
                vec![a, b],
                |x| x[0].outer(&x[1]),
                |x| r::outer(&x[0], &x[1]),
            )
            .exact(),
        );
    }
    for dt in [
        DType::F32,
        DType::F64,
        DType::I64,
        DType::U8,
        DType::Bool,
        DType::BF16,
    ] {
        for k in [-1isize, 0, 1, 5, -5] {
            let x = block(dt).narrow(1, 0, 3); // [2, 3, 4]
            let m = block(dt).get(0).transpose(); // [4, 3], a view
            for (what, t) in [("3d", x), ("view", m)] {
                c.push(
                    OpCase::new(
                        "tril",
                        format!("{dt}/{what}/{k}"),
                        vec![t.clone()],
                        move |x| x[0].tril(k),
                        move |x| r::triangle(&x[0], k, true),
                    )
                    .exact(),
                );
                c.push(
                    OpCase::new(
                        "triu",
                        format!("{dt}/{what}/{k}"),
                        vec![t],
                        move |x| x[0].triu(k),
                        move |x| r::triangle(&x[0], k, false),
                    )
                    .exact(),
                );
            }
        }
    }
}
