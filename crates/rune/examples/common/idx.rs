//! IDX files (the format of MNIST and Fashion-MNIST), gzipped or not, and
//! the Fashion-MNIST data set read from them.
//!
//! An IDX file is a header — two zero bytes, a type code (`0x08`: unsigned
//! bytes), the number of dimensions — then each dimension as a big-endian
//! `u32`, then the elements in row-major order. Only `u8` elements are read
//! (what MNIST-style data sets hold). A file that starts with gzip's magic
//! bytes (`1f 8b`) is decompressed first, whatever its name.
//!
//! Every failure is an [`IdxError`] naming the file and what is wrong with
//! it (missing, unreadable, not gzip after all, truncated, wrong magic,
//! another element type, extra bytes after the data); nothing here panics
//! on a file's contents.
#![allow(dead_code)] // each example uses a subset

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// IDX's type code of unsigned bytes.
pub const U8: u8 = 0x08;

/// An IDX array of bytes: its dimensions and its elements in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct Idx {
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

/// Why a file could not be read as IDX (or a data set from IDX files).
#[derive(Debug)]
pub struct IdxError {
    /// The file (or, for a data set, the directory) concerned.
    pub path: PathBuf,
    /// What is wrong, in words.
    pub problem: String,
}

impl fmt::Display for IdxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.problem)
    }
}

impl std::error::Error for IdxError {}

fn err(path: &Path, problem: impl Into<String>) -> IdxError {
    IdxError {
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

/// A file's bytes, gunzipped when they start with gzip's magic bytes.
pub fn read_maybe_gz(path: &Path) -> Result<Vec<u8>, IdxError> {
    let raw = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => err(path, "no such file"),
        _ => err(path, format!("cannot read it: {e}")),
    })?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| {
                err(
                    path,
                    format!("starts like gzip but does not decompress: {e}"),
                )
            })?;
        Ok(out)
    } else {
        Ok(raw)
    }
}

/// Parses IDX bytes; `path` only names the file in errors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Idx, IdxError> {
    if bytes.len() < 4 {
        return Err(err(
            path,
            format!(
                "truncated: {} bytes, shorter than IDX's 4-byte magic number",
                bytes.len()
            ),
        ));
    }
    if bytes[0] != 0 || bytes[1] != 0 {
        return Err(err(
            path,
            format!(
                "not an IDX file: its magic number {:02x} {:02x} {:02x} {:02x} does not start with two zero bytes",
                bytes[0], bytes[1], bytes[2], bytes[3]
            ),
        ));
    }
    if bytes[2] != U8 {
        let name = match bytes[2] {
            0x09 => "i8",
            0x0b => "i16",
            0x0c => "i32",
            0x0d => "f32",
            0x0e => "f64",
            _ => "an unknown type",
        };
        return Err(err(
            path,
            format!(
                "elements of type code 0x{:02x} ({name}); only unsigned bytes (0x08) are read",
                bytes[2]
            ),
        ));
    }
    let rank = bytes[3] as usize;
    if rank == 0 {
        return Err(err(
            path,
            "an IDX array of 0 dimensions; at least 1 expected",
        ));
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(err(
            path,
            format!(
                "truncated header: {rank} dimensions need {header} bytes, the file has {}",
                bytes.len()
            ),
        ));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .collect();
    let numel = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            err(
                path,
                format!("dimensions {dims:?} overflow the address space"),
            )
        })?;
    let have = bytes.len() - header;
    if have < numel {
        return Err(err(
            path,
            format!(
                "truncated: dimensions {dims:?} need {numel} bytes of data, the file has {have}"
            ),
        ));
    }
    if have > numel {
        return Err(err(
            path,
            format!(
                "{} bytes after the data of dimensions {dims:?} (a corrupted or concatenated file)",
                have - numel
            ),
        ));
    }
    Ok(Idx {
        dims,
        data: bytes[header..].to_vec(),
    })
}

/// Reads an IDX file of bytes, gzipped or not.
pub fn read(path: &Path) -> Result<Idx, IdxError> {
    parse(&read_maybe_gz(path)?, path)
}

