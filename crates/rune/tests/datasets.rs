//! The examples' data readers (`examples/common/`): the IDX reader on small
//! files this test writes (valid, gzipped, truncated, wrong magic, another
//! element type, trailing bytes, missing, corrupted gzip; an MNIST-style
//! directory whose files do not fit together), the shipped UCI digits and
//! their fixed split, and the PNG/base64 encoders of the pictures.

use std::path::{Path, PathBuf};

#[path = "../examples/common/digits.rs"]
#[allow(dead_code)]
mod digits;
#[path = "../examples/common/idx.rs"]
mod idx;
#[path = "../examples/common/image_grid.rs"]
mod image_grid;
#[path = "../../nx/tests/common/skip.rs"]
mod skip;

/// A fresh directory of this test's own under the temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rune-datasets-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The error of reading `path`, which must be an error naming the file.
fn read_err(path: &Path) -> String {
    let e = idx::read(path).expect_err("an invalid file was read");
    assert_eq!(e.path, path);
    let msg = e.to_string();
    assert!(
        msg.starts_with(&path.display().to_string()),
        "the message does not name the file: {msg}"
    );
    msg
}

#[test]
fn idx_reads_what_it_writes_plain_and_gzipped() {
    let dir = scratch("valid");
    let data: Vec<u8> = (0..24).map(|i| (i * 11 % 256) as u8).collect();
    for gz in [false, true] {
        let path = dir.join(if gz { "a.gz" } else { "a" });
        idx::write(&path, &[2, 3, 4], &data, gz).unwrap();
        let raw = std::fs::read(&path).unwrap();
        if gz {
            assert_eq!(&raw[..2], &[0x1f, 0x8b]);
        } else {
            // the header as the format spells it: magic 0 0 8 3, then big-endian dims
            assert_eq!(
                &raw[..16],
                &[0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4]
            );
            assert_eq!(raw.len(), 16 + 24);
        }
        let got = idx::read(&path).unwrap();
        assert_eq!(got.dims, vec![2, 3, 4]);
        assert_eq!(got.data, data);
    }
    // gzip is recognized by its bytes, not the name
    let path = dir.join("plain.gz");
    idx::write(&path, &[5], &[1, 2, 3, 4, 5], false).unwrap();
    assert_eq!(idx::read(&path).unwrap().data, vec![1, 2, 3, 4, 5]);
    // a dimension of size 0 holds no data
    let path = dir.join("empty");
    idx::write(&path, &[0, 28, 28], &[], true).unwrap();
    assert_eq!(idx::read(&path).unwrap().dims, vec![0, 28, 28]);
}

#[test]
fn idx_errors_name_the_file_and_the_problem() {
    let dir = scratch("invalid");
    let put = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };

    let msg = read_err(&dir.join("nowhere-idx1-ubyte"));
    assert!(msg.ends_with("no such file"), "{msg}");

    let msg = read_err(&put("empty", &[]));
    assert!(msg.contains("truncated: 0 bytes"), "{msg}");

    let msg = read_err(&put("short", &[0, 0, 8]));
    assert!(msg.contains("truncated: 3 bytes"), "{msg}");

    let msg = read_err(&put("magic", &[0x50, 0x4b, 3, 4, 0, 0, 0, 1, 7]));
    assert!(
        msg.contains("not an IDX file") && msg.contains("50 4b 03 04"),
        "{msg}"
    );

    let msg = read_err(&put("f32", &[0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0]));
    assert!(
        msg.contains("type code 0x0d (f32)") && msg.contains("only unsigned bytes"),
        "{msg}"
    );

    let msg = read_err(&put("rank0", &[0, 0, 8, 0]));
    assert!(msg.contains("0 dimensions"), "{msg}");

    let msg = read_err(&put("header", &[0, 0, 8, 3, 0, 0, 0, 2, 0, 0]));
    assert!(
        msg.contains("truncated header: 3 dimensions need 16 bytes, the file has 10"),
        "{msg}"
    );

    let msg = read_err(&put(
        "data",
        &[0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5],
    ));
    assert!(
        msg.contains("truncated: dimensions [2, 3] need 6 bytes of data, the file has 5"),
        "{msg}"
    );

    let msg = read_err(&put("trailing", &[0, 0, 8, 1, 0, 0, 0, 2, 1, 2, 3]));
    assert!(
        msg.contains("1 bytes after the data of dimensions [2]"),
        "{msg}"
    );

    let msg = read_err(&put(
        "huge",
        &[
            0, 0, 8, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255,
        ],
    ));
    assert!(
        msg.contains("truncated") || msg.contains("overflow"),
        "{msg}"
    );

    // a gzip stream cut short, and one whose content is truncated IDX
    let full = dir.join("full.gz");
    idx::write(&full, &[100], &[7; 100], true).unwrap();
    let gz = std::fs::read(&full).unwrap();
    let msg = read_err(&put("cut.gz", &gz[..gz.len() / 2]));
    assert!(
        msg.contains("starts like gzip but does not decompress"),
        "{msg}"
    );
    let cut = dir.join("cut-idx.gz");
    idx::write(&cut, &[100], &[7; 100], true).unwrap(); // valid
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, &[0, 0, 8, 1, 0, 0, 0, 100, 7, 7]).unwrap();
    std::fs::write(&cut, enc.finish().unwrap()).unwrap();
    let msg = read_err(&cut);
    assert!(
        msg.contains("need 100 bytes of data, the file has 2"),
        "{msg}"
    );

    // a directory is not a file
    let e = idx::read(&dir).unwrap_err();
    assert!(e.to_string().contains("cannot read it"), "{e}");
}

