//! Running a rendered CUDA program ([`CudaProgram`]) on a [`Device`]: its
//! plan's steps over device buffers. A kernel step is a launch (its
//! outputs fresh buffers from the caching allocator, one grid-stride loop
//! over its output points); a product is a gemm through the device
//! interface, its operands the device values as they lie (a transpose is a
//! BLAS operation, not a copy); an eager view step is a new layout over
//! the same buffer. Intermediates go back to the allocator's cache at
//! their last use (the plan's frees), where the next step or call takes
//! them again.
//!
//! Inputs are device buffers (uploaded by the caller, or an earlier
//! call's unread outputs); outputs and writeback values come back as
//! contiguous device buffers: nothing here moves data between the host and
//! the device but the constants, uploaded once by [`DeviceProgram::new`].
//!
//! The indices of gathers and scatters compiled into kernels are checked
//! on the host before any kernel runs ([`DeviceProgram::check_indices`],
//! as the CPU's runtime does): the caller hands over their host values.
//!
//! A staged loop ([`crate::graph::Loop`]) is driven from the host over
//! its body's kernels (`device/loops.rs`): its carries stay on the device
//! from step to step, with no transfer.
//!
//! Not run yet (an error naming them): products of operands no BLAS
//! layout describes, products of integers and complex numbers.

use super::{Buffer, DevPtr, Device, Gemm, KernelArg, ModuleId, Operand};
use crate::codegen::cuda_library::FLAG_CLEAR;
use crate::cuda::{CudaKernel, CudaProgram, LibraryKernel};
use crate::graph::{Op, Var};
use crate::index_check::IndexCheck;
use crate::plan::Step;
use nx::layout::Layout;
use nx::{DType, Prim, Tensor};
use std::sync::Arc;

/// A device value: a buffer seen through a layout (in elements).
#[derive(Clone)]
pub(super) struct Value {
    pub(super) buf: Arc<Buffer>,
    pub(super) layout: Layout,
    pub(super) dtype: DType,
}

impl Value {
    /// `buf` holding a value of aval `a`, contiguous from its first byte.
    pub(super) fn dense(buf: Arc<Buffer>, a: &nx::Aval) -> Value {
        Value {
            buf,
            layout: Layout::contiguous(&a.shape),
            dtype: a.dtype,
        }
    }

    /// The value itself if its elements are contiguous, else a contiguous
    /// copy on the device (a strided-copy kernel: a view of a buffer that
    /// a library step's operand made an eager view, read by a kernel).
    pub(super) fn contiguous(&self) -> Result<Value, String> {
        if self.dense_ptr().is_some() {
            return Ok(self.clone());
        }
        let l = &self.layout;
        if l.shape.len() > MAX_COPY_RANK {
            return Err(unsupported(&format!(
                "a strided view of rank {} read by a kernel",
                l.shape.len()
            )));
        }
        let device = self.buf.device();
        let es = self.dtype.size_in_bytes();
        let n = l.numel();
        let out = Arc::new(device.alloc(n * es)?);
        let module = device.module(STRIDED_COPY)?;
        let mut args = vec![
            KernelArg::Ptr(out.ptr()),
            KernelArg::Ptr(self.buf.ptr().offset(l.offset * es)),
            KernelArg::I64(es as i64),
            KernelArg::I64(l.shape.len() as i64),
            KernelArg::I64(n as i64),
        ];
        for a in 0..MAX_COPY_RANK {
            args.push(KernelArg::I64(l.shape.get(a).map_or(1, |&d| d as i64)));
        }
        for a in 0..MAX_COPY_RANK {
            args.push(KernelArg::I64(l.strides.get(a).map_or(0, |&d| d as i64)));
        }
        let grid = n.div_ceil(BLOCK).clamp(1, MAX_GRID);
        device
            .api()
            .launch(module, "tk_strided_copy", grid as u32, BLOCK as u32, &args)?;
        Ok(Value {
            buf: out,
            layout: Layout::contiguous(&l.shape),
            dtype: self.dtype,
        })
    }

