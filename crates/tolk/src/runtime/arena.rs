//! The arena's memory planner: which of a program's intermediates live in
//! its one preallocated buffer, and in which slot (`ArenaLayout`), by
//! lifetime, at compile time.

use crate::graph::{Graph, Op, Var};
use crate::plan::{Plan, Step};
use nx::Prim;

/// The values step `step` writes into memory the runtime hands it: a
/// kernel's outputs, a product's (written by `nx::raw::dot_general_to`), so
/// that both live in the arena. Other library steps return fresh tensors.
pub(super) fn written_in_place<'a>(g: &'a Graph, step: &'a Step) -> &'a [Var] {
    match step {
        Step::Kernel { outs, .. } => outs,
        Step::Library { eqn } => match &g.eqns[*eqn].op {
            Op::Prim(Prim::DotGeneral { .. }) => &g.eqns[*eqn].outs,
            _ => &[],
        },
    }
}

/// The values step `step` writes that the arena planner places: those
/// [`written_in_place`], and a loop's outputs (its final carries and
/// stacked per-step outputs, which the loop interpreter writes into the
/// buffers the runtime hands it).
fn planned<'a>(g: &'a Graph, step: &'a Step) -> &'a [Var] {
    match step {
        Step::Library { eqn } if matches!(g.eqns[*eqn].op, Op::Loop(_)) => &g.eqns[*eqn].outs,
        _ => written_in_place(g, step),
    }
}

/// Which intermediates live in the arena, and in which slot ("slab").
///
/// A value lives in the arena when a kernel, a product or a loop writes it
/// and no output or writeback is it or a view of it. Its lifetime runs
/// from the step that writes it to the last step reading it or any view of
/// it (eager view steps share their source's storage). Slabs are assigned
/// in step order: a value takes the smallest free slab large enough, else
/// grows the largest free one, else opens a new one; a slab is free again
/// after the step where its value dies. A loop step also takes, per carry,
/// a slab for the second buffer its steps write alternately with the
/// carry's final one (`carry_scratch`), free again after the loop.
///
/// Values of 64 KiB or more live across more than a quarter of the program
/// (forward activations and a loop's stacked residuals kept for the
/// backward pass) are held in slots too when that costs no memory: the
/// planner lays the program out both ways, those values in slots (the
/// program holds their memory between calls, and a call hands out nothing
/// but its outputs) or as fresh buffers dropped at their last use (whose
/// memory the outputs computed after that reuse), and keeps slots unless
/// the arena plus the call's peak of fresh buffers is then larger by an
/// eighth or more (M1's grad: its 32 activations' memory becomes its 32
/// gradients').
#[derive(Debug, PartialEq)]
pub(crate) struct ArenaLayout {
    /// Per variable: its slab.
    pub slab_of: Vec<Option<usize>>,
    pub slab_bytes: Vec<usize>,
    /// Per step: a loop step's scratch slab per carry (empty for others).
    pub carry_scratch: Vec<Vec<usize>>,
    /// Whether the long-lived large values are in slots (see above).
    pub holds_long: bool,
    /// The arena's bytes plus the peak bytes of fresh buffers (outputs
    /// included) one call is expected to hold at once, as planned.
    pub footprint: usize,
}

/// A value's bytes.
fn bytes_of(g: &Graph, v: Var) -> usize {
    let a = g.aval(v);
    a.numel() * a.dtype.size_in_bytes()
}

