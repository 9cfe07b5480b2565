//! `nx::einsum` against a naive reference (plain f64 loops over every
//! combination of index values) and against explicit compositions, for each
//! feature of numpy's grammar; and its error messages.
//!
//! The reference takes an explicit, ellipsis-free spec written by hand for
//! each case (the `...` axes spelled as capital letters, the implicit output
//! spelled out), so it shares no parsing with the implementation.

use nx::{DType, Tensor};
use std::collections::BTreeMap;
#[path = "common/panics.rs"]
mod panics;
use panics::panic_message;

/// Deterministic values in [-1, 1), distinct per seed.
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn t64(shape: &[usize], seed: u64) -> Tensor {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, seed), shape)
}

/// The reference: `spec` is explicit (`->`) with one letter per axis. Every
/// assignment of values to the letters is visited; a size-1 axis reads
/// index 0 whatever the letter's value (numpy's broadcasting).
fn naive(spec: &str, ops: &[(Vec<f64>, Vec<usize>)]) -> (Vec<f64>, Vec<usize>) {
    let (ins, out) = spec.split_once("->").expect("explicit reference spec");
    let terms: Vec<Vec<char>> = ins.split(',').map(|t| t.chars().collect()).collect();
    assert_eq!(terms.len(), ops.len());
    let mut size: BTreeMap<char, usize> = BTreeMap::new();
    for (t, (_, shape)) in terms.iter().zip(ops) {
        assert_eq!(
            t.len(),
            shape.len(),
            "reference term {t:?} vs shape {shape:?}"
        );
        for (&c, &n) in t.iter().zip(shape) {
            let e = size.entry(c).or_insert(n);
            if *e == 1 {
                *e = n;
            }
        }
    }
    let letters: Vec<char> = size.keys().copied().collect();
    let dims: Vec<usize> = letters.iter().map(|c| size[c]).collect();
    let out: Vec<char> = out.chars().collect();
    let out_shape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut result = vec![0.0; out_shape.iter().product()];
    if dims.contains(&0) {
        return (result, out_shape);
    }
    let mut idx = vec![0usize; letters.len()];
    let value = |c: char, idx: &[usize]| idx[letters.iter().position(|&l| l == c).unwrap()];
    loop {
        let mut p = 1.0;
        for (t, (data, shape)) in terms.iter().zip(ops) {
            let mut flat = 0;
            for (&c, &n) in t.iter().zip(shape) {
                let i = if n == 1 { 0 } else { value(c, &idx) };
                flat = flat * n + i;
            }
            p *= data[flat];
        }
        let mut o = 0;
        for (&c, &n) in out.iter().zip(&out_shape) {
            o = o * n + value(c, &idx);
        }
        result[o] += p;
        // Next assignment.
        let mut d = letters.len();
        loop {
            if d == 0 {
                return (result, out_shape);
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn assert_close(got: &Tensor, want: &[f64], want_shape: &[usize], tol: f64, what: &str) {
    assert_eq!(got.shape(), want_shape, "{what}: shape");
    let g = got.cast(DType::F64).to_vec::<f64>();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}: element {i}: got {a}, want {b}"
        );
    }
}

/// einsum(spec) on f64 operands of `shapes` equals the reference `ref_spec`.
fn check(spec: &str, ref_spec: &str, shapes: &[&[usize]]) {
    let ts: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| t64(s, 17 + k as u64))
        .collect();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let got = nx::einsum(spec, &refs);
    let ops: Vec<(Vec<f64>, Vec<usize>)> = ts
        .iter()
        .map(|t| (t.to_vec::<f64>(), t.shape().to_vec()))
        .collect();
    let (want, shape) = naive(ref_spec, &ops);
    assert_close(&got, &want, &shape, 1e-12, spec);
}

