//! Named-axis parallelism: [`shard_map`] over a [`Mesh`] of named axes,
//! with explicit collectives ([`psum`], [`pmean`], [`pmax`], [`pmin`],
//! [`all_gather`], [`psum_scatter`], [`ppermute`], [`all_to_all`],
//! [`axis_index`], [`axis_size`]): JAX's `shard_map`.
//!
//! How it runs (first version): the mesh's devices are the batch of the
//! batch trace (`batch.rs`, `vmap`'s). Each input leaf becomes one value
//! stacked over the devices, `[devices, block...]` (a replicated leaf stays
//! unbatched: one value, the same on every device), `f` runs once on the
//! blocks, and each collective is tensor operations on the stacked value
//! seen as `[mesh axes..., block...]`. So `grad`, `jvp`, `vmap` and `jit`
//! outside `shard_map` compose with it as with any function, and gradients
//! are the one-device ones. It computes on the calling thread's device: the
//! mesh's devices are named and checked but not yet used to place the
//! blocks. A batched value also carries the mesh axes it may vary over
//! (`Batched::vary`), which `check_vma` reads at trace time.
//!
//! Not yet: collectives on values traced by a transformation applied
//! inside `f` (`grad` inside `shard_map`; apply it outside instead), meshes
//! over `world.devices()` under MPI.

use crate::batch::BatchTrace;
use crate::scope::{enter, TaggedTracer};
use crate::signatures::catch_jit;
use crate::stage::{raise, JitError};
use nx::{DType, Ptree, Tensor};
use std::cell::RefCell;
use std::marker::PhantomData;

/// Devices arranged along named axes; the product of the axis sizes is the
/// number of devices, taken in row-major order (the last axis fastest).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mesh {
    devices: Vec<String>,
    names: Vec<String>,
    sizes: Vec<usize>,
}

impl Mesh {
    /// A mesh of `devices` along `axes` (`(name, size)`, outermost first).
    ///
    /// Panics when the sizes' product is not the number of devices, an
    /// axis is named twice or has size 0, a device is listed twice, or the
    /// devices mix backends (`CPU:1` beside `CUDA:0`).
    ///
    /// ```
    /// use rune::sharding::Mesh;
    /// let mesh = Mesh::new(&["CPU:1", "CPU:2", "CPU:3", "CPU:4"], &[("data", 2), ("model", 2)]);
    /// assert_eq!(mesh.shape(), vec![2, 2]);
    /// assert_eq!(mesh.axis_names(), vec!["data", "model"]);
    /// ```
    pub fn new(devices: &[impl AsRef<str>], axes: &[(&str, usize)]) -> Mesh {
        let devices: Vec<String> = devices.iter().map(|d| d.as_ref().to_string()).collect();
        if axes.is_empty() {
            panic!(
                "Mesh::new: no axes; name at least one, e.g. (\"data\", {})",
                devices.len()
            );
        }
        if axes.len() > 64 {
            panic!("Mesh::new: {} axes; at most 64", axes.len());
        }
        for (i, (name, size)) in axes.iter().enumerate() {
            if axes[..i].iter().any(|(n, _)| n == name) {
                panic!("Mesh::new: axis {name:?} is named twice in {axes:?}");
            }
            if *size == 0 {
                panic!("Mesh::new: axis {name:?} has size 0");
            }
        }
        let product: usize = axes.iter().map(|a| a.1).product();
        if product != devices.len() {
            panic!(
                "Mesh::new: the axes {axes:?} hold {product} devices, but {} are given ({devices:?})",
                devices.len()
            );
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                panic!("Mesh::new: device {d:?} is listed twice");
            }
        }
        let backend = |d: &str| d.split(':').next().unwrap_or(d).to_ascii_uppercase();
        if let Some(other) = devices.iter().find(|d| backend(d) != backend(&devices[0])) {
            panic!(
                "Mesh::new: the devices mix backends ({:?} and {other:?}); one mesh is one backend",
                devices[0]
            );
        }
        Mesh {
            devices,
            names: axes.iter().map(|a| a.0.to_string()).collect(),
            sizes: axes.iter().map(|a| a.1).collect(),
        }
    }

    /// The axes' sizes, outermost first.
    pub fn shape(&self) -> Vec<usize> {
        self.sizes.clone()
    }

    /// The axes' names, outermost first.
    pub fn axis_names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// The devices, in row-major order over the axes.
    pub fn devices(&self) -> &[String] {
        &self.devices
    }

    /// The number of devices.
    pub fn size(&self) -> usize {
        self.devices.len()
    }

    fn axis(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }
}

