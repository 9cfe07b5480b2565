//! Vectorization: the batch trace behind `vmap`. A tracer holds a value
//! whose batch axis is physically at 0; it reports the unbatched shape, so
//! the mapped function sees exactly what it would see on one example. Values
//! that do not depend on the mapped inputs are never tracers: work on them is
//! done once, unbatched.
//!
//! Each primitive's batching rule is then a shift of its axis parameters by
//! one, after broadcasting unbatched operands along the batch axis where the
//! primitive needs all its operands batched alike.

use crate::scope::{Tag, TaggedTracer, TracerState};
use nx::trace::{bind_custom_jvp, bind_custom_vjp, with_ceiling, CustomJvpCall, CustomVjpCall};
use nx::{bind, Aval, Prim, Tensor, Trace};
use std::any::Any;
use std::sync::Arc;

/// A batch tracer's state: the batched value, batch axis first (the
/// tracer's aval, what the mapped function sees, is the value without it),
/// and, under `shard_map` (whose devices are the batch), the mesh axes it
/// may vary over (bit `i`: axis `i`; all bits when unknown).
pub(crate) struct Batched {
    pub value: Tensor,
    pub vary: u64,
}

impl TracerState for Batched {
    fn value(&self) -> Option<&Tensor> {
        None
    }
    fn unreadable(&self, aval: &Aval) -> ! {
        panic!(
            "vmap: cannot read the value of a batched tensor (shape {:?} per example) inside \
             the mapped function: its lanes differ (item, to_vec, a data-dependent branch)",
            aval.shape
        )
    }
}

/// The tracer of the batch trace.
pub(crate) type BatchTracer = TaggedTracer<Batched>;

#[derive(Clone)]
pub(crate) struct BatchTrace {
    pub level: usize,
    pub tag: Arc<Tag>,
    /// The size of the mapped axis.
    pub size: usize,
}

impl BatchTrace {
    /// `t`'s value and whether it is batched here (batch axis at 0).
    pub(crate) fn unpack(&self, t: &Tensor) -> (Tensor, bool) {
        match BatchTracer::of(t, &self.tag) {
            Some(b) => (b.value.clone(), true),
            None => (t.clone(), false),
        }
    }

    /// A tracer for `value`, whose axis 0 is the batch axis (varying over
    /// every mesh axis, as far as anyone knows).
    pub(crate) fn pack(&self, value: Tensor) -> Tensor {
        self.pack_varying(value, u64::MAX)
    }

    /// A tracer for `value` that varies over the mesh axes in `vary`.
    pub(crate) fn pack_varying(&self, value: Tensor, vary: u64) -> Tensor {
        let aval = Aval::new(&value.shape()[1..], value.dtype());
        BatchTracer::wrap(Batched { value, vary }, aval, self.level, &self.tag)
    }

    /// The mesh axes `t` varies over here (none when it is not batched).
    pub(crate) fn vary(&self, t: &Tensor) -> u64 {
        BatchTracer::of(t, &self.tag).map_or(0, |b| b.vary)
    }

    /// `value` with a batch axis at 0: itself when batched, else broadcast
    /// (a view) along a new leading axis.
    pub(crate) fn lift(&self, value: &Tensor, batched: bool) -> Tensor {
        if batched {
            value.clone()
        } else {
            let mut shape = vec![self.size];
            shape.extend_from_slice(value.shape());
            value.broadcast_to(&shape)
        }
    }

    /// A custom rule under `vmap` with a differentiation trace below it
    /// must stay visible to that trace: the call is made once per lane on
    /// the lanes' values (below this trace) and the results are stacked
    /// back. Returns None (run the function batched, as usual) when no
    /// input is traced below this trace.
    fn per_lane(
        &self,
        inputs: &[Tensor],
        call: impl Fn(&[Tensor]) -> Vec<Tensor>,
    ) -> Option<Vec<Tensor>> {
        let (values, batched): (Vec<Tensor>, Vec<bool>) =
            inputs.iter().map(|t| self.unpack(t)).unzip();
        if self.size == 0 || !values.iter().any(Tensor::is_traced) {
            return None;
        }
        with_ceiling(self.level, || {
            let lanes: Vec<Vec<Tensor>> = (0..self.size)
                .map(|i| {
                    let lane: Vec<Tensor> = values
                        .iter()
                        .zip(&batched)
                        .map(|(v, &b)| if b { v.get(i) } else { v.clone() })
                        .collect();
                    call(&lane)
                })
                .collect();
            let stacked = (0..lanes[0].len())
                .map(|j| {
                    let parts: Vec<Tensor> = lanes.iter().map(|l| l[j].clone()).collect();
                    self.pack(Tensor::stack(&parts, 0))
                })
                .collect();
            Some(stacked)
        })
    }
}

