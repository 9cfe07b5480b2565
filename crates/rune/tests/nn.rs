//! `rune::nn`: each layer and loss against a closed form or a plain loop
//! written here element by element, then under `grad` (finite differences
//! with `check_grads`, in f64), `vmap` (an ensemble of layers against a
//! loop over its members) and `jit` (against eager); wrong shapes and ids
//! panic naming the layer.

use nx::{ConvOpts, Padding};
use rune::nn::{self, BatchNorm, BatchStats, Conv, Dropout, Embedding, LayerNorm, Linear};
use rune::nn::{MultiHeadAttention, RmsNorm};
use rune::prelude::*;
use rune::rng;

// ---------------------------------------------------------------- helpers

fn normal(seed: u64, shape: &[usize]) -> Tensor {
    rng::normal(&rng::key(seed), shape, DType::F32)
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).to_vec::<f64>()
}

/// Panics unless `got` and `want` agree to `tol`, relative to the larger of
/// 1 and the value's magnitude.
fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * w.abs().max(1.0),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// The same tree with every leaf in f64 (finite differences need it).
fn in_f64<P: Ptree>(p: &P) -> P {
    p.map_leaves(&mut |t| {
        if t.dtype() == DType::F32 {
            t.cast(DType::F64)
        } else {
            t.clone()
        }
    })
}

/// `sum(out · weights)` with fixed pseudo-random weights: an objective
/// whose gradient reaches every output element (a plain sum would be
/// constant for a normalization's output).
fn weighted_sum(out: &Tensor) -> Tensor {
    let weights = rng::normal(&rng::key(999), out.shape(), out.dtype());
    (out * &weights).sum_all()
}

/// One tree whose leaves are the members' leaves stacked on a new axis 0.
fn stack_members<P: Ptree>(members: &[P]) -> P {
    let leaves: Vec<Vec<Tensor>> = members.iter().map(|m| m.leaves()).collect();
    let stacked: Vec<Tensor> = (0..leaves[0].len())
        .map(|i| {
            let column: Vec<Tensor> = leaves.iter().map(|l| l[i].clone()).collect();
            Tensor::stack(&column, 0)
        })
        .collect();
    members[0].with_leaves(&stacked)
}

/// `f` under `vmap` over the stacked `inputs` against `f` on each member,
/// and under `jit` against eager on the first member.
fn check_vmap_and_jit<I: Ptree + Clone, O: Ptree>(inputs: &[I], f: impl Fn(&I) -> O, what: &str) {
    let batched: O = vmap(&f, &stack_members(inputs));
    for (m, input) in inputs.iter().enumerate() {
        for (got, want) in batched.leaves().iter().zip(f(input).leaves()) {
            assert_close(
                &f64s(&got.get(m)),
                &f64s(&want),
                1e-5,
                &format!("{what} vmap member {m}"),
            );
        }
    }
    let compiled: O = jit(&f).call(&inputs[0]);
    for (got, want) in compiled.leaves().iter().zip(f(&inputs[0]).leaves()) {
        assert_eq!(got.shape(), want.shape(), "{what} jit shape");
        assert_close(&f64s(got), &f64s(&want), 1e-5, &format!("{what} jit"));
    }
}

/// `check_grads` of `weighted_sum(f(p))` at `p` in f64.
fn check_layer_grads<P: Ptree>(p: &P, f: impl Fn(&P) -> Tensor, what: &str) {
    let p = in_f64(p);
    if let Err(e) = rune::check_grads(|p: &P| weighted_sum(&f(p)), &p) {
        panic!("{what}: gradient check failed: {e}");
    }
}

// ---------------------------------------------------------------- Linear

#[test]
fn linear_is_x_times_w_plus_b() {
    let mut lin = Linear::new(&rng::key(0), 3, 2);
    lin.b = Tensor::from_slice(&[0.5f32, -1.0], &[2]);
    let x = normal(1, &[4, 3]);
    let (xv, wv, bv) = (f64s(&x), f64s(&lin.w), f64s(&lin.b));
    let mut want = vec![0.0; 8];
    for i in 0..4 {
        for j in 0..2 {
            want[i * 2 + j] = bv[j] + (0..3).map(|k| xv[i * 3 + k] * wv[k * 2 + j]).sum::<f64>();
        }
    }
    let y = lin.forward(&x);
    assert_eq!(y.shape(), &[4, 2]);
    assert_close(&f64s(&y), &want, 1e-6, "Linear");
    // A single example (no batch axis) and extra leading axes.
    assert_close(
        &f64s(&lin.forward(&x.get(2))),
        &want[4..6],
        1e-6,
        "Linear [d_in]",
    );
    assert_eq!(lin.forward(&normal(2, &[2, 5, 3])).shape(), &[2, 5, 2]);
}

#[test]
fn linear_starts_lecun_normal_and_zero_bias() {
    let lin = Linear::new(&rng::key(3), 256, 128);
    assert_eq!(lin.leaf_paths(), ["w", "b"]);
    assert_eq!((lin.w.dtype(), lin.b.dtype()), (DType::F32, DType::F32));
    assert!(f64s(&lin.b).iter().all(|&v| v == 0.0));
    let w = f64s(&lin.w);
    let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
    assert!(
        (var * 256.0 - 1.0).abs() < 0.05,
        "variance {var} is not 1/fan_in"
    );
    // Truncated at two standard deviations of the untruncated normal.
    let bound = 2.0 / 256f64.sqrt() / 0.879_625_661_034_239_8;
    assert!(w.iter().all(|v| v.abs() <= bound + 1e-6));
    // A pure function of the key.
    assert_eq!(
        Linear::new(&rng::key(3), 256, 128).w.to_vec::<f32>(),
        lin.w.to_vec::<f32>()
    );
}