/// How a leaf lies on the mesh: one entry per leading dimension (missing
/// trailing entries are `None`); a named axis splits that dimension into
/// equal blocks across it; the leaf is replicated over every axis the spec
/// does not name (JAX's `PartitionSpec`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    dims: Vec<Option<String>>,
}

impl Spec {
    /// The spec splitting dimension `i` over `dims[i]` where it names an axis.
    pub fn new(dims: &[Option<&str>]) -> Spec {
        Spec {
            dims: dims.iter().map(|d| d.map(str::to_string)).collect(),
        }
    }

    /// Replicated over every axis.
    pub fn replicated() -> Spec {
        Spec::default()
    }

    /// The entries, one per leading dimension.
    pub fn dims(&self) -> &[Option<String>] {
        &self.dims
    }
}

/// Options of [`shard_map`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMapOpts {
    /// One spec per input leaf, in traversal order (empty: every leaf
    /// replicated).
    pub in_specs: Vec<Spec>,
    /// One spec per output leaf (empty: every leaf replicated).
    pub out_specs: Vec<Spec>,
    /// Check at trace time that an output is the same across every axis
    /// its spec does not name (true by default); false returns the first
    /// device's value along such axes.
    pub check_vma: bool,
}

impl Default for ShardMapOpts {
    fn default() -> ShardMapOpts {
        ShardMapOpts {
            in_specs: Vec::new(),
            out_specs: Vec::new(),
            check_vma: true,
        }
    }
}

/// `f` as per-device code on blocks of its inputs over `mesh`: see the
/// module docs and [`ShardMap::call`].
///
/// ```
/// use rune::prelude::*;
/// use rune::sharding::{self, Mesh, ShardMapOpts, Spec};
/// let mesh = Mesh::new(&["CPU:1", "CPU:2"], &[("model", 2)]);
/// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[4]);
/// // Each device sums its block of two; psum adds the blocks' sums.
/// let total = sharding::shard_map(
///     |x: &Tensor| sharding::psum(&x.sum_all(), "model"),
///     &mesh,
///     ShardMapOpts { in_specs: vec![Spec::new(&[Some("model")])], ..Default::default() },
/// );
/// assert_eq!(total.call(&x).item::<f32>(), 10.0);
/// ```
pub fn shard_map<P: Ptree, Q: Ptree, F: Fn(&P) -> Q>(
    f: F,
    mesh: &Mesh,
    opts: ShardMapOpts,
) -> ShardMap<F, P, Q> {
    ShardMap {
        f,
        mesh: mesh.clone(),
        opts,
        _types: PhantomData,
    }
}

/// A function mapped over a mesh by [`shard_map`].
pub struct ShardMap<F, P, Q> {
    f: F,
    mesh: Mesh,
    opts: ShardMapOpts,
    _types: PhantomData<fn(&P) -> Q>,
}

impl<P: Ptree, Q: Ptree, F: Fn(&P) -> Q> ShardMap<F, P, Q> {
    /// Runs `f` on every device's blocks of `p` (global values in, global
    /// values out: an output dimension split over an axis is the
    /// concatenation of the devices' blocks). Panics with the message of
    /// [`ShardMap::try_call`]'s error.
    pub fn call(&self, p: &P) -> Q {
        self.try_call(p).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`ShardMap::call`], returning a broken replication promise or a
    /// collective over an axis the mesh lacks as a `JitError`. Bad specs
    /// (a count mismatch, an axis named twice or unknown, a dimension the
    /// axis size does not divide) panic naming the leaf's path.
    pub fn try_call(&self, p: &P) -> Result<Q, JitError> {
        let leaves = p.leaves();
        let paths = p.leaf_paths();
        let in_specs = specs("in_specs", &self.opts.in_specs, &paths);
        let mesh = &self.mesh;
        let (trace, scope) = enter(|level, tag| BatchTrace {
            level,
            tag,
            size: mesh.size(),
        });
        let _frame = Frame::push(mesh, &trace);
        let blocks: Vec<Tensor> = leaves
            .iter()
            .zip(&in_specs)
            .zip(&paths)
            .map(|((x, spec), path)| split(&trace, mesh, x, spec, path))
            .collect();
        let out = catch_jit(|| (self.f)(&p.with_leaves(&blocks)))?;
        let out_paths = out.leaf_paths();
        let out_specs = specs("out_specs", &self.opts.out_specs, &out_paths);
        let results = out
            .leaves()
            .iter()
            .zip(&out_specs)
            .zip(&out_paths)
            .map(|((y, spec), path)| join(&trace, mesh, y, spec, path, self.opts.check_vma))
            .collect::<Result<Vec<Tensor>, JitError>>()?;
        drop(_frame);
        drop(scope);
        Ok(out.with_leaves(&results))
    }
}

