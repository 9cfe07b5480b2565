//! `Padding`: how windowed operations (pooling, convolution) pad their
//! spatial axes, and its resolution to explicit `(lo, hi)` pairs with JAX's
//! `padtype_to_pads` rule.

/// Padding of the spatial axes of a windowed operation (pooling,
/// convolution), as JAX's `padding` argument.
///
/// - `Valid`: no padding; windows lie inside the input.
/// - `Same`: out = ceil(in / stride) per axis; total padding
///   `max((out - 1) * stride + window - in, 0)`, split with the odd element
///   at the end (JAX's `padtype_to_pads`).
/// - `Explicit(pairs)`: `(lo, hi)` per spatial axis.
///
/// ```
/// use nx::Padding;
/// // in 5, window 2, stride 2: out 3, total padding 1, all at the end.
/// assert_eq!(Padding::Same.resolve("max_pool", &[5], &[2], &[2]), vec![(0, 1)]);
/// assert_eq!(Padding::Valid.resolve("max_pool", &[5], &[2], &[2]), vec![(0, 0)]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum Padding {
    /// No padding: windows lie inside the input.
    #[default]
    Valid,
    /// Pads so that the output size is `ceil(in / stride)` per axis.
    Same,
    /// Explicit `(lo, hi)` pairs, one per spatial axis.
    Explicit(Vec<(usize, usize)>),
}

impl Padding {
    /// Explicit `(lo, hi)` pairs for spatial axes of sizes `input` under
    /// windows `window` (for a dilated kernel, its dilated extent) and
    /// `strides`, all of one length. Panics naming `op` when an explicit
    /// list has the wrong length.
    ///
    /// ```
    /// use nx::Padding;
    /// // in 6, window 3, stride 1: out 6, total padding 2, one each side.
    /// assert_eq!(Padding::Same.resolve("avg_pool", &[6], &[3], &[1]), vec![(1, 1)]);
    /// ```
    pub fn resolve(
        &self,
        op: &str,
        input: &[usize],
        window: &[usize],
        strides: &[usize],
    ) -> Vec<(usize, usize)> {
        match self {
            Padding::Valid => vec![(0, 0); input.len()],
            Padding::Same => (0..input.len())
                .map(|d| {
                    let s = strides[d].max(1) as isize;
                    let (n, k) = (input[d] as isize, window[d] as isize);
                    let out = (n + s - 1) / s;
                    let total = ((out - 1) * s + k - n).max(0) as usize;
                    (total / 2, total - total / 2)
                })
                .collect(),
            Padding::Explicit(pairs) => {
                if pairs.len() != input.len() {
                    panic!(
                        "{op}: explicit padding needs one (lo, hi) pair per spatial axis \
                         ({}), got {} pairs",
                        input.len(),
                        pairs.len()
                    );
                }
                pairs.clone()
            }
        }
    }
}
