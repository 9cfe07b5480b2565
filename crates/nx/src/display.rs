//! Printing: `Display` for `Tensor`, after numpy's `repr` with its default
//! print options.
//!
//! The format is `tensor(<elements>, shape=<shape>, dtype=<dtype>)`:
//!
//! ```text
//! tensor([[1. , 2.5],
//!         [3. , 4. ]], shape=[2, 2], dtype=f32)
//! tensor(7, shape=[], dtype=i64)
//! tensor([], shape=[0, 3], dtype=f32)
//! tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i32)
//! ```
//!
//! - Elements sit in nested brackets, one bracket per axis; rows of the last
//!   axis are separated by `,\n`, blocks of higher axes by extra blank lines.
//!   Lines wrap at 75 characters as numpy's do.
//! - Every element is padded to one width so that columns line up.
//! - Floats (f16 and bf16 too) are numpy's `maxprec` format: the shortest
//!   decimal that reads back as the same value of the tensor's dtype, at most
//!   8 fractional digits, trailing zeros dropped (`1.`, `0.5`, `-0.25`), the
//!   fractional parts padded with spaces. Scientific notation (`1.5e-05`, with
//!   zero-padded mantissas) is used when the largest nonzero magnitude is
//!   `>= 1e8`, the smallest is `< 1e-4`, or their ratio exceeds 1000.
//!   `nan`, `inf`, `-inf` are printed as such.
//! - Integers print plainly, right-aligned; booleans as `true`/`false`,
//!   `true` padded to the width of `false` as numpy does.
//! - A tensor of more than 1000 elements shows only the first and last 3
//!   entries of every axis longer than 6, with `...` for the rest; the widths
//!   come from the entries shown.
//! - A 0-d tensor shows its value; an empty one shows `[]`.
//! - A traced tensor prints its `Debug` form (`Traced<f32>[2, 3]`): its data
//!   cannot be read, and printing never panics.

use crate::dtype::{DType, Element};
use crate::tensor::Tensor;
use std::fmt;

/// numpy's `threshold`: more elements than this are summarized.
const THRESHOLD: usize = 1000;
/// numpy's `edgeitems`: entries kept at each end of a summarized axis.
const EDGE: usize = 3;
/// numpy's `linewidth`.
const LINE_WIDTH: usize = 75;
/// numpy's float `precision`: at most this many fractional digits.
const PRECISION: usize = 8;
const PREFIX: &str = "tensor(";

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_traced() {
            return write!(f, "{self:?}");
        }
        write!(
            f,
            "{PREFIX}{}, shape={:?}, dtype={})",
            format_elements(self),
            self.shape(),
            self.dtype()
        )
    }
}

/// The bracketed elements of a concrete tensor.
fn format_elements(x: &Tensor) -> String {
    let shape = x.shape();
    if x.numel() == 0 {
        return "[]".into();
    }
    let summarize = x.numel() > THRESHOLD;
    // The indices shown along each axis, and whether `...` goes in the middle.
    let elided: Vec<bool> = shape.iter().map(|&n| summarize && n > 2 * EDGE).collect();
    let kept: Vec<Vec<usize>> = shape
        .iter()
        .zip(&elided)
        .map(|(&n, &e)| {
            if e {
                (0..EDGE).chain(n - EDGE..n).collect()
            } else {
                (0..n).collect()
            }
        })
        .collect();
    let positions = shown_positions(shape, &kept);
    let cells = crate::with_any_dtype!(x.dtype(), T => {
        let data = x.to_vec::<T>();
        format_cells(positions.iter().map(|&i| data[i]), x.dtype())
    });
    let kept_shape: Vec<usize> = kept.iter().map(Vec::len).collect();
    let grid = Grid {
        cells: &cells,
        shape: &kept_shape,
        strides: crate::shape::contiguous_strides(&kept_shape),
        elided: &elided,
    };
    if shape.is_empty() {
        return cells[0].trim_start().to_string();
    }
    let hanging = " ".repeat(1 + PREFIX.len());
    // numpy's repr reserves one column for the "," that follows.
    grid.format(0, 0, &hanging, LINE_WIDTH - 1)
}

/// Row-major offsets, in the contiguous data of `shape`, of the shown entries.
fn shown_positions(shape: &[usize], kept: &[Vec<usize>]) -> Vec<usize> {
    let strides = crate::shape::contiguous_strides(shape);
    let mut out = vec![0usize];
    for (axis, idx) in kept.iter().enumerate() {
        let st = strides[axis] as usize;
        out = out
            .iter()
            .flat_map(|&base| idx.iter().map(move |&i| base + i * st))
            .collect();
    }
    out
}

