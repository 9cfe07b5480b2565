//! `Prim::Conv`: XLA's `conv_general_dilated` in the layouts input
//! `[N, C, spatial...]`, kernel `[O, C / G, spatial...]`, output
//! `[N, O, spatial...]`, as im2col + GEMM.
//!
//! The output of group `g` is the product `W_g [O/G, R] @ col [R, cols]`,
//! where `R = C/G * prod(kernel)` (rows: input channel of the group, then
//! kernel offset) and the columns are output positions `(image, spatial...)`
//! flattened over the whole batch. The columns are cut into blocks (about
//! [`BLOCK_COLS`] each, at least one per thread when the work is large),
//! run across nx's pool; each block's im2col matrix is built in a
//! thread-local scratch that is reused from call to call (chunks of at most
//! [`COL_ELEMS`] elements: a tall `R` is summed chunk by chunk into the
//! output, as the kernel gradient's convolution has it) and multiplied with
//! a one-threaded `gemm` call, the way `dot.rs` calls it. A block inside one
//! image is written straight into the output (row stride = that image's
//! output positions); a block spanning images (small outputs, such as a
//! kernel gradient's) goes through a second scratch of `[O/G, cols]`, then
//! is copied out. Nothing is allocated per call beyond the output and, when
//! the kernel is a view whose `(channel, spatial...)` axes do not merge into
//! one stride, a contiguous copy of it.
//!
//! im2col handles padding (negative entries crop), lhs dilation (a position
//! between dilated input elements reads zero) and rhs dilation; along the
//! last spatial axis, without lhs dilation, each run is a zero head, a
//! strided (or contiguous) copy and a zero tail. When the kernel has more
//! offsets than the output has positions (the kernel gradient's
//! convolution, whose "kernel" is the output cotangent), the matrix is
//! built transposed, column by column (one window per output position,
//! read in long runs), and multiplied by faer (a column-major rhs, which
//! `gemm` packs at half speed: a 3x3 weight gradient over [32, 64, 32, 32],
//! 24 -> 20 CPU-ms).
//!
//! f32 and f64 go to `gemm`; f16 and bf16 are converted to f32, convolved
//! and rounded back.

use super::dot::{faer_matmul, keep_gemm_buffers_mapped, FlushSubnormals, OutPtr};
use super::elementwise::cast;
use super::pool;
use crate::dtype::{DType, Element};
use crate::prim::dilate_size;
use crate::shape::numel;
use crate::storage::Storage;
use crate::tensor::{Tensor, Value};
use std::cell::RefCell;

/// Elements of one block's im2col chunk (1 MiB of f32: it and gemm's packed copy stay in a core's L2).
const COL_ELEMS: usize = 1 << 18;

/// Columns (output positions) of one block.
const BLOCK_COLS: usize = 256;

/// Convolutions with fewer multiply-adds than this run on the calling thread.
const PAR_MACS: usize = 1 << 21;

/// The parameters of one `Prim::Conv`.
pub(crate) struct ConvParams<'a> {
    pub strides: &'a [usize],
    pub padding: &'a [(isize, isize)],
    pub lhs_dilation: &'a [usize],
    pub rhs_dilation: &'a [usize],
    pub feature_group_count: usize,
}

/// A float type `gemm` multiplies, with this thread's reusable scratch.
trait ConvElem: Element + faer::traits::ComplexField + num_traits::One {
    /// Runs `f` on this thread's scratch, grown to at least `len` elements.
    fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [Self]) -> R) -> R;
}

macro_rules! conv_elem {
    ($t:ty, $name:ident) => {
        thread_local! {
            static $name: RefCell<Vec<$t>> = const { RefCell::new(Vec::new()) };
        }
        impl ConvElem for $t {
            fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [Self]) -> R) -> R {
                $name.with(|s| {
                    let mut s = s.borrow_mut();
                    if s.len() < len {
                        s.resize(len, 0.0);
                    }
                    f(&mut s[..len])
                })
            }
        }
    };
}

