//! Data parallelism across processes (and machines) on MPI: cargo feature
//! `mpi`. Run the program under `mpirun -np N` (or Slurm's `srun`); each
//! process calls [`init`] and gets the [`World`]. Outside `mpirun` it is a
//! world of one and everything works the same.
//!
//! Two ways to use it:
//!
//! - explicit collectives over parameter trees ([`World::all_reduce_sum`],
//!   [`World::all_reduce_mean`], [`World::broadcast`], [`World::all_gather`]),
//!   what a Horovod-style loop calls between its own steps;
//! - [`pmap_with`](crate::pmap_with) over [`World::devices`] (`"MPI:0"`, ...,
//!   one device per process): each process passes its own shard of every
//!   split leaf, `f` sees the global shape, and the reductions over the
//!   split axis (a mean loss over the batch, hence its gradients) are
//!   `MPI_Allreduce` steps of the compiled plan.
//!
//! ```no_run
//! use rune::prelude::*;
//! use rune::distributed;
//!
//! let world = distributed::init();
//! // Every rank passes its own values; each gets the sum over the ranks.
//! let local = Tensor::from_slice(&[world.rank() as f32, 1.0], &[2]);
//! let total: Tensor = world.all_reduce_sum(&local);
//! assert_eq!(total.to_vec::<f32>()[1], world.size() as f32);
//!
//! // pmap across processes: this process's half of a batch of 8 rows.
//! let rows = 8 / world.size();
//! let x = Tensor::ones(&[rows, 3], DType::F32);
//! let f = rune::pmap_with(
//!     |x: &Tensor| x.sum_all(), // over the global [8, 3]
//!     PmapOpts { devices: world.devices(), ..PmapOpts::default() },
//! );
//! assert_eq!(f.call(&x).item::<f32>(), 24.0);
//! ```
//!
//! Every rank must make the same calls in the same order. A collective
//! whose structure, dtypes or shapes differ between ranks panics on every
//! rank with a message naming the leaf and the ranks (a cheap signature
//! all-gather comes first: no hang). Leaves are packed per dtype into one
//! contiguous buffer, so a tree costs one `MPI_Allreduce` per dtype.

mod check;
pub(crate) mod pmap;
mod transport;

use nx::{DType, Ptree, Tensor};

pub(crate) use transport::Op;

/// The processes of this run (`MPI_COMM_WORLD`): see [`init`].
#[derive(Clone, Copy, Debug)]
pub struct World {
    rank: usize,
    size: usize,
}

/// Initializes MPI for this process (once; later calls return the same
/// world) and returns the [`World`]. Outside `mpirun` it is a world of one
/// (rank 0 of 1). MPI is finalized when the process exits.
///
/// ```no_run
/// let world = rune::distributed::init();
/// if world.rank() == 0 {
///     println!("{} processes", world.size());
/// }
/// ```
pub fn init() -> World {
    let (rank, size) = transport::init();
    World { rank, size }
}

/// Bytes this process has contributed to collectives since it started:
/// every all-reduce's buffer, a broadcast's buffer on its root, an
/// all-gather's local part. The signature checks (a few bytes per call)
/// are not counted.
pub fn bytes_sent() -> u64 {
    transport::bytes_sent()
}

impl World {
    /// This process's rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The devices of a [`pmap`](crate::pmap_with) across the processes:
    /// `"MPI:0"`, ..., `"MPI:{size-1}"`, one per rank.
    pub fn devices(&self) -> Vec<String> {
        (0..self.size).map(|r| format!("MPI:{r}")).collect()
    }

    /// Blocks until every rank has called it.
    pub fn barrier(&self) {
        transport::barrier();
    }

    /// The elementwise sum of every rank's `tree` (same structure, dtypes
    /// and shapes on each), on every rank. Integer sums wrap as the dtype
    /// does; f16 and bf16 are summed in f32 and rounded once; bool and
    /// 4-bit dtypes panic (not summable).
    ///
    /// ```no_run
    /// use rune::prelude::*;
    /// let world = rune::distributed::init();
    /// let grads = (Tensor::ones(&[3], DType::F32), Tensor::ones(&[2, 2], DType::I64));
    /// let (a, b) = world.all_reduce_sum(&grads);
    /// assert_eq!(a.to_vec::<f32>(), vec![world.size() as f32; 3]);
    /// assert_eq!(b.to_vec::<i64>(), vec![world.size() as i64; 4]);
    /// ```
    pub fn all_reduce_sum<T: Ptree>(&self, tree: &T) -> T {
        self.reduce("all_reduce_sum", tree, false)
    }

