//! Property tests: random shapes (rank 0-4, dims 0-5) and random chains of
//! views (permutations, slices with positive and negative steps, flips,
//! broadcasts, reshapes, narrowing) checked against reference arrays with
//! their own index math; broadcasting binary operations and the movement
//! operations on such views; writes through views.
//!
//! The base tensors hold their own flat index as value, so a reference view
//! says, for each element, which base element it is.

mod common;

use common::refs as r;
use common::RefArray;
use nx::{DType, Slice, Tensor};
use proptest::prelude::*;

/// One random step of a view chain; its numbers are interpreted modulo the
/// current shape, so that every generated program is valid.
#[derive(Clone, Debug)]
struct Step {
    kind: u8,
    a: u32,
    b: u32,
    c: u32,
}

fn step() -> impl Strategy<Value = Step> {
    (0u8..9, any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(kind, a, b, c)| Step {
        kind,
        a,
        b,
        c,
    })
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    // Zero-size axes are rarer than the others, so that most cases have data.
    let dim = prop_oneof![1 => Just(0usize), 8 => 1usize..=5];
    prop::collection::vec(dim, 0..=4)
}

/// A view program: base shape, steps, and whether the base is i32 or f64.
fn program() -> impl Strategy<Value = (Vec<usize>, Vec<Step>, bool)> {
    (shape(), prop::collection::vec(step(), 0..6), any::<bool>())
}

/// Base tensor whose elements are their flat index.
fn base(shape: &[usize], int: bool) -> (Tensor, RefArray) {
    let n: usize = shape.iter().product();
    let dtype = if int { DType::I32 } else { DType::F64 };
    let vals: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let t = common::tensor(dtype, shape, &vals);
    let rf = RefArray::from_f64s(dtype, shape, vals);
    (t, rf)
}

fn permutation(n: usize, mut seed: u32) -> Vec<isize> {
    let mut p: Vec<isize> = (0..n as isize).collect();
    for i in (1..n).rev() {
        seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
        let j = (seed >> 8) as usize % (i + 1);
        p.swap(i, j);
    }
    p
}

fn slice_for(n: usize, a: u32, b: u32, c: u32) -> Slice {
    let m = 2 * n as u32 + 3;
    let start = (a % m) as isize - (n as isize + 1);
    let end = if b.is_multiple_of(4) {
        None
    } else {
        Some(((b / 4) % m) as isize - (n as isize + 1))
    };
    let steps = [1, 2, 3, -1, -2, -3, 1, -1];
    Slice::new(start, end, steps[(c % 8) as usize])
}