impl ArenaLayout {
    pub(crate) fn new(g: &Graph, plan: &Plan) -> ArenaLayout {
        let n = g.avals.len();
        if !crate::build::sanitize_flags().is_empty() {
            // Sanitized builds (fuzzing) give every value its own
            // allocation, so that AddressSanitizer sees each buffer's ends.
            return ArenaLayout {
                slab_of: vec![None; n],
                slab_bytes: Vec::new(),
                carry_scratch: vec![Vec::new(); plan.steps.len()],
                holds_long: false,
                footprint: 0,
            };
        }
        // The storage each value is a view of (itself unless a view step).
        let mut root: Vec<Var> = (0..n).collect();
        for step in &plan.steps {
            if let Step::Library { eqn } = step {
                let e = &g.eqns[*eqn];
                if e.as_prim()
                    .is_some_and(|p| p.class() == nx::PrimClass::View)
                {
                    root[e.out()] = root[e.inputs[0]];
                }
            }
        }
        let mut returned = vec![false; n];
        for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
            returned[root[v]] = true;
        }
        let mut end = vec![0usize; n];
        for (s, step) in plan.steps.iter().enumerate() {
            let reads: &[Var] = match step {
                Step::Kernel { args, .. } => args,
                Step::Library { eqn } => &g.eqns[*eqn].inputs,
            };
            for &v in reads {
                end[root[v]] = s;
            }
        }
        // Long-lived large values: 64 KiB or more, live across more than a
        // quarter of the program (and 16 steps). Small values always stay
        // in slots: their memory is nothing, and a fresh buffer costs an
        // allocation per call (the 100-op chain's grad has dozens).
        let long = (plan.steps.len() / 4).max(16);
        const LONG_MIN_BYTES: usize = 64 << 10;
        let mut start = vec![usize::MAX; n];
        for (s, step) in plan.steps.iter().enumerate() {
            for &v in planned(g, step) {
                start[v] = start[v].min(s);
            }
        }
        let mut fresh_long = returned.clone();
        for v in 0..n {
            if start[v] != usize::MAX
                && end[v].saturating_sub(start[v]) > long
                && bytes_of(g, v) >= LONG_MIN_BYTES
            {
                fresh_long[v] = true;
            }
        }
        let held = assign(g, plan, &end, &returned, &returned, true);
        if fresh_long == returned {
            return held;
        }
        let fresh = assign(g, plan, &end, &fresh_long, &returned, false);
        // Fresh buffers cost new storage every call: take them only for a
        // real saving, an eighth of the call's memory or more (M1's grad
        // saves about half; W17's step would save only its outputs' 24 KiB
        // of 1.7 MB).
        if fresh.footprint + held.footprint / 8 > held.footprint {
            held
        } else {
            fresh
        }
    }
}

/// A slab for `bytes`: the smallest free one large enough, else the
/// largest free one grown, else a new one.
fn take(
    bytes: usize,
    free: &mut std::collections::BTreeSet<(usize, usize)>,
    slab_bytes: &mut Vec<usize>,
) -> usize {
    let pick = free
        .range((bytes, 0)..)
        .next()
        .or_else(|| free.last())
        .copied();
    let slab = match pick {
        Some(k) => {
            free.remove(&k);
            k.1
        }
        None => {
            slab_bytes.push(0);
            slab_bytes.len() - 1
        }
    };
    slab_bytes[slab] = slab_bytes[slab].max(bytes);
    slab
}

