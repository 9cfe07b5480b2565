//! `pmap` over CUDA devices (`"CUDA:0"`, `"CUDA:1"`, ...): a
//! [`ShardPlan`] (`tolk::shard`'s sharding propagation, the same as on
//! `CPU:n`) whose stages are rendered as CUDA programs, one
//! [`DeviceProgram`] per device, and whose collectives run on the devices
//! with peer copies ([`super::DeviceApi::copy_from_peer`]) and small
//! kernels, never through the host:
//!
//! - all-reduce: the CPU's tree (devices paired `(0, 1), (2, 3), ...`,
//!   level by level, each pair combined on its first device after a peer
//!   copy of the second's value: the same order, so the same bits as on
//!   `CPU:n`), then the result copied to every device;
//! - all-gather: every shard copied to device 0, joined there by a
//!   concatenation kernel, the result copied to every device;
//! - slice (a replicated value meeting split ones): each device's slice by
//!   a kernel of its own.
//!
//! Inputs come as host tensors (each device's shard or replica copied in,
//! counted) or as values already on the devices in the program's layout
//! (an unread output of an earlier call); outputs stay on the devices.

use super::exec::{DeviceProgram, DeviceValue, Value};
use super::{Buffer, Device};
use crate::graph::{Eqn, Graph, Var};
use crate::shard::{Convert, Key, PlanStep, ShardPlan, Sharding};
use nx::{Aval, BinaryOp, Prim, ReduceOp, Tensor};
use std::collections::HashMap;
use std::sync::Arc;

/// A step over the devices.
enum DeviceStep {
    /// One program per device, run over its values.
    Stage {
        programs: Vec<DeviceProgram>,
        imports: Vec<Key>,
        exports: Vec<Key>,
    },
    /// Partial -> replicated: per device (`None` where the tree never
    /// combines), the program adding (or multiplying, ...) two values.
    AllReduce {
        from: Key,
        to: Key,
        combine: Vec<Option<DeviceProgram>>,
    },
    /// Split -> replicated: the concatenation on device 0.
    AllGather {
        from: Key,
        to: Key,
        concat: DeviceProgram,
    },
    /// Replicated -> split: per device, the program taking its slice.
    Scatter {
        from: Key,
        to: Key,
        slices: Vec<DeviceProgram>,
    },
}

/// A program sharded across CUDA devices, loaded on them.
pub struct ShardedOnDevices {
    devices: Vec<Arc<Device>>,
    inputs: Vec<Key>,
    /// Per constant: its replica on every device (uploaded once).
    consts: Vec<(Var, Vec<Arc<Buffer>>)>,
    steps: Vec<DeviceStep>,
    outputs: Vec<Key>,
    writebacks: Vec<(usize, Key)>,
    /// The local aval of every key a step reads or defines.
    avals: HashMap<Key, Aval>,
    /// Bytes the constants moved to the devices (once, when loaded).
    pub const_bytes: u64,
}

/// An input leaf of [`ShardedOnDevices::run`]: pmap's input over device
/// values (a host tensor's shards or replicas are copied in).
pub type DeviceInput = crate::shard::Input<DeviceValue>;

/// An output as the devices hold it: one contiguous value per device.
pub type DeviceOutput = crate::shard::Output<DeviceValue>;

/// What one call of [`ShardedOnDevices::run`] returns.
pub struct ShardedRun {
    /// The outputs, in the graph's order.
    pub outputs: Vec<DeviceOutput>,
    /// `(leaf, value)`: replicated values to assign into input leaves
    /// (device 0's replica).
    pub writebacks: Vec<(usize, DeviceValue)>,
    /// Bytes copied from the host (the host inputs' shards and replicas).
    pub to_device: u64,
    /// Bytes copied to the host to check indices (values computed on the
    /// devices that kernels gather by).
    pub from_device: u64,
}

/// A one-equation program over inputs of `avals`.
fn tiny(avals: &[Aval], prim: Prim, out: Aval) -> Graph {
    let mut g = Graph::default();
    let ins: Vec<Var> = avals.iter().map(|a| g.new_var(a.clone())).collect();
    let o = g.new_var(out);
    g.inputs = ins.clone();
    g.eqns.push(Eqn::prim(prim, ins, o));
    g.outputs.push(o);
    g
}