    /// A device value of its own: the buffer itself when the value is all
    /// of it from its first byte, else a contiguous copy on the device.
    pub(super) fn into_device_value(self) -> Result<DeviceValue, String> {
        let bytes = self.layout.numel() * self.dtype.size_in_bytes();
        let this = self.contiguous()?;
        let ptr = this.dense_ptr().expect("dense");
        let buffer = if ptr == this.buf.ptr() {
            this.buf
        } else {
            let device = this.buf.device();
            let b = device.alloc(bytes)?;
            if bytes > 0 {
                device.api().copy_on_device(b.ptr(), ptr, bytes)?;
            }
            Arc::new(b)
        };
        Ok(DeviceValue {
            buffer,
            dtype: this.dtype,
            shape: this.layout.shape,
        })
    }

    /// Its first element's address, if its elements are contiguous in
    /// row-major order.
    pub(super) fn dense_ptr(&self) -> Option<DevPtr> {
        (self.layout.is_contiguous() || self.layout.numel() <= 1).then(|| {
            self.buf
                .ptr()
                .offset(self.layout.offset * self.dtype.size_in_bytes())
        })
    }
}

/// A program loaded on a device, ready to run.
pub struct DeviceProgram {
    pub(super) device: Arc<Device>,
    pub(super) program: CudaProgram,
    module: ModuleId,
    /// The constants, uploaded once.
    consts: Vec<(Var, Arc<Buffer>)>,
    /// Bytes the constants moved to the device (once, in [`DeviceProgram::new`]).
    pub const_bytes: u64,
    /// The indices its kernels gather or scatter by that are inputs, and
    /// those of constants that failed their check (raised at every call);
    /// a loop body's checks of loop consts that are inputs here included.
    pub(super) index_checks: Vec<IndexCheck>,
    /// Per loop equation (its index): its body on the device.
    bodies: Vec<(usize, DeviceProgram)>,
}

/// What one call returns: per graph output and per writeback (input leaf,
/// value), a contiguous device buffer with its dtype and shape.
pub struct Run {
    /// The outputs, in the graph's order.
    pub outputs: Vec<DeviceValue>,
    /// `(leaf, value)`: the values to assign into input leaves.
    pub writebacks: Vec<(usize, DeviceValue)>,
    /// Bytes copied to the host to check indices computed on the device
    /// (a loop's carried or per-step indices, checked at every step).
    pub index_bytes: u64,
}

/// A contiguous device value returned by [`DeviceProgram::run`].
#[derive(Clone, Debug)]
pub struct DeviceValue {
    /// Its bytes (exactly `numel * dtype size` of them are the value).
    pub buffer: Arc<Buffer>,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
}

impl DeviceValue {
    /// Bytes the value holds.
    pub fn bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.size_in_bytes()
    }
}

/// The highest rank [`Value::contiguous`] copies.
const MAX_COPY_RANK: usize = 8;

/// A strided copy of `n` elements of `es` bytes into contiguous `dst`:
/// `src` is the view's first element, `d0..` its shape, `s0..` its strides
/// in elements (unused axes: size 1).
const STRIDED_COPY: &str = r#"
extern "C" __global__ void __launch_bounds__(256) tk_strided_copy(
    void *dst, void *src, long long es, long long rank, long long n,
    long long d0, long long d1, long long d2, long long d3,
    long long d4, long long d5, long long d6, long long d7,
    long long s0, long long s1, long long s2, long long s3,
    long long s4, long long s5, long long s6, long long s7) {
  const long long dims[8] = {d0, d1, d2, d3, d4, d5, d6, d7};
  const long long strides[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long rem = i, off = 0;
    for (long long a = rank - 1; a >= 0; --a) {
      off += (rem % dims[a]) * strides[a];
      rem /= dims[a];
    }
    switch (es) {
    case 1: ((unsigned char *)dst)[i] = ((const unsigned char *)src)[off]; break;
    case 2: ((unsigned short *)dst)[i] = ((const unsigned short *)src)[off]; break;
    case 4: ((unsigned int *)dst)[i] = ((const unsigned int *)src)[off]; break;
    default: ((unsigned long long *)dst)[i] = ((const unsigned long long *)src)[off]; break;
    }
  }
}
"#;

