//! Derivative helpers shared by the forward (`jvp.rs`) and reverse (`vjp.rs`)
//! rules: elementwise partial derivatives, and the linear maps (and their
//! transposes) of the structural primitives. Everything here is written with
//! ordinary tensor operations, so derivatives are themselves differentiable
//! and batchable.

use nx::{bind, BinaryOp, CumOp, DType, F64Bits, FftKind, Prim, ReduceOp, Tensor, UnaryOp};

/// The partial derivative of an elementwise operation with respect to one
/// input: a multiplier applied to a tangent or a cotangent.
pub(crate) enum Partial {
    Zero,
    One,
    MinusOne,
    By(Tensor),
}

impl Partial {
    /// `t` scaled by this partial; `None` for a zero partial.
    pub(crate) fn apply(&self, t: &Tensor) -> Option<Tensor> {
        match self {
            Partial::Zero => None,
            Partial::One => Some(t.clone()),
            Partial::MinusOne => Some(-t),
            Partial::By(d) => Some(t * d),
        }
    }
}

/// `d out / d x` for `out = op(x)`.
pub(crate) fn unary_partial(op: UnaryOp, x: &Tensor, out: &Tensor) -> Partial {
    use std::f64::consts::{LN_2, PI};
    let one = || x.scalar_like(1.0);
    let by = Partial::By;
    match op {
        UnaryOp::Neg => Partial::MinusOne,
        // JAX's select(x >= 0, 1, -1): 1 at 0 and at -0.0 (not sign's 0).
        UnaryOp::Abs => by(Tensor::where_(
            &x.greater_equal(&x.scalar_like(0.0)),
            &one(),
            &x.scalar_like(-1.0),
        )),
        UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Trunc
        | UnaryOp::Not => Partial::Zero,
        UnaryOp::Sqrt => by(out.recip() * 0.5),
        UnaryOp::Rsqrt => by(out / x * -0.5),
        UnaryOp::Recip => by(-out.square()),
        UnaryOp::Exp => by(out.clone()),
        UnaryOp::Exp2 => by(out * LN_2),
        UnaryOp::Log => by(x.recip()),
        UnaryOp::Log2 => by(x.recip() * (1.0 / LN_2)),
        UnaryOp::Log1p => by((x + 1.0).recip()),
        UnaryOp::Expm1 => by(out + 1.0),
        UnaryOp::Sin => by(x.cos()),
        UnaryOp::Cos => by(-x.sin()),
        UnaryOp::Tan => by(out.square() + 1.0),
        UnaryOp::Asin => by((one() - x.square()).rsqrt()),
        UnaryOp::Acos => by(-(one() - x.square()).rsqrt()),
        UnaryOp::Atan => by((x.square() + 1.0).recip()),
        UnaryOp::Sinh => by(x.cosh()),
        UnaryOp::Cosh => by(x.sinh()),
        UnaryOp::Tanh => by(one() - out.square()),
        UnaryOp::Asinh => by((x.square() + 1.0).rsqrt()),
        UnaryOp::Acosh => by((x.square() - 1.0).rsqrt()),
        UnaryOp::Atanh => by((one() - x.square()).recip()),
        UnaryOp::Erf => by((-x.square()).exp() * (2.0 / PI.sqrt())),
        UnaryOp::Sigmoid => by(out * (one() - out)),
        UnaryOp::Real | UnaryOp::Imag | UnaryOp::Conj | UnaryOp::Angle => {
            unreachable!("{op:?} has a rule of its own (not holomorphic)")
        }
    }
}

/// `abs` and `angle` of a complex `x` (real outputs, not holomorphic):
/// `d out = real(c * dx)` for the `c` returned, so the JVP is `real(c * t)`
/// and the VJP, with JAX's non-conjugating transposes (`real`'s is
/// `complex(ct, 0)`, a product's the same product), `complex(ct, 0) * c`.
/// abs: `c = conj(x) / |x|` with `|x| = 0` replaced by 1 (JAX's
/// `_abs_jvp_rule` and `_replace_zero`: 0 at 0); angle (JAX's
/// `atan2(imag, real)`): `c = -i conj(x) / |x|^2` (NaN at 0, as atan2's).
pub(crate) fn complex_to_real_coeff(op: UnaryOp, x: &Tensor, out: &Tensor) -> Tensor {
    let complex = |re: &Tensor, im: &Tensor| Tensor::complex(re, im);
    match op {
        UnaryOp::Abs => {
            let zero = out.equal(&out.scalar_like(0.0));
            let safe = Tensor::where_(&zero, &out.scalar_like(1.0), out);
            x.conj() / complex(&safe, &safe.zeros_like())
        }
        UnaryOp::Angle => {
            let inv = x.abs().square().recip();
            x.conj() * complex(&inv.zeros_like(), &-inv)
        }
        _ => unreachable!("{op:?} of a complex input is holomorphic or linear"),
    }
}

