//! `Graph`: the staged program tolk compiles. A typed SSA list of primitive
//! applications over variables; inputs in leaf order, captured constants,
//! outputs, and writebacks (whole-tensor in-place updates of inputs).
//!
//! An equation applies a primitive (one output) or runs a [`Loop`] over a
//! body graph (several outputs: `scan` staged under jit).
//!
//! `Display` prints it like a jaxpr: one line per equation.

use nx::{Aval, Prim, Tensor};
use std::fmt;
use std::sync::Arc;

/// A variable: an index into `Graph::avals`.
pub type Var = usize;

/// What an equation applies.
#[derive(Clone, Debug)]
pub enum Op {
    /// An nx primitive; the equation has one output.
    Prim(Prim),
    /// A loop over a body graph; the equation has the loop's outputs.
    Loop(Arc<Loop>),
}

/// One equation: `outs = op(inputs)`.
#[derive(Clone, Debug)]
pub struct Eqn {
    /// The primitive or loop, with its static parameters.
    pub op: Op,
    /// The argument variables, in the operation's order.
    pub inputs: Vec<Var>,
    /// The variables it defines (one for a primitive).
    pub outs: Vec<Var>,
}

impl Eqn {
    /// `out = prim(inputs)`.
    pub fn prim(prim: Prim, inputs: Vec<Var>, out: Var) -> Eqn {
        Eqn {
            op: Op::Prim(prim),
            inputs,
            outs: vec![out],
        }
    }

    /// The primitive, for a primitive equation.
    pub fn as_prim(&self) -> Option<&Prim> {
        match &self.op {
            Op::Prim(p) => Some(p),
            Op::Loop(_) => None,
        }
    }

    /// The output of a primitive equation (a loop's first output).
    pub fn out(&self) -> Var {
        self.outs[0]
    }

    /// The operation's name, as printouts show it.
    pub fn name(&self) -> String {
        match &self.op {
            Op::Prim(p) => p.name(),
            Op::Loop(_) => "scan".to_string(),
        }
    }
}

/// `scan` staged as a loop (JAX's `scan` primitive): the body runs
/// `length` times, in reverse order of the steps when `reverse`.
///
/// The equation's inputs are `n_consts` loop-invariant values, `n_carry`
/// initial carries, then the stacked per-step inputs `xs` (each sliced
/// along axis 0); its outputs are the final carries, then the per-step
/// outputs stacked along a new axis 0. The body's inputs are the consts,
/// the carries and one slice of each `xs`; its outputs the new carries
/// (each of its carry's shape and dtype) and one slice of each output.
/// The body has no constants and no writebacks (staging made its captures
/// consts of the loop).
#[derive(Clone, Debug)]
pub struct Loop {
    /// One step.
    pub body: Graph,
    /// The number of steps (at least 1).
    pub length: usize,
    /// The leading body inputs that are the same at every step.
    pub n_consts: usize,
    /// The body inputs after the consts (and its leading outputs) that are
    /// carried from step to step.
    pub n_carry: usize,
    /// Steps run from the last slice to the first (ys still stacked in
    /// slice order).
    pub reverse: bool,
}

impl Loop {
    /// The shapes and dtypes of the loop's outputs.
    pub fn out_avals(&self) -> Vec<Aval> {
        let b = &self.body;
        b.outputs
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let a = b.aval(v);
                if i < self.n_carry {
                    a.clone()
                } else {
                    let mut shape = vec![self.length];
                    shape.extend_from_slice(&a.shape);
                    Aval::new(&shape, a.dtype)
                }
            })
            .collect()
    }

    /// Runs the loop eagerly: each step evaluates the body by binding its
    /// equations (so the traces on the stack see them).
    pub fn eval(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
        let (consts, rest) = inputs.split_at(self.n_consts);
        let (init, xs) = rest.split_at(self.n_carry);
        let mut carry: Vec<Tensor> = init.iter().map(|t| (*t).clone()).collect();
        let mut ys: Vec<Vec<Tensor>> =
            vec![Vec::with_capacity(self.length); self.body.outputs.len() - self.n_carry];
        let order: Vec<usize> = if self.reverse {
            (0..self.length).rev().collect()
        } else {
            (0..self.length).collect()
        };
        for t in order {
            let mut args: Vec<Tensor> = consts.iter().map(|c| (*c).clone()).collect();
            args.extend(carry.iter().cloned());
            args.extend(xs.iter().map(|x| x.get(t)));
            let mut outs = self.body.eval(&args);
            let step_ys = outs.split_off(self.n_carry);
            carry = outs;
            for (acc, y) in ys.iter_mut().zip(step_ys) {
                acc.push(y);
            }
        }
        if self.reverse {
            for acc in &mut ys {
                acc.reverse();
            }
        }
        carry
            .into_iter()
            .chain(ys.iter().map(|acc| Tensor::stack(acc, 0)))
            .collect()
    }
}

