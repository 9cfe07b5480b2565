//! Checks of each IR between the compile passes ([`crate::pipeline`] runs
//! them in debug builds, in tolk's tests and with `TOLK_VERIFY=1`): a
//! malformed IR is a bug in the pass that made it, found here rather than
//! as a wrong result or a crash in generated code.
//!
//! - [`graph`]: every variable exists and is defined once before it is
//!   read; each equation's outputs have the shapes and dtypes its
//!   operation derives from its inputs'; outputs and writebacks are
//!   defined.
//! - [`plan`]: every step's kernel exists, its arguments and outputs are
//!   buffers of the kernel's dtypes defined before the step, every node
//!   reads earlier nodes, and every unmasked load, gather and scatter
//!   addresses inside its buffer.
//! - [`nests`]: each loop nest covers its kernel's points and output, has
//!   an index exactly where the kernel loads, each index visits the
//!   elements the kernel's layout does in the same order (stride by
//!   stride, not only the same span), and its schedule fits its kernel.

use crate::fuse::{Kernel, Node};
use crate::graph::{Graph, Op, Var};
use crate::lower::{LoopNest, Schedule, ACCS};
use crate::plan::{Plan, Step};
use nx::Aval;

/// Checks a graph: variables in range, each defined once (an input, a
/// constant or an equation's output) before an equation reads it; each
/// equation's outputs of the avals its operation derives from its inputs
/// (`Prim::out_aval`, `Loop::out_avals`); outputs and writebacks defined.
pub fn graph(g: &Graph) -> impl FnOnce() -> Result<(), String> + '_ {
    move || {
        let n = g.avals.len();
        let mut defined = vec![false; n];
        let known = |v: Var, what: &str| {
            if v < n {
                Ok(v)
            } else {
                Err(format!("{what} v{v} does not exist ({n} variables)"))
            }
        };
        for &v in &g.inputs {
            defined[known(v, "input")?] = true;
        }
        for (v, t) in &g.consts {
            let v = known(*v, "constant")?;
            if defined[v] {
                return Err(format!("constant v{v} is defined twice"));
            }
            if t.shape() != g.aval(v).shape.as_slice() || t.dtype() != g.aval(v).dtype {
                return Err(format!("constant v{v}'s tensor is not its aval"));
            }
            defined[v] = true;
        }
        for (i, e) in g.eqns.iter().enumerate() {
            for &x in &e.inputs {
                if !defined[known(x, "an input of equation")?] {
                    return Err(format!(
                        "equation {i} ({}) reads v{x} before it is defined",
                        e.name()
                    ));
                }
            }
            if matches!(e.op, Op::Prim(_)) && e.outs.len() != 1 {
                return Err(format!(
                    "equation {i} ({}) has {} outputs",
                    e.name(),
                    e.outs.len()
                ));
            }
            for &o in &e.outs {
                let o = known(o, "an output of equation")?;
                if defined[o] {
                    return Err(format!("equation {i} ({}) redefines v{o}", e.name()));
                }
                defined[o] = true;
            }
            // Each output's shape and dtype, derived again from the inputs'
            // (JAX's `check_jaxpr`): a pass that rewrote an equation but not
            // its avals is caught here, not in the generated code.
            let derived = match &e.op {
                Op::Prim(p) => {
                    let ins: Vec<&Aval> = e.inputs.iter().map(|&x| g.aval(x)).collect();
                    vec![p.out_aval(&ins)]
                }
                Op::Loop(l) => l.out_avals(),
            };
            if derived.len() != e.outs.len() {
                return Err(format!(
                    "equation {i} ({}) has {} outputs, its operation {}",
                    e.name(),
                    e.outs.len(),
                    derived.len()
                ));
            }
            for (&o, want) in e.outs.iter().zip(&derived) {
                let have = g.aval(o);
                if have.shape != want.shape || have.dtype != want.dtype {
                    return Err(format!(
                        "equation {i} ({}) gives v{o} {:?} {:?}, its inputs {:?} {:?}",
                        e.name(),
                        have.shape,
                        have.dtype,
                        want.shape,
                        want.dtype
                    ));
                }
            }
        }
        for &v in g.outputs.iter().chain(g.writebacks.iter().map(|(_, v)| v)) {
            if !defined[known(v, "output")?] {
                return Err(format!("output v{v} is never defined"));
            }
        }
        for &(i, _) in &g.writebacks {
            if i >= g.inputs.len() {
                return Err(format!("a writeback names input {i} of {}", g.inputs.len()));
            }
        }
        Ok(())
    }
}