/// `(d out / d x, d out / d y)` for `out = op(x, y)`; a partial is computed
/// only for the inputs in `needs`.
pub(crate) fn binary_partials(
    op: BinaryOp,
    x: &Tensor,
    y: &Tensor,
    out: &Tensor,
    needs: [bool; 2],
) -> [Partial; 2] {
    let by = Partial::By;
    let [px, py] = match op {
        BinaryOp::Add => [Partial::One, Partial::One],
        BinaryOp::Sub => [Partial::One, Partial::MinusOne],
        BinaryOp::Mul => [by(y.clone()), by(x.clone())],
        BinaryOp::Div => [lazy(needs[0], || y.recip()), lazy(needs[1], || -(out / y))],
        // x - trunc(x / y) * y
        BinaryOp::Rem => [Partial::One, lazy(needs[1], || -(x / y).trunc())],
        BinaryOp::Pow => [
            // JAX's y * x^(y - 1) for a float exponent, with no case for
            // y = 0: NaN at x = 0 (0 * inf), 0 elsewhere.
            lazy(needs[0], || y * x.pow(&(y - 1.0))),
            lazy(needs[1], || {
                let zero = x.equal(&x.scalar_like(0.0));
                let safe_x = Tensor::where_(&zero, &x.scalar_like(1.0), x);
                out * safe_x.log()
            }),
        ],
        // Ties split the derivative evenly, as JAX does.
        BinaryOp::Max => extremum_partials(&x.greater(y), &x.equal(y), x, needs),
        BinaryOp::Min => extremum_partials(&x.less(y), &x.equal(y), x, needs),
        BinaryOp::Atan2 => {
            let denom = (x.square() + y.square()).recip();
            [by(y * &denom), by(-(x * &denom))]
        }
        BinaryOp::And | BinaryOp::Or | BinaryOp::Xor | BinaryOp::Shl | BinaryOp::Shr => {
            [Partial::Zero, Partial::Zero]
        }
        BinaryOp::Complex => {
            unreachable!("complex has a rule of its own (its output dtype differs)")
        }
    };
    [
        if needs[0] { px } else { Partial::Zero },
        if needs[1] { py } else { Partial::Zero },
    ]
}

fn lazy(needed: bool, f: impl FnOnce() -> Tensor) -> Partial {
    if needed {
        Partial::By(f())
    } else {
        Partial::Zero
    }
}

/// Partials of max/min: 1 for the operand chosen, 1/2 each on ties.
fn extremum_partials(
    first_wins: &Tensor,
    tie: &Tensor,
    like: &Tensor,
    needs: [bool; 2],
) -> [Partial; 2] {
    let half = Tensor::where_(tie, &like.scalar_like(0.5), &like.scalar_like(0.0));
    let dx = Tensor::where_(first_wins, &like.scalar_like(1.0), &half);
    let dy = lazy(needs[1], || like.scalar_like(1.0) - &dx);
    [
        if needs[0] {
            Partial::By(dx)
        } else {
            Partial::Zero
        },
        dy,
    ]
}

/// Sum over `axes` (sorted, distinct).
pub(crate) fn reduce_sum(x: &Tensor, axes: &[usize]) -> Tensor {
    bind(
        Prim::Reduce {
            op: ReduceOp::Sum,
            axes: axes.to_vec(),
        },
        &[x],
    )
}

/// The transpose of a reduction over `axes`: `ct` (reduced shape) broadcast
/// back to `shape`.
pub(crate) fn unreduce(ct: &Tensor, shape: &[usize], axes: &[usize]) -> Tensor {
    let kept: Vec<usize> = (0..shape.len())
        .map(|i| if axes.contains(&i) { 1 } else { shape[i] })
        .collect();
    ct.reshape(&kept).broadcast_to(shape)
}

/// The transpose of broadcasting `shape` to `ct`'s shape: sums the axes that
/// broadcasting added or stretched.
pub(crate) fn sum_to_shape(ct: &Tensor, shape: &[usize]) -> Tensor {
    if ct.shape() == shape {
        return ct.clone();
    }
    let lead = ct.ndim() - shape.len();
    let axes: Vec<usize> = (0..ct.ndim())
        .filter(|&a| a < lead || (shape[a - lead] == 1 && ct.shape()[a] != 1))
        .collect();
    reduce_sum(ct, &axes).reshape(shape)
}

/// Weights that route a max/min reduction's derivative to the extreme
/// elements, shared evenly among ties: `(x == out) / count`, of `x`'s shape.
pub(crate) fn extremum_weights(x: &Tensor, out: &Tensor, axes: &[usize]) -> Tensor {
    let hit = x.equal(&unreduce(out, x.shape(), axes)).cast(x.dtype());
    let count = reduce_sum(&hit, axes);
    hit / unreduce(&count, x.shape(), axes)
}

