//! `Conv`: a convolution over 1, 2 or 3 spatial axes with a bias per
//! output channel, in JAX's layouts (`[N, C, spatial..]` in and out,
//! kernel `[O, I / groups, k..]`).

use nx::{ConvOpts, DType, Ptree, Tensor};

use super::{check_float, init};

/// A convolution layer: `x [N, c_in, s..] → x.conv(w, opts) + b`, the bias
/// added per output channel. The spatial rank (1 to 3) is the kernel's;
/// strides, padding, dilations and groups are `opts` (`nx::ConvOpts`).
///
/// ```
/// use rune::prelude::*;
/// use rune::nx::{ConvOpts, Padding};
/// let conv = rune::nn::Conv::new(&rune::rng::key(0), 3, 8, &[3, 3],
///     ConvOpts { padding: Padding::Same, ..Default::default() });
/// assert_eq!(conv.w.shape(), &[8, 3, 3, 3]);
/// let y = conv.forward(&Tensor::zeros(&[2, 3, 16, 16], DType::F32));
/// assert_eq!(y.shape(), &[2, 8, 16, 16]);
/// ```
#[derive(Ptree, Clone, Debug)]
pub struct Conv {
    /// The kernel `[c_out, c_in / groups, k..]`, LeCun normal (fan-in
    /// `c_in / groups · prod(k)`).
    pub w: Tensor,
    /// The bias `[c_out]`, zeros.
    pub b: Tensor,
    /// Strides, padding, dilations and `feature_group_count`.
    #[ptree(ignore)]
    pub opts: ConvOpts,
}

impl Conv {
    /// A convolution from `c_in` to `c_out` channels with a kernel of
    /// `kernel` (one size per spatial axis, 1 to 3 of them), drawn from
    /// `key`. Panics naming `Conv` when the channels do not split into
    /// `opts.feature_group_count` groups.
    pub fn new(key: &Tensor, c_in: usize, c_out: usize, kernel: &[usize], opts: ConvOpts) -> Conv {
        let groups = opts.feature_group_count;
        if !(1..=3).contains(&kernel.len()) {
            panic!("Conv: the kernel needs 1 to 3 spatial sizes, got {kernel:?}");
        }
        if groups == 0 || !c_in.is_multiple_of(groups) || !c_out.is_multiple_of(groups) {
            panic!(
                "Conv: c_in ({c_in}) and c_out ({c_out}) must be multiples of \
                 feature_group_count ({groups})"
            );
        }
        let mut shape = vec![c_out, c_in / groups];
        shape.extend_from_slice(kernel);
        Conv {
            w: init::lecun_normal(key, &shape, DType::F32),
            b: Tensor::zeros(&[c_out], DType::F32),
            opts,
        }
    }

    /// The convolution of `x [N, c_in, s..]` (one spatial axis per kernel
    /// axis) plus the bias; panics naming `Conv` and the expected shape on
    /// another rank or channel count.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        check_float("Conv", x);
        let spatial = self.w.ndim() - 2;
        let c_in = self.w.shape()[1] * self.opts.feature_group_count;
        if x.ndim() != spatial + 2 || x.shape()[1] != c_in {
            let dims = vec![".."; spatial].join(", ");
            panic!(
                "Conv: expected an input of shape [N, {c_in}, {dims}] ({spatial} spatial axes, \
                 c_in = {c_in}), got {:?}",
                x.shape()
            );
        }
        let mut bias_shape = vec![self.b.shape()[0]];
        bias_shape.extend(std::iter::repeat_n(1, spatial));
        x.conv(&self.w, self.opts.clone()) + self.b.reshape(&bias_shape)
    }
}
