//! Exported programs: a compiled function in one self-contained file, run
//! later (in another process, on another machine with the same kind of
//! CPU) with no tracing and no C compiler — JAX's `jax.export`, with the
//! native code inside.
//!
//! The file (format [`FORMAT_VERSION`]), all integers little-endian:
//!
//! | bytes | holds |
//! |---|---|
//! | 8 | the magic `RUNE\0EXP` |
//! | 4 | the format version |
//! | 8 | the length `n` of the body |
//! | `n` | the body: the exporting host's architecture and OS, its CPU features (the kernels are built with `-march=native`), the input and output signature (each leaf's path in its tree, dtype and shape, in traversal order), then tolk's program image ([`tolk::export::ProgramImage`]: the simplified graph with its captured constants' data, the plan and kernel entry points in the disk cache's serialization, the kernels' shared object and their exact forms', the arena layout, and each staged loop's body likewise) |
//! | 4 | CRC-32 (ISO-HDLC, as zlib's) of every byte before it |
//!
//! Loading checks, in order: the magic, the version, the length (a
//! shorter file is [`ExportError::Truncated`]), the checksum, the platform
//! and CPU features, then decodes every part with bounds checks, and maps
//! the shared objects from private temporary files. Each failure is a
//! named [`ExportError`], never a panic. The checksum detects damage, not
//! forgery: like any shared library, load only files you trust.

use crate::stage::JitError;
use nx::{DType, Ptree, Tensor};
use std::fmt;
use std::path::{Path, PathBuf};
use tolk::export::bytes::{Reader, Writer};
use tolk::export::ProgramImage;

/// The version of the exported file's layout; [`Exported::load`] refuses
/// files of another ([`ExportError::FormatVersion`]).
pub const FORMAT_VERSION: u32 = 1;

const MAGIC: [u8; 8] = *b"RUNE\0EXP";
/// Magic, version, body length.
const HEADER: usize = 8 + 4 + 8;
const CHECKSUM: usize = 4;

/// One leaf of an exported function's inputs or outputs: its path in the
/// tree ([`Ptree::leaf_paths`]: `w1`, `0.b`, `""` for a lone tensor), dtype
/// and shape.
///
/// ```
/// use rune::prelude::*;
/// let f = rune::jit(|x: &Tensor| x.sum(&[0], false));
/// let lowered = f.lower(&Tensor::zeros(&[3, 2], DType::F32));
/// let spec = &lowered.inputs()[0];
/// assert_eq!((spec.dtype, spec.shape.as_slice()), (DType::F32, &[3, 2][..]));
/// assert_eq!(spec.to_string(), "f32[3, 2]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeafSpec {
    /// The leaf's path in its tree.
    pub path: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
}

impl LeafSpec {
    pub(crate) fn of_tree<P: Ptree>(tree: &P) -> Vec<LeafSpec> {
        let paths = tree.leaf_paths();
        tree.leaves()
            .iter()
            .enumerate()
            .map(|(i, t)| LeafSpec {
                path: paths.get(i).cloned().unwrap_or_default(),
                dtype: t.dtype(),
                shape: t.shape().to_vec(),
            })
            .collect()
    }
}

impl fmt::Display for LeafSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{}{:?}", self.dtype, self.shape)
    }
}

