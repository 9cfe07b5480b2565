//! A [`Graph`] as bytes and back: every variable's shape and dtype, the
//! inputs, the captured constants with their data, every equation (each
//! primitive with all its static parameters, each loop with its body),
//! the outputs and writebacks. An exported program needs its graph: the
//! runtime sizes its buffers from the avals, runs library steps (products,
//! gathers, ...) by their primitives, and checks gather indices from it.
//!
//! Enumerations are stored by their position in the tables below; the
//! encoders match exhaustively, so a primitive or operation added to nx
//! does not compile here until it has a code (decoding knows only the
//! codes listed).

use super::bytes::{ReadError, Reader, Writer};
use crate::graph::{Eqn, Graph, Loop, Op, Var};
use nx::{
    ArgOp, Aval, BinaryOp, CmpOp, CumOp, DType, F64Bits, FftKind, Prim, ReduceOp, Tensor, UnaryOp,
};
use std::sync::Arc;

/// How deep loops may nest in a decoded graph (a corrupt file must not
/// recurse without bound).
const MAX_DEPTH: usize = 32;

const UNARY: [UnaryOp; 35] = {
    use UnaryOp::*;
    [
        Neg, Abs, Sign, Sqrt, Rsqrt, Recip, Exp, Exp2, Log, Log2, Log1p, Expm1, Sin, Cos, Tan,
        Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh, Atanh, Erf, Sigmoid, Floor, Ceil, Round,
        Trunc, Not, Real, Imag, Conj, Angle,
    ]
};

const BINARY: [BinaryOp; 15] = {
    use BinaryOp::*;
    [
        Add, Sub, Mul, Div, Rem, Pow, Max, Min, Atan2, And, Or, Xor, Shl, Shr, Complex,
    ]
};

const COMPARE: [CmpOp; 6] = {
    use CmpOp::*;
    [Lt, Le, Gt, Ge, Eq, Ne]
};

const REDUCE: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
const ARG: [ArgOp; 2] = [ArgOp::Argmax, ArgOp::Argmin];
const CUMULATIVE: [CumOp; 2] = [CumOp::Sum, CumOp::Prod];
const FFT: [FftKind; 4] = [FftKind::Fft, FftKind::Ifft, FftKind::Rfft, FftKind::Irfft];

/// The code of each operation: its position in its table. The match is
/// exhaustive so that a new operation is a compile error here.
fn unary_code(op: UnaryOp) -> u8 {
    use UnaryOp::*;
    match op {
        Neg => 0,
        Abs => 1,
        Sign => 2,
        Sqrt => 3,
        Rsqrt => 4,
        Recip => 5,
        Exp => 6,
        Exp2 => 7,
        Log => 8,
        Log2 => 9,
        Log1p => 10,
        Expm1 => 11,
        Sin => 12,
        Cos => 13,
        Tan => 14,
        Asin => 15,
        Acos => 16,
        Atan => 17,
        Sinh => 18,
        Cosh => 19,
        Tanh => 20,
        Asinh => 21,
        Acosh => 22,
        Atanh => 23,
        Erf => 24,
        Sigmoid => 25,
        Floor => 26,
        Ceil => 27,
        Round => 28,
        Trunc => 29,
        Not => 30,
        Real => 31,
        Imag => 32,
        Conj => 33,
        Angle => 34,
    }
}

fn binary_code(op: BinaryOp) -> u8 {
    use BinaryOp::*;
    match op {
        Add => 0,
        Sub => 1,
        Mul => 2,
        Div => 3,
        Rem => 4,
        Pow => 5,
        Max => 6,
        Min => 7,
        Atan2 => 8,
        And => 9,
        Or => 10,
        Xor => 11,
        Shl => 12,
        Shr => 13,
        Complex => 14,
    }
}

fn compare_code(op: CmpOp) -> u8 {
    use CmpOp::*;
    match op {
        Lt => 0,
        Le => 1,
        Gt => 2,
        Ge => 3,
        Eq => 4,
        Ne => 5,
    }
}

