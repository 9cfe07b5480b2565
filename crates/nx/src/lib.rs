//! nx: the tensor library under Rune.
//!
//! It owns the `Tensor` type, the element types, the primitive set (`Prim`)
//! and the dispatcher (`bind`) through which every operation passes, the eager
//! CPU kernels, the implicit random generator, printing, and parameter trees.
//! It knows nothing of transformations beyond the `Trace` trait that lets
//! one intercept `bind`.
//!
//! ```
//! use nx::{Tensor, DType};
//! let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
//! let y = (&x * 2.0 + 1.0).exp();
//! assert_eq!(y.shape(), &[3]);
//! ```

#![warn(missing_docs)]

// Lets `#[derive(Ptree)]` name this crate `::nx` from inside it too.
extern crate self as nx;

mod checkpoint;
mod cpu;
mod display;
mod dtype;
pub mod fft;
mod layout;
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
pub use ops::{einsum, ConvOpts, Padding, Slice};
pub use prim::{
    conv_out_size, dilate_size, drop_axes, window_out_shape, ArgOp, Aval, BinaryOp, CmpOp, CumOp,
    FftKind, Prim, ReduceOp, UnaryOp,
};
#[doc(hidden)]
pub use ptree::__private as __ptree;
pub use ptree::{Ptree, Tree};
pub use random::seed;
pub use tensor::Tensor;
pub use trace::{bind, bind_below, push_trace, Trace, TraceGuard, Tracer};