#[test]
#[should_panic(expected = "Linear: expected an input of shape [.., 3]")]
fn linear_panics_on_a_wrong_last_axis() {
    Linear::new(&rng::key(0), 3, 2).forward(&normal(1, &[4, 5]));
}

#[test]
fn linear_under_grad_vmap_jit() {
    let lin = Linear::new(&rng::key(0), 3, 2);
    check_layer_grads(
        &(lin.clone(), normal(1, &[4, 3])),
        |(l, x)| l.forward(x),
        "Linear",
    );
    let members: Vec<(Linear, Tensor)> = (0..3)
        .map(|m| {
            let mut l = Linear::new(&rng::key(10 + m), 3, 2);
            l.b = normal(20 + m, &[2]);
            (l, normal(30 + m, &[4, 3]))
        })
        .collect();
    check_vmap_and_jit(&members, |(l, x)| l.forward(x), "Linear");
}

// ---------------------------------------------------------------- Embedding

#[test]
fn embedding_picks_rows_of_its_table() {
    let emb = Embedding::new(&rng::key(0), 10, 4);
    assert_eq!(emb.table.shape(), &[10, 4]);
    let ids = Tensor::from_slice(&[3i32, 0, 9, 3, 5, 1], &[2, 3]);
    let y = emb.forward(&ids);
    assert_eq!(y.shape(), &[2, 3, 4]);
    let table = f64s(&emb.table);
    let want: Vec<f64> = [3, 0, 9, 3, 5, 1]
        .iter()
        .flat_map(|&i| table[i * 4..i * 4 + 4].to_vec())
        .collect();
    assert_eq!(f64s(&y), want);
    let ids64 = Tensor::from_slice(&[3i64, 0, 9, 3, 5, 1], &[2, 3]);
    assert_eq!(f64s(&emb.forward(&ids64)), want);
    // Standard normal entries.
    let big = f64s(&Embedding::new(&rng::key(1), 1000, 64).table);
    let var = big.iter().map(|v| v * v).sum::<f64>() / big.len() as f64;
    assert!((var - 1.0).abs() < 0.02, "variance {var}");
}

#[test]
#[should_panic(expected = "Embedding: id 10 out of range 0..10")]
fn embedding_panics_on_an_id_past_the_table() {
    Embedding::new(&rng::key(0), 10, 4).forward(&Tensor::from_slice(&[1i32, 10], &[2]));
}

#[test]
#[should_panic(expected = "Embedding: id -1 out of range")]
fn embedding_panics_on_a_negative_id() {
    Embedding::new(&rng::key(0), 10, 4).forward(&Tensor::from_slice(&[-1i64], &[1]));
}

#[test]
#[should_panic(expected = "Embedding: id must be I32 or I64")]
fn embedding_panics_on_float_ids() {
    Embedding::new(&rng::key(0), 10, 4).forward(&Tensor::from_slice(&[1.0f32], &[1]));
}

#[test]
fn embedding_under_grad_vmap_jit() {
    let ids = Tensor::from_slice(&[3i32, 0, 3, 7], &[4]);
    let emb = Embedding::new(&rng::key(0), 8, 3);
    check_layer_grads(&emb, |e| e.forward(&ids), "Embedding");
    // The gradient of a lookup adds up the repeated rows' cotangents.
    let g = grad(|e: &Embedding| e.forward(&ids).sum_all(), &emb);
    let rows: Vec<f32> = (0..8).map(|r| g.table.get(r).to_vec::<f32>()[0]).collect();
    assert_eq!(rows, vec![1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 1.0]);
    let members: Vec<(Embedding, Tensor)> = (0..3)
        .map(|m| {
            let ids = Tensor::from_vec(vec![m as i32, 7 - m as i32, 2], &[3]);
            (Embedding::new(&rng::key(40 + m), 8, 3), ids)
        })
        .collect();
    check_vmap_and_jit(&members, |(e, ids)| e.forward(ids), "Embedding");
}

// ---------------------------------------------------------------- Conv

/// A direct convolution by loops: `x [N, C, s..]`, `w [O, C/groups, k..]`,
/// low paddings `pad` (positions before the input read zero), output
/// spatial sizes `out`.
fn conv_loop(
    x: &Tensor,
    w: &Tensor,
    b: &Tensor,
    strides: &[usize],
    pad: &[usize],
    out: &[usize],
    groups: usize,
) -> Vec<f64> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let (xv, wv, bv) = (f64s(x), f64s(w), f64s(b));
    let (n, c, o, cg) = (xs[0], xs[1], ws[0], ws[1]);
    let (insp, ksp) = (&xs[2..], &ws[2..]);
    let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
        let mut idx = vec![0; dims.len()];
        for d in (0..dims.len()).rev() {
            idx[d] = i % dims[d];
            i /= dims[d];
        }
        idx
    };
    let ravel =
        |idx: &[usize], dims: &[usize]| idx.iter().zip(dims).fold(0, |acc, (i, d)| acc * d + i);
    let (out_count, k_count, in_count) = (
        out.iter().product::<usize>(),
        ksp.iter().product::<usize>(),
        insp.iter().product::<usize>(),
    );
    let mut y = Vec::new();
    for ni in 0..n {
        for (oi, &bias) in bv.iter().enumerate() {
            let group = oi / (o / groups);
            for p in 0..out_count {
                let pos = unravel(p, out);
                let mut acc = bias;
                for ci in 0..cg {
                    let channel = group * cg + ci;
                    for kp in 0..k_count {
                        let kpos = unravel(kp, ksp);
                        let ipos: Vec<isize> = (0..pos.len())
                            .map(|d| (pos[d] * strides[d] + kpos[d]) as isize - pad[d] as isize)
                            .collect();
                        if ipos
                            .iter()
                            .zip(insp)
                            .any(|(&i, &s)| i < 0 || i >= s as isize)
                        {
                            continue;
                        }
                        let ipos: Vec<usize> = ipos.iter().map(|&i| i as usize).collect();
                        let xi = (ni * c + channel) * in_count + ravel(&ipos, insp);
                        let wi = (oi * cg + ci) * k_count + ravel(&kpos, ksp);
                        acc += xv[xi] * wv[wi];
                    }
                }
                y.push(acc);
            }
        }
    }
    assert_eq!(c, cg * groups);
    y
}