/// Writes an MNIST-style directory: `n` training and `m` test images of
/// 4x4, labels `i % 10`, the training files gzipped, the test files not.
fn image_dir(name: &str, n: usize, m: usize) -> PathBuf {
    let dir = scratch(name);
    for (prefix, count, gz) in [("train", n, true), ("t10k", m, false)] {
        let images: Vec<u8> = (0..count * 16).map(|i| (i % 251) as u8).collect();
        let labels: Vec<u8> = (0..count).map(|i| (i % 10) as u8).collect();
        let ext = if gz { ".gz" } else { "" };
        idx::write(
            &dir.join(format!("{prefix}-images-idx3-ubyte{ext}")),
            &[count, 4, 4],
            &images,
            gz,
        )
        .unwrap();
        idx::write(
            &dir.join(format!("{prefix}-labels-idx1-ubyte{ext}")),
            &[count],
            &labels,
            gz,
        )
        .unwrap();
    }
    dir
}

#[test]
fn image_sets_are_read_and_checked_as_a_whole() {
    let dir = image_dir("set", 12, 5);
    let set = idx::read_image_set(&dir).unwrap();
    assert_eq!(set.side(), 4);
    assert_eq!(set.train_images.dims, vec![12, 4, 4]);
    assert_eq!(set.test_labels.data, vec![0, 1, 2, 3, 4]);
    assert_eq!(set.train_images.data[17], 17);
    let set = idx::read_fashion_mnist(Some(&dir)).unwrap();
    assert_eq!(set.test_images.dims, vec![5, 4, 4]);

    // labels that do not match the images
    let labels = dir.join("t10k-labels-idx1-ubyte");
    idx::write(&labels, &[4], &[0, 1, 2, 3], false).unwrap();
    let e = idx::read_image_set(&dir).unwrap_err();
    assert_eq!(e.path, labels);
    assert!(
        e.to_string()
            .contains("labels of dimensions [4] for 5 images"),
        "{e}"
    );
    // a label that is no class
    idx::write(&labels, &[5], &[0, 1, 12, 3, 4], false).unwrap();
    let e = idx::read_image_set(&dir).unwrap_err();
    assert!(
        e.to_string()
            .contains("label 12 of example 2 is not a class"),
        "{e}"
    );
    // a missing file names the directory and the file
    std::fs::remove_file(&labels).unwrap();
    let e = idx::read_image_set(&dir).unwrap_err();
    assert_eq!(e.path, dir);
    assert!(
        e.to_string()
            .contains("no t10k-labels-idx1-ubyte.gz or t10k-labels-idx1-ubyte"),
        "{e}"
    );
    // a file that is there but broken: its own error
    std::fs::write(&labels, [0, 0, 8, 1, 0, 0, 0, 5, 1]).unwrap();
    let e = idx::read_image_set(&dir).unwrap_err();
    assert_eq!(e.path, labels);
    assert!(e.to_string().contains("truncated"), "{e}");

    // a missing data set says how to get it
    let nowhere = dir.join("not-here");
    let e = idx::read_fashion_mnist(Some(&nowhere)).unwrap_err();
    assert_eq!(e.path, nowhere);
    let msg = e.to_string();
    assert!(
        msg.contains("apt-get install dataset-fashion-mnist") && msg.contains("--data DIR"),
        "{msg}"
    );
}

#[test]
fn the_shipped_digits_and_their_split() {
    let d = digits::load().unwrap();
    assert_eq!(d.len(), 1797);
    assert_eq!(d.pixels.len(), 1797 * 64);
    // the first digit of scikit-learn's file, a 0
    assert_eq!(
        &d.pixels[..16],
        &[0, 0, 5, 13, 9, 1, 0, 0, 0, 0, 13, 15, 10, 15, 5, 0]
    );
    assert_eq!(d.labels[..4], [0, 1, 2, 3]);
    let mut counts = [0; 10];
    for &l in &d.labels {
        counts[l as usize] += 1;
    }
    assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
    assert_eq!(d.pixels.iter().max(), Some(&16));

    let (train, held_out) = digits::split(d.len());
    assert_eq!((train.len(), held_out.len()), (1437, 360));
    let mut all: Vec<usize> = train.iter().chain(&held_out).copied().collect();
    all.sort();
    assert!(
        all.iter().copied().eq(0..1797),
        "the split is not a partition"
    );
    assert_eq!(
        digits::split(d.len()),
        (train.clone(), held_out.clone()),
        "not fixed"
    );
    // every class is held out
    let mut held = [0; 10];
    for &i in &held_out {
        held[d.labels[i] as usize] += 1;
    }
    assert!(held.iter().all(|&c| c >= 20), "{held:?}");

    let (x, y) = digits::tensors(&d, &held_out[..3]);
    assert_eq!(x.shape(), &[3, 64]);
    let xs = x.to_vec::<f32>();
    assert_eq!(xs[5], d.pixels[held_out[0] * 64 + 5] as f32 / 16.0);
    assert_eq!(y.to_vec::<i32>()[2], d.labels[held_out[2]] as i32);
}

