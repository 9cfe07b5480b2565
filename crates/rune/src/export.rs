//! Exported programs: a compiled function in one self-contained file, run
//! later (in another process, on another machine whose CPU has the
//! instruction-set level the file was built for) with no tracing and no C
//! compiler — JAX's `jax.export`, with the native code inside.
//!
//! **What loading means.** An export holds native code, and loading it
//! maps that code into the process and runs it, as loading a shared
//! library does. [`Exported::load`] checks that the file is whole (a
//! checksum, and a signature when there is one) and well formed, not who
//! made it: use it for files you made yourself. [`Exported::load_trusted`]
//! also requires an Ed25519 signature by one of the keys you trust,
//! checked over the whole file before anything in it is decoded or any
//! code is mapped: use it for files that crossed a network or another
//! team's hands.
//!
//! **CPU targets.** The kernels are built for the instruction-set levels
//! [`ExportOpts::cpu`] names ([`CpuTarget`]: `x86-64-v2`, `x86-64-v3`,
//! `x86-64-v4`, `native`, `aarch64`); a file may hold code for several,
//! and the loader runs the best this host supports
//! ([`CpuTarget::rank`]), or refuses the file naming the level and the
//! features this host lacks ([`ExportError::MissingCpuFeatures`]).
//!
//! The file (format [`FORMAT_VERSION`]), all integers little-endian:
//!
//! | bytes | holds |
//! |---|---|
//! | 8 | the magic `RUNE\0EXP` |
//! | 4 | the format version |
//! | 8 | the length `n` of the body |
//! | 4 | the length `s` of the signature block: 0 (unsigned) or 96 |
//! | `n` | the body: the library that wrote it ([`LIBRARY`]), the architecture and OS its code is for, per CPU target its name, the CPU features its code may use and the C compiler that built it (`cc: <cc --version's first line>`), the input and output signature (each leaf's path in its tree, dtype and shape, in traversal order), then tolk's program image ([`tolk::export::ProgramImage`]: the simplified graph with its captured constants' data, the plan and kernel entry points in the disk cache's serialization, per target the kernels' shared object and their exact forms', the arena layout, and each staged loop's body likewise) |
//! | 4 | CRC-32 (ISO-HDLC, as zlib's) of every byte before it |
//! | `s` | the signature block: the signer's Ed25519 public key (32 bytes), then its signature (64 bytes, RFC 8032, verified strictly) of every byte before the block |
//!
//! Loading checks, in order: the magic, the version, the lengths (a
//! shorter file is [`ExportError::Truncated`]), the signature (when the
//! file has one, or [`Exported::load_trusted`] asks for one: the key it
//! names must be trusted, then the signature must verify), the checksum,
//! then decodes the body with bounds checks, picks the CPU target, and
//! maps that target's shared objects from private temporary files. Each
//! failure is a named [`ExportError`], never a panic.

use crate::stage::JitError;
use nx::{DType, Ptree, Tensor};
use std::fmt;
use std::path::{Path, PathBuf};
use tolk::export::bytes::{Reader, Writer};
use tolk::export::ProgramImage;

pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use tolk::export::CpuTarget;

/// The version of the exported file's layout; [`Exported::load`] refuses
/// files of another ([`ExportError::FormatVersion`]).
pub const FORMAT_VERSION: u32 = 2;

/// The library and version an export records as its writer.
pub const LIBRARY: &str = concat!("rune ", env!("CARGO_PKG_VERSION"));

const MAGIC: [u8; 8] = *b"RUNE\0EXP";
/// Magic, version, body length, signature block length.
const HEADER: usize = 8 + 4 + 8 + 4;
const CHECKSUM: usize = 4;
/// The signature block: the signer's public key, then the signature.
const SIGNATURE: usize = 32 + 64;