/// Formats the shown entries, all padded to one width.
fn format_cells<T: Element>(vals: impl Iterator<Item = T>, dtype: DType) -> Vec<String> {
    if dtype.is_float() {
        let v: Vec<f64> = vals.map(Element::to_f64).collect();
        return format_floats(&v, dtype);
    }
    if dtype.is_complex() {
        return format_complex(vals.map(Element::to_c128).collect(), dtype.real_dtype());
    }
    let strs: Vec<String> = if dtype == DType::Bool {
        // numpy pads `true` to the width of `false` whatever the values.
        vals.map(|v| format!("{:>5}", v.to_i128() != 0)).collect()
    } else {
        vals.map(|v| v.to_i128().to_string()).collect()
    };
    let w = strs.iter().map(String::len).max().unwrap_or(0);
    strs.into_iter().map(|s| format!("{s:>w$}")).collect()
}

/// numpy's complex cells (`ComplexFloatingFormat`): the real parts formatted
/// together as floats, the imaginary parts together with an explicit sign
/// (formatting their magnitudes and putting the sign before the digits pads
/// alike), and `j` placed before the imaginary part's trailing padding
/// (`1. +2.j  `, `-3.5-4.25j`).
fn format_complex(vals: Vec<crate::Complex<f64>>, part: DType) -> Vec<String> {
    let re: Vec<f64> = vals.iter().map(|v| v.re).collect();
    let im_abs: Vec<f64> = vals.iter().map(|v| v.im.abs()).collect();
    let re = format_floats(&re, part);
    let im = format_floats(&im_abs, part);
    re.iter()
        .zip(&im)
        .zip(&vals)
        .map(|((r, i), v)| {
            let sign = if v.im.is_sign_negative() && !v.im.is_nan() {
                '-'
            } else {
                '+'
            };
            let digits = i.trim();
            let lead = i.len() - i.trim_start().len();
            let trail = i.len() - i.trim_end().len();
            format!(
                "{r}{}{sign}{digits}j{}",
                " ".repeat(lead),
                " ".repeat(trail)
            )
        })
        .collect()
}

/// `v` rounded to the nearest value of `dtype`, as `f64`.
fn in_dtype(v: f64, dtype: DType) -> f64 {
    crate::with_dtype!(dtype, T => T::from_f64(v).to_f64())
}