/// Why exporting, loading or calling an exported program failed.
///
/// ```
/// let e = rune::Exported::load("/nonexistent/model.rune").err().unwrap();
/// assert!(matches!(e, rune::ExportError::Io { .. }));
/// assert!(e.to_string().contains("/nonexistent/model.rune"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ExportError {
    /// The file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// The file does not start with an exported program's magic bytes.
    NotAnExport,
    /// The file is of another format version.
    FormatVersion {
        /// The file's version.
        found: u32,
        /// The version this build reads ([`FORMAT_VERSION`]).
        supported: u32,
    },
    /// The file is shorter than its header says.
    Truncated {
        /// The bytes the header announces (or the least a file has).
        expected: u64,
        /// The bytes there are.
        found: u64,
    },
    /// The checksum does not match, or a part does not decode.
    Corrupted {
        /// What is wrong.
        detail: String,
    },
    /// The file was exported on another architecture or OS.
    WrongPlatform {
        /// The file's `arch-os`.
        file: String,
        /// This host's.
        host: String,
    },
    /// The exporting host had CPU features this one lacks (its code may
    /// use them: it is built with `-march=native`).
    MissingCpuFeatures {
        /// The features missing here.
        missing: Vec<String>,
    },
    /// The host's loader refused the native code (a library it links
    /// against missing, say).
    Load {
        /// The loader's message.
        detail: String,
    },
    /// A call passed another number of input leaves.
    InputCount {
        /// The exported function's.
        expected: usize,
        /// The call's.
        found: usize,
    },
    /// A call's input leaf has another dtype or shape.
    InputMismatch {
        /// The leaf's index in traversal order.
        index: usize,
        /// The exported signature's leaf.
        expected: LeafSpec,
        /// The call's.
        found: LeafSpec,
    },
    /// A call's inputs (or the template of its outputs) are a tree of
    /// another structure: other leaf paths.
    Structure {
        /// Which tree: `"input"` or `"output"`.
        which: &'static str,
        /// The exported function's leaf paths.
        expected: Vec<String>,
        /// The call's.
        found: Vec<String>,
    },
    /// The program raised an error while running (an index out of range).
    Run {
        /// Its message.
        message: String,
    },
    /// An exported program was called under a transformation (`grad`,
    /// `vmap`, an outer `jit`): it holds compiled code, not the operations
    /// a transformation needs.
    UnderTransformation,
    /// The function could not be staged or compiled (a [`JitError`]).
    Jit(JitError),
    /// The function is compiled for a device whose code cannot be exported.
    UnsupportedDevice {
        /// The device.
        device: String,
    },
}

impl fmt::Display for ExportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ExportError::*;
        match self {
            Io { path, message } => write!(f, "export: {}: {message}", path.display()),
            NotAnExport => write!(
                f,
                "export: not an exported rune program (no RUNE\\0EXP magic)"
            ),
            FormatVersion { found, supported } => write!(
                f,
                "export: the file is format version {found}; this build of rune reads version \
                 {supported} (export it again with this build)"
            ),
            Truncated { expected, found } => write!(
                f,
                "export: the file is truncated: {found} bytes of {expected}"
            ),
            Corrupted { detail } => write!(f, "export: the file is corrupted: {detail}"),
            WrongPlatform { file, host } => write!(
                f,
                "export: the program was exported for {file}; this host is {host}"
            ),
            MissingCpuFeatures { missing } => write!(
                f,
                "export: the program's code may use CPU features this host lacks: {} (export it \
                 on a host with no more features than this one)",
                missing.join(", ")
            ),
            Load { detail } => write!(f, "export: the native code does not load: {detail}"),
            InputCount { expected, found } => write!(
                f,
                "export: the program takes {expected} input leaves, the call passed {found}"
            ),
            InputMismatch {
                index,
                expected,
                found,
            } => write!(
                f,
                "export: input leaf {index} is {found}; the program was exported for {expected}"
            ),
            Structure {
                which,
                expected,
                found,
            } => write!(
                f,
                "export: the {which} tree has leaves {found:?}; the program's has {expected:?}"
            ),
            Run { message } => write!(f, "export: the program failed: {message}"),
            UnderTransformation => write!(
                f,
                "export: an exported program cannot run under a transformation (grad, vmap, \
                 jit): it holds compiled code, not operations; call it on concrete tensors"
            ),
            Jit(e) => write!(f, "export: {}", e.message()),
            UnsupportedDevice { device } => write!(
                f,
                "export: the function is compiled for device {device:?}, whose code cannot be \
                 exported yet; jit on \"CPU\" (or a host device \"CPU:n\") exports"
            ),
        }
    }
}

impl std::error::Error for ExportError {}

fn corrupted(detail: impl Into<String>) -> ExportError {
    ExportError::Corrupted {
        detail: detail.into(),
    }
}

fn host_platform() -> String {
    format!("{}-{}", std::env::consts::ARCH, std::env::consts::OS)
}

fn write_specs(w: &mut Writer, specs: &[LeafSpec]) {
    w.usize(specs.len());
    for s in specs {
        w.str(&s.path);
        w.str(s.dtype.name());
        w.usizes(&s.shape);
    }
}

fn read_specs(r: &mut Reader) -> Result<Vec<LeafSpec>, String> {
    let n = r.count(24, "signature")?;
    (0..n)
        .map(|_| {
            let path = r.str("leaf path")?.to_string();
            let name = r.str("leaf dtype")?;
            let dtype = DType::EVERY
                .into_iter()
                .find(|d| d.name() == name)
                .ok_or_else(|| format!("leaf dtype {name:?}"))?;
            let shape = r.usizes("leaf shape")?;
            Ok(LeafSpec { path, dtype, shape })
        })
        .collect()
}

