// The differential fuzzer's programs (included by `jit_fuzz.rs`, which runs
// them under jit against eager, and by `cuda_compile.rs`, which renders
// them as CUDA kernels and compiles those): the PRNG, the program data
// (`Prog`, `Instr`), the interpreter (`interpret`, `run`), the generator
// (`generate(seed)`) and the inputs (`make_input`). The including file
// declares `mod common` (nx's test helpers) and imports rune's prelude.

// ---------------------------------------------------------------------------
// PRNG (splitmix64).

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 > 1.0 - p
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

// ---------------------------------------------------------------------------
// Programs.

#[derive(Clone, Copy, Debug, PartialEq)]
enum Un {
    Neg,
    Abs,
    Exp,
    Sin,
    Tanh,
    Sqrt,
    Log1p,
    Sigmoid,
    Square,
    Floor,
    Sign,
    BitNot,
    Relu,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Rem,
    Pow,
    Atan2,
    BitAnd,
    BitXor,
    Shl,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cmp {
    Lt,
    Le,
    Eq,
    Gt,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Red {
    Sum,
    Max,
    Mean,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum NonContig {
    No,
    /// A permuted view of a tensor of permuted shape.
    Transposed,
    /// Stride 2 along a hidden axis, then reversed (`strided_copy`).
    Strided,
}

#[derive(Clone, Debug)]
struct Input {
    shape: Vec<usize>,
    dtype: DType,
    layout: NonContig,
    /// Captured by the jitted closure (a constant) instead of passed.
    captured: bool,
    seed: u64,
}

/// Values are numbered: inputs first, then one per instruction.
#[derive(Clone, Debug)]
enum Instr {
    Unary(Un, usize),
    /// `a op fit(b)`.
    Binary(Bin, usize, usize, Fit),
    Cast(usize, DType),
    Reshape(usize, Vec<usize>),
    Permute(usize, Vec<isize>),
    /// Per dim `(start, end, step)`; `end` None: past the front (negative steps).
    Slice(usize, Vec<(isize, Option<isize>, isize)>),
    Flip(usize, Vec<isize>),
    BroadcastTo(usize, Vec<usize>),
    Expand(usize, Vec<usize>),
    Unsqueeze(usize, isize),
    Reduce(Red, usize, Vec<isize>, bool),
    /// `a @ fit(b)`, `a` of rank >= 1 (rank 1: a vector-matrix product).
    Matmul(usize, usize, Fit),
    /// `a.take(indices, axis)`, the indices captured (a constant: a
    /// gather compiled into the kernels; its gradient a scatter).
    Take(usize, Vec<i32>, isize),
    /// `nx::segment_sum(a, ids, num)`, the ids captured (I64; repeated,
    /// negative, both bounds): a scatter-add into zeros.
    SegmentSum(usize, Vec<i64>, usize),
    /// `a.index_add(axis, idx, fit(b))`, the indices captured (I32).
    IndexAdd(usize, usize, Fit, Vec<i32>, isize),
    /// `a.max_pool(..)` (`true`) or `a.avg_pool(..)` over an `[N, C,
    /// spatial..]` value: window, strides, padding (`None`: SAME, empty:
    /// VALID, else explicit pairs).
    Pool(
        bool,
        usize,
        Vec<usize>,
        Vec<usize>,
        Option<Vec<(usize, usize)>>,
    ),
    /// `where(a cmp fit(b), a, fit(c))`.
    Where(Cmp, usize, usize, Fit, usize, Fit),
    /// `scan` with carry `a` over the rows of `xs` (`scan_with`'s
    /// `unroll`): the body's values are the carry, the row, then its
    /// instructions; the step returns `fit(last)` as the carry and `last`
    /// as its output; the value is the outputs, stacked.
    Scan(usize, usize, Box<Body>, usize),
}

/// A scan's step (see [`Instr::Scan`]).
#[derive(Clone, Debug)]
struct Body {
    instrs: Vec<Instr>,
}

/// How operand `b` is fitted to `shape` and `dtype`: cast, flatten, then the
/// first `numel(shape)` elements reshaped, or its first element broadcast.
#[derive(Clone, Debug)]
struct Fit {
    shape: Vec<usize>,
    dtype: DType,
}

#[derive(Clone, Debug)]
struct Prog {
    inputs: Vec<Input>,
    instrs: Vec<Instr>,
    /// Values returned.
    outputs: Vec<usize>,
    /// `assign` on input `i` of `fit(value)`, after the outputs are taken.
    assign: Option<(usize, usize, Fit)>,
    /// Differentiate `sum(last value)` with respect to input 0 instead.
    grad: bool,
    /// Whether the program has a reduction or matmul.
    library: bool,
}

fn numel(s: &[usize]) -> usize {
    s.iter().product()
}

fn fit(t: &Tensor, f: &Fit) -> Tensor {
    let t = if t.dtype() == f.dtype {
        t.clone()
    } else {
        t.cast(f.dtype)
    };
    let n = t.numel();
    let flat = t.reshape(&[n]);
    let m = numel(&f.shape);
    if n >= m {
        flat.narrow(0, 0, m).reshape(&f.shape)
    } else {
        flat.narrow(0, 0, 1).reshape(&[]).broadcast_to(&f.shape)
    }
}

fn unary(op: Un, x: &Tensor) -> Tensor {
    match op {
        Un::Neg => x.neg(),
        Un::Abs => x.abs(),
        Un::Exp => x.exp(),
        Un::Sin => x.sin(),
        Un::Tanh => x.tanh(),
        Un::Sqrt => x.sqrt(),
        Un::Log1p => x.log1p(),
        Un::Sigmoid => x.sigmoid(),
        Un::Square => x.square(),
        Un::Floor => x.floor(),
        Un::Sign => x.sign(),
        Un::BitNot => x.bitwise_not(),
        Un::Relu => x.relu(),
    }
}

fn binary(op: Bin, a: &Tensor, b: &Tensor) -> Tensor {
    match op {
        Bin::Add => a.add(b),
        Bin::Sub => a.sub(b),
        Bin::Mul => a.mul(b),
        Bin::Div => a.div(b),
        Bin::Max => a.maximum(b),
        Bin::Min => a.minimum(b),
        Bin::Rem => a.rem(b),
        Bin::Pow => a.pow(b),
        Bin::Atan2 => a.atan2(b),
        Bin::BitAnd => a.bitwise_and(b),
        Bin::BitXor => a.bitwise_xor(b),
        Bin::Shl => a.shift_left(b),
    }
}

fn compare(op: Cmp, a: &Tensor, b: &Tensor) -> Tensor {
    match op {
        Cmp::Lt => a.less(b),
        Cmp::Le => a.less_equal(b),
        Cmp::Eq => a.equal(b),
        Cmp::Gt => a.greater(b),
    }
}

/// Runs the instructions on `vals` (the inputs) and returns every value.
fn interpret(p: &Prog, mut vals: Vec<Tensor>) -> Vec<Tensor> {
    for ins in &p.instrs {
        let v = match ins {
            Instr::Unary(op, a) => unary(*op, &vals[*a]),
            Instr::Binary(op, a, b, f) => binary(*op, &vals[*a], &fit(&vals[*b], f)),
            Instr::Cast(a, d) => vals[*a].cast(*d),
            Instr::Reshape(a, s) => vals[*a].reshape(s),
            Instr::Permute(a, perm) => vals[*a].permute(perm),
            Instr::Slice(a, sl) => {
                let s: Vec<Slice> = sl
                    .iter()
                    .map(|&(lo, hi, st)| Slice::new(lo, hi, st))
                    .collect();
                vals[*a].slice(&s)
            }
            Instr::Flip(a, axes) => vals[*a].flip(axes),
            Instr::BroadcastTo(a, s) => vals[*a].broadcast_to(s),
            Instr::Expand(a, s) => vals[*a].expand(s),
            Instr::Unsqueeze(a, ax) => vals[*a].unsqueeze(*ax),
            Instr::Reduce(r, a, axes, keep) => match r {
                Red::Sum => vals[*a].sum(axes, *keep),
                Red::Max => vals[*a].max(axes, *keep),
                Red::Mean => vals[*a].mean(axes, *keep),
            },
            Instr::Matmul(a, b, f) => vals[*a].matmul(&fit(&vals[*b], f)),
            Instr::Take(a, idx, axis) => {
                let i = Tensor::from_slice(idx, &[idx.len()]);
                vals[*a].take(&i, *axis)
            }
            Instr::SegmentSum(a, ids, num) => {
                let i = Tensor::from_slice(ids, &[ids.len()]);
                nx::segment_sum(&vals[*a], &i, *num)
            }
            Instr::IndexAdd(a, b, f, idx, axis) => {
                let i = Tensor::from_slice(idx, &[idx.len()]);
                vals[*a].index_add(*axis, &i, &fit(&vals[*b], f))
            }
            Instr::Pool(max, a, window, strides, pad) => {
                let padding = match pad {
                    None => nx::Padding::Same,
                    Some(p) if p.is_empty() => nx::Padding::Valid,
                    Some(p) => nx::Padding::Explicit(p.clone()),
                };
                if *max {
                    vals[*a].max_pool(window, strides, padding)
                } else {
                    vals[*a].avg_pool(window, strides, padding)
                }
            }
            Instr::Where(c, a, b, fb, x, fx) => {
                let cond = compare(*c, &vals[*a], &fit(&vals[*b], fb));
                Tensor::where_(&cond, &vals[*a], &fit(&vals[*x], fx))
            }
            Instr::Scan(a, xs, body, unroll) => {
                let step = |c: &Tensor, x: &Tensor| {
                    let inner = Prog {
                        inputs: vec![],
                        instrs: body.instrs.clone(),
                        outputs: vec![],
                        assign: None,
                        grad: false,
                        library: false,
                    };
                    let out = interpret(&inner, vec![c.clone(), x.clone()]);
                    let last = out.last().expect("a body value").clone();
                    // The carry's own shape: the generator's shapes are a
                    // guide, and the compiled loop needs the exact one.
                    let carry = Fit {
                        shape: c.shape().to_vec(),
                        dtype: c.dtype(),
                    };
                    (fit(&last, &carry), last)
                };
                let opts = ScanOpts { unroll: *unroll };
                rune::scan_with(step, &vals[*a], &vals[*xs], opts).1
            }
        };
        vals.push(v);
    }
    vals
}

/// The program as a function of its leaves (`args`: the inputs that are
/// not captured; `caps`: the captured ones), returning its outputs. With
/// `p.grad`, the gradient of `sum(last value)` w.r.t. input 0 instead.
fn run(p: &Prog, args: &[Tensor], caps: &[Tensor]) -> Vec<Tensor> {
    let assemble = |args: &[Tensor]| -> Vec<Tensor> {
        let (mut a, mut c) = (args.iter(), caps.iter());
        p.inputs
            .iter()
            .map(|i| {
                if i.captured {
                    c.next().unwrap().clone()
                } else {
                    a.next().unwrap().clone()
                }
            })
            .collect()
    };
    if p.grad {
        // Input 0 is always an argument in grad programs.
        let rest: Vec<Tensor> = args[1..].to_vec();
        let g = rune::grad(
            |x: &Tensor| {
                let mut a = vec![x.clone()];
                a.extend(rest.iter().cloned());
                let vals = interpret(p, assemble(&a));
                vals.last().unwrap().sum_all()
            },
            &args[0],
        );
        return vec![g];
    }
    let vals = interpret(p, assemble(args));
    let outs: Vec<Tensor> = p.outputs.iter().map(|&o| vals[o].clone()).collect();
    match &p.assign {
        Some((i, v, f)) => {
            // Materialize the outputs first: an eager view of the leaf would
            // alias it and see the assignment.
            let outs: Vec<Tensor> = outs.iter().map(|o| o.copy()).collect();
            let leaf = &args[p.inputs[..*i].iter().filter(|x| !x.captured).count()];
            leaf.assign(&fit(&vals[*v], f));
            outs
        }
        None => outs,
    }
}

// ---------------------------------------------------------------------------
// Generation.

const FLOAT_DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const INT_DTYPES: [DType; 5] = [DType::I32, DType::I64, DType::U8, DType::I16, DType::U32];

struct Gen {
    rng: Rng,
    avals: Vec<(Vec<usize>, DType)>,
    grad: bool,
    /// Scans enclosing the instructions being generated.
    depth: usize,
}

fn is_float(d: DType) -> bool {
    d.is_float()
}

impl Gen {
    fn shape(&mut self) -> Vec<usize> {
        let rank = self.rng.pick(&[0, 1, 1, 2, 2, 2, 3, 3, 4]);
        (0..rank)
            .map(|_| self.rng.pick(&[1, 2, 3, 4, 5, 7]))
            .collect()
    }

    fn value(&mut self) -> usize {
        // Prefer recent values, so programs are chains more than bushes.
        let n = self.avals.len();
        if self.rng.chance(0.6) {
            n - 1 - self.rng.below(n.min(3))
        } else {
            self.rng.below(n)
        }
    }

    /// A shape that broadcasts against `s` (some dims 1, some leading dims
    /// dropped).
    fn compatible(&mut self, s: &[usize]) -> Vec<usize> {
        let drop = self.rng.below(s.len() + 1);
        s[drop..]
            .iter()
            .map(|&d| if self.rng.chance(0.3) { 1 } else { d })
            .collect()
    }

    fn fit_to(&mut self, s: &[usize], d: DType) -> Fit {
        Fit {
            shape: s.to_vec(),
            dtype: d,
        }
    }

    fn unary(&mut self, d: DType) -> Un {
        if is_float(d) {
            if self.grad {
                self.rng.pick(&[
                    Un::Neg,
                    Un::Abs,
                    Un::Exp,
                    Un::Sin,
                    Un::Tanh,
                    Un::Sigmoid,
                    Un::Square,
                    Un::Relu,
                ])
            } else {
                self.rng.pick(&[
                    Un::Neg,
                    Un::Abs,
                    Un::Exp,
                    Un::Sin,
                    Un::Tanh,
                    Un::Sqrt,
                    Un::Log1p,
                    Un::Sigmoid,
                    Un::Square,
                    Un::Floor,
                    Un::Sign,
                    Un::Relu,
                ])
            }
        } else if d.is_signed_int() {
            self.rng
                .pick(&[Un::Neg, Un::Abs, Un::Square, Un::Sign, Un::BitNot, Un::Relu])
        } else {
            self.rng.pick(&[Un::Square, Un::BitNot, Un::Abs])
        }
    }

    fn binop(&mut self, d: DType) -> Bin {
        if is_float(d) {
            if self.grad {
                self.rng
                    .pick(&[Bin::Add, Bin::Sub, Bin::Mul, Bin::Div, Bin::Max, Bin::Min])
            } else {
                self.rng.pick(&[
                    Bin::Add,
                    Bin::Sub,
                    Bin::Mul,
                    Bin::Div,
                    Bin::Max,
                    Bin::Min,
                    Bin::Rem,
                    Bin::Pow,
                    Bin::Atan2,
                ])
            }
        } else {
            self.rng.pick(&[
                Bin::Add,
                Bin::Sub,
                Bin::Mul,
                Bin::Div,
                Bin::Max,
                Bin::Min,
                Bin::Rem,
                Bin::BitAnd,
                Bin::BitXor,
                Bin::Shl,
            ])
        }
    }

    /// One instruction over the current values, with the aval it produces.
    fn instr(&mut self, library: &mut bool) -> (Instr, Vec<usize>, DType) {
        loop {
            let a = self.value();
            let (s, d) = self.avals[a].clone();
            let r = s.len();
            match self.rng.below(21) {
                18 => {
                    // A segment sum of the rows of `a` by captured ids.
                    if r == 0 || s[0] == 0 {
                        continue;
                    }
                    let num = self.rng.range(1, 5);
                    let m = num as i64;
                    let ids: Vec<i64> = (0..s[0])
                        .map(|_| match self.rng.below(3) {
                            0 => self.rng.pick(&[0, m - 1, -m, -1]),
                            _ => self.rng.below(2 * num) as i64 - m,
                        })
                        .collect();
                    let mut out = s.clone();
                    out[0] = num;
                    return (Instr::SegmentSum(a, ids, num), out, d);
                }
                19 => {
                    // index_add along an axis, captured indices (repeats,
                    // negatives, both bounds), the source fitted from `b`.
                    if r == 0 {
                        continue;
                    }
                    let axis = self.rng.below(r);
                    let n = s[axis] as i32;
                    if n == 0 {
                        continue;
                    }
                    let k = self.rng.range(1, 6);
                    let idx: Vec<i32> = (0..k)
                        .map(|_| match self.rng.below(3) {
                            0 => self.rng.pick(&[0, n - 1, -n, -1]),
                            _ => self.rng.below(2 * n as usize) as i32 - n,
                        })
                        .collect();
                    let mut src = s.clone();
                    src[axis] = k;
                    let b = self.value();
                    let f = self.fit_to(&src, d);
                    let ax = if self.rng.chance(0.5) {
                        axis as isize
                    } else {
                        axis as isize - r as isize
                    };
                    return (Instr::IndexAdd(a, b, f, idx, ax), s, d);
                }
                20 => {
                    // A max or avg pool over the spatial axes of an [N, C,
                    // spatial..] value: tiling, overlapping or padded windows.
                    if !(3..=5).contains(&r) {
                        continue;
                    }
                    let max = !is_float(d) || self.rng.chance(0.5);
                    let sp = &s[2..];
                    let strides: Vec<usize> = sp.iter().map(|_| self.rng.range(1, 3)).collect();
                    let pad = match self.rng.below(3) {
                        0 => Some(vec![]),
                        1 => None,
                        _ => Some(
                            sp.iter()
                                .map(|_| (self.rng.below(2), self.rng.below(2)))
                                .collect(),
                        ),
                    };
                    let lohi: Vec<(usize, usize)> = match &pad {
                        Some(p) if p.is_empty() => vec![(0, 0); sp.len()],
                        Some(p) => p.clone(),
                        None => vec![(1, 1); sp.len()],
                    };
                    // SAME pads as needed; VALID and explicit windows must fit.
                    let window: Vec<usize> = (0..sp.len())
                        .map(|i| {
                            let most = if pad.is_none() {
                                3
                            } else {
                                (sp[i] + lohi[i].0 + lohi[i].1).min(3)
                            };
                            self.rng.range(1, most)
                        })
                        .collect();
                    let padding = match &pad {
                        None => nx::Padding::Same,
                        Some(p) if p.is_empty() => nx::Padding::Valid,
                        Some(p) => nx::Padding::Explicit(p.clone()),
                    };
                    let pads = padding.resolve("pool", sp, &window, &strides);
                    let mut out = s[..2].to_vec();
                    for i in 0..sp.len() {
                        out.push((sp[i] + pads[i].0 + pads[i].1 - window[i]) / strides[i] + 1);
                    }
                    return (Instr::Pool(max, a, window, strides, pad), out, d);
                }
                17 => {
                    // A gather by captured indices: in range, negative
                    // ones, repeats, both bounds.
                    if r == 0 {
                        continue;
                    }
                    let axis = self.rng.below(r);
                    let n = s[axis] as i32;
                    if n == 0 {
                        continue;
                    }
                    let k = self.rng.range(1, 6);
                    let idx: Vec<i32> = (0..k)
                        .map(|_| match self.rng.below(4) {
                            0 => self.rng.pick(&[0, n - 1, -n, -1]),
                            _ => self.rng.below(2 * n as usize) as i32 - n,
                        })
                        .collect();
                    let mut out = s.clone();
                    out[axis] = k;
                    return (Instr::Take(a, idx, axis as isize), out, d);
                }
                16 => {
                    // A scan over the rows of a value, at most two deep.
                    let xs = self.value();
                    let (xs_shape, xs_dtype) = self.avals[xs].clone();
                    if self.depth >= 2 || xs_shape.is_empty() || xs_shape[0] == 0 {
                        continue;
                    }
                    if self.grad && !is_float(xs_dtype) {
                        continue;
                    }
                    let mut inner = Gen {
                        rng: Rng(self.rng.next()),
                        avals: vec![(s.clone(), d), (xs_shape[1..].to_vec(), xs_dtype)],
                        grad: self.grad,
                        depth: self.depth + 1,
                    };
                    let n = inner.rng.range(1, 5);
                    let mut instrs = Vec::new();
                    for _ in 0..n {
                        let (ins, s2, d2) = inner.instr(library);
                        instrs.push(ins);
                        inner.avals.push((s2, d2));
                    }
                    let (last_shape, last_dtype) = inner.avals.last().expect("a value").clone();
                    if self.grad && !is_float(last_dtype) {
                        continue;
                    }
                    let unroll = self.rng.pick(&[1, 1, 2, 3, 100]);
                    let mut out = vec![xs_shape[0]];
                    out.extend(last_shape);
                    let body = Box::new(Body { instrs });
                    return (Instr::Scan(a, xs, body, unroll), out, last_dtype);
                }
                0..=2 => return (Instr::Unary(self.unary(d), a), s, d),
                3..=5 => {
                    let b = self.value();
                    let mut t = self.compatible(&s);
                    // Sometimes broadcast the other way: `a` is the smaller.
                    let mut out = s.clone();
                    if self.rng.chance(0.2) && r < 4 {
                        t.insert(0, self.rng.pick(&[2, 3]));
                        let mut o = vec![t[0]];
                        o.extend(s.iter().copied());
                        out = o;
                        t = out.clone();
                    }
                    let f = self.fit_to(&t, d);
                    return (Instr::Binary(self.binop(d), a, b, f), out, d);
                }
                6 => {
                    if self.grad {
                        if !is_float(d) {
                            continue;
                        }
                        let to = if d == DType::F32 {
                            DType::F64
                        } else {
                            DType::F32
                        };
                        return (Instr::Cast(a, to), s, to);
                    }
                    let all: Vec<DType> = FLOAT_DTYPES
                        .iter()
                        .chain(INT_DTYPES.iter())
                        .copied()
                        .collect();
                    let to = self.rng.pick(&all);
                    return (Instr::Cast(a, to), s, to);
                }
                7 => {
                    // Reshape to a random factorization of numel.
                    let n = numel(&s);
                    let mut shape = vec![];
                    let mut left = n;
                    while left > 1 && shape.len() < 3 {
                        let divs: Vec<usize> = (2..=left).filter(|k| left % k == 0).collect();
                        let k = self.rng.pick(&divs);
                        shape.push(k);
                        left /= k;
                    }
                    if left > 1 {
                        shape.push(left);
                    }
                    if self.rng.chance(0.3) {
                        let at = self.rng.below(shape.len() + 1);
                        shape.insert(at, 1);
                    }
                    return (Instr::Reshape(a, shape.clone()), shape, d);
                }
                8 => {
                    if r < 2 {
                        continue;
                    }
                    let mut perm: Vec<isize> = (0..r as isize).collect();
                    for i in (1..r).rev() {
                        let j = self.rng.below(i + 1);
                        perm.swap(i, j);
                    }
                    let out = perm.iter().map(|&p| s[p as usize]).collect();
                    return (Instr::Permute(a, perm), out, d);
                }
                9 => {
                    if r == 0 {
                        continue;
                    }
                    let mut sl = vec![];
                    let mut out = vec![];
                    for &n in &s {
                        let n = n as isize;
                        let step = self.rng.pick(&[1, 1, 2, -1, -2, 3]);
                        let (lo, hi) = if step > 0 {
                            let lo = self.rng.below(n as usize) as isize;
                            let hi = lo + 1 + self.rng.below((n - lo) as usize) as isize;
                            (lo, hi)
                        } else {
                            // From `hi` down to (exclusive) `lo`.
                            let hi = self.rng.below(n as usize) as isize;
                            let lo = hi - 1 - self.rng.below(hi as usize + 1) as isize;
                            (hi, lo)
                        };
                        let len = if step > 0 {
                            (hi - lo + step - 1) / step
                        } else {
                            (lo - hi + (-step) - 1) / (-step)
                        };
                        sl.push((lo, (hi >= 0).then_some(hi), step));
                        out.push(len as usize);
                    }
                    return (Instr::Slice(a, sl), out, d);
                }
                10 => {
                    if r == 0 {
                        continue;
                    }
                    let axes: Vec<isize> =
                        (0..r as isize).filter(|_| self.rng.chance(0.5)).collect();
                    return (Instr::Flip(a, axes), s, d);
                }
                11 => {
                    if r >= 4 {
                        continue;
                    }
                    // Broadcast: dims of size 1 grow, a new leading dim.
                    let mut out: Vec<usize> = s
                        .iter()
                        .map(|&n| if n == 1 { self.rng.pick(&[1, 3, 4]) } else { n })
                        .collect();
                    if self.rng.chance(0.5) {
                        out.insert(0, self.rng.pick(&[2, 3]));
                    }
                    if self.rng.chance(0.5) {
                        return (Instr::BroadcastTo(a, out.clone()), out, d);
                    }
                    return (Instr::Expand(a, out.clone()), out, d);
                }
                12 => {
                    if r >= 4 {
                        continue;
                    }
                    let ax = self.rng.below(r + 1) as isize;
                    let mut out = s.clone();
                    out.insert(ax as usize, 1);
                    return (Instr::Unsqueeze(a, ax), out, d);
                }
                13 => {
                    if r == 0 {
                        continue;
                    }
                    let red = if is_float(d) {
                        self.rng.pick(&[Red::Sum, Red::Max, Red::Mean])
                    } else {
                        self.rng.pick(&[Red::Sum, Red::Max])
                    };
                    let axes: Vec<isize> =
                        (0..r as isize).filter(|_| self.rng.chance(0.5)).collect();
                    let axes = if axes.is_empty() {
                        vec![self.rng.below(r) as isize]
                    } else {
                        axes
                    };
                    let keep = self.rng.chance(0.3);
                    let out: Vec<usize> = (0..r)
                        .filter_map(|i| {
                            if axes.contains(&(i as isize)) {
                                keep.then_some(1)
                            } else {
                                Some(s[i])
                            }
                        })
                        .collect();
                    *library = true;
                    return (Instr::Reduce(red, a, axes, keep), out, d);
                }
                14 => {
                    if r == 0 || !is_float(d) {
                        continue;
                    }
                    let k = s[r - 1];
                    let n = self.rng.pick(&[1, 2, 3, 5]);
                    let b = self.value();
                    let f = self.fit_to(&[k, n], d);
                    let mut out = s[..r - 1].to_vec();
                    out.push(n);
                    *library = true;
                    return (Instr::Matmul(a, b, f), out, d);
                }
                _ => {
                    let b = self.value();
                    let x = self.value();
                    let c = self.rng.pick(&[Cmp::Lt, Cmp::Le, Cmp::Eq, Cmp::Gt]);
                    let tb = self.compatible(&s);
                    let tx = self.compatible(&s);
                    let fb = self.fit_to(&tb, d);
                    let fx = self.fit_to(&tx, d);
                    return (Instr::Where(c, a, b, fb, x, fx), s, d);
                }
            }
        }
    }
}

fn generate(seed: u64) -> Prog {
    let mut rng = Rng(seed.wrapping_mul(0x2545f4914f6cdd1d) ^ 0x5eed);
    let grad = rng.chance(0.25);
    let base = if grad {
        rng.pick(&[DType::F32, DType::F64])
    } else if rng.chance(0.6) {
        rng.pick(&FLOAT_DTYPES)
    } else {
        rng.pick(&INT_DTYPES)
    };
    let mut g = Gen {
        rng,
        avals: vec![],
        grad,
        depth: 0,
    };
    let n_inputs = g.rng.range(1, 3);
    let mut inputs = vec![];
    for i in 0..n_inputs {
        let shape = g.shape();
        let layout = g.rng.pick(&[
            NonContig::No,
            NonContig::No,
            NonContig::Transposed,
            NonContig::Strided,
        ]);
        let captured = !(i == 0) && g.rng.chance(0.3);
        let seed = g.rng.next();
        g.avals.push((shape.clone(), base));
        inputs.push(Input {
            shape,
            dtype: base,
            layout,
            captured,
            seed,
        });
    }
    let len = g.rng.range(3, 20);
    let mut instrs = vec![];
    let mut library = false;
    for _ in 0..len {
        let (ins, s, d) = g.instr(&mut library);
        instrs.push(ins);
        g.avals.push((s, d));
    }
    let total = g.avals.len();
    let mut outputs = vec![total - 1];
    if g.rng.chance(0.5) {
        outputs.push(g.rng.below(total));
    }
    let assign = if !grad && g.rng.chance(0.35) {
        let i = g.rng.below(n_inputs);
        if inputs[i].captured {
            None
        } else {
            let v = g.rng.below(total);
            let f = Fit {
                shape: inputs[i].shape.clone(),
                dtype: inputs[i].dtype,
            };
            Some((i, v, f))
        }
    } else {
        None
    };
    let mut p = Prog {
        inputs,
        instrs,
        outputs,
        assign,
        grad,
        library,
    };
    if grad {
        // The loss reads the last value; it must be float (casts keep it so).
        let (_, d) = &g.avals[total - 1];
        assert!(d.is_float());
        p.outputs = vec![];
    }
    p
}

// ---------------------------------------------------------------------------
// Inputs.

fn values(dtype: DType, n: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng(seed);
    (0..n)
        .map(|_| {
            if dtype.is_float() {
                if rng.chance(0.03) {
                    rng.pick(&[0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1e30])
                } else {
                    (rng.unit() * 6.0 - 3.0).round_ties_even_to(0.125)
                }
            } else {
                let (lo, hi) = common::int_range(dtype);
                if rng.chance(0.05) {
                    rng.pick(&[lo as f64, hi as f64, 0.0])
                } else if dtype.is_signed_int() {
                    rng.range(0, 40) as f64 - 20.0
                } else {
                    rng.range(0, 40) as f64
                }
            }
        })
        .collect()
}

trait Round {
    fn round_ties_even_to(self, q: f64) -> f64;
}
impl Round for f64 {
    /// Mostly exact values (multiples of 1/8), some with full mantissas.
    fn round_ties_even_to(self, q: f64) -> f64 {
        if (self * 1000.0) as i64 % 3 == 0 {
            self
        } else {
            (self / q).round() * q
        }
    }
}

/// A fresh tensor for input `i` (the same values every time it is called).
fn make_input(i: &Input) -> Tensor {
    let n = numel(&i.shape);
    let vals = values(i.dtype, n, i.seed);
    let t = Tensor::from_slice(&vals, &i.shape).cast(i.dtype);
    match i.layout {
        NonContig::No => t,
        NonContig::Strided => common::strided_copy(&t),
        NonContig::Transposed => {
            let r = i.shape.len();
            if r < 2 {
                return common::gapped_copy(&t);
            }
            // t^T materialized, then viewed back: same values, transposed strides.
            let perm: Vec<isize> = (0..r as isize).rev().collect();
            t.permute(&perm).copy().permute(&perm)
        }
    }
}