#[test]
fn conv_1d_valid_against_a_direct_loop() {
    let mut conv = Conv::new(&rng::key(0), 3, 4, &[3], ConvOpts::default());
    conv.b = normal(1, &[4]);
    let x = normal(2, &[2, 3, 9]);
    let y = conv.forward(&x);
    assert_eq!(y.shape(), &[2, 4, 7]);
    assert_close(
        &f64s(&y),
        &conv_loop(&x, &conv.w, &conv.b, &[1], &[0], &[7], 1),
        1e-5,
        "Conv 1-D",
    );
}

#[test]
fn conv_2d_same_strided_grouped_against_a_direct_loop() {
    let opts = ConvOpts {
        strides: vec![2, 2],
        padding: Padding::Same,
        feature_group_count: 2,
        ..Default::default()
    };
    let mut conv = Conv::new(&rng::key(0), 4, 6, &[3, 3], opts);
    assert_eq!(conv.w.shape(), &[6, 2, 3, 3]);
    conv.b = normal(1, &[6]);
    let x = normal(2, &[2, 4, 8, 7]);
    let y = conv.forward(&x);
    // SAME: out = ceil(in / stride); total padding (out-1)·s + k − in, the
    // odd one at the end: 8 → 4 (pad 0, 1), 7 → 4 (pad 1, 1).
    assert_eq!(y.shape(), &[2, 6, 4, 4]);
    let want = conv_loop(&x, &conv.w, &conv.b, &[2, 2], &[0, 1], &[4, 4], 2);
    assert_close(&f64s(&y), &want, 1e-5, "Conv 2-D");
}

#[test]
fn conv_3d_valid_against_a_direct_loop() {
    let mut conv = Conv::new(&rng::key(0), 2, 3, &[2, 2, 2], ConvOpts::default());
    conv.b = normal(1, &[3]);
    let x = normal(2, &[1, 2, 4, 3, 5]);
    let y = conv.forward(&x);
    assert_eq!(y.shape(), &[1, 3, 3, 2, 4]);
    let want = conv_loop(&x, &conv.w, &conv.b, &[1, 1, 1], &[0, 0, 0], &[3, 2, 4], 1);
    assert_close(&f64s(&y), &want, 1e-5, "Conv 3-D");
}

#[test]
fn conv_starts_lecun_normal_over_its_fan_in() {
    let conv = Conv::new(&rng::key(5), 16, 64, &[3, 3], ConvOpts::default());
    let w = f64s(&conv.w);
    let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
    assert!(
        (var * 16.0 * 9.0 - 1.0).abs() < 0.05,
        "variance {var} is not 1/(16·9)"
    );
    assert!(f64s(&conv.b).iter().all(|&v| v == 0.0));
}

#[test]
#[should_panic(expected = "Conv: expected an input of shape [N, 3, .., ..]")]
fn conv_panics_on_wrong_channels() {
    Conv::new(&rng::key(0), 3, 4, &[3, 3], ConvOpts::default()).forward(&normal(1, &[1, 2, 8, 8]));
}

#[test]
#[should_panic(expected = "Conv: expected an input of shape [N, 3, ..]")]
fn conv_panics_on_a_wrong_rank() {
    Conv::new(&rng::key(0), 3, 4, &[3], ConvOpts::default()).forward(&normal(1, &[3, 8]));
}

#[test]
fn conv_under_grad_vmap_jit() {
    let opts = ConvOpts {
        padding: Padding::Same,
        ..Default::default()
    };
    let conv = Conv::new(&rng::key(0), 2, 3, &[3, 3], opts.clone());
    check_layer_grads(
        &(conv, normal(1, &[2, 2, 5, 5])),
        |(c, x)| c.forward(x),
        "Conv",
    );
    let members: Vec<(Conv, Tensor)> = (0..3)
        .map(|m| {
            (
                Conv::new(&rng::key(50 + m), 2, 3, &[3, 3], opts.clone()),
                normal(60 + m, &[2, 2, 5, 5]),
            )
        })
        .collect();
    check_vmap_and_jit(&members, |(c, x)| c.forward(x), "Conv");
}

// ---------------------------------------------------------------- norms

/// A layer whose gain and shift are not the identity's.
fn layer_norm(dim: usize, seed: u64) -> LayerNorm {
    let mut ln = LayerNorm::new(dim);
    ln.scale = normal(seed, &[dim]);
    ln.bias = normal(seed + 1, &[dim]);
    ln
}

#[test]
fn layer_norm_against_a_loop() {
    let ln = layer_norm(5, 0);
    let x = normal(2, &[3, 5]) * 3.0 + 1.0;
    let (xv, g, b) = (f64s(&x), f64s(&ln.scale), f64s(&ln.bias));
    let mut want = Vec::new();
    for row in xv.chunks(5) {
        let mean = row.iter().sum::<f64>() / 5.0;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / 5.0;
        for (j, v) in row.iter().enumerate() {
            want.push((v - mean) / (var + 1e-5).sqrt() * g[j] + b[j]);
        }
    }
    assert_close(&f64s(&ln.forward(&x)), &want, 1e-5, "LayerNorm");
    assert_eq!(LayerNorm::new(5).eps, 1e-5);
    assert_eq!(ln.leaf_paths(), ["scale", "bias"]);
}

