//! Running a sharded program: the device workers (one thread per named
//! host device, kept for the process; the host's devices on the calling
//! thread), the transfers they count, and the collectives between stages
//! (all-reduce as a tree over the devices' values, all-gather, slice), in
//! this process (`run_on`) or across processes through [`Collectives`]
//! (`run_one`).

use super::rules::{Convert, Key, Sharding, Step};
use super::{ShardedProgram, Stage};
use nx::{Prim, ReduceOp, Tensor};
use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

impl ShardedProgram {
    /// Runs the plan on `leaves` (global tensors): splits the sharded ones,
    /// runs each stage once per device, performs the collectives, and
    /// returns the outputs gathered (split outputs concatenated along their
    /// axis, replicated ones from device 0); replicated writebacks are
    /// assigned into their leaves.
    pub fn run(&self, leaves: &[Tensor]) -> Vec<Tensor> {
        let inputs: Vec<Input> = leaves.iter().cloned().map(Input::Global).collect();
        let (outs, _) = self.run_on(&inputs, leaves, &vec![None; self.n]);
        outs.iter().map(|o| o.gather()).collect()
    }

    /// Runs the plan where device `d` is the host (`devices[d]` `None`: it
    /// runs on the calling thread, in host memory) or a named host device
    /// (`Some("CPU:1")`): it runs on that device's own worker thread, side
    /// by side with the others, and has memory of its own, so a global
    /// input's shard or replica is copied to it (counted in the returned
    /// transfers); an input already on the devices in the right layout
    /// ([`Input::OnDevices`]) is used as it is. Replicated writebacks are
    /// read back and assigned into `leaves`; the outputs stay per device.
    pub fn run_on(
        &self,
        inputs: &[Input],
        leaves: &[Tensor],
        devices: &[Option<&str>],
    ) -> (Vec<Output>, Transfers) {
        let n = self.n;
        let host: Vec<bool> = devices.iter().map(|d| d.is_none()).collect();
        let mut moved = Transfers::default();
        let mut vals: HashMap<Key, Vec<Tensor>> = HashMap::new();
        for (&k, input) in self.inputs.iter().zip(inputs) {
            let ts = match input {
                Input::OnDevices(ts) => ts.clone(),
                Input::Global(t) => {
                    let mut ts = per_device(t, k.1, n);
                    for (d, t) in ts.iter_mut().enumerate() {
                        if !host[d] {
                            *t = t.copy();
                            moved.to_device += bytes(t);
                        }
                    }
                    ts
                }
            };
            vals.insert(k, ts);
        }
        for (v, t) in &self.consts {
            vals.insert((*v, Sharding::Rep), vec![t.clone(); n]);
        }
        for step in &self.steps {
            match step {
                Step::Stage(s) => {
                    let mut outs: Vec<Vec<Tensor>> = vec![Vec::with_capacity(n); s.exports.len()];
                    // Every worker device starts its part, then the host
                    // devices run theirs here, then the workers' results
                    // are collected in device order.
                    // Several devices share the machine's cores: each runs
                    // its kernels on its own thread alone, and nx's pool
                    // workers sleep rather than spin beside them.
                    let alone = n > 1;
                    let _rest = alone.then(nx::raw::pool_rest);
                    let mut pending = Vec::with_capacity(n);
                    for (d, dev) in devices.iter().enumerate() {
                        let ins: Vec<Tensor> =
                            s.imports.iter().map(|k| vals[k][d].clone()).collect();
                        pending.push(match dev {
                            Some(name) => Err(run_on_worker(name, s.clone(), d, ins, alone)),
                            None => Ok(ins),
                        });
                    }
                    let results: Vec<Vec<Tensor>> = pending
                        .into_iter()
                        .enumerate()
                        .map(|(d, p)| match p {
                            Ok(ins) => run_device(&s, d, &ins, alone),
                            Err(rx) => match rx.recv().expect("a device worker died") {
                                Ok(outs) => outs,
                                Err(panic) => std::panic::resume_unwind(panic),
                            },
                        })
                        .collect();
                    for r in results {
                        for (o, t) in outs.iter_mut().zip(r) {
                            o.push(t);
                        }
                    }
                    for (k, ts) in s.exports.iter().zip(outs) {
                        vals.insert(*k, ts);
                    }
                }
                Step::Convert { from, to, how } => {
                    let ts = &vals[from];
                    let out = match how {
                        Convert::AllReduce(op) => vec![all_reduce(ts, *op); n],
                        Convert::AllGather(a) => {
                            vec![Tensor::concatenate(ts, *a as isize); n]
                        }
                        Convert::Scatter(a) => per_device(&ts[0], Sharding::Split(*a), n),
                    };
                    vals.insert(*to, out);
                }
            }
        }
        for (leaf, k) in &self.writebacks {
            let out = Output::of(*k, &vals[k]);
            moved.from_device += out.read_bytes(&host);
            leaves[*leaf].assign(&out.gather());
        }
        let outs = self
            .outputs
            .iter()
            .map(|k| Output::of(*k, &vals[k]))
            .collect();
        (outs, moved)
    }
}

