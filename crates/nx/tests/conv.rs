//! `conv` and `conv_transpose` against naive f64 references (plain loops
//! from the definitions, in `conv_ref/`) over a table of configurations,
//! through every kernel path (views, blocks spanning images, the pool,
//! chunked rows), in every float dtype; and the error messages.

mod conv_ref;

use conv_ref::{cases, conv_ref, conv_ref_opts, conv_transpose_ref, values};
use nx::{ConvOpts, DType, Padding, Tensor};
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape)
}

#[test]
fn conv_matches_the_reference_over_the_table() {
    for (i, c) in cases().iter().enumerate() {
        let xv = values(10 + i as u64, c.x.iter().product());
        let wv = values(100 + i as u64, c.w.iter().product());
        let (want, shape) = conv_ref_opts(&xv, &c.x, &wv, &c.w, &c.opts);
        let y = t(&xv, &c.x).conv(&t(&wv, &c.w), c.opts.clone());
        assert_eq!(y.shape(), &shape[..], "{}: shape", c.name);
        close(&y.to_vec::<f64>(), &want, 1e-12, c.name);
        // f32 on the same values.
        let y32 = t(&xv, &c.x)
            .cast(DType::F32)
            .conv(&t(&wv, &c.w).cast(DType::F32), c.opts.clone());
        assert_eq!(y32.dtype(), DType::F32);
        close(&y32.cast(DType::F64).to_vec::<f64>(), &want, 1e-5, c.name);
    }
}

#[test]
fn same_padding_gives_ceil_of_input_over_stride() {
    for (n, k, s) in [(7, 3, 2), (8, 3, 2), (5, 4, 3), (6, 1, 4), (4, 5, 1)] {
        let x = Tensor::ones(&[1, 1, n], DType::F64);
        let w = Tensor::ones(&[1, 1, k], DType::F64);
        let opts = ConvOpts {
            strides: vec![s],
            padding: Padding::Same,
            ..Default::default()
        };
        let y = x.conv(&w, opts.clone());
        assert_eq!(y.shape(), &[1, 1, n.div_ceil(s)], "n {n} k {k} s {s}");
        // The odd padding goes at the end: with all-ones data, each output
        // counts the in-bounds taps of its window.
        let total = ((n.div_ceil(s) - 1) * s + k).saturating_sub(n);
        let lo = total / 2;
        let want: Vec<f64> = (0..n.div_ceil(s))
            .map(|q| {
                (0..k)
                    .filter(|&j| {
                        let p = (q * s + j) as i64 - lo as i64;
                        p >= 0 && p < n as i64
                    })
                    .count() as f64
            })
            .collect();
        assert_eq!(y.to_vec::<f64>(), want, "n {n} k {k} s {s}");
    }
}

#[test]
fn conv_reads_views_of_its_operands() {
    // A permuted input (N and C swapped), a flipped and sliced kernel.
    let (xs, ws) = ([3, 2, 6, 5], [4, 2, 3, 3]);
    let xv = values(1, 3 * 2 * 6 * 5);
    let wv = values(2, 4 * 2 * 3 * 4);
    let x = t(&xv, &xs).swapaxes(0, 1); // [2, 3, 6, 5], strided
                                        // Flipped (a negative stride) and sliced: its (channel, spatial) axes
                                        // do not merge into one stride, so the kernel copies it.
    let w2 = t(&wv, &[4, 2, 3, 4]).flip(&[2]).narrow(3, 1, 3);
    assert_eq!(w2.shape(), &ws);
    assert!(!w2.is_contiguous());
    let opts = ConvOpts {
        padding: Padding::Same,
        strides: vec![1, 2],
        ..Default::default()
    };
    // The reference on contiguous copies, the kernel's input channels read from x's.
    let x3 = t(&xv, &xs).swapaxes(0, 1).contiguous();
    let xw = x3.narrow(1, 0, 2);
    let (want, shape) = conv_ref_opts(
        &xw.to_vec::<f64>(),
        xw.shape(),
        &w2.contiguous().to_vec::<f64>(),
        &ws,
        &opts,
    );
    let y = x.narrow(1, 0, 2).conv(&w2, opts.clone());
    assert_eq!(y.shape(), &shape[..]);
    close(&y.to_vec::<f64>(), &want, 1e-12, "views");
    let y = x.narrow(1, 0, 2).conv(&w2.contiguous(), opts);
    close(
        &y.to_vec::<f64>(),
        &want,
        1e-12,
        "views (contiguous kernel)",
    );
}