conv_elem!(f32, SCRATCH_F32);
conv_elem!(f64, SCRATCH_F64);

/// The sizes and index arithmetic of one convolution.
struct Geometry {
    /// Spatial dims.
    nsp: usize,
    o: usize,
    cg: usize,
    og: usize,
    /// Output spatial sizes and their product.
    out_sp: Vec<usize>,
    /// Kernel spatial sizes and their product.
    k_sp: Vec<usize>,
    kprod: usize,
    /// Rows of one group's im2col matrix: `cg * kprod`.
    r: usize,
    /// Sizes of the lhs-dilated input.
    in_dil: Vec<isize>,
    strides: Vec<isize>,
    lo: Vec<isize>,
    ld: Vec<isize>,
    rd: Vec<isize>,
    /// The input's strides (all dims) and offset, in elements.
    xs: Vec<isize>,
    xoff: isize,
}

impl Geometry {
    /// Fills `dst` (length `ub - ua`) with `x[n, c, pos(u)]` for the
    /// flattened indices `u` in `ua..ub` of the index space `ushape`, where
    /// along spatial axis `d` the position in the padded, lhs-dilated input
    /// is `u_d * mu_d + v_d * mv_d - lo_d` (zero outside the input or
    /// between dilated elements). With `u` the output position (`mu` the
    /// strides) and `v` the kernel offset (`mv` the rhs dilation), this is
    /// one im2col row; with the roles swapped, one im2col column.
    ///
    /// Runs along the last axis are a zero head, a strided copy and a zero
    /// tail (no division per element); the outer axes are stepped with a
    /// counter (no division per run).
    #[allow(clippy::too_many_arguments)]
    fn fill_run<T: Element>(
        &self,
        x: &[T],
        n: usize,
        c: usize,
        ushape: &[usize],
        mu: &[isize],
        v: &[usize],
        mv: &[isize],
        ua: usize,
        ub: usize,
        dst: &mut [T],
    ) {
        let zero = T::from_f64(0.0);
        let last = self.nsp - 1;
        let ul = ushape[last];
        let base = self.xoff + n as isize * self.xs[0] + c as isize * self.xs[1];
        // Last axis: position `q * s + kk`.
        let (s, ld, nin, xsl) = (
            mu[last],
            self.ld[last],
            self.in_dil[last],
            self.xs[2 + last],
        );
        let kk = v[last] as isize * mv[last] - self.lo[last];
        let (qlo, qhi) = if ld == 1 {
            let qlo = if kk >= 0 { 0 } else { (-kk + s - 1) / s };
            let qhi = if nin - 1 - kk < 0 {
                0
            } else {
                (nin - 1 - kk) / s + 1
            };
            (qlo, qhi)
        } else {
            (0, 0)
        };
        // The outer axes' index, stepped run by run.
        let mut outer = [0usize; 3];
        let mut rem = ua / ul;
        for d in (0..last).rev() {
            outer[d] = rem % ushape[d];
            rem /= ushape[d];
        }
        let mut q0 = ua % ul;
        let mut u = ua;
        let mut di = 0;
        while u < ub {
            let run = (ub - u).min(ul - q0);
            let out = &mut dst[di..di + run];
            let mut off = Some(base);
            for d in 0..last {
                let i = outer[d] as isize * mu[d] + v[d] as isize * mv[d] - self.lo[d];
                let ldd = self.ld[d];
                if i < 0 || i >= self.in_dil[d] || (ldd != 1 && i % ldd != 0) {
                    off = None;
                    break;
                }
                let e = if ldd == 1 { i } else { i / ldd };
                off = off.map(|o| o + e * self.xs[2 + d]);
            }
            match off {
                None => out.fill(zero),
                Some(off) if ld == 1 => {
                    let run_i = run as isize;
                    let a = (qlo - q0 as isize).clamp(0, run_i) as usize;
                    let b = (qhi - q0 as isize).clamp(a as isize, run_i) as usize;
                    out[..a].fill(zero);
                    out[b..].fill(zero);
                    if b > a {
                        let start = off + ((q0 + a) as isize * s + kk) * xsl;
                        let step = s * xsl;
                        if step == 1 {
                            let start = start as usize;
                            out[a..b].copy_from_slice(&x[start..start + (b - a)]);
                        } else if step == 0 {
                            // A broadcast input (a cotangent of ones).
                            out[a..b].fill(x[start as usize]);
                        } else {
                            for (j, o) in out[a..b].iter_mut().enumerate() {
                                *o = x[(start + j as isize * step) as usize];
                            }
                        }
                    }
                }
                Some(off) => {
                    for (j, o) in out.iter_mut().enumerate() {
                        let i = (q0 + j) as isize * s + kk;
                        *o = if i < 0 || i >= nin || i % ld != 0 {
                            zero
                        } else {
                            x[(off + (i / ld) * xsl) as usize]
                        };
                    }
                }
            }
            u += run;
            di += run;
            q0 = 0;
            for d in (0..last).rev() {
                outer[d] += 1;
                if outer[d] < ushape[d] {
                    break;
                }
                outer[d] = 0;
            }
        }
    }
}

