//! `einsum`: numpy's Einstein summation, lowered to existing operations.
//!
//! The spec is parsed into one label per axis (letters; the axes an
//! ellipsis covers get labels of their own, right-aligned across operands as
//! numpy broadcasts them). Each operand then takes its diagonals (a repeated
//! label: the axes moved last, merged by a reshape, and sliced with the
//! diagonal's stride), drops its size-1 axes that broadcast against a larger
//! size elsewhere, and sums the labels no other operand and not the output
//! needs. Operands are then contracted two at a time with
//! `Prim::DotGeneral` (labels both share and still needed later are batch
//! dimensions, the others shared ones are contracted), always the pair whose
//! result is smallest first; the last one is summed and permuted into the
//! output's order. Every step is a primitive that differentiates, vmaps and
//! compiles, so einsum does too.

use super::Slice;
use crate::prim::Prim;
use crate::tensor::Tensor;
use crate::trace::bind;

/// A label: a letter's ASCII code, or `ELLIPSIS + i` for the `i`-th axis
/// (from the left) of the broadcast ellipsis.
type Label = u32;
const ELLIPSIS: Label = 1000;

/// One term of the spec: its labels with `None` where the ellipsis goes.
struct Term {
    items: Vec<Option<Label>>,
    has_ellipsis: bool,
}

fn label_name(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("the broadcast (...) axis {}", l - ELLIPSIS)
    } else {
        format!("index '{}'", char::from_u32(l).unwrap_or('?'))
    }
}

fn parse_term(spec: &str, term: &str, what: &str) -> Term {
    let mut items = Vec::new();
    let mut has_ellipsis = false;
    let chars: Vec<char> = term.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() {
            items.push(Some(c as Label));
            i += 1;
        } else if c == '.' {
            if chars.get(i + 1) != Some(&'.') || chars.get(i + 2) != Some(&'.') {
                panic!("einsum: invalid spec {spec:?}: a '.' that is not part of an ellipsis '...' in {what} {term:?}");
            }
            if has_ellipsis {
                panic!("einsum: invalid spec {spec:?}: more than one ellipsis '...' in {what} {term:?}");
            }
            has_ellipsis = true;
            items.push(None);
            i += 3;
        } else {
            panic!(
                "einsum: invalid spec {spec:?}: unexpected character {c:?} in {what} {term:?} \
                 (expected letters a-z, A-Z, '...', ',' and one '->')"
            );
        }
    }
    Term {
        items,
        has_ellipsis,
    }
}