#[test]
fn products() {
    check("ij,jk->ik", "ij,jk->ik", &[&[3, 4], &[4, 5]]); // matmul
    check("bij,bjk->bik", "bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]); // batched
    check("i,j->ij", "i,j->ij", &[&[3], &[4]]); // outer
    check("i,i->", "i,i->", &[&[7], &[7]]); // inner
    check("ij,ij->ij", "ij,ij->ij", &[&[2, 3], &[2, 3]]); // Hadamard
    check("ij,kj->ki", "ij,kj->ki", &[&[2, 3], &[4, 3]]); // transposed operands and output
    check("bij,bkj->bik", "bij,bkj->bik", &[&[3, 2, 4], &[3, 5, 4]]);
    check("abc,cba->b", "abc,cba->b", &[&[2, 3, 4], &[4, 3, 2]]); // two contracted, one batch
    check("ij,jk->", "ij,jk->", &[&[3, 4], &[4, 5]]);
    check("ij,j->i", "ij,j->i", &[&[3, 4], &[4]]); // matrix-vector
    check("ijk,jl->lik", "ijk,jl->lik", &[&[2, 3, 4], &[3, 5]]);
}

#[test]
fn one_operand() {
    check("ii->", "ii->", &[&[4, 4]]); // trace
    check("ii->i", "ii->i", &[&[4, 4]]); // diagonal
    check("iij->j", "iij->j", &[&[3, 3, 5]]);
    check("iji->ji", "iji->ji", &[&[3, 2, 3]]);
    check("iii->i", "iii->i", &[&[3, 3, 3]]);
    check("iijj->ij", "iijj->ij", &[&[2, 2, 3, 3]]);
    check("ij->ji", "ij->ji", &[&[3, 4]]); // transpose
    check("ijk->kij", "ijk->kij", &[&[2, 3, 4]]);
    check("ij->i", "ij->i", &[&[3, 4]]); // sum over an axis
    check("ij->j", "ij->j", &[&[3, 4]]);
    check("ijk->", "ijk->", &[&[2, 3, 4]]);
    check("ij->ij", "ij->ij", &[&[3, 4]]);
    check("ii->i", "ii->i", &[&[1, 1]]);
    check("ii->", "ii->", &[&[0, 0]]);
}

#[test]
fn repeated_indices_with_products() {
    check("ii,i->i", "ii,i->i", &[&[3, 3], &[3]]);
    check("ij,jj->i", "ij,jj->i", &[&[2, 3], &[3, 3]]);
    check("iij,jkk->ik", "iij,jkk->ik", &[&[2, 2, 3], &[3, 4, 4]]);
}

#[test]
fn explicit_compositions() {
    let a = t64(&[3, 4], 1);
    let b = t64(&[4, 5], 2);
    let close = |x: &Tensor, y: &Tensor, what: &str| {
        assert_close(x, &y.to_vec::<f64>(), y.shape(), 1e-12, what);
    };
    close(&nx::einsum("ij,jk->ik", &[&a, &b]), &a.matmul(&b), "matmul");
    close(&nx::einsum("ij->ji", &[&a]), &a.transpose(), "transpose");
    close(
        &nx::einsum("ij->i", &[&a]),
        &a.sum(&[1], false),
        "sum axis 1",
    );
    close(&nx::einsum("ij->", &[&a]), &a.sum_all(), "sum");
    let u = t64(&[3], 3);
    let v = t64(&[5], 4);
    close(&nx::einsum("i,j->ij", &[&u, &v]), &u.outer(&v), "outer");
    let s = t64(&[4, 4], 5);
    let eye = Tensor::eye(4, DType::F64);
    close(&nx::einsum("ii", &[&s]), &(&s * &eye).sum_all(), "trace");
    close(
        &nx::einsum("ii->i", &[&s]),
        &(&s * &eye).sum(&[1], false),
        "diag",
    );
    let x = t64(&[2, 3, 4], 6);
    let y = t64(&[2, 4, 5], 7);
    close(&nx::einsum("bij,bjk->bik", &[&x, &y]), &x.matmul(&y), "bmm");
}

#[test]
fn ellipsis() {
    // Leading batch axes, both operands.
    check(
        "...ij,...jk->...ik",
        "ABij,ABjk->ABik",
        &[&[2, 3, 4, 5], &[2, 3, 5, 2]],
    );
    // Different ellipsis ranks broadcast right-aligned.
    check(
        "...ij,...jk->...ik",
        "ABij,Bjk->ABik",
        &[&[2, 3, 4, 5], &[3, 5, 2]],
    );
    // Size 1 against a larger size, both ways.
    check(
        "...ij,...jk->...ik",
        "ABij,ABjk->ABik",
        &[&[2, 1, 4, 5], &[1, 3, 5, 2]],
    );
    // In the middle and at the end.
    check("i...j->j...i", "iABj->jABi", &[&[2, 3, 4, 5]]);
    check("ij...->...", "ijAB->AB", &[&[2, 3, 4, 5]]);
    check("ij...,j...->i...", "ijA,jA->iA", &[&[2, 3, 4], &[3, 4]]);
    // An ellipsis covering no axes.
    check("...ij,...jk->...ik", "ij,jk->ik", &[&[2, 3], &[3, 4]]);
    // Only one operand has the ellipsis.
    check("...i,i->...", "ABi,i->AB", &[&[2, 3, 4], &[4]]);
    // A broadcast axis that only a size-1 axis has stays 1.
    check("...i,...i->...", "Ai,Ai->A", &[&[1, 4], &[1, 4]]);
    // With a diagonal.
    check("...ii->...i", "Aii->Ai", &[&[2, 3, 3]]);
}

#[test]
fn implicit_output() {
    check("ij,jk", "ij,jk->ik", &[&[3, 4], &[4, 5]]);
    check("ba", "ba->ab", &[&[3, 4]]); // letters sorted: a transpose
    check("ij", "ij->ij", &[&[3, 4]]);
    check("ii", "ii->", &[&[3, 3]]);
    check("iij", "iij->j", &[&[3, 3, 2]]);
    check("i,i", "i,i->", &[&[5], &[5]]);
    check("i,j", "i,j->ij", &[&[2], &[3]]);
    check("j,i", "j,i->ij", &[&[2], &[3]]);
    // ASCII order: capitals first.
    check("bA", "bA->Ab", &[&[2, 3]]);
    check("aB,Bc", "aB,Bc->ac", &[&[2, 3], &[3, 4]]);
    // The ellipsis leads.
    check(
        "...ij,...jk",
        "ABij,ABjk->ABik",
        &[&[2, 3, 4, 5], &[2, 3, 5, 2]],
    );
    check("i...", "iA->Ai", &[&[2, 3]]);
    check("...ji", "Aji->Aij", &[&[2, 3, 4]]);
}

#[test]
fn three_or_more_operands() {
    check("ij,jk,kl->il", "ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]]);
    check("i,i,i->", "i,i,i->", &[&[4], &[4], &[4]]);
    check("i,i,i->i", "i,i,i->i", &[&[4], &[4], &[4]]);
    check(
        "bn,anm,bm->ba",
        "bn,anm,bm->ba",
        &[&[2, 3], &[4, 3, 5], &[2, 5]],
    );
    // Sizes where the greedy order is not left to right.
    check(
        "ab,bc,cd,de->ae",
        "ab,bc,cd,de->ae",
        &[&[6, 2], &[2, 7], &[7, 1], &[1, 6]],
    );
    check("ij,jk,kl", "ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 5]]);
    check(
        "ab,ac,ad->bcd",
        "ab,ac,ad->bcd",
        &[&[3, 2], &[3, 4], &[3, 2]],
    );
    check(
        "...ab,bc,...cd->...ad",
        "Xab,bc,Xcd->Xad",
        &[&[2, 3, 4], &[4, 5], &[2, 5, 3]],
    );
    check("i,j,k->ijk", "i,j,k->ijk", &[&[2], &[3], &[4]]);
}

#[test]
fn scalars() {
    check(",->", ",->", &[&[], &[]]);
    check("i,->i", "i,->i", &[&[3], &[]]);
    check(",ij->ij", ",ij->ij", &[&[], &[2, 3]]);
    check("->", "->", &[&[]]);
    check("", "->", &[&[]]);
    check(",i", ",i->i", &[&[], &[4]]);
    check("...,...->...", "A,->A", &[&[3], &[]]);
}

#[test]
fn spaces_and_empty_axes() {
    check(" ij , jk -> ik ", "ij,jk->ik", &[&[3, 4], &[4, 5]]);
    check("i j,j k", "ij,jk->ik", &[&[3, 4], &[4, 5]]);
    check("ij,jk->ik", "ij,jk->ik", &[&[3, 0], &[0, 5]]); // zeros
    check("ij,jk->ik", "ij,jk->ik", &[&[0, 2], &[2, 5]]);
}

#[test]
fn size_one_indices_broadcast() {
    // As numpy: a letter of size 1 in one operand broadcasts.
    check("i,i->i", "i,i->i", &[&[1], &[4]]);
    check("ij,jk->ik", "ij,jk->ik", &[&[3, 1], &[4, 2]]);
}

#[test]
fn other_dtypes() {
    let a = Tensor::from_slice(&[1i64, -2, 3, 4, 5, -6], &[2, 3]);
    let b = Tensor::from_slice(&[7i64, 8, -9, 10, 11, 12], &[3, 2]);
    let got = nx::einsum("ij,jk->ik", &[&a, &b]);
    // [1*7-2*-9+3*11, 1*8-2*10+3*12; 4*7+5*-9-6*11, 4*8+5*10-6*12]
    assert_eq!(got.to_vec::<i64>(), vec![58, 24, -83, 10]);
    assert_eq!(got.dtype(), DType::I64);
    let s = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]);
    assert_eq!(nx::einsum("ii", &[&s]).item::<i32>(), 5);
    let x = t64(&[3, 4], 9).cast(DType::F32);
    let y = t64(&[4, 2], 10).cast(DType::F32);
    let got = nx::einsum("ij,jk->ki", &[&x, &y]);
    let ops = vec![
        (x.cast(DType::F64).to_vec::<f64>(), vec![3, 4]),
        (y.cast(DType::F64).to_vec::<f64>(), vec![4, 2]),
    ];
    let (want, shape) = naive("ij,jk->ki", &ops);
    assert_eq!(got.dtype(), DType::F32);
    assert_close(&got, &want, &shape, 1e-6, "f32");
}

#[test]
fn non_contiguous_operands() {
    let a = t64(&[4, 3], 11).transpose(); // [3, 4], strided
    let b = t64(&[5, 4], 12)
        .slice(&[nx::Slice::from(..).step(-1)])
        .transpose(); // [4, 5]
    let got = nx::einsum("ij,jk->ik", &[&a, &b]);
    let ops = vec![
        (a.to_vec::<f64>(), vec![3, 4]),
        (b.to_vec::<f64>(), vec![4, 5]),
    ];
    let (want, shape) = naive("ij,jk->ik", &ops);
    assert_close(&got, &want, &shape, 1e-12, "strided");
    let d = t64(&[3, 3], 13).transpose();
    let ops = vec![(d.to_vec::<f64>(), vec![3, 3])];
    let (want, shape) = naive("ii->i", &ops);
    assert_close(
        &nx::einsum("ii->i", &[&d]),
        &want,
        &shape,
        1e-12,
        "strided diag",
    );
}

#[test]
fn errors() {
    let m = t64(&[2, 3], 1);
    let n = t64(&[3, 4], 2);
    let msg = |spec: &str, ops: &[&Tensor]| {
        let spec = spec.to_string();
        let ops: Vec<Tensor> = ops.iter().map(|t| (*t).clone()).collect();
        panic_message(move || {
            let r: Vec<&Tensor> = ops.iter().collect();
            let _ = nx::einsum(&spec, &r);
        })
    };
    let cases: Vec<(String, &str)> = vec![
        (msg("ij-k", &[&m]), "unexpected character '-'"),
        (msg("i#j", &[&m]), "unexpected character '#'"),
        (msg("i.j", &[&m]), "a '.' that is not part of an ellipsis"),
        (msg("......", &[&m]), "more than one ellipsis"),
        (msg("ij->i->j", &[&m]), "more than one '->'"),
        (msg("ij,jk->i,k", &[&m, &n]), "cannot contain ','"),
        (
            msg("ij,jk->ik", &[&m]),
            "has 2 operand term(s) but 1 operand(s) were given",
        ),
        (
            msg("ij", &[&m, &n]),
            "has 1 operand term(s) but 2 operand(s) were given",
        ),
        (
            msg("ijk,jk->ik", &[&m, &n]),
            "operand 0 has rank 2 (shape [2, 3]) but its term \"ijk\" names 3 axes",
        ),
        (
            msg("i...jk", &[&m]),
            "operand 0 has rank 2 (shape [2, 3]) but its term \"i...jk\" names 3 axes besides '...'",
        ),
        (
            msg("ij,kj->ik", &[&m, &n]),
            "index 'j' has size 3 in operand 0 (shape [2, 3]) but size 4 in operand 1 (shape [3, 4])",
        ),
        (
            msg("ii->i", &[&m]),
            "index 'i' is repeated in operand 0 (shape [2, 3]) with different sizes 2 and 3",
        ),
        (
            msg("...i,...i->...i", &[&t64(&[2, 3], 3), &t64(&[4, 3], 4)]),
            "the broadcast (...) axis 0 has size 2 in operand 0",
        ),
        (
            msg("ij,jk->iz", &[&m, &n]),
            "output index 'z' does not appear in any input term",
        ),
        (
            msg("ij,jk->ii", &[&m, &n]),
            "output index 'i' appears more than once",
        ),
        (
            msg("...j->j", &[&m]),
            "have 1 broadcast (...) axes but the output names no '...'",
        ),
        (
            msg("ij,jk", &[&m, &n.cast(DType::F32)]),
            "dtype mismatch: operand 0 is f64 but operand 1 is f32",
        ),
    ];
    for (got, want) in cases {
        assert!(got.starts_with("einsum: "), "{got:?} does not name einsum");
        assert!(got.contains(want), "{got:?} does not contain {want:?}");
    }
    let none = panic_message(|| {
        let _ = nx::einsum("", &[]);
    });
    assert!(
        none.starts_with("einsum: expects at least one operand"),
        "{none}"
    );
}
