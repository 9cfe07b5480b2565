//! The eager CPU backend: one kernel per primitive, chosen by an exhaustive
//! match. Inputs are concrete; outputs are fresh contiguous tensors, except
//! for the view primitives (see `movement`) and `Assign`.

mod conv;
pub(crate) mod dispatch;
pub(crate) mod dot;
mod elementwise;
mod fft;
mod fill;
pub(crate) mod index;
mod linalg_kernels;
pub(crate) mod math;
mod movement;
pub(crate) mod pool;
mod reduce;
mod sort;
pub(crate) mod strided;
mod threefry;
mod window;

use crate::prim::Prim;
use crate::tensor::Tensor;

/// The safety net behind the public operations' dtype checks: a kernel
/// reached with a dtype it has no loop for.
pub(crate) fn unsupported(kernel: &str, d: crate::DType) -> ! {
    panic!("{kernel}: {d} tensors are not supported by this operation")
}

/// Runs `prim` on concrete inputs.
pub(crate) fn eval(prim: Prim, inputs: &[&Tensor]) -> Tensor {
    if let Some(d) = inputs
        .iter()
        .map(|t| t.dtype())
        .find(|&d| (d.is_complex() || d.is_4bit()) && !prim.accepts(d))
    {
        panic!(
            "{}: {d} tensors are not supported by this operation ({})",
            prim.name(),
            if d.is_complex() {
                "complex tensors support creation, movement, arithmetic, exp/log/sqrt/trigonometric functions, real/imag/conj/angle/abs, equality, sums, products and matmul"
            } else {
                "4-bit tensors support creation, movement, casts, comparisons and elementwise integer arithmetic; cast to i8/u8 for the rest"
            }
        );
    }
    let v = |i: usize| inputs[i].value();
    match prim {
        Prim::Full {
            shape,
            dtype,
            value,
        } => fill::full(&shape, dtype, value.get()),
        Prim::Iota { shape, axis, dtype } => fill::iota(&shape, axis, dtype),
        Prim::Unary(op) => elementwise::unary(op, v(0)),
        Prim::Binary(op) => elementwise::binary(op, v(0), v(1)),
        Prim::Compare(op) => elementwise::compare(op, v(0), v(1)),
        Prim::Where => elementwise::where_(v(0), v(1), v(2)),
        Prim::Cast(dtype) => elementwise::cast(v(0), dtype),
        Prim::Reduce { op, axes } => reduce::reduce(op, v(0), &axes),
        Prim::ArgReduce { op, axis } => reduce::arg_reduce(op, v(0), axis),
        Prim::Cumulative { op, axis } => reduce::cumulative(op, v(0), axis),
        Prim::Reshape { shape } => movement::reshape(v(0), &shape),
        Prim::Broadcast { shape } => movement::broadcast(v(0), &shape),
        Prim::Permute { perm } => movement::permute(v(0), &perm),
        Prim::Slice { start, end, step } => movement::slice(v(0), &start, &end, &step),
        Prim::Flip { axes } => movement::flip(v(0), &axes),
        Prim::Pad { lo, hi, value } => movement::pad(v(0), &lo, &hi, value.get()),
        Prim::Concat { axis } => {
            let vs: Vec<_> = inputs.iter().map(|t| t.value()).collect();
            movement::concat(&vs, axis)
        }
        Prim::Copy | Prim::StopGradient => movement::copy(v(0)),
        Prim::Gather { axis } => index::gather(v(0), v(1), axis),
        Prim::ScatterAdd { axis } => index::scatter_add(v(0), v(1), v(2), axis),
        Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        } => dot::dot_general(
            v(0),
            v(1),
            &lhs_batch,
            &rhs_batch,
            &lhs_contract,
            &rhs_contract,
            None,
        ),
        Prim::Assign => movement::assign(inputs[0], v(1)),
        Prim::Threefry2x32 => threefry::threefry2x32(v(0), v(1)),
        Prim::Conv {
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            feature_group_count,
        } => conv::conv(
            v(0),
            v(1),
            &conv::ConvParams {
                strides: &strides,
                padding: &padding,
                lhs_dilation: &lhs_dilation,
                rhs_dilation: &rhs_dilation,
                feature_group_count,
            },
        ),
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => window::reduce_window(op, v(0), &window, &strides, &padding),
        Prim::WindowArgmax {
            window,
            strides,
            padding,
            flat_from,
        } => window::window_argmax(v(0), &window, &strides, &padding, flat_from),
        Prim::Argsort { axis, descending } => sort::argsort(v(0), axis, descending),
        Prim::TopK { k } => sort::top_k(v(0), k),
        // linear algebra
        Prim::Cholesky => linalg_kernels::cholesky(v(0)),
        Prim::TriangularSolve {
            lower,
            left,
            transpose,
            unit_diagonal,
        } => linalg_kernels::triangular_solve(v(0), v(1), lower, left, transpose, unit_diagonal),
        Prim::Solve => linalg_kernels::solve(v(0), v(1)),
        Prim::Slogdet => linalg_kernels::slogdet(v(0)),
        Prim::Qr { complete } => linalg_kernels::qr(v(0), complete),
        Prim::Eigh => linalg_kernels::eigh(v(0)),
        Prim::Svd { full_matrices } => linalg_kernels::svd(v(0), full_matrices),
        Prim::Fft { kind, lengths } => fft::fft(v(0), kind, &lengths),
    }
}