#[test]
fn large_convs_split_across_blocks_threads_and_row_chunks() {
    // Blocks of columns spanning images (6 images of 24x24 in 4 blocks),
    // run on the pool.
    let c = conv_ref::Case {
        name: "pool",
        x: vec![6, 8, 24, 24],
        w: vec![16, 8, 3, 3],
        opts: ConvOpts {
            padding: Padding::Same,
            ..Default::default()
        },
    };
    // Taller than one chunk of the im2col scratch: rows summed chunk by chunk.
    let tall = conv_ref::Case {
        name: "tall",
        x: vec![1, 1030, 1024],
        w: vec![2, 1030, 1],
        opts: ConvOpts::default(),
    };
    // Small outputs per image, many images in one block (a kernel
    // gradient's shape).
    let many = conv_ref::Case {
        name: "many small images",
        x: vec![40, 3, 5, 5],
        w: vec![4, 3, 4, 4],
        opts: ConvOpts::default(),
    };
    // A kernel gradient's convolution: the "kernel" an image, larger than
    // the output (the im2col matrix built by columns, multiplied by faer),
    // its 16K rows in several chunks accumulated into the output.
    let weight_grad = conv_ref::Case {
        name: "kernel larger than the output, row chunks",
        x: vec![4, 16, 34, 34],
        w: vec![8, 16, 32, 32],
        opts: ConvOpts {
            padding: Padding::Explicit(vec![(1, 0), (0, 1)]),
            ..Default::default()
        },
    };
    for c in [c, tall, many, weight_grad] {
        let xv = values(5, c.x.iter().product());
        let wv = values(6, c.w.iter().product());
        let (want, shape) = conv_ref_opts(&xv, &c.x, &wv, &c.w, &c.opts);
        let y = t(&xv, &c.x).conv(&t(&wv, &c.w), c.opts.clone());
        assert_eq!(y.shape(), &shape[..]);
        close(&y.to_vec::<f64>(), &want, 1e-12, c.name);
    }
}

#[test]
fn negative_padding_crops_in_the_primitive() {
    // The transposes of a convolution bind pads below zero (XLA's cropping).
    let xv = values(3, 2 * 2 * 9);
    let wv = values(4, 3 * 2 * 2);
    let prim = nx::Prim::Conv {
        strides: vec![2],
        padding: vec![(-1, -2)],
        lhs_dilation: vec![1],
        rhs_dilation: vec![2],
        feature_group_count: 1,
    };
    let y = nx::bind(prim, &[&t(&xv, &[2, 2, 9]), &t(&wv, &[3, 2, 2])]);
    let (want, shape) = conv_ref(
        &xv,
        &[2, 2, 9],
        &wv,
        &[3, 2, 2],
        &[2],
        &[(-1, -2)],
        &[1],
        &[2],
        1,
    );
    assert_eq!(y.shape(), &shape[..]);
    close(&y.to_vec::<f64>(), &want, 1e-12, "negative pads");
}

#[test]
fn half_precision_convs_round_an_f32_result() {
    let c = &cases()[5];
    let xv = values(7, c.x.iter().product());
    let wv = values(8, c.w.iter().product());
    let (want, _) = conv_ref_opts(&xv, &c.x, &wv, &c.w, &c.opts);
    for (dt, tol) in [(DType::F16, 4e-3), (DType::BF16, 3e-2)] {
        let x = t(&xv, &c.x).cast(dt);
        let w = t(&wv, &c.w).cast(dt);
        // The reference on the rounded inputs.
        let (want_r, _) = conv_ref_opts(
            &x.cast(DType::F64).to_vec::<f64>(),
            &c.x,
            &w.cast(DType::F64).to_vec::<f64>(),
            &c.w,
            &c.opts,
        );
        let y = x.conv(&w, c.opts.clone());
        assert_eq!(y.dtype(), dt);
        close(&y.cast(DType::F64).to_vec::<f64>(), &want_r, tol, "half");
        close(
            &y.cast(DType::F64).to_vec::<f64>(),
            &want,
            10.0 * tol,
            "half",
        );
    }
}

fn transpose_cases() -> Vec<(Vec<usize>, Vec<usize>, ConvOpts)> {
    let o = |s: Vec<usize>, p: Padding, rd: Vec<usize>| ConvOpts {
        strides: s,
        padding: p,
        rhs_dilation: rd,
        ..Default::default()
    };
    vec![
        (
            vec![2, 3, 4],
            vec![3, 2, 3],
            o(vec![2], Padding::Valid, vec![]),
        ),
        (
            vec![2, 3, 4],
            vec![3, 2, 3],
            o(vec![2], Padding::Same, vec![]),
        ),
        (
            vec![1, 2, 5],
            vec![2, 3, 2],
            o(vec![3], Padding::Same, vec![]),
        ),
        (
            vec![1, 2, 5],
            vec![2, 3, 2],
            o(vec![3], Padding::Valid, vec![]),
        ),
        (
            vec![1, 2, 4],
            vec![2, 1, 3],
            o(vec![1], Padding::Same, vec![2]),
        ),
        (
            vec![1, 2, 3],
            vec![2, 2, 3],
            o(vec![2], Padding::Explicit(vec![(1, 2)]), vec![]),
        ),
        (
            vec![2, 2, 3, 4],
            vec![2, 3, 3, 3],
            o(vec![2, 2], Padding::Same, vec![]),
        ),
        (
            vec![1, 3, 3, 2],
            vec![3, 2, 3, 2],
            o(vec![2, 1], Padding::Valid, vec![1, 2]),
        ),
        (
            vec![1, 1, 2, 3, 2],
            vec![1, 2, 2, 2, 3],
            o(vec![2, 1, 2], Padding::Same, vec![]),
        ),
    ]
}

