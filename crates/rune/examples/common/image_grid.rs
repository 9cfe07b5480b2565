//! A picture of labelled grey images: an SVG whose cells are small PNGs
//! (drawn pixelated, so each pixel stays a sharp square) with a caption
//! under each, green when the prediction is right and red when wrong. The
//! PNG encoder is a few lines over flate2's zlib stream and CRC-32.
#![allow(dead_code)] // each example uses a subset

use std::io::Write;
use std::path::Path;

/// An 8-bit greyscale PNG of `width` x `height` pixels (row-major,
/// 0 black .. 255 white).
pub fn png_gray(width: usize, height: usize, pixels: &[u8]) -> Vec<u8> {
    assert_eq!(pixels.len(), width * height, "png_gray: pixel count");
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut crc = flate2::Crc::new();
        crc.update(kind);
        crc.update(data);
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&crc.sum().to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&(width as u32).to_be_bytes());
    ihdr.extend_from_slice(&(height as u32).to_be_bytes());
    ihdr.extend_from_slice(&[8, 0, 0, 0, 0]); // 8 bits, greyscale, deflate, no filter, no interlace
    chunk(&mut out, b"IHDR", &ihdr);
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    for row in pixels.chunks(width) {
        z.write_all(&[0]).unwrap(); // filter: none
        z.write_all(row).unwrap();
    }
    chunk(&mut out, b"IDAT", &z.finish().unwrap());
    chunk(&mut out, b"IEND", &[]);
    out
}

/// Standard base64 (with padding).
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for k in 0..4 {
            if k <= c.len() {
                s.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// One cell of the grid: an image (`side` x `side` intensities in [0, 1],
/// 1 = ink, drawn dark on white), its caption, and whether it is right.
pub struct Cell<'a> {
    pub ink: &'a [f32],
    pub caption: String,
    pub right: bool,
}

/// Writes the cells as an SVG grid, `cols` wide, each image `zoom` screen
/// pixels per image pixel, under a title line.
pub fn write_svg(
    path: &Path,
    title: &str,
    side: usize,
    zoom: usize,
    cols: usize,
    cells: &[Cell],
) -> std::io::Result<()> {
    let escape = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let img = side * zoom;
    let (cell_w, cell_h) = (img.max(96) + 12, img + 34);
    let rows = cells.len().div_ceil(cols);
    let (w, h) = (cols * cell_w, rows * cell_h + 30);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" \
         font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"6\" y=\"20\" font-size=\"15\">{}</text>\n",
        escape(title)
    );
    for (k, c) in cells.iter().enumerate() {
        let (x, y) = ((k % cols) * cell_w, (k / cols) * cell_h + 30);
        let grey: Vec<u8> = c
            .ink
            .iter()
            .map(|&v| (255.0 * (1.0 - v.clamp(0.0, 1.0))).round() as u8)
            .collect();
        let data = base64(&png_gray(side, side, &grey));
        let color = if c.right { "#00963c" } else { "#dc1e1e" };
        s += &format!(
            "<image x=\"{}\" y=\"{y}\" width=\"{img}\" height=\"{img}\" style=\"image-rendering:pixelated\" \
             href=\"data:image/png;base64,{data}\"/>\n\
             <rect x=\"{}\" y=\"{y}\" width=\"{img}\" height=\"{img}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n\
             <text x=\"{}\" y=\"{}\" font-size=\"12\" text-anchor=\"middle\" fill=\"{color}\">{}</text>\n",
            x + (cell_w - img) / 2,
            x + (cell_w - img) / 2,
            x + cell_w / 2,
            y + img + 16,
            escape(&c.caption)
        );
    }
    s += "</svg>\n";
    std::fs::write(path, s)
}