impl nx::MultiOp for Loop {
    fn name(&self) -> String {
        "scan".to_string()
    }
    fn eval(&self, inputs: &[&Tensor]) -> Vec<Tensor> {
        Loop::eval(self, inputs)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
}

/// A staged program. Variables are defined once, by an input, a constant or
/// an equation, before they are used (equations are in program order).
#[derive(Clone, Default)]
pub struct Graph {
    /// Shape and dtype of every variable.
    pub avals: Vec<Aval>,
    /// Input variables, one per input leaf, in traversal order.
    pub inputs: Vec<Var>,
    /// Captured concrete tensors: compile-time constants, bound once.
    pub consts: Vec<(Var, Tensor)>,
    /// The equations, in program order.
    pub eqns: Vec<Eqn>,
    /// Output variables, one per output leaf, in traversal order (a variable
    /// may appear several times, and inputs and constants may be outputs).
    pub outputs: Vec<Var>,
    /// `(input index, var)`: after the call, input leaf `i` holds `var`.
    pub writebacks: Vec<(usize, Var)>,
}

impl Graph {
    /// A new variable of `aval`.
    pub fn new_var(&mut self, aval: Aval) -> Var {
        self.avals.push(aval);
        self.avals.len() - 1
    }

    /// This graph with input `k` known to hold `t`, for each `(k, t)`: its
    /// uses read a new constant instead (the input stays, unread, so the
    /// inputs keep their positions).
    pub fn with_constant_inputs(mut self, known: Vec<(usize, Tensor)>) -> Graph {
        if known.is_empty() {
            return self;
        }
        let mut renamed: Vec<Var> = (0..self.avals.len()).collect();
        for (k, t) in known {
            let v = self.inputs[k];
            let c = self.new_var(self.aval(v).clone());
            renamed[v] = c;
            self.consts.push((c, t));
        }
        for e in &mut self.eqns {
            for x in &mut e.inputs {
                *x = renamed[*x];
            }
        }
        for o in &mut self.outputs {
            *o = renamed[*o];
        }
        self
    }

    /// The shape and dtype of `v`.
    pub fn aval(&self, v: Var) -> &Aval {
        &self.avals[v]
    }

    /// Evaluates the graph on `inputs` by binding each equation (JAX's
    /// `eval_jaxpr`): eagerly with no trace active, and under a trace each
    /// equation is that trace's to interpret, so transforming this call
    /// transforms the graph.
    pub fn eval(&self, inputs: &[Tensor]) -> Vec<Tensor> {
        assert_eq!(
            inputs.len(),
            self.inputs.len(),
            "Graph::eval: wrong number of inputs"
        );
        let mut env: Vec<Option<Tensor>> = vec![None; self.avals.len()];
        for (&v, t) in self.inputs.iter().zip(inputs) {
            env[v] = Some(t.clone());
        }
        for (v, t) in &self.consts {
            env[*v] = Some(t.clone());
        }
        for e in &self.eqns {
            let ins: Vec<&Tensor> = e
                .inputs
                .iter()
                .map(|&v| {
                    env[v]
                        .as_ref()
                        .expect("Graph::eval: a variable used before it is defined")
                })
                .collect();
            match &e.op {
                Op::Prim(p) => {
                    let out = nx::bind(p.clone(), &ins);
                    env[e.outs[0]] = Some(out);
                }
                Op::Loop(lp) => {
                    let op: Arc<dyn nx::MultiOp> = lp.clone();
                    let outs = nx::bind_multi(&op, &ins);
                    for (&v, t) in e.outs.iter().zip(outs) {
                        env[v] = Some(t);
                    }
                }
            }
        }
        self.outputs
            .iter()
            .map(|&v| {
                env[v]
                    .clone()
                    .expect("Graph::eval: an output is never defined")
            })
            .collect()
    }