/// A leaf's path for messages (a lone tensor's path is empty).
fn leaf_name(path: &str) -> String {
    if path.is_empty() {
        "(the only leaf)".to_string()
    } else {
        path.to_string()
    }
}

/// The specs of `n` leaves: `given` (one per leaf) or all replicated.
fn specs(what: &str, given: &[Spec], paths: &[String]) -> Vec<Spec> {
    if given.is_empty() {
        return vec![Spec::replicated(); paths.len()];
    }
    if given.len() != paths.len() {
        panic!(
            "shard_map: {what} has {} specs but there are {} leaves ({}); one spec per leaf, in \
             traversal order",
            given.len(),
            paths.len(),
            paths.join(", ")
        );
    }
    given.to_vec()
}

/// For each dimension of a leaf of `shape`, the mesh axis splitting it;
/// panics naming the leaf when the spec is bad.
fn split_axes(mesh: &Mesh, spec: &Spec, shape: &[usize], path: &str) -> Vec<Option<usize>> {
    let path = leaf_name(path);
    if spec.dims.len() > shape.len() {
        panic!(
            "shard_map: the spec {:?} of leaf {path} has {} entries, but the leaf has {} dimensions \
             (shape {shape:?})",
            spec.dims,
            spec.dims.len(),
            shape.len()
        );
    }
    let mut axes = vec![None; shape.len()];
    for (d, name) in spec.dims.iter().enumerate() {
        let Some(name) = name else { continue };
        let Some(a) = mesh.axis(name) else {
            panic!(
                "shard_map: the spec of leaf {path} names axis {name:?}, which the mesh lacks (its \
                 axes: {:?})",
                mesh.names
            );
        };
        if axes.contains(&Some(a)) {
            panic!("shard_map: the spec of leaf {path} names axis {name:?} twice");
        }
        if shape[d] % mesh.sizes[a] != 0 {
            panic!(
                "shard_map: leaf {path}'s dimension {d} (size {}) does not split into {} equal \
                 blocks over axis {name:?}",
                shape[d], mesh.sizes[a]
            );
        }
        axes[d] = Some(a);
    }
    axes
}

/// Leaf `x` as the devices see it: unbatched when replicated, else stacked
/// over the devices `[devices, block...]`, varying over the axes its spec
/// names.
fn split(trace: &BatchTrace, mesh: &Mesh, x: &Tensor, spec: &Spec, path: &str) -> Tensor {
    let shape = x.shape().to_vec();
    let axes = split_axes(mesh, spec, &shape, path);
    if axes.iter().all(Option::is_none) {
        return x.clone();
    }
    // Each split dimension as [blocks, block]; then the blocks' axes
    // first, in mesh order, size-1 axes for the axes the spec does not
    // name, broadcast over those.
    let mut parts = Vec::new();
    let mut block_at = vec![None; mesh.names.len()]; // mesh axis -> dim of `parts`
    let mut local_at = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        match axes[d] {
            Some(a) => {
                block_at[a] = Some(parts.len());
                parts.push(mesh.sizes[a]);
                local_at.push(parts.len());
                parts.push(n / mesh.sizes[a]);
            }
            None => {
                local_at.push(parts.len());
                parts.push(n);
            }
        }
    }
    let named: Vec<usize> = block_at.iter().flatten().copied().collect();
    let perm: Vec<isize> = named.iter().chain(&local_at).map(|&i| i as isize).collect();
    let local: Vec<usize> = local_at.iter().map(|&i| parts[i]).collect();
    let with_ones: Vec<usize> = (0..mesh.names.len())
        .map(|a| {
            if block_at[a].is_some() {
                mesh.sizes[a]
            } else {
                1
            }
        })
        .chain(local.iter().copied())
        .collect();
    let full: Vec<usize> = mesh.sizes.iter().chain(&local).copied().collect();
    let stacked = x
        .reshape(&parts)
        .permute(&perm)
        .reshape(&with_ones)
        .broadcast_to(&full)
        .reshape(&[mesh.size()].into_iter().chain(local).collect::<Vec<_>>());
    let vary = axes.iter().flatten().fold(0u64, |v, &a| v | 1 << a);
    trace.pack_varying(stacked, vary)
}

