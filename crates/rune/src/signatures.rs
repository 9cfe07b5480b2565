//! The compiled programs of one function, one per input signature, shared
//! by `jit` and `pmap`: the signature (each leaf's dtype and shape, and
//! which leaves alias which where that matters), the lookup (a linear scan
//! comparing dtypes and shapes: no hashing), tracing the function for a new
//! signature ([`stage`]), whether its programs persist in tolk's disk cache
//! (an explicit flag: jit's do, pmap's never), and `RUNE_JIT_DEBUG`'s level.

use crate::stage::{JitError, Staging};
use nx::{DType, Ptree, Tensor};
use std::cell::{Cell, Ref, RefCell};

/// Each leaf's dtype and shape, in traversal order.
type Signature = Vec<(DType, Vec<usize>)>;

fn signature_of(leaves: &[Tensor]) -> Signature {
    leaves
        .iter()
        .map(|t| (t.dtype(), t.shape().to_vec()))
        .collect()
}

fn same_signature(sig: &[(DType, Vec<usize>)], leaves: &[Tensor]) -> bool {
    sig.len() == leaves.len()
        && sig
            .iter()
            .zip(leaves)
            .all(|((d, s), t)| *d == t.dtype() && s.as_slice() == t.shape())
}

/// `RUNE_JIT_DEBUG`'s level (0 when unset): 1 logs each call of a compiled
/// function (hit or miss, timings, transfers), 2 also its program and
/// kernels' C.
pub(crate) fn debug_level() -> u8 {
    static LEVEL: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        std::env::var("RUNE_JIT_DEBUG")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    })
}

/// How the input leaves alias one another: `first[j]` is the first leaf
/// that is the same view of the same storage as leaf `j` (`j` if none);
/// `overlap` names two leaves that share storage through different views
/// (which a compiled program cannot model when it assigns in place).
struct Aliases {
    first: Vec<usize>,
    overlap: Option<(usize, usize)>,
}

impl Aliases {
    fn of(leaves: &[Tensor]) -> Aliases {
        let mut first: Vec<usize> = (0..leaves.len()).collect();
        let mut overlap = None;
        for j in 0..leaves.len() {
            for i in 0..j {
                if first[i] == i && leaves[i].shares_storage_with(&leaves[j]) {
                    let same = leaves[i].shape() == leaves[j].shape()
                        && leaves[i].strides() == leaves[j].strides()
                        && leaves[i].offset() == leaves[j].offset();
                    if same {
                        first[j] = i;
                        break;
                    }
                    overlap.get_or_insert((i, j));
                }
            }
        }
        Aliases { first, overlap }
    }

    /// Every leaf apart (what pmap stages).
    fn none(n: usize) -> Aliases {
        Aliases {
            first: (0..n).collect(),
            overlap: None,
        }
    }
}

fn overlap_error(i: usize, j: usize) -> JitError {
    JitError::new(format!(
        "jit: input leaves {i} and {j} are different views of one tensor's storage and the \
         function assigns to its inputs in place; the compiled program cannot replay how the \
         writes would show through the other view. Pass separate tensors (copy one of them)"
    ))
}

/// How a call found its program.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Lookup {
    /// Compiled earlier in this process for this signature.
    Hit,
    /// Traced now; the program loaded from tolk's disk cache or compiled.
    /// `trace_seconds`: how long tracing took.
    Miss {
        origin: tolk::Origin,
        trace_seconds: f64,
    },
}

impl Lookup {
    /// As `RUNE_JIT_DEBUG` logs it.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Lookup::Hit => "hit memory",
            Lookup::Miss {
                origin: tolk::Origin::Disk,
                ..
            } => "miss memory, hit disk",
            Lookup::Miss { .. } => "miss, compiled",
        }
    }
}

/// One compiled signature.
struct Entry<T> {
    signature: Signature,
    /// The program assigns to inputs (overlapping views are then an error).
    writes: bool,
    /// Which leaves alias which, when that is part of the signature: when
    /// the program writes, or when it was traced with aliased leaves (they
    /// were staged as one input, so the program reads only the first of
    /// them: a later call with distinct tensors there must trace again).
    aliases: Option<Vec<usize>>,
    value: T,
}

/// A function's compiled programs (`T`: a program and the traced output's
/// structure), one per signature.
pub(crate) struct SignatureCache<T> {
    /// Whether the programs go through tolk's disk cache, across processes
    /// (jit's do; pmap's never: compilations placed over several devices
    /// are not persisted).
    pub persist: bool,
    /// Whether leaves that are one view of one storage are staged as one
    /// input, which makes their aliasing part of the signature (jit's), or
    /// every leaf is staged apart (pmap's: its leaves may be split
    /// differently).
    merge_aliases: bool,
    entries: RefCell<Vec<Entry<T>>>,
    traces: Cell<usize>,
}

