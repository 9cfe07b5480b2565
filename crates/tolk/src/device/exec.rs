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
//! Not run yet (an error naming them): staged loops (the host-driven loop
//! over the body's kernels), non-contiguous values read by a kernel,
//! products of operands no BLAS layout describes, f16/bf16 products.

use super::{Buffer, DevPtr, Device, Gemm, KernelArg, ModuleId, Operand};
use crate::cuda::CudaProgram;
use crate::graph::{Op, Var};
use crate::index_check::IndexCheck;
use crate::plan::Step;
use nx::layout::Layout;
use nx::{DType, Prim, Tensor};
use std::sync::Arc;

/// A device value: a buffer seen through a layout (in elements).
#[derive(Clone)]
struct Value {
    buf: Arc<Buffer>,
    layout: Layout,
    dtype: DType,
}

impl Value {
    /// Its first element's address, if its elements are contiguous in
    /// row-major order.
    fn dense_ptr(&self) -> Option<DevPtr> {
        (self.layout.is_contiguous() || self.layout.numel() <= 1).then(|| {
            self.buf
                .ptr()
                .offset(self.layout.offset * self.dtype.size_in_bytes())
        })
    }
}

/// A program loaded on a device, ready to run.
pub struct DeviceProgram {
    device: Arc<Device>,
    program: CudaProgram,
    module: ModuleId,
    /// The constants, uploaded once.
    consts: Vec<(Var, Arc<Buffer>)>,
    /// Bytes the constants moved to the device (once, in [`DeviceProgram::new`]).
    pub const_bytes: u64,
    /// The indices its kernels gather or scatter by that are inputs, and
    /// those of constants that failed their check (raised at every call).
    index_checks: Vec<IndexCheck>,
}