/// The global value of output `y` under `spec`: the devices' blocks joined
/// along the axes the spec names, the first device's value along the rest
/// (after checking, with `check_vma`, that `y` does not vary over them).
fn join(
    trace: &BatchTrace,
    mesh: &Mesh,
    y: &Tensor,
    spec: &Spec,
    path: &str,
    check_vma: bool,
) -> Result<Tensor, JitError> {
    let local = y.shape().to_vec();
    let (value, batched) = trace.unpack(y);
    let vary = trace.vary(y);
    let axes = split_axes_of_block(mesh, spec, &local, path);
    let path = leaf_name(path);
    if check_vma {
        for (a, name) in mesh.names.iter().enumerate() {
            if !axes.contains(&Some(a)) && batched && vary & (1 << a) != 0 {
                return Err(JitError::new(format!(
                    "shard_map: output {path} may vary over mesh axis {name:?}, but its out_spec \
                     {:?} does not name {name:?}, which promises it is the same on every device \
                     along it; psum or pmean it over {name:?}, name {name:?} in its spec, or set \
                     check_vma: false",
                    spec.dims
                )));
            }
        }
    }
    if !batched && axes.iter().all(Option::is_none) {
        return Ok(value);
    }
    let m = mesh.names.len();
    let mut v = trace
        .lift(&value, batched)
        .reshape(&mesh.sizes.iter().chain(&local).copied().collect::<Vec<_>>());
    // The first device along the axes the spec does not name.
    for a in (0..m).rev() {
        if !axes.contains(&Some(a)) {
            v = v.narrow(a as isize, 0, 1).squeeze(a as isize);
        }
    }
    // `v` is [named axes in mesh order..., local...]: each named axis goes
    // just before the dimension it splits, and the two merge.
    let named: Vec<usize> = (0..m).filter(|a| axes.contains(&Some(*a))).collect();
    let nn = named.len();
    let mut perm = Vec::new();
    let mut global = Vec::new();
    for (d, &n) in local.iter().enumerate() {
        if let Some(a) = axes[d] {
            perm.push(named.iter().position(|&x| x == a).unwrap() as isize);
            global.push(mesh.sizes[a] * n);
        } else {
            global.push(n);
        }
        perm.push((nn + d) as isize);
    }
    Ok(v.permute(&perm).reshape(&global))
}

/// [`split_axes`] for an output block (its dimensions are the block's, so
/// no divisibility to check).
fn split_axes_of_block(
    mesh: &Mesh,
    spec: &Spec,
    local: &[usize],
    path: &str,
) -> Vec<Option<usize>> {
    let ones: Vec<usize> = local
        .iter()
        .enumerate()
        .map(|(d, &n)| match spec.dims.get(d).cloned().flatten() {
            Some(name) => n * mesh.axis(&name).map_or(1, |a| mesh.sizes[a]),
            None => n,
        })
        .collect();
    split_axes(mesh, spec, &ones, path)
}

/// One `shard_map` being traced: its mesh and its batch trace, so that a
/// collective finds the stacked values of the axis it names.
#[derive(Clone)]
struct Frame {
    mesh: Mesh,
    trace: BatchTrace,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Pops its frame when dropped (a panic in `f` included).
struct FrameGuard;

impl Frame {
    fn push(mesh: &Mesh, trace: &BatchTrace) -> FrameGuard {
        FRAMES.with(|f| {
            f.borrow_mut().push(Frame {
                mesh: mesh.clone(),
                trace: trace.clone(),
            })
        });
        FrameGuard
    }
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        FRAMES.with(|f| f.borrow_mut().pop());
    }
}