/// The bytes of an exported file holding `image` for these signatures.
pub(crate) fn file_bytes(
    image: &ProgramImage,
    inputs: &[LeafSpec],
    outputs: &[LeafSpec],
) -> Result<Vec<u8>, ExportError> {
    let mut body = Writer::default();
    body.str(&host_platform());
    let features = tolk::export::host_cpu_features();
    body.usize(features.len());
    for f in &features {
        body.str(f);
    }
    write_specs(&mut body, inputs);
    write_specs(&mut body, outputs);
    let image = image
        .encode()
        .map_err(|e| ExportError::Jit(JitError::new(e)))?;
    body.bytes(&image);
    let mut file = Vec::with_capacity(HEADER + body.bytes.len() + CHECKSUM);
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&(body.bytes.len() as u64).to_le_bytes());
    file.extend_from_slice(&body.bytes);
    let sum = crc32fast::hash(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    Ok(file)
}

/// Writes an exported file: under a temporary name beside `path`, then
/// renamed, so a reader never sees part of one.
pub(crate) fn write_file(
    path: &Path,
    image: &ProgramImage,
    inputs: &[LeafSpec],
    outputs: &[LeafSpec],
) -> Result<(), ExportError> {
    let bytes = file_bytes(image, inputs, outputs)?;
    let io = |e: std::io::Error| ExportError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(
        ".{}.tmp-{}",
        name.unwrap_or_default(),
        tolk::cache::unique_suffix()
    ));
    std::fs::write(&tmp, &bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// The leaf paths of a tree differ from the exported function's.
fn check_paths(
    which: &'static str,
    expected: &[LeafSpec],
    found: Vec<String>,
) -> Result<(), ExportError> {
    if found.len() == expected.len() && found.iter().zip(expected).all(|(p, s)| *p == s.path) {
        return Ok(());
    }
    Err(ExportError::Structure {
        which,
        expected: expected.iter().map(|s| s.path.clone()).collect(),
        found,
    })
}

/// Checks `leaves` against `inputs` (count, then each leaf's dtype and shape).
pub(crate) fn check_leaves(inputs: &[LeafSpec], leaves: &[Tensor]) -> Result<(), ExportError> {
    if nx::trace::depth() > 0 || leaves.iter().any(|t| t.is_traced()) {
        return Err(ExportError::UnderTransformation);
    }
    if leaves.len() != inputs.len() {
        return Err(ExportError::InputCount {
            expected: inputs.len(),
            found: leaves.len(),
        });
    }
    for (index, (spec, t)) in inputs.iter().zip(leaves).enumerate() {
        if spec.dtype != t.dtype() || spec.shape != t.shape() {
            return Err(ExportError::InputMismatch {
                index,
                expected: spec.clone(),
                found: LeafSpec {
                    path: spec.path.clone(),
                    dtype: t.dtype(),
                    shape: t.shape().to_vec(),
                },
            });
        }
    }
    Ok(())
}

/// Runs `program` on checked leaves; a panic inside (an index out of
/// range, which jit raises as a panic) becomes [`ExportError::Run`].
pub(crate) fn run_checked(
    program: &tolk::Program,
    inputs: &[LeafSpec],
    leaves: &[Tensor],
) -> Result<Vec<Tensor>, ExportError> {
    check_leaves(inputs, leaves)?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| program.run(leaves))).map_err(|p| {
        let message = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into());
        ExportError::Run { message }
    })
}

/// A program loaded from an exported file: call it like the function it
/// was exported from, with no tracing and no C compiler. `Send` but not
/// `Sync` (like a `Jit`: a call uses the program's arena): move it to the
/// thread that calls it, or load one per thread.
///
/// ```
/// use rune::prelude::*;
/// let w = Tensor::from_slice(&[1.0f32, -2.0, 0.5], &[3]);
/// let f = rune::jit(|x: &Tensor| (x * &w).tanh().sum(&[0], false));
/// let x = Tensor::from_slice(&[0.5f32, 0.25, 2.0], &[3]);
/// let path = std::env::temp_dir().join(format!("rune_doc_exported_{}.rune", std::process::id()));
/// f.export(&x, &path).unwrap();
///
/// let m = rune::Exported::load(&path).unwrap();
/// let out = m.call(&x).unwrap();
/// assert_eq!(out[0].to_vec::<f32>(), f.call(&x).to_vec::<f32>());
/// // Another shape is a named error, not a crash:
/// let e = m.call(&Tensor::zeros(&[4], DType::F32)).err().unwrap();
/// assert!(matches!(e, rune::ExportError::InputMismatch { index: 0, .. }));
/// std::fs::remove_file(&path).unwrap();
/// ```
pub struct Exported {
    program: tolk::Program,
    inputs: Vec<LeafSpec>,
    outputs: Vec<LeafSpec>,
    cpu_features: Vec<String>,
    file_bytes: usize,
    code_bytes: usize,
}