fn conv_gemm<T: ConvElem>(x: &Value, w: &Value, prm: &ConvParams<'_>) -> Tensor {
    keep_gemm_buffers_mapped();
    let (xsh, wsh) = (&x.layout.shape, &w.layout.shape);
    let nsp = xsh.len() - 2;
    let (n, c, o) = (xsh[0], xsh[1], wsh[0]);
    let groups = prm.feature_group_count;
    let (cg, og) = (c / groups, o / groups);
    let k_sp: Vec<usize> = wsh[2..].to_vec();
    let out_sp: Vec<usize> = (0..nsp)
        .map(|d| {
            crate::prim::conv_out_size(
                xsh[2 + d],
                k_sp[d],
                prm.strides[d],
                prm.padding[d],
                prm.lhs_dilation[d],
                prm.rhs_dilation[d],
            )
        })
        .collect();
    let mut out_shape = vec![n, o];
    out_shape.extend_from_slice(&out_sp);
    let p = numel(&out_sp);
    let kprod = numel(&k_sp);
    let geo = Geometry {
        nsp,
        o,
        cg,
        og,

        kprod,
        r: cg * kprod,
        in_dil: (0..nsp)
            .map(|d| dilate_size(xsh[2 + d], prm.lhs_dilation[d]) as isize)
            .collect(),
        strides: prm.strides.iter().map(|&s| s as isize).collect(),
        lo: prm.padding.iter().map(|p| p.0).collect(),
        ld: prm.lhs_dilation.iter().map(|&d| d as isize).collect(),
        rd: prm.rhs_dilation.iter().map(|&d| d as isize).collect(),
        xs: x.layout.strides.clone(),
        xoff: x.layout.offset as isize,
        out_sp,
        k_sp,
    };
    let total = n * o * p;
    let mut storage = Storage::new(T::DTYPE, total);
    {
        let out = &mut storage.as_mut_slice::<T>()[..total];
        if geo.r == 0 || total == 0 {
            out.fill(T::from_f64(0.0));
            return Tensor::from_storage(T::DTYPE, &out_shape, storage);
        }
        // The kernel as an `[O, R]` matrix: its `(channel, spatial...)` axes
        // must merge into one column stride, else a contiguous copy.
        let mut merged: Option<isize> = Some(1);
        let mut inner: Option<isize> = None;
        for a in 1..wsh.len() {
            if wsh[a] == 1 {
                continue;
            }
            if let Some(ps) = inner {
                if ps != w.layout.strides[a] * wsh[a] as isize {
                    merged = None;
                }
            }
            inner = Some(w.layout.strides[a]);
        }
        if let (Some(_), Some(s)) = (merged, inner) {
            merged = Some(s);
        }
        let wcopy: Option<Vec<T>> = merged.is_none().then(|| {
            Tensor::from_value(w.dtype, w.layout.clone(), w.storage.clone()).to_vec::<T>()
        });
        let xg = x.storage.read::<T>();
        let wg = w.storage.read::<T>();
        let (wdata, woff, wrs, wcs): (&[T], isize, isize, isize) = match &wcopy {
            Some(v) => (v, 0, geo.r as isize, 1),
            None => (
                &wg,
                w.layout.offset as isize,
                w.layout.strides[0],
                merged.unwrap(),
            ),
        };
        let xdata: &[T] = &xg;
        let cols = n * p;
        let macs = total * geo.r;
        let threads = pool::threads();
        let mut nb = cols.div_ceil(BLOCK_COLS);
        if macs >= PAR_MACS {
            // A whole number of blocks per thread: a kernel gradient's
            // 576 columns in 3 blocks kept one of 2 threads idle a third
            // of the time (20.1 -> 15 ms over [32, 64, 32, 32]).
            nb = (nb.max(threads).div_ceil(threads) * threads).min(cols);
        }
        let bc_max = cols.div_ceil(nb);
        let rc = (COL_ELEMS / bc_max).clamp(1, geo.r);
        // Kernels with more offsets than there are output positions (a
        // kernel gradient's convolution: its "kernel" is an image) build
        // the im2col matrix column by column, where the input is read in
        // long runs.
        let by_columns = kprod > p;
        let base = OutPtr(out.as_mut_ptr());
        let geo = &geo;
        let run_block = |b: usize| {
            let (j0, j1) = (cols * b / nb, cols * (b + 1) / nb);
            let bc = j1 - j0;
            if bc == 0 {
                return;
            }
            let direct = j0 / p == (j1 - 1) / p;
            let rows = rc.min(geo.r);
            let extra = if direct { 0 } else { geo.og * bc };
            T::with_scratch(rows * bc + extra, |scratch| {
                let (col, dbuf) = scratch.split_at_mut(rows * bc);
                let mut kidx = vec![0usize; geo.nsp];
                let mut qidx = vec![0usize; geo.nsp];
                for g in 0..groups {
                    let mut r0 = 0;
                    while r0 < geo.r {
                        let r1 = (r0 + rc).min(geo.r);
                        let nr = r1 - r0;
                        if by_columns {
                            // The transposed matrix, `[bc, nr]`: for each
                            // output position, the window of each channel.
                            for j in j0..j1 {
                                let (img, pj) = (j / p, j % p);
                                let mut f = pj;
                                for d in (0..geo.nsp).rev() {
                                    qidx[d] = f % geo.out_sp[d];
                                    f /= geo.out_sp[d];
                                }
                                let colj = &mut col[(j - j0) * nr..(j - j0 + 1) * nr];
                                let mut r = r0;
                                while r < r1 {
                                    let (ci, ka) = (r / geo.kprod, r % geo.kprod);
                                    let kb = geo.kprod.min(ka + (r1 - r));
                                    let dst = &mut colj[r - r0..r - r0 + (kb - ka)];
                                    let c = g * geo.cg + ci;
                                    geo.fill_run(
                                        xdata,
                                        img,
                                        c,
                                        &geo.k_sp,
                                        &geo.rd,
                                        &qidx,
                                        &geo.strides,
                                        ka,
                                        kb,
                                        dst,
                                    );
                                    r += kb - ka;
                                }
                            }
                        } else {
                            for r in r0..r1 {
                                let (ci, mut kf) = (r / geo.kprod, r % geo.kprod);
                                for d in (0..geo.nsp).rev() {
                                    kidx[d] = kf % geo.k_sp[d];
                                    kf /= geo.k_sp[d];
                                }
                                let row = &mut col[(r - r0) * bc..(r - r0 + 1) * bc];
                                // The block's columns, one image at a time.
                                let mut j = j0;
                                while j < j1 {
                                    let (img, pa) = (j / p, j % p);
                                    let pb = p.min(pa + (j1 - j));
                                    let dst = &mut row[j - j0..j - j0 + (pb - pa)];
                                    let c = g * geo.cg + ci;
                                    geo.fill_run(
                                        xdata,
                                        img,
                                        c,
                                        &geo.out_sp,
                                        &geo.strides,
                                        &kidx,
                                        &geo.rd,
                                        pa,
                                        pb,
                                        dst,
                                    );
                                    j += pb - pa;
                                }
                            }
                        }
                        // Element [l, j] of the chunk: rows step `rs`, columns `cs`.
                        let (crs, ccs) = if by_columns {
                            (1, nr as isize)
                        } else {
                            (bc as isize, 1)
                        };
                        let (dst, drs) = if direct {
                            let (img, pa) = (j0 / p, j0 % p);
                            let at = img * geo.o * p + g * geo.og * p + pa;
                            (base.get().wrapping_add(at), p as isize)
                        } else {
                            (dbuf.as_mut_ptr(), bc as isize)
                        };
                        let flush = FlushSubnormals::new();
                        // Safety of both products below: the product writes `og x bc` elements at `dst +
                        // i * drs + j` (i < og, j < bc): when `direct`, these
                        // are output rows `g * og + i` of image `img`,
                        // positions `pa..pa + bc` (the block lies inside that
                        // image's `p` positions), inside the `total`-element
                        // output, and blocks (run concurrently) cover
                        // disjoint columns, so no element is written by two
                        // threads; else `dst` is this thread's `og * bc`
                        // scratch. It reads the lhs at `woff + (g * og + i)
                        // * wrs + (r0 + l) * wcs` for l < r1 - r0: element
                        // `[g * og + i, r0 + l]` of the kernel seen as
                        // `[O, R]`, which the merged strides (or the
                        // contiguous copy) map into `wdata`; and the rhs at
                        // `col + l * crs + j * ccs` (`l * bc + j`, or `j * nr
                        // + l` when built by columns), inside the `nr * bc <=
                        // rows * bc` chunk just filled. It reads `dst`
                        // (accumulates) only after the first chunk of rows,
                        // which wrote every element of `dst`.
                        let lhs = wdata.as_ptr().wrapping_offset(
                            woff + (g * geo.og) as isize * wrs + r0 as isize * wcs,
                        );
                        if by_columns {
                            // The chunk built by columns is a column-major
                            // rhs: faer (see `dot::product_block`).
                            // SAFETY: see the comment above.
                            unsafe {
                                faer_matmul(
                                    (geo.og, bc, r1 - r0),
                                    dst,
                                    drs,
                                    r0 > 0,
                                    lhs,
                                    (wrs, wcs),
                                    col.as_ptr(),
                                    (crs, ccs),
                                );
                            }
                        } else {
                            // SAFETY: see the comment above.
                            unsafe {
                                gemm::gemm(
                                    geo.og,
                                    bc,
                                    r1 - r0,
                                    dst,
                                    1,
                                    drs,
                                    r0 > 0,
                                    lhs,
                                    wcs,
                                    wrs,
                                    col.as_ptr(),
                                    ccs,
                                    crs,
                                    T::from_f64(1.0),
                                    T::from_f64(1.0),
                                    false,
                                    false,
                                    false,
                                    gemm::Parallelism::None,
                                );
                            }
                        }
                        drop(flush);
                        r0 = r1;
                    }
                    if !direct {
                        // Copy the block's `[og, bc]` result to its images.
                        let mut j = j0;
                        while j < j1 {
                            let (img, pa) = (j / p, j % p);
                            let len = (p - pa).min(j1 - j);
                            for i in 0..geo.og {
                                let src = &dbuf[i * bc + (j - j0)..i * bc + (j - j0) + len];
                                let at = img * geo.o * p + (g * geo.og + i) * p + pa;
                                // SAFETY: `at..at + len` is inside the output
                                // (row `g * og + i` of image `img`, positions
                                // `pa..pa + len <= p`); these are this block's
                                // columns, which no other block writes, and
                                // `src` is this thread's scratch, disjoint
                                // from the output.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        src.as_ptr(),
                                        base.get().add(at),
                                        len,
                                    );
                                }
                            }
                            j += len;
                        }
                    }
                }
            })
        };
        if nb == 1 {
            run_block(0);
        } else {
            pool::for_each(nb, &run_block);
        }
    }
    Tensor::from_storage(T::DTYPE, &out_shape, storage)
}