/// Writes `data` with dimensions `dims` as an IDX file of bytes (gzipped
/// when `gz`): what the tests use to make their files.
pub fn write(path: &Path, dims: &[usize], data: &[u8], gz: bool) -> std::io::Result<()> {
    let mut bytes = vec![0, 0, U8, dims.len() as u8];
    for &d in dims {
        bytes.extend_from_slice(&(d as u32).to_be_bytes());
    }
    bytes.extend_from_slice(data);
    if gz {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&bytes)?;
        bytes = enc.finish()?;
    }
    std::fs::write(path, bytes)
}

/// Where Debian's package `dataset-fashion-mnist` installs the data set.
pub const FASHION_DEBIAN_DIR: &str = "/usr/share/datasets/fashion-mnist";

/// The ten classes of Fashion-MNIST, by label.
pub const FASHION_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// An MNIST-style data set: images `[n, rows, cols]` as bytes, labels as
/// bytes, for the training and the test split.
#[derive(Debug)]
pub struct ImageSet {
    pub train_images: Idx,
    pub train_labels: Idx,
    pub test_images: Idx,
    pub test_labels: Idx,
}

impl ImageSet {
    /// The side of the (square) images.
    pub fn side(&self) -> usize {
        self.train_images.dims[1]
    }
}

/// The file `stem` in `dir`: `stem.gz` if present, else `stem`.
fn find(dir: &Path, stem: &str) -> Option<PathBuf> {
    [format!("{stem}.gz"), stem.to_string()]
        .into_iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
}

/// Reads the four IDX files of an MNIST-style data set from `dir`
/// (`train-images-idx3-ubyte[.gz]`, `train-labels-idx1-ubyte[.gz]`,
/// `t10k-images-idx3-ubyte[.gz]`, `t10k-labels-idx1-ubyte[.gz]`) and checks
/// that they fit together: images of rank 3 with one label (0..=9) each,
/// the same image size in both splits.
pub fn read_image_set(dir: &Path) -> Result<ImageSet, IdxError> {
    let names = [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ];
    let mut paths = Vec::with_capacity(4);
    for stem in names {
        let path = find(dir, stem).ok_or_else(|| {
            err(
                dir,
                format!("no {stem}.gz or {stem} in this directory (an MNIST-style data set's four IDX files)"),
            )
        })?;
        paths.push(path);
    }
    let [ti, tl, vi, vl] = [0, 1, 2, 3].map(|i| read(&paths[i]));
    let (ti, tl, vi, vl) = (ti?, tl?, vi?, vl?);
    for (images, labels, ip, lp) in [
        (&ti, &tl, &paths[0], &paths[1]),
        (&vi, &vl, &paths[2], &paths[3]),
    ] {
        if images.dims.len() != 3 {
            return Err(err(
                ip,
                format!(
                    "images of dimensions {:?}; [n, rows, cols] expected",
                    images.dims
                ),
            ));
        }
        if labels.dims.len() != 1 || labels.dims[0] != images.dims[0] {
            return Err(err(
                lp,
                format!(
                    "labels of dimensions {:?} for {} images in {}",
                    labels.dims,
                    images.dims[0],
                    ip.display()
                ),
            ));
        }
        if let Some(i) = labels.data.iter().position(|&l| l > 9) {
            return Err(err(
                lp,
                format!(
                    "label {} of example {i} is not a class 0..=9",
                    labels.data[i]
                ),
            ));
        }
    }
    if ti.dims[1..] != vi.dims[1..] || ti.dims[1] != ti.dims[2] {
        return Err(err(
            dir,
            format!(
                "training images {:?} and test images {:?}: square images of one size expected",
                ti.dims, vi.dims
            ),
        ));
    }
    Ok(ImageSet {
        train_images: ti,
        train_labels: tl,
        test_images: vi,
        test_labels: vl,
    })
}

/// Fashion-MNIST from `dir`, else from where Debian's package puts it; a
/// missing data set is an error telling how to get it.
pub fn read_fashion_mnist(dir: Option<&Path>) -> Result<ImageSet, IdxError> {
    let dir = dir.unwrap_or(Path::new(FASHION_DEBIAN_DIR));
    if !dir.is_dir() {
        return Err(err(
            dir,
            "no such directory: Fashion-MNIST is not installed here. Install Debian's package \
             (`apt-get install dataset-fashion-mnist`, which puts it in /usr/share/datasets/fashion-mnist), \
             or download the four files from https://github.com/zalandoresearch/fashion-mnist \
             (data/fashion) into a directory and pass it as --data DIR",
        ));
    }
    read_image_set(dir)
}