#[test]
fn rms_norm_against_a_loop() {
    let mut rms = RmsNorm::new(4);
    rms.scale = normal(0, &[4]);
    let x = normal(1, &[2, 3, 4]);
    let (xv, g) = (f64s(&x), f64s(&rms.scale));
    let mut want = Vec::new();
    for row in xv.chunks(4) {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / 4.0;
        want.extend(
            row.iter()
                .enumerate()
                .map(|(j, v)| v / (ms + 1e-6).sqrt() * g[j]),
        );
    }
    assert_close(&f64s(&rms.forward(&x)), &want, 1e-5, "RmsNorm");
    assert_eq!(rms.eps, 1e-6);
}

#[test]
#[should_panic(expected = "LayerNorm: expected an input of shape [.., 5]")]
fn layer_norm_panics_on_a_wrong_last_axis() {
    LayerNorm::new(5).forward(&normal(0, &[2, 4]));
}

#[test]
#[should_panic(expected = "RmsNorm: expected an input of shape [.., 4]")]
fn rms_norm_panics_on_a_wrong_last_axis() {
    RmsNorm::new(4).forward(&normal(0, &[5]));
}

#[test]
fn norms_under_grad_vmap_jit() {
    check_layer_grads(
        &(layer_norm(5, 0), normal(2, &[3, 5])),
        |(l, x)| l.forward(x),
        "LayerNorm",
    );
    let mut rms = RmsNorm::new(5);
    rms.scale = normal(3, &[5]);
    check_layer_grads(&(rms, normal(4, &[3, 5])), |(l, x)| l.forward(x), "RmsNorm");
    let members: Vec<(LayerNorm, Tensor)> = (0..3)
        .map(|m| (layer_norm(5, 10 * m), normal(70 + m, &[3, 5])))
        .collect();
    check_vmap_and_jit(&members, |(l, x)| l.forward(x), "LayerNorm");
    let members: Vec<(RmsNorm, Tensor)> = (0..3)
        .map(|m| {
            let mut r = RmsNorm::new(5);
            r.scale = normal(80 + m, &[5]);
            (r, normal(90 + m, &[3, 5]))
        })
        .collect();
    check_vmap_and_jit(&members, |(l, x)| l.forward(x), "RmsNorm");
}

/// `(mean, biased variance)` of each channel of `x [N, C, L]` by loops.
fn channel_stats(x: &Tensor) -> (Vec<f64>, Vec<f64>) {
    let s = x.shape().to_vec();
    let (n, c, l) = (s[0], s[1], s[2]);
    let xv = f64s(x);
    let at = |i: usize, ch: usize, j: usize| xv[(i * c + ch) * l + j];
    let count = (n * l) as f64;
    let mean: Vec<f64> = (0..c)
        .map(|ch| {
            (0..n)
                .flat_map(|i| (0..l).map(move |j| (i, j)))
                .map(|(i, j)| at(i, ch, j))
                .sum::<f64>()
                / count
        })
        .collect();
    let var: Vec<f64> = (0..c)
        .map(|ch| {
            (0..n)
                .flat_map(|i| (0..l).map(move |j| (i, j)))
                .map(|(i, j)| (at(i, ch, j) - mean[ch]).powi(2))
                .sum::<f64>()
                / count
        })
        .collect();
    (mean, var)
}

/// `x [N, C, L]` normalized per channel by `mean`, `var`, then `scale`,
/// `bias`, by loops.
fn normalize_loop(x: &Tensor, mean: &[f64], var: &[f64], bn: &BatchNorm) -> Vec<f64> {
    let s = x.shape().to_vec();
    let (g, b) = (f64s(&bn.scale), f64s(&bn.bias));
    let xv = f64s(x);
    (0..xv.len())
        .map(|i| {
            let ch = (i / s[2]) % s[1];
            (xv[i] - mean[ch]) / (var[ch] + 1e-5).sqrt() * g[ch] + b[ch]
        })
        .collect()
}

fn batch_norm(channels: usize, seed: u64) -> BatchNorm {
    let mut bn = BatchNorm::new(channels);
    bn.scale = normal(seed, &[channels]);
    bn.bias = normal(seed + 1, &[channels]);
    bn
}

#[test]
fn batch_norm_trains_on_batch_statistics_and_evaluates_on_running_ones() {
    let bn = batch_norm(3, 0);
    assert_eq!((bn.eps, bn.momentum), (1e-5, 0.9));
    let stats0 = BatchStats {
        mean: Tensor::from_slice(&[0.5f32, -1.0, 2.0], &[3]),
        var: Tensor::from_slice(&[1.0f32, 4.0, 0.25], &[3]),
    };
    let x1 = normal(2, &[4, 3, 5]) * 2.0 + 1.0;
    let (y1, stats1) = bn.forward_train(&x1, &stats0);
    let (mean1, var1) = channel_stats(&x1);
    assert_close(
        &f64s(&y1),
        &normalize_loop(&x1, &mean1, &var1, &bn),
        1e-5,
        "BatchNorm train",
    );
    let running = |old: &Tensor, batch: &[f64]| -> Vec<f64> {
        f64s(old)
            .iter()
            .zip(batch)
            .map(|(o, b)| 0.9 * o + 0.1 * b)
            .collect()
    };
    let (want_mean1, want_var1) = (running(&stats0.mean, &mean1), running(&stats0.var, &var1));
    assert_close(&f64s(&stats1.mean), &want_mean1, 1e-6, "running mean");
    assert_close(&f64s(&stats1.var), &want_var1, 1e-6, "running var");
    // A second batch moves the running statistics again.
    let x2 = normal(3, &[4, 3, 5]);
    let (_, stats2) = bn.forward_train(&x2, &stats1);
    let (mean2, var2) = channel_stats(&x2);
    assert_close(
        &f64s(&stats2.mean),
        &running(&stats1.mean, &mean2),
        1e-6,
        "running mean, step 2",
    );
    assert_close(
        &f64s(&stats2.var),
        &running(&stats1.var, &var2),
        1e-6,
        "running var, step 2",
    );
    // Evaluation normalizes by the running statistics, not the batch's.
    let y_eval = bn.forward_eval(&x2, &stats2);
    let want = normalize_loop(&x2, &f64s(&stats2.mean), &f64s(&stats2.var), &bn);
    assert_close(&f64s(&y_eval), &want, 1e-5, "BatchNorm eval");
    // Fresh statistics: mean 0, variance 1; features [N, C] work too.
    let fresh = BatchStats::new(3);
    assert_eq!(
        (f64s(&fresh.mean), f64s(&fresh.var)),
        (vec![0.0; 3], vec![1.0; 3])
    );
    assert_eq!(
        bn.forward_train(&normal(4, &[6, 3]), &fresh).0.shape(),
        &[6, 3]
    );
}