/// Threads per block (the dialect's `__launch_bounds__`).
const BLOCK: usize = crate::codegen::cuda::BLOCK;
/// Blocks at most per launch: grid-stride loops cover the rest.
const MAX_GRID: usize = 65535;

pub(super) fn unsupported(what: &str) -> String {
    format!(
        "{what} on device \"{}\" is not run yet; use device \"CPU\"",
        crate::cuda::DEVICE
    )
}

impl DeviceProgram {
    /// Loads `program`'s module (and its loops' bodies') on `device` and
    /// uploads its constants. `Err` names what failed on the device.
    pub fn new(device: &Arc<Device>, mut program: CudaProgram) -> Result<DeviceProgram, String> {
        let mut bodies = Vec::new();
        let mut const_bytes = 0;
        for (i, b) in std::mem::take(&mut program.bodies) {
            let b = DeviceProgram::new(device, b)?;
            const_bytes += b.const_bytes;
            bodies.push((i, b));
        }
        let g = &program.graph;
        let module = device.module(&program.source)?;
        let mut consts = Vec::new();
        for (v, t) in &g.consts {
            consts.push((*v, Arc::new(device.upload_tensor(t)?)));
            const_bytes += (t.numel() * t.dtype().size_in_bytes()) as u64;
        }
        let mut index_checks = IndexCheck::per_call(g, &program.plan);
        // A body's indices that are a loop const which is an input here are
        // checked with this program's (before any kernel runs).
        for (i, b) in &bodies {
            let e = &g.eqns[*i];
            let Op::Loop(lp) = &e.op else {
                unreachable!("tolk: a body of a loop")
            };
            for c in &b.index_checks {
                if let Some(outer) = super::loops::lifted(lp, &e.inputs, g, &b.program.graph, c) {
                    index_checks.push(IndexCheck {
                        base: outer,
                        ..c.clone()
                    });
                }
            }
        }
        Ok(DeviceProgram {
            device: device.clone(),
            program,
            module,
            consts,
            const_bytes,
            index_checks,
            bodies,
        })
    }

    /// Checks the indices kernels will gather or scatter by, before any
    /// kernel runs (a kernel cannot raise halfway): `input(pos)` is the
    /// host value of input `pos` (asked only for inputs holding indices).
    /// `Err` is eager's message for the first index out of range.
    pub fn check_indices(&self, input: &mut dyn FnMut(usize) -> Tensor) -> Result<(), String> {
        let g = &self.program.graph;
        for c in &self.index_checks {
            let value = match g.inputs.iter().position(|&v| v == c.base) {
                Some(pos) => input(pos),
                None => g
                    .consts
                    .iter()
                    .find(|(v, _)| *v == c.base)
                    .unwrap()
                    .1
                    .clone(),
            };
            c.try_check(&value)?;
        }
        Ok(())
    }

    /// The rendered program (its loops' bodies are [`DeviceProgram`]s of
    /// their own).
    pub fn program(&self) -> &CudaProgram {
        &self.program
    }

    /// Kernels in this program and its loops' bodies.
    pub fn num_kernels(&self) -> usize {
        self.program.kernels.len()
            + self
                .bodies
                .iter()
                .map(|(_, b)| b.num_kernels())
                .sum::<usize>()
    }