#[test]
fn digits_csv_errors_name_the_line() {
    let row = |label: &str| format!("{}{label}\n", "0,".repeat(64));
    assert_eq!(
        digits::parse_csv(&(row("3") + &row("9"))).unwrap().labels,
        vec![3, 9]
    );
    let e = digits::parse_csv(&(row("3") + "1,2,3\n")).err().unwrap();
    assert_eq!(e, "line 2: 3 fields, 65 expected (64 pixels and a label)");
    let e = digits::parse_csv(&row("10")).err().unwrap();
    assert_eq!(e, "line 1, field 65: 10 is not an integer in 0..=9");
    let e = digits::parse_csv(&row("x")).err().unwrap();
    assert_eq!(e, "line 1, field 65: \"x\" is not a number");
    let e = digits::parse_csv(&format!("17,{}", row("1")[2..].to_string()))
        .err()
        .unwrap();
    assert_eq!(e, "line 1, field 1: 17 is not an integer in 0..=16");
}

#[test]
fn png_and_base64_encoders() {
    assert_eq!(image_grid::base64(b""), "");
    assert_eq!(image_grid::base64(b"f"), "Zg==");
    assert_eq!(image_grid::base64(b"fo"), "Zm8=");
    assert_eq!(image_grid::base64(b"foobar"), "Zm9vYmFy");
    assert_eq!(image_grid::base64(&[0xff, 0xfe, 0x00]), "//4A");

    let pixels: Vec<u8> = (0..12).map(|i| i * 20).collect();
    let png = image_grid::png_gray(4, 3, &pixels);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    // walk the chunks, checking each CRC; inflate IDAT
    let (mut pos, mut kinds, mut idat) = (8, vec![], vec![]);
    while pos < png.len() {
        let n = u32::from_be_bytes(png[pos..pos + 4].try_into().unwrap()) as usize;
        let (kind, data) = (&png[pos + 4..pos + 8], &png[pos + 8..pos + 8 + n]);
        let mut crc = flate2::Crc::new();
        crc.update(&png[pos + 4..pos + 8 + n]);
        assert_eq!(crc.sum().to_be_bytes(), png[pos + 8 + n..pos + 12 + n]);
        if kind == b"IHDR" {
            assert_eq!(data, &[0, 0, 0, 4, 0, 0, 0, 3, 8, 0, 0, 0, 0]);
        }
        if kind == b"IDAT" {
            idat.extend_from_slice(data);
        }
        kinds.push(String::from_utf8(kind.to_vec()).unwrap());
        pos += 12 + n;
    }
    assert_eq!(kinds, ["IHDR", "IDAT", "IEND"]);
    let mut raw = vec![];
    std::io::Read::read_to_end(&mut flate2::read::ZlibDecoder::new(&idat[..]), &mut raw).unwrap();
    let expect: Vec<u8> = pixels
        .chunks(4)
        .flat_map(|r| std::iter::once(0).chain(r.iter().copied()))
        .collect();
    assert_eq!(raw, expect);
}

/// The real Fashion-MNIST where Debian's `dataset-fashion-mnist` installs it
/// (`.ci/run` installs the package): the reader on the published files.
#[test]
fn fashion_mnist_as_debian_installs_it() {
    let dir = Path::new(idx::FASHION_DEBIAN_DIR);
    if !dir.is_dir() {
        skip::skip(
            "fashion-mnist",
            &format!(
                "{} missing (apt-get install dataset-fashion-mnist)",
                dir.display()
            ),
        );
        return;
    }
    let set = idx::read_fashion_mnist(None).unwrap();
    assert_eq!(set.train_images.dims, vec![60000, 28, 28]);
    assert_eq!(set.test_images.dims, vec![10000, 28, 28]);
    assert_eq!(set.side(), 28);
    assert_eq!(set.train_labels.data[..10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]);
    assert_eq!(set.test_labels.data[..10], [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]);
    for (labels, per_class) in [(&set.train_labels, 6000), (&set.test_labels, 1000)] {
        let mut counts = [0; 10];
        for &l in &labels.data {
            counts[l as usize] += 1;
        }
        assert_eq!(counts, [per_class; 10]);
    }
    // the first training image (an ankle boot): its ink, summed
    let ink: u32 = set.train_images.data[..784].iter().map(|&p| p as u32).sum();
    assert_eq!(ink, 76247);
    let ink: u32 = set.test_images.data[..784].iter().map(|&p| p as u32).sum();
    assert_eq!(ink, 33456);
}