    /// The elementwise mean of every rank's `tree` (the sum divided by
    /// `size()`): what data-parallel training averages gradients with.
    /// Integer means round toward zero.
    ///
    /// ```no_run
    /// use rune::prelude::*;
    /// let world = rune::distributed::init();
    /// let g = Tensor::from_slice(&[world.rank() as f64], &[1]);
    /// let mean = world.all_reduce_mean(&g);
    /// assert_eq!(mean.item::<f64>(), (world.size() - 1) as f64 / 2.0);
    /// ```
    pub fn all_reduce_mean<T: Ptree>(&self, tree: &T) -> T {
        self.reduce("all_reduce_mean", tree, true)
    }

    fn reduce<T: Ptree>(&self, func: &str, tree: &T, mean: bool) -> T {
        let leaves = tree.leaves();
        for (i, t) in leaves.iter().enumerate() {
            let d = t.dtype();
            if !transport::summable(d) && d != DType::F16 && d != DType::BF16 {
                panic!(
                    "{func}: leaf {i} has dtype {}, which cannot be summed; cast it first",
                    d.name()
                );
            }
        }
        check::same_on_every_rank(func, func, &tree.leaf_paths(), &leaves);
        let summed = reduce_leaves(&leaves, Op::Sum);
        let out: Vec<Tensor> = if mean {
            summed.iter().map(|t| divide(t, self.size)).collect()
        } else {
            summed
        };
        tree.with_leaves(&out)
    }

    /// Rank `root`'s `tree` on every rank (every rank passes a tree of the
    /// same structure, dtypes and shapes; the others' values are ignored).
    /// Panics if `root` is not a rank.
    ///
    /// ```no_run
    /// use rune::prelude::*;
    /// let world = rune::distributed::init();
    /// let mine = Tensor::from_slice(&[world.rank() as f32], &[1]);
    /// assert_eq!(world.broadcast(&mine, 0).item::<f32>(), 0.0);
    /// ```
    pub fn broadcast<T: Ptree>(&self, tree: &T, root: usize) -> T {
        if root >= self.size {
            panic!(
                "broadcast: root {root} is not a rank (the world has {} processes)",
                self.size
            );
        }
        let leaves = tree.leaves();
        check::same_on_every_rank(
            "broadcast",
            &format!("broadcast from rank {root}"),
            &tree.leaf_paths(),
            &leaves,
        );
        if self.size == 1 {
            return tree.map_leaves(&mut |t| t.copy());
        }
        let out = packed(&leaves, |buf| transport::broadcast_in_place(buf, root));
        tree.with_leaves(&out)
    }

    /// Every rank's `local` (the same dtype and shape on each) concatenated
    /// along `axis` in rank order, on every rank. Panics if `axis` is out of
    /// range.
    ///
    /// ```no_run
    /// use rune::prelude::*;
    /// let world = rune::distributed::init();
    /// let mine = Tensor::from_slice(&[world.rank() as i32; 2], &[1, 2]);
    /// let all = world.all_gather(&mine, 0);
    /// assert_eq!(all.shape(), &[world.size(), 2]);
    /// ```
    pub fn all_gather(&self, local: &Tensor, axis: usize) -> Tensor {
        if axis >= local.shape().len() {
            panic!(
                "all_gather: axis {axis} is out of range for shape {:?}",
                local.shape()
            );
        }
        check::same_on_every_rank(
            "all_gather",
            &format!("all_gather along axis {axis}"),
            &[],
            std::slice::from_ref(local),
        );
        gather(local, axis)
    }

    /// This process's part of an unread split output of a [`pmap`](crate::pmap_with)
    /// over [`World::devices`], without communication (reading the output
    /// itself gathers every rank's part, a collective). Panics on any other
    /// tensor.
    pub fn local_shard(&self, output: &Tensor) -> Tensor {
        pmap::local_shard(output).unwrap_or_else(|| {
            panic!(
                "local_shard: the tensor is not an unread split output of a pmap across \
                 processes (a replicated output, or one already read, is whole on every rank: \
                 use it as it is)"
            )
        })
    }
}