/// For each element, the product of the other elements of its reduction
/// group over `axes` (no division, so zeros are handled exactly).
pub(crate) fn prod_others(x: &Tensor, axes: &[usize]) -> Tensor {
    let nd = x.ndim();
    // Move the reduced axes last and flatten them into one.
    let mut perm: Vec<usize> = (0..nd).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let moved = bind(Prim::Permute { perm: perm.clone() }, &[x]);
    let kept: Vec<usize> = moved.shape()[..nd - axes.len()].to_vec();
    let n: usize = axes.iter().map(|&a| x.shape()[a]).product();
    let mut flat_shape = kept.clone();
    flat_shape.push(n);
    let flat = moved.reshape(&flat_shape);
    let others = exclusive_products(&flat);
    let back = others.reshape(moved.shape());
    bind(
        Prim::Permute {
            perm: inverse_perm(&perm),
        },
        &[&back],
    )
}

/// Along the last axis: for each position, the product of all other
/// positions (prefix product times suffix product).
fn exclusive_products(x: &Tensor) -> Tensor {
    let last = x.ndim() - 1;
    let n = x.shape()[last];
    if n == 0 {
        return x.clone();
    }
    let shifted = |c: &Tensor| {
        let mut pads = vec![(0, 0); x.ndim()];
        pads[last] = (1, 0);
        c.narrow(last as isize, 0, n - 1).pad(&pads, 1.0)
    };
    let prefix = shifted(&x.cumprod(-1));
    let suffix = shifted(&x.flip(&[-1]).cumprod(-1)).flip(&[-1]);
    prefix * suffix
}