/// numpy's `FloatingFormat` in `maxprec` mode.
fn format_floats(vals: &[f64], dtype: DType) -> Vec<String> {
    let finite: Vec<f64> = vals.iter().copied().filter(|v| v.is_finite()).collect();
    let nonzero = finite.iter().map(|v| v.abs()).filter(|&v| v != 0.0);
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in nonzero {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    // The thresholds are compared in the dtype's precision, as numpy does.
    let sci = hi > 0.0
        && (hi >= in_dtype(1e8, dtype)
            || lo < in_dtype(1e-4, dtype)
            || in_dtype(hi / lo, dtype) > 1000.0);

    let parts: Vec<Option<(String, String, i32)>> = vals
        .iter()
        .map(|&v| {
            v.is_finite()
                .then(|| split_float(&shortest(v, dtype, sci), sci))
        })
        .collect();
    let fin = || parts.iter().flatten();
    let mut pad_left = fin().map(|p| p.0.len()).max().unwrap_or(0);
    let frac_w = fin().map(|p| p.1.len()).max().unwrap_or(0);
    // Exponent digits (at least 2) for scientific notation.
    let exp_w = fin()
        .map(|p| p.2.unsigned_abs().to_string().len())
        .max()
        .unwrap_or(0)
        .max(2);
    let pad_right = if finite.is_empty() {
        0
    } else if sci {
        frac_w + 2 + exp_w
    } else {
        frac_w
    };
    if finite.len() != vals.len() {
        let neginf = vals.contains(&f64::NEG_INFINITY) as usize;
        pad_left = pad_left.max((3 + neginf).saturating_sub(pad_right + 1));
    }
    let width = pad_left + pad_right + 1;
    vals.iter()
        .zip(&parts)
        .map(|(&v, p)| match p {
            None => {
                let s = if v.is_nan() {
                    "nan"
                } else if v > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                format!("{s:>width$}")
            }
            Some((int, frac, e)) if sci => {
                let sign = if *e < 0 { '-' } else { '+' };
                let e = e.unsigned_abs();
                format!("{int:>pad_left$}.{frac:0<frac_w$}e{sign}{e:0>exp_w$}")
            }
            Some((int, frac, _)) => format!("{int:>pad_left$}.{frac:<frac_w$}"),
        })
        .collect()
}

/// The shortest decimal (positional, or scientific when `sci`) that rounds
/// back to `v` in `dtype`, cut to `PRECISION` fractional digits.
fn shortest(v: f64, dtype: DType, sci: bool) -> String {
    let fixed = |p: usize| {
        if sci {
            format!("{v:.p$e}")
        } else {
            format!("{v:.p$}")
        }
    };
    // Rust's own formatting is shortest-round-trip for f32 and f64.
    let exact = match dtype {
        DType::F64 if sci => Some(format!("{v:e}")),
        DType::F64 => Some(format!("{v}")),
        DType::F32 if sci => Some(format!("{:e}", v as f32)),
        DType::F32 => Some(format!("{}", v as f32)),
        _ => None,
    };
    match exact {
        Some(s) if frac_digits(&s) <= PRECISION => s,
        Some(_) => trim_zeros(&fixed(PRECISION)),
        None => (0..=PRECISION)
            .map(fixed)
            .find(|s| s.parse::<f64>().is_ok_and(|r| in_dtype(r, dtype) == v))
            .unwrap_or_else(|| trim_zeros(&fixed(PRECISION))),
    }
}

/// Number of digits after the point (of the mantissa, in scientific form).
fn frac_digits(s: &str) -> usize {
    let mant = s.split('e').next().unwrap_or("");
    mant.split_once('.').map_or(0, |(_, f)| f.len())
}

/// Drops trailing zeros of the fractional part (of the mantissa).
fn trim_zeros(s: &str) -> String {
    let (mant, exp) = match s.split_once('e') {
        Some((m, e)) => (m, Some(e)),
        None => (s, None),
    };
    let mant = if mant.contains('.') {
        mant.trim_end_matches('0')
    } else {
        mant
    };
    match exp {
        Some(e) => format!("{mant}e{e}"),
        None => mant.to_string(),
    }
}

/// `(integer part with sign, fractional digits, exponent)`.
fn split_float(s: &str, sci: bool) -> (String, String, i32) {
    let (mant, exp) = if sci {
        let (m, e) = s
            .split_once('e')
            .expect("scientific notation has an exponent");
        (m, e.parse::<i32>().expect("a decimal exponent"))
    } else {
        (s, 0)
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    (int.to_string(), frac.trim_end_matches('0').to_string(), exp)
}

/// The shown entries in row-major order and how to lay them out (numpy's
/// `_formatArray`).
struct Grid<'a> {
    cells: &'a [String],
    shape: &'a [usize],
    strides: Vec<isize>,
    elided: &'a [bool],
}

impl Grid<'_> {
    /// The block at `axis` starting at cell `offset`. `hanging` is the indent
    /// of continuation lines; lines stay within `width` columns.
    fn format(&self, axis: usize, offset: usize, hanging: &str, width: usize) -> String {
        if axis == self.shape.len() {
            return self.cells[offset].clone();
        }
        let next_hanging = format!("{hanging} ");
        let next_width = width.saturating_sub(1);
        let len = self.shape[axis];
        let elide = self.elided[axis];
        let leading = if elide { EDGE } else { 0 };
        let stride = self.strides[axis] as usize;
        let item = |i: usize| self.format(axis + 1, offset + i * stride, &next_hanging, next_width);
        let mut s = String::new();
        if axis + 1 == self.shape.len() {
            // The last axis: entries separated by ", ", wrapped to the width.
            let elem_width = width.saturating_sub(1);
            let mut line = hanging.to_string();
            for i in 0..len {
                if elide && i == leading {
                    extend_line(&mut s, &mut line, "...", elem_width, hanging);
                    line.push_str(", ");
                }
                extend_line(&mut s, &mut line, &item(i), elem_width, hanging);
                if i + 1 < len {
                    line.push_str(", ");
                }
            }
            s.push_str(&line);
        } else {
            let sep = format!(",{}", "\n".repeat(self.shape.len() - axis - 1));
            for i in 0..len {
                if elide && i == leading {
                    s.push_str(hanging);
                    s.push_str("...");
                    s.push_str(&sep);
                }
                s.push_str(hanging);
                s.push_str(&item(i));
                if i + 1 < len {
                    s.push_str(&sep);
                }
            }
        }
        format!("[{}]", &s[hanging.len()..])
    }
}

/// Appends `word` to `line`, first moving to a new line (indented by
/// `hanging`) if it would pass `width` and that helps.
fn extend_line(s: &mut String, line: &mut String, word: &str, width: usize, hanging: &str) {
    if line.len() + word.len() > width && line.len() > hanging.len() {
        s.push_str(line.trim_end());
        s.push('\n');
        *line = hanging.to_string();
    }
    line.push_str(word);
}
