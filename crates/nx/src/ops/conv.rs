//! Convolution: `conv` (XLA's `conv_general_dilated`) and `conv_transpose`
//! (JAX's `lax.conv_transpose(..., transpose_kernel=True)`), in JAX's
//! default layouts: input `[N, C, spatial...]`, kernel `[O, C / groups,
//! spatial...]`, output `[N, O, spatial...]`, with 1, 2 or 3 spatial dims.
//! Both validate, resolve the padding to explicit pairs and bind one
//! `Prim::Conv`.

use super::padding::Padding;
use super::{check_same_dtype, require_float};
use crate::prim::{dilate_size, Prim};
use crate::tensor::Tensor;
use crate::trace::bind;

/// The options of [`Tensor::conv`] and [`Tensor::conv_transpose`]; empty
/// vectors mean 1 on every spatial axis.
///
/// ```
/// use nx::{ConvOpts, Padding};
/// let o = ConvOpts { strides: vec![2, 2], padding: Padding::Same, ..Default::default() };
/// assert_eq!(o.feature_group_count, 1);
/// assert!(o.rhs_dilation.is_empty());
/// ```
#[derive(Clone, Debug)]
pub struct ConvOpts {
    /// Window strides, one per spatial axis (empty = all 1).
    pub strides: Vec<usize>,
    /// Default `Valid`.
    pub padding: Padding,
    /// Input dilation (a transposed convolution), one per spatial axis (empty = all 1).
    pub lhs_dilation: Vec<usize>,
    /// Kernel dilation (atrous convolution), one per spatial axis (empty = all 1).
    pub rhs_dilation: Vec<usize>,
    /// Input and output channels split into this many groups (default 1;
    /// the number of input channels for a depthwise convolution).
    pub feature_group_count: usize,
}

impl Default for ConvOpts {
    fn default() -> ConvOpts {
        ConvOpts {
            strides: vec![],
            padding: Padding::Valid,
            lhs_dilation: vec![],
            rhs_dilation: vec![],
            feature_group_count: 1,
        }
    }
}

/// One entry per spatial axis: `v` itself, or all 1 when empty; panics on
/// a wrong length or a zero.
fn per_axis(op: &str, name: &str, v: &[usize], nsp: usize) -> Vec<usize> {
    if v.is_empty() {
        return vec![1; nsp];
    }
    if v.len() != nsp {
        panic!(
            "{op}: {name} needs one entry per spatial axis ({nsp}) or none, got {} ({v:?})",
            v.len()
        );
    }
    if v.contains(&0) {
        panic!("{op}: {name} must be positive, got {v:?}");
    }
    v.to_vec()
}

/// Checks the ranks and dtypes of a convolution's operands; returns the
/// number of spatial axes.
fn check_operands(op: &str, x: &Tensor, w: &Tensor) -> usize {
    require_float(op, x);
    check_same_dtype(op, x, w);
    if x.ndim() != w.ndim() || !(3..=5).contains(&x.ndim()) {
        panic!(
            "{op}: expects an input [N, C, spatial...] and a kernel [O, I, spatial...] of one \
             rank, 3, 4 or 5 (1 to 3 spatial axes), got shapes {:?} and {:?}",
            x.shape(),
            w.shape()
        );
    }
    x.ndim() - 2
}

/// JAX's `padtype_to_pads` for `SAME` (on the undilated input).
fn same_pads(input: &[usize], kernel_dilated: &[usize], strides: &[usize]) -> Vec<(usize, usize)> {
    (0..input.len())
        .map(|d| {
            let out = input[d].div_ceil(strides[d]);
            let total = (out.max(1) - 1) * strides[d] + kernel_dilated[d];
            let total = total.saturating_sub(input[d]);
            (total / 2, total - total / 2)
        })
        .collect()
}