/// `perm`'s inverse: `inverse[perm[i]] = i`.
pub(crate) fn inverse_perm(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// The lower-triangular "j <= i" mask `[n, n]` that writes a running product
/// along the last axis as a product over a new axis:
/// `cumprod(x)[i] = prod_j where(j <= i, x[j], 1)`.
fn running_mask(n: usize) -> Tensor {
    let i = Tensor::iota(&[n, n], 0, DType::I32);
    let j = Tensor::iota(&[n, n], 1, DType::I32);
    j.less_equal(&i)
}

/// `x` with `axis` moved last, then spread to `[..., n, n]` as
/// `where(j <= i, x[j], 1)` (see `running_mask`).
fn running_matrix(x: &Tensor, axis: usize, fill: f64) -> (Tensor, Tensor) {
    let xm = x.moveaxis(axis as isize, -1);
    let n = xm.shape()[xm.ndim() - 1];
    let mut shape = xm.shape().to_vec();
    shape.insert(shape.len() - 1, n);
    let mask = running_mask(n).broadcast_to(&shape);
    let spread = xm.unsqueeze(-2).broadcast_to(&shape);
    let m = Tensor::where_(&mask, &spread, &x.scalar_like(fill));
    (m, mask)
}

/// Tangent of `cumprod(x)` along `axis` for tangent `t`.
pub(crate) fn cumprod_jvp(x: &Tensor, t: &Tensor, axis: usize) -> Tensor {
    let (m, _) = running_matrix(x, axis, 1.0);
    let (tm, _) = running_matrix(t, axis, 0.0);
    let last = m.ndim() - 1;
    let others = prod_others(&m, &[last]);
    reduce_sum(&(tm * others), &[last]).moveaxis(-1, axis as isize)
}

/// Cotangent of `x` for `cumprod(x)` along `axis` given `ct`.
pub(crate) fn cumprod_vjp(x: &Tensor, ct: &Tensor, axis: usize) -> Tensor {
    let (m, mask) = running_matrix(x, axis, 1.0);
    let last = m.ndim() - 1;
    let others = prod_others(&m, &[last]);
    let ctm = ct.moveaxis(axis as isize, -1).unsqueeze(-1);
    let contrib = Tensor::where_(&mask, &(others * ctm), &x.scalar_like(0.0));
    reduce_sum(&contrib, &[last - 1]).moveaxis(-1, axis as isize)
}

/// Running sum along `axis` from the end (the transpose of `cumsum`).
pub(crate) fn reverse_cumsum(ct: &Tensor, axis: usize) -> Tensor {
    let flip = |t: &Tensor| bind(Prim::Flip { axes: vec![axis] }, &[t]);
    flip(&bind(
        Prim::Cumulative {
            op: CumOp::Sum,
            axis,
        },
        &[&flip(ct)],
    ))
}

/// The transpose of `Slice { start, step }` taken from a tensor of `shape`:
/// `ct` placed at the sliced positions, zeros elsewhere.
/// The transpose of `Prim::Fft { kind, lengths }` applied to `ct`, as JAX's
/// `_fft_transpose_rule` (jax/_src/lax/fft.py). Transposes of complex-linear
/// maps are plain (not conjugate) transposes, so that with JAX's cotangent
/// convention `Re sum(ct * J t) = Re sum(J^T ct * t)`.
pub(crate) fn fft_transpose(kind: FftKind, lengths: &[usize], ct: &Tensor) -> Tensor {
    let fft = |kind, x: &Tensor| {
        bind(
            Prim::Fft {
                kind,
                lengths: lengths.to_vec(),
            },
            &[x],
        )
    };
    let last = ct.ndim() - 1;
    let n = lengths[lengths.len() - 1];
    match kind {
        // The DFT matrix is symmetric, and so is its inverse.
        FftKind::Fft | FftKind::Ifft => fft(kind, ct),
        // JAX transposes a naive rfft, `fft(complex(x, 0))[..., :n/2+1]`:
        // zero-pad the cotangent back to n, the same fft, the real part.
        FftKind::Rfft => {
            let mut pads = vec![(0, 0); ct.ndim()];
            pads[last] = (0, n - ct.shape()[last]);
            fft(FftKind::Fft, &ct.pad(&pads, 0.0)).real()
        }
        // JAX's `_irfft_transpose`: the rfft of the cotangent, times the
        // mask [1, 2, ..., 2, (1 if n is even)] (the entries irfft counts
        // twice, once for their conjugate) and 1/prod(lengths), conjugated
        // ("JAX's convention for complex gradients", jax#6223).
        FftKind::Irfft => {
            let x = fft(FftKind::Rfft, ct);
            let h = x.shape()[last];
            let total: f64 = lengths.iter().map(|&l| l as f64).product();
            let mask: Vec<f64> = (0..h)
                .map(|k| {
                    let twice = k > 0 && (k < h - 1 || n % 2 == 1);
                    (if twice { 2.0 } else { 1.0 }) / total
                })
                .collect();
            let re = Tensor::from_slice(&mask, &[h]).cast(ct.dtype());
            let mask = Tensor::complex(&re, &re.zeros_like());
            (&x * &mask).conj()
        }
    }
}

pub(crate) fn unslice(ct: &Tensor, shape: &[usize], start: &[usize], step: &[usize]) -> Tensor {
    let mut t = ct.clone();
    let mut pads = Vec::with_capacity(shape.len());
    for a in 0..shape.len() {
        let m = t.shape()[a];
        let mut len = m;
        if step[a] > 1 && m > 0 {
            // Interleave step - 1 zeros after each element, then cut to fit.
            let mut spread_pads = vec![(0, 0); t.ndim() + 1];
            spread_pads[a + 1] = (0, step[a] - 1);
            let spread = t.unsqueeze(a as isize + 1).pad(&spread_pads, 0.0);
            let mut merged = t.shape().to_vec();
            merged[a] = m * step[a];
            len = (m * step[a]).min(shape[a] - start[a]);
            t = spread.reshape(&merged).narrow(a as isize, 0, len);
        }
        pads.push((start[a], shape[a] - start[a] - len));
    }
    t.pad(&pads, 0.0)
}

/// Cotangent of the left operand of `DotGeneral` (JAX's
/// `_dot_general_transpose_lhs`): contract `ct` with `y` over `y`'s free
/// axes, batch over the batch axes, then permute into `x`'s axis order.
/// With `swap`, `ct`'s free axes are ordered (y's, x's) instead.
pub(crate) fn dot_transpose_lhs(
    ct: &Tensor,
    x_ndim: usize,
    y: &Tensor,
    x_batch: &[usize],
    y_batch: &[usize],
    x_contract: &[usize],
    y_contract: &[usize],
    swap: bool,
) -> Tensor {
    let free = |nd: usize, a: &[usize], b: &[usize]| -> Vec<usize> {
        (0..nd)
            .filter(|i| !a.contains(i) && !b.contains(i))
            .collect()
    };
    let x_kept = free(x_ndim, x_contract, x_batch);
    let y_kept = free(y.ndim(), y_contract, y_batch);
    let nb = x_batch.len();
    let ans_batch: Vec<usize> = (0..nb).collect();
    let ans_y: Vec<usize> = if swap {
        (nb..nb + y_kept.len()).collect()
    } else {
        (nb + x_kept.len()..nb + x_kept.len() + y_kept.len()).collect()
    };
    // The product's axes, named by the axes of x they hold: in the order
    // (ct, y): x's batch axes, x's kept axes, then x's contracted axes in
    // the order of y's (ascending); in the order (y, ct): batch, contracted,
    // kept. Pick the order that needs no permutation when there is one
    // (a matmul's weight gradient comes out in its layout directly).
    let mut order: Vec<usize> = (0..y_contract.len()).collect();
    order.sort_by_key(|&i| y_contract[i]);
    let contracted: Vec<usize> = order.iter().map(|&i| x_contract[i]).collect();
    let labels_ct_first: Vec<usize> = [x_batch, &x_kept, &contracted].concat();
    let labels_y_first: Vec<usize> = [x_batch, &contracted, &x_kept].concat();
    let is_identity = |l: &[usize]| l.iter().enumerate().all(|(i, &a)| i == a);
    if is_identity(&labels_y_first) && !is_identity(&labels_ct_first) {
        return bind(
            Prim::DotGeneral {
                lhs_batch: y_batch.to_vec(),
                rhs_batch: ans_batch,
                lhs_contract: y_kept,
                rhs_contract: ans_y,
            },
            &[y, ct],
        );
    }
    let prod = bind(
        Prim::DotGeneral {
            lhs_batch: ans_batch,
            rhs_batch: y_batch.to_vec(),
            lhs_contract: ans_y,
            rhs_contract: y_kept,
        },
        &[ct, y],
    );
    if is_identity(&labels_ct_first) {
        prod
    } else {
        bind(
            Prim::Permute {
                perm: inverse_perm(&labels_ct_first),
            },
            &[&prod],
        )
    }
}

/// The parameters of a `Prim::Conv`, borrowed.
struct ConvParams<'a> {
    strides: &'a [usize],
    padding: &'a [(isize, isize)],
    ld: &'a [usize],
    rd: &'a [usize],
    groups: usize,
}