/// How [`crate::Jit::export_with`] builds and signs an export.
///
/// ```
/// use rune::export::{CpuTarget, ExportOpts, SigningKey};
/// let opts = ExportOpts {
///     cpu: vec![CpuTarget::X86_64V2, CpuTarget::X86_64V3],
///     signing_key: Some(SigningKey::from_bytes(&[7; 32])),
/// };
/// assert_eq!(ExportOpts::default().cpu, ExportOpts::default_targets());
/// # let _ = opts;
/// ```
#[derive(Clone, Debug)]
pub struct ExportOpts {
    /// The CPU targets to build the kernels for (one shared object each;
    /// the loader runs the best the host supports). All of one
    /// architecture; not empty. Default: [`ExportOpts::default_targets`].
    pub cpu: Vec<CpuTarget>,
    /// The key that signs the file, if any ([`Exported::load_trusted`]
    /// checks it). `SigningKey::from_bytes(&secret)` makes one from 32
    /// secret bytes; keep them secret, publish `signing_key.verifying_key()`.
    pub signing_key: Option<SigningKey>,
}

impl ExportOpts {
    /// The default targets: the host architecture's portable level
    /// ([`CpuTarget::portable`]: x86-64-v2 on x86-64), and on x86-64 the
    /// wider levels x86-64-v3 and x86-64-v4 too, so that the file runs on
    /// every x86-64-v2 CPU and at full speed (and with the same bits as
    /// jit) on the newer ones. Building each costs one more compile.
    pub fn default_targets() -> Vec<CpuTarget> {
        match CpuTarget::portable() {
            CpuTarget::X86_64V2 => vec![
                CpuTarget::X86_64V2,
                CpuTarget::X86_64V3,
                CpuTarget::X86_64V4,
            ],
            t => vec![t],
        }
    }
}

impl Default for ExportOpts {
    fn default() -> ExportOpts {
        ExportOpts {
            cpu: ExportOpts::default_targets(),
            signing_key: None,
        }
    }
}

/// One CPU target an export holds code for (see [`ExportInfo`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// Its name ([`CpuTarget::name`]).
    pub name: String,
    /// The CPU features its code may use (a host lacking one does not run it).
    pub cpu_features: Vec<String>,
    /// The C compiler that built it: `cc: <cc --version's first line>`
    /// (empty for a program with no kernels).
    pub compiler: String,
}

/// What an exported file records about itself ([`Exported::info`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportInfo {
    /// The file's format version ([`FORMAT_VERSION`]).
    pub format: u32,
    /// The library that wrote it, with its version (`rune 0.1.0`).
    pub library: String,
    /// The architecture and OS its code is for (`x86_64-linux`).
    pub platform: String,
    /// The CPU targets it holds code for, in the file's order.
    pub targets: Vec<TargetInfo>,
    /// The index in [`targets`](Self::targets) of the one this host runs
    /// (always `Some` for a loaded file; `None` from
    /// [`Exported::inspect`] when none runs here).
    pub running: Option<usize>,
    /// The key that signed it, if it is signed (its signature verified:
    /// no file with a signature that does not verify loads).
    pub signer: Option<VerifyingKey>,
    /// Whether it was loaded by [`Exported::load_trusted`], the signer
    /// being one of the keys given.
    pub trusted: bool,
}

impl fmt::Display for ExportInfo {
    /// A few lines: writer, platform, each target (the one running marked),
    /// signer.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "written by {} (format {}) for {}",
            self.library, self.format, self.platform
        )?;
        for (i, t) in self.targets.iter().enumerate() {
            let mark = if Some(i) == self.running {
                " (running)"
            } else {
                ""
            };
            let cc = if t.compiler.is_empty() {
                "no kernels"
            } else {
                &t.compiler
            };
            writeln!(f, "target {}{mark}: built by {cc}", t.name)?;
        }
        match &self.signer {
            Some(k) => write!(
                f,
                "signed by {}{}",
                public_key_hex(k),
                if self.trusted {
                    " (trusted)"
                } else {
                    " (not checked against trusted keys)"
                }
            ),
            None => write!(f, "unsigned"),
        }
    }
}