    /// Its device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Runs the plan on `inputs` (one contiguous device buffer per graph
    /// input, of its aval's size).
    pub fn run(&self, inputs: &[Arc<Buffer>]) -> Result<Run, String> {
        let g = &self.program.graph;
        assert_eq!(inputs.len(), g.inputs.len(), "tolk: one buffer per input");
        let ins = g
            .inputs
            .iter()
            .zip(inputs)
            .map(|(&v, b)| Value::dense(b.clone(), g.aval(v)))
            .collect();
        let mut index_bytes = 0;
        let (outs, wbs) = self.run_values(ins, &mut index_bytes)?;
        let finish = |val: Value| val.into_device_value();
        let outputs = outs.into_iter().map(finish).collect::<Result<_, _>>()?;
        let writebacks = wbs
            .into_iter()
            .map(|(i, v)| finish(v).map(|d| (i, d)))
            .collect::<Result<_, _>>()?;
        Ok(Run {
            outputs,
            writebacks,
            index_bytes,
        })
    }

    /// Runs the plan on device values (one per graph input); returns the
    /// outputs and the writebacks' `(leaf, value)` as they lie (views
    /// included). `index_bytes` counts the bytes copied out to check
    /// indices computed on the device (inside loops).
    #[allow(clippy::type_complexity)]
    pub(super) fn run_values(
        &self,
        inputs: Vec<Value>,
        index_bytes: &mut u64,
    ) -> Result<(Vec<Value>, Vec<(usize, Value)>), String> {
        let p = &self.program;
        let g = &p.graph;
        let mut slots: Vec<Option<Value>> = vec![None; g.avals.len()];
        for (&v, val) in g.inputs.iter().zip(inputs) {
            slots[v] = Some(val);
        }
        for (v, b) in &self.consts {
            slots[*v] = Some(Value::dense(b.clone(), g.aval(*v)));
        }
        for (s, step) in p.plan.steps.iter().enumerate() {
            match step {
                Step::Kernel { kernel, outs, args } => {
                    let k = &p.kernels[*kernel];
                    let mut params = Vec::with_capacity(outs.len() + args.len() + 2);
                    for &o in outs {
                        let buf = Arc::new(self.device.alloc(bytes_of(g.aval(o)))?);
                        params.push(KernelArg::Ptr(buf.ptr()));
                        slots[o] = Some(Value::dense(buf, g.aval(o)));
                    }
                    for &a in args {
                        let v = slots[a]
                            .as_ref()
                            .expect("tolk: kernel argument not computed");
                        if v.dense_ptr().is_none() {
                            // A view made for a product, read by a kernel too.
                            slots[a] = Some(v.contiguous()?);
                        }
                        let v = slots[a].as_ref().unwrap();
                        params.push(KernelArg::Ptr(v.dense_ptr().expect("dense")));
                    }
                    params.push(KernelArg::I64(0));
                    params.push(KernelArg::I64(k.points as i64));
                    if k.points > 0 {
                        let grid = k.points.div_ceil(BLOCK).clamp(1, MAX_GRID);
                        self.device.api().launch(
                            self.module,
                            &k.name,
                            grid as u32,
                            BLOCK as u32,
                            &params,
                        )?;
                    }
                }
                Step::Library { eqn } => {
                    let e = &g.eqns[*eqn];
                    let prim = match &e.op {
                        Op::Prim(prim) => prim,
                        Op::Loop(lp) => {
                            let ins = e
                                .inputs
                                .iter()
                                .map(|&v| slots[v].clone().expect("tolk: loop input"))
                                .collect();
                            let body = self.body(*eqn);
                            let outs = body.run_loop(lp, &e.inputs, g, ins, index_bytes)?;
                            for (&o, val) in e.outs.iter().zip(outs) {
                                slots[o] = Some(val);
                            }
                            for &v in &p.plan.frees[s] {
                                slots[v] = None;
                            }
                            continue;
                        }
                    };
                    if let Some(lk) = p.library.iter().find(|l| l.eqn == *eqn) {
                        self.run_library(lk, e, &mut slots, index_bytes)?;
                    } else if prim.class() == nx::PrimClass::View {
                        let mut src = slots[e.inputs[0]].clone().expect("tolk: view of nothing");
                        if prim.view_layout(&src.layout).is_none() {
                            // A reshape no strides express over this view
                            // (of a permuted one): of a contiguous copy.
                            src = src.contiguous()?;
                        }
                        let layout = prim.view_layout(&src.layout).ok_or_else(|| {
                            unsupported(&format!(
                                "{} that is not a view of its operand",
                                prim.name()
                            ))
                        })?;
                        slots[e.out()] = Some(Value { layout, ..src });
                    } else if let Prim::DotGeneral { .. } = prim {
                        let lhs = slots[e.inputs[0]].clone().expect("tolk: operand");
                        let rhs = slots[e.inputs[1]].clone().expect("tolk: operand");
                        let out = e.out();
                        let a = g.aval(out);
                        let buf = Arc::new(self.device.alloc(bytes_of(a))?);
                        if a.numel() > 0 {
                            let gemm = match gemm_of(prim, &lhs, &rhs, buf.ptr()) {
                                Ok(g) => g,
                                // Operands no BLAS layout describes: copied
                                // on the device in [batch, free, contracted]
                                // order first.
                                Err(_) => {
                                    let (p, l, r) = canonical(prim, &lhs, &rhs)?;
                                    gemm_of(&p, &l, &r, buf.ptr())?
                                }
                            };
                            if gemm.k == 0 {
                                return Err(unsupported("a product over an empty axis"));
                            }
                            self.device.api().gemm(&gemm)?;
                        }
                        slots[out] = Some(Value::dense(buf, a));
                    } else {
                        return Err(unsupported(&format!("operation {}", prim.name())));
                    }
                }
            }
            for &v in &p.plan.frees[s] {
                slots[v] = None;
            }
        }
        let take = |v: Var| slots[v].clone().expect("tolk: output not computed");
        let outputs = g.outputs.iter().map(|&v| take(v)).collect();
        let writebacks = g
            .writebacks
            .iter()
            .filter(|&&(i, v)| g.inputs[i] != v)
            .map(|&(i, v)| (i, take(v)))
            .collect();
        Ok((outputs, writebacks))
    }

