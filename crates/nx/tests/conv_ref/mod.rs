//! Naive f64 references for convolution, written from the definitions
//! (plain loops over every output element, window offset and channel),
//! shared by `nx/tests/conv.rs` and `rune/tests/conv_grad.rs`.
#![allow(dead_code)]

use nx::{ConvOpts, Padding};

/// Row-major multi-index of `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = flat % shape[d];
        flat /= shape[d];
    }
    idx
}

/// Row-major flat index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
}

fn or1(v: &[usize], n: usize) -> Vec<usize> {
    if v.is_empty() {
        vec![1; n]
    } else {
        v.to_vec()
    }
}

fn dilated(n: usize, d: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n - 1) * d + 1
    }
}

/// The padding pairs of `opts` for input spatial sizes `xs` and kernel
/// spatial sizes `ks` (JAX's `padtype_to_pads` for Same).
pub fn resolve_pads(opts: &ConvOpts, xs: &[usize], ks: &[usize]) -> Vec<(i64, i64)> {
    let n = xs.len();
    let s = or1(&opts.strides, n);
    let rd = or1(&opts.rhs_dilation, n);
    match &opts.padding {
        Padding::Valid => vec![(0, 0); n],
        Padding::Explicit(p) => p.iter().map(|&(a, b)| (a as i64, b as i64)).collect(),
        Padding::Same => (0..n)
            .map(|d| {
                let out = (xs[d] + s[d] - 1) / s[d];
                let k = dilated(ks[d], rd[d]) as i64;
                let total = ((out as i64 - 1) * s[d] as i64 + k - xs[d] as i64).max(0);
                (total / 2, total - total / 2)
            })
            .collect(),
    }
}

/// `conv_general_dilated(x, w)` with NC.../OI.../NC... layouts, straight
/// from its definition: `out[n, o, q] = sum_{c, k} xd[n, g(o) * Cg + c,
/// q * s + k * rd] * w[o, c, k]`, where `xd` is the input dilated by
/// `lhs_dilation` (zeros between elements) and padded by `pads` (negative
/// pads crop).
pub fn conv_ref(
    x: &[f64],
    xshape: &[usize],
    w: &[f64],
    wshape: &[usize],
    strides: &[usize],
    pads: &[(i64, i64)],
    ld: &[usize],
    rd: &[usize],
    groups: usize,
) -> (Vec<f64>, Vec<usize>) {
    let nsp = xshape.len() - 2;
    let (n, c, o) = (xshape[0], xshape[1], wshape[0]);
    let (cg, og) = (c / groups, o / groups);
    let ks = &wshape[2..];
    let mut oshape = vec![n, o];
    for d in 0..nsp {
        let padded = dilated(xshape[2 + d], ld[d]) as i64 + pads[d].0 + pads[d].1;
        let k = dilated(ks[d], rd[d]) as i64;
        oshape.push(if padded < k {
            0
        } else {
            ((padded - k) / strides[d] as i64 + 1) as usize
        });
    }
    let total: usize = oshape.iter().product();
    let kn: usize = ks.iter().product();
    let mut out = vec![0.0; total];
    for (flat, slot) in out.iter_mut().enumerate() {
        let idx = unravel(flat, &oshape);
        let (b, oc) = (idx[0], idx[1]);
        let g = oc / og;
        let mut acc = 0.0;
        for ci in 0..cg {
            'k: for kf in 0..kn {
                let k = unravel(kf, ks);
                let mut xi = vec![b, g * cg + ci];
                for d in 0..nsp {
                    // Position in the padded, dilated input.
                    let pos = (idx[2 + d] * strides[d] + k[d] * rd[d]) as i64 - pads[d].0;
                    if pos < 0 || pos % ld[d] as i64 != 0 {
                        continue 'k;
                    }
                    let e = (pos / ld[d] as i64) as usize;
                    if e >= xshape[2 + d] {
                        continue 'k;
                    }
                    xi.push(e);
                }
                let mut wi = vec![oc, ci];
                wi.extend_from_slice(&k);
                acc += x[ravel(&xi, xshape)] * w[ravel(&wi, wshape)];
            }
        }
        *slot = acc;
    }
    (out, oshape)
}

/// `conv_ref` with the options of `ConvOpts`.
pub fn conv_ref_opts(
    x: &[f64],
    xshape: &[usize],
    w: &[f64],
    wshape: &[usize],
    opts: &ConvOpts,
) -> (Vec<f64>, Vec<usize>) {
    let nsp = xshape.len() - 2;
    let pads = resolve_pads(opts, &xshape[2..], &wshape[2..]);
    conv_ref(
        x,
        xshape,
        w,
        wshape,
        &or1(&opts.strides, nsp),
        &pads,
        &or1(&opts.lhs_dilation, nsp),
        &or1(&opts.rhs_dilation, nsp),
        opts.feature_group_count,
    )
}