    /// The signature of the structure the compiled code depends on: every
    /// equation, input, constant (shape and dtype, never data), output and
    /// writeback. Two graphs with equal keys compile to the same program.
    ///
    /// A digest of a binary encoding rather than the `Debug` text: a traced
    /// 1000-step scan has tens of thousands of equations, and formatting
    /// them was most of the key's cost. Each distinct primitive is encoded
    /// once, by its `Debug` text, and referred to by number after.
    pub fn structure_key(&self) -> String {
        let mut words: Vec<u64> = Vec::with_capacity(16 * self.eqns.len() + 64);
        let mut texts: Vec<u8> = Vec::new();
        let aval = |w: &mut Vec<u64>, a: &Aval| {
            w.push(a.dtype as u64);
            w.push(a.shape.len() as u64);
            w.extend(a.shape.iter().map(|&d| d as u64));
        };
        let list = |w: &mut Vec<u64>, v: &[Var]| {
            w.push(v.len() as u64);
            w.extend(v.iter().map(|&x| x as u64));
        };
        for &x in &self.inputs {
            aval(&mut words, &self.avals[x]);
        }
        for (c, t) in &self.consts {
            words.push(*c as u64);
            aval(&mut words, &self.avals[*c]);
            words.push(t.is_contiguous() as u64);
        }
        // Distinct primitives, compared bitwise (a `0.0` and a `-0.0` fill
        // are different programs).
        let mut prims: rustc_hash::FxHashMap<&Prim, u64> = Default::default();
        let mut n_prims = 0u64;
        for e in &self.eqns {
            list(&mut words, &e.outs);
            for &o in &e.outs {
                aval(&mut words, &self.avals[o]);
            }
            let prim = match &e.op {
                Op::Prim(p) => p,
                Op::Loop(lp) => {
                    // A loop by its parameters and its body's own key.
                    let text = format!(
                        "loop {} {} {} {} {}\n",
                        lp.length,
                        lp.n_consts,
                        lp.n_carry,
                        lp.reverse,
                        lp.body.structure_key()
                    );
                    texts.extend_from_slice(text.as_bytes());
                    words.push(u64::MAX);
                    list(&mut words, &e.inputs);
                    continue;
                }
            };
            let id = *prims.entry(prim).or_insert_with(|| {
                texts.extend_from_slice(format!("{n_prims}:{prim:?}\n").as_bytes());
                n_prims += 1;
                n_prims - 1
            });
            words.push(id);
            list(&mut words, &e.inputs);
        }
        for &(i, v) in &self.writebacks {
            words.extend([i as u64, v as u64]);
        }
        list(&mut words, &self.outputs);
        let mut bytes: Vec<u8> = Vec::with_capacity(8 * words.len());
        for w in &words {
            bytes.extend_from_slice(&w.to_le_bytes());
        }
        crate::hash::hash(&[&bytes, &texts])
    }
}

fn fmt_aval(a: &Aval) -> String {
    format!("{}{:?}", a.dtype, a.shape)
}

/// The primitive's static parameters, as jaxprs print them.
fn params(prim: &Prim) -> String {
    if matches!(
        prim,
        Prim::Unary(_) | Prim::Binary(_) | Prim::Compare(_) | Prim::Cast(_)
    ) {
        // The name says it all (the cast's target is the output type).
        return String::new();
    }
    let s = format!("{prim:?}");
    match s.find(['{', '(']) {
        Some(i) => s[i..].to_string(),
        None => String::new(),
    }
}

impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_indented(f, 0)
    }
}