/// The collectives of a plan run by one device per process
/// ([`ShardedProgram::run_one`]): each call is made by every process at the
/// same step, with its own value, and returns the combined value.
pub trait Collectives {
    /// Every process's `values[i]` combined with `op`, for each `i` (the
    /// values of consecutive all-reduce steps, to send in one buffer).
    fn all_reduce(&self, values: &[Tensor], op: ReduceOp) -> Vec<Tensor>;
    /// Every process's `value` concatenated along `axis` in process order.
    fn all_gather(&self, value: &Tensor, axis: usize) -> Tensor;
}

impl ShardedProgram {
    /// Runs device `d`'s part of the plan only, in this process: the other
    /// devices are other processes running theirs, and the collective
    /// steps go through `coll`. `inputs[i]` is input leaf `i` as device `d`
    /// holds it (its shard of a split leaf, the whole of a replicated one);
    /// replicated writebacks are assigned into `leaves`. Returns each
    /// output as device `d` holds it: its split axis (`None`: replicated)
    /// and its value.
    pub fn run_one(
        &self,
        d: usize,
        inputs: &[Tensor],
        leaves: &[Tensor],
        coll: &dyn Collectives,
    ) -> Vec<(Option<usize>, Tensor)> {
        let n = self.n;
        let mut vals: HashMap<Key, Tensor> = HashMap::new();
        for (&k, t) in self.inputs.iter().zip(inputs) {
            vals.insert(k, t.clone());
        }
        for (v, t) in &self.consts {
            vals.insert((*v, Sharding::Rep), t.clone());
        }
        let mut i = 0;
        while i < self.steps.len() {
            match &self.steps[i] {
                Step::Stage(s) => {
                    let ins: Vec<Tensor> = s.imports.iter().map(|k| vals[k].clone()).collect();
                    let outs = s.programs[d].lock().unwrap().run(&ins);
                    for (k, t) in s.exports.iter().zip(outs) {
                        vals.insert(*k, t);
                    }
                    i += 1;
                }
                Step::Convert {
                    how: Convert::AllReduce(op),
                    ..
                } => {
                    // Consecutive all-reduces with one op go together.
                    let mut j = i;
                    let mut keys = Vec::new();
                    while let Some(Step::Convert {
                        from,
                        to,
                        how: Convert::AllReduce(o),
                    }) = self.steps.get(j)
                    {
                        if o != op {
                            break;
                        }
                        keys.push((*from, *to));
                        j += 1;
                    }
                    let ins: Vec<Tensor> = keys.iter().map(|(f, _)| vals[f].clone()).collect();
                    let outs = coll.all_reduce(&ins, *op);
                    for ((_, to), t) in keys.iter().zip(outs) {
                        vals.insert(*to, t);
                    }
                    i = j;
                }
                Step::Convert { from, to, how } => {
                    let t = &vals[from];
                    let out = match how {
                        Convert::AllGather(a) => coll.all_gather(t, *a),
                        Convert::Scatter(a) => {
                            let len = t.shape()[*a] / n;
                            t.narrow(*a as isize, d * len, len)
                        }
                        Convert::AllReduce(_) => unreachable!(),
                    };
                    vals.insert(*to, out);
                    i += 1;
                }
            }
        }
        for (leaf, k) in &self.writebacks {
            leaves[*leaf].assign(&vals[k]);
        }
        self.outputs
            .iter()
            .map(|k| {
                let split = match k.1 {
                    Sharding::Split(a) => Some(a),
                    Sharding::Rep => None,
                    Sharding::Partial(_) => unreachable!("outputs are all-reduced"),
                };
                (split, vals[k].clone())
            })
            .collect()
    }
}

/// A pmap input leaf: a host tensor, or values already on the devices in
/// the layout the program expects (an unread output of an earlier call).
/// `V` is a device's value: a tensor on `CPU:n`, a
/// [`crate::device::exec::DeviceValue`] on CUDA devices
/// ([`crate::device::sharded::DeviceInput`]).
pub enum Input<V = Tensor> {
    /// A host tensor, sharded (or replicated, copied to each device) by
    /// the program's input layout.
    Global(Tensor),
    /// One value per device, already in the layout the program expects.
    OnDevices(Vec<V>),
}

/// An output as the devices hold it: one value per device, split along
/// `split` (`Some(axis)`) or replicated. `V` as in [`Input`].
pub struct Output<V = Tensor> {
    /// The axis the values split the output along (`None`: replicated).
    pub split: Option<usize>,
    /// One value per device.
    pub values: Vec<V>,
}

