//! Checkpoints: parameter trees as safetensors files.
//!
//! The format (what the `safetensors` crate reads and writes): an 8-byte
//! little-endian header length, a JSON header mapping each tensor's name to
//! its dtype, shape and byte range (`data_offsets`) in the data that follows,
//! plus an optional `__metadata__` map of strings; the data is each tensor's
//! elements in row-major order, little-endian. A tree's leaves are named by
//! their paths ([`Ptree::leaf_paths`]).

use crate::dtype::{DType, Element};
use crate::ptree::{Ptree, Tree};
use crate::tensor::Tensor;
use half::{bf16, f16};
use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::io::{Error, ErrorKind};
use std::path::Path;

/// Little-endian bytes of an element type.
trait LeBytes: Element {
    fn put(self, out: &mut Vec<u8>);
    /// `None` for a byte pattern that is no value (a bool other than 0 or 1).
    fn get(b: &[u8]) -> Option<Self>;
}

macro_rules! le_bytes {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_le_bytes(b.try_into().ok()?))
            }
        }
    )*};
}
le_bytes!(u8, u16, u32, u64, i8, i16, i32, i64, f32, f64);

macro_rules! le_bytes_half {
    ($($t:ty),*) => {$(
        impl LeBytes for $t {
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_bits().to_le_bytes());
            }
            fn get(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_bits(u16::from_le_bytes(b.try_into().ok()?)))
            }
        }
    )*};
}
le_bytes_half!(f16, bf16);

impl LeBytes for bool {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn get(b: &[u8]) -> Option<Self> {
        match b {
            [0] => Some(false),
            [1] => Some(true),
            _ => None,
        }
    }
}

fn to_safetensors(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::I8 => Dtype::I8,
        DType::I16 => Dtype::I16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::C64 | DType::C128 | DType::I4 | DType::U4 => {
            unreachable!("save refuses {d} tensors first")
        }
    }
}

fn from_safetensors(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        _ => return None,
    })
}

fn encode<T: LeBytes>(t: &Tensor) -> Vec<u8> {
    let mut out = Vec::with_capacity(t.numel() * std::mem::size_of::<T>());
    for x in t.to_vec::<T>() {
        x.put(&mut out);
    }
    out
}

fn decode<T: LeBytes>(bytes: &[u8], shape: &[usize]) -> Option<Tensor> {
    let size = std::mem::size_of::<T>();
    let data: Option<Vec<T>> = bytes.chunks_exact(size).map(T::get).collect();
    Some(Tensor::from_vec(data?, shape))
}

/// One leaf, encoded, as the `safetensors` crate's writer wants it.
struct Encoded {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Encoded {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!(
            "{}: not a valid safetensors checkpoint: {what}",
            path.display()
        ),
    )
}

/// Writes `tree` to `path` as a safetensors file, each leaf named by its
/// path in the tree ([`Ptree::leaf_paths`]: `w1`, `layers.0.w`, `opt.m.b2`)
/// and stored in row-major order whatever its strides. Every dtype of nx
/// maps to the safetensors dtype of the same name (`Bool` to `BOOL`). Two
/// leaves with one name (say a dict key `"a.0"` beside a list under `"a"`)
/// are an `InvalidInput` error; I/O failures are returned as they come.
///
/// ```
/// use nx::{Ptree, Tensor};
///
/// #[derive(Ptree, Clone)]
/// struct Dense { w: Tensor, b: Tensor }
///
/// let model = vec![Dense { w: Tensor::ones(&[2, 3], nx::DType::F32), b: Tensor::zeros(&[3], nx::DType::F32) }];
/// let path = std::env::temp_dir().join(format!("nx_doc_save_{}.safetensors", std::process::id()));
/// nx::save(&model, &path).unwrap();
/// let names: Vec<String> = match nx::load_tree(&path).unwrap() {
///     nx::Tree::Dict(entries) => entries.into_iter().map(|(k, _)| k).collect(),
///     _ => unreachable!(),
/// };
/// assert!(names.contains(&"0.w".to_string()) && names.contains(&"0.b".to_string()));
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn save<P: Ptree>(tree: &P, path: impl AsRef<Path>) -> std::io::Result<()> {
    let path = path.as_ref();
    let names = tree.leaf_paths();
    let leaves = tree.leaves();
    if names.len() != leaves.len() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "save: the tree names {} leaves but has {} (its visit_paths disagrees with for_each_leaf)",
                names.len(),
                leaves.len()
            ),
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for n in &names {
        if !seen.insert(n.as_str()) {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("save: two leaves of the tree have the path {n:?}; checkpoint names must be distinct"),
            ));
        }
    }
    if let Some(t) = leaves
        .iter()
        .find(|t| t.dtype().is_complex() || t.dtype().is_4bit())
    {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "save: {} tensors cannot be saved (the checkpoint format holds the 13 real dtypes); cast them first",
                t.dtype()
            ),
        ));
    }
    let encoded: Vec<Encoded> = leaves
        .iter()
        .map(|t| Encoded {
            dtype: to_safetensors(t.dtype()),
            shape: t.shape().to_vec(),
            data: crate::with_dtype!(t.dtype(), T => encode::<T>(t)),
        })
        .collect();
    let bytes = safetensors::serialize(names.iter().map(String::as_str).zip(&encoded), None)
        .map_err(|e| Error::other(format!("save: {e}")))?;
    std::fs::write(path, bytes)
}

/// A parsed file: its bytes, the header, and where the data starts.
struct File {
    bytes: Vec<u8>,
    meta: Metadata,
    data_start: usize,
}