/// Checks the fused kernels and the plan over graph `g`: steps and frees
/// agree; each kernel step names an existing kernel, its outputs and
/// arguments are buffers of the kernel's dtypes (and its outputs of its
/// output's size) defined before the step; every kernel reads only earlier
/// nodes and its unmasked loads, gathers and scatters address inside the
/// buffers each step passes.
pub fn plan<'a>(
    g: &'a Graph,
    kernels: &'a [Kernel],
    plan: &'a Plan,
) -> impl FnOnce() -> Result<(), String> + 'a {
    move || {
        if plan.steps.len() != plan.frees.len() {
            return Err(format!(
                "{} steps but {} lists of frees",
                plan.steps.len(),
                plan.frees.len()
            ));
        }
        for (k, kernel) in kernels.iter().enumerate() {
            kernel_nodes(kernel).map_err(|e| format!("kernel {k}: {e}"))?;
        }
        let n = g.avals.len();
        let mut defined = vec![false; n];
        for &v in g.inputs.iter().chain(g.consts.iter().map(|(v, _)| v)) {
            defined[v] = true;
        }
        for (s, step) in plan.steps.iter().enumerate() {
            match step {
                Step::Kernel { kernel, outs, args } => {
                    let k = kernels.get(*kernel).ok_or_else(|| {
                        format!("step {s} runs kernel {kernel} of {}", kernels.len())
                    })?;
                    if outs.len() != k.out_dtypes.len() || args.len() != k.arg_dtypes.len() {
                        return Err(format!(
                            "step {s} passes {} outputs and {} arguments to kernel {kernel}, \
                             which takes {} and {}",
                            outs.len(),
                            args.len(),
                            k.out_dtypes.len(),
                            k.arg_dtypes.len()
                        ));
                    }
                    for (a, &v) in args.iter().enumerate() {
                        if v >= n || !defined[v] {
                            return Err(format!(
                                "step {s}'s argument {a}, v{v}, is not a buffer yet"
                            ));
                        }
                        if g.aval(v).dtype != k.arg_dtypes[a] {
                            return Err(format!(
                                "step {s}'s argument {a}, v{v}, is not a {:?}",
                                k.arg_dtypes[a]
                            ));
                        }
                    }
                    let numel: usize = k.out_shape().iter().product();
                    for (j, &v) in outs.iter().enumerate() {
                        if v >= n {
                            return Err(format!("step {s}'s output v{v} does not exist"));
                        }
                        let a = g.aval(v);
                        if a.dtype != k.out_dtypes[j] || a.numel() != numel {
                            return Err(format!(
                                "step {s}'s output {j}, v{v}, is not {numel} {:?}",
                                k.out_dtypes[j]
                            ));
                        }
                        defined[v] = true;
                    }
                    let sizes: Vec<usize> = args.iter().map(|&v| g.aval(v).numel()).collect();
                    kernel_addresses(k, &sizes, numel)
                        .map_err(|e| format!("step {s} (kernel {kernel}): {e}"))?;
                }
                Step::Library { eqn } => {
                    let e = g.eqns.get(*eqn).ok_or_else(|| {
                        format!("step {s} runs equation {eqn} of {}", g.eqns.len())
                    })?;
                    for &o in &e.outs {
                        defined[o] = true;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A kernel's nodes read only earlier nodes; its roots are nodes, one per
/// output; loads see the kernel's shape.
fn kernel_nodes(k: &Kernel) -> Result<(), String> {
    if k.roots.len() != k.out_dtypes.len() || k.roots.iter().any(|&r| r >= k.nodes.len()) {
        return Err(format!(
            "roots {:?} for {} outputs",
            k.roots,
            k.out_dtypes.len()
        ));
    }
    if let Some((_, kept)) = k.reduce {
        if kept > k.shape.len() {
            return Err(format!("{kept} kept dims of {}", k.shape.len()));
        }
    }
    for (i, n) in k.nodes.iter().enumerate() {
        let operands: Vec<usize> = match n {
            Node::Load { mask, .. } => mask.iter().map(|m| m.when).collect(),
            Node::Gather { index, .. } => vec![*index],
            Node::Scatter { index, value, .. } => vec![*index, *value],
            Node::Unary { x, .. } | Node::Cast { x, .. } => vec![*x],
            Node::Binary { a, b, .. } | Node::Compare { a, b, .. } => vec![*a, *b],
            Node::Where { c, a, b, .. } => vec![*c, *a, *b],
            Node::Lit { .. } | Node::Iota { .. } | Node::Coord { .. } => vec![],
        };
        if let Some(o) = operands.iter().find(|&&o| o >= i) {
            return Err(format!("node {i} reads node {o}, not an earlier one"));
        }
        if let Some(l) = n.layout() {
            if l.shape != k.shape || l.strides.len() != l.shape.len() {
                return Err(format!(
                    "node {i}'s layout has shape {:?} in a kernel of shape {:?}",
                    l.shape, k.shape
                ));
            }
        }
        if let Node::Load { arg, .. } | Node::Gather { arg, .. } = n {
            if *arg >= k.arg_dtypes.len() {
                return Err(format!(
                    "node {i} loads argument {arg} of {}",
                    k.arg_dtypes.len()
                ));
            }
        }
    }
    Ok(())
}

/// The lowest and highest element `offset + sum(i_d * strides[d])` reaches
/// over `0 <= i_d < shape[d]`; `None` when the shape is empty of points.
fn span(offset: usize, shape: &[usize], strides: &[isize]) -> Option<(isize, isize)> {
    if shape.contains(&0) {
        return None;
    }
    let (mut lo, mut hi) = (offset as isize, offset as isize);
    for (&n, &st) in shape.iter().zip(strides) {
        let reach = (n as isize - 1) * st;
        if reach < 0 {
            lo += reach;
        } else {
            hi += reach;
        }
    }
    Some((lo, hi))
}

/// Every unmasked load, gather and scatter of `k` addresses inside its
/// buffer: arguments of `sizes` elements, an output of `out` elements.
fn kernel_addresses(k: &Kernel, sizes: &[usize], out: usize) -> Result<(), String> {
    let inside = |i: usize, (lo, hi): (isize, isize), len: usize| {
        if lo < 0 || hi >= len as isize {
            Err(format!(
                "node {i} addresses elements {lo}..={hi} of a buffer of {len}"
            ))
        } else {
            Ok(())
        }
    };
    for (i, n) in k.nodes.iter().enumerate() {
        match n {
            Node::Load {
                arg,
                layout: l,
                mask: None,
            } => {
                if let Some(r) = span(l.offset, &l.shape, &l.strides) {
                    inside(i, r, sizes[*arg])?;
                }
            }
            Node::Gather {
                arg,
                layout: l,
                axis_len,
                axis_stride,
                buffer_len,
                ..
            } => {
                if *buffer_len != sizes[*arg] {
                    return Err(format!(
                        "node {i} gathers from {buffer_len} elements, its buffer holds {}",
                        sizes[*arg]
                    ));
                }
                let mut shape = l.shape.clone();
                let mut strides = l.strides.clone();
                shape.push(*axis_len);
                strides.push(*axis_stride);
                if let Some(r) = span(l.offset, &shape, &strides) {
                    inside(i, r, sizes[*arg])?;
                }
            }
            Node::Scatter {
                layout: l,
                axis_len,
                axis_stride,
                ..
            } => {
                let mut shape = l.shape.clone();
                let mut strides = l.strides.clone();
                shape.push(*axis_len);
                strides.push(*axis_stride);
                if let Some(r) = span(l.offset, &shape, &strides) {
                    inside(i, r, out)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks each kernel's loop nest: it covers the kernel's points and its
/// output's (the kept dims), has an index exactly for the nodes that
/// address through a layout, each reaching the elements that layout
/// reaches, per-node facts for every node, and a schedule of the kernel's
/// kind.
pub fn nests<'a>(
    kernels: &'a [Kernel],
    nests: &'a [LoopNest],
) -> impl FnOnce() -> Result<(), String> + 'a {
    move || {
        if kernels.len() != nests.len() {
            return Err(format!(
                "{} kernels, {} loop nests",
                kernels.len(),
                nests.len()
            ));
        }
        for (i, (k, n)) in kernels.iter().zip(nests).enumerate() {
            nest(k, n).map_err(|e| format!("kernel {i}: {e}"))?;
        }
        Ok(())
    }
}

/// Whether loops `dims` with `strides` from `offset` visit, in row-major
/// order, the elements layout `l` visits in its row-major order: the same
/// offset, and each loop (of more than one point) a run of the layout's
/// dims (size-1 dims aside) whose strides chain (`stride[d] = stride[d + 1]
/// * size[d + 1]`), stepping by the run's innermost stride. Stronger than
/// equal spans: a stride swapped between two loops of one size keeps the
/// span.
fn same_walk(offset: usize, dims: &[usize], strides: &[isize], l: &nx::Layout) -> bool {
    let empty = |shape: &[usize]| shape.contains(&0);
    if empty(dims) || empty(&l.shape) {
        return empty(dims) && empty(&l.shape); // no element is visited
    }
    if offset != l.offset {
        return false;
    }
    let mut layout = l
        .shape
        .iter()
        .zip(&l.strides)
        .filter(|(&n, _)| n != 1)
        .map(|(&n, &s)| (n, s))
        .peekable();
    for (&len, &stride) in dims.iter().zip(strides) {
        if len == 1 {
            continue;
        }
        let mut run = 1usize;
        let mut inner: Option<(usize, isize)> = None;
        while run < len {
            let Some((n, s)) = layout.next() else {
                return false;
            };
            if let Some((_, prev_s)) = inner {
                if prev_s != s * n as isize {
                    return false;
                }
            }
            inner = Some((n, s));
            run *= n;
        }
        if run != len || inner.is_some_and(|(_, s)| s != stride) {
            return false;
        }
    }
    layout.peek().is_none()
}

fn nest(k: &Kernel, n: &LoopNest) -> Result<(), String> {
    let points: usize = k.shape.iter().product();
    let kept_points: usize = match k.reduce {
        Some((_, kept)) => k.shape[..kept].iter().product(),
        None => points,
    };
    if n.dims.iter().product::<usize>() != points || n.kept == 0 || n.kept > n.dims.len() {
        return Err(format!(
            "loops {:?} ({} kept) over a kernel of shape {:?}",
            n.dims, n.kept, k.shape
        ));
    }
    if n.points() != kept_points || (k.reduce.is_none() && n.kept != n.dims.len()) {
        return Err(format!(
            "{} kept loops {:?} for an output of {kept_points} points",
            n.kept, n.dims
        ));
    }
    let per_node = [n.loads.len(), n.invariant.len(), n.narrow.len()];
    if per_node.iter().any(|&l| l != k.nodes.len()) {
        return Err(format!(
            "per-node facts {per_node:?} for {} nodes",
            k.nodes.len()
        ));
    }
    for (i, (node, ix)) in k.nodes.iter().zip(&n.loads).enumerate() {
        match (node.layout(), ix) {
            (None, None) => {}
            (Some(l), Some(ix)) => {
                if ix.strides.len() != n.dims.len() {
                    return Err(format!("node {i}'s index has {} strides", ix.strides.len()));
                }
                let lowered = span(ix.offset, &n.dims, &ix.strides);
                if lowered != span(l.offset, &l.shape, &l.strides) {
                    return Err(format!(
                        "node {i}'s index reaches {lowered:?}, its layout {:?}",
                        span(l.offset, &l.shape, &l.strides)
                    ));
                }
                if !same_walk(ix.offset, &n.dims, &ix.strides, l) {
                    return Err(format!(
                        "node {i}'s index (offset {}, strides {:?} over loops {:?}) does not \
                         visit the elements of its layout {l:?} in its order",
                        ix.offset, ix.strides, n.dims
                    ));
                }
            }
            _ => {
                return Err(format!(
                    "node {i} has an index exactly when it has no layout"
                ))
            }
        }
        if n.narrow[i] && !matches!(node, Node::Gather { .. }) {
            return Err(format!("node {i} is not a gather but has 32-bit offsets"));
        }
    }
    let fits = match (&n.schedule, k.scatter()) {
        (Schedule::Scatter { parted, .. }, Some(Node::Scatter { init_layout, .. })) => {
            *parted == init_layout.is_some() && !n.grid
        }
        (Schedule::Map { stream, .. }, None) => {
            k.reduce.is_none() && (!stream || n.dims.len() == 1)
        }
        (Schedule::Reduce { unrolled, block }, None) => {
            k.reduce.is_some() && block.is_none_or(|b| !unrolled && b.len > 0 && b.len % ACCS == 0)
        }
        (Schedule::Tiled { tile }, None) => {
            k.reduce.is_some()
                && !n.grid
                && n.dims.len() > n.kept
                && (1..=n.dims[n.kept - 1]).contains(tile)
        }
        _ => false,
    };
    if !fits {
        return Err(format!("schedule {:?} does not fit the kernel", n.schedule));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::same_walk;
    use nx::Layout;

    #[test]
    fn a_walk_is_its_layouts_merged_dims_with_their_innermost_strides() {
        let l = Layout::contiguous(&[4, 1, 3, 5]);
        assert!(same_walk(0, &[60], &[1], &l)); // all merged
        assert!(same_walk(0, &[4, 15], &[15, 1], &l));
        assert!(same_walk(0, &[4, 1, 15], &[15, 99, 1], &l)); // a 1-point loop's stride is moot
        assert!(!same_walk(1, &[60], &[1], &l)); // offset
        assert!(!same_walk(0, &[12, 5], &[1, 12], &l)); // the same span, another order
        assert!(!same_walk(0, &[4, 15], &[1, 4], &l));
        assert!(!same_walk(0, &[6, 10], &[10, 1], &l)); // loops that split a dim
        let t = Layout::contiguous(&[3, 4]).permute(&[1, 0]); // strides [1, 4]
        assert!(same_walk(0, &[4, 3], &[1, 4], &t));
        assert!(!same_walk(0, &[12], &[1], &t)); // does not merge
        assert!(same_walk(0, &[0], &[1], &Layout::contiguous(&[5, 0])));
    }
}