#[test]
#[should_panic(expected = "BatchNorm::forward_train: expected an input of shape [N, 3, ..]")]
fn batch_norm_panics_on_wrong_channels() {
    BatchNorm::new(3).forward_train(&normal(0, &[2, 4, 5]), &BatchStats::new(3));
}

#[test]
#[should_panic(expected = "BatchNorm::forward_eval: expected statistics of shape [3]")]
fn batch_norm_panics_on_wrong_statistics() {
    BatchNorm::new(3).forward_eval(&normal(0, &[2, 3, 5]), &BatchStats::new(4));
}

#[test]
fn batch_norm_under_grad_vmap_jit() {
    let stats = BatchStats::new(3);
    check_layer_grads(
        &(batch_norm(3, 0), normal(1, &[4, 3, 2])),
        |(b, x)| b.forward_train(x, &in_f64(&stats)).0,
        "BatchNorm train",
    );
    check_layer_grads(
        &(batch_norm(3, 0), normal(1, &[4, 3, 2])),
        |(b, x)| b.forward_eval(x, &in_f64(&stats)),
        "BatchNorm eval",
    );
    let members: Vec<(BatchNorm, BatchStats, Tensor)> = (0..3)
        .map(|m| {
            let s = BatchStats {
                mean: normal(100 + m, &[3]),
                var: normal(110 + m, &[3]).exp(),
            };
            (batch_norm(3, 10 * m), s, normal(120 + m, &[4, 3, 2]))
        })
        .collect();
    check_vmap_and_jit(
        &members,
        |(b, s, x)| b.forward_train(x, s),
        "BatchNorm train",
    );
    check_vmap_and_jit(&members, |(b, s, x)| b.forward_eval(x, s), "BatchNorm eval");
}

// ---------------------------------------------------------------- Dropout

#[test]
fn dropout_zeroes_its_rate_and_scales_the_rest() {
    let drop = Dropout::new(0.3);
    let x = normal(0, &[100_000]);
    let y = drop.forward(&x, Some(&rng::key(1)));
    let (xv, yv) = (f64s(&x), f64s(&y));
    let zeroed = yv.iter().filter(|&&v| v == 0.0).count() as f64 / yv.len() as f64;
    // Binomial: the standard deviation of the fraction is 0.0014.
    assert!((zeroed - 0.3).abs() < 0.01, "zeroed fraction {zeroed}");
    for (a, b) in xv.iter().zip(&yv) {
        assert!(
            *b == 0.0 || (b - a / 0.7).abs() <= 1e-6 * a.abs().max(1.0),
            "{b} is neither 0 nor {a}/0.7"
        );
    }
    // Another key, another mask; no key, the identity.
    assert_ne!(
        drop.forward(&x, Some(&rng::key(2))).to_vec::<f32>(),
        y.to_vec::<f32>()
    );
    assert_eq!(drop.forward(&x, None).to_vec::<f32>(), x.to_vec::<f32>());
    assert_eq!(
        Dropout::new(0.0)
            .forward(&x, Some(&rng::key(1)))
            .to_vec::<f32>(),
        x.to_vec::<f32>()
    );
    assert!(f64s(&Dropout::new(1.0).forward(&x, Some(&rng::key(1))))
        .iter()
        .all(|&v| v == 0.0));
    assert_eq!(drop.num_leaves(), 0);
}

#[test]
#[should_panic(expected = "Dropout: rate must be in [0, 1]")]
fn dropout_panics_on_a_rate_above_one() {
    Dropout::new(1.5);
}

#[test]
fn dropout_under_grad_vmap_jit() {
    let drop = Dropout::new(0.5);
    let key = rng::key(7);
    check_layer_grads(
        &normal(0, &[20]),
        |x| drop.forward(x, Some(&key)),
        "Dropout",
    );
    // One key per member: each member draws its own mask, as a loop would.
    let members: Vec<(Tensor, Tensor)> = (0..3)
        .map(|m| (rng::key(200 + m), normal(210 + m, &[50])))
        .collect();
    check_vmap_and_jit(&members, |(k, x)| drop.forward(x, Some(k)), "Dropout");
}

// ---------------------------------------------------------------- attention