/// The layout with the values `banned` (outputs and writebacks, which are
/// `returned`, and maybe the long-lived ones) as fresh buffers, and its
/// footprint: the arena plus the peak of fresh buffers live at once
/// during a call (every value some step writes outside the arena, held
/// until its last use, or until the call ends when `returned`; eager view
/// steps allocate nothing).
fn assign(
    g: &Graph,
    plan: &Plan,
    end: &[usize],
    banned: &[bool],
    returned: &[bool],
    holds_long: bool,
) -> ArenaLayout {
    let n = g.avals.len();
    let mut slab_of = vec![None; n];
    let mut slab_bytes: Vec<usize> = Vec::new();
    let mut carry_scratch = vec![Vec::new(); plan.steps.len()];
    // Free slabs by size: best fit is the first at least as large.
    let mut free: std::collections::BTreeSet<(usize, usize)> = Default::default();
    let mut dies: Vec<Vec<usize>> = vec![Vec::new(); plan.steps.len()];
    // Fresh buffers: bytes live now, and bytes released after each step.
    let (mut live, mut peak) = (0usize, 0usize);
    let mut released = vec![0usize; plan.steps.len()];
    for (s, step) in plan.steps.iter().enumerate() {
        for &v in planned(g, step) {
            if !banned[v] {
                let slab = take(bytes_of(g, v), &mut free, &mut slab_bytes);
                slab_of[v] = Some(slab);
                dies[end[v].max(s)].push(slab);
            }
        }
        if let Step::Library { eqn } = step {
            let e = &g.eqns[*eqn];
            if let Op::Loop(lp) = &e.op {
                for &c in &e.outs[..lp.n_carry] {
                    let slab = take(bytes_of(g, c), &mut free, &mut slab_bytes);
                    carry_scratch[s].push(slab);
                    dies[s].push(slab);
                }
            }
        }
        let writes: &[Var] = match step {
            Step::Kernel { outs, .. } => outs,
            Step::Library { eqn } => {
                let e = &g.eqns[*eqn];
                if e.as_prim()
                    .is_some_and(|p| p.class() == nx::PrimClass::View)
                {
                    &[]
                } else {
                    &e.outs
                }
            }
        };
        for &v in writes {
            if slab_of[v].is_none() {
                live += bytes_of(g, v);
                if !returned[v] {
                    released[end[v].max(s)] += bytes_of(g, v);
                }
            }
        }
        peak = peak.max(live);
        live -= released[s];
        for slab in dies[s].drain(..) {
            free.insert((slab_bytes[slab], slab));
        }
    }
    let arena: usize = slab_bytes.iter().map(|b| b.next_multiple_of(64)).sum();
    ArenaLayout {
        slab_of,
        slab_bytes,
        carry_scratch,
        holds_long,
        footprint: arena + peak,
    }
}
#[cfg(test)]
mod tests {
    use super::super::tests::kernel;
    use super::*;
    use crate::graph::Eqn;
    use nx::{Aval, DType};

    /// Every pair of arena values alive at the same step has distinct slabs,
    /// each slab fits its values, and dead values' slabs are reused.
    #[test]
    fn arena_reuses_dead_slabs_and_never_overlaps_live_values() {
        let mut g = Graph::default();
        let f = |n: usize| Aval::new(&[n], DType::F32);
        let x = g.new_var(f(256));
        let v1 = g.new_var(f(256));
        let v2 = g.new_var(f(256));
        let v3 = g.new_var(f(64));
        let view = g.new_var(Aval::new(&[16, 16], DType::F32));
        let v4 = g.new_var(f(512));
        let out = g.new_var(f(512));
        g.inputs = vec![x];
        // v1 is read through an eager view (a reshape) at the last step.
        g.eqns.push(Eqn::prim(
            nx::Prim::Reshape {
                shape: vec![16, 16],
            },
            vec![v1],
            view,
        ));
        g.outputs = vec![out];
        let steps = vec![
            kernel(v1, &[x]),         // 0
            kernel(v2, &[v1]),        // 1
            Step::Library { eqn: 0 }, // 2: view = reshape(v1)
            kernel(v3, &[v2]),        // 3: v2 dies here
            kernel(v4, &[v3]),        // 4: v3 dies here; may reuse v2's slab (grown)
            kernel(out, &[v4, view]), // 5: v1 (through its view) and v4 die
        ];
        let plan = Plan {
            frees: vec![Vec::new(); steps.len()],
            steps,
        };
        let a = ArenaLayout::new(&g, &plan);
        assert_eq!(a.slab_of[x], None, "inputs are not in the arena");
        assert_eq!(a.slab_of[out], None, "outputs are fresh buffers");
        let live = [(v1, 0, 5), (v2, 1, 3), (v3, 3, 4), (v4, 4, 5)];
        for &(v, ..) in &live {
            let s = a.slab_of[v].expect("kernel intermediates are in the arena");
            assert!(a.slab_bytes[s] >= g.aval(v).numel() * 4);
        }
        for &(u, us, ue) in &live {
            for &(v, vs, ve) in &live {
                if u < v && us <= ve && vs <= ue {
                    assert_ne!(a.slab_of[u], a.slab_of[v], "{u} and {v} overlap in time");
                }
            }
        }
        assert_eq!(
            a.slab_bytes.len(),
            3,
            "four values, at most three alive at once"
        );
    }