/// Numpy's `einsum`: the Einstein summation `spec` over `operands`.
///
/// The spec names each operand's axes with letters, terms separated by `,`;
/// after `->` come the output's axes. Without `->` the output is every
/// letter that appears exactly once, in alphabetical (ASCII) order. A letter
/// repeated within one term takes that operand's diagonal (`"ii->i"`,
/// `"ii->"` is the trace); a letter missing from the output is summed over.
/// `...` stands for the axes not named, which broadcast across operands as
/// numpy broadcasts (right-aligned, size 1 against any size); without `->`
/// they lead the output, and an explicit output that has broadcast axes to
/// place must name `...` too. Sizes of one letter must agree across
/// operands (or be 1, which broadcasts, as in numpy). Spaces are ignored.
///
/// Lowered to permutes, reshapes, slices (diagonals), sums and
/// `dot_general` (one product per pair of operands, the pair with the
/// smallest result first), so it differentiates, vmaps and compiles.
///
/// Panics (naming `einsum`) on a malformed spec, a number of terms other
/// than the number of operands, a term naming more or fewer axes than its
/// operand has, sizes of one index that disagree, an output index that no
/// input has or that repeats, and operands of different dtypes.
///
/// ```
/// use nx::Tensor;
/// let a = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
/// let b = Tensor::from_slice(&[1.0f32, 0.0, 0.0, 2.0], &[2, 2]);
/// assert_eq!(nx::einsum("ij,jk->ik", &[&a, &b]).to_vec::<f32>(), vec![1.0, 4.0, 3.0, 8.0]);
/// assert_eq!(nx::einsum("ii", &[&a]).item::<f32>(), 5.0); // the trace
/// assert_eq!(nx::einsum("ij", &[&a]).shape(), &[2, 2]); // implicit output ij
/// assert_eq!(nx::einsum("ji", &[&a]).to_vec::<f32>(), vec![1.0, 3.0, 2.0, 4.0]); // implicit ij: a transpose
/// ```
pub fn einsum(spec: &str, operands: &[&Tensor]) -> Tensor {
    let clean: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match clean.find("->") {
        Some(p) => (&clean[..p], Some(&clean[p + 2..])),
        None => (&clean[..], None),
    };
    if let Some(r) = rhs {
        if r.contains("->") {
            panic!("einsum: invalid spec {spec:?}: more than one '->'");
        }
        if r.contains(',') {
            panic!("einsum: invalid spec {spec:?}: the output after '->' cannot contain ','");
        }
    }
    let terms: Vec<Term> = lhs
        .split(',')
        .enumerate()
        .map(|(k, t)| parse_term(spec, t, &format!("the term of operand {k}")))
        .collect();
    if operands.is_empty() {
        panic!("einsum: expects at least one operand, got none (spec {spec:?})");
    }
    if terms.len() != operands.len() {
        panic!(
            "einsum: the spec {spec:?} has {} operand term(s) but {} operand(s) were given",
            terms.len(),
            operands.len()
        );
    }
    let dtype = operands[0].dtype();
    for (k, x) in operands.iter().enumerate() {
        if x.dtype() != dtype {
            panic!(
                "einsum: dtype mismatch: operand 0 is {dtype} but operand {k} is {} \
                 (no implicit promotion; cast one operand first)",
                x.dtype()
            );
        }
    }

    // Ranks and the ellipsis' extent.
    let mut n_ell = vec![0usize; operands.len()];
    for (k, (t, x)) in terms.iter().zip(operands).enumerate() {
        let named = t.items.len() - t.has_ellipsis as usize;
        let term = lhs.split(',').nth(k).unwrap_or("");
        if t.has_ellipsis {
            if x.ndim() < named {
                panic!(
                    "einsum: operand {k} has rank {} (shape {:?}) but its term {term:?} names {named} axes besides '...'",
                    x.ndim(),
                    x.shape()
                );
            }
            n_ell[k] = x.ndim() - named;
        } else if x.ndim() != named {
            panic!(
                "einsum: operand {k} has rank {} (shape {:?}) but its term {term:?} names {named} axes",
                x.ndim(),
                x.shape()
            );
        }
    }
    let e = n_ell.iter().copied().max().unwrap_or(0);

    // One label per axis of each operand.
    let labels: Vec<Vec<Label>> = terms
        .iter()
        .zip(&n_ell)
        .map(|(t, &ne)| {
            let mut out = Vec::new();
            for it in &t.items {
                match it {
                    Some(l) => out.push(*l),
                    None => out.extend((0..ne).map(|i| ELLIPSIS + (e - ne + i) as Label)),
                }
            }
            out
        })
        .collect();

    // Sizes: equal within one operand (diagonals), equal or 1 across operands.
    let mut size: std::collections::BTreeMap<Label, (usize, usize)> = Default::default();
    for (k, (ls, x)) in labels.iter().zip(operands).enumerate() {
        let mut own: std::collections::BTreeMap<Label, usize> = Default::default();
        for (&l, &n) in ls.iter().zip(x.shape()) {
            if let Some(&m) = own.get(&l) {
                if m != n {
                    panic!(
                        "einsum: {} is repeated in operand {k} (shape {:?}) with different sizes {m} and {n}",
                        label_name(l),
                        x.shape()
                    );
                }
            }
            own.insert(l, n);
            match size.get(&l).copied() {
                None => {
                    size.insert(l, (n, k));
                }
                Some((m, j)) => {
                    if m == n || n == 1 {
                    } else if m == 1 {
                        size.insert(l, (n, k));
                    } else {
                        panic!(
                            "einsum: {} has size {m} in operand {j} (shape {:?}) but size {n} in operand {k} (shape {:?})",
                            label_name(l),
                            operands[j].shape(),
                            x.shape()
                        );
                    }
                }
            }
        }
    }
    let size_of = |l: Label| size[&l].0;

    // The output's labels.
    let out_labels: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(spec, r, "the output");
            if e > 0 && !t.has_ellipsis {
                panic!(
                    "einsum: the operands of {spec:?} have {e} broadcast (...) axes but the output names no '...' to place them"
                );
            }
            let mut out = Vec::new();
            for it in &t.items {
                match it {
                    Some(l) => {
                        if out.contains(l) {
                            panic!(
                                "einsum: invalid spec {spec:?}: output {} appears more than once",
                                label_name(*l)
                            );
                        }
                        if !size.contains_key(l) {
                            panic!(
                                "einsum: invalid spec {spec:?}: output {} does not appear in any input term",
                                label_name(*l)
                            );
                        }
                        out.push(*l);
                    }
                    None => out.extend((0..e).map(|i| ELLIPSIS + i as Label)),
                }
            }
            out
        }
        None => {
            let mut out: Vec<Label> = (0..e).map(|i| ELLIPSIS + i as Label).collect();
            for &l in size.keys().filter(|&&l| l < ELLIPSIS) {
                if labels.iter().flatten().filter(|&&m| m == l).count() == 1 {
                    out.push(l);
                }
            }
            out
        }
    };

    // Per operand: diagonals, then size-1 axes that broadcast are dropped.
    let mut ops: Vec<(Tensor, Vec<Label>)> = Vec::with_capacity(operands.len());
    for (x, ls) in operands.iter().zip(&labels) {
        let (mut t, mut ls) = ((*x).clone(), ls.clone());
        while let Some(l) = ls
            .iter()
            .copied()
            .find(|&l| ls.iter().filter(|&&m| m == l).count() > 1)
        {
            (t, ls) = diagonal(&t, &ls, l);
        }
        let drop: Vec<usize> = (0..ls.len())
            .filter(|&a| t.shape()[a] == 1 && size_of(ls[a]) > 1)
            .collect();
        if !drop.is_empty() {
            let shape: Vec<usize> = (0..ls.len())
                .filter(|a| !drop.contains(a))
                .map(|a| t.shape()[a])
                .collect();
            t = t.reshape(&shape);
            ls = (0..ls.len())
                .filter(|a| !drop.contains(a))
                .map(|a| ls[a])
                .collect();
        }
        ops.push((t, ls));
    }

    // Sums of the labels only one operand has and the output does not.
    let needed_elsewhere = |ops: &[(Tensor, Vec<Label>)], skip: &[usize], l: Label| -> bool {
        out_labels.contains(&l)
            || ops
                .iter()
                .enumerate()
                .any(|(k, (_, ls))| !skip.contains(&k) && ls.contains(&l))
    };
    for k in 0..ops.len() {
        let keep: Vec<bool> = ops[k]
            .1
            .iter()
            .map(|&l| needed_elsewhere(&ops, &[k], l))
            .collect();
        let (t, ls) = &ops[k];
        ops[k] = sum_unneeded(t, ls, &keep);
    }

    // Pairwise contractions, the smallest result first.
    while ops.len() > 1 {
        let mut best: Option<(usize, usize, usize)> = None;
        for i in 0..ops.len() {
            for j in i + 1..ops.len() {
                let mut n = 1usize;
                let mut seen = Vec::new();
                for &l in ops[i].1.iter().chain(&ops[j].1) {
                    if !seen.contains(&l) && needed_elsewhere(&ops, &[i, j], l) {
                        seen.push(l);
                        n = n.saturating_mul(size_of(l));
                    }
                }
                if best.is_none_or(|(_, _, m)| n < m) {
                    best = Some((i, j, n));
                }
            }
        }
        let (i, j, _) = best.expect("at least two operands");
        let keep = |l: Label| needed_elsewhere(&ops, &[i, j], l);
        let keep_i: Vec<bool> = ops[i]
            .1
            .iter()
            .map(|&l| keep(l) || ops[j].1.contains(&l))
            .collect();
        let keep_j: Vec<bool> = ops[j]
            .1
            .iter()
            .map(|&l| keep(l) || ops[i].1.contains(&l))
            .collect();
        let (a, la) = sum_unneeded(&ops[i].0, &ops[i].1, &keep_i);
        let (b, lb) = sum_unneeded(&ops[j].0, &ops[j].1, &keep_j);
        let batch: Vec<Label> = la
            .iter()
            .copied()
            .filter(|l| lb.contains(l) && keep(*l))
            .collect();
        let contract: Vec<Label> = la
            .iter()
            .copied()
            .filter(|l| lb.contains(l) && !keep(*l))
            .collect();
        let r = contract_pair(&a, &la, &b, &lb, &batch, &contract);
        ops.remove(j);
        ops.remove(i);
        ops.push(r);
    }

    let (t, ls) = ops.pop().expect("one operand left");
    let keep: Vec<bool> = ls.iter().map(|l| out_labels.contains(l)).collect();
    let (t, ls) = sum_unneeded(&t, &ls, &keep);
    // Into the output's order; labels dropped as broadcast size-1 axes come back.
    let present: Vec<Label> = out_labels
        .iter()
        .copied()
        .filter(|l| ls.contains(l))
        .collect();
    let perm: Vec<isize> = present
        .iter()
        .map(|l| ls.iter().position(|m| m == l).unwrap() as isize)
        .collect();
    let t = t.permute(&perm);
    if present.len() == out_labels.len() {
        return t;
    }
    let ones: Vec<usize> = out_labels
        .iter()
        .map(|l| if ls.contains(l) { size_of(*l) } else { 1 })
        .collect();
    let full: Vec<usize> = out_labels.iter().map(|&l| size_of(l)).collect();
    t.reshape(&ones).broadcast_to(&full)
}