fn load(device: &Arc<Device>, g: Graph) -> Result<DeviceProgram, String> {
    DeviceProgram::new(device, crate::cuda::render_program(g)?)
}

impl ShardedOnDevices {
    /// Renders `plan`'s stages and collectives for `devices` (one per
    /// shard, in order) and loads them. `Err` is the CUDA dialect's
    /// refusal (naming what is not rendered) or a device's failure.
    pub fn new(devices: &[Arc<Device>], plan: ShardPlan) -> Result<ShardedOnDevices, String> {
        let n = plan.n;
        assert_eq!(devices.len(), n, "tolk: one device per shard");
        let mut avals: HashMap<Key, Aval> = HashMap::new();
        let mut note = |k: Key| {
            avals.entry(k).or_insert_with(|| plan.aval(k));
        };
        for &k in plan.inputs.iter().chain(&plan.outputs) {
            note(k);
        }
        let mut steps = Vec::with_capacity(plan.steps.len());
        for step in &plan.steps {
            match step {
                PlanStep::Stage {
                    graph,
                    imports,
                    exports,
                } => {
                    for &k in imports.iter().chain(exports) {
                        note(k);
                    }
                    let programs = devices
                        .iter()
                        .map(|d| load(d, graph.clone()))
                        .collect::<Result<_, _>>()?;
                    steps.push(DeviceStep::Stage {
                        programs,
                        imports: imports.clone(),
                        exports: exports.clone(),
                    });
                }
                PlanStep::Convert { from, to, how } => {
                    note(*from);
                    note(*to);
                    let (a_from, a_to) = (plan.aval(*from), plan.aval(*to));
                    steps.push(match how {
                        Convert::AllReduce(op) => {
                            let bin = match op {
                                ReduceOp::Sum => BinaryOp::Add,
                                ReduceOp::Prod => BinaryOp::Mul,
                                ReduceOp::Max => BinaryOp::Max,
                                ReduceOp::Min => BinaryOp::Min,
                            };
                            let g =
                                tiny(&[a_from.clone(), a_from.clone()], Prim::Binary(bin), a_to);
                            // The tree combines on the devices of even index.
                            let combine = devices
                                .iter()
                                .enumerate()
                                .map(|(i, d)| {
                                    (i % 2 == 0 && n > 1)
                                        .then(|| load(d, g.clone()))
                                        .transpose()
                                })
                                .collect::<Result<_, _>>()?;
                            DeviceStep::AllReduce {
                                from: *from,
                                to: *to,
                                combine,
                            }
                        }
                        Convert::AllGather(axis) => {
                            let g = tiny(&vec![a_from; n], Prim::Concat { axis: *axis }, a_to);
                            DeviceStep::AllGather {
                                from: *from,
                                to: *to,
                                concat: load(&devices[0], g)?,
                            }
                        }
                        Convert::Scatter(axis) => {
                            let len = a_to.shape[*axis];
                            let slices = devices
                                .iter()
                                .enumerate()
                                .map(|(d, dev)| {
                                    let mut start = vec![0; a_from.shape.len()];
                                    let mut end = a_from.shape.clone();
                                    start[*axis] = d * len;
                                    end[*axis] = (d + 1) * len;
                                    let step = vec![1; start.len()];
                                    let g = tiny(
                                        &[a_from.clone()],
                                        Prim::Slice { start, end, step },
                                        a_to.clone(),
                                    );
                                    load(dev, g)
                                })
                                .collect::<Result<_, _>>()?;
                            DeviceStep::Scatter {
                                from: *from,
                                to: *to,
                                slices,
                            }
                        }
                    });
                }
            }
        }
        let mut consts = Vec::new();
        let mut const_bytes = 0;
        for (v, t) in &plan.consts {
            avals.insert((*v, Sharding::Rep), t.aval());
            let copies = devices
                .iter()
                .map(|d| d.upload_tensor(t).map(Arc::new))
                .collect::<Result<_, _>>()?;
            const_bytes += (n * t.numel() * t.dtype().size_in_bytes()) as u64;
            consts.push((*v, copies));
        }
        for s in &steps {
            let programs: Vec<&DeviceProgram> = match s {
                DeviceStep::Stage { programs, .. } => programs.iter().collect(),
                DeviceStep::AllReduce { combine, .. } => combine.iter().flatten().collect(),
                DeviceStep::AllGather { concat, .. } => vec![concat],
                DeviceStep::Scatter { slices, .. } => slices.iter().collect(),
            };
            const_bytes += programs.iter().map(|p| p.const_bytes).sum::<u64>();
        }
        Ok(ShardedOnDevices {
            devices: devices.to_vec(),
            inputs: plan.inputs,
            consts,
            steps,
            outputs: plan.outputs,
            writebacks: plan.writebacks,
            avals,
            const_bytes,
        })
    }