impl Trace for BatchTrace {
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        // One lookup per input: its value, whether it is batched, and the
        // mesh axes it varies over (a result varies where its inputs do).
        let mut vary = 0;
        let (values, batched): (Vec<Tensor>, Vec<bool>) = inputs
            .iter()
            .map(|t| match BatchTracer::of(t, &self.tag) {
                Some(b) => {
                    vary |= b.vary;
                    (b.value.clone(), true)
                }
                None => ((*t).clone(), false),
            })
            .unzip();
        if !batched.iter().any(|&b| b) {
            let refs: Vec<&Tensor> = values.iter().collect();
            return bind(prim, &refs);
        }
        self.pack_varying(self.rule(&prim, &values, &batched), vary)
    }

    fn process_multi(&self, op: &Arc<dyn nx::MultiOp>, inputs: &[&Tensor]) -> Vec<Tensor> {
        if inputs.iter().all(|t| !self.unpack(t).1) {
            let values: Vec<&Tensor> = inputs.to_vec();
            return nx::bind_multi(op, &values);
        }
        crate::scope::multi_op_rule(crate::scope::Transformation::Batch, self, op, inputs)
    }

    fn process_custom_jvp_call(&self, call: &CustomJvpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        self.per_lane(inputs, |lane| bind_custom_jvp(call, lane))
            .unwrap_or_else(|| (call.fun)(inputs))
    }

    fn process_custom_vjp_call(&self, call: &CustomVjpCall, inputs: &[Tensor]) -> Vec<Tensor> {
        self.per_lane(inputs, |lane| bind_custom_vjp(call, lane))
            .unwrap_or_else(|| (call.fwd)(inputs).0)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `axes` shifted past the batch axis.
fn shift(axes: &[usize]) -> Vec<usize> {
    axes.iter().map(|a| a + 1).collect()
}

/// `rest` with `first` in front.
fn prepend<T: Clone>(first: T, rest: &[T]) -> Vec<T> {
    let mut v = Vec::with_capacity(rest.len() + 1);
    v.push(first);
    v.extend_from_slice(rest);
    v
}

impl BatchTrace {
    /// The batching rule of `prim`: its result on the batched operands, with
    /// the batch axis at 0.
    fn rule(&self, prim: &Prim, xs: &[Tensor], batched: &[bool]) -> Tensor {
        let lifted = || -> Vec<Tensor> {
            xs.iter()
                .zip(batched)
                .map(|(x, &b)| self.lift(x, b))
                .collect()
        };
        let apply = |p: Prim, args: &[Tensor]| {
            let refs: Vec<&Tensor> = args.iter().collect();
            bind(p, &refs)
        };
        match prim {
            Prim::Full { .. } | Prim::Iota { .. } => {
                unreachable!("{} has no inputs, so no batched input", prim.name())
            }
            // Elementwise on one operand: the batch axis is just another axis.
            Prim::Unary(_) | Prim::Cast(_) | Prim::Copy | Prim::StopGradient => {
                apply(prim.clone(), &xs[..1])
            }
            // Elementwise on operands of one shape: batch them alike.
            Prim::Binary(_) | Prim::Compare(_) | Prim::Where => apply(prim.clone(), &lifted()),
            // Pairs along the last axis: a leading batch axis is one more axis.
            Prim::Threefry2x32 => apply(prim.clone(), &lifted()),
            Prim::Reduce { op, axes } => apply(
                Prim::Reduce {
                    op: *op,
                    axes: shift(axes),
                },
                &xs[..1],
            ),
            Prim::ArgReduce { op, axis } => apply(
                Prim::ArgReduce {
                    op: *op,
                    axis: axis + 1,
                },
                &xs[..1],
            ),
            Prim::Cumulative { op, axis } => apply(
                Prim::Cumulative {
                    op: *op,
                    axis: axis + 1,
                },
                &xs[..1],
            ),
            Prim::Reshape { shape } => apply(
                Prim::Reshape {
                    shape: prepend(self.size, shape),
                },
                &xs[..1],
            ),
            Prim::Broadcast { shape } => {
                // Align the example's axes on the right of the target shape
                // first, keeping the batch axis in front.
                let x = &xs[0];
                let mut aligned = vec![self.size];
                aligned.extend(std::iter::repeat_n(1, shape.len() + 1 - x.ndim()));
                aligned.extend_from_slice(&x.shape()[1..]);
                let x = apply(Prim::Reshape { shape: aligned }, &xs[..1]);
                apply(
                    Prim::Broadcast {
                        shape: prepend(self.size, shape),
                    },
                    &[x],
                )
            }
            Prim::Permute { perm } => {
                let mut p = vec![0];
                p.extend(perm.iter().map(|a| a + 1));
                apply(Prim::Permute { perm: p }, &xs[..1])
            }
            Prim::Slice { start, end, step } => apply(
                Prim::Slice {
                    start: prepend(0, start),
                    end: prepend(self.size, end),
                    step: prepend(1, step),
                },
                &xs[..1],
            ),
            Prim::Flip { axes } => apply(Prim::Flip { axes: shift(axes) }, &xs[..1]),
            Prim::Pad { lo, hi, value } => apply(
                Prim::Pad {
                    lo: prepend(0, lo),
                    hi: prepend(0, hi),
                    value: *value,
                },
                &xs[..1],
            ),
            Prim::Concat { axis } => apply(Prim::Concat { axis: axis + 1 }, &lifted()),
            Prim::Gather { axis } => apply(Prim::Gather { axis: axis + 1 }, &lifted()),
            Prim::ScatterAdd { axis } => apply(Prim::ScatterAdd { axis: axis + 1 }, &lifted()),
            Prim::ReduceWindow {
                op,
                window,
                strides,
                padding,
            } => apply(
                Prim::ReduceWindow {
                    op: *op,
                    window: prepend(1, window),
                    strides: prepend(1, strides),
                    padding: prepend((0, 0), padding),
                },
                &xs[..1],
            ),
            Prim::WindowArgmax {
                window,
                strides,
                padding,
                flat_from,
            } => apply(
                Prim::WindowArgmax {
                    window: prepend(1, window),
                    strides: prepend(1, strides),
                    padding: prepend((0, 0), padding),
                    flat_from: flat_from + 1,
                },
                &xs[..1],
            ),
            Prim::Argsort { axis, descending } => apply(
                Prim::Argsort {
                    axis: axis + 1,
                    descending: *descending,
                },
                &xs[..1],
            ),
            // The last axis stays last.
            Prim::TopK { .. } => apply(prim.clone(), &xs[..1]),
            Prim::DotGeneral {
                lhs_batch,
                rhs_batch,
                lhs_contract,
                rhs_contract,
            } => self.dot_general(
                xs,
                batched,
                lhs_batch,
                rhs_batch,
                lhs_contract,
                rhs_contract,
            ),
            Prim::Conv {
                feature_group_count,
                ..
            } => self.conv(prim, *feature_group_count, xs, batched),
            Prim::Assign => {
                if !batched[0] {
                    panic!(
                        "assign: cannot write a batched value (one per lane of vmap) into a \
                         tensor that is not batched; build a new tensor instead"
                    );
                }
                apply(Prim::Assign, &lifted())
            }
            // linear algebra: matrices are the last two axes, every leading
            // axis (the batch axis included) is a batch axis of the kernel.
            Prim::Cholesky | Prim::Slogdet | Prim::Qr { .. } | Prim::Eigh | Prim::Svd { .. } => {
                apply(prim.clone(), &xs[..1])
            }
            Prim::TriangularSolve { .. } | Prim::Solve => apply(prim.clone(), &lifted()),
            // Transforms the trailing axes: the leading batch axis is one
            // more batch axis of the kernel.
            Prim::Fft { .. } => apply(prim.clone(), &xs[..1]),
        }
    }

    /// A convolution with batched operands, as one convolution (JAX's
    /// rule): a batched input folds the batch into the images, a batched
    /// kernel into the output channels (after each group's own, so that
    /// the groups stay aligned), both into the feature groups.
    fn conv(&self, prim: &Prim, g: usize, xs: &[Tensor], batched: &[bool]) -> Tensor {
        let b = self.size;
        let (x, w) = (&xs[0], &xs[1]);
        let cat = |a: &[usize], rest: &[usize]| -> Vec<usize> {
            let mut v = a.to_vec();
            v.extend_from_slice(rest);
            v
        };
        let axes = |a: &[isize], from: usize, to: usize| -> Vec<isize> {
            let mut v = a.to_vec();
            v.extend(from as isize..to as isize);
            v
        };
        match (batched[0], batched[1]) {
            (true, false) => {
                // [B, N, C, s...] -> [B * N, C, s...]
                let s = x.shape();
                let y = bind(prim.clone(), &[&x.reshape(&cat(&[b * s[1]], &s[2..])), w]);
                y.reshape(&cat(&[b, s[1]], &y.shape()[1..]))
            }
            (false, true) => {
                // [B, G, Og, I, k...] -> [G, B, Og, I, k...] -> [G * B * Og, I, k...]
                let s = w.shape();
                let (o, r) = (s[1], s.len() + 1);
                let wf = w
                    .reshape(&cat(&[b, g, o / g], &s[2..]))
                    .permute(&axes(&[1, 0, 2], 3, r))
                    .reshape(&cat(&[g * b * (o / g)], &s[2..]));
                let y = bind(prim.clone(), &[x, &wf]);
                // [N, G, B, Og, q...] -> [B, N, G, Og, q...] -> [B, N, O, q...]
                let ys = y.shape().to_vec();
                let q = &ys[2..];
                y.reshape(&cat(&[ys[0], g, b, o / g], q))
                    .permute(&axes(&[2, 0, 1, 3], 4, 4 + q.len()))
                    .reshape(&cat(&[b, ys[0], o], q))
            }
            (true, true) => {
                // [B, N, C, s...] -> [N, B * C, s...]; [B, O, I, k...] -> [B * O, I, k...];
                // groups B * G.
                let (s, ws) = (x.shape(), w.shape());
                let xf = x.swapaxes(0, 1).reshape(&cat(&[s[1], b * s[2]], &s[3..]));
                let wf = w.reshape(&cat(&[b * ws[1]], &ws[2..]));
                let Prim::Conv {
                    strides,
                    padding,
                    lhs_dilation,
                    rhs_dilation,
                    ..
                } = prim
                else {
                    unreachable!()
                };
                let y = crate::rules::bind_conv(
                    &xf,
                    &wf,
                    strides.clone(),
                    padding.clone(),
                    lhs_dilation.clone(),
                    rhs_dilation.clone(),
                    b * g,
                );
                // [N, B * O, q...] -> [N, B, O, q...] -> [B, N, O, q...]
                let ys = y.shape().to_vec();
                y.reshape(&cat(&[ys[0], b, ws[1]], &ys[2..])).swapaxes(0, 1)
            }
            (false, false) => unreachable!("a batching rule runs with a batched operand"),
        }
    }

    /// `dot_general` with the batch axis a batch dimension of the product
    /// when both operands are batched, else a free dimension of the batched
    /// operand, moved to the front of the result.
    fn dot_general(
        &self,
        xs: &[Tensor],
        batched: &[bool],
        lb: &[usize],
        rb: &[usize],
        lc: &[usize],
        rc: &[usize],
    ) -> Tensor {
        let (l, r) = (&xs[0], &xs[1]);
        let lift = |axes: &[usize], b: bool| if b { shift(axes) } else { axes.to_vec() };
        let (lb2, lc2) = (lift(lb, batched[0]), lift(lc, batched[0]));
        let (rb2, rc2) = (lift(rb, batched[1]), lift(rc, batched[1]));
        if batched[0] && batched[1] {
            let p = Prim::DotGeneral {
                lhs_batch: prepend(0, &lb2),
                rhs_batch: prepend(0, &rb2),
                lhs_contract: lc2,
                rhs_contract: rc2,
            };
            return bind(p, &[l, r]);
        }
        let p = Prim::DotGeneral {
            lhs_batch: lb2,
            rhs_batch: rb2,
            lhs_contract: lc2,
            rhs_contract: rc2,
        };
        let out = bind(p, &[l, r]);
        // The batch axis is the first free axis of its operand: it follows
        // the product's batch dimensions, and for the rhs, the lhs's free ones.
        let at = if batched[0] {
            lb.len()
        } else {
            lb.len() + (l.ndim() - lb.len() - lc.len())
        };
        if at == 0 {
            out
        } else {
            out.moveaxis(at as isize, 0)
        }
    }
}