fn conv_params(prim: &Prim) -> ConvParams<'_> {
    match prim {
        Prim::Conv {
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            feature_group_count,
        } => ConvParams {
            strides,
            padding,
            ld: lhs_dilation,
            rd: rhs_dilation,
            groups: *feature_group_count,
        },
        p => unreachable!("not a convolution: {}", p.name()),
    }
}

/// Binds `Prim::Conv` (inputs in nx's layout; no validation: the shapes
/// are derived from a valid convolution).
pub(crate) fn bind_conv(
    x: &Tensor,
    w: &Tensor,
    strides: Vec<usize>,
    padding: Vec<(isize, isize)>,
    lhs_dilation: Vec<usize>,
    rhs_dilation: Vec<usize>,
    feature_group_count: usize,
) -> Tensor {
    let prim = Prim::Conv {
        strides,
        padding,
        lhs_dilation,
        rhs_dilation,
        feature_group_count,
    };
    bind(prim, &[x, w])
}

/// `(n - 1) * d + 1` (0 for `n == 0`) as a signed size.
fn dil(n: usize, d: usize) -> isize {
    nx::dilate_size(n, d) as isize
}

/// The input cotangent of `conv(x, w)` (`prim`) for the output cotangent
/// `ct`: JAX's `_conv_general_dilated_transpose_lhs` in nx's fixed layout.
/// A convolution of `ct` with the kernel flipped spatially and its channel
/// axes swapped (each group's output channels become input channels),
/// window strides = the forward lhs dilation, lhs dilation = the forward
/// strides, and JAX's `_conv_general_vjp_lhs_padding`.
pub(crate) fn conv_transpose_lhs(
    ct: &Tensor,
    w: &Tensor,
    x_shape: &[usize],
    prim: &Prim,
) -> Tensor {
    let p = conv_params(prim);
    let nsp = p.strides.len();
    let ws = w.shape();
    let (o, ig, g) = (ws[0], ws[1], p.groups);
    let spatial: Vec<isize> = (2..2 + nsp as isize).collect();
    // [O, Ig, k...] -> [C = G * Ig, O / G, k...]: group g's block [Og, Ig]
    // becomes [Ig, Og] at rows g * Ig.
    let wt = if g == 1 {
        w.swapaxes(0, 1)
    } else {
        let mut split = vec![g, o / g, ig];
        split.extend_from_slice(&ws[2..]);
        let mut perm: Vec<isize> = vec![0, 2, 1];
        perm.extend(3..3 + nsp as isize);
        let mut merged = vec![g * ig, o / g];
        merged.extend_from_slice(&ws[2..]);
        w.reshape(&split).permute(&perm).reshape(&merged)
    }
    .flip(&spatial);
    let cs = ct.shape();
    let padding = (0..nsp)
        .map(|d| {
            let lhs_d = dil(x_shape[2 + d], p.ld[d]);
            let rhs_d = dil(ws[2 + d], p.rd[d]);
            let out_d = dil(cs[2 + d], p.strides[d]);
            let before = rhs_d - p.padding[d].0 - 1;
            (before, lhs_d + rhs_d - 1 - out_d - before)
        })
        .collect();
    bind_conv(
        ct,
        &wt,
        p.ld.to_vec(),
        padding,
        p.strides.to_vec(),
        p.rd.to_vec(),
        g,
    )
}