fn reduce_code(op: ReduceOp) -> u8 {
    match op {
        ReduceOp::Sum => 0,
        ReduceOp::Prod => 1,
        ReduceOp::Max => 2,
        ReduceOp::Min => 3,
    }
}

fn arg_code(op: ArgOp) -> u8 {
    match op {
        ArgOp::Argmax => 0,
        ArgOp::Argmin => 1,
    }
}

fn cumulative_code(op: CumOp) -> u8 {
    match op {
        CumOp::Sum => 0,
        CumOp::Prod => 1,
    }
}

fn fft_code(k: FftKind) -> u8 {
    match k {
        FftKind::Fft => 0,
        FftKind::Ifft => 1,
        FftKind::Rfft => 2,
        FftKind::Irfft => 3,
    }
}

/// A dtype by its position in [`DType::EVERY`].
fn dtype_code(d: DType) -> u8 {
    DType::EVERY
        .iter()
        .position(|&x| x == d)
        .expect("DType::EVERY lists every dtype") as u8
}

fn table<T: Copy>(t: &[T], code: u8, what: &str) -> Result<T, ReadError> {
    t.get(code as usize)
        .copied()
        .ok_or_else(|| format!("{what}: unknown code {code}"))
}

fn read_dtype(r: &mut Reader, what: &str) -> Result<DType, ReadError> {
    table(&DType::EVERY, r.u8(what)?, what)
}

fn write_aval(w: &mut Writer, a: &Aval) {
    w.u8(dtype_code(a.dtype));
    w.usizes(&a.shape);
}

fn read_aval(r: &mut Reader) -> Result<Aval, ReadError> {
    let dtype = read_dtype(r, "aval dtype")?;
    let shape = r.usizes("aval shape")?;
    // The element count must fit (buffers are sized from it).
    shape
        .iter()
        .try_fold(dtype.size_in_bytes(), |n, &d| n.checked_mul(d))
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| format!("aval {shape:?}: more bytes than memory holds"))?;
    Ok(Aval { shape, dtype })
}

fn write_pairs<T: Copy>(w: &mut Writer, v: &[(T, T)], f: impl Fn(&mut Writer, T)) {
    w.usize(v.len());
    for &(a, b) in v {
        f(w, a);
        f(w, b);
    }
}