/// Every rank's `local` concatenated along `axis` (no signature check).
pub(crate) fn gather(local: &Tensor, axis: usize) -> Tensor {
    let size = transport::init().1;
    let local = if local.is_contiguous() {
        local.clone()
    } else {
        local.copy()
    };
    let all = transport::all_gather_tensor(&local);
    if axis == 0 {
        let mut shape = local.shape().to_vec();
        shape[0] *= size;
        return all.reshape(&shape);
    }
    let parts: Vec<Tensor> = (0..size)
        .map(|r| all.narrow(0, r, 1).reshape(local.shape()))
        .collect();
    Tensor::concatenate(&parts, axis as isize)
}

/// `leaves` reduced with `op` across the ranks (no signature check):
/// packed per dtype into one buffer each, one all-reduce per buffer
/// (a single contiguous leaf goes straight into a fresh result).
pub(crate) fn reduce_leaves(leaves: &[Tensor], op: Op) -> Vec<Tensor> {
    let size = transport::init().1;
    if size == 1 {
        return leaves.iter().map(|t| t.copy()).collect();
    }
    // f16 and bf16 travel as f32.
    let wide: Vec<Tensor> = leaves
        .iter()
        .map(|t| match t.dtype() {
            DType::F16 | DType::BF16 => t.cast(DType::F32),
            _ => t.clone(),
        })
        .collect();
    if wide.len() == 1 && wide[0].is_contiguous() {
        let out = transport::all_reduce_into(&wide[0], op);
        return vec![out.cast(leaves[0].dtype())];
    }
    let out = packed(&wide, |buf| transport::all_reduce_in_place(buf, op));
    out.iter()
        .zip(leaves)
        .map(|(o, t)| {
            if o.dtype() == t.dtype() {
                o.clone()
            } else {
                o.cast(t.dtype())
            }
        })
        .collect()
}

/// `leaves` packed per dtype into one fresh contiguous buffer each (in
/// order of first appearance), `collective` applied to each buffer in
/// place, and the leaves read back out of the buffers (views, no copy).
fn packed(leaves: &[Tensor], collective: impl Fn(&Tensor)) -> Vec<Tensor> {
    let mut dtypes: Vec<DType> = Vec::new();
    for t in leaves {
        if !dtypes.contains(&t.dtype()) {
            dtypes.push(t.dtype());
        }
    }
    let mut out: Vec<Option<Tensor>> = vec![None; leaves.len()];
    for d in dtypes {
        let idx: Vec<usize> = (0..leaves.len())
            .filter(|&i| leaves[i].dtype() == d)
            .collect();
        let flats: Vec<Tensor> = idx
            .iter()
            .map(|&i| leaves[i].reshape(&[leaves[i].numel()]))
            .collect();
        let buf = if flats.len() == 1 {
            flats[0].copy()
        } else {
            Tensor::concatenate(&flats, 0)
        };
        let buf = if buf.is_contiguous() { buf } else { buf.copy() };
        collective(&buf);
        let mut at = 0;
        for &i in &idx {
            let n = leaves[i].numel();
            out[i] = Some(buf.narrow(0, at, n).reshape(leaves[i].shape()));
            at += n;
        }
    }
    out.into_iter().map(|t| t.expect("every leaf")).collect()
}

/// `t / size`, integer division rounding toward zero.
fn divide(t: &Tensor, size: usize) -> Tensor {
    if size == 1 {
        return t.clone();
    }
    let d = t.dtype();
    if d.is_float() || d.is_complex() {
        t / size as f64
    } else if d.is_int() && is_signed(d) {
        let v: Vec<i64> = t.cast(DType::I64).to_vec();
        let v: Vec<i64> = v.iter().map(|x| x / size as i64).collect();
        Tensor::from_vec(v, t.shape()).cast(d)
    } else {
        let v: Vec<u64> = t.cast(DType::U64).to_vec();
        let v: Vec<u64> = v.iter().map(|x| x / size as u64).collect();
        Tensor::from_vec(v, t.shape()).cast(d)
    }
}

fn is_signed(d: DType) -> bool {
    matches!(d, DType::I8 | DType::I16 | DType::I32 | DType::I64)
}