/// The kernel cotangent of `conv(x, w)` (`prim`) for the output cotangent
/// `ct`: JAX's `_conv_general_dilated_transpose_rhs` in nx's fixed layout.
/// A convolution whose batch is the input's channels and whose contraction
/// runs over the images: input `x` as `[C, N, s...]`, kernel `ct` as `[O,
/// N, q...]`, window strides = the forward rhs dilation, rhs dilation = the
/// forward strides, JAX's `_conv_general_vjp_rhs_padding`; the result
/// `[I, O, k...]` is transposed back. JAX's batch groups (for grouped
/// forward convolutions) become feature groups here: the input's channel
/// groups move next to the images, `[Ig, G * N, s...]`.
pub(crate) fn conv_transpose_rhs(
    ct: &Tensor,
    x: &Tensor,
    w_shape: &[usize],
    prim: &Prim,
) -> Tensor {
    let p = conv_params(prim);
    let nsp = p.strides.len();
    let (xs, cs) = (x.shape(), ct.shape());
    let (n, c, g) = (xs[0], xs[1], p.groups);
    let xt = if g == 1 {
        x.swapaxes(0, 1)
    } else {
        // [N, G, Ig, s...] -> [Ig, G, N, s...] -> [Ig, G * N, s...]
        let mut split = vec![n, g, c / g];
        split.extend_from_slice(&xs[2..]);
        let mut perm: Vec<isize> = vec![2, 1, 0];
        perm.extend(3..3 + nsp as isize);
        let mut merged = vec![c / g, g * n];
        merged.extend_from_slice(&xs[2..]);
        x.reshape(&split).permute(&perm).reshape(&merged)
    };
    let ctt = ct.swapaxes(0, 1);
    let padding = (0..nsp)
        .map(|d| {
            let lhs_d = dil(xs[2 + d], p.ld[d]);
            let rhs_d = dil(w_shape[2 + d], p.rd[d]);
            let out_d = dil(cs[2 + d], p.strides[d]);
            let lo = p.padding[d].0;
            (lo, (out_d - lhs_d) + (rhs_d - lo - 1))
        })
        .collect();
    bind_conv(
        &xt,
        &ctt,
        p.rd.to_vec(),
        padding,
        p.ld.to_vec(),
        p.strides.to_vec(),
        g,
    )
    .swapaxes(0, 1)
}
/// Window geometry shared by the window rules: `ReduceWindow`'s parameters.
pub(crate) struct WindowSpec {
    pub window: Vec<usize>,
    pub strides: Vec<usize>,
    pub padding: Vec<(usize, usize)>,
}

impl WindowSpec {
    /// The leading axes with window 1, stride 1 and no padding: the flat
    /// argmax indices count over the axes after them.
    pub(crate) fn flat_from(&self) -> usize {
        (0..self.window.len())
            .take_while(|&d| {
                self.window[d] == 1 && self.strides[d] == 1 && self.padding[d] == (0, 0)
            })
            .count()
    }

    fn padded(&self) -> bool {
        self.padding.iter().any(|&p| p != (0, 0))
    }

    /// Whether the windows tile the input from its start (stride = window,
    /// no padding, at least one window per axis: a 2x2/2 max pool), so each
    /// input element lies in at most one window and the derivative of a
    /// max needs no indices: it is a selection by masks of elementwise
    /// comparisons, which `jit` fuses (the argmax and scatter-add of the
    /// general rule are library steps of a compiled program).
    pub(crate) fn tiles(&self, out: &[usize]) -> bool {
        !self.padded()
            && self.window.iter().zip(&self.strides).all(|(w, s)| w == s)
            && out.iter().all(|&o| o > 0)
    }