/// Writes `prim`: a tag, then its parameters in declaration order.
fn write_prim(w: &mut Writer, prim: &Prim) {
    match prim {
        Prim::Full {
            shape,
            dtype,
            value,
        } => {
            w.u8(0);
            w.usizes(shape);
            w.u8(dtype_code(*dtype));
            w.f64(value.get());
        }
        Prim::Iota { shape, axis, dtype } => {
            w.u8(1);
            w.usizes(shape);
            w.usize(*axis);
            w.u8(dtype_code(*dtype));
        }
        Prim::Unary(op) => {
            w.u8(2);
            w.u8(unary_code(*op));
        }
        Prim::Binary(op) => {
            w.u8(3);
            w.u8(binary_code(*op));
        }
        Prim::Compare(op) => {
            w.u8(4);
            w.u8(compare_code(*op));
        }
        Prim::Where => w.u8(5),
        Prim::Cast(d) => {
            w.u8(6);
            w.u8(dtype_code(*d));
        }
        Prim::Reduce { op, axes } => {
            w.u8(7);
            w.u8(reduce_code(*op));
            w.usizes(axes);
        }
        Prim::ArgReduce { op, axis } => {
            w.u8(8);
            w.u8(arg_code(*op));
            w.usize(*axis);
        }
        Prim::Cumulative { op, axis } => {
            w.u8(9);
            w.u8(cumulative_code(*op));
            w.usize(*axis);
        }
        Prim::Reshape { shape } => {
            w.u8(10);
            w.usizes(shape);
        }
        Prim::Broadcast { shape } => {
            w.u8(11);
            w.usizes(shape);
        }
        Prim::Permute { perm } => {
            w.u8(12);
            w.usizes(perm);
        }
        Prim::Slice { start, end, step } => {
            w.u8(13);
            w.usizes(start);
            w.usizes(end);
            w.usizes(step);
        }
        Prim::Flip { axes } => {
            w.u8(14);
            w.usizes(axes);
        }
        Prim::Pad { lo, hi, value } => {
            w.u8(15);
            w.usizes(lo);
            w.usizes(hi);
            w.f64(value.get());
        }
        Prim::Concat { axis } => {
            w.u8(16);
            w.usize(*axis);
        }
        Prim::Copy => w.u8(17),
        Prim::StopGradient => w.u8(18),
        Prim::Gather { axis } => {
            w.u8(19);
            w.usize(*axis);
        }
        Prim::ScatterAdd { axis } => {
            w.u8(20);
            w.usize(*axis);
        }
        Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        } => {
            w.u8(21);
            w.usizes(lhs_batch);
            w.usizes(rhs_batch);
            w.usizes(lhs_contract);
            w.usizes(rhs_contract);
        }
        Prim::Assign => w.u8(22),
        Prim::Threefry2x32 => w.u8(23),
        Prim::Conv {
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            feature_group_count,
        } => {
            w.u8(24);
            w.usizes(strides);
            write_pairs(w, padding, Writer::isize);
            w.usizes(lhs_dilation);
            w.usizes(rhs_dilation);
            w.usize(*feature_group_count);
        }
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => {
            w.u8(25);
            w.u8(reduce_code(*op));
            w.usizes(window);
            w.usizes(strides);
            write_pairs(w, padding, Writer::usize);
        }
        Prim::WindowArgmax {
            window,
            strides,
            padding,
            flat_from,
        } => {
            w.u8(26);
            w.usizes(window);
            w.usizes(strides);
            write_pairs(w, padding, Writer::usize);
            w.usize(*flat_from);
        }
        Prim::Argsort { axis, descending } => {
            w.u8(27);
            w.usize(*axis);
            w.bool(*descending);
        }
        Prim::TopK { k } => {
            w.u8(28);
            w.usize(*k);
        }
        Prim::Cholesky => w.u8(29),
        Prim::TriangularSolve {
            lower,
            left,
            transpose,
            unit_diagonal,
        } => {
            w.u8(30);
            w.bool(*lower);
            w.bool(*left);
            w.bool(*transpose);
            w.bool(*unit_diagonal);
        }
        Prim::Solve => w.u8(31),
        Prim::Slogdet => w.u8(32),
        Prim::Qr { complete } => {
            w.u8(33);
            w.bool(*complete);
        }
        Prim::Eigh => w.u8(34),
        Prim::Svd { full_matrices } => {
            w.u8(35);
            w.bool(*full_matrices);
        }
        Prim::Fft { kind, lengths } => {
            w.u8(36);
            w.u8(fft_code(*kind));
            w.usizes(lengths);
        }
    }
}

fn read_pairs<'a, T>(
    r: &mut Reader<'a>,
    what: &str,
    f: impl Fn(&mut Reader<'a>, &str) -> Result<T, ReadError>,
) -> Result<Vec<(T, T)>, ReadError> {
    let n = r.count(16, what)?;
    (0..n).map(|_| Ok((f(r, what)?, f(r, what)?))).collect()
}