/// The innermost `shard_map` whose mesh has every axis of `names`, and
/// their indices in it. Outside every `shard_map`: a panic naming the
/// axis; inside one whose mesh lacks it: a `JitError` naming it.
fn frame_of(what: &str, names: &[String]) -> (Frame, Vec<usize>) {
    let frames = FRAMES.with(|f| f.borrow().clone());
    if frames.is_empty() {
        panic!(
            "sharding::{what}: axis {:?} is not bound: collectives run only inside shard_map",
            names.first().map_or("", String::as_str)
        );
    }
    for frame in frames.iter().rev() {
        let idx: Option<Vec<usize>> = names.iter().map(|n| frame.mesh.axis(n)).collect();
        if let Some(idx) = idx {
            return (frame.clone(), idx);
        }
    }
    raise(JitError::new(format!(
        "sharding::{what}: no enclosing shard_map's mesh has axis {:?} (its axes: {:?})",
        names,
        frames
            .last()
            .map(|f| f.mesh.names.clone())
            .unwrap_or_default()
    )))
}

/// `x` at `frame`'s level: its stacked value and whether it is batched
/// there. A value traced by a transformation applied inside the
/// `shard_map` is refused (its per-device values are not reachable here).
fn stacked(what: &str, frame: &Frame, x: &Tensor) -> (Tensor, bool) {
    if let Some(t) = x.tracer() {
        if t.level() > frame.trace.level
            && TaggedTracer::<crate::batch::Batched>::of(x, &frame.trace.tag).is_none()
        {
            raise(JitError::new(format!(
                "sharding::{what}: its operand is traced by a transformation applied inside \
                 shard_map (grad, jvp, vmap); collectives under one are not supported yet: apply \
                 the transformation outside shard_map"
            )));
        }
    }
    frame.trace.unpack(x)
}

/// Axis names for a collective: one name or several.
pub trait AxisNames {
    /// The names.
    fn names(&self) -> Vec<String>;
}