    /// The number of devices.
    pub fn num_devices(&self) -> usize {
        self.devices.len()
    }

    /// Each input leaf's layout: `Some(axis)` split, `None` replicated.
    pub fn input_layout(&self, leaf: usize) -> Option<usize> {
        match self.inputs[leaf].1 {
            Sharding::Split(a) => Some(a),
            _ => None,
        }
    }

    /// Kernels over every stage of one device (for logs).
    pub fn num_kernels(&self) -> usize {
        self.steps
            .iter()
            .map(|s| match s {
                DeviceStep::Stage { programs, .. } => programs[0].num_kernels(),
                _ => 0,
            })
            .sum()
    }

    /// One line for logs: stages and collectives.
    pub fn describe(&self) -> String {
        let parts: Vec<String> = self
            .steps
            .iter()
            .map(|s| match s {
                DeviceStep::Stage { programs, .. } => {
                    format!("stage of {} kernels", programs[0].num_kernels())
                }
                DeviceStep::AllReduce { .. } => "all-reduce".into(),
                DeviceStep::AllGather { .. } => "all-gather".into(),
                DeviceStep::Scatter { .. } => "slice".into(),
            })
            .collect();
        format!("{} devices: {}", self.devices.len(), parts.join(", "))
    }

    /// A peer copy of `v` onto device `to` (the value itself when it is
    /// there already).
    fn to_device(&self, v: &Value, to: usize) -> Result<Value, String> {
        if Arc::ptr_eq(v.buf.device(), &self.devices[to]) {
            return Ok(v.clone());
        }
        let dv = v.clone().into_device_value()?;
        let bytes = dv.bytes();
        let dst = Arc::new(self.devices[to].alloc(bytes)?);
        if bytes > 0 {
            self.devices[to].api().copy_from_peer(
                dst.ptr(),
                dv.buffer.device().api(),
                dv.buffer.ptr(),
                bytes,
            )?;
        }
        Ok(Value::dense(dst, &Aval::new(&dv.shape, dv.dtype)))
    }

