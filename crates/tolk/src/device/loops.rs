//! Staged loops on a device ([`Loop`]: `scan` under jit), driven from the
//! host over the body's kernels, as the CPU's runtime drives them over
//! its compiled body: each step runs the body's [`DeviceProgram`] on the
//! loop's consts, the carries and this step's rows of the stacked inputs
//! (views of the stacked buffers, no copy); the body's carry outputs are
//! the next step's carries as they lie (device buffers, never copied to
//! the host), and its per-step outputs are copied on the device into
//! their row of the stacked outputs. Nothing crosses between the host and
//! the device per step, except where a step's kernels gather or scatter
//! by indices the loop computes or carries (a carry or a per-step input):
//! those are copied out and checked before the step runs (the CPU's
//! runtime checks them at every step too), counted in
//! [`super::exec::Run::index_bytes`].

use super::exec::{DeviceProgram, Value};
use crate::graph::{Graph, Loop, Var};
use crate::index_check::IndexCheck;
use nx::layout::Layout;
use nx::Tensor;

/// The variable of the enclosing program (`outer`, whose loop equation
/// takes `inputs`) that body check `c` reads when it is a loop const that
/// is an input of `outer`: the enclosing program checks it, before any
/// kernel runs.
pub(super) fn lifted(
    lp: &Loop,
    inputs: &[Var],
    outer: &Graph,
    body: &Graph,
    c: &IndexCheck,
) -> Option<Var> {
    let pos = body.inputs.iter().position(|&v| v == c.base)?;
    (pos < lp.n_consts && outer.inputs.contains(&inputs[pos])).then_some(inputs[pos])
}

/// Row `t` of stacked value `x` (its axis 0): a view, no copy.
fn row(x: &Value, t: usize) -> Value {
    let l = &x.layout;
    let offset = l.offset as isize + t as isize * l.strides[0];
    Value {
        buf: x.buf.clone(),
        layout: Layout {
            shape: l.shape[1..].to_vec(),
            strides: l.strides[1..].to_vec(),
            offset: offset as usize,
        },
        dtype: x.dtype,
    }
}

/// `v`'s elements on the host (for an index check), counted in `bytes`.
pub(super) fn host(v: &Value, bytes: &mut u64) -> Result<Tensor, String> {
    let t = nx::raw::alloc(v.dtype, &v.layout.shape);
    let n = v.layout.numel() * v.dtype.size_in_bytes();
    if n > 0 {
        let v = v.contiguous()?;
        let ptr = v.dense_ptr().expect("dense");
        let w = nx::raw::write(&t);
        // SAFETY: `t` is fresh and contiguous: `n` bytes from its first
        // element are its own, exclusively ours while `w` lives.
        let dst = unsafe { std::slice::from_raw_parts_mut(w.ptr(), n) };
        v.buf.device().api().copy_out(ptr, dst)?;
    }
    *bytes += n as u64;
    Ok(t)
}

impl DeviceProgram {
    /// Runs loop `lp` with this program as its body on the loop
    /// equation's input values (consts, initial carries, stacked xs; the
    /// equation's `inputs` in `outer`); returns the final carries, then
    /// the per-step outputs stacked along axis 0.
    pub(super) fn run_loop(
        &self,
        lp: &Loop,
        inputs: &[Var],
        outer: &Graph,
        ins: Vec<Value>,
        index_bytes: &mut u64,
    ) -> Result<Vec<Value>, String> {
        let g = &self.program.graph;
        let (nk, nc) = (lp.n_consts, lp.n_carry);
        // Index checks: a loop const's once (by the enclosing program when
        // it is one of its inputs), a carry's or per-step input's at every
        // step; a failing constant's raise.
        let mut per_step = Vec::new();
        for c in &self.index_checks {
            match g.inputs.iter().position(|&v| v == c.base) {
                Some(_) if lifted(lp, inputs, outer, g, c).is_some() => {}
                Some(pos) if pos < nk => c.check(&host(&ins[pos], index_bytes)?),
                Some(pos) => per_step.push((c, pos)),
                None => {
                    let (_, t) = g.consts.iter().find(|(v, _)| *v == c.base).unwrap();
                    c.check(t);
                }
            }
        }
        let mut ins = ins.into_iter();
        let consts: Vec<Value> = ins.by_ref().take(nk).collect();
        let mut carry: Vec<Value> = ins.by_ref().take(nc).collect();
        let xs: Vec<Value> = ins.collect();
        let device = &self.device;
        let ys: Vec<Value> = lp.out_avals()[nc..]
            .iter()
            .map(|a| {
                let bytes = a.numel() * a.dtype.size_in_bytes();
                Ok(Value::dense(std::sync::Arc::new(device.alloc(bytes)?), a))
            })
            .collect::<Result<_, String>>()?;
        for i in 0..lp.length {
            let t = if lp.reverse { lp.length - 1 - i } else { i };
            let mut args = consts.clone();
            args.append(&mut carry);
            args.extend(xs.iter().map(|x| row(x, t)));
            for (c, pos) in &per_step {
                c.check(&host(&args[*pos], index_bytes)?);
            }
            let (mut outs, _) = self.run_values(args, index_bytes)?;
            let step_ys = outs.split_off(nc);
            carry = outs;
            for (y, v) in ys.iter().zip(step_ys) {
                let bytes = v.layout.numel() * v.dtype.size_in_bytes();
                if bytes == 0 {
                    continue;
                }
                let v = v.contiguous()?;
                let src = v.dense_ptr().expect("dense");
                let dst = y.buf.ptr().offset(t * bytes);
                device.api().copy_on_device(dst, src, bytes)?;
            }
        }
        Ok(carry.into_iter().chain(ys).collect())
    }
}
