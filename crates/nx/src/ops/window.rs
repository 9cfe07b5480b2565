//! Pooling: `max_pool` and `avg_pool` over `[N, C, spatial...]` inputs (1 to
//! 3 spatial axes), both one `Prim::ReduceWindow` over every axis (window 1
//! on N and C). Max pads with -inf (the lowest value for integers); avg
//! divides each window's sum by its number of in-bounds elements.

use super::padding::Padding;
use super::{require_float, require_numeric};
use crate::prim::{window_out_shape, Prim, ReduceOp};
use crate::tensor::Tensor;
use crate::trace::bind;

impl Tensor {
    /// Max pooling over the spatial axes of an `[N, C, spatial...]` input:
    /// `window` and `strides` have one entry per spatial axis (1 to 3);
    /// `padding` as JAX's (`Same`: out = ceil(in / stride), the odd padding
    /// at the end), padded elements count as -inf. Works on every numeric
    /// dtype; the gradient of a tie goes to the first maximum of the window
    /// in row-major order (JAX's `select_and_scatter_add`).
    ///
    /// ```
    /// use nx::{Padding, Tensor};
    /// let x = Tensor::from_slice(&(0..16).map(|v| v as f32).collect::<Vec<_>>(), &[1, 1, 4, 4]);
    /// let m = x.max_pool(&[2, 2], &[2, 2], Padding::Valid);
    /// assert_eq!(m.shape(), &[1, 1, 2, 2]);
    /// assert_eq!(m.to_vec::<f32>(), vec![5.0, 7.0, 13.0, 15.0]);
    /// ```
    pub fn max_pool(&self, window: &[usize], strides: &[usize], padding: Padding) -> Tensor {
        require_numeric("max_pool", self);
        let (w, s, p) = pool_params("max_pool", self.shape(), window, strides, &padding);
        bind(
            Prim::ReduceWindow {
                op: ReduceOp::Max,
                window: w,
                strides: s,
                padding: p,
            },
            &[self],
        )
    }

    /// Average pooling over the spatial axes of an `[N, C, spatial...]`
    /// float input, with `window`, `strides` and `padding` as in
    /// [`Tensor::max_pool`]. Each window's sum is divided by the number of
    /// its elements inside the input (padding is not counted).
    ///
    /// ```
    /// use nx::{Padding, Tensor};
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]);
    /// // Same with window 3: pads one element each side.
    /// let a = x.avg_pool(&[3], &[1], Padding::Same);
    /// assert_eq!(a.to_vec::<f32>(), vec![1.5, 2.0, 3.0, 3.5]);
    /// ```
    pub fn avg_pool(&self, window: &[usize], strides: &[usize], padding: Padding) -> Tensor {
        require_float("avg_pool", self);
        let (w, s, p) = pool_params("avg_pool", self.shape(), window, strides, &padding);
        let sum = |x: &Tensor| {
            bind(
                Prim::ReduceWindow {
                    op: ReduceOp::Sum,
                    window: w.clone(),
                    strides: s.clone(),
                    padding: p.clone(),
                },
                &[x],
            )
        };
        let total = sum(self);
        if p.iter().all(|&q| q == (0, 0)) {
            let n: usize = window.iter().product();
            return &total / (n as f64);
        }
        // In-bounds counts per output position: the window sums of ones
        // over one plane ([1, 1, spatial...]).
        let mut plane = self.shape().to_vec();
        plane[0] = 1;
        plane[1] = 1;
        let counts = sum(&Tensor::ones(&plane, self.dtype()));
        debug_assert_eq!(
            counts.shape()[2..],
            window_out_shape(self.shape(), &w, &s, &p)[2..]
        );
        &total / &counts.broadcast_to(total.shape())
    }
}

/// Full-rank window, strides and padding pairs for a pool over `shape`,
/// after checking the spatial rank, the entries and the padded sizes.
pub(crate) fn pool_params(
    op: &str,
    shape: &[usize],
    window: &[usize],
    strides: &[usize],
    padding: &Padding,
) -> (Vec<usize>, Vec<usize>, Vec<(usize, usize)>) {
    let nd = shape.len();
    if !(3..=5).contains(&nd) {
        panic!(
            "{op}: expects an input [N, C, spatial...] with 1 to 3 spatial axes, got shape {shape:?}"
        );
    }
    let sp = nd - 2;
    if window.len() != sp {
        panic!(
            "{op}: window needs one entry per spatial axis ({sp} for input shape {shape:?}), got {window:?}"
        );
    }
    if strides.len() != sp {
        panic!(
            "{op}: strides need one entry per spatial axis ({sp} for input shape {shape:?}), got {strides:?}"
        );
    }
    if window.contains(&0) {
        panic!("{op}: window sizes must be at least 1, got {window:?}");
    }
    if strides.contains(&0) {
        panic!("{op}: strides must be at least 1, got {strides:?}");
    }
    let pads = padding.resolve(op, &shape[2..], window, strides);
    for d in 0..sp {
        let padded = shape[2 + d] + pads[d].0 + pads[d].1;
        if window[d] > padded {
            panic!(
                "{op}: window {window:?} is larger than the padded input on spatial axis {d} \
                 (size {} padded by {:?} = {padded})",
                shape[2 + d],
                pads[d]
            );
        }
    }
    let mut w = vec![1, 1];
    w.extend_from_slice(window);
    let mut s = vec![1, 1];
    s.extend_from_slice(strides);
    let mut p = vec![(0, 0); 2];
    p.extend(pads);
    (w, s, p)
}