impl Exported {
    /// Reads and loads an exported file (see the [module](self) docs for
    /// what is checked). No compiler runs.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rune_doc_not_export_{}", std::process::id()));
    /// std::fs::write(&path, b"hello").unwrap();
    /// assert!(rune::Exported::load(&path).is_err());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Exported, ExportError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| ExportError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Exported::from_bytes(&bytes)
    }

    /// [`load`](Self::load) from the file's bytes.
    ///
    /// ```
    /// let e = rune::Exported::from_bytes(b"RUNE\0EX").err().unwrap();
    /// assert!(matches!(e, rune::ExportError::Truncated { .. }));
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Exported, ExportError> {
        // As jit does: the GEMM libraries' one-time setup runs on a thread
        // of its own while the file is checked and decoded.
        nx::raw::warm_up_in_background();
        let found = bytes.len() as u64;
        let least = (HEADER + CHECKSUM) as u64;
        let prefix = bytes.len().min(MAGIC.len());
        if bytes[..prefix] != MAGIC[..prefix] {
            return Err(ExportError::NotAnExport);
        }
        if bytes.len() < 12 {
            return Err(ExportError::Truncated {
                expected: least,
                found,
            });
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(ExportError::FormatVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        if bytes.len() < HEADER + CHECKSUM {
            return Err(ExportError::Truncated {
                expected: least,
                found,
            });
        }
        let body_len = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        let expected = body_len
            .checked_add(least)
            .ok_or_else(|| corrupted("the body's length overflows"))?;
        if found < expected {
            return Err(ExportError::Truncated { expected, found });
        }
        if found > expected {
            return Err(corrupted(format!(
                "{} bytes after the end of the program",
                found - expected
            )));
        }
        let (covered, sum) = bytes.split_at(bytes.len() - CHECKSUM);
        let sum = u32::from_le_bytes(sum.try_into().expect("4 bytes"));
        if crc32fast::hash(covered) != sum {
            return Err(corrupted("the checksum does not match the contents"));
        }
        let mut r = Reader::new(&covered[HEADER..]);
        let platform = r.str("platform").map_err(corrupted)?;
        if platform != host_platform() {
            return Err(ExportError::WrongPlatform {
                file: platform.to_string(),
                host: host_platform(),
            });
        }
        let n = r.count(8, "cpu features").map_err(corrupted)?;
        let cpu_features = (0..n)
            .map(|_| r.str("cpu feature").map(str::to_string))
            .collect::<Result<Vec<_>, _>>()
            .map_err(corrupted)?;
        let host = tolk::export::host_cpu_features();
        let missing: Vec<String> = cpu_features
            .iter()
            .filter(|f| !host.contains(f))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(ExportError::MissingCpuFeatures { missing });
        }
        let inputs = read_specs(&mut r).map_err(corrupted)?;
        let outputs = read_specs(&mut r).map_err(corrupted)?;
        let image =
            ProgramImage::decode(r.bytes("program").map_err(corrupted)?).map_err(corrupted)?;
        if !r.is_done() {
            return Err(corrupted("bytes after the program"));
        }
        let g = &image.graph;
        let fits = |specs: &[LeafSpec], vars: &[usize]| {
            specs.len() == vars.len()
                && specs.iter().zip(vars).all(|(s, &v)| {
                    let a = g.aval(v);
                    a.dtype == s.dtype && a.shape == s.shape
                })
        };
        if !fits(&inputs, &g.inputs) || !fits(&outputs, &g.outputs) {
            return Err(corrupted("the signature does not match the program"));
        }
        let code_bytes = image.code_bytes();
        let program = image
            .instantiate()
            .map_err(|detail| ExportError::Load { detail })?;
        Ok(Exported {
            program,
            inputs,
            outputs,
            cpu_features,
            file_bytes: bytes.len(),
            code_bytes,
        })
    }

    /// Runs the program on `args`, a tree of the structure and leaf
    /// signature it was exported with; returns the output leaves in
    /// traversal order. Writebacks (in-place `assign`s to inputs) are
    /// replayed into `args`' tensors, as the jitted function does.
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|p: &(Tensor, Tensor)| (&p.0 * &p.1, &p.0 + &p.1));
    /// let args = (Tensor::from_slice(&[2.0f32], &[1]), Tensor::from_slice(&[3.0f32], &[1]));
    /// let path = std::env::temp_dir().join(format!("rune_doc_call_{}.rune", std::process::id()));
    /// f.export(&args, &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// let out = m.call(&args).unwrap();
    /// assert_eq!((out[0].to_vec::<f32>(), out[1].to_vec::<f32>()), (vec![6.0], vec![5.0]));
    /// // A tree of another structure (one tensor, not a pair):
    /// assert!(matches!(m.call(&args.0), Err(rune::ExportError::Structure { .. })));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn call<P: Ptree>(&self, args: &P) -> Result<Vec<Tensor>, ExportError> {
        check_paths("input", &self.inputs, args.leaf_paths())?;
        self.call_leaves(&args.leaves())
    }

    /// [`call`](Self::call) on the input leaves in traversal order, with
    /// no tree (only their number, dtypes and shapes are checked).
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|x: &Tensor| x * 2.0);
    /// let x = Tensor::from_slice(&[1.5f32], &[1]);
    /// let path = std::env::temp_dir().join(format!("rune_doc_leaves_{}.rune", std::process::id()));
    /// f.export(&x, &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.call_leaves(&[x]).unwrap()[0].to_vec::<f32>(), vec![3.0]);
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn call_leaves(&self, leaves: &[Tensor]) -> Result<Vec<Tensor>, ExportError> {
        run_checked(&self.program, &self.inputs, leaves)
    }

    /// [`call`](Self::call), the outputs rebuilt as a tree of `like`'s type
    /// and structure (its leaf paths must be the exported outputs'; its
    /// leaves' values are not read, and its ignored fields are kept).
    ///
    /// ```
    /// use rune::prelude::*;
    /// let f = rune::jit(|x: &Tensor| (x.sin(), vec![x.cos()]));
    /// let x = Tensor::from_slice(&[0.5f32], &[1]);
    /// let path = std::env::temp_dir().join(format!("rune_doc_as_{}.rune", std::process::id()));
    /// f.export(&x, &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// let like = (x.clone(), vec![x.clone()]);
    /// let (s, c) = m.call_as(&x, &like).unwrap();
    /// assert_eq!((s.to_vec::<f32>(), c[0].to_vec::<f32>()), (x.sin().to_vec::<f32>(), x.cos().to_vec::<f32>()));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn call_as<P: Ptree, Q: Ptree>(&self, args: &P, like: &Q) -> Result<Q, ExportError> {
        check_paths("output", &self.outputs, like.leaf_paths())?;
        let outs = self.call(args)?;
        Ok(like.with_leaves(&outs))
    }

    /// The input leaves' paths, dtypes and shapes, in traversal order.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x * 2.0);
    /// # let path = std::env::temp_dir().join(format!("rune_doc_inputs_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.inputs()[0].shape, vec![2]);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn inputs(&self) -> &[LeafSpec] {
        &self.inputs
    }

    /// The output leaves' paths, dtypes and shapes, in traversal order.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.sum(&[0], false));
    /// # let path = std::env::temp_dir().join(format!("rune_doc_outputs_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.outputs()[0].shape, Vec::<usize>::new());
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn outputs(&self) -> &[LeafSpec] {
        &self.outputs
    }

    /// The simplified program it runs (`Display` prints one primitive a
    /// line, as [`crate::make_graph`]'s graphs).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_graph_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert!(m.graph().to_string().contains("exp"));
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn graph(&self) -> &tolk::Graph {
        self.program.graph()
    }

    /// The CPU features the exporting host had (see
    /// [`ExportError::MissingCpuFeatures`]).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_features_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// assert_eq!(m.cpu_features(), rune::tolk::export::host_cpu_features().as_slice());
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn cpu_features(&self) -> &[String] {
        &self.cpu_features
    }

    /// The file's size, and the bytes of native code in it.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_sizes_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// let (file, code) = m.sizes();
    /// assert!(code > 0 && file > code);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn sizes(&self) -> (usize, usize) {
        (self.file_bytes, self.code_bytes)
    }
}