/// A public key as 64 lowercase hex digits.
///
/// ```
/// use rune::export::{public_key_hex, parse_public_key, SigningKey};
/// let key = SigningKey::from_bytes(&[7; 32]).verifying_key();
/// let hex = public_key_hex(&key);
/// assert_eq!(hex.len(), 64);
/// assert_eq!(parse_public_key(&hex).unwrap(), key);
/// ```
pub fn public_key_hex(key: &VerifyingKey) -> String {
    key.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A public key from 64 hex digits (surrounding whitespace ignored).
pub fn parse_public_key(hex: &str) -> Result<VerifyingKey, String> {
    let hex = hex.trim();
    let digits = hex.as_bytes();
    if digits.len() != 64 || !digits.iter().all(u8::is_ascii_hexdigit) {
        return Err(format!("not a public key (64 hex digits): {hex:?}"));
    }
    let mut key = [0u8; 32];
    for (i, b) in key.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex digits");
    }
    VerifyingKey::from_bytes(&key).map_err(|e| format!("not a valid Ed25519 public key: {e}"))
}

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
    /// None of the file's CPU targets runs on this host: `target` is the
    /// one that comes closest, `missing` the CPU features its code may use
    /// that this host lacks.
    MissingCpuFeatures {
        /// The target's name (`x86-64-v4`, `native`, ...).
        target: String,
        /// The features missing here.
        missing: Vec<String>,
    },
    /// [`Exported::load_trusted`] was given a file with no signature.
    Unsigned,
    /// [`Exported::load_trusted`] was given a file signed by a key that
    /// is not among the trusted ones.
    UntrustedSigner {
        /// The signer's public key, as 64 hex digits.
        signer: String,
    },
    /// The file's signature does not verify under the key it names: the
    /// file was changed after it was signed (or the signature forged).
    BadSignature,
    /// An export cannot be built for a CPU target: no compiler for it
    /// (aarch64 from an x86-64 host without a cross compiler), targets of
    /// several architectures in one file, or none.
    CpuTarget {
        /// What is wrong.
        detail: String,
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
            MissingCpuFeatures { target, missing } => write!(
                f,
                "export: the program is built for {target}, whose code may use CPU features this \
                 host lacks: {} (export it for a level this host has, e.g. ExportOpts {{ cpu: \
                 vec![CpuTarget::X86_64V2], .. }})",
                missing.join(", ")
            ),
            Unsigned => write!(
                f,
                "export: the file is not signed; load_trusted loads only files signed by a \
                 trusted key (Exported::load loads files you made yourself)"
            ),
            UntrustedSigner { signer } => write!(
                f,
                "export: the file is signed by {signer}, which is not among the trusted keys"
            ),
            BadSignature => write!(
                f,
                "export: the file's signature does not verify: it was changed after it was signed"
            ),
            CpuTarget { detail } => write!(f, "export: {detail}"),
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

fn read(path: &Path) -> Result<Vec<u8>, ExportError> {
    std::fs::read(path).map_err(|e| ExportError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

fn check_sum(framed: &Framed<'_>) -> Result<(), ExportError> {
    if crc32fast::hash(framed.summed) != framed.sum {
        return Err(corrupted("the checksum does not match the contents"));
    }
    Ok(())
}

/// A body's parts: what it records (its signer and running target not
/// yet known), its signature, and its image. Every part is decoded with
/// bounds checks; the image must hold code for each target and match the
/// signature.
fn read_body(
    body: &[u8],
) -> Result<(ExportInfo, Vec<LeafSpec>, Vec<LeafSpec>, ProgramImage), ExportError> {
    let mut r = Reader::new(body);
    let library = r.str("library").map_err(corrupted)?.to_string();
    let platform = r.str("platform").map_err(corrupted)?.to_string();
    let n = r.count(24, "cpu targets").map_err(corrupted)?;
    let targets = (0..n)
        .map(|_| {
            let name = r.str("cpu target")?.to_string();
            let n = r.count(8, "cpu features")?;
            let cpu_features = (0..n)
                .map(|_| r.str("cpu feature").map(str::to_string))
                .collect::<Result<Vec<_>, _>>()?;
            let compiler = r.str("compiler")?.to_string();
            Ok(TargetInfo {
                name,
                cpu_features,
                compiler,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(corrupted)?;
    if targets.is_empty() {
        return Err(corrupted("no CPU target"));
    }
    let inputs = read_specs(&mut r).map_err(corrupted)?;
    let outputs = read_specs(&mut r).map_err(corrupted)?;
    let image = ProgramImage::decode(r.bytes("program").map_err(corrupted)?).map_err(corrupted)?;
    if !r.is_done() {
        return Err(corrupted("bytes after the program"));
    }
    if image.code.len() != targets.len() {
        return Err(corrupted(format!(
            "code for {} targets, {} named",
            image.code.len(),
            targets.len()
        )));
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
    let info = ExportInfo {
        format: FORMAT_VERSION,
        library,
        platform,
        targets,
        running: None,
        signer: None,
        trusted: false,
    };
    Ok((info, inputs, outputs, image))
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

/// What [`file_bytes`] writes besides the image.
pub(crate) struct FileParts<'a> {
    /// The targets the image's code is for, in its order.
    pub targets: &'a [CpuTarget],
    /// Per target, the compiler that built its code.
    pub compilers: &'a [String],
    pub inputs: &'a [LeafSpec],
    pub outputs: &'a [LeafSpec],
    pub signing_key: Option<&'a SigningKey>,
}

/// Checks export options' targets: some, all of one architecture, and a
/// compiler for each can be run. Returns the architecture.
pub(crate) fn check_targets(targets: &[CpuTarget]) -> Result<&'static str, ExportError> {
    let detail = |d: String| ExportError::CpuTarget { detail: d };
    let first = targets
        .first()
        .ok_or_else(|| detail("no CPU target: ExportOpts::cpu is empty".into()))?;
    if let Some(other) = targets.iter().find(|t| t.arch() != first.arch()) {
        return Err(detail(format!(
            "one file holds code for one architecture: {first} is {}, {other} is {}",
            first.arch(),
            other.arch()
        )));
    }
    for &t in targets {
        tolk::build::compiler_identity_for(t).map_err(|e| {
            if t.arch() == std::env::consts::ARCH {
                // No compiler at all: what jit says.
                ExportError::Jit(JitError::new(e))
            } else {
                detail(e)
            }
        })?;
    }
    Ok(first.arch())
}

/// The bytes of an exported file holding `image` and `parts`.
pub(crate) fn file_bytes(
    image: &ProgramImage,
    parts: &FileParts<'_>,
) -> Result<Vec<u8>, ExportError> {
    let arch = check_targets(parts.targets)?;
    if image.code.len() != parts.targets.len() || parts.compilers.len() != parts.targets.len() {
        return Err(ExportError::Jit(JitError::new(
            "export: internal error: the image's code does not match its targets",
        )));
    }
    let mut body = Writer::default();
    body.str(LIBRARY);
    body.str(&format!("{arch}-{}", std::env::consts::OS));
    body.usize(parts.targets.len());
    for (t, cc) in parts.targets.iter().zip(parts.compilers) {
        body.str(t.name());
        let features = t.features();
        body.usize(features.len());
        for f in &features {
            body.str(f);
        }
        body.str(cc);
    }
    write_specs(&mut body, parts.inputs);
    write_specs(&mut body, parts.outputs);
    let image = image
        .encode()
        .map_err(|e| ExportError::Jit(JitError::new(e)))?;
    body.bytes(&image);
    let signature_len = if parts.signing_key.is_some() {
        SIGNATURE
    } else {
        0
    };
    let mut file = Vec::with_capacity(HEADER + body.bytes.len() + CHECKSUM + signature_len);
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&(body.bytes.len() as u64).to_le_bytes());
    file.extend_from_slice(&(signature_len as u32).to_le_bytes());
    file.extend_from_slice(&body.bytes);
    let sum = crc32fast::hash(&file);
    file.extend_from_slice(&sum.to_le_bytes());
    if let Some(key) = parts.signing_key {
        use ed25519_dalek::Signer;
        let signature = key.sign(&file);
        file.extend_from_slice(key.verifying_key().as_bytes());
        file.extend_from_slice(&signature.to_bytes());
    }
    Ok(file)
}

/// Writes an exported file: under a temporary name beside `path`, then
/// renamed, so a reader never sees part of one.
pub(crate) fn write_file(
    path: &Path,
    image: &ProgramImage,
    parts: &FileParts<'_>,
) -> Result<(), ExportError> {
    let bytes = file_bytes(image, parts)?;
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

/// Compiles `graph` for `opts`' targets and writes the export (what
/// `Jit::export_with` and `Lowered`'s export do).
pub(crate) fn compile_and_write(
    graph: tolk::Graph,
    path: &Path,
    opts: &ExportOpts,
    inputs: &[LeafSpec],
    outputs: &[LeafSpec],
) -> Result<(), ExportError> {
    check_targets(&opts.cpu)?;
    let compiled =
        tolk::export::compile(graph, &opts.cpu).map_err(|e| ExportError::Jit(JitError::new(e)))?;
    write_file(
        path,
        &compiled.image,
        &FileParts {
            targets: &opts.cpu,
            compilers: &compiled.compilers,
            inputs,
            outputs,
            signing_key: opts.signing_key.as_ref(),
        },
    )
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
    info: ExportInfo,
    /// The index of the target running (`info.running`).
    running: usize,
    file_bytes: usize,
    code_bytes: usize,
}

/// An exported file's parts, located (see the [module](self) docs).
struct Framed<'a> {
    /// The header, body and checksum: what a signature covers.
    signed: &'a [u8],
    /// The header and body: what the checksum covers.
    summed: &'a [u8],
    /// The checksum.
    sum: u32,
    /// The body.
    body: &'a [u8],
    /// The signer's public key and the signature, if signed.
    signature: Option<(&'a [u8; 32], &'a [u8; 64])>,
}

/// Locates the parts of an exported file, checking its magic, version
/// and lengths.
fn frame(bytes: &[u8]) -> Result<Framed<'_>, ExportError> {
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
    let signature_len = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if signature_len != 0 && signature_len as usize != SIGNATURE {
        return Err(corrupted(format!(
            "a signature block of {signature_len} bytes (0 or {SIGNATURE})"
        )));
    }
    let expected = body_len
        .checked_add(least + signature_len as u64)
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
    let (signed, block) = bytes.split_at(bytes.len() - signature_len as usize);
    let (summed, sum) = signed.split_at(signed.len() - CHECKSUM);
    let signature = (signature_len != 0).then(|| {
        let (key, sig) = block.split_at(32);
        (
            key.try_into().expect("32 bytes"),
            sig.try_into().expect("64 bytes"),
        )
    });
    Ok(Framed {
        signed,
        summed,
        sum: u32::from_le_bytes(sum.try_into().expect("4 bytes")),
        body: &summed[HEADER..],
        signature,
    })
}

/// Checks a framed file's signature, if it has one or `trusted` asks for
/// one (`Some`: the keys the caller trusts): the key it names must be
/// trusted, and the signature must verify under it, strictly (RFC 8032
/// with no malleable encodings). Returns the signer.
fn check_signature(
    framed: &Framed<'_>,
    trusted: Option<&[VerifyingKey]>,
) -> Result<Option<VerifyingKey>, ExportError> {
    let Some((key, signature)) = framed.signature else {
        return match trusted {
            Some(_) => Err(ExportError::Unsigned),
            None => Ok(None),
        };
    };
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let signer = match trusted {
        Some(keys) => *keys
            .iter()
            .find(|k| k.as_bytes() == key)
            .ok_or(ExportError::UntrustedSigner { signer: hex })?,
        // Not a valid point: no signature can verify under it.
        None => VerifyingKey::from_bytes(key).map_err(|_| ExportError::BadSignature)?,
    };
    let signature = ed25519_dalek::Signature::from_bytes(signature);
    signer
        .verify_strict(framed.signed, &signature)
        .map_err(|_| ExportError::BadSignature)?;
    Ok(Some(signer))
}

/// The index of the target to run among `targets` (each with the CPU
/// features its code may use): the best-ranked one whose features the
/// host has; else the error naming the one that comes closest.
fn choose_target(targets: &[TargetInfo], host: &[String]) -> Result<usize, ExportError> {
    let rank = |name: &str| name.parse::<CpuTarget>().map_or(0, |t| t.rank());
    let missing = |t: &TargetInfo| -> Vec<String> {
        (t.cpu_features.iter())
            .filter(|f| !host.contains(f))
            .cloned()
            .collect()
    };
    let runnable = (0..targets.len()).filter(|&i| missing(&targets[i]).is_empty());
    // The best rank; the first of equals.
    if let Some(best) = runnable.rev().max_by_key(|&i| rank(&targets[i].name)) {
        return Ok(best);
    }
    let closest = (targets.iter())
        .min_by_key(|t| missing(t).len())
        .ok_or_else(|| corrupted("no CPU target"))?;
    Err(ExportError::MissingCpuFeatures {
        target: closest.name.clone(),
        missing: missing(closest),
    })
}

impl Exported {
    /// Reads and loads an exported file (see the [module](self) docs for
    /// what is checked). No compiler runs. A signed file's signature must
    /// verify under the key it names, whoever that is: to require a key
    /// you trust, use [`load_trusted`](Self::load_trusted).
    ///
    /// Loading runs the file's native code in this process, as loading a
    /// shared library does: use it for files you made yourself.
    ///
    /// ```
    /// let path = std::env::temp_dir().join(format!("rune_doc_not_export_{}", std::process::id()));
    /// std::fs::write(&path, b"hello").unwrap();
    /// assert!(rune::Exported::load(&path).is_err());
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn load(path: impl AsRef<Path>) -> Result<Exported, ExportError> {
        Exported::from_bytes(&read(path.as_ref())?)
    }

    /// [`load`](Self::load), accepting only a file signed by one of
    /// `trusted`: its signature is verified over the whole file before
    /// anything in it is decoded or any of its code is mapped. An unsigned
    /// file is [`ExportError::Unsigned`], one signed by another key
    /// [`ExportError::UntrustedSigner`], one changed after signing
    /// [`ExportError::BadSignature`] (or, for a change in its lengths,
    /// [`ExportError::Truncated`] or [`ExportError::Corrupted`]).
    ///
    /// ```
    /// use rune::prelude::*;
    /// use rune::export::{ExportOpts, SigningKey};
    /// let key = SigningKey::from_bytes(&[7; 32]); // keep the 32 bytes secret
    /// let f = rune::jit(|x: &Tensor| x * 2.0);
    /// let x = Tensor::from_slice(&[1.5f32], &[1]);
    /// let path = std::env::temp_dir().join(format!("rune_doc_trusted_{}.rune", std::process::id()));
    /// f.export_with(&x, &path, &ExportOpts { signing_key: Some(key.clone()), ..Default::default() }).unwrap();
    ///
    /// let m = rune::Exported::load_trusted(&path, &[key.verifying_key()]).unwrap();
    /// assert_eq!(m.call(&x).unwrap()[0].to_vec::<f32>(), vec![3.0]);
    /// assert_eq!(m.info().signer, Some(key.verifying_key()));
    /// let other = SigningKey::from_bytes(&[8; 32]).verifying_key();
    /// assert!(matches!(rune::Exported::load_trusted(&path, &[other]),
    ///                  Err(rune::ExportError::UntrustedSigner { .. })));
    /// std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn load_trusted(
        path: impl AsRef<Path>,
        trusted: &[VerifyingKey],
    ) -> Result<Exported, ExportError> {
        Exported::from_bytes_trusted(&read(path.as_ref())?, trusted)
    }

    /// [`load`](Self::load) from the file's bytes.
    ///
    /// ```
    /// let e = rune::Exported::from_bytes(b"RUNE\0EX").err().unwrap();
    /// assert!(matches!(e, rune::ExportError::Truncated { .. }));
    /// ```
    pub fn from_bytes(bytes: &[u8]) -> Result<Exported, ExportError> {
        Exported::open(bytes, None)
    }

    /// [`load_trusted`](Self::load_trusted) from the file's bytes.
    pub fn from_bytes_trusted(
        bytes: &[u8],
        trusted: &[VerifyingKey],
    ) -> Result<Exported, ExportError> {
        Exported::open(bytes, Some(trusted))
    }

    /// What an exported file records about itself, read without loading
    /// its code (its signature is checked if it has one, against no list
    /// of trusted keys).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_inspect_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let info = rune::Exported::inspect(std::fs::read(&path).unwrap().as_slice()).unwrap();
    /// assert_eq!(info.library, rune::export::LIBRARY);
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn inspect(bytes: &[u8]) -> Result<ExportInfo, ExportError> {
        let framed = frame(bytes)?;
        let signer = check_signature(&framed, None)?;
        check_sum(&framed)?;
        let (mut info, ..) = read_body(framed.body)?;
        info.signer = signer;
        info.running = (info.platform == host_platform())
            .then(|| choose_target(&info.targets, &tolk::export::host_cpu_features()).ok())
            .flatten();
        Ok(info)
    }

    /// Every check, in the order the [module](self) docs give, then the
    /// code mapped. `trusted`: the keys [`load_trusted`](Self::load_trusted)
    /// was given.
    fn open(bytes: &[u8], trusted: Option<&[VerifyingKey]>) -> Result<Exported, ExportError> {
        // As jit does: the GEMM libraries' one-time setup runs on a thread
        // of its own while the file is checked and decoded.
        nx::raw::warm_up_in_background();
        let framed = frame(bytes)?;
        // Before anything else in the file is read.
        let signer = check_signature(&framed, trusted)?;
        check_sum(&framed)?;
        let (mut info, inputs, outputs, image) = read_body(framed.body)?;
        if info.platform != host_platform() {
            return Err(ExportError::WrongPlatform {
                file: info.platform,
                host: host_platform(),
            });
        }
        let target = choose_target(&info.targets, &tolk::export::host_cpu_features())?;
        let code_bytes = image.code_bytes(target);
        let program = image
            .instantiate(target)
            .map_err(|detail| ExportError::Load { detail })?;
        info.running = Some(target);
        info.signer = signer;
        info.trusted = trusted.is_some();
        Ok(Exported {
            program,
            inputs,
            outputs,
            info,
            running: target,
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

    /// What the file records about itself: the library and version that
    /// wrote it, its CPU targets (each with the features its code may use
    /// and the compiler that built it; which one runs here), its signer.
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_info_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// let info = m.info();
    /// assert_eq!(info.library, rune::export::LIBRARY);
    /// assert_eq!(info.targets[0].name, rune::export::CpuTarget::portable().name());
    /// assert!(info.targets[0].compiler.contains("cc"));
    /// assert_eq!(info.signer, None);
    /// println!("{info}");
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn info(&self) -> &ExportInfo {
        &self.info
    }

    /// The CPU features the running target's code may use (see
    /// [`ExportError::MissingCpuFeatures`]).
    ///
    /// ```
    /// # use rune::prelude::*;
    /// # let f = rune::jit(|x: &Tensor| x.exp());
    /// # let path = std::env::temp_dir().join(format!("rune_doc_features_{}.rune", std::process::id()));
    /// # f.export(&Tensor::zeros(&[2], DType::F32), &path).unwrap();
    /// let m = rune::Exported::load(&path).unwrap();
    /// let host = rune::tolk::export::host_cpu_features();
    /// assert!(m.cpu_features().iter().all(|f| host.contains(f)));
    /// # std::fs::remove_file(&path).unwrap();
    /// ```
    pub fn cpu_features(&self) -> &[String] {
        &self.info.targets[self.running].cpu_features
    }

    /// The file's size, and the bytes of native code the running target has.
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