impl Tensor {
    /// XLA's `conv_general_dilated` (JAX's `lax.conv_general_dilated` with
    /// dimension numbers `('NC…', 'OI…', 'NC…')`): input `[N, C, spatial...]`,
    /// kernel `[O, C / feature_group_count, spatial...]`, output `[N, O,
    /// spatial...]`, 1 to 3 spatial axes. Each output position is the sum
    /// over the window (and the group's input channels) of input times
    /// kernel, without flipping the kernel (a cross-correlation).
    /// `Padding::Same` is JAX's (the odd padding at the end); it cannot be
    /// combined with `lhs_dilation` (give explicit padding, or use
    /// [`Tensor::conv_transpose`]). Floats only.
    ///
    /// ```
    /// use nx::{ConvOpts, Padding, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]);
    /// let w = Tensor::from_slice(&[1.0f32, -1.0], &[1, 1, 2]);
    /// let y = x.conv(&w, ConvOpts::default());
    /// assert_eq!(y.to_vec::<f32>(), vec![-1.0, -1.0, -1.0]);
    /// let z = x.conv(&w, ConvOpts { padding: Padding::Same, ..Default::default() });
    /// assert_eq!(z.to_vec::<f32>(), vec![-1.0, -1.0, -1.0, 4.0]);
    /// ```
    pub fn conv(&self, w: &Tensor, opts: ConvOpts) -> Tensor {
        self.conv_named("conv", w, opts)
    }

    /// `conv`, its panics naming `op`.
    fn conv_named(&self, op: &str, w: &Tensor, opts: ConvOpts) -> Tensor {
        let nsp = check_operands(op, self, w);
        let strides = per_axis(op, "strides", &opts.strides, nsp);
        let ld = per_axis(op, "lhs_dilation", &opts.lhs_dilation, nsp);
        let rd = per_axis(op, "rhs_dilation", &opts.rhs_dilation, nsp);
        let groups = opts.feature_group_count;
        let (xs, ws) = (self.shape(), w.shape());
        if groups == 0 {
            panic!("{op}: feature_group_count must be positive, got 0");
        }
        if xs[1] % groups != 0 || ws[0] % groups != 0 {
            panic!(
                "{op}: feature_group_count {groups} must divide the input channels ({}) and the \
                 output channels ({}); input {xs:?}, kernel {ws:?}",
                xs[1], ws[0]
            );
        }
        if ws[1] * groups != xs[1] {
            panic!(
                "{op}: the kernel's input channels (axis 1) must be the input's channels / \
                 feature_group_count = {} / {groups} = {}, got kernel {ws:?} for input {xs:?}",
                xs[1],
                xs[1] / groups
            );
        }
        let kd: Vec<usize> = (0..nsp).map(|d| dilate_size(ws[2 + d], rd[d])).collect();
        let pads: Vec<(usize, usize)> = match &opts.padding {
            Padding::Valid => vec![(0, 0); nsp],
            Padding::Same => {
                if ld.iter().any(|&d| d != 1) {
                    panic!(
                        "{op}: Padding::Same is not defined with lhs_dilation {ld:?} (as in JAX); \
                         give Padding::Explicit or use conv_transpose"
                    );
                }
                same_pads(&xs[2..], &kd, &strides)
            }
            Padding::Explicit(p) => {
                if p.len() != nsp {
                    panic!(
                        "{op}: Padding::Explicit needs one (before, after) pair per spatial axis \
                         ({nsp}), got {}: {p:?}",
                        p.len()
                    );
                }
                p.clone()
            }
        };
        for d in 0..nsp {
            let padded = dilate_size(xs[2 + d], ld[d]) + pads[d].0 + pads[d].1;
            if kd[d] > padded {
                panic!(
                    "{op}: the kernel (size {}, dilated {}) is larger than the padded input \
                     (size {}, padded {padded}) along spatial axis {d}; input {xs:?}, kernel {ws:?}",
                    ws[2 + d],
                    kd[d],
                    xs[2 + d]
                );
            }
        }
        let prim = Prim::Conv {
            strides,
            padding: pads
                .iter()
                .map(|&(a, b)| (a as isize, b as isize))
                .collect(),
            lhs_dilation: ld,
            rhs_dilation: rd,
            feature_group_count: groups,
        };
        bind(prim, &[self, w])
    }