/// The transposed convolution by its scatter definition: every input
/// element `x[n, o, q]` adds `x * w[o, i, k]` to `full[n, i, q * s + k * rd]`
/// (`w` in the forward layout `[O, I, k...]`), giving the full result of
/// size `(in - 1) * s + dilated_k`; the result is the window of it that
/// starts `dilated_k - 1 - pad_before` in and has JAX's output size
/// `dilate(in, s) + pad_before + pad_after - dilated_k + 1` (zeros past the
/// full result). The pads are JAX's `_conv_transpose_padding` for
/// Same/Valid, or the explicit pairs.
pub fn conv_transpose_ref(
    x: &[f64],
    xshape: &[usize],
    w: &[f64],
    wshape: &[usize],
    opts: &ConvOpts,
) -> (Vec<f64>, Vec<usize>) {
    let nsp = xshape.len() - 2;
    let s = or1(&opts.strides, nsp);
    let rd = or1(&opts.rhs_dilation, nsp);
    let (n, oc, ic) = (xshape[0], wshape[0], wshape[1]);
    let kd: Vec<usize> = (0..nsp).map(|d| dilated(wshape[2 + d], rd[d])).collect();
    let pads: Vec<(i64, i64)> = match &opts.padding {
        Padding::Explicit(p) => p.iter().map(|&(a, b)| (a as i64, b as i64)).collect(),
        mode => (0..nsp)
            .map(|d| {
                let (k, st) = (kd[d] as i64, s[d] as i64);
                let (len, a) = if *mode == Padding::Same {
                    let len = k + st - 2;
                    (len, if st > k - 1 { k - 1 } else { (len + 1) / 2 })
                } else {
                    (k + st - 2 + (k - st).max(0), k - 1)
                };
                (a, len - a)
            })
            .collect(),
    };
    let mut fshape = vec![n, ic];
    let mut oshape = vec![n, ic];
    for d in 0..nsp {
        fshape.push((xshape[2 + d] - 1) * s[d] + kd[d]);
        let size = dilated(xshape[2 + d], s[d]) as i64 + pads[d].0 + pads[d].1 - kd[d] as i64 + 1;
        oshape.push(size.max(0) as usize);
    }
    let mut full = vec![0.0; fshape.iter().product()];
    let kn: usize = wshape[2..].iter().product();
    let xn: usize = xshape.iter().product();
    for xf in 0..xn {
        let xi = unravel(xf, xshape);
        let (b, o) = (xi[0], xi[1]);
        assert!(o < oc);
        for i in 0..ic {
            for kf in 0..kn {
                let k = unravel(kf, &wshape[2..]);
                let mut fi = vec![b, i];
                for d in 0..nsp {
                    fi.push(xi[2 + d] * s[d] + k[d] * rd[d]);
                }
                let mut wi = vec![o, i];
                wi.extend_from_slice(&k);
                full[ravel(&fi, &fshape)] += x[xf] * w[ravel(&wi, wshape)];
            }
        }
    }
    let mut out = vec![0.0; oshape.iter().product()];
    for (flat, slot) in out.iter_mut().enumerate() {
        let idx = unravel(flat, &oshape);
        let mut fi = vec![idx[0], idx[1]];
        let mut inside = true;
        for d in 0..nsp {
            let p = idx[2 + d] as i64 + kd[d] as i64 - 1 - pads[d].0;
            if p < 0 || p >= fshape[2 + d] as i64 {
                inside = false;
                break;
            }
            fi.push(p as usize);
        }
        if inside {
            *slot = full[ravel(&fi, &fshape)];
        }
    }
    (out, oshape)
}

/// One configuration of the tables.
pub struct Case {
    pub name: &'static str,
    pub x: Vec<usize>,
    pub w: Vec<usize>,
    pub opts: ConvOpts,
}

fn case(name: &'static str, x: &[usize], w: &[usize], opts: ConvOpts) -> Case {
    Case {
        name,
        x: x.to_vec(),
        w: w.to_vec(),
        opts,
    }
}

fn ex(p: &[(usize, usize)]) -> Padding {
    Padding::Explicit(p.to_vec())
}

