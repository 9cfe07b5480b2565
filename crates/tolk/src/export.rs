//! Compiled programs as bytes: what an exported program holds, compiled
//! once with the C compiler and later loaded and run with none.
//!
//! A [`ProgramImage`] is one program (and, for each of its loops, its
//! body's image): the simplified [`Graph`] it runs (avals, constants with
//! their data, equations; [`graph_codec`]), the plan and the kernels'
//! entry points in the disk cache's own text ([`cache::entry_text`]), the
//! native code built for one or more CPU targets ([`CpuTarget`]: per
//! target, the kernels' shared object and their exact forms' built ahead,
//! as the disk cache builds them on first need, which would need a
//! compiler), and the arena layout the exporter computed (the loader
//! recomputes it from the plan and refuses an image whose layout differs).
//! The graph and plan are the same for every target: only the compiler's
//! `-march` differs.
//!
//! [`compile`] makes one (no cache: it always builds); [`ProgramImage::encode`]
//! and [`ProgramImage::decode`] turn it into bytes and back (decoding
//! checks every index it reads, so malformed bytes are an `Err`, never a
//! panic); [`ProgramImage::instantiate`] loads one target's shared objects
//! from private temporary files (`load::load_bytes`) and returns a
//! [`Program`] ready to run. Integrity (a checksum, a signature) and
//! compatibility (which target the host runs, format version) are the
//! container's to check (rune's `Exported`).

pub mod bytes;
pub mod graph_codec;

pub use crate::build::{host_cpu_features, CpuTarget};
pub use crate::load::mapped_on_this_thread;

use crate::graph::{Graph, Op};
use crate::runtime::{ArenaLayout, Program};
use crate::{build, cache, load, pipeline, plan};
use bytes::{Reader, Writer};
use std::sync::Arc;

/// The version of [`ProgramImage::encode`]'s layout (and of the
/// conventions of the code it holds); [`ProgramImage::decode`] refuses
/// others.
pub const IMAGE_FORMAT: u32 = 2;

/// How deep loop bodies nest in an image (their images recurse).
const MAX_DEPTH: usize = 32;

/// One compiled program as it is stored: see the [module](self) docs.
#[derive(Clone)]
pub struct ProgramImage {
    /// The simplified graph the program runs.
    pub graph: Graph,
    /// The plan and the kernels' entry points (what the disk cache keeps
    /// in a `.meta` file).
    pub entry: cache::Entry,
    /// Per target (in the order [`compile`] was given them): the native code.
    pub code: Vec<NativeCode>,
    /// Per variable, its arena slot; per slot, its bytes.
    pub arena_slots: (Vec<Option<usize>>, Vec<usize>),
    /// Per loop equation (by index): its body's image.
    pub bodies: Vec<(usize, ProgramImage)>,
    /// Per kernel: the primitives it fused and its C (empty in a decoded
    /// image: only the native code is stored).
    pub sources: Vec<(Vec<String>, String)>,
}

/// One target's native code for one program.
#[derive(Clone, Debug, Default)]
pub struct NativeCode {
    /// The kernels' shared object (empty when the program has no kernel).
    pub so: Vec<u8>,
    /// The exact forms' shared object (empty when no kernel has one).
    pub exact_so: Vec<u8>,
}

/// What [`compile`] returns: the image, and per target (in the order
/// given) the identity of the compiler that built its code (`cc: <cc
/// --version's first line>`; empty when the program has no kernel).
pub struct CompiledImage {
    /// The image.
    pub image: ProgramImage,
    /// Per target, the compiler's identity.
    pub compilers: Vec<String>,
}

/// Compiles `graph` into an image whose native code is built for each of
/// `targets`: simplify, compile each loop's body likewise, fuse, plan,
/// lower, render, and build the shared objects (the kernels, and their
/// exact forms when there are any) with the system C compiler (a cross
/// compiler for another architecture: [`build::compiler_for`]), never
/// through the disk cache. `Err` carries the compiler's message (or says
/// that no compiler for a target can be run), or names a constant that
/// cannot be stored.
pub fn compile(graph: Graph, targets: &[CpuTarget]) -> Result<CompiledImage, String> {
    if targets.is_empty() {
        return Err("no CPU target to build for".into());
    }
    let mut compilers = vec![String::new(); targets.len()];
    let image = compile_into(graph, targets, &mut compilers)?;
    Ok(CompiledImage { image, compilers })
}

