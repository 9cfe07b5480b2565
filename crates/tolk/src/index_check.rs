//! The index checks of gathers and scatter-adds compiled into kernels:
//! a kernel reads `x[.., idx[p], ..]` with no bounds check of its own (it
//! cannot raise halfway), so every runtime that runs one (the CPU's,
//! [`crate::runtime`], and the device's, [`crate::device::exec`]) checks
//! the indices before any kernel runs and raises what eager raises.

use crate::graph::{Graph, Var};
use crate::plan::{Plan, Step};
use nx::{Prim, Tensor};

/// The indices of a gather or scatter-add compiled into a kernel, which
/// reads `x[.., idx[p], ..]` (or adds there) with no bounds check of its
/// own: they are a program input or constant seen through views (`fuse`
/// compiles no other), so the runtime checks them before any kernel runs
/// and raises what the eager kernel raises (its first index out of range,
/// in row-major order).
#[derive(Clone, Debug)]
pub struct IndexCheck {
    /// The primitive, as eager names it: `gather` or `scatter_add`.
    pub op: &'static str,
    /// The graph input or constant holding the indices.
    pub base: Var,
    /// The view equations from `base` to the gather's index operand.
    pub views: Vec<Prim>,
    /// The gathered (or scattered) axis.
    pub axis: usize,
    /// The size of that axis: indices lie in `-axis_len..axis_len`.
    pub axis_len: usize,
}

impl IndexCheck {
    /// The checks of the gathers `plan` runs inside kernels.
    pub fn of(g: &Graph, plan: &Plan) -> Vec<IndexCheck> {
        let mut library = vec![false; g.eqns.len()];
        for step in &plan.steps {
            if let Step::Library { eqn } = step {
                library[*eqn] = true;
            }
        }
        let mut def = vec![None; g.avals.len()];
        for (i, e) in g.eqns.iter().enumerate() {
            for &o in &e.outs {
                def[o] = Some(i);
            }
        }
        let mut checks = Vec::new();
        for (i, e) in g.eqns.iter().enumerate() {
            let (op, axis) = match e.as_prim() {
                Some(Prim::Gather { axis }) => ("gather", axis),
                Some(Prim::ScatterAdd { axis }) => ("scatter_add", axis),
                _ => continue,
            };
            if library[i] {
                continue; // nx's eager kernel checks its own indices
            }
            let mut views = Vec::new();
            let mut v = e.inputs[1];
            while let Some(d) = def[v] {
                let prim = g.eqns[d]
                    .as_prim()
                    .filter(|p| p.class() == nx::PrimClass::View)
                    .expect("tolk: a fused gather's indices are an input or constant's view");
                views.push(prim.clone());
                v = g.eqns[d].inputs[0];
            }
            views.reverse();
            checks.push(IndexCheck {
                op,
                base: v,
                views,
                axis: *axis,
                axis_len: g.aval(e.inputs[0]).shape[*axis],
            });
        }
        checks
    }

    /// The checks a runtime makes at every call: those of inputs, and those
    /// of constants that fail (a constant's indices are checked once, here;
    /// a failing one raises at every call, as eager would).
    pub fn per_call(g: &Graph, plan: &Plan) -> Vec<IndexCheck> {
        IndexCheck::of(g, plan)
            .into_iter()
            .filter(|c| match g.consts.iter().find(|(v, _)| *v == c.base) {
                Some((_, t)) => c.try_check(t).is_err(),
                None => true,
            })
            .collect()
    }

    /// Panics as the eager gather does if an index in `base` (the value of
    /// [`IndexCheck::base`]) seen through the views is out of range.
    pub fn check(&self, base: &Tensor) {
        if let Err(e) = self.try_check(base) {
            panic!("{e}");
        }
    }

    /// [`IndexCheck::check`], returning the message.
    pub fn try_check(&self, base: &Tensor) -> Result<(), String> {
        let mut idx = base.clone();
        for p in &self.views {
            idx = nx::raw::eval(p.clone(), &[&idx]);
        }
        match nx::raw::first_index_out_of_range(&idx, self.axis_len) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{}: index {i} is out of bounds for axis {} of size {}",
                self.op, self.axis, self.axis_len
            )),
        }
    }
}