    /// The window positions in row-major window order, each an offset per axis.
    fn positions(&self) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for &w in &self.window {
            all = all
                .into_iter()
                .flat_map(|p: Vec<usize>| {
                    (0..w).map(move |k| {
                        let mut q = p.clone();
                        q.push(k);
                        q
                    })
                })
                .collect();
        }
        all
    }

    /// For tiling windows: the element at window position `p` of every
    /// window of `t` (the input's shape), a tensor of the output's shape `out`.
    fn at_position(&self, t: &Tensor, p: &[usize], out: &[usize]) -> Tensor {
        let end = (0..p.len())
            .map(|d| p[d] + (out[d] - 1) * self.window[d] + 1)
            .collect();
        bind(
            Prim::Slice {
                start: p.to_vec(),
                end,
                step: self.window.clone(),
            },
            &[t],
        )
    }

    /// For tiling windows of a max with output `m`: per window position (in
    /// `positions` order), where that position holds its window's first
    /// maximum (the element the general rule's argmax picks; none in a
    /// window holding a NaN).
    fn first_max(&self, x: &Tensor, m: &Tensor) -> Vec<Tensor> {
        let mut seen: Option<Tensor> = None;
        self.positions()
            .iter()
            .map(|p| {
                let hit = self.at_position(x, p, m.shape()).equal(m);
                let first = match &seen {
                    Some(s) => hit.logical_and(&s.logical_not()),
                    None => hit.clone(),
                };
                seen = Some(match seen.take() {
                    Some(s) => s.logical_or(&hit),
                    None => hit,
                });
                first
            })
            .collect()
    }

    /// For tiling windows: the transpose of `at_position` over every
    /// position, `parts[i]` (the output's shape) placed at `positions()[i]`
    /// of each window of an input of `shape`, zeros where no window reaches.
    fn interleave(&self, parts: &[Tensor], shape: &[usize]) -> Tensor {
        let out = parts[0].shape().to_vec();
        let nd = out.len();
        // Each part as [o_0, 1, o_1, 1, ..], joined along the window axes
        // (the last fastest, as `positions`) into [o_0, w_0, o_1, w_1, ..]:
        // concatenations and reshapes, which a compiled program reads as
        // masked loads in the kernel that consumes them.
        let unit: Vec<usize> = out.iter().flat_map(|&o| [o, 1]).collect();
        let mut level: Vec<Tensor> = parts.iter().map(|p| p.reshape(&unit)).collect();
        for d in (0..nd).rev() {
            level = level
                .chunks(self.window[d])
                .map(|c| match c {
                    [one] => one.clone(),
                    _ => Tensor::concatenate(c, (2 * d + 1) as isize),
                })
                .collect();
        }
        let covered: Vec<usize> = (0..nd).map(|d| out[d] * self.window[d]).collect();
        let g = level[0].reshape(&covered);
        if covered == shape {
            return g;
        }
        let pads: Vec<(usize, usize)> = (0..nd).map(|d| (0, shape[d] - covered[d])).collect();
        g.pad(&pads, 0.0)
    }

    /// The cotangent of a max over tiling windows (`tiles`): `ct` at each
    /// window's first maximum of `x` (`m` the max), zeros elsewhere; the
    /// general rule's values (`scatter` at `argmax`) without indices.
    pub(crate) fn max_transpose_tiled(&self, ct: &Tensor, x: &Tensor, m: &Tensor) -> Tensor {
        let zero = ct.zeros_like();
        let parts: Vec<Tensor> = self
            .first_max(x, m)
            .iter()
            .map(|hit| Tensor::where_(hit, ct, &zero))
            .collect();
        self.interleave(&parts, x.shape())
    }

    /// The tangent of a max over tiling windows: `t` at each window's first
    /// maximum of `x` (`m` the max); `select` at `argmax` without indices.
    pub(crate) fn max_select_tiled(&self, t: &Tensor, x: &Tensor, m: &Tensor) -> Tensor {
        let mut picked = m.zeros_like();
        for (hit, p) in self.first_max(x, m).iter().zip(self.positions()) {
            picked = Tensor::where_(hit, &self.at_position(t, &p, m.shape()), &picked);
        }
        picked
    }

    /// The first maximum of each window of `x` (see `Prim::WindowArgmax`).
    pub(crate) fn argmax(&self, x: &Tensor) -> Tensor {
        bind(
            Prim::WindowArgmax {
                window: self.window.clone(),
                strides: self.strides.clone(),
                padding: self.padding.clone(),
                flat_from: self.flat_from(),
            },
            &[x],
        )
    }

    /// `t` (the input's shape) at the window maxima `idx` (from `argmax`):
    /// the tangent of a max window reduction.
    pub(crate) fn select(&self, t: &Tensor, idx: &Tensor) -> Tensor {
        let ff = self.flat_from();
        let (shape, out) = (t.shape().to_vec(), idx.shape().to_vec());
        let mut flat: Vec<usize> = shape[..ff].to_vec();
        flat.push(shape[ff..].iter().product());
        let mut t = t.reshape(&flat);
        if self.padded() {
            // The index one past the end reads a zero (a padding element).
            let mut hi = vec![0; ff + 1];
            hi[ff] = 1;
            t = bind(
                Prim::Pad {
                    lo: vec![0; ff + 1],
                    hi,
                    value: F64Bits(0.0),
                },
                &[&t],
            );
        }
        let mut iflat: Vec<usize> = out[..ff].to_vec();
        iflat.push(out[ff..].iter().product());
        bind(Prim::Gather { axis: ff }, &[&t, &idx.reshape(&iflat)]).reshape(&out)
    }

    /// The transpose of `select`: `ct` (the output's shape) added at the
    /// window maxima `idx` into zeros of `shape` (JAX's
    /// `select_and_scatter_add`).
    pub(crate) fn scatter(&self, ct: &Tensor, idx: &Tensor, shape: &[usize]) -> Tensor {
        let ff = self.flat_from();
        let out = idx.shape().to_vec();
        let span: usize = shape[ff..].iter().product();
        let extra = self.padded() as usize;
        let mut flat: Vec<usize> = shape[..ff].to_vec();
        flat.push(span + extra);
        let mut iflat: Vec<usize> = out[..ff].to_vec();
        iflat.push(out[ff..].iter().product());
        let zeros = Tensor::zeros(&flat, ct.dtype());
        let mut g = bind(
            Prim::ScatterAdd { axis: ff },
            &[&zeros, &idx.reshape(&iflat), &ct.reshape(&iflat)],
        );
        if extra > 0 {
            let mut end = flat.clone();
            end[ff] = span;
            g = bind(
                Prim::Slice {
                    start: vec![0; ff + 1],
                    end,
                    step: vec![1; ff + 1],
                },
                &[&g],
            );
        }
        g.reshape(shape)
    }

    /// The transpose of the window sum (input `shape`) applied to `ct`:
    /// each input element receives the sum of the cotangents of the windows
    /// covering it. A broadcast when windows tile the input (stride =
    /// window, no padding); otherwise `ct` dilated by the strides, padded
    /// by `window - 1 - lo` before (negative: cut) to `n + window - 1`, and
    /// summed over windows of the same size with stride 1. Linear in `ct`
    /// and made of differentiable primitives.
    pub(crate) fn sum_transpose(&self, ct: &Tensor, shape: &[usize]) -> Tensor {
        let nd = shape.len();
        let (w, s) = (&self.window, &self.strides);
        let o = ct.shape().to_vec();
        if !self.padded() && w == s {
            // [.., o, ..] -> [.., o, 1, ..] -> [.., o, w, ..] -> [.., o * w, ..],
            // then zeros past the last window.
            let mut split = Vec::with_capacity(2 * nd);
            let mut wide = Vec::with_capacity(2 * nd);
            for d in 0..nd {
                split.extend([o[d], 1]);
                wide.extend([o[d], w[d]]);
            }
            let merged: Vec<usize> = (0..nd).map(|d| o[d] * w[d]).collect();
            let g = ct.reshape(&split).broadcast_to(&wide).reshape(&merged);
            if merged == shape {
                return g;
            }
            let hi: Vec<usize> = (0..nd).map(|d| shape[d] - merged[d]).collect();
            return bind(
                Prim::Pad {
                    lo: vec![0; nd],
                    hi,
                    value: F64Bits(0.0),
                },
                &[&g],
            );
        }
        let mut g = ct.clone();
        if s.iter().any(|&s| s > 1) {
            // Dilate: a stride's worth of zeros after each element, then
            // the trailing ones cut.
            let mut split = Vec::with_capacity(2 * nd);
            let mut hi = Vec::with_capacity(2 * nd);
            for d in 0..nd {
                split.extend([o[d], 1]);
                hi.extend([0, s[d] - 1]);
            }
            let padded = bind(
                Prim::Pad {
                    lo: vec![0; 2 * nd],
                    hi,
                    value: F64Bits(0.0),
                },
                &[&g.reshape(&split)],
            );
            let merged: Vec<usize> = (0..nd).map(|d| o[d] * s[d]).collect();
            let end: Vec<usize> = (0..nd).map(|d| (o[d] - 1) * s[d] + 1).collect();
            g = bind(
                Prim::Slice {
                    start: vec![0; nd],
                    end,
                    step: vec![1; nd],
                },
                &[&padded.reshape(&merged)],
            );
        }
        // Pad (or cut) to n + w - 1 per axis, offset w - 1 - lo.
        let lo: Vec<isize> = (0..nd)
            .map(|d| w[d] as isize - 1 - self.padding[d].0 as isize)
            .collect();
        let hi: Vec<isize> = (0..nd)
            .map(|d| (shape[d] + w[d] - 1) as isize - lo[d] - ((o[d] - 1) * s[d] + 1) as isize)
            .collect();
        if lo.iter().chain(&hi).any(|&p| p > 0) {
            g = bind(
                Prim::Pad {
                    lo: lo.iter().map(|&p| p.max(0) as usize).collect(),
                    hi: hi.iter().map(|&p| p.max(0) as usize).collect(),
                    value: F64Bits(0.0),
                },
                &[&g],
            );
        }
        if lo.iter().chain(&hi).any(|&p| p < 0) {
            let len = g.shape().to_vec();
            g = bind(
                Prim::Slice {
                    start: lo.iter().map(|&p| (-p).max(0) as usize).collect(),
                    end: (0..nd).map(|d| len[d] - (-hi[d]).max(0) as usize).collect(),
                    step: vec![1; nd],
                },
                &[&g],
            );
        }
        bind(
            Prim::ReduceWindow {
                op: ReduceOp::Sum,
                window: w.clone(),
                strides: vec![1; nd],
                padding: vec![(0, 0); nd],
            },
            &[&g],
        )
    }
}