#[test]
fn conv_transpose_matches_the_scatter_definition() {
    for (i, (xs, ws, opts)) in transpose_cases().into_iter().enumerate() {
        let xv = values(20 + i as u64, xs.iter().product());
        let wv = values(40 + i as u64, ws.iter().product());
        let (want, shape) = conv_transpose_ref(&xv, &xs, &wv, &ws, &opts);
        let y = t(&xv, &xs).conv_transpose(&t(&wv, &ws), opts.clone());
        assert_eq!(y.shape(), &shape[..], "case {i}: {opts:?}");
        close(&y.to_vec::<f64>(), &want, 1e-12, &format!("case {i}"));
    }
}

#[test]
fn conv_transpose_output_sizes_are_api_mds() {
    // VALID: (in - 1) * s + k (kernel at least the stride); SAME: in * s.
    for (n, k, s) in [(4, 3, 2), (5, 2, 2), (3, 4, 3), (6, 3, 1)] {
        let x = Tensor::ones(&[1, 2, n], DType::F32);
        let w = Tensor::ones(&[2, 3, k], DType::F32);
        let mk = |p| ConvOpts {
            strides: vec![s],
            padding: p,
            ..Default::default()
        };
        let v = x.conv_transpose(&w, mk(Padding::Valid));
        assert_eq!(v.shape(), &[1, 3, (n - 1) * s + k]);
        let same = x.conv_transpose(&w, mk(Padding::Same));
        assert_eq!(same.shape(), &[1, 3, n * s]);
    }
}

#[test]
fn conv_transpose_is_conv_with_a_flipped_transposed_kernel() {
    // JAX's definition: conv with lhs_dilation = strides and the kernel's
    // spatial axes flipped and channel axes swapped, with its padding.
    let (xs, ws) = ([2, 3, 5, 4], [3, 2, 3, 2]);
    let xv = values(61, 2 * 3 * 5 * 4);
    let wv = values(62, 3 * 2 * 3 * 2);
    let mut wt = vec![0.0; wv.len()]; // [2, 3, 3, 2], flipped spatially
    for o in 0..3 {
        for i in 0..2 {
            for a in 0..3 {
                for b in 0..2 {
                    wt[((i * 3 + o) * 3 + (2 - a)) * 2 + (1 - b)] =
                        wv[((o * 2 + i) * 3 + a) * 2 + b];
                }
            }
        }
    }
    // Same with strides (2, 2), k = (3, 2): pads (2, 1) and (1, 1).
    let (want, shape) = conv_ref(
        &xv,
        &xs,
        &wt,
        &[2, 3, 3, 2],
        &[1, 1],
        &[(2, 1), (1, 1)],
        &[2, 2],
        &[1, 1],
        1,
    );
    let y = t(&xv, &xs).conv_transpose(
        &t(&wv, &ws),
        ConvOpts {
            strides: vec![2, 2],
            padding: Padding::Same,
            ..Default::default()
        },
    );
    assert_eq!(y.shape(), &shape[..]);
    assert_eq!(y.shape(), &[2, 2, 10, 8]);
    close(&y.to_vec::<f64>(), &want, 1e-12, "flipped kernel");
}