/// Whether `Prim::Conv` is better computed by [`conv_col2im`]: stride 1,
/// no dilation, one group, padding that only adds (no crop), and an output
/// larger than its input in the proportion that the im2col matrix (`C * K`
/// rows over the output's positions) outweighs col2im's (`O * K` rows over
/// the input's): the input gradient of a VALID convolution, a full
/// convolution by the flipped kernel, whose im2col is mostly padding.
fn prefers_col2im(x: &Value, w: &Value, prm: &ConvParams<'_>) -> bool {
    let (xsh, wsh) = (&x.layout.shape, &w.layout.shape);
    let nsp = xsh.len() - 2;
    let plain = prm.feature_group_count == 1
        && prm.strides.iter().all(|&s| s == 1)
        && prm.lhs_dilation.iter().all(|&d| d == 1)
        && prm.rhs_dilation.iter().all(|&d| d == 1)
        && prm.padding.iter().all(|&(lo, hi)| lo >= 0 && hi >= 0);
    if !plain {
        return false;
    }
    let p_in: usize = xsh[2..].iter().product();
    let p_out: usize = (0..nsp)
        .map(|d| {
            let (lo, hi) = prm.padding[d];
            (xsh[2 + d] as isize + lo + hi - wsh[2 + d] as isize + 1).max(0) as usize
        })
        .product();
    p_in > 0 && p_out > 0 && 2 * wsh[0] * p_in <= xsh[1] * p_out
}

