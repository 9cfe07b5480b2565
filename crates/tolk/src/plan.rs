//! Planning: the order of a program's steps (kernels and library steps),
//! which kernels are the same (one compiled function serves them all), which
//! maps stream their output past the cache, and when each buffer dies.

use crate::fuse::{Fusion, Kernel};
use crate::graph::{Graph, Var};
use rustc_hash::FxHashMap as HashMap;

/// One step of a program's plan.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Runs kernel `kernel` writing buffers `outs` from `args`.
    Kernel {
        /// Index into the program's distinct kernels.
        kernel: usize,
        /// The buffers it writes, in the kernel's output order.
        outs: Vec<Var>,
        /// Its argument buffers, in the kernel's argument order.
        args: Vec<Var>,
    },
    /// Runs graph equation `eqn` with nx's eager kernel (or, for a loop,
    /// its compiled body once per iteration).
    Library {
        /// Index into the graph's equations.
        eqn: usize,
    },
}

/// What the runtime needs of a schedule: the steps and when buffers die
/// (what the disk cache stores beside the shared object).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The steps, in execution order.
    pub steps: Vec<Step>,
    /// `frees[i]`: the buffers whose last use is step `i`, dropped after it
    /// (never inputs, constants or outputs).
    pub frees: Vec<Vec<Var>>,
}

/// Orders the steps (graph order), marks the maps that stream their output
/// ([`Kernel::stream`]: a one-output map writing a program output in a pass moving at
/// least `stream_min_bytes`), deduplicates kernels by structure and
/// computes when each buffer dies. Returns the distinct kernels, which the
/// plan's steps index.
pub fn plan(g: &Graph, fusion: Fusion, stream_min_bytes: Option<usize>) -> (Vec<Kernel>, Plan) {
    let bytes = |v: Var| g.aval(v).numel() * g.aval(v).dtype.size_in_bytes();
    let mut is_output = vec![false; g.avals.len()];
    for &v in &g.outputs {
        is_output[v] = true;
    }
    let mut by_eqn: HashMap<usize, usize> = HashMap::default();
    for (i, k) in fusion.kernels.iter().enumerate() {
        by_eqn.insert(k.at, i);
    }
    let mut kernels: Vec<Option<_>> = fusion.kernels.into_iter().map(Some).collect();
    let mut distinct: Vec<Kernel> = Vec::new();
    // Per distinct kernel, the equations its first instance fused.
    let mut first_fused: Vec<Vec<usize>> = Vec::new();
    let mut steps = Vec::new();
    for (i, e) in g.eqns.iter().enumerate() {
        if fusion.library[i] {
            steps.push(Step::Library { eqn: i });
            continue;
        }
        let Some(fk) = by_eqn.get(&i).and_then(|&k| kernels[k].take()) else {
            if fusion.views[e.out()] {
                steps.push(Step::Library { eqn: i }); // an eager view
            }
            continue; // otherwise fused into the kernels that read it
        };
        let mut k = fk.kernel;
        let moved: usize = fk.outs.iter().chain(&fk.args).map(|&v| bytes(v)).sum();
        k.stream = k.is_map()
            && fk.outs.len() == 1
            && is_output[fk.outs[0]]
            && stream_min_bytes.is_some_and(|min| moved >= min);
        let kernel = match distinct.iter().position(|d| *d == k) {
            Some(d) => d,
            None => {
                distinct.push(k);
                first_fused.push(fk.eqns);
                distinct.len() - 1
            }
        };
        steps.push(Step::Kernel {
            kernel,
            outs: fk.outs,
            args: fk.args,
        });
    }
    for (k, fused) in distinct.iter_mut().zip(first_fused) {
        k.fused = fused.iter().map(|&e| g.eqns[e].name()).collect();
    }
    let frees = frees(g, &steps);
    (distinct, Plan { steps, frees })
}

/// Per step, the buffers whose last use it is (never inputs, constants,
/// outputs or writebacks), in variable order.
fn frees(g: &Graph, steps: &[Step]) -> Vec<Vec<Var>> {
    let mut last: Vec<Option<usize>> = vec![None; g.avals.len()];
    for (s, step) in steps.iter().enumerate() {
        let reads: &[Var] = match step {
            Step::Kernel { args, .. } => args,
            Step::Library { eqn } => &g.eqns[*eqn].inputs,
        };
        for &v in reads {
            last[v] = Some(s);
        }
    }
    let mut keep = vec![false; g.avals.len()];
    for &v in g
        .inputs
        .iter()
        .chain(g.consts.iter().map(|(v, _)| v))
        .chain(g.outputs.iter())
        .chain(g.writebacks.iter().map(|(_, v)| v))
    {
        keep[v] = true;
    }
    let mut frees = vec![Vec::new(); steps.len()];
    for (v, s) in last.iter().enumerate() {
        if let (Some(s), false) = (s, keep[v]) {
            frees[*s].push(v);
        }
    }
    frees
}

/// The size of the host's last-level cache, from sysfs (`None` where it
/// cannot be read): a map writing a program output whose pass moves at
/// least this many bytes streams its output ([`Kernel::stream`]). Below it
/// the output may still be in cache for its next reader; above it, storing
/// it the ordinary way first reads every line of it from memory.
pub fn stream_min_bytes() -> Option<usize> {
    static LLC: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    *LLC.get_or_init(|| {
        let mut best = None;
        for i in 0..8 {
            let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
            let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
            let (Some(level), Some(size)) = (read("level"), read("size")) else {
                continue;
            };
            if let (Ok(level), Some(bytes)) = (level.trim().parse::<u32>(), cache_size(&size)) {
                if best.is_none_or(|(l, _)| level > l) {
                    best = Some((level, bytes));
                }
            }
        }
        best.map(|(_, bytes)| bytes)
    })
}

/// A sysfs cache size (`32768K`, `1M`, or plain bytes) in bytes.
fn cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, shift) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 10),
        b'M' => (&text[..text.len() - 1], 20),
        _ => (text, 0),
    };
    digits.parse::<usize>().ok().map(|n| n << shift)
}

#[cfg(test)]
mod tests {
    use super::cache_size;

    /// sysfs writes cache sizes with a `K` suffix (some kernels `M`).
    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(cache_size("2M"), Some(2 << 20));
        assert_eq!(cache_size("512"), Some(512));
        assert_eq!(cache_size(""), None);
        assert_eq!(cache_size("K"), None);
        assert_eq!(cache_size("lots"), None);
    }
}
