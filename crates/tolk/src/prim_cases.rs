//! Test cases for anything keyed or encoded by a primitive (tests only):
//! one instance of every `Prim` and, for each, the same primitive with
//! exactly one field changed. The cache key's test
//! (`cache.rs`) checks that no two of them share a key; the export
//! codec's (`export/graph_codec.rs`) that each reads back equal.

use nx::{DType, F64Bits, Prim};

/// One instance of every primitive, with values that its one-field
/// changes below can move away from.
pub(crate) fn every_prim() -> Vec<Prim> {
    use nx::{ArgOp, BinaryOp, CmpOp, CumOp, FftKind, ReduceOp, UnaryOp};
    let v = |x: &[usize]| x.to_vec();
    vec![
        Prim::Full {
            shape: v(&[2, 3]),
            dtype: DType::F32,
            value: F64Bits(1.5),
        },
        Prim::Iota {
            shape: v(&[2, 3]),
            axis: 1,
            dtype: DType::I32,
        },
        Prim::Unary(UnaryOp::Exp),
        Prim::Binary(BinaryOp::Add),
        Prim::Compare(CmpOp::Lt),
        Prim::Where,
        Prim::Cast(DType::F16),
        Prim::Reduce {
            op: ReduceOp::Sum,
            axes: v(&[0, 2]),
        },
        Prim::ArgReduce {
            op: ArgOp::Argmax,
            axis: 1,
        },
        Prim::Cumulative {
            op: CumOp::Sum,
            axis: 1,
        },
        Prim::Reshape { shape: v(&[6]) },
        Prim::Broadcast { shape: v(&[4, 6]) },
        Prim::Permute { perm: v(&[1, 0]) },
        Prim::Slice {
            start: v(&[0, 1]),
            end: v(&[2, 3]),
            step: v(&[1, 2]),
        },
        Prim::Flip { axes: v(&[1]) },
        Prim::Pad {
            lo: v(&[1, 0]),
            hi: v(&[0, 2]),
            value: F64Bits(0.0),
        },
        Prim::Concat { axis: 1 },
        Prim::Copy,
        Prim::StopGradient,
        Prim::Gather { axis: 1 },
        Prim::ScatterAdd { axis: 1 },
        Prim::DotGeneral {
            lhs_batch: v(&[0]),
            rhs_batch: v(&[0]),
            lhs_contract: v(&[2]),
            rhs_contract: v(&[1]),
        },
        Prim::Assign,
        Prim::Threefry2x32,
        Prim::Conv {
            strides: v(&[1, 1]),
            padding: vec![(1, 1), (0, -1)],
            lhs_dilation: v(&[1, 1]),
            rhs_dilation: v(&[1, 1]),
            feature_group_count: 1,
        },
        Prim::ReduceWindow {
            op: ReduceOp::Max,
            window: v(&[1, 1, 3, 3]),
            strides: v(&[1, 1, 2, 2]),
            padding: vec![(0, 0), (0, 0), (1, 1), (1, 1)],
        },
        Prim::WindowArgmax {
            window: v(&[1, 1, 3, 3]),
            strides: v(&[1, 1, 2, 2]),
            padding: vec![(0, 0), (0, 0), (1, 1), (1, 1)],
            flat_from: 2,
        },
        Prim::Argsort {
            axis: 1,
            descending: false,
        },
        Prim::TopK { k: 3 },
        Prim::Cholesky,
        Prim::TriangularSolve {
            lower: true,
            left: true,
            transpose: false,
            unit_diagonal: false,
        },
        Prim::Solve,
        Prim::Slogdet,
        Prim::Qr { complete: false },
        Prim::Eigh,
        Prim::Svd {
            full_matrices: false,
        },
        Prim::Fft {
            kind: FftKind::Fft,
            lengths: v(&[8]),
        },
    ]
}

