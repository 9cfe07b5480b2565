//! `Linear` (an affine map of the last axis) and `Embedding` (a lookup
//! table of vectors by integer id).

use nx::{DType, Ptree, Tensor};

use super::{check_float, check_ids, check_last_axis, init};

/// An affine map of the last axis: `x [.., d_in] → x·w + b [.., d_out]`.
///
/// ```
/// use rune::prelude::*;
/// let mut lin = rune::nn::Linear::new(&rune::rng::key(0), 3, 2);
/// assert_eq!((lin.w.shape(), lin.b.shape()), (&[3, 2][..], &[2][..]));
/// lin.w = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2]);
/// lin.b = Tensor::from_slice(&[0.5f32, -0.5], &[2]);
/// let y = lin.forward(&Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3]));
/// assert_eq!(y.to_vec::<f32>(), vec![4.5, 4.5]);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct Linear {
    /// The weight `[d_in, d_out]`, LeCun normal.
    pub w: Tensor,
    /// The bias `[d_out]`, zeros.
    pub b: Tensor,
}

impl Linear {
    /// A layer from `d_in` to `d_out` features, its weight drawn from `key`.
    pub fn new(key: &Tensor, d_in: usize, d_out: usize) -> Linear {
        Linear {
            w: init::lecun_normal(key, &[d_in, d_out], DType::F32),
            b: Tensor::zeros(&[d_out], DType::F32),
        }
    }

    /// `x·w + b` over the last axis of `x [.., d_in]`; panics naming
    /// `Linear` on another last axis.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        check_float("Linear", x);
        check_last_axis("Linear", x, self.w.shape()[0], "d_in");
        x.matmul(&self.w) + &self.b
    }
}

/// A table of `vocab` vectors of `dim` features, looked up by id:
/// `ids [..] → [.., dim]`.
///
/// ```
/// use rune::prelude::*;
/// let emb = rune::nn::Embedding::new(&rune::rng::key(0), 10, 4);
/// let ids = Tensor::from_slice(&[3i32, 3, 7], &[3]);
/// let v = emb.forward(&ids);
/// assert_eq!(v.shape(), &[3, 4]);
/// assert_eq!(v.get(0).to_vec::<f32>(), emb.table.get(3).to_vec::<f32>());
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct Embedding {
    /// The vectors `[vocab, dim]`, standard normal.
    pub table: Tensor,
}

impl Embedding {
    /// A table of `vocab` vectors of `dim` features drawn from `key`.
    pub fn new(key: &Tensor, vocab: usize, dim: usize) -> Embedding {
        Embedding {
            table: crate::rng::normal(key, &[vocab, dim], DType::F32),
        }
    }

    /// The rows of the table at `ids` (`I32` or `I64`, any shape): `[..ids,
    /// dim]`. An id outside `0..vocab` panics naming `Embedding` (ids traced
    /// by `jit` are checked by the compiled gather when the program runs).
    pub fn forward(&self, ids: &Tensor) -> Tensor {
        check_ids("Embedding", ids, self.table.shape()[0], "id");
        self.table.take(ids, 0)
    }
}