fn read_prim(r: &mut Reader) -> Result<Prim, ReadError> {
    let tag = r.u8("primitive")?;
    let u = |r: &mut Reader| r.usizes("primitive parameter");
    let n = |r: &mut Reader| r.usize("primitive parameter");
    let b = |r: &mut Reader| r.bool("primitive parameter");
    Ok(match tag {
        0 => Prim::Full {
            shape: u(r)?,
            dtype: read_dtype(r, "full dtype")?,
            value: F64Bits(r.f64("full value")?),
        },
        1 => Prim::Iota {
            shape: u(r)?,
            axis: n(r)?,
            dtype: read_dtype(r, "iota dtype")?,
        },
        2 => Prim::Unary(table(&UNARY, r.u8("unary")?, "unary op")?),
        3 => Prim::Binary(table(&BINARY, r.u8("binary")?, "binary op")?),
        4 => Prim::Compare(table(&COMPARE, r.u8("compare")?, "compare op")?),
        5 => Prim::Where,
        6 => Prim::Cast(read_dtype(r, "cast dtype")?),
        7 => Prim::Reduce {
            op: table(&REDUCE, r.u8("reduce")?, "reduce op")?,
            axes: u(r)?,
        },
        8 => Prim::ArgReduce {
            op: table(&ARG, r.u8("arg reduce")?, "arg op")?,
            axis: n(r)?,
        },
        9 => Prim::Cumulative {
            op: table(&CUMULATIVE, r.u8("cumulative")?, "cumulative op")?,
            axis: n(r)?,
        },
        10 => Prim::Reshape { shape: u(r)? },
        11 => Prim::Broadcast { shape: u(r)? },
        12 => Prim::Permute { perm: u(r)? },
        13 => Prim::Slice {
            start: u(r)?,
            end: u(r)?,
            step: u(r)?,
        },
        14 => Prim::Flip { axes: u(r)? },
        15 => Prim::Pad {
            lo: u(r)?,
            hi: u(r)?,
            value: F64Bits(r.f64("pad value")?),
        },
        16 => Prim::Concat { axis: n(r)? },
        17 => Prim::Copy,
        18 => Prim::StopGradient,
        19 => Prim::Gather { axis: n(r)? },
        20 => Prim::ScatterAdd { axis: n(r)? },
        21 => Prim::DotGeneral {
            lhs_batch: u(r)?,
            rhs_batch: u(r)?,
            lhs_contract: u(r)?,
            rhs_contract: u(r)?,
        },
        22 => Prim::Assign,
        23 => Prim::Threefry2x32,
        24 => Prim::Conv {
            strides: u(r)?,
            padding: read_pairs(r, "conv padding", Reader::isize)?,
            lhs_dilation: u(r)?,
            rhs_dilation: u(r)?,
            feature_group_count: n(r)?,
        },
        25 => Prim::ReduceWindow {
            op: table(&REDUCE, r.u8("reduce window")?, "reduce op")?,
            window: u(r)?,
            strides: u(r)?,
            padding: read_pairs(r, "window padding", Reader::usize)?,
        },
        26 => Prim::WindowArgmax {
            window: u(r)?,
            strides: u(r)?,
            padding: read_pairs(r, "window padding", Reader::usize)?,
            flat_from: n(r)?,
        },
        27 => Prim::Argsort {
            axis: n(r)?,
            descending: b(r)?,
        },
        28 => Prim::TopK { k: n(r)? },
        29 => Prim::Cholesky,
        30 => Prim::TriangularSolve {
            lower: b(r)?,
            left: b(r)?,
            transpose: b(r)?,
            unit_diagonal: b(r)?,
        },
        31 => Prim::Solve,
        32 => Prim::Slogdet,
        33 => Prim::Qr { complete: b(r)? },
        34 => Prim::Eigh,
        35 => Prim::Svd {
            full_matrices: b(r)?,
        },
        36 => Prim::Fft {
            kind: table(&FFT, r.u8("fft")?, "fft kind")?,
            lengths: u(r)?,
        },
        t => return Err(format!("primitive: unknown tag {t}")),
    })
}

/// The axis order in which a non-contiguous tensor's elements lie densely
/// in memory (a transposed or permuted view): `perm` such that
/// `t.permute(perm)` is row-major without gaps. `None` for a contiguous
/// tensor, and for other views (slices with steps, broadcasts, flips),
/// which are stored as their contiguous copy: their values are the same,
/// and library steps read them as eager reads a copy.
fn memory_order(t: &Tensor) -> Option<Vec<usize>> {
    if t.is_contiguous() {
        return None;
    }
    let (strides, shape) = (t.strides()?, t.shape());
    let mut perm: Vec<usize> = (0..shape.len()).collect();
    perm.sort_by_key(|&a| std::cmp::Reverse(strides[a]));
    let mut dense = 1isize;
    for &a in perm.iter().rev() {
        if shape[a] == 1 {
            continue;
        }
        if strides[a] != dense {
            return None;
        }
        dense *= shape[a] as isize;
    }
    Some(perm)
}