    /// JAX's `lax.conv_transpose(x, w, strides, padding, rhs_dilation,
    /// transpose_kernel=True)` with `w` in the forward layout `[O, I,
    /// spatial...]`: `self` has `O` channels, the output `I`. It is the
    /// gradient of `conv` with the same kernel and strides with respect to
    /// its input, used as a layer (an upsampling convolution): output size
    /// `(in - 1) * stride + dilated_kernel` with `Padding::Valid`, `in *
    /// stride` with `Padding::Same`; explicit pairs are the padding of the
    /// stride-dilated input, as JAX takes them. `lhs_dilation` must be empty
    /// and `feature_group_count` 1 (JAX's `conv_transpose` has neither).
    ///
    /// ```
    /// use nx::{ConvOpts, Padding, Tensor};
    /// let x = Tensor::ones(&[1, 1, 2], nx::DType::F32);
    /// let w = Tensor::from_slice(&[1.0f32, 10.0, 100.0], &[1, 1, 3]);
    /// let y = x.conv_transpose(&w, ConvOpts { strides: vec![2], ..Default::default() });
    /// assert_eq!(y.shape(), &[1, 1, 5]);
    /// assert_eq!(y.to_vec::<f32>(), vec![1.0, 10.0, 101.0, 10.0, 100.0]);
    /// ```
    pub fn conv_transpose(&self, w: &Tensor, opts: ConvOpts) -> Tensor {
        let op = "conv_transpose";
        let nsp = check_operands(op, self, w);
        let strides = per_axis(op, "strides", &opts.strides, nsp);
        let rd = per_axis(op, "rhs_dilation", &opts.rhs_dilation, nsp);
        if !opts.lhs_dilation.is_empty() {
            panic!(
                "conv_transpose: lhs_dilation must be empty (the strides dilate the input), got {:?}",
                opts.lhs_dilation
            );
        }
        if opts.feature_group_count != 1 {
            panic!(
                "conv_transpose: feature_group_count must be 1 (as JAX's conv_transpose), got {}",
                opts.feature_group_count
            );
        }
        let (xs, ws) = (self.shape(), w.shape());
        if xs[1] != ws[0] {
            panic!(
                "conv_transpose: the input's channels (axis 1) must be the kernel's output \
                 channels (axis 0 of the forward kernel [O, I, spatial...]), got input {xs:?} \
                 and kernel {ws:?}"
            );
        }
        // JAX's `_conv_transpose_padding` on the dilated kernel size.
        let pads: Vec<(usize, usize)> = match &opts.padding {
            Padding::Explicit(p) => {
                if p.len() != nsp {
                    panic!(
                        "conv_transpose: Padding::Explicit needs one (before, after) pair per \
                         spatial axis ({nsp}), got {}: {p:?}",
                        p.len()
                    );
                }
                p.clone()
            }
            mode => (0..nsp)
                .map(|d| {
                    let (k, s) = (dilate_size(ws[2 + d], rd[d]), strides[d]);
                    let (len, a) = if *mode == Padding::Same {
                        let len = (k + s).saturating_sub(2);
                        (
                            len,
                            if s > k.saturating_sub(1) {
                                k.saturating_sub(1)
                            } else {
                                len.div_ceil(2)
                            },
                        )
                    } else {
                        (
                            (k + s).saturating_sub(2) + k.saturating_sub(s),
                            k.saturating_sub(1),
                        )
                    };
                    (a, len - a)
                })
                .collect(),
        };
        // Flip the spatial axes and swap the channel axes: [I, O, k...].
        let spatial: Vec<isize> = (2..w.ndim() as isize).collect();
        let wt = w.flip(&spatial).swapaxes(0, 1);
        let opts = ConvOpts {
            strides: vec![],
            padding: Padding::Explicit(pads),
            lhs_dilation: strides,
            rhs_dilation: rd,
            feature_group_count: 1,
        };
        self.conv_named(op, &wt, opts)
    }
}