    /// Runs library step `lk` (equation `e`) as its kernel: its operands
    /// made contiguous, its output fresh. A gather's or scatter-add's
    /// indices are checked on the device first: a flag cleared, set by
    /// the check kernel when an index is out of range, read back (4 bytes,
    /// counted in `index_bytes`) before the step runs; when set, the
    /// indices are read back too and eager's message for the first one out
    /// of range is raised (as a loop's per-step check raises it).
    fn run_library(
        &self,
        lk: &LibraryKernel,
        e: &crate::graph::Eqn,
        slots: &mut [Option<Value>],
        index_bytes: &mut u64,
    ) -> Result<(), String> {
        let g = &self.program.graph;
        let api = self.device.api();
        let mut ins = Vec::with_capacity(e.inputs.len());
        for &v in &e.inputs {
            let val = slots[v].as_ref().expect("tolk: library step input");
            ins.push(val.contiguous()?);
        }
        if let Some(c) = &lk.check {
            let idx = &ins[1];
            if c.kernel.points > 0 {
                let flag = self.device.alloc(4)?;
                let clear = [
                    KernelArg::Ptr(flag.ptr()),
                    KernelArg::I64(0),
                    KernelArg::I64(1),
                ];
                api.launch(self.module, FLAG_CLEAR, 1, 1, &clear)?;
                self.launch(&c.kernel, &[flag.ptr(), idx.dense_ptr().expect("dense")])?;
                let mut set = [0u8; 4];
                api.copy_out(flag.ptr(), &mut set)?;
                *index_bytes += 4;
                if set != [0; 4] {
                    let check = IndexCheck {
                        op: c.op,
                        base: e.inputs[1],
                        views: Vec::new(),
                        axis: c.axis,
                        axis_len: c.axis_len,
                    };
                    check.check(&super::loops::host(idx, index_bytes)?);
                    unreachable!("tolk: the device flagged an index the host finds in range");
                }
            }
        }
        let a = g.aval(e.out());
        let out = Arc::new(self.device.alloc(bytes_of(a))?);
        let mut ptrs = vec![out.ptr()];
        ptrs.extend(ins.iter().map(|v| v.dense_ptr().expect("dense")));
        self.launch(&lk.kernel, &ptrs)?;
        slots[e.out()] = Some(Value::dense(out, a));
        Ok(())
    }