/// The configurations every conv test runs over: 1-D/2-D/3-D, strides,
/// explicit (asymmetric), Same and Valid paddings, both dilations, groups
/// (depthwise included), odd sizes, batch 1.
pub fn cases() -> Vec<Case> {
    let d = ConvOpts::default;
    let padded = |p: &[(usize, usize)]| ConvOpts {
        padding: ex(p),
        ..d()
    };
    vec![
        case("1d valid", &[2, 3, 7], &[4, 3, 3], d()),
        // Outputs larger than their inputs, few output channels: col2im
        // (the input gradient of a VALID convolution).
        case(
            "1d full padding, col2im",
            &[3, 8, 5],
            &[2, 8, 3],
            padded(&[(2, 2)]),
        ),
        case(
            "2d full padding, col2im",
            &[2, 16, 4, 3],
            &[3, 16, 3, 2],
            padded(&[(2, 2), (1, 1)]),
        ),
        case(
            "2d uneven padding, col2im",
            &[2, 9, 3, 4],
            &[2, 9, 2, 3],
            padded(&[(3, 0), (0, 4)]),
        ),
        case(
            "3d full padding, col2im",
            &[1, 12, 2, 3, 2],
            &[1, 12, 2, 2, 2],
            padded(&[(1, 1), (1, 1), (1, 1)]),
        ),
        case(
            "1d stride 2, pad (1, 2), rhs dilation 2",
            &[2, 2, 9],
            &[3, 2, 3],
            ConvOpts {
                strides: vec![2],
                padding: ex(&[(1, 2)]),
                rhs_dilation: vec![2],
                ..d()
            },
        ),
        case(
            "1d lhs dilation 2, pad (2, 1)",
            &[1, 2, 5],
            &[2, 2, 3],
            ConvOpts {
                padding: ex(&[(2, 1)]),
                lhs_dilation: vec![2],
                ..d()
            },
        ),
        case(
            "1d same, stride 3 on 7",
            &[3, 1, 7],
            &[2, 1, 3],
            ConvOpts {
                strides: vec![3],
                padding: Padding::Same,
                ..d()
            },
        ),
        case(
            "1d 1x1 kernel, stride 2",
            &[2, 4, 6],
            &[3, 4, 1],
            ConvOpts {
                strides: vec![2],
                ..d()
            },
        ),
        case(
            "2d groups 2, same, strides (2, 1)",
            &[2, 4, 6, 5],
            &[6, 2, 3, 2],
            ConvOpts {
                strides: vec![2, 1],
                padding: Padding::Same,
                feature_group_count: 2,
                ..d()
            },
        ),
        case(
            "2d depthwise same",
            &[1, 3, 5, 5],
            &[3, 1, 3, 3],
            ConvOpts {
                padding: Padding::Same,
                feature_group_count: 3,
                ..d()
            },
        ),
        case(
            "2d depthwise multiplier 2, valid",
            &[2, 2, 4, 5],
            &[4, 1, 2, 2],
            ConvOpts {
                feature_group_count: 2,
                ..d()
            },
        ),
        case(
            "2d both dilations, strides (2, 3), asymmetric pads",
            &[1, 2, 5, 4],
            &[3, 2, 2, 3],
            ConvOpts {
                strides: vec![2, 3],
                padding: ex(&[(0, 3), (2, 1)]),
                lhs_dilation: vec![2, 1],
                rhs_dilation: vec![1, 2],
                ..d()
            },
        ),
        case(
            "2d same with an odd total pad",
            &[1, 1, 6, 6],
            &[1, 1, 2, 2],
            ConvOpts {
                padding: Padding::Same,
                ..d()
            },
        ),
        case(
            "2d same, stride 2, rhs dilation 2",
            &[2, 3, 7, 8],
            &[2, 3, 3, 2],
            ConvOpts {
                strides: vec![2, 2],
                padding: Padding::Same,
                rhs_dilation: vec![2, 2],
                ..d()
            },
        ),
        case(
            "2d kernel as large as the input",
            &[1, 2, 3, 5],
            &[2, 2, 3, 5],
            d(),
        ),
        case(
            "3d same, strides (1, 2, 1)",
            &[1, 2, 4, 5, 3],
            &[2, 2, 2, 3, 2],
            ConvOpts {
                strides: vec![1, 2, 1],
                padding: Padding::Same,
                ..d()
            },
        ),
        case(
            "3d groups 2, explicit pads, rhs dilation",
            &[2, 4, 3, 4, 5],
            &[2, 2, 2, 2, 2],
            ConvOpts {
                padding: ex(&[(1, 0), (0, 1), (1, 1)]),
                rhs_dilation: vec![1, 2, 1],
                feature_group_count: 2,
                ..d()
            },
        ),
    ]
}

/// Deterministic values in [-1, 1).
pub fn values(seed: u64, n: usize) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}