/// What one call returns: per graph output and per writeback (input leaf,
/// value), a contiguous device buffer with its dtype and shape.
pub struct Run {
    /// The outputs, in the graph's order.
    pub outputs: Vec<DeviceValue>,
    /// `(leaf, value)`: the values to assign into input leaves.
    pub writebacks: Vec<(usize, DeviceValue)>,
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

/// Threads per block (the dialect's `__launch_bounds__`).
const BLOCK: usize = crate::codegen::cuda::BLOCK;
/// Blocks at most per launch: grid-stride loops cover the rest.
const MAX_GRID: usize = 65535;

fn unsupported(what: &str) -> String {
    format!(
        "{what} on device \"{}\" is not run yet; use device \"CPU\"",
        crate::cuda::DEVICE
    )
}

/// Whether this runtime runs `program`: `Err` names what it does not run
/// yet (staged loops), as [`DeviceProgram::new`] refuses it before
/// anything runs.
pub fn check(program: &CudaProgram) -> Result<(), String> {
    if program
        .graph
        .eqns
        .iter()
        .any(|e| matches!(e.op, Op::Loop(_)))
    {
        return Err(unsupported("a staged loop (scan under jit)"));
    }
    Ok(())
}

impl DeviceProgram {
    /// Loads `program`'s module on `device` and uploads its constants.
    /// `Err` names what this runtime does not run yet (before anything
    /// runs), or what failed on the device.
    pub fn new(device: &Arc<Device>, program: CudaProgram) -> Result<DeviceProgram, String> {
        check(&program)?;
        let g = &program.graph;
        let module = device.module(&program.source)?;
        let mut consts = Vec::new();
        let mut const_bytes = 0;
        for (v, t) in &g.consts {
            consts.push((*v, Arc::new(device.upload_tensor(t)?)));
            const_bytes += (t.numel() * t.dtype().size_in_bytes()) as u64;
        }
        let index_checks = IndexCheck::per_call(g, &program.plan);
        Ok(DeviceProgram {
            device: device.clone(),
            program,
            module,
            consts,
            const_bytes,
            index_checks,
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

    /// The rendered program.
    pub fn program(&self) -> &CudaProgram {
        &self.program
    }

    /// Its device.
    pub fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// Runs the plan on `inputs` (one contiguous device buffer per graph
    /// input, of its aval's size).
    pub fn run(&self, inputs: &[Arc<Buffer>]) -> Result<Run, String> {
        let p = &self.program;
        let g = &p.graph;
        assert_eq!(inputs.len(), g.inputs.len(), "tolk: one buffer per input");
        let mut slots: Vec<Option<Value>> = vec![None; g.avals.len()];
        let dense = |buf: Arc<Buffer>, v: Var| Value {
            buf,
            layout: Layout::contiguous(&g.aval(v).shape),
            dtype: g.aval(v).dtype,
        };
        for (&v, b) in g.inputs.iter().zip(inputs) {
            slots[v] = Some(dense(b.clone(), v));
        }
        for (v, b) in &self.consts {
            slots[*v] = Some(dense(b.clone(), *v));
        }
        for (s, step) in p.plan.steps.iter().enumerate() {
            match step {
                Step::Kernel { kernel, outs, args } => {
                    let k = &p.kernels[*kernel];
                    let mut params = Vec::with_capacity(outs.len() + args.len() + 2);
                    for &o in outs {
                        let a = g.aval(o);
                        let buf = Arc::new(self.device.alloc(a.numel() * a.dtype.size_in_bytes())?);
                        params.push(KernelArg::Ptr(buf.ptr()));
                        slots[o] = Some(dense(buf, o));
                    }
                    for &a in args {
                        let v = slots[a]
                            .as_ref()
                            .expect("tolk: kernel argument not computed");
                        let ptr = v.dense_ptr().ok_or_else(|| {
                            unsupported(
                                "a kernel reading a strided view of a library step's operand",
                            )
                        })?;
                        params.push(KernelArg::Ptr(ptr));
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
                    let Op::Prim(prim) = &e.op else {
                        return Err(unsupported("a staged loop (scan under jit)"));
                    };
                    if prim.class() == nx::PrimClass::View {
                        let src = slots[e.inputs[0]].clone().expect("tolk: view of nothing");
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
                        let buf = Arc::new(self.device.alloc(a.numel() * a.dtype.size_in_bytes())?);
                        if a.numel() > 0 {
                            let gemm = gemm_of(prim, &lhs, &rhs, buf.ptr())?;
                            if gemm.k == 0 {
                                return Err(unsupported("a product over an empty axis"));
                            }
                            self.device.api().gemm(&gemm)?;
                        }
                        slots[out] = Some(dense(buf, out));
                    } else {
                        return Err(unsupported(&format!("operation {}", prim.name())));
                    }
                }
            }
            for &v in &p.plan.frees[s] {
                slots[v] = None;
            }
        }
        let finish = |v: Var| -> Result<DeviceValue, String> {
            let val = slots[v].as_ref().expect("tolk: output not computed");
            let a = g.aval(v);
            let bytes = a.numel() * a.dtype.size_in_bytes();
            let ptr = val
                .dense_ptr()
                .ok_or_else(|| unsupported("an output that is a strided view"))?;
            let buffer = if ptr == val.buf.ptr() {
                val.buf.clone()
            } else {
                let b = self.device.alloc(bytes)?;
                if bytes > 0 {
                    self.device.api().copy_on_device(b.ptr(), ptr, bytes)?;
                }
                Arc::new(b)
            };
            Ok(DeviceValue {
                buffer,
                dtype: a.dtype,
                shape: a.shape.clone(),
            })
        };
        let outputs = g
            .outputs
            .iter()
            .map(|&v| finish(v))
            .collect::<Result<_, _>>()?;
        let writebacks = g
            .writebacks
            .iter()
            .filter(|&&(i, v)| g.inputs[i] != v)
            .map(|&(i, v)| finish(v).map(|d| (i, d)))
            .collect::<Result<_, _>>()?;
        Ok(Run {
            outputs,
            writebacks,
        })
    }
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
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(unsupported(&format!(
            "a product of {dtype:?} (cublasGemmEx)"
        )));
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