    /// Launches `k` over buffers `ptrs` and its points (`lo` 0, `hi` its
    /// points), one thread per point up to the grid's limit.
    fn launch(&self, k: &CudaKernel, ptrs: &[DevPtr]) -> Result<(), String> {
        if k.points == 0 {
            return Ok(());
        }
        let mut params: Vec<KernelArg> = ptrs.iter().map(|&p| KernelArg::Ptr(p)).collect();
        params.push(KernelArg::I64(0));
        params.push(KernelArg::I64(k.points as i64));
        let grid = k.points.div_ceil(BLOCK).clamp(1, MAX_GRID);
        self.device
            .api()
            .launch(self.module, &k.name, grid as u32, BLOCK as u32, &params)
    }

    /// The body of loop equation `eqn`.
    fn body(&self, eqn: usize) -> &DeviceProgram {
        &self
            .bodies
            .iter()
            .find(|(i, _)| *i == eqn)
            .expect("tolk: a loop without its body")
            .1
    }
}

/// Bytes of a value of aval `a`.
fn bytes_of(a: &nx::Aval) -> usize {
    a.numel() * a.dtype.size_in_bytes()
}

/// `dot_general`'s operands copied contiguous in canonical order (lhs
/// `[batch, free, contracted]`, rhs `[batch, contracted, free]`) and the
/// product over them, for operands whose layouts are not one strided batch
/// of matrices (the output's order is unchanged: batch, lhs free, rhs free).
fn canonical(prim: &Prim, lhs: &Value, rhs: &Value) -> Result<(Prim, Value, Value), String> {
    let Prim::DotGeneral {
        lhs_contract,
        rhs_contract,
        lhs_batch,
        rhs_batch,
    } = prim
    else {
        unreachable!()
    };
    let order =
        |v: &Value, batch: &[usize], mid: &[usize], free_last: bool| -> Result<Value, String> {
            let rank = v.layout.shape.len();
            let free: Vec<usize> = (0..rank)
                .filter(|a| !batch.contains(a) && !mid.contains(a))
                .collect();
            let mut perm: Vec<usize> = batch.to_vec();
            if free_last {
                perm.extend(mid);
                perm.extend(&free);
            } else {
                perm.extend(&free);
                perm.extend(mid);
            }
            let l = &v.layout;
            let view = Value {
                layout: Layout {
                    shape: perm.iter().map(|&a| l.shape[a]).collect(),
                    strides: perm.iter().map(|&a| l.strides[a]).collect(),
                    offset: l.offset,
                },
                ..v.clone()
            };
            let mut c = view.contiguous()?;
            if c.dense_ptr().is_some() && !c.layout.is_contiguous() {
                // A value of at most one element: any layout of it is dense.
                c.layout = Layout {
                    offset: c.layout.offset,
                    ..Layout::contiguous(&c.layout.shape)
                };
            }
            Ok(c)
        };
    let (nb, nc) = (lhs_batch.len(), lhs_contract.len());
    let l = order(lhs, lhs_batch, lhs_contract, false)?;
    let r = order(rhs, rhs_batch, rhs_contract, true)?;
    let l_rank = l.layout.shape.len();
    let p = Prim::DotGeneral {
        lhs_contract: (l_rank - nc..l_rank).collect(),
        rhs_contract: (nb..nb + nc).collect(),
        lhs_batch: (0..nb).collect(),
        rhs_batch: (0..nb).collect(),
    };
    Ok((p, l, r))
}