impl<T> SignatureCache<T> {
    pub(crate) fn new(persist: bool, merge_aliases: bool) -> SignatureCache<T> {
        SignatureCache {
            persist,
            merge_aliases,
            entries: RefCell::new(Vec::new()),
            traces: Cell::new(0),
        }
    }

    /// How many times the function has been traced (once per new signature).
    pub(crate) fn trace_count(&self) -> usize {
        self.traces.get()
    }

    /// The program for `leaves` (`p`'s leaves): found, or made on a miss by
    /// tracing `f` at `p`, then `check` (which may refuse the staged graph
    /// before the trace is counted) and `build` (compiling it; given the
    /// graph and the traced output, it returns the entry and where its
    /// program came from).
    pub(crate) fn get_or_build<P: Ptree, Q: Ptree>(
        &self,
        f: &impl Fn(&P) -> Q,
        p: &P,
        leaves: &[Tensor],
        check: impl FnOnce(&tolk::Graph) -> Result<(), JitError>,
        build: impl FnOnce(tolk::Graph, Q) -> Result<(T, tolk::Origin), JitError>,
    ) -> Result<(Ref<'_, T>, Lookup), JitError> {
        // Computed only where needed: a hit on an entry not keyed by
        // aliases that does not write compares dtypes and shapes only.
        let mut aliases: Option<Aliases> = None;
        let merge = self.merge_aliases;
        let aliases_of = |aliases: &mut Option<Aliases>| -> Aliases {
            aliases.take().unwrap_or_else(|| {
                if merge {
                    Aliases::of(leaves)
                } else {
                    Aliases::none(leaves.len())
                }
            })
        };
        let hit = self.entries.borrow().iter().position(|e| match &e.aliases {
            None => same_signature(&e.signature, leaves),
            Some(key) => {
                same_signature(&e.signature, leaves) && {
                    let a = aliases_of(&mut aliases);
                    let same = &a.first == key;
                    aliases = Some(a);
                    same
                }
            }
        });
        if let Some(i) = hit {
            if self.entries.borrow()[i].writes {
                if let Some((a, b)) = aliases_of(&mut aliases).overlap {
                    return Err(overlap_error(a, b));
                }
            }
            return Ok((
                Ref::map(self.entries.borrow(), |e| &e[i].value),
                Lookup::Hit,
            ));
        }
        let aliases = aliases_of(&mut aliases);
        let t_trace = std::time::Instant::now();
        let (graph, template) = catch_jit(|| stage_with(f, p, leaves, &aliases.first))?;
        let trace_seconds = t_trace.elapsed().as_secs_f64();
        let writes = !graph.writebacks.is_empty();
        if writes {
            if let Some((a, b)) = aliases.overlap {
                return Err(overlap_error(a, b));
            }
        }
        check(&graph)?;
        let keyed = writes || aliases.first.iter().enumerate().any(|(j, &i)| i != j);
        let key = (self.merge_aliases && keyed).then(|| aliases.first.clone());
        self.traces.set(self.traces.get() + 1);
        let (value, origin) = build(graph, template)?;
        let mut entries = self.entries.borrow_mut();
        entries.push(Entry {
            signature: signature_of(leaves),
            writes,
            aliases: key,
            value,
        });
        let i = entries.len() - 1;
        drop(entries);
        let lookup = Lookup::Miss {
            origin,
            trace_seconds,
        };
        Ok((Ref::map(self.entries.borrow(), |e| &e[i].value), lookup))
    }
}

/// Runs `f` under a staging trace on tracers for `p`'s leaves, each leaf a
/// graph input of its own.
pub(crate) fn stage<P: Ptree, Q: Ptree>(f: &impl Fn(&P) -> Q, p: &P) -> (tolk::Graph, Q) {
    let leaves = p.leaves();
    stage_with(f, p, &leaves, &(0..leaves.len()).collect::<Vec<_>>())
}

/// [`stage`], leaf `j` staged as the same input as leaf `aliases[j]`.
fn stage_with<P: Ptree, Q: Ptree>(
    f: &impl Fn(&P) -> Q,
    p: &P,
    leaves: &[Tensor],
    aliases: &[usize],
) -> (tolk::Graph, Q) {
    let (staging, tracers) = Staging::begin(leaves, aliases);
    let q = f(&p.with_leaves(&tracers));
    let graph = staging.finish(&q.leaves());
    (graph, q)
}

/// `r`'s value, or a panic with the `JitError`'s message (what `call`
/// does where `try_call` returns an error).
pub(crate) fn or_panic<R>(r: Result<R, JitError>) -> R {
    r.unwrap_or_else(|e| panic!("{}", e.message()))
}

/// Catches a `JitError` raised while tracing; other panics propagate.
pub(crate) fn catch_jit<R>(f: impl FnOnce() -> R) -> Result<R, JitError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => Ok(r),
        Err(payload) => match payload.downcast::<JitError>() {
            Ok(e) => Err(*e),
            Err(other) => std::panic::resume_unwind(other),
        },
    }
}
