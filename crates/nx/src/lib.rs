//! nx: the tensor library under Rune.
//!
//! ```
//! use nx::{DType, Slice, Tensor};
//!
//! // Tensors: from row-major data, constants, ranges.
//! let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
//! let r = Tensor::arange(0.0, 3.0, 1.0, DType::F32); // [0, 1, 2]
//! assert_eq!(Tensor::zeros(&[2, 3], DType::F32).shape(), a.shape());
//!
//! // Elementwise operations broadcast numpy-style; an f64 scalar takes the
//! // tensor's dtype. There is no implicit promotion: `cast` explicitly.
//! let b = (&a + &r) * 2.0; // [2, 3] + [3]
//! assert_eq!(b.to_vec::<f32>(), vec![2.0, 6.0, 10.0, 8.0, 12.0, 16.0]);
//! assert_eq!(a.cast(DType::I32).to_vec::<i32>(), vec![1, 2, 3, 4, 5, 6]);
//!
//! // Views (nothing copied) and products.
//! let col = a.slice(&[Slice::all(), Slice::from(1..2)]); // a[:, 1:2]
//! assert_eq!(col.to_vec::<f32>(), vec![2.0, 5.0]);
//! let p = a.matmul(&a.transpose()); // [2, 3] @ [3, 2]
//! assert_eq!(p.to_vec::<f32>(), vec![14.0, 32.0, 32.0, 77.0]);
//!
//! // Reductions over axes (negative from the end), with or without keepdims.
//! assert_eq!(a.sum(&[1], false).to_vec::<f32>(), vec![6.0, 15.0]);
//! assert_eq!(a.max(&[0], true).shape(), &[1, 3]);
//! assert_eq!(a.mean_all().item::<f32>(), 3.5);
//! assert_eq!(a.argmax(-1, false).to_vec::<i32>(), vec![2, 2]);
//! ```
//!
//! It owns the [`Tensor`] type, the element types, the primitive set
//! ([`Prim`]) and the dispatcher ([`bind`]) through which every operation
//! passes, the eager CPU kernels, the implicit random generator, printing,
//! and parameter trees. It knows nothing of transformations beyond the
//! [`Trace`] trait that lets one intercept `bind` (rune's transformations
//! are such traces).
//!
//! # Map
//!
//! - [`Tensor`]: the n-dimensional array, a cheap-to-clone handle; every
//!   operation is a method on it (creation, elementwise math and operators,
//!   reductions, movement and views, indexing, sorting, convolution and
//!   pooling, `matmul`), and it prints like numpy (`Display`).
//! - [`DType`], [`Element`]: the element types and the Rust types behind
//!   them ([`half`]'s `f16`/`bf16`, [`Complex`], the 4-bit [`I4`]/[`U4`]).
//! - [`Slice`], [`Padding`], [`ConvOpts`]: parameters of `slice`, windowed
//!   operations and convolutions; [`einsum`]: Einstein summation;
//!   [`segment_sum`]: JAX's `jax.ops.segment_sum`.
//! - [`linalg`]: Cholesky, triangular and general solves, inverse,
//!   determinants, QR, eigh, SVD, pinv, lstsq, norms.
//! - [`fft`]: numpy's FFTs (`fft`, `rfft`, the n-d forms, `fftfreq`,
//!   `fftshift`).
//! - [`Ptree`] (derivable with `#[derive(Ptree)]`), [`Tree`]: parameter trees,
//!   structures whose leaves are tensors; [`save`], [`load`], [`load_tree`]:
//!   safetensors checkpoints of them.
//! - [`seed`] and `Tensor::rand`/`randn`: the implicit random generator
//!   (explicit keys are in `rune::rng`).
//! - [`Prim`] and its op enums ([`UnaryOp`], [`BinaryOp`], [`CmpOp`],
//!   [`ReduceOp`], [`ArgOp`], [`CumOp`], [`FftKind`]); [`Aval`]: the
//!   primitives and their shape/dtype rule (`Prim::out_aval`).
//! - [`trace`] ([`bind`], [`Trace`], [`Tracer`], [`push_trace`]): dispatch
//!   to the eager kernels or to the trace that owns an operation.
//! - [`raw`]: what a compiler's runtime needs beyond `bind` (eager kernels
//!   by primitive, buffers and their addresses, the thread pool).
//! - [`storage`]: tensor memory and its live/peak byte counters; [`Layout`]:
//!   shape, strides and offset of a view ([`layout`]: also merging the dims
//!   several strided operands walk as one); [`shape`]: axis and
//!   broadcasting arithmetic.
//! - [`cpu_features`], [`force_cpu_level`], [`CpuLevel`]: the instruction
//!   set the eager kernels run with; [`num_threads`]: the pool's size.
#![warn(missing_docs)]

// Lets `#[derive(Ptree)]` name this crate `::nx` from inside it too.
extern crate self as nx;

mod checkpoint;
mod cpu;
mod display;
mod dtype;
pub mod fft;
pub mod layout;
pub mod linalg;
mod ops;
mod prim;
mod ptree;
mod random;
pub mod raw;
pub mod shape;
pub mod storage;
mod tensor;
pub mod trace;

pub use checkpoint::{load, load_tree, save};
pub use cpu::dispatch::{cpu_features, force_cpu_level, CpuLevel};
pub use cpu::pool::threads as num_threads;
pub use dtype::{Complex, DType, Element, I4, U4};
pub use half;
pub use layout::Layout;
pub use nx_derive::Ptree;
pub use ops::{einsum, segment_sum, ConvOpts, Padding, Slice};
pub use prim::{
    conv_out_size, dilate_size, drop_axes, window_out_shape, ArgOp, Aval, BinaryOp, CmpOp, CumOp,
    F64Bits, FftKind, Prim, PrimClass, ReduceOp, UnaryOp,
};
#[doc(hidden)]
pub use ptree::__private as __ptree;
pub use ptree::{Ptree, Tree};
pub use random::seed;
pub use tensor::Tensor;
pub use trace::{bind, bind_below, bind_multi, push_trace, MultiOp, Trace, TraceGuard, Tracer};