#[test]
fn errors_name_the_op_what_it_expected_and_what_it_got() {
    let z = |s: &[usize]| Tensor::zeros(s, DType::F32);
    let d = ConvOpts::default;
    let cases: Vec<(Box<dyn FnOnce()>, &[&str])> = vec![
        (
            Box::new(move || drop(z(&[2, 3]).conv(&z(&[2, 3]), d()))),
            &["conv:", "rank", "3, 4 or 5", "[2, 3]"],
        ),
        (
            Box::new(move || drop(z(&[1, 2, 5, 5]).conv(&z(&[1, 2, 3]), d()))),
            &["conv:", "one rank", "[1, 2, 5, 5]", "[1, 2, 3]"],
        ),
        (
            Box::new(move || drop(z(&[1, 1, 1, 1, 1, 1]).conv(&z(&[1, 1, 1, 1, 1, 1]), d()))),
            &["conv:", "3, 4 or 5"],
        ),
        (
            Box::new(move || drop(z(&[1, 3, 5]).conv(&z(&[2, 2, 3]), d()))),
            &["conv:", "input channels", "3 / 1 = 3", "[2, 2, 3]"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 4, 5]).conv(
                    &z(&[3, 2, 3]),
                    ConvOpts {
                        feature_group_count: 2,
                        ..d()
                    },
                ))
            }),
            &[
                "conv:",
                "feature_group_count 2 must divide",
                "output channels (3)",
            ],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 3, 5]).conv(
                    &z(&[3, 1, 3]),
                    ConvOpts {
                        feature_group_count: 2,
                        ..d()
                    },
                ))
            }),
            &[
                "conv:",
                "feature_group_count 2 must divide",
                "input channels (3)",
            ],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 1, 5, 5]).conv(
                    &z(&[1, 1, 3, 3]),
                    ConvOpts {
                        strides: vec![1],
                        ..d()
                    },
                ))
            }),
            &[
                "conv:",
                "strides",
                "one entry per spatial axis (2)",
                "got 1",
            ],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 1, 5, 5]).conv(
                    &z(&[1, 1, 3, 3]),
                    ConvOpts {
                        rhs_dilation: vec![1, 0],
                        ..d()
                    },
                ))
            }),
            &["conv:", "rhs_dilation must be positive", "[1, 0]"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 1, 5, 5]).conv(
                    &z(&[1, 1, 3, 3]),
                    ConvOpts {
                        padding: Padding::Explicit(vec![(1, 1)]),
                        ..d()
                    },
                ))
            }),
            &[
                "conv:",
                "Padding::Explicit",
                "per spatial axis (2)",
                "got 1",
            ],
        ),
        (
            Box::new(move || drop(z(&[1, 1, 4, 5]).conv(&z(&[1, 1, 5, 3]), d()))),
            &[
                "conv:",
                "kernel (size 5, dilated 5)",
                "larger than the padded input",
                "axis 0",
            ],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 1, 4]).conv(
                    &z(&[1, 1, 3]),
                    ConvOpts {
                        rhs_dilation: vec![2],
                        padding: Padding::Explicit(vec![(0, 0)]),
                        ..d()
                    },
                ))
            }),
            &["conv:", "dilated 5", "padded 4"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 1, 4]).conv(
                    &z(&[1, 1, 3]),
                    ConvOpts {
                        lhs_dilation: vec![2],
                        padding: Padding::Same,
                        ..d()
                    },
                ))
            }),
            &["conv:", "Padding::Same", "lhs_dilation [2]"],
        ),
        (
            Box::new(move || {
                drop(
                    Tensor::zeros(&[1, 1, 4], DType::I32)
                        .conv(&Tensor::zeros(&[1, 1, 3], DType::I32), d()),
                )
            }),
            &["conv:", "float", "i32"],
        ),
        (
            Box::new(move || drop(z(&[1, 1, 4]).conv(&Tensor::zeros(&[1, 1, 3], DType::F64), d()))),
            &["conv:", "dtype mismatch", "f32", "f64"],
        ),
        (
            Box::new(move || drop(z(&[1, 3, 4]).conv_transpose(&z(&[2, 3, 3]), d()))),
            &[
                "conv_transpose:",
                "kernel's output channels",
                "[1, 3, 4]",
                "[2, 3, 3]",
            ],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 2, 4]).conv_transpose(
                    &z(&[2, 3, 3]),
                    ConvOpts {
                        feature_group_count: 2,
                        ..d()
                    },
                ))
            }),
            &["conv_transpose:", "feature_group_count must be 1", "got 2"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 2, 4]).conv_transpose(
                    &z(&[2, 3, 3]),
                    ConvOpts {
                        lhs_dilation: vec![2],
                        ..d()
                    },
                ))
            }),
            &["conv_transpose:", "lhs_dilation must be empty", "[2]"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 2, 4]).conv_transpose(
                    &z(&[2, 3, 3]),
                    ConvOpts {
                        strides: vec![2, 2],
                        ..d()
                    },
                ))
            }),
            &["conv_transpose:", "strides", "spatial axis (1)", "got 2"],
        ),
        (
            Box::new(move || {
                drop(z(&[1, 2, 2]).conv_transpose(
                    &z(&[2, 3, 3]),
                    ConvOpts {
                        padding: Padding::Explicit(vec![(0, 0)]),
                        ..d()
                    },
                ))
            }),
            &["conv_transpose:", "larger than the padded input"],
        ),
    ];
    for (i, (f, parts)) in cases.into_iter().enumerate() {
        let msg = panic_message(f);
        for p in parts {
            assert!(msg.contains(p), "case {i}: {p:?} not in {msg:?}");
        }
    }
}