    /// Runs the plan: stages on every device, collectives between them.
    pub fn run(&self, inputs: &[DeviceInput]) -> Result<ShardedRun, String> {
        let n = self.devices.len();
        let mut to_device = 0u64;
        let mut from_device = 0u64;
        let mut vals: HashMap<Key, Vec<Value>> = HashMap::new();
        // Host values of input keys (for index checks).
        let mut host: HashMap<Key, Vec<Tensor>> = HashMap::new();
        for (&k, input) in self.inputs.iter().zip(inputs) {
            let a = &self.avals[&k];
            let vs = match input {
                DeviceInput::OnDevices(vs) => vs
                    .iter()
                    .map(|v| Value::dense(v.buffer.clone(), a))
                    .collect(),
                DeviceInput::Global(t) => {
                    let parts: Vec<Tensor> = match k.1 {
                        Sharding::Split(ax) => {
                            let len = t.shape()[ax] / n;
                            (0..n)
                                .map(|d| t.narrow(ax as isize, d * len, len))
                                .collect()
                        }
                        _ => vec![t.clone(); n],
                    };
                    let mut vs = Vec::with_capacity(n);
                    for (d, p) in parts.iter().enumerate() {
                        let b = self.devices[d].upload_tensor(p)?;
                        to_device += (p.numel() * p.dtype().size_in_bytes()) as u64;
                        vs.push(Value::dense(Arc::new(b), a));
                    }
                    host.insert(k, parts);
                    vs
                }
            };
            vals.insert(k, vs);
        }
        for (v, bufs) in &self.consts {
            let k = (*v, Sharding::Rep);
            let a = &self.avals[&k];
            vals.insert(k, bufs.iter().map(|b| Value::dense(b.clone(), a)).collect());
        }
        for step in &self.steps {
            match step {
                DeviceStep::Stage {
                    programs,
                    imports,
                    exports,
                } => {
                    let mut outs: Vec<Vec<Value>> = vec![Vec::with_capacity(n); exports.len()];
                    for (d, p) in programs.iter().enumerate() {
                        let ins: Vec<Value> = imports.iter().map(|k| vals[k][d].clone()).collect();
                        let mut err = None;
                        p.check_indices(&mut |pos| match host.get(&imports[pos]) {
                            Some(parts) => parts[d].clone(),
                            None => match super::loops::host(&ins[pos], &mut from_device) {
                                Ok(t) => t,
                                Err(e) => {
                                    err = Some(e);
                                    nx::Tensor::zeros(&[0], nx::DType::I32)
                                }
                            },
                        })
                        .unwrap_or_else(|m| panic!("{m}"));
                        if let Some(e) = err {
                            return Err(e);
                        }
                        let mut index_bytes = 0;
                        let (results, _) = p.run_values(ins, &mut index_bytes)?;
                        from_device += index_bytes;
                        for (o, v) in outs.iter_mut().zip(results) {
                            o.push(v);
                        }
                    }
                    for (k, vs) in exports.iter().zip(outs) {
                        vals.insert(*k, vs);
                    }
                }
                DeviceStep::AllReduce { from, to, combine } => {
                    let mut level: Vec<(usize, Value)> =
                        vals[from].iter().cloned().enumerate().collect();
                    while level.len() > 1 {
                        let mut next = Vec::with_capacity(level.len().div_ceil(2));
                        for pair in level.chunks(2) {
                            next.push(match pair {
                                [(i, a), (_, b)] => {
                                    let b = self.to_device(b, *i)?;
                                    let p = combine[*i].as_ref().expect("an even device");
                                    let mut unused = 0;
                                    let (mut r, _) =
                                        p.run_values(vec![a.clone(), b], &mut unused)?;
                                    (*i, r.remove(0))
                                }
                                [one] => one.clone(),
                                _ => unreachable!(),
                            });
                        }
                        level = next;
                    }
                    let (_, total) = level.pop().expect("at least one device");
                    let all = (0..n)
                        .map(|d| self.to_device(&total, d))
                        .collect::<Result<_, _>>()?;
                    vals.insert(*to, all);
                }
                DeviceStep::AllGather { from, to, concat } => {
                    let shards = vals[from]
                        .iter()
                        .map(|v| self.to_device(v, 0))
                        .collect::<Result<_, _>>()?;
                    let mut unused = 0;
                    let (mut r, _) = concat.run_values(shards, &mut unused)?;
                    let whole = r.remove(0);
                    let all = (0..n)
                        .map(|d| self.to_device(&whole, d))
                        .collect::<Result<_, _>>()?;
                    vals.insert(*to, all);
                }
                DeviceStep::Scatter { from, to, slices } => {
                    let mut parts = Vec::with_capacity(n);
                    for (d, p) in slices.iter().enumerate() {
                        let mut unused = 0;
                        let (mut r, _) = p.run_values(vec![vals[from][d].clone()], &mut unused)?;
                        parts.push(r.remove(0));
                    }
                    vals.insert(*to, parts);
                }
            }
        }
        let outputs = self
            .outputs
            .iter()
            .map(|k| {
                let split = match k.1 {
                    Sharding::Split(a) => Some(a),
                    Sharding::Rep => None,
                    Sharding::Partial(_) => unreachable!("outputs are all-reduced"),
                };
                let values = vals[k]
                    .iter()
                    .map(|v| v.clone().into_device_value())
                    .collect::<Result<_, _>>()?;
                Ok(DeviceOutput { split, values })
            })
            .collect::<Result<_, String>>()?;
        let writebacks = self
            .writebacks
            .iter()
            .map(|(leaf, k)| Ok((*leaf, vals[k][0].clone().into_device_value()?)))
            .collect::<Result<_, String>>()?;
        Ok(ShardedRun {
            outputs,
            writebacks,
            to_device,
            from_device,
        })
    }
}