fn compile_into(
    graph: Graph,
    targets: &[CpuTarget],
    compilers: &mut [String],
) -> Result<ProgramImage, String> {
    let g = pipeline::simplify(graph);
    let bodies = crate::loop_bodies(&g)
        .into_iter()
        .map(|(i, body)| Ok((i, compile_into(body, targets, compilers)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let cpu = pipeline::Target::cpu(plan::stream_min_bytes());
    let gen = pipeline::generate(&g, &cpu)
        .map_err(|r| format!("tolk: the CPU runs every library step, not {r:?}"))?;
    let mut code = Vec::with_capacity(targets.len());
    for (&target, compiler) in targets.iter().zip(compilers.iter_mut()) {
        let mut build_bytes = |units: &[String]| -> Result<Vec<u8>, String> {
            let so = build::scratch_dir().join(format!("export-{}.so", cache::unique_suffix()));
            *compiler = build::build_units_for(units, &so, target)?;
            let bytes =
                std::fs::read(&so).map_err(|e| format!("cannot read {}: {e}", so.display()));
            let _ = std::fs::remove_file(&so);
            bytes
        };
        let so = if gen.kernels.is_empty() {
            Vec::new()
        } else {
            build_bytes(&gen.code.units)?
        };
        let exact_so = if gen.code.exact.is_empty() {
            Vec::new()
        } else {
            build_bytes(std::slice::from_ref(&gen.code.exact))?
        };
        code.push(NativeCode { so, exact_so });
    }
    let layout = ArenaLayout::new(&g, &gen.plan);
    Ok(ProgramImage {
        entry: cache::Entry {
            plan: gen.plan,
            kernels: gen.meta,
            exact: gen.code.exact,
        },
        graph: g,
        code,
        arena_slots: (layout.slab_of, layout.slab_bytes),
        bodies,
        sources: gen.code.sources,
    })
}

impl ProgramImage {
    /// The image as bytes. `Err` names what cannot be stored (a complex
    /// constant, which jit refuses before this).
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        let mut w = Writer::default();
        w.u32(IMAGE_FORMAT);
        self.write(&mut w)?;
        Ok(w.bytes)
    }

    fn write(&self, w: &mut Writer) -> Result<(), String> {
        graph_codec::write_graph(w, &self.graph)?;
        w.str(&cache::entry_text(&self.entry));
        w.usize(self.code.len());
        for c in &self.code {
            w.bytes(&c.so);
            w.bytes(&c.exact_so);
        }
        let (slab_of, slab_bytes) = &self.arena_slots;
        w.usize(slab_of.len());
        for s in slab_of {
            // One past the slot, 0 for none.
            w.usize(s.map_or(0, |s| s + 1));
        }
        w.usizes(slab_bytes);
        w.usize(self.bodies.len());
        for (i, body) in &self.bodies {
            w.usize(*i);
            body.write(w)?;
        }
        Ok(())
    }

    /// Reads [`encode`](Self::encode)'s bytes back. `Err` says what is
    /// wrong: another format version, a truncated or malformed part, a
    /// plan that refers to variables, equations or kernels the graph does
    /// not have, loops without their bodies, a loop body with code for
    /// another number of targets.
    pub fn decode(bytes: &[u8]) -> Result<ProgramImage, String> {
        let mut r = Reader::new(bytes);
        let format = r.u32("image format")?;
        if format != IMAGE_FORMAT {
            return Err(format!(
                "image format {format}, this build reads {IMAGE_FORMAT}"
            ));
        }
        let image = ProgramImage::read(&mut r, 0)?;
        if !r.is_done() {
            return Err(format!("{} bytes after the image", r.remaining()));
        }
        Ok(image)
    }

    fn read(r: &mut Reader, depth: usize) -> Result<ProgramImage, String> {
        if depth > MAX_DEPTH {
            return Err(format!("loop bodies nested more than {MAX_DEPTH} deep"));
        }
        let graph = graph_codec::read_graph(r)?;
        let entry = cache::parse_entry_text(r.str("plan")?).ok_or("the plan does not parse")?;
        if !crate::entry_fits(&graph, &entry) {
            return Err("the plan refers to what the graph does not have".into());
        }
        let n_code = r.count(16, "targets' code")?;
        let code = (0..n_code)
            .map(|_| {
                Ok(NativeCode {
                    so: r.bytes("kernels")?.to_vec(),
                    exact_so: r.bytes("exact forms")?.to_vec(),
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let n = r.count(8, "arena")?;
        let slab_of = (0..n)
            .map(|_| Ok(r.usize("arena slot")?.checked_sub(1)))
            .collect::<Result<Vec<_>, String>>()?;
        let slab_bytes = r.usizes("arena slots")?;
        let n_bodies = r.count(8, "loop bodies")?;
        let mut bodies = Vec::with_capacity(n_bodies);
        for _ in 0..n_bodies {
            let i = r.usize("loop equation")?;
            bodies.push((i, ProgramImage::read(r, depth + 1)?));
        }
        // Every loop equation has exactly one body, and only loops do.
        let loops: Vec<usize> = (graph.eqns.iter().enumerate())
            .filter(|(_, e)| matches!(e.op, Op::Loop(_)))
            .map(|(i, _)| i)
            .collect();
        let mut with_body: Vec<usize> = bodies.iter().map(|(i, _)| *i).collect();
        with_body.sort_unstable();
        if with_body != loops {
            return Err("the loops' bodies do not match the graph's loops".into());
        }
        if bodies.iter().any(|(_, b)| b.code.len() != code.len()) {
            return Err("a loop body has code for another number of targets".into());
        }
        Ok(ProgramImage {
            graph,
            entry,
            code,
            arena_slots: (slab_of, slab_bytes),
            bodies,
            sources: Vec::new(),
        })
    }

    /// The program, ready to run, with the code of target `target` (an
    /// index into [`code`](Self::code)): its shared objects loaded from
    /// private temporary files (no compiler runs), its arena allocated,
    /// each loop's body instantiated. `Err` when there is no such target,
    /// the host's loader refuses the code, a kernel's symbol is missing,
    /// or the arena layout this build computes differs from the one stored.
    ///
    /// Loading maps native code that runs in this process: whether this
    /// host's CPU runs the target's instructions, and whether the bytes
    /// are trusted, is the caller's to decide first.
    pub fn instantiate(&self, target: usize) -> Result<Program, String> {
        let code = self
            .code
            .get(target)
            .ok_or_else(|| format!("no code for target {target}"))?;
        let layout = ArenaLayout::new(&self.graph, &self.entry.plan);
        let sanitized = !build::sanitize_flags().is_empty();
        if !sanitized
            && (layout.slab_of != self.arena_slots.0 || layout.slab_bytes != self.arena_slots.1)
        {
            return Err("the arena layout differs from the one this build computes".into());
        }
        let meta = &self.entry.kernels;
        let weights: Vec<usize> = meta.iter().map(|k| k.weight).collect();
        let mut program = if meta.is_empty() {
            Program::new(
                self.graph.clone(),
                self.entry.plan.clone(),
                &weights,
                Vec::new(),
                None,
            )
        } else {
            let names: Vec<String> = meta.iter().map(|k| k.name.clone()).collect();
            let loaded = load::load_bytes(&code.so, &names)?;
            let exact_names = crate::exact_names(meta);
            // The exact forms are mapped only if a guard ever fails, as
            // the disk cache's are built only then.
            let lazy =
                load::Lazy::built(self.entry.exact.clone(), exact_names, code.exact_so.clone());
            let entries = crate::entries_with(&loaded, meta, Arc::new(lazy));
            Program::new(
                self.graph.clone(),
                self.entry.plan.clone(),
                &weights,
                entries,
                Some(loaded),
            )
        };
        program.bodies = self
            .bodies
            .iter()
            .map(|(i, b)| Ok((*i, b.instantiate(target)?)))
            .collect::<Result<_, String>>()?;
        Ok(program)
    }

    /// Bytes of native code for target `target` (an index into
    /// [`code`](Self::code)): the kernels' and exact forms' shared
    /// objects, over this program and its loops' bodies.
    pub fn code_bytes(&self, target: usize) -> usize {
        self.code
            .get(target)
            .map_or(0, |c| c.so.len() + c.exact_so.len())
            + self
                .bodies
                .iter()
                .map(|(_, b)| b.code_bytes(target))
                .sum::<usize>()
    }

    /// The estimated cost of one run ([`crate::cost`] says how it is
    /// counted), its loops' bodies included.
    pub fn cost(&self) -> crate::cost::Cost {
        let body = |eqn: usize| {
            self.bodies
                .iter()
                .find(|(i, _)| *i == eqn)
                .map(|(_, b)| b.cost())
                .unwrap_or_default()
        };
        crate::cost::program_cost(&self.graph, &self.entry.plan, &body)
    }

    /// The bytes of the program's arena (intermediates kernels write),
    /// its loops' bodies' included.
    pub fn arena_bytes(&self) -> usize {
        self.arena_slots
            .1
            .iter()
            .map(|b| b.next_multiple_of(64))
            .sum::<usize>()
            + self
                .bodies
                .iter()
                .map(|(_, b)| b.arena_bytes())
                .sum::<usize>()
    }

    /// The number of loop bodies, over every nesting level.
    pub fn num_bodies(&self) -> usize {
        self.bodies.iter().map(|(_, b)| 1 + b.num_bodies()).sum()
    }
}