/// The diagonal over every axis labelled `l`: those axes moved last, merged,
/// and sliced with the stride that steps from `[i, i, ..]` to `[i+1, i+1, ..]`.
fn diagonal(t: &Tensor, ls: &[Label], l: Label) -> (Tensor, Vec<Label>) {
    let rest: Vec<usize> = (0..ls.len()).filter(|&a| ls[a] != l).collect();
    let rep: Vec<usize> = (0..ls.len()).filter(|&a| ls[a] == l).collect();
    let perm: Vec<isize> = rest.iter().chain(&rep).map(|&a| a as isize).collect();
    let p = t.permute(&perm);
    let n = t.shape()[rep[0]];
    let merged = n.pow(rep.len() as u32);
    let mut shape: Vec<usize> = rest.iter().map(|&a| t.shape()[a]).collect();
    shape.push(merged);
    let flat = p.reshape(&shape);
    let step = if n > 1 { (merged - 1) / (n - 1) } else { 1 };
    let end = if n == 0 { 0 } else { (n - 1) * step + 1 };
    let mut slices = vec![Slice::all(); rest.len()];
    slices.push(Slice::new(0, Some(end as isize), step as isize));
    let d = flat.slice(&slices);
    let mut out: Vec<Label> = rest.iter().map(|&a| ls[a]).collect();
    out.push(l);
    (d, out)
}