/// Attention by loops, element by element: `q [B, T, N, H]`, `k`, `v [B,
/// S, N, H]`, `attend(b, n, t, s)` the mask.
fn attention_loop(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    attend: &dyn Fn(usize, usize, usize, usize) -> bool,
) -> Vec<f64> {
    let (qs, ks) = (q.shape().to_vec(), k.shape().to_vec());
    let (b, t, n, h, s) = (qs[0], qs[1], qs[2], qs[3], ks[1]);
    let (qv, kv, vv) = (f64s(q), f64s(k), f64s(v));
    let mut out = vec![0.0; b * t * n * h];
    for bi in 0..b {
        for ni in 0..n {
            for ti in 0..t {
                let logits: Vec<f64> = (0..s)
                    .map(|si| {
                        let dot: f64 = (0..h)
                            .map(|d| {
                                qv[((bi * t + ti) * n + ni) * h + d]
                                    * kv[((bi * s + si) * n + ni) * h + d]
                            })
                            .sum();
                        if attend(bi, ni, ti, si) {
                            dot / (h as f64).sqrt()
                        } else {
                            f64::NEG_INFINITY
                        }
                    })
                    .collect();
                let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                // A fully masked row attends uniformly (JAX's finite mask value).
                let weights: Vec<f64> = if max == f64::NEG_INFINITY {
                    vec![1.0; s]
                } else {
                    logits.iter().map(|l| (l - max).exp()).collect()
                };
                let total: f64 = weights.iter().sum();
                for d in 0..h {
                    out[((bi * t + ti) * n + ni) * h + d] = (0..s)
                        .map(|si| weights[si] / total * vv[((bi * s + si) * n + ni) * h + d])
                        .sum();
                }
            }
        }
    }
    out
}

#[test]
fn dot_product_attention_against_a_loop_softmax() {
    let (q, k, v) = (
        normal(0, &[2, 3, 2, 4]),
        normal(1, &[2, 5, 2, 4]),
        normal(2, &[2, 5, 2, 4]),
    );
    let y = nn::dot_product_attention(&q, &k, &v, None);
    assert_eq!(y.shape(), &[2, 3, 2, 4]);
    assert_close(
        &f64s(&y),
        &attention_loop(&q, &k, &v, &|_, _, _, _| true),
        1e-5,
        "no mask",
    );
    // A mask [B, 1, T, S] broadcast over heads, with one row fully masked.
    let attend = |b: usize, _: usize, t: usize, s: usize| {
        !((b + t + s).is_multiple_of(3) || (b == 1 && t == 2))
    };
    let mask: Vec<bool> = (0..2 * 3 * 5)
        .map(|i| attend(i / 15, 0, (i / 5) % 3, i % 5))
        .collect();
    let mask = Tensor::from_vec(mask, &[2, 1, 3, 5]);
    let y = nn::dot_product_attention(&q, &k, &v, Some(&mask));
    assert_close(
        &f64s(&y),
        &attention_loop(&q, &k, &v, &attend),
        1e-5,
        "mask",
    );
}

#[test]
fn causal_mask_is_lower_triangular() {
    let m = nn::causal_mask(3);
    assert_eq!(m.dtype(), DType::Bool);
    assert_eq!(
        m.to_vec::<bool>(),
        vec![true, false, false, true, true, false, true, true, true]
    );
    let (q, k, v) = (
        normal(0, &[1, 3, 1, 2]),
        normal(1, &[1, 3, 1, 2]),
        normal(2, &[1, 3, 1, 2]),
    );
    let y = nn::dot_product_attention(&q, &k, &v, Some(&m));
    assert_close(
        &f64s(&y),
        &attention_loop(&q, &k, &v, &|_, _, t, s| s <= t),
        1e-5,
        "causal",
    );
}

#[test]
#[should_panic(expected = "dot_product_attention: expected a Bool mask that broadcasts")]
fn dot_product_attention_panics_on_a_mask_of_the_wrong_shape() {
    let q = normal(0, &[1, 3, 1, 2]);
    nn::dot_product_attention(&q, &q, &q, Some(&nn::causal_mask(4)));
}