impl File {
    fn read(path: &Path) -> std::io::Result<File> {
        let bytes = std::fs::read(path)?;
        let (n, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| invalid(path, e))?;
        Ok(File {
            data_start: 8 + n,
            bytes,
            meta,
        })
    }

    /// The tensor `info` describes (the offsets are validated by the parser).
    fn tensor(&self, path: &Path, name: &str, info: &TensorInfo) -> std::io::Result<Tensor> {
        let dtype = from_safetensors(info.dtype).ok_or_else(|| {
            invalid(
                path,
                format!(
                    "tensor {name:?} has dtype {:?}, which nx does not have",
                    info.dtype
                ),
            )
        })?;
        let (s, e) = info.data_offsets;
        let bytes = self
            .bytes
            .get(self.data_start + s..self.data_start + e)
            .ok_or_else(|| invalid(path, format!("tensor {name:?} lies outside the file")))?;
        if bytes.len() != info.shape.iter().product::<usize>() * dtype.size_in_bytes() {
            return Err(invalid(
                path,
                format!("tensor {name:?}: its byte range does not match its shape and dtype"),
            ));
        }
        crate::with_dtype!(dtype, T => decode::<T>(bytes, &info.shape)).ok_or_else(|| {
            invalid(
                path,
                format!("tensor {name:?} holds a byte that is no bool"),
            )
        })
    }
}

/// Reads a checkpoint written by [`save`] (or by any safetensors writer)
/// into a tree of `template`'s structure: each leaf is the file's tensor
/// named by the leaf's path ([`Ptree::leaf_paths`]). Tensors in the file that
/// no leaf names are ignored; `#[ptree(ignore)]` fields are taken from the
/// template. An empty, truncated or corrupt file is an `InvalidData` error
/// (a missing file the I/O error), never a tensor.
///
/// Panics, naming the leaf's path, when the file has no tensor of that name,
/// or one whose shape or dtype differs from the template's leaf.
///
/// ```
/// use nx::{DType, Tensor};
/// let path = std::env::temp_dir().join(format!("nx_doc_load_{}.safetensors", std::process::id()));
/// let params = (Tensor::from_slice(&[1.0f32, 2.0], &[2]), vec![Tensor::scalar(7i64)]);
/// nx::save(&params, &path).unwrap();
/// let template = (Tensor::zeros(&[2], DType::F32), vec![Tensor::zeros(&[], DType::I64)]);
/// let back = nx::load(&path, &template).unwrap();
/// assert_eq!(back.0.to_vec::<f32>(), vec![1.0, 2.0]);
/// assert_eq!(back.1[0].item::<i64>(), 7);
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn load<P: Ptree>(path: impl AsRef<Path>, template: &P) -> std::io::Result<P> {
    let path = path.as_ref();
    let file = File::read(path)?;
    let names = template.leaf_paths();
    let leaves = template.leaves();
    if names.len() != leaves.len() {
        panic!(
            "load: the template names {} leaves but has {} (its visit_paths disagrees with for_each_leaf)",
            names.len(),
            leaves.len()
        );
    }
    let mut out = Vec::with_capacity(leaves.len());
    for (name, leaf) in names.iter().zip(&leaves) {
        let Some(info) = file.meta.info(name) else {
            panic!(
                "load: leaf {name:?}: {} has no tensor of that name (template shape {:?}, dtype {})",
                path.display(),
                leaf.shape(),
                leaf.dtype()
            );
        };
        let t = file.tensor(path, name, info)?;
        if t.dtype() != leaf.dtype() {
            panic!(
                "load: leaf {name:?}: the template's dtype is {} but {} holds {}",
                leaf.dtype(),
                path.display(),
                t.dtype()
            );
        }
        if t.shape() != leaf.shape() {
            panic!(
                "load: leaf {name:?}: the template's shape is {:?} but {} holds shape {:?}",
                leaf.shape(),
                path.display(),
                t.shape()
            );
        }
        out.push(t);
    }
    Ok(template.with_leaves(&out))
}

/// Reads every tensor of a safetensors file (written by [`save`], PyTorch,
/// JAX or any other writer) as a flat [`Tree::Dict`] keyed by the stored
/// names (a dotted name stays one key), in the order of the tensors' data in
/// the file; `__metadata__` is not part of it. Dtypes nx lacks (8-bit
/// floats, complex) and empty, truncated or corrupt files are `InvalidData`
/// errors (a missing file the I/O error), never a tensor.
///
/// ```
/// use nx::Tensor;
/// let path = std::env::temp_dir().join(format!("nx_doc_load_tree_{}.safetensors", std::process::id()));
/// nx::save(&vec![Tensor::scalar(1.5f64)], &path).unwrap();
/// let tree = nx::load_tree(&path).unwrap();
/// assert_eq!(tree.get("0").unwrap().as_tensor().unwrap().item::<f64>(), 1.5);
/// std::fs::write(&path, b"not a checkpoint").unwrap();
/// assert!(nx::load_tree(&path).is_err());
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn load_tree(path: impl AsRef<Path>) -> std::io::Result<Tree> {
    let path = path.as_ref();
    let file = File::read(path)?;
    let mut entries = Vec::new();
    for name in file.meta.offset_keys() {
        let info = file
            .meta
            .info(&name)
            .ok_or_else(|| invalid(path, format!("tensor {name:?} has no entry")))?;
        let t = file.tensor(path, &name, info)?;
        entries.push((name, Tree::Tensor(t)));
    }
    Ok(Tree::Dict(entries))
}