/// Sums the axes whose `keep` is false.
fn sum_unneeded(t: &Tensor, ls: &[Label], keep: &[bool]) -> (Tensor, Vec<Label>) {
    let axes: Vec<isize> = (0..ls.len())
        .filter(|&a| !keep[a])
        .map(|a| a as isize)
        .collect();
    if axes.is_empty() {
        return (t.clone(), ls.to_vec());
    }
    let kept: Vec<Label> = (0..ls.len()).filter(|&a| keep[a]).map(|a| ls[a]).collect();
    (t.sum(&axes, false), kept)
}

/// The product of two operands with distinct labels per operand: `batch`
/// labels are kept and shared, `contract` ones summed; the result's labels
/// are `batch`, then `a`'s free ones, then `b`'s.
fn contract_pair(
    a: &Tensor,
    la: &[Label],
    b: &Tensor,
    lb: &[Label],
    batch: &[Label],
    contract: &[Label],
) -> (Tensor, Vec<Label>) {
    let pos = |ls: &[Label], l: &Label| ls.iter().position(|m| m == l).unwrap();
    if la.is_empty() || lb.is_empty() {
        // A scalar factor: a broadcasting multiply.
        let ls: Vec<Label> = la.iter().chain(lb).copied().collect();
        return (a.mul(b), ls);
    }
    let prim = Prim::DotGeneral {
        lhs_batch: batch.iter().map(|l| pos(la, l)).collect(),
        rhs_batch: batch.iter().map(|l| pos(lb, l)).collect(),
        lhs_contract: contract.iter().map(|l| pos(la, l)).collect(),
        rhs_contract: contract.iter().map(|l| pos(lb, l)).collect(),
    };
    let mut ls: Vec<Label> = batch.to_vec();
    ls.extend(la.iter().filter(|l| !lb.contains(l)));
    ls.extend(lb.iter().filter(|l| !la.contains(l)));
    (bind(prim, &[a, b]), ls)
}