impl Graph {
    /// `Display`'s text with every line indented by `depth` levels (a
    /// loop's body is printed inside its equation, one level deeper).
    fn write_indented(&self, f: &mut fmt::Formatter<'_>, depth: usize) -> fmt::Result {
        let pad = "    ".repeat(depth);
        let v = |v: Var| format!("%{v}");
        let typed = |x: Var| format!("%{x}:{}", fmt_aval(&self.avals[x]));
        let ins: Vec<String> = self.inputs.iter().map(|&x| typed(x)).collect();
        writeln!(f, "{{ lambda {} .", ins.join(" "))?;
        for (c, t) in &self.consts {
            let kind = if t.is_contiguous() { "" } else { " (strided)" };
            writeln!(f, "{pad}  {} = const{kind}", typed(*c))?;
        }
        for e in &self.eqns {
            let args: Vec<String> = e.inputs.iter().map(|&x| v(x)).collect();
            let outs: Vec<String> = e.outs.iter().map(|&x| typed(x)).collect();
            match &e.op {
                Op::Prim(p) => {
                    let line = format!(
                        "{pad}  {} = {}{} {}",
                        outs.join(" "),
                        p.name(),
                        params(p),
                        args.join(" ")
                    );
                    writeln!(f, "{}", line.trim_end())?;
                }
                Op::Loop(lp) => {
                    write!(
                        f,
                        "{pad}  {} = scan{{length: {}, consts: {}, carry: {}, reverse: {}}} {} ",
                        outs.join(" "),
                        lp.length,
                        lp.n_consts,
                        lp.n_carry,
                        lp.reverse,
                        args.join(" ")
                    )?;
                    lp.body.write_indented(f, depth + 1)?;
                    writeln!(f)?;
                }
            }
        }
        for (i, x) in &self.writebacks {
            writeln!(f, "{pad}  {} <- {}", v(self.inputs[*i]), v(*x))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|&x| v(x)).collect();
        write!(f, "{pad}  in ({}) }}", outs.join(", "))
    }
}

impl fmt::Debug for Graph {
    /// Structure only (constants by shape and dtype), for reading; the cache
    /// key is [`Graph::structure_key`]'s digest of the same structure.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "in {:?}",
            self.inputs
                .iter()
                .map(|&x| fmt_aval(&self.avals[x]))
                .collect::<Vec<_>>()
        )?;
        for (c, t) in &self.consts {
            writeln!(
                f,
                "const {c} {} contiguous={}",
                fmt_aval(&self.avals[*c]),
                t.is_contiguous()
            )?;
        }
        for e in &self.eqns {
            let outs: Vec<String> = e
                .outs
                .iter()
                .map(|&o| format!("{o} {}", fmt_aval(&self.avals[o])))
                .collect();
            match &e.op {
                Op::Prim(p) => writeln!(f, "{} = {:?} {:?}", outs.join(", "), p, e.inputs)?,
                Op::Loop(lp) => writeln!(
                    f,
                    "{} = scan length={} consts={} carry={} reverse={} {:?} body {{\n{:?}\n}}",
                    outs.join(", "),
                    lp.length,
                    lp.n_consts,
                    lp.n_carry,
                    lp.reverse,
                    e.inputs,
                    lp.body
                )?,
            }
        }
        writeln!(f, "wb {:?}", self.writebacks)?;
        write!(f, "out {:?}", self.outputs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nx::DType;

    /// `x + fill` over `[n]` with the fill's value `value`.
    fn add_fill(n: usize, value: f64) -> Graph {
        let mut g = Graph::default();
        let x = g.new_var(Aval::new(&[n], DType::F32));
        g.inputs = vec![x];
        let c = g.new_var(Aval::new(&[n], DType::F32));
        g.eqns.push(Eqn::prim(
            Prim::Full {
                shape: vec![n],
                dtype: DType::F32,
                value: value.into(),
            },
            vec![],
            c,
        ));
        let y = g.new_var(Aval::new(&[n], DType::F32));
        g.eqns
            .push(Eqn::prim(Prim::Binary(nx::BinaryOp::Add), vec![x, c], y));
        g.outputs = vec![y];
        g
    }

    /// The cache key tells apart what compiles differently (a shape, a
    /// constant's bits, the sign of a zero) and nothing else.
    #[test]
    fn structure_key_separates_programs_by_shape_and_constant_bits() {
        let k = |n, v| add_fill(n, v).structure_key();
        assert_eq!(k(4, 1.5), k(4, 1.5), "the same program, the same key");
        assert_ne!(k(4, 1.5), k(5, 1.5), "another shape");
        assert_ne!(k(4, 1.5), k(4, 2.5), "another constant");
        assert_ne!(k(4, 0.0), k(4, -0.0), "0.0 and -0.0 compile differently");
        assert_eq!(
            k(4, f64::NAN),
            k(4, f64::NAN),
            "a NaN fill keys like itself"
        );
    }
}