/// `Prim::Conv` (as [`prefers_col2im`] admits) by col2im: per image, the
/// product `W' [O * K, C] @ x [C, P_in]` gives each input position's
/// contribution through each kernel offset, added into the output position
/// it reaches (`y = i + lo - k`). Work and memory in the input's positions,
/// not the padded output's.
fn conv_col2im<T: ConvElem + super::dot::GemmElem + std::ops::Add<Output = T>>(
    x: &Value,
    w: &Value,
    prm: &ConvParams<'_>,
) -> Tensor {
    keep_gemm_buffers_mapped();
    let (xsh, wsh) = (x.layout.shape.clone(), w.layout.shape.clone());
    let nsp = xsh.len() - 2;
    let (n, c, o) = (xsh[0], xsh[1], wsh[0]);
    let in_sp = &xsh[2..];
    let k_sp = &wsh[2..];
    let lo: Vec<isize> = prm.padding.iter().map(|p| p.0).collect();
    let out_sp: Vec<usize> = (0..nsp)
        .map(|d| {
            let (l, h) = prm.padding[d];
            (in_sp[d] as isize + l + h - k_sp[d] as isize + 1) as usize
        })
        .collect();
    let (p_in, p_out, kprod) = (numel(in_sp), numel(&out_sp), numel(k_sp));
    // Contiguous operands: x as [N, C, P_in]; the kernel as [O * K, C].
    let xv = Tensor::from_value(x.dtype, x.layout.clone(), x.storage.clone()).to_vec::<T>();
    let wv = Tensor::from_value(w.dtype, w.layout.clone(), w.storage.clone()).to_vec::<T>();
    let mut wt = vec![T::from_f64(0.0); o * kprod * c];
    for oo in 0..o {
        for cc in 0..c {
            for k in 0..kprod {
                wt[(oo * kprod + k) * c + cc] = wv[(oo * c + cc) * kprod + k];
            }
        }
    }
    let mut out_shape = vec![n, o];
    out_shape.extend_from_slice(&out_sp);
    let total = n * o * p_out;
    let mut storage = Storage::new(T::DTYPE, total);
    let out = &mut storage.as_mut_slice::<T>()[..total];
    out.fill(T::from_f64(0.0));
    let base = OutPtr(out.as_mut_ptr());
    // Row-major multi-index of a flat position over `dims`.
    let unflat = |mut f: usize, dims: &[usize], idx: &mut [usize]| {
        for d in (0..dims.len()).rev() {
            idx[d] = f % dims[d];
            f /= dims[d];
        }
    };
    let image = |img: usize| {
        T::with_scratch(o * kprod * p_in, |cols| {
            if c > 0 {
                let flush = FlushSubnormals::new();
                // SAFETY: `wt` is `[O * K, C]` row-major, the image's `x` is
                // `[C, P_in]` row-major inside `xv`, `cols` holds `O * K *
                // P_in` elements; all sizes are positive (`c > 0`, and
                // `prefers_col2im` admitted positive positions).
                unsafe {
                    super::dot::product_block(
                        o * kprod,
                        p_in,
                        c,
                        cols.as_mut_ptr(),
                        p_in as isize,
                        wt.as_ptr(),
                        (c as isize, 1),
                        xv.as_ptr().add(img * c * p_in),
                        (p_in as isize, 1),
                    )
                };
                drop(flush);
            } else {
                cols.fill(T::from_f64(0.0));
            }
            // Along the last spatial axis, each input row adds into a
            // contiguous run of an output row.
            let last = nsp - 1;
            let (in_last, out_last) = (in_sp[last], out_sp[last]);
            let (mut ki, mut ii) = (vec![0; nsp], vec![0; nsp]);
            for oo in 0..o {
                // SAFETY: this image's rows of the output, `[O, P_out]`
                // from `img * O * P_out`: each image is one task, so no two
                // tasks write one element.
                let dst = unsafe {
                    std::slice::from_raw_parts_mut(base.get().add((img * o + oo) * p_out), p_out)
                };
                for k in 0..kprod {
                    unflat(k, k_sp, &mut ki);
                    let shift = lo[last] - ki[last] as isize;
                    let from = (-shift).max(0) as usize;
                    let to = (out_last as isize - shift).clamp(0, in_last as isize) as usize;
                    if from >= to {
                        continue;
                    }
                    let plane = &cols[(oo * kprod + k) * p_in..][..p_in];
                    for r in 0..p_in / in_last {
                        unflat(r, &in_sp[..last], &mut ii[..last]);
                        let mut y = 0usize;
                        let mut inside = true;
                        for d in 0..last {
                            let yd = ii[d] as isize + lo[d] - ki[d] as isize;
                            inside &= yd >= 0 && (yd as usize) < out_sp[d];
                            y = y * out_sp[d] + yd.max(0) as usize;
                        }
                        if !inside {
                            continue;
                        }
                        let at = (y * out_last) as isize + from as isize + shift;
                        let src = &plane[r * in_last + from..r * in_last + to];
                        let run = &mut dst[at as usize..at as usize + (to - from)];
                        for (d, &v) in run.iter_mut().zip(src) {
                            *d = *d + v;
                        }
                    }
                }
            }
        })
    };
    if n * o * kprod * c * p_in >= PAR_MACS && n > 1 {
        pool::for_each(n, &image);
    } else {
        (0..n).for_each(image);
    }
    Tensor::from_storage(T::DTYPE, &out_shape, storage)
}

/// `Prim::Conv` on concrete floats (see the module doc).
pub(crate) fn conv(x: &Value, w: &Value, prm: &ConvParams<'_>) -> Tensor {
    match x.dtype {
        DType::F32 if prefers_col2im(x, w, prm) => conv_col2im::<f32>(x, w, prm),
        DType::F64 if prefers_col2im(x, w, prm) => conv_col2im::<f64>(x, w, prm),
        DType::F32 => conv_gemm::<f32>(x, w, prm),
        DType::F64 => conv_gemm::<f64>(x, w, prm),
        DType::F16 | DType::BF16 => {
            let (x32, w32) = (cast(x, DType::F32), cast(w, DType::F32));
            let out = conv_gemm::<f32>(x32.value(), w32.value(), prm);
            cast(out.value(), x.dtype)
        }
        d => panic!("conv: expects a float tensor, got {d}"),
    }
}