/// One group of dims `(size, stride)` as one, if they step through
/// memory as one row-major axis (size-1 dims ignored; none: size 1).
fn merge(dims: &[(usize, isize)]) -> Option<(usize, usize)> {
    let dims: Vec<(usize, isize)> = dims.iter().copied().filter(|d| d.0 != 1).collect();
    let Some(&(_, last_stride)) = dims.last() else {
        return Some((1, 0));
    };
    if dims.iter().any(|d| d.1 < 0) {
        return None;
    }
    for w in dims.windows(2) {
        if w[0].1 != w[1].1 * w[1].0 as isize {
            return None;
        }
    }
    Some((dims.iter().map(|d| d.0).product(), last_stride as usize))
}

/// `dot_general` over `lhs` and `rhs` as one batched gemm writing `c`, or
/// why its operands' layouts are not one.
fn gemm_of(prim: &Prim, lhs: &Value, rhs: &Value, c: DevPtr) -> Result<Gemm, String> {
    let Prim::DotGeneral {
        lhs_contract,
        rhs_contract,
        lhs_batch,
        rhs_batch,
    } = prim
    else {
        unreachable!()
    };
    let dtype = lhs.dtype;
    if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        return Err(unsupported(&format!("a product of {dtype:?}")));
    }
    let dims = |v: &Value, axes: &[usize]| -> Vec<(usize, isize)> {
        axes.iter()
            .map(|&a| (v.layout.shape[a], v.layout.strides[a]))
            .collect()
    };
    let free = |v: &Value, contract: &[usize], batch: &[usize]| -> Vec<usize> {
        (0..v.layout.shape.len())
            .filter(|a| !contract.contains(a) && !batch.contains(a))
            .collect()
    };
    let layout_err =
        || unsupported("a product whose operand layout is not one strided batch of matrices");
    let lb = merge(&dims(lhs, lhs_batch)).ok_or_else(layout_err)?;
    let rb = merge(&dims(rhs, rhs_batch)).ok_or_else(layout_err)?;
    let (m, m_stride) =
        merge(&dims(lhs, &free(lhs, lhs_contract, lhs_batch))).ok_or_else(layout_err)?;
    let (k, lk_stride) = merge(&dims(lhs, lhs_contract)).ok_or_else(layout_err)?;
    let (_, rk_stride) = merge(&dims(rhs, rhs_contract)).ok_or_else(layout_err)?;
    let (n, n_stride) =
        merge(&dims(rhs, &free(rhs, rhs_contract, rhs_batch))).ok_or_else(layout_err)?;
    let es = dtype.size_in_bytes();
    let a = Operand {
        ptr: lhs.buf.ptr().offset(lhs.layout.offset * es),
        row_stride: m_stride,
        col_stride: lk_stride,
        batch_stride: lb.1,
    };
    let b = Operand {
        ptr: rhs.buf.ptr().offset(rhs.layout.offset * es),
        row_stride: rk_stride,
        col_stride: n_stride,
        batch_stride: rb.1,
    };
    if a.blas_layout(m, k).is_none() || b.blas_layout(k, n).is_none() {
        return Err(layout_err());
    }
    Ok(Gemm {
        dtype,
        batch: lb.0,
        m,
        n,
        k,
        a,
        b,
        c,
    })
}

#[cfg(test)]
mod tests {
    use super::merge;

    #[test]
    fn dims_merge_when_they_step_as_one() {
        assert_eq!(merge(&[]), Some((1, 0)));
        assert_eq!(merge(&[(2, 12), (3, 4)]), Some((6, 4)));
        assert_eq!(merge(&[(2, 12), (1, 99), (3, 4)]), Some((6, 4)));
        assert_eq!(merge(&[(2, 3), (3, 1)]), Some((6, 1)));
        assert_eq!(merge(&[(2, 4), (3, 1)]), None);
        assert_eq!(merge(&[(3, 1), (2, 3)]), None);
        assert_eq!(merge(&[(3, -1)]), None);
    }
}
