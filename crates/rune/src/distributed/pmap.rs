//! pmap across processes: the call path of a [`Placed`] function whose
//! devices are an MPI world's (`"MPI:0"`, ..., one per rank).
//!
//! Each process passes its own shard of every split leaf; the function is
//! traced at the global shapes (placeholders: a zero broadcast to the
//! global shape, no allocation), sharded across `size` devices by
//! `tolk::shard` as any pmap, and each process runs its own device's part
//! ([`tolk::shard::ShardedProgram::run_one`]) with the plan's collectives
//! as MPI calls ([`Mpi`]): an all-reduce (consecutive ones packed into one
//! buffer per dtype) or an all-gather. Nothing is copied to or from a
//! "device": a process's shard is in its own memory. A split output is a
//! tensor of the global shape whose bytes are pending on this process's
//! shard ([`Shard`]): reading it all-gathers the shards (a collective:
//! every rank reads it), fed back unread as a leaf split the same way it
//! is used in place, and [`local_shard`] reads this process's part alone.
//! Replicated outputs are this process's value, read locally.

use super::{check, gather, reduce_leaves, transport, Op};
use crate::placed::Placed;
use crate::resident::Resident;
use crate::signatures::debug_level;
use crate::stage::JitError;
use nx::{Ptree, ReduceOp, Tensor};
use std::sync::{Arc, Mutex};

/// The plan's collectives as MPI calls.
struct Mpi;

impl tolk::shard::Collectives for Mpi {
    fn all_reduce(&self, values: &[Tensor], op: ReduceOp) -> Vec<Tensor> {
        let op = match op {
            ReduceOp::Sum => Op::Sum,
            ReduceOp::Prod => Op::Prod,
            ReduceOp::Max => Op::Max,
            ReduceOp::Min => Op::Min,
        };
        reduce_leaves(values, op)
    }

    fn all_gather(&self, value: &Tensor, axis: usize) -> Tensor {
        gather(value, axis)
    }
}

/// This process's shard of a split output.
struct Shard {
    devices: Vec<String>,
    split: usize,
    /// The global shape (a view of the output is not the output).
    shape: Vec<usize>,
    /// `None` once read.
    value: Mutex<Option<Tensor>>,
}

impl nx::storage::Pending for Shard {
    fn fill(&self) -> Tensor {
        let local = self
            .value
            .lock()
            .unwrap()
            .take()
            .expect("a split output is read once");
        let t = gather(&local, self.split);
        if t.is_contiguous() {
            t
        } else {
            t.copy()
        }
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// This process's part of `t` if it is an unread split output of a pmap
/// across processes.
pub(crate) fn local_shard(t: &Tensor) -> Option<Tensor> {
    let p = nx::raw::pending(t)?;
    let s = p.as_any().downcast_ref::<Shard>()?;
    let v = s.value.lock().unwrap().clone();
    v
}

/// This process's shard of `t` if it is an unread split output held by
/// `devices` split along `split`, whole (not a view).
fn fed_back(t: &Tensor, devices: &[String], split: Option<usize>) -> Option<Tensor> {
    let p = nx::raw::pending(t)?;
    let s = p.as_any().downcast_ref::<Shard>()?;
    let whole = t.shape() == s.shape.as_slice() && t.is_contiguous() && t.offset() == Some(0);
    if s.devices != devices || Some(s.split) != split || !whole {
        return None;
    }
    let v = s.value.lock().unwrap().clone();
    v
}

/// Runs `placed` (a pmap over an MPI world's devices) on `p`: see the
/// module docs.
pub(crate) fn call<P: Ptree, Q: Ptree>(
    placed: &Placed<Q>,
    f: &impl Fn(&P) -> Q,
    name: &str,
    p: &P,
) -> Result<Q, JitError> {
    let (rank, size) = transport::init();
    let leaves = p.leaves();
    let axes = placed.axes_of(leaves.len());
    // This process's value of each leaf, and the global shape it stands for.
    let mut locals = Vec::with_capacity(leaves.len());
    let mut globals = Vec::with_capacity(leaves.len());
    for (i, t) in leaves.iter().enumerate() {
        let axis = axes[i];
        if let Some(local) = fed_back(t, &placed.devices, axis) {
            locals.push(local);
            globals.push(nx::Tensor::zeros(&[], t.dtype()).broadcast_to(t.shape()));
            continue;
        }
        let mut shape = t.shape().to_vec();
        if let Some(a) = axis {
            if a >= shape.len() {
                panic!(
                    "pmap: leaf {i} (shape {:?}, this process's shard) has no axis {a} to split \
                     across the processes",
                    t.shape()
                );
            }
            shape[a] *= size;
        }
        locals.push(t.clone());
        globals.push(nx::Tensor::zeros(&[], t.dtype()).broadcast_to(&shape));
    }
    // Every rank must call with the same global signature.
    check::same_on_every_rank(
        "pmap",
        &format!("pmap of {name} with in_axes {axes:?}"),
        &p.leaf_paths(),
        &globals,
    );
    let global_p = p.with_leaves(&globals);
    let (entry, how) = placed.programs.get_or_build(
        f,
        &global_p,
        &globals,
        |graph| match graph.writebacks.iter().find(|(i, _)| axes[*i].is_some()) {
            Some(&(leaf, _)) => Err(JitError::new(format!(
                "pmap: the function assigns in place to input leaf {leaf}, which is split \
                 across the processes: return the new value instead, or replicate the leaf \
                 (in_axes None)"
            ))),
            None => Ok(()),
        },
        |graph, template| {
            let program = tolk::shard::shard(graph, size, &axes, false).map_err(JitError::new)?;
            let origin = program.origin();
            Ok(((program, template), origin))
        },
    )?;
    let (program, template) = &*entry;
    let sent = transport::bytes_sent();
    let outs = program.run_one(rank, &locals, &leaves, &Mpi);
    let outs: Vec<Tensor> = outs
        .into_iter()
        .map(|(split, t)| match split {
            None => t,
            Some(a) => {
                let mut shape = t.shape().to_vec();
                shape[a] *= size;
                let s = Shard {
                    devices: placed.devices.clone(),
                    split: a,
                    shape: shape.clone(),
                    value: Mutex::new(Some(t.clone())),
                };
                nx::raw::pending_tensor(t.dtype(), &shape, Arc::new(s))
            }
        })
        .collect();
    if placed.donate {
        for t in &leaves {
            if local_shard(t).is_some() {
                Resident::donate(t);
            }
        }
    }
    if debug_level() >= 1 && rank == 0 {
        eprintln!(
            "pmap {name} on {} processes: {}, {}, {} B sent to collectives",
            size,
            how.describe(),
            program.describe(),
            transport::bytes_sent() - sent
        );
    }
    Ok(template.with_leaves(&outs))
}
