//! The background build: a program returned while its C compiles
//! (`Options::quick_first`) holds the compiler thread (`Build`), runs its
//! first call eagerly (`run_eagerly`: each equation through nx's eager
//! kernels) unless the build has finished, and attaches the kernels once
//! it has (`attach_built`; every later call waits for it). A program
//! returned with its first tier's code (built without vectorization) holds
//! the build of its second the same way (`attach_upgrade`), but never
//! waits for it: each call (and each loop over a body) switches once it
//! has finished.

use super::{KernelEntry, Program};
use crate::graph::Op;
use crate::load::Loaded;
use nx::{Prim, Tensor};
use std::sync::Arc;

thread_local! {
    /// Programs switched to their second tier by calls on this thread.
    static TIER_SWITCHES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many programs (loop bodies) calls on this thread have switched from
/// their first tier's code to their second's ([`crate::TIER_MIN_SOURCE`]):
/// for tests that check a body took that path.
#[doc(hidden)]
pub fn tier_switches() -> u64 {
    TIER_SWITCHES.with(|n| n.get())
}

/// The thread compiling a program's kernels: their entries and code.
pub(crate) type Build = std::thread::JoinHandle<Result<(Vec<KernelEntry>, Loaded), String>>;

impl Program {
    /// Gives a program built without code the thread compiling it: its
    /// first call runs eagerly unless the build has finished by then.
    pub(crate) fn attach_compiling(&mut self, build: Build) {
        *self.compiling.get_mut() = Some(build);
    }

    /// Gives a program running its first tier's code the thread building
    /// its second: calls keep running the first until the second has
    /// finished, then switch (the same bits: the same C).
    pub(crate) fn attach_upgrade(&mut self, build: Build) {
        *self.compiling.get_mut() = Some(build);
        self.upgrading.set(true);
    }

    /// Attaches the compiled code when its build has finished, or, with
    /// `wait`, once it has; true when the program has its code. Panics
    /// with the compiler's message if the build failed (the C of a graph
    /// that staged is tolk's to get right: an internal error).
    pub(super) fn attach_built(&self, wait: bool) -> bool {
        let mut compiling = self.compiling.borrow_mut();
        let Some(build) = compiling.take_if(|b| wait || b.is_finished()) else {
            return compiling.is_none();
        };
        match build.join().expect("tolk: the compiler thread panicked") {
            Ok((kernels, loaded)) => {
                *self.kernels.borrow_mut() = kernels;
                *self.loaded.borrow_mut() = Some(Arc::new(loaded));
                if self.upgrading.replace(false) {
                    TIER_SWITCHES.with(|n| n.set(n.get() + 1));
                }
                true
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Blocks until the program's kernels are compiled: a no-op unless it
    /// was returned while still compiling ([`crate::Options::quick_first`]).
    /// Every call after the first does this itself.
    pub fn finish_compiling(&self) {
        self.attach_built(true);
    }

    /// Runs the graph's equations one by one through nx's eager kernels
    /// (every step a library step), with the writebacks and outputs of
    /// [`Program::run`].
    pub(super) fn run_eagerly(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        let g = &self.graph;
        let mut env: Vec<Option<Tensor>> = vec![None; g.avals.len()];
        for (&v, t) in g.inputs.iter().zip(inputs) {
            env[v] = Some(t.clone());
        }
        for (v, t, _) in &self.consts {
            env[*v] = Some(t.clone());
        }
        for e in &g.eqns {
            let ins: Vec<&Tensor> = e.inputs.iter().map(|&a| env[a].as_ref().unwrap()).collect();
            let outs = match &e.op {
                Op::Prim(prim) => vec![nx::raw::eval(prim.clone(), &ins)],
                Op::Loop(lp) => lp.eval(&ins),
            };
            for (&v, t) in e.outs.iter().zip(outs) {
                env[v] = Some(t);
            }
        }
        for &(i, v) in &g.writebacks {
            if g.inputs[i] != v {
                nx::raw::eval(Prim::Assign, &[&inputs[i], env[v].as_ref().unwrap()]);
            }
        }
        g.outputs
            .iter()
            .map(|&v| env[v].clone().expect("tolk: output not computed"))
            .collect()
    }
}
