// Shrinking a failing fuzz program (included by `jit_fuzz.rs`): repeatedly
// tries smaller variants of the program (a truncated tail, an instruction
// bypassed by one of its operands, dead instructions removed, a scan body
// cut short, plain inputs) and keeps each one that still fails, until none
// does. `JIT_FUZZ_SHRINK=seed` (test `shrink_a_failing_seed`) prints the
// smallest program found, the starting point of a hand-written regression
// test.

/// The value operands of `ins` (indices into the enclosing value list).
fn operands(ins: &mut Instr) -> Vec<&mut usize> {
    match ins {
        Instr::Unary(_, a)
        | Instr::Cast(a, _)
        | Instr::Reshape(a, _)
        | Instr::Permute(a, _)
        | Instr::Slice(a, _)
        | Instr::Flip(a, _)
        | Instr::BroadcastTo(a, _)
        | Instr::Expand(a, _)
        | Instr::Unsqueeze(a, _)
        | Instr::Reduce(_, a, _, _)
        | Instr::Take(a, _, _)
        | Instr::SegmentSum(a, _, _)
        | Instr::Pool(_, a, _, _, _) => vec![a],
        Instr::Binary(_, a, b, _) | Instr::Matmul(a, b, _) | Instr::IndexAdd(a, b, _, _, _) => {
            vec![a, b]
        }
        Instr::Where(_, a, b, _, x, _) => vec![a, b, x],
        Instr::Scan(a, xs, _, _) => vec![a, xs],
    }
}

/// `instrs` (over `n_in` leading values) without the instructions nothing
/// in `keep` (value indices) needs, the rest renumbered; `keep` renumbered
/// in place.
fn without_dead(instrs: &[Instr], n_in: usize, keep: &mut [usize]) -> Vec<Instr> {
    let mut live = vec![false; n_in + instrs.len()];
    for &k in keep.iter() {
        live[k] = true;
    }
    for i in (0..instrs.len()).rev() {
        if live[n_in + i] {
            for a in operands(&mut instrs[i].clone()) {
                live[*a] = true;
            }
        }
    }
    let mut new_index = vec![usize::MAX; live.len()];
    for (v, n) in new_index.iter_mut().enumerate().take(n_in) {
        *n = v;
    }
    let mut out = vec![];
    for (i, ins) in instrs.iter().enumerate() {
        if live[n_in + i] {
            let mut ins = ins.clone();
            for a in operands(&mut ins) {
                *a = new_index[*a];
            }
            new_index[n_in + i] = n_in + out.len();
            out.push(ins);
        }
    }
    for k in keep.iter_mut() {
        *k = new_index[*k];
    }
    out
}

/// Whether `p` runs eagerly and differs under jit.
fn still_fails(p: &Prog) -> bool {
    if !eager_ok(p) {
        return false;
    }
    let case = Case { seed: 0, prog: p.clone() };
    !matches!(check_batch(&[&case], "CPU"), Ok(r) if r.iter().all(|x| x.is_ok()))
}

/// `p` with dead instructions dropped (what the outputs, the writeback and,
/// for a gradient, the last value need).
fn pruned(p: &Prog) -> Prog {
    let n_in = p.inputs.len();
    let mut keep: Vec<usize> = p.outputs.clone();
    if let Some((_, v, _)) = &p.assign {
        keep.push(*v);
    }
    if p.grad || keep.is_empty() {
        keep.push(n_in + p.instrs.len() - 1);
    }
    let instrs = without_dead(&p.instrs, n_in, &mut keep);
    let mut q = p.clone();
    q.instrs = instrs;
    let n_out = p.outputs.len();
    q.outputs = keep[..n_out].to_vec();
    if let Some((i, _, f)) = &p.assign {
        q.assign = Some((*i, keep[n_out], f.clone()));
    }
    q
}

/// Smaller variants of `p`, most aggressive first.
fn variants(p: &Prog) -> Vec<Prog> {
    let n_in = p.inputs.len();
    let mut out = vec![];
    // The program cut after instruction k, its value the output.
    for k in 0..p.instrs.len().saturating_sub(1) {
        let mut q = p.clone();
        q.instrs.truncate(k + 1);
        q.outputs = vec![n_in + k];
        q.assign = None;
        out.push(pruned(&q));
    }
    if p.assign.is_some() {
        let mut q = p.clone();
        q.assign = None;
        out.push(pruned(&q));
    }
    if p.grad {
        let mut q = p.clone();
        q.grad = false;
        q.outputs = vec![n_in + p.instrs.len() - 1];
        out.push(q);
    }
    // An instruction replaced by one of its operands, cast to its dtype
    // and reshaped to its shape when the element counts agree.
    if let Ok(vals) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let (args, caps) = leaves(p);
        let (mut a, mut c) = (args.into_iter(), caps.into_iter());
        let all = p
            .inputs
            .iter()
            .map(|i| if i.captured { c.next().unwrap() } else { a.next().unwrap() })
            .collect();
        interpret(p, all)
    })) {
        for k in 0..p.instrs.len() {
            let v = &vals[n_in + k];
            for a in operands(&mut p.instrs[k].clone()) {
                let o = &vals[*a];
                if o.numel() == v.numel() {
                    let mut q = p.clone();
                    q.instrs[k] = if o.shape() == v.shape() {
                        Instr::Cast(*a, v.dtype())
                    } else {
                        Instr::Reshape(*a, v.shape().to_vec())
                    };
                    if o.dtype() != v.dtype() && o.shape() != v.shape() {
                        continue;
                    }
                    out.push(pruned(&q));
                }
            }
        }
    }
    // Scan bodies: cut short, one instruction bypassed, unrolled once.
    for k in 0..p.instrs.len() {
        if let Instr::Scan(a, xs, body, unroll) = &p.instrs[k] {
            for m in 1..body.instrs.len() {
                let mut b = body.clone();
                b.instrs.truncate(m);
                let mut keep = vec![2 + m - 1];
                b.instrs = without_dead(&b.instrs, 2, &mut keep);
                let mut q = p.clone();
                q.instrs[k] = Instr::Scan(*a, *xs, b, *unroll);
                out.push(q);
            }
            if *unroll != 1 {
                let mut q = p.clone();
                q.instrs[k] = Instr::Scan(*a, *xs, body.clone(), 1);
                out.push(q);
            }
        }
    }
    for i in 0..n_in {
        if p.inputs[i].layout != NonContig::No {
            let mut q = p.clone();
            q.inputs[i].layout = NonContig::No;
            out.push(q);
        }
        if p.inputs[i].captured {
            let mut q = p.clone();
            q.inputs[i].captured = false;
            out.push(q);
        }
    }
    out
}

/// The smallest variant of `p` that still fails, by greedy descent.
fn shrink(p: &Prog) -> Prog {
    let mut best = pruned(p);
    if !still_fails(&best) {
        best = p.clone();
    }
    'outer: loop {
        let now = format!("{best:?}");
        for q in variants(&best) {
            if format!("{q:?}") != now && still_fails(&q) {
                best = q;
                continue 'outer;
            }
        }
        return best;
    }
}