/// `x · w + b` of `x [rows, d_in]` by loops.
fn linear_loop(x: &[f64], lin: &Linear) -> Vec<f64> {
    let (d_in, d_out) = (lin.w.shape()[0], lin.w.shape()[1]);
    let (w, b) = (f64s(&lin.w), f64s(&lin.b));
    x.chunks(d_in)
        .flat_map(|row| {
            (0..d_out)
                .map(|j| b[j] + (0..d_in).map(|i| row[i] * w[i * d_out + j]).sum::<f64>())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn attention_layer(seed: u64) -> MultiHeadAttention {
    let mut mha = MultiHeadAttention::new(&rng::key(seed), 6, 2);
    for (i, lin) in [&mut mha.q, &mut mha.k, &mut mha.v, &mut mha.o]
        .into_iter()
        .enumerate()
    {
        lin.b = normal(seed * 10 + i as u64, &[6]);
    }
    mha
}

#[test]
fn multi_head_attention_against_loops() {
    let mha = attention_layer(0);
    assert_eq!(mha.heads, 2);
    assert_eq!(
        mha.leaf_paths(),
        ["q.w", "q.b", "k.w", "k.b", "v.w", "v.b", "o.w", "o.b"]
    );
    let (b, t, dim) = (2, 4, 6);
    let x = normal(1, &[b, t, dim]);
    let xv = f64s(&x);
    // Project, split the features into 2 contiguous heads of 3, attend
    // causally by loops, merge, project.
    let heads = |lin: &Linear| Tensor::from_vec(linear_loop(&xv, lin), &[b, t, 2, 3]);
    let attended = attention_loop(
        &heads(&mha.q),
        &heads(&mha.k),
        &heads(&mha.v),
        &|_, _, t, s| s <= t,
    );
    let want = linear_loop(&attended, &mha.o);
    let y = mha.forward(&x, Some(&nn::causal_mask(t)));
    assert_eq!(y.shape(), &[b, t, dim]);
    assert_close(&f64s(&y), &want, 1e-5, "MultiHeadAttention");
    // Without a mask every position sees every other.
    let attended = attention_loop(
        &heads(&mha.q),
        &heads(&mha.k),
        &heads(&mha.v),
        &|_, _, _, _| true,
    );
    assert_close(
        &f64s(&mha.forward(&x, None)),
        &linear_loop(&attended, &mha.o),
        1e-5,
        "unmasked",
    );
}

#[test]
#[should_panic(expected = "MultiHeadAttention: expected an input of shape [.., 6]")]
fn multi_head_attention_panics_on_a_wrong_width() {
    attention_layer(0).forward(&normal(1, &[2, 4, 5]), None);
}

#[test]
#[should_panic(expected = "MultiHeadAttention: dim (10) must be a multiple of heads (3)")]
fn multi_head_attention_panics_on_heads_that_do_not_divide_dim() {
    MultiHeadAttention::new(&rng::key(0), 10, 3);
}

#[test]
fn attention_under_grad_vmap_jit() {
    let mask = nn::causal_mask(4);
    check_layer_grads(
        &(attention_layer(0), normal(1, &[2, 4, 6])),
        |(a, x)| a.forward(x, Some(&mask)),
        "MultiHeadAttention",
    );
    let qkv = (
        normal(2, &[1, 3, 2, 2]),
        normal(3, &[1, 4, 2, 2]),
        normal(4, &[1, 4, 2, 2]),
    );
    check_layer_grads(
        &qkv,
        |(q, k, v)| nn::dot_product_attention(q, k, v, None),
        "dot_product_attention",
    );
    let members: Vec<(MultiHeadAttention, Tensor)> = (0..3)
        .map(|m| (attention_layer(1 + m), normal(300 + m, &[2, 4, 6])))
        .collect();
    check_vmap_and_jit(
        &members,
        |(a, x)| a.forward(x, Some(&mask)),
        "MultiHeadAttention",
    );
    let members: Vec<(Tensor, Tensor, Tensor)> = (0..3)
        .map(|m| {
            (
                normal(310 + m, &[4, 2, 3]),
                normal(320 + m, &[4, 2, 3]),
                normal(330 + m, &[4, 2, 3]),
            )
        })
        .collect();
    check_vmap_and_jit(
        &members,
        |(q, k, v)| nn::dot_product_attention(q, k, v, Some(&mask)),
        "dot_product_attention",
    );
}

// ---------------------------------------------------------------- losses

#[test]
fn cross_entropy_is_minus_the_log_softmax_of_the_label() {
    let logits = normal(0, &[2, 3, 5]) * 3.0;
    let labels = Tensor::from_slice(&[0i32, 4, 2, 1, 1, 3], &[2, 3]);
    let lv = f64s(&logits);
    let want: Vec<f64> = [0usize, 4, 2, 1, 1, 3]
        .iter()
        .enumerate()
        .map(|(row, &label)| {
            let z = &lv[row * 5..row * 5 + 5];
            let max = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let log_sum = z.iter().map(|v| (v - max).exp()).sum::<f64>().ln() + max;
            log_sum - z[label]
        })
        .collect();
    let l = nn::cross_entropy(&logits, &labels);
    assert_eq!(l.shape(), &[2, 3]);
    assert_close(&f64s(&l), &want, 1e-5, "cross_entropy");
    let labels64 = Tensor::from_slice(&[0i64, 4, 2, 1, 1, 3], &[2, 3]);
    assert_close(
        &f64s(&nn::cross_entropy(&logits, &labels64)),
        &want,
        1e-5,
        "I64 labels",
    );
    // Large logits stay finite.
    let big = Tensor::from_slice(&[1000.0f32, 0.0], &[1, 2]);
    assert_eq!(
        nn::cross_entropy(&big, &Tensor::from_slice(&[1i32], &[1])).to_vec::<f32>(),
        vec![1000.0]
    );
}

#[test]
#[should_panic(expected = "cross_entropy: label 5 out of range 0..5")]
fn cross_entropy_panics_on_a_label_out_of_range() {
    nn::cross_entropy(&normal(0, &[2, 5]), &Tensor::from_slice(&[1i32, 5], &[2]));
}

#[test]
#[should_panic(expected = "cross_entropy: expected logits [.., C] and labels [..]")]
fn cross_entropy_panics_on_mismatched_shapes() {
    nn::cross_entropy(
        &normal(0, &[2, 5]),
        &Tensor::from_slice(&[1i32, 2, 3], &[3]),
    );
}

#[test]
fn mse_is_the_mean_squared_difference() {
    let (p, t) = (normal(0, &[3, 4]), normal(1, &[3, 4]));
    let want = f64s(&p)
        .iter()
        .zip(f64s(&t))
        .map(|(a, b)| (a - b) * (a - b))
        .sum::<f64>()
        / 12.0;
    let l = nn::mse(&p, &t);
    assert_eq!(l.shape(), &[] as &[usize]);
    assert_close(&[f64s(&l)[0]], &[want], 1e-6, "mse");
}

#[test]
#[should_panic(expected = "mse: expected a target of the prediction's shape [3, 1]")]
fn mse_panics_on_shapes_that_would_broadcast() {
    nn::mse(&normal(0, &[3, 1]), &normal(1, &[3]));
}

#[test]
fn losses_under_grad_vmap_jit() {
    let labels = Tensor::from_slice(&[0i32, 4, 2], &[3]);
    check_layer_grads(
        &normal(0, &[3, 5]),
        |z| nn::cross_entropy(z, &labels),
        "cross_entropy",
    );
    // d/dz mean(ce) = (softmax(z) − one_hot) / rows.
    let z = normal(1, &[3, 5]);
    let g = grad(|z: &Tensor| nn::cross_entropy(z, &labels).mean_all(), &z);
    let want = (z.softmax(-1) - labels.one_hot(5)) / 3.0;
    assert_close(&f64s(&g), &f64s(&want), 1e-6, "cross_entropy gradient");
    let target = normal(2, &[3, 5]);
    check_layer_grads(&normal(3, &[3, 5]), |p| nn::mse(p, &in_f64(&target)), "mse");
    let members: Vec<(Tensor, Tensor)> = (0..3)
        .map(|m| {
            (
                normal(400 + m, &[4, 5]),
                Tensor::from_vec(vec![m as i32, 4, 0, 2], &[4]),
            )
        })
        .collect();
    check_vmap_and_jit(&members, |(z, y)| nn::cross_entropy(z, y), "cross_entropy");
    let members: Vec<(Tensor, Tensor)> = (0..3)
        .map(|m| (normal(410 + m, &[4]), normal(420 + m, &[4])))
        .collect();
    check_vmap_and_jit(&members, |(p, t)| nn::mse(p, t), "mse");
}

// ---------------------------------------------------------------- init

/// Mean and variance of the entries of `t`.
fn moments(t: &Tensor) -> (f64, f64) {
    let v = f64s(t);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    (
        mean,
        v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / v.len() as f64,
    )
}

#[test]
fn initializers_have_their_variances() {
    use nn::init;
    let key = rng::key(0);
    let (mean, var) = moments(&init::lecun_normal(&key, &[500, 200], DType::F32));
    assert!(
        mean.abs() < 0.005 && (var * 500.0 - 1.0).abs() < 0.03,
        "lecun_normal {mean} {var}"
    );
    let (mean, var) = moments(&init::he_normal(&key, &[500, 200], DType::F32));
    assert!(
        mean.abs() < 0.005 && (var * 500.0 / 2.0 - 1.0).abs() < 0.03,
        "he_normal {mean} {var}"
    );
    let w = init::glorot_uniform(&key, &[300, 100], DType::F32);
    let limit = (6.0f64 / 400.0).sqrt();
    assert!(f64s(&w).iter().all(|v| v.abs() <= limit));
    let (mean, var) = moments(&w);
    assert!(
        mean.abs() < 0.002 && (var / (limit * limit / 3.0) - 1.0).abs() < 0.03,
        "glorot_uniform {mean} {var}"
    );
    // A kernel [O, I, k..]: fan-in I·prod(k), fan-out O·prod(k).
    let (_, var) = moments(&init::he_normal(&key, &[64, 32, 3, 3], DType::F32));
    assert!(
        (var * 32.0 * 9.0 / 2.0 - 1.0).abs() < 0.03,
        "he_normal on a kernel {var}"
    );
    let w = init::glorot_uniform(&key, &[8, 4, 5], DType::F32);
    let limit = (6.0f64 / (4.0 * 5.0 + 8.0 * 5.0)).sqrt();
    assert!(f64s(&w).iter().all(|v| v.abs() <= limit));
    assert_eq!(
        init::zeros(&key, &[2, 3], DType::F32).to_vec::<f32>(),
        vec![0.0; 6]
    );
    assert_eq!(
        init::ones(&key, &[2], DType::F64).to_vec::<f64>(),
        vec![1.0; 2]
    );
    // Pure functions of the key.
    assert_eq!(
        init::lecun_normal(&key, &[3, 4], DType::F32).to_vec::<f32>(),
        init::lecun_normal(&rng::key(0), &[3, 4], DType::F32).to_vec::<f32>()
    );
}

#[test]
#[should_panic(expected = "nn::init::lecun_normal: needs a weight of rank 2")]
fn initializers_panic_without_fans() {
    nn::init::lecun_normal(&rng::key(0), &[5], DType::F32);
}

// ---------------------------------------------------------------- a model

/// A pre-norm transformer block, the layers composed as a user would.
#[derive(Ptree, Clone)]
struct Block {
    norm1: LayerNorm,
    attention: MultiHeadAttention,
    norm2: RmsNorm,
    up: Linear,
    down: Linear,
}

impl Block {
    fn new(key: &Tensor) -> Block {
        let k = rng::split(key, 3);
        Block {
            norm1: LayerNorm::new(8),
            attention: MultiHeadAttention::new(&k.get(0), 8, 2),
            norm2: RmsNorm::new(8),
            up: Linear::new(&k.get(1), 8, 16),
            down: Linear::new(&k.get(2), 16, 8),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let t = x.shape()[x.ndim() - 2];
        let x = x + self
            .attention
            .forward(&self.norm1.forward(x), Some(&nn::causal_mask(t)));
        &x + self
            .down
            .forward(&self.up.forward(&self.norm2.forward(&x)).gelu())
    }
}

#[test]
fn a_block_of_layers_trains_under_jit_like_eager() {
    let block = Block::new(&rng::key(0));
    assert_eq!(
        block.leaf_paths()[..4],
        [
            "norm1.scale",
            "norm1.bias",
            "attention.q.w",
            "attention.q.b"
        ]
    );
    let x = normal(1, &[2, 5, 8]);
    let target = normal(2, &[2, 5, 8]);
    let step = |(p, x, y): &(Block, Tensor, Tensor)| {
        let (loss, g) = value_and_grad(|p: &Block| nn::mse(&p.forward(x), y), p);
        (loss, p.map2_leaves(&g, &mut |w, g| w - g * 0.05))
    };
    let compiled = jit(step);
    let (mut eager, mut jitted) = (block.clone(), block);
    let mut losses = Vec::new();
    for _ in 0..5 {
        let (l_eager, next_eager) = step(&(eager, x.clone(), target.clone()));
        let (l_jit, next_jit) = compiled.call(&(jitted, x.clone(), target.clone()));
        assert_close(&[f64s(&l_jit)[0]], &[f64s(&l_eager)[0]], 1e-5, "loss");
        losses.push(f64s(&l_eager)[0]);
        (eager, jitted) = (next_eager, next_jit);
    }
    assert!(losses[4] < losses[0], "losses {losses:?}");
    for (a, b) in eager.leaves().iter().zip(jitted.leaves()) {
        assert_close(&f64s(a), &f64s(&b), 1e-4, "parameters after 5 steps");
    }
}