/// A tensor's elements in row-major order, little-endian.
fn tensor_bytes(t: &Tensor) -> Result<Vec<u8>, String> {
    macro_rules! le {
        ($t:ty) => {
            t.to_vec::<$t>()
                .into_iter()
                .flat_map(|x| x.to_le_bytes())
                .collect()
        };
    }
    Ok(match t.dtype() {
        DType::Bool => t.to_vec::<bool>().into_iter().map(u8::from).collect(),
        DType::U8 => t.to_vec::<u8>(),
        DType::U16 => le!(u16),
        DType::U32 => le!(u32),
        DType::U64 => le!(u64),
        DType::I8 => le!(i8),
        DType::I16 => le!(i16),
        DType::I32 => le!(i32),
        DType::I64 => le!(i64),
        DType::F16 => t
            .to_vec::<nx::half::f16>()
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec::<nx::half::bf16>()
            .into_iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
        DType::F32 => le!(f32),
        DType::F64 => le!(f64),
        d => return Err(format!("a captured {d} constant (jit refuses {d} tensors)")),
    })
}

/// [`tensor_bytes`] read back as a tensor of `aval`.
fn tensor_from_bytes(aval: &Aval, b: &[u8]) -> Result<Tensor, ReadError> {
    let size = aval.dtype.size_in_bytes();
    if b.len() != aval.numel() * size {
        return Err(format!(
            "constant {}{:?}: {} bytes of data",
            aval.dtype,
            aval.shape,
            b.len()
        ));
    }
    macro_rules! le {
        ($t:ty) => {
            Tensor::from_vec(
                b.chunks_exact(size)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunks of its size")))
                    .collect::<Vec<$t>>(),
                &aval.shape,
            )
        };
    }
    let bits = || -> Vec<u16> {
        b.chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect()
    };
    Ok(match aval.dtype {
        DType::Bool => {
            let v: Option<Vec<bool>> = b
                .iter()
                .map(|&x| match x {
                    0 => Some(false),
                    1 => Some(true),
                    _ => None,
                })
                .collect();
            let v = v.ok_or("a bool constant holds a byte other than 0 or 1")?;
            Tensor::from_vec(v, &aval.shape)
        }
        DType::U8 => Tensor::from_vec(b.to_vec(), &aval.shape),
        DType::U16 => le!(u16),
        DType::U32 => le!(u32),
        DType::U64 => le!(u64),
        DType::I8 => le!(i8),
        DType::I16 => le!(i16),
        DType::I32 => le!(i32),
        DType::I64 => le!(i64),
        DType::F16 => Tensor::from_vec(
            bits()
                .into_iter()
                .map(nx::half::f16::from_bits)
                .collect::<Vec<_>>(),
            &aval.shape,
        ),
        DType::BF16 => Tensor::from_vec(
            bits()
                .into_iter()
                .map(nx::half::bf16::from_bits)
                .collect::<Vec<_>>(),
            &aval.shape,
        ),
        DType::F32 => le!(f32),
        DType::F64 => le!(f64),
        d => return Err(format!("a {d} constant")),
    })
}

/// Writes `g`. `Err` names what cannot be stored (a complex constant).
pub fn write_graph(w: &mut Writer, g: &Graph) -> Result<(), String> {
    w.usize(g.avals.len());
    for a in &g.avals {
        write_aval(w, a);
    }
    w.usizes(&g.inputs);
    w.usize(g.consts.len());
    for (v, t) in &g.consts {
        w.usize(*v);
        // A permuted view is stored in memory order and permuted back on
        // reading: the library steps that read it (a product through its
        // column-major path) see the strides eager saw.
        match memory_order(t) {
            Some(perm) => {
                w.usizes(&perm);
                let p: Vec<isize> = perm.iter().map(|&a| a as isize).collect();
                w.bytes(&tensor_bytes(&t.permute(&p))?);
            }
            None => {
                w.usizes(&[]);
                w.bytes(&tensor_bytes(t)?);
            }
        }
    }
    w.usize(g.eqns.len());
    for e in &g.eqns {
        match &e.op {
            Op::Prim(p) => {
                w.u8(0);
                write_prim(w, p);
            }
            Op::Loop(lp) => {
                w.u8(1);
                w.usize(lp.length);
                w.usize(lp.n_consts);
                w.usize(lp.n_carry);
                w.bool(lp.reverse);
                write_graph(w, &lp.body)?;
            }
        }
        w.usizes(&e.inputs);
        w.usizes(&e.outs);
    }
    w.usizes(&g.outputs);
    w.usize(g.writebacks.len());
    for &(i, v) in &g.writebacks {
        w.usize(i);
        w.usize(v);
    }
    Ok(())
}