/// Applies `s` to both the tensor and its reference. `views_only` restricts
/// to steps that stay writable views (no broadcast, no reshape).
fn apply(t: &Tensor, rf: &RefArray, s: &Step, views_only: bool) -> (Tensor, RefArray) {
    let n = t.ndim();
    let shape = t.shape().to_vec();
    match s.kind {
        0 if n > 0 => {
            let p = permutation(n, s.a);
            (t.permute(&p), r::permute(rf, &p))
        }
        1 if n > 0 => {
            let k = (s.a as usize) % (n + 1);
            let sl: Vec<Slice> = (0..k)
                .map(|i| {
                    let m = |x: u32| x.rotate_left(7 * i as u32 + 3);
                    slice_for(
                        shape[i],
                        m(s.a) ^ s.b,
                        m(s.b) ^ s.c,
                        m(s.c).wrapping_add(i as u32),
                    )
                })
                .collect();
            (t.slice(&sl), r::slice(rf, &sl))
        }
        2 if n > 0 => {
            let axes: Vec<isize> = (0..n)
                .filter(|i| s.a >> i & 1 == 1)
                .map(|i| i as isize)
                .collect();
            (t.flip(&axes), r::flip(rf, &axes))
        }
        3 if !views_only && n < 5 => {
            // Insert a new axis, or stretch an existing size-1 axis.
            let mut target = shape.clone();
            let ones: Vec<usize> = (0..n).filter(|&i| shape[i] == 1).collect();
            if !ones.is_empty() && s.b.is_multiple_of(2) {
                target[ones[(s.a as usize) % ones.len()]] = 1 + (s.c % 3) as usize;
            } else {
                target.insert(0, (s.c % 4) as usize);
            }
            (t.broadcast_to(&target), r::broadcast_to(rf, &target))
        }
        4 if !views_only => {
            // Merge two neighbours, or split one axis by a divisor.
            let mut target = shape.clone();
            if n >= 2 && s.b.is_multiple_of(2) {
                let i = (s.a as usize) % (n - 1);
                let m = target.remove(i + 1);
                target[i] *= m;
            } else if n > 0 && n < 5 {
                let i = (s.a as usize) % n;
                let len = target[i];
                let divs: Vec<usize> = (1..=len.max(1))
                    .filter(|&d| len == 0 || len.is_multiple_of(d))
                    .collect();
                let d = divs[(s.c as usize) % divs.len()];
                target[i] = if len == 0 { 0 } else { len / d };
                target.insert(i, d);
            } else {
                target = vec![t.numel()];
            }
            (t.reshape(&target), r::reshape(rf, &target))
        }
        5 if n > 0 => {
            let ax = (s.a as usize) % n;
            let len = shape[ax];
            if len > 0 && s.b.is_multiple_of(3) {
                let i = (s.c as usize) % len;
                (
                    t.swapaxes(0, ax as isize).get(i),
                    r::get(&r::swapaxes(rf, 0, ax as isize), i),
                )
            } else {
                let start = (s.b as usize) % (len + 1);
                let l = (s.c as usize) % (len - start + 1);
                (
                    t.narrow(ax as isize - n as isize, start, l),
                    r::narrow(rf, ax as isize, start, l),
                )
            }
        }
        6 if n > 0 => {
            let (x, y) = ((s.a as usize % n) as isize, (s.b as usize % n) as isize);
            if s.c.is_multiple_of(3) {
                (t.transpose(), r::transpose(rf))
            } else if s.c % 3 == 1 {
                (t.swapaxes(x, -1 - y), r::swapaxes(rf, x, -1 - y))
            } else {
                (t.moveaxis(x, y), r::moveaxis(rf, x, y))
            }
        }
        7 => {
            // squeeze a size-1 axis, or unsqueeze.
            let ones: Vec<usize> = (0..n).filter(|&i| shape[i] == 1).collect();
            if !ones.is_empty() && s.b.is_multiple_of(2) {
                let ax = ones[(s.a as usize) % ones.len()] as isize;
                (t.squeeze(ax), r::squeeze(rf, ax))
            } else if n < 5 {
                let ax = (s.a as usize % (n + 1)) as isize;
                (t.unsqueeze(ax), r::unsqueeze(rf, ax))
            } else {
                (t.clone(), rf.clone())
            }
        }
        _ => (t.clone(), rf.clone()),
    }
}

fn build(
    shape: &[usize],
    steps: &[Step],
    int: bool,
    views_only: bool,
) -> (Tensor, RefArray, Tensor) {
    let (b, rb) = base(shape, int);
    let (mut t, mut rf) = (b.clone(), rb);
    for s in steps {
        let (t2, r2) = apply(&t, &rf, s, views_only);
        t = t2;
        rf = r2;
    }
    (t, rf, b)
}

fn exact() -> common::Tol {
    common::Tol::for_dtype(DType::F64, 0.0)
}

