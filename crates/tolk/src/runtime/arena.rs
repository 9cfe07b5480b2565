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

/// Which intermediates live in the arena, and in which slot ("slab").
///
/// A value lives in the arena when a kernel writes it and no output or
/// writeback is it or a view of it. Its lifetime runs from the step that
/// writes it to the last step reading it or any view of it (eager view
/// steps share their source's storage). Slabs are assigned in step order:
/// a value takes the smallest free slab large enough, else grows the
/// largest free one, else opens a new one; a slab is free again after the
/// step where its value dies.
#[derive(Debug, PartialEq)]
pub(crate) struct ArenaLayout {
    /// Per variable: its slab.
    pub slab_of: Vec<Option<usize>>,
    pub slab_bytes: Vec<usize>,
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
        let mut banned = vec![false; n];
        for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
            banned[root[v]] = true;
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
        // A value of 64 KiB or more live across more than a quarter of the
        // program (and 16 steps) takes a fresh buffer, dropped at its last
        // use, instead of a slot: the arena's slots are live for the whole
        // call, so a forward activation kept for the backward pass would
        // hold its slot while the gradients (outputs, never in the arena)
        // accumulate; freed, its memory goes to them. (The jitted grad of
        // M1's 32 tanh layers peaked at 0.95x of eager with every activation
        // in the arena, 0.61x so.) Small values stay: their memory is
        // nothing, and a fresh buffer costs an allocation per call (the
        // 100-op chain's grad has dozens).
        let long = (plan.steps.len() / 4).max(16);
        const LONG_MIN_BYTES: usize = 64 << 10;
        let mut start = vec![usize::MAX; n];
        for (s, step) in plan.steps.iter().enumerate() {
            for &v in written_in_place(g, step) {
                start[v] = start[v].min(s);
            }
        }
        for v in 0..n {
            let bytes = g.aval(v).numel() * g.aval(v).dtype.size_in_bytes();
            if start[v] != usize::MAX
                && end[v].saturating_sub(start[v]) > long
                && bytes >= LONG_MIN_BYTES
            {
                banned[v] = true;
            }
        }
        let mut slab_of = vec![None; n];
        let mut slab_bytes: Vec<usize> = Vec::new();
        // Free slabs by size: best fit is the first at least as large.
        let mut free: std::collections::BTreeSet<(usize, usize)> = Default::default();
        let mut dies: Vec<Vec<usize>> = vec![Vec::new(); plan.steps.len()];
        for (s, step) in plan.steps.iter().enumerate() {
            for &v in written_in_place(g, step) {
                if !banned[v] {
                    let a = g.aval(v);
                    let bytes = a.numel() * a.dtype.size_in_bytes();
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
                    slab_of[v] = Some(slab);
                    dies[end[v].max(s)].push(slab);
                }
            }
            for slab in dies[s].drain(..) {
                free.insert((slab_bytes[slab], slab));
            }
        }
        ArenaLayout {
            slab_of,
            slab_bytes,
        }
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

    /// A large value live across most of the program gets a fresh buffer
    /// (freed at its last use) instead of a slot held for the whole call; a
    /// small one stays in the arena.
    #[test]
    fn long_lived_large_values_are_fresh_buffers() {
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
        assert_eq!(
            a.slab_of[big], None,
            "256 KiB live across the program: fresh"
        );
        assert!(a.slab_of[small].is_some(), "64 bytes stay in the arena");
        assert!(
            a.slab_of[chain].is_some(),
            "short-lived values stay in the arena"
        );
    }
}