impl Output {
    fn of(k: Key, ts: &[Tensor]) -> Output {
        let split = match k.1 {
            Sharding::Split(a) => Some(a),
            Sharding::Rep => None,
            Sharding::Partial(_) => unreachable!("outputs are all-reduced"),
        };
        Output {
            split,
            values: ts.to_vec(),
        }
    }

    /// The global value: the shards concatenated, or one replica.
    pub fn gather(&self) -> Tensor {
        match self.split {
            Some(a) => Tensor::concatenate(&self.values, a as isize),
            None => self.values[0].clone(),
        }
    }

    /// Bytes reading it moves from devices with memory of their own
    /// (`host[d]`: device `d` is the host): every shard, or one replica.
    pub fn read_bytes(&self, host: &[bool]) -> u64 {
        match self.split {
            Some(_) => (0..self.values.len())
                .filter(|&d| !host[d])
                .map(|d| bytes(&self.values[d]))
                .sum(),
            None if !host[0] => bytes(&self.values[0]),
            None => 0,
        }
    }

    /// Bytes the devices hold for it (every shard or replica, host ones aside).
    pub fn device_bytes(&self, host: &[bool]) -> u64 {
        (0..self.values.len())
            .filter(|&d| !host[d])
            .map(|d| bytes(&self.values[d]))
            .sum()
    }
}

/// Device `d`'s instance of `stage` on `ins`; `alone`: its kernels on this
/// thread only.
fn run_device(stage: &Stage, d: usize, ins: &[Tensor], alone: bool) -> Vec<Tensor> {
    let program = stage.programs[d].lock().unwrap();
    if alone {
        nx::raw::on_this_thread(|| program.run(ins))
    } else {
        program.run(ins)
    }
}

type Job = Box<dyn FnOnce() + Send>;

type Outcome = Result<Vec<Tensor>, Box<dyn std::any::Any + Send>>;

/// Runs device `d`'s instance of `stage` on `ins` on the worker thread of
/// host device `name` (started on first use, kept for the process); the
/// receiver gets the outputs or the panic that stopped them.
fn run_on_worker(
    name: &str,
    stage: Arc<Stage>,
    d: usize,
    ins: Vec<Tensor>,
    alone: bool,
) -> mpsc::Receiver<Outcome> {
    static WORKERS: OnceLock<Mutex<HashMap<String, mpsc::Sender<Job>>>> = OnceLock::new();
    let (tx, rx) = mpsc::channel();
    let job: Job = Box::new(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_device(&stage, d, &ins, alone)
        }));
        let _ = tx.send(out);
    });
    let mut workers = WORKERS.get_or_init(Default::default).lock().unwrap();
    let worker = workers.entry(name.to_string()).or_insert_with(|| {
        let (jtx, jrx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(format!("tolk-{name}"))
            .spawn(move || {
                for job in jrx {
                    job();
                }
            })
            .expect("cannot start a device thread");
        jtx
    });
    worker.send(job).expect("a device worker died");
    rx
}

/// Bytes a call moved between the host and devices with memory of their own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Bytes copied from the host to the devices.
    pub to_device: u64,
    /// Bytes copied from the devices back to the host.
    pub from_device: u64,
}

fn bytes(t: &Tensor) -> u64 {
    (t.numel() * t.dtype().size_in_bytes()) as u64
}

/// The per-device values of global `t` in layout `sh`.
fn per_device(t: &Tensor, sh: Sharding, n: usize) -> Vec<Tensor> {
    match sh {
        Sharding::Split(a) => {
            let len = t.shape()[a] / n;
            (0..n).map(|d| t.narrow(a as isize, d * len, len)).collect()
        }
        _ => vec![t.clone(); n],
    }
}

/// Every device's partial value combined: a tree over the devices' buffers
/// (pairs combined by nx's elementwise kernel, level by level).
pub fn all_reduce(ts: &[Tensor], op: ReduceOp) -> Tensor {
    let mut level: Vec<Tensor> = ts.to_vec();
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        for pair in level.chunks(2) {
            next.push(match pair {
                [a, b] => combine(a, b, op),
                [a] => a.clone(),
                _ => unreachable!(),
            });
        }
        level = next;
    }
    level.pop().expect("at least one device")
}

fn combine(a: &Tensor, b: &Tensor, op: ReduceOp) -> Tensor {
    let bin = match op {
        ReduceOp::Sum => nx::BinaryOp::Add,
        ReduceOp::Prod => nx::BinaryOp::Mul,
        ReduceOp::Max => nx::BinaryOp::Max,
        ReduceOp::Min => nx::BinaryOp::Min,
    };
    nx::raw::eval(Prim::Binary(bin), &[a, b])
}