/// Reads a graph [`write_graph`] wrote, checking that it is well formed:
/// every variable exists and is defined once, before its uses; constants
/// hold as many elements as their avals; a loop's inputs, outputs and
/// body agree in number; writebacks name inputs.
pub fn read_graph(r: &mut Reader) -> Result<Graph, ReadError> {
    read_graph_at(r, 0)
}

fn read_graph_at(r: &mut Reader, depth: usize) -> Result<Graph, ReadError> {
    if depth > MAX_DEPTH {
        return Err(format!("loops nested more than {MAX_DEPTH} deep"));
    }
    let n_avals = r.count(9, "avals")?;
    let avals = (0..n_avals)
        .map(|_| read_aval(r))
        .collect::<Result<Vec<_>, _>>()?;
    let mut defined = vec![false; n_avals];
    let define = |defined: &mut Vec<bool>, v: Var, what: &str| -> Result<(), ReadError> {
        match defined.get_mut(v) {
            Some(d) if !*d => {
                *d = true;
                Ok(())
            }
            Some(_) => Err(format!("{what}: variable %{v} defined twice")),
            None => Err(format!("{what}: variable %{v} of {n_avals}")),
        }
    };
    let inputs = r.usizes("inputs")?;
    for &v in &inputs {
        define(&mut defined, v, "input")?;
    }
    let n_consts = r.count(16, "constants")?;
    let mut consts = Vec::with_capacity(n_consts);
    for _ in 0..n_consts {
        let v = r.usize("constant")?;
        define(&mut defined, v, "constant")?;
        let aval = &avals[v];
        let perm = r.usizes("constant axis order")?;
        let t = if perm.is_empty() {
            tensor_from_bytes(aval, r.bytes("constant data")?)?
        } else {
            let mut seen = vec![false; aval.shape.len()];
            for &a in &perm {
                match seen.get_mut(a) {
                    Some(s) if !*s => *s = true,
                    _ => return Err(format!("constant axis order {perm:?}")),
                }
            }
            if perm.len() != aval.shape.len() {
                return Err(format!("constant axis order {perm:?}"));
            }
            let stored = Aval::new(
                &perm.iter().map(|&a| aval.shape[a]).collect::<Vec<_>>(),
                aval.dtype,
            );
            let mut inverse = vec![0isize; perm.len()];
            for (i, &a) in perm.iter().enumerate() {
                inverse[a] = i as isize;
            }
            tensor_from_bytes(&stored, r.bytes("constant data")?)?.permute(&inverse)
        };
        consts.push((v, t));
    }
    let n_eqns = r.count(2, "equations")?;
    let mut eqns = Vec::with_capacity(n_eqns);
    for _ in 0..n_eqns {
        let op = match r.u8("equation")? {
            0 => Op::Prim(read_prim(r)?),
            1 => {
                let length = r.usize("loop length")?;
                let n_consts = r.usize("loop consts")?;
                let n_carry = r.usize("loop carry")?;
                let reverse = r.bool("loop reverse")?;
                let body = read_graph_at(r, depth + 1)?;
                if length == 0
                    || n_consts
                        .checked_add(n_carry)
                        .is_none_or(|n| n > body.inputs.len())
                    || n_carry > body.outputs.len()
                {
                    return Err("a loop whose body does not fit its parameters".into());
                }
                Op::Loop(Arc::new(Loop {
                    body,
                    length,
                    n_consts,
                    n_carry,
                    reverse,
                }))
            }
            t => return Err(format!("equation: unknown kind {t}")),
        };
        let ins = r.usizes("equation inputs")?;
        let outs = r.usizes("equation outputs")?;
        for &v in &ins {
            if !defined.get(v).copied().unwrap_or(false) {
                return Err(format!("equation input %{v} used before it is defined"));
            }
        }
        match &op {
            Op::Prim(_) if outs.len() != 1 => {
                return Err("a primitive equation with other than one output".into())
            }
            Op::Loop(lp)
                if ins.len() != lp.body.inputs.len() || outs.len() != lp.body.outputs.len() =>
            {
                return Err("a loop equation whose arguments do not match its body".into())
            }
            _ => {}
        }
        for &v in &outs {
            define(&mut defined, v, "equation output")?;
        }
        eqns.push(Eqn {
            op,
            inputs: ins,
            outs,
        });
    }
    let outputs = r.usizes("outputs")?;
    for &v in &outputs {
        if !defined.get(v).copied().unwrap_or(false) {
            return Err(format!("output %{v} is never defined"));
        }
    }
    let n_wb = r.count(16, "writebacks")?;
    let mut writebacks = Vec::with_capacity(n_wb);
    for _ in 0..n_wb {
        let i = r.usize("writeback input")?;
        let v = r.usize("writeback value")?;
        if i >= inputs.len() || !defined.get(v).copied().unwrap_or(false) {
            return Err(format!("writeback of %{v} into input {i}"));
        }
        writebacks.push((i, v));
    }
    Ok(Graph {
        avals,
        inputs,
        consts,
        eqns,
        outputs,
        writebacks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table entry encodes to its own position (the encoders and
    /// the decoding tables agree).
    #[test]
    fn tables_and_codes_agree() {
        for (i, &op) in UNARY.iter().enumerate() {
            assert_eq!(unary_code(op) as usize, i);
        }
        for (i, &op) in BINARY.iter().enumerate() {
            assert_eq!(binary_code(op) as usize, i);
        }
        for (i, &op) in COMPARE.iter().enumerate() {
            assert_eq!(compare_code(op) as usize, i);
        }
        for (i, &op) in REDUCE.iter().enumerate() {
            assert_eq!(reduce_code(op) as usize, i);
        }
        for (i, &op) in ARG.iter().enumerate() {
            assert_eq!(arg_code(op) as usize, i);
        }
        for (i, &op) in CUMULATIVE.iter().enumerate() {
            assert_eq!(cumulative_code(op) as usize, i);
        }
        for (i, &k) in FFT.iter().enumerate() {
            assert_eq!(fft_code(k) as usize, i);
        }
    }

    /// One primitive of every kind, and each with one field changed (fill
    /// values' zero signs and NaN payloads included), reads back equal
    /// (bitwise, through `Prim`'s `Eq`); so does every elementwise, reduce,
    /// cumulative and FFT op.
    #[test]
    fn every_primitive_reads_back_equal() {
        let mut prims = crate::prim_cases::every_prim();
        for p in crate::prim_cases::every_prim() {
            prims.extend(crate::prim_cases::one_field_changes(&p));
        }
        prims.extend(UNARY.iter().map(|&o| Prim::Unary(o)));
        prims.extend(BINARY.iter().map(|&o| Prim::Binary(o)));
        prims.extend(COMPARE.iter().map(|&o| Prim::Compare(o)));
        prims.extend(REDUCE.iter().map(|&op| Prim::Reduce {
            op,
            axes: vec![0, 2],
        }));
        prims.extend(ARG.iter().map(|&op| Prim::ArgReduce { op, axis: 1 }));
        prims.extend(
            CUMULATIVE
                .iter()
                .map(|&op| Prim::Cumulative { op, axis: 1 }),
        );
        prims.extend(FFT.iter().map(|&kind| Prim::Fft {
            kind,
            lengths: vec![8, 4],
        }));
        for p in prims {
            let mut w = Writer::default();
            write_prim(&mut w, &p);
            let mut r = Reader::new(&w.bytes);
            assert_eq!(read_prim(&mut r).unwrap(), p);
            assert!(r.is_done());
        }
    }
}