impl AxisNames for &str {
    fn names(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}

impl AxisNames for &[&str] {
    fn names(&self) -> Vec<String> {
        self.iter().map(|s| s.to_string()).collect()
    }
}

impl<const N: usize> AxisNames for &[&str; N] {
    fn names(&self) -> Vec<String> {
        self.iter().map(|s| s.to_string()).collect()
    }
}

impl AxisNames for Vec<&str> {
    fn names(&self) -> Vec<String> {
        self.iter().map(|s| s.to_string()).collect()
    }
}

#[derive(Clone, Copy)]
enum Reduce {
    Sum,
    Mean,
    Max,
    Min,
}

/// The mesh-shaped view `[mesh axes..., block...]` of a stacked value.
fn mesh_view(frame: &Frame, v: &Tensor) -> Tensor {
    let shape: Vec<usize> = frame
        .mesh
        .sizes
        .iter()
        .chain(&v.shape()[1..])
        .copied()
        .collect();
    v.reshape(&shape)
}

/// A mesh-shaped value back as a stacked one, varying over `vary`.
fn restack(frame: &Frame, v: &Tensor, vary: u64) -> Tensor {
    let m = frame.mesh.names.len();
    let shape: Vec<usize> = [frame.mesh.size()]
        .into_iter()
        .chain(v.shape()[m..].iter().copied())
        .collect();
    frame.trace.pack_varying(v.reshape(&shape), vary)
}

fn reduce(what: &str, x: &Tensor, axes: impl AxisNames, op: Reduce) -> Tensor {
    let names = axes.names();
    let (frame, idx) = frame_of(what, &names);
    let (v, batched) = stacked(what, &frame, x);
    let count: usize = idx.iter().map(|&a| frame.mesh.sizes[a]).product();
    if !batched {
        // The same on every device: the sum is `count` copies.
        return match op {
            Reduce::Sum => &v * &v.scalar_like(count as f64),
            Reduce::Mean | Reduce::Max | Reduce::Min => v,
        };
    }
    let vm = mesh_view(&frame, &v);
    let ax: Vec<isize> = idx.iter().map(|&a| a as isize).collect();
    let r = match op {
        Reduce::Sum => vm.sum(&ax, true),
        Reduce::Mean => {
            let s = vm.sum(&ax, true);
            &s / &s.scalar_like(count as f64)
        }
        Reduce::Max => vm.max(&ax, true),
        Reduce::Min => vm.min(&ax, true),
    };
    let r = r.broadcast_to(vm.shape());
    let mask = idx.iter().fold(0u64, |m, &a| m | 1 << a);
    restack(&frame, &r, frame.trace.vary(x) & !mask)
}

/// The sum of `x` over the devices along `axes` (one name or several),
/// the same on each of them (JAX's `psum`).
pub fn psum(x: &Tensor, axes: impl AxisNames) -> Tensor {
    reduce("psum", x, axes, Reduce::Sum)
}

/// The mean of `x` over the devices along `axes` (JAX's `pmean`).
pub fn pmean(x: &Tensor, axes: impl AxisNames) -> Tensor {
    reduce("pmean", x, axes, Reduce::Mean)
}

/// The maximum of `x` over the devices along `axes` (JAX's `pmax`).
pub fn pmax(x: &Tensor, axes: impl AxisNames) -> Tensor {
    reduce("pmax", x, axes, Reduce::Max)
}

/// The minimum of `x` over the devices along `axes` (JAX's `pmin`).
pub fn pmin(x: &Tensor, axes: impl AxisNames) -> Tensor {
    reduce("pmin", x, axes, Reduce::Min)
}

/// Every device's `x` along `axis`, on each of them: stacked at a new
/// dimension `dim`, or with `tiled` concatenated along `dim` (JAX's
/// `all_gather`).
pub fn all_gather(x: &Tensor, axis: &str, dim: usize, tiled: bool) -> Tensor {
    let (frame, idx) = frame_of("all_gather", &[axis.to_string()]);
    let a = idx[0];
    let s = frame.mesh.sizes[a];
    let local = x.shape().to_vec();
    let limit = if tiled { local.len() } else { local.len() + 1 };
    if dim >= limit.max(1) || (tiled && local.is_empty()) {
        panic!("sharding::all_gather: dim {dim} is out of range for a block of shape {local:?}");
    }
    let mut gathered_local = local.clone();
    gathered_local.insert(dim, s);
    let (v, batched) = stacked("all_gather", &frame, x);
    let out = if !batched {
        let mut shape = local.clone();
        shape.insert(dim, 1);
        v.reshape(&shape).broadcast_to(&gathered_local)
    } else {
        let m = frame.mesh.names.len();
        // [mesh..., local] -> the axis's devices moved to `dim` of the
        // block, then the same on every device along the axis.
        let g = mesh_view(&frame, &v).moveaxis(a as isize, (m - 1 + dim) as isize);
        let g = g.unsqueeze(a as isize);
        let mut full: Vec<usize> = frame.mesh.sizes.clone();
        full.extend_from_slice(&gathered_local);
        let g = g.broadcast_to(&full);
        let vary = frame.trace.vary(x) & !(1 << a);
        restack(&frame, &g, vary)
    };
    if tiled {
        let mut merged = local.clone();
        merged[dim] *= s;
        out.reshape(&merged)
    } else {
        out
    }
}

/// The sum over the devices along `axis`, scattered: device `i` keeps
/// block `i` of dimension `dim` (`tiled`: a block of `n / size` rows;
/// untiled: `dim` has the axis's size and is dropped) (JAX's
/// `psum_scatter`).
pub fn psum_scatter(x: &Tensor, axis: &str, dim: usize, tiled: bool) -> Tensor {
    let (frame, idx) = frame_of("psum_scatter", &[axis.to_string()]);
    let a = idx[0];
    let s = frame.mesh.sizes[a];
    let local = x.shape().to_vec();
    if dim >= local.len() {
        panic!("sharding::psum_scatter: dim {dim} is out of range for a block of shape {local:?}");
    }
    if tiled && local[dim] % s != 0 || !tiled && local[dim] != s {
        panic!(
            "sharding::psum_scatter: dimension {dim} of the block (shape {local:?}) must {} the size \
             of axis {axis:?} ({s})",
            if tiled { "be a multiple of" } else { "equal" }
        );
    }
    let m = frame.mesh.names.len();
    let (v, batched) = stacked("psum_scatter", &frame, x);
    let vm = frame.trace.lift(&v, batched);
    let summed = mesh_view(&frame, &vm).sum(&[a as isize], false); // [mesh without a, local]
                                                                   // Split `dim` into [s, rest] (tiled) or take it whole as s (untiled),
                                                                   // and move that s into the mesh's place a.
    let mut split = local.clone();
    if tiled {
        split[dim] = local[dim] / s;
        split.insert(dim, s);
    }
    let mut shape: Vec<usize> = frame.mesh.sizes.clone();
    shape.remove(a);
    shape.extend_from_slice(&split);
    let r = summed
        .reshape(&shape)
        .moveaxis((m - 1 + dim) as isize, a as isize);
    let vary = frame.trace.vary(x) | 1 << a;
    restack(&frame, &r, vary)
}

/// `x` sent along `axis` by `perm`'s `(source, destination)` pairs of
/// indices along it: device `dst` gets device `src`'s value; a device no
/// pair sends to gets zeros (JAX's `ppermute`).
pub fn ppermute(x: &Tensor, axis: &str, perm: &[(usize, usize)]) -> Tensor {
    let (frame, idx) = frame_of("ppermute", &[axis.to_string()]);
    let a = idx[0];
    let s = frame.mesh.sizes[a];
    let mut src = vec![None; s];
    for &(i, j) in perm {
        if i >= s || j >= s {
            panic!(
                "sharding::ppermute: pair ({i}, {j}) is out of range for axis {axis:?} of size {s}"
            );
        }
        if src[j].is_some() || perm.iter().filter(|p| p.0 == i).count() > 1 {
            panic!("sharding::ppermute: {perm:?} is not a permutation (a device sends or receives twice)");
        }
        src[j] = Some(i);
    }
    let (v, batched) = stacked("ppermute", &frame, x);
    let vm = mesh_view(&frame, &frame.trace.lift(&v, batched));
    let from: Vec<i32> = src.iter().map(|s| s.unwrap_or(0) as i32).collect();
    let moved = vm.take(&Tensor::from_slice(&from, &[s]), a as isize);
    let keep: Vec<bool> = src.iter().map(Option::is_some).collect();
    let moved = if keep.iter().all(|&k| k) {
        moved
    } else {
        let mut mshape = vec![1; vm.ndim()];
        mshape[a] = s;
        let mask = Tensor::from_slice(&keep, &[s]).reshape(&mshape);
        Tensor::where_(&mask.broadcast_to(vm.shape()), &moved, &moved.zeros_like())
    };
    restack(&frame, &moved, frame.trace.vary(x) | 1 << a)
}

/// Block `i` of dimension `split_dim` of each device's `x` goes to device
/// `i` along `axis`, which stacks what it receives, in device order, at
/// dimension `concat_dim` (JAX's `all_to_all`, untiled: `split_dim` has the
/// axis's size and is replaced by the new dimension).
pub fn all_to_all(x: &Tensor, axis: &str, split_dim: usize, concat_dim: usize) -> Tensor {
    let (frame, idx) = frame_of("all_to_all", &[axis.to_string()]);
    let a = idx[0];
    let s = frame.mesh.sizes[a];
    let local = x.shape().to_vec();
    if split_dim >= local.len() || concat_dim >= local.len() || local[split_dim] != s {
        panic!(
            "sharding::all_to_all: split_dim {split_dim} must be a dimension of size {s} (axis \
             {axis:?}) and concat_dim {concat_dim} a dimension of the block (shape {local:?})"
        );
    }
    let m = frame.mesh.names.len();
    let (v, batched) = stacked("all_to_all", &frame, x);
    let vm = mesh_view(&frame, &frame.trace.lift(&v, batched));
    // Device c's block j goes to device j at position c: swap the mesh
    // axis with the split dimension, then move the received one to
    // concat_dim.
    let n = vm.ndim();
    let mut perm: Vec<isize> = (0..n as isize).collect();
    perm.swap(a, m + split_dim);
    let swapped = vm.permute(&perm);
    let r = swapped.moveaxis((m + split_dim) as isize, (m + concat_dim) as isize);
    restack(&frame, &r, frame.trace.vary(x) | 1 << a)
}

/// This device's index along `axis`, a 0-d `I32` (JAX's `axis_index`).
pub fn axis_index(axis: &str) -> Tensor {
    let (frame, idx) = frame_of("axis_index", &[axis.to_string()]);
    let a = idx[0];
    let mesh = &frame.mesh;
    let mut shape = vec![1; mesh.names.len()];
    shape[a] = mesh.sizes[a];
    let along = Tensor::arange(0.0, mesh.sizes[a] as f64, 1.0, DType::I32).reshape(&shape);
    let all = along.broadcast_to(&mesh.sizes).reshape(&[mesh.size()]);
    frame.trace.pack_varying(all, 1 << a)
}

/// The number of devices along `axis` (JAX's `axis_size`).
pub fn axis_size(axis: &str) -> usize {
    let (frame, idx) = frame_of("axis_size", &[axis.to_string()]);
    frame.mesh.sizes[idx[0]]
}