/// A shape broadcast-compatible with `shape`: some axes set to 1, some
/// leading axes dropped, maybe extra leading axes.
fn compatible_shape(shape: &[usize], seed: u32) -> Vec<usize> {
    let mut out: Vec<usize> = shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if seed >> i & 1 == 1 { 1 } else { d })
        .collect();
    let drop = (seed >> 8) as usize % (out.len() + 1);
    out.drain(..drop);
    if drop == 0 && (seed >> 12).is_multiple_of(4) && shape.len() < 4 {
        out.insert(0, 1 + (seed >> 14) as usize % 3);
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn view_chains_match_the_reference((shape, steps, int) in program()) {
        let (t, rf, _) = build(&shape, &steps, int, false);
        common::assert_matches(&t, &rf, &exact(), "view chain");
        common::assert_matches(&t.contiguous(), &rf, &exact(), "contiguous");
        let c = t.copy();
        prop_assert!(c.is_contiguous());
        common::assert_matches(&c, &rf, &exact(), "copy");
        common::assert_matches(&t.flatten(), &r::reshape(&rf, &[rf.numel()]), &exact(), "flatten");
        // Elementwise on the view reads it through its strides.
        let neg = t.neg();
        common::assert_matches(&neg, &r::map_num(&rf, |x| -x, |x| -x), &exact(), "neg of view");
    }

    #[test]
    fn broadcasting_binary_ops_on_views((shape, steps, int) in program(), seed in any::<u32>(), flip_y in any::<bool>()) {
        let (x, rx, _) = build(&shape, &steps, int, false);
        let ys = compatible_shape(x.shape(), seed);
        let (yb, ryb) = base(&ys, int);
        // y itself a (negative-stride) view when asked.
        let (y, ry) = if flip_y && !ys.is_empty() {
            let all: Vec<isize> = (0..ys.len() as isize).collect();
            let f = yb.flip(&all).copy().flip(&all);
            (f, ryb)
        } else {
            (yb, ryb)
        };
        let y = &y + 1.0;
        let ry = r::map_num(&ry, |v| v + 1.0, |v| v + 1);
        let t = exact();
        common::assert_matches(&(&x + &y), &r::zip_num(&rx, &ry, |a, b| a + b, |a, b| a + b), &t, "x + y");
        common::assert_matches(&(&y - &x), &r::zip_num(&ry, &rx, |a, b| a - b, |a, b| a - b), &t, "y - x");
        common::assert_matches(&x.mul(&y), &r::zip_num(&rx, &ry, |a, b| a * b, |a, b| a * b), &t, "x * y");
        common::assert_matches(&x.maximum(&y), &r::zip_num(&rx, &ry, r::fmax, |a, b| a.max(b)), &t, "maximum");
        common::assert_matches(&x.less(&y), &r::zip_pred(&rx, &ry, |a, b| a < b, |a, b| a < b), &t, "less");
        let cond = x.greater(&(&x * 0.0 + 3.0));
        let rc = r::map_pred(&rx, |v| v > 3.0, |v| v > 3);
        common::assert_matches(&Tensor::where_(&cond, &y, &x), &r::where_(&rc, &ry, &rx), &t, "where_");
        let joint = r::broadcast_shapes(&ry.shape, &rx.shape);
        common::assert_matches(&y.broadcast_to(&joint), &r::broadcast_to(&ry, &joint), &t, "broadcast_to");
    }

    #[test]
    fn writes_through_views_land_in_the_base((shape, steps, int) in program(), seed in any::<u32>()) {
        // The view's reference values are base indices: element k of the view
        // is base element rf[k].
        let (v, rf, b) = build(&shape, &steps, int, true);
        let m = v.numel();
        let src_vals: Vec<f64> = (0..m).map(|k| 1000.0 + k as f64 + (seed % 7) as f64).collect();
        let src = common::tensor(v.dtype(), v.shape(), &src_vals);
        v.assign(&src);
        let mut want: Vec<f64> = (0..b.numel()).map(|i| i as f64).collect();
        for k in 0..m {
            want[rf.get_f64(k) as usize] = src_vals[k];
        }
        let want = RefArray::from_f64s(b.dtype(), b.shape(), want);
        common::assert_matches(&b, &want, &exact(), "base after assign");
        common::assert_matches(&v, &RefArray::from_f64s(v.dtype(), v.shape(), src_vals), &exact(), "view after assign");
    }

    #[test]
    fn self_overlapping_assign_reads_before_writing((shape, steps, int) in program(), axes_mask in any::<u8>()) {
        let (v, rf, _) = build(&shape, &steps, int, true);
        let axes: Vec<isize> = (0..v.ndim()).filter(|i| axes_mask >> i & 1 == 1).map(|i| i as isize).collect();
        v.assign(&v.flip(&axes));
        common::assert_matches(&v, &r::flip(&rf, &axes), &exact(), "x.assign(x.flip)");
    }

    #[test]
    fn reshape_of_any_view_is_row_major((shape, steps, int) in program(), seed in any::<u32>()) {
        let (t, rf, _) = build(&shape, &steps, int, false);
        let n = t.numel();
        // A random factorization of n into up to 3 factors.
        let divs: Vec<usize> = (1..=n.max(1)).filter(|&d| n == 0 || n.is_multiple_of(d)).collect();
        let d1 = divs[seed as usize % divs.len()];
        let target = if n == 0 { vec![d1, 0] } else { vec![d1, n / d1] };
        common::assert_matches(&t.reshape(&target), &r::reshape(&rf, &target), &exact(), "reshape");
        if n > 0 {
            let rest = n / d1;
            let divs2: Vec<usize> = (1..=rest).filter(|&d| rest.is_multiple_of(d)).collect();
            let d2 = divs2[(seed >> 16) as usize % divs2.len()];
            let target = vec![d1, d2, rest / d2];
            common::assert_matches(&t.reshape(&target), &r::reshape(&rf, &target), &exact(), "reshape 3");
        }
    }

    #[test]
    fn composites_on_views((shape, steps, int) in program(), seed in any::<u64>()) {
        let (t, rf, _) = build(&shape, &steps, int, false);
        let n = t.ndim();
        let e = exact();
        let rnd = |k: u32| ((seed >> (k * 5)) & 31) as usize;
        // pad every axis
        let pads: Vec<(usize, usize)> = (0..n).map(|i| (rnd(i as u32) % 3, rnd(i as u32 + 6) % 2)).collect();
        common::assert_matches(&t.pad(&pads, 9.0), &r::pad(&rf, &pads, 9.0), &e, "pad");
        common::assert_matches(&Tensor::stack(&[t.clone(), t.neg()], 0), &r::stack(&[rf.clone(), r::map_num(&rf, |v| -v, |v| -v)], 0), &e, "stack 0");
        common::assert_matches(&Tensor::stack(&[t.clone(), t.clone()], -1), &r::stack(&[rf.clone(), rf.clone()], -1), &e, "stack -1");
        common::assert_matches(&t.tile(&[1 + rnd(1) % 2, rnd(2) % 3]), &r::tile(&rf, &[1 + rnd(1) % 2, rnd(2) % 3]), &e, "tile");
        if n > 0 {
            let ax = rnd(3) % n;
            let axi = ax as isize - if rnd(4).is_multiple_of(2) { n as isize } else { 0 };
            let len = t.shape()[ax];
            common::assert_matches(&Tensor::concatenate(&[t.clone(), t.flip(&[axi]), t.narrow(axi, 0, len / 2)], axi),
                &r::concatenate(&[rf.clone(), r::flip(&rf, &[axi]), r::narrow(&rf, axi, 0, len / 2)], axi), &e, "concatenate");
            let k = rnd(5) % 3;
            common::assert_matches(&t.repeat(k, axi), &r::repeat(&rf, k, axi), &e, "repeat");
            let shift = rnd(6) as isize - 15;
            common::assert_matches(&t.roll(shift, axi), &r::roll(&rf, shift, axi), &e, "roll");
            // split into random sizes summing to len
            let mut sizes = vec![];
            let mut left = len;
            let mut j = 7;
            while left > 0 {
                let s = 1 + rnd(j) % left;
                sizes.push(s);
                left -= s;
                j += 1;
                if j > 11 { sizes.push(left); left = 0; }
            }
            let got = t.split(&sizes, axi);
            let want = r::split(&rf, &sizes, axi);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                common::assert_matches(g, w, &e, "split");
            }
            let nch = 1 + rnd(12) % 4;
            let got = t.chunk(nch, axi);
            let want = common::table::chunk_ref(&rf, nch, axi);
            prop_assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                common::assert_matches(g, w, &e, "chunk");
            }
        }
    }
}