/// `p` with exactly one field changed, for each field (several
/// changes for some: a fill value's sign of zero and NaN payloads).
/// Every field is named (no `..`), so a new field or variant fails to
/// compile here until it has a change.
pub(crate) fn one_field_changes(p: &Prim) -> Vec<Prim> {
    use nx::{ArgOp, BinaryOp, CmpOp, CumOp, FftKind, ReduceOp, UnaryOp};
    let more = |x: &Vec<usize>| [x.clone(), vec![9]].concat();
    let bump = |x: &Vec<usize>| {
        let mut y = x.clone();
        y[0] += 1;
        y
    };
    let bump_pairs = |x: &Vec<(usize, usize)>| {
        let mut y = x.clone();
        y[0].1 += 1;
        y
    };
    let values = |x: F64Bits| {
        [
            2.5,
            -x.get(),
            f64::NAN,
            -f64::NAN,
            f64::from_bits(f64::NAN.to_bits() | 1),
            f64::INFINITY,
        ]
        .into_iter()
        .map(F64Bits)
        .filter(move |y| *y != x)
    };
    let (c, s) = (p.clone(), |q: Prim| vec![q]);
    match c {
        Prim::Full {
            shape,
            dtype,
            value,
        } => {
            let mut out = vec![
                Prim::Full {
                    shape: more(&shape),
                    dtype,
                    value,
                },
                Prim::Full {
                    shape: shape.clone(),
                    dtype: DType::F64,
                    value,
                },
            ];
            out.extend(values(value).map(|value| Prim::Full {
                shape: shape.clone(),
                dtype,
                value,
            }));
            out
        }
        Prim::Iota { shape, axis, dtype } => vec![
            Prim::Iota {
                shape: more(&shape),
                axis,
                dtype,
            },
            Prim::Iota {
                shape: shape.clone(),
                axis: axis + 1,
                dtype,
            },
            Prim::Iota {
                shape,
                axis,
                dtype: DType::I64,
            },
        ],
        Prim::Unary(_) => s(Prim::Unary(UnaryOp::Log)),
        Prim::Binary(_) => s(Prim::Binary(BinaryOp::Mul)),
        Prim::Compare(_) => s(Prim::Compare(CmpOp::Le)),
        Prim::Where => vec![],
        Prim::Cast(_) => s(Prim::Cast(DType::BF16)),
        Prim::Reduce { op, axes } => vec![
            Prim::Reduce {
                op: ReduceOp::Max,
                axes: axes.clone(),
            },
            Prim::Reduce {
                op,
                axes: more(&axes),
            },
        ],
        Prim::ArgReduce { op, axis } => vec![
            Prim::ArgReduce {
                op: ArgOp::Argmin,
                axis,
            },
            Prim::ArgReduce { op, axis: axis + 1 },
        ],
        Prim::Cumulative { op, axis } => vec![
            Prim::Cumulative {
                op: CumOp::Prod,
                axis,
            },
            Prim::Cumulative { op, axis: axis + 1 },
        ],
        Prim::Reshape { shape } => s(Prim::Reshape {
            shape: more(&shape),
        }),
        Prim::Broadcast { shape } => s(Prim::Broadcast {
            shape: more(&shape),
        }),
        Prim::Permute { perm } => s(Prim::Permute { perm: bump(&perm) }),
        Prim::Slice { start, end, step } => vec![
            Prim::Slice {
                start: bump(&start),
                end: end.clone(),
                step: step.clone(),
            },
            Prim::Slice {
                start: start.clone(),
                end: bump(&end),
                step: step.clone(),
            },
            Prim::Slice {
                start,
                end,
                step: bump(&step),
            },
        ],
        Prim::Flip { axes } => s(Prim::Flip { axes: more(&axes) }),
        Prim::Pad { lo, hi, value } => {
            let mut out = vec![
                Prim::Pad {
                    lo: bump(&lo),
                    hi: hi.clone(),
                    value,
                },
                Prim::Pad {
                    lo: lo.clone(),
                    hi: bump(&hi),
                    value,
                },
            ];
            out.extend(values(value).map(|value| Prim::Pad {
                lo: lo.clone(),
                hi: hi.clone(),
                value,
            }));
            out
        }
        Prim::Concat { axis } => s(Prim::Concat { axis: axis + 1 }),
        Prim::Copy => vec![],
        Prim::StopGradient => vec![],
        Prim::Gather { axis } => s(Prim::Gather { axis: axis + 1 }),
        Prim::ScatterAdd { axis } => s(Prim::ScatterAdd { axis: axis + 1 }),
        Prim::DotGeneral {
            lhs_batch,
            rhs_batch,
            lhs_contract,
            rhs_contract,
        } => {
            let with = |i: usize| {
                let mut f = [
                    lhs_batch.clone(),
                    rhs_batch.clone(),
                    lhs_contract.clone(),
                    rhs_contract.clone(),
                ];
                f[i] = bump(&f[i]);
                let [lhs_batch, rhs_batch, lhs_contract, rhs_contract] = f;
                Prim::DotGeneral {
                    lhs_batch,
                    rhs_batch,
                    lhs_contract,
                    rhs_contract,
                }
            };
            (0..4).map(with).collect()
        }
        Prim::Assign => vec![],
        Prim::Threefry2x32 => vec![],
        Prim::Conv {
            strides,
            padding,
            lhs_dilation,
            rhs_dilation,
            feature_group_count,
        } => {
            let conv =
                |strides, padding, lhs_dilation, rhs_dilation, feature_group_count| Prim::Conv {
                    strides,
                    padding,
                    lhs_dilation,
                    rhs_dilation,
                    feature_group_count,
                };
            let mut crop = padding.clone();
            crop[0].0 -= 2;
            let (s_, p_, l, r) = (&strides, &padding, &lhs_dilation, &rhs_dilation);
            let g = feature_group_count;
            vec![
                conv(bump(s_), p_.clone(), l.clone(), r.clone(), g),
                conv(s_.clone(), crop, l.clone(), r.clone(), g),
                conv(s_.clone(), p_.clone(), bump(l), r.clone(), g),
                conv(s_.clone(), p_.clone(), l.clone(), bump(r), g),
                conv(s_.clone(), p_.clone(), l.clone(), r.clone(), g + 1),
            ]
        }
        Prim::ReduceWindow {
            op,
            window,
            strides,
            padding,
        } => vec![
            Prim::ReduceWindow {
                op: ReduceOp::Sum,
                window: window.clone(),
                strides: strides.clone(),
                padding: padding.clone(),
            },
            Prim::ReduceWindow {
                op,
                window: bump(&window),
                strides: strides.clone(),
                padding: padding.clone(),
            },
            Prim::ReduceWindow {
                op,
                window: window.clone(),
                strides: bump(&strides),
                padding: padding.clone(),
            },
            Prim::ReduceWindow {
                op,
                window,
                strides,
                padding: bump_pairs(&padding),
            },
        ],
        Prim::WindowArgmax {
            window,
            strides,
            padding,
            flat_from,
        } => vec![
            Prim::WindowArgmax {
                window: bump(&window),
                strides: strides.clone(),
                padding: padding.clone(),
                flat_from,
            },
            Prim::WindowArgmax {
                window: window.clone(),
                strides: bump(&strides),
                padding: padding.clone(),
                flat_from,
            },
            Prim::WindowArgmax {
                window: window.clone(),
                strides: strides.clone(),
                padding: bump_pairs(&padding),
                flat_from,
            },
            Prim::WindowArgmax {
                window,
                strides,
                padding,
                flat_from: flat_from + 1,
            },
        ],
        Prim::Argsort { axis, descending } => vec![
            Prim::Argsort {
                axis: axis + 1,
                descending,
            },
            Prim::Argsort {
                axis,
                descending: !descending,
            },
        ],
        Prim::TopK { k } => s(Prim::TopK { k: k + 1 }),
        Prim::Cholesky => vec![],
        Prim::TriangularSolve {
            lower,
            left,
            transpose,
            unit_diagonal,
        } => {
            let flags = [lower, left, transpose, unit_diagonal];
            (0..4)
                .map(|i| {
                    let mut f = flags;
                    f[i] = !f[i];
                    Prim::TriangularSolve {
                        lower: f[0],
                        left: f[1],
                        transpose: f[2],
                        unit_diagonal: f[3],
                    }
                })
                .collect()
        }
        Prim::Solve => vec![],
        Prim::Slogdet => vec![],
        Prim::Qr { complete } => s(Prim::Qr {
            complete: !complete,
        }),
        Prim::Eigh => vec![],
        Prim::Svd { full_matrices } => s(Prim::Svd {
            full_matrices: !full_matrices,
        }),
        Prim::Fft { kind, lengths } => vec![
            Prim::Fft {
                kind: FftKind::Ifft,
                lengths: lengths.clone(),
            },
            Prim::Fft {
                kind,
                lengths: bump(&lengths),
            },
        ],
    }
}