    /// A large value live across most of the program stays in its slot
    /// when a fresh buffer would save no memory (nothing computed after its
    /// last use could take it): a call then allocates only its outputs.
    #[test]
    fn long_lived_large_values_stay_in_slots_when_fresh_saves_nothing() {
        let mut g = Graph::default();
        let f = |n: usize| Aval::new(&[n], DType::F32);
        let x = g.new_var(f(1 << 16));
        let big = g.new_var(f(1 << 16)); // 256 KiB
        let small = g.new_var(f(16));
        let out = g.new_var(f(1 << 16));
        g.inputs = vec![x];
        g.outputs = vec![out];
        let mut steps = vec![kernel(big, &[x]), kernel(small, &[x])];
        // 40 steps between the definitions and the last uses.
        let mut chain = x;
        for _ in 0..40 {
            let t = g.new_var(f(1 << 16));
            steps.push(kernel(t, &[chain]));
            chain = t;
        }
        steps.push(kernel(out, &[chain, big, small]));
        let plan = Plan {
            frees: vec![Vec::new(); steps.len()],
            steps,
        };
        let a = ArenaLayout::new(&g, &plan);
        assert!(a.holds_long);
        assert!(a.slab_of[big].is_some(), "256 KiB held: no saving fresh");
        assert!(a.slab_of[small].is_some() && a.slab_of[chain].is_some());
        assert_eq!(a.slab_of[out], None, "outputs are fresh buffers");
    }

    /// Forward activations kept for a backward pass whose gradients are
    /// the outputs (M1's grad) take fresh buffers, freed at their last use,
    /// instead of slots held for the whole call: the gradients then reuse
    /// their memory, about half the call's. Small and short-lived values
    /// stay in the arena.
    #[test]
    fn long_lived_large_values_are_fresh_buffers_when_that_saves_memory() {
        let mut g = Graph::default();
        let f = |n: usize| Aval::new(&[n], DType::F32);
        let k = 32;
        let x = g.new_var(f(1 << 16));
        let small = g.new_var(f(16));
        let mut steps = vec![kernel(small, &[x])];
        let mut acts = Vec::new();
        let mut h = x;
        for _ in 0..k {
            let a = g.new_var(f(1 << 16)); // 256 KiB each
            steps.push(kernel(a, &[h]));
            acts.push(a);
            h = a;
        }
        let mut cot = small;
        for &a in acts.iter().rev() {
            let grad = g.new_var(f(1 << 16));
            steps.push(kernel(grad, &[a, cot]));
            g.outputs.push(grad);
            cot = grad;
        }
        g.inputs = vec![x];
        let plan = Plan {
            frees: vec![Vec::new(); steps.len()],
            steps,
        };
        let a = ArenaLayout::new(&g, &plan);
        assert!(!a.holds_long);
        assert_eq!(a.slab_of[acts[0]], None, "live across the program: fresh");
        assert!(a.slab_of[small].is_some(), "64 bytes stay in the arena");
        assert!(
            a.slab_of[acts[k - 1]].is_some(),
            "short-lived values stay in the arena"
        );
        // Held: 32 activations and 32 gradients in all; fresh, the
        // gradients take the memory of the 8 activations that are long
        // enough to leave the arena (41 at most at once).
        assert!(a.footprint < 48 * (1 << 18), "{}", a.footprint);
    }
}
