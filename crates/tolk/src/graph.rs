//! `Graph`: the staged program tolk compiles. A typed SSA list of primitive
//! applications over variables; inputs in leaf order, captured constants,
//! outputs, and writebacks (whole-tensor in-place updates of inputs).
//!
//! `Display` prints it like a jaxpr: one line per equation.

use nx::{Aval, Prim, Tensor};
use std::fmt;

/// A variable: an index into `Graph::avals`.
pub type Var = usize;

/// One primitive application: `out = prim(inputs)`.
#[derive(Clone, Debug)]
pub struct Eqn {
    /// The primitive and its static parameters.
    pub prim: Prim,
    /// The argument variables, in the primitive's order.
    pub inputs: Vec<Var>,
    /// The variable it defines.
    pub out: Var,
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

    /// The shape and dtype of `v`.
    pub fn aval(&self, v: Var) -> &Aval {
        &self.avals[v]
    }

    /// The signature of the structure the compiled code depends on: every
    /// equation, input, constant (shape and dtype, never data), output and
    /// writeback. Two graphs with equal keys compile to the same program.
    pub fn structure_key(&self) -> String {
        format!("{self:?}")
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
        let v = |v: Var| format!("%{v}");
        let typed = |x: Var| format!("%{x}:{}", fmt_aval(&self.avals[x]));
        let ins: Vec<String> = self.inputs.iter().map(|&x| typed(x)).collect();
        writeln!(f, "{{ lambda {} .", ins.join(" "))?;
        for (c, t) in &self.consts {
            let kind = if t.is_contiguous() { "" } else { " (strided)" };
            writeln!(f, "  {} = const{kind}", typed(*c))?;
        }
        for e in &self.eqns {
            let args: Vec<String> = e.inputs.iter().map(|&x| v(x)).collect();
            let line = format!(
                "  {} = {}{} {}",
                typed(e.out),
                e.prim.name(),
                params(&e.prim),
                args.join(" ")
            );
            writeln!(f, "{}", line.trim_end())?;
        }
        for (i, x) in &self.writebacks {
            writeln!(f, "  {} <- {}", v(self.inputs[*i]), v(*x))?;
        }
        let outs: Vec<String> = self.outputs.iter().map(|&x| v(x)).collect();
        write!(f, "  in ({}) }}", outs.join(", "))
    }
}

impl fmt::Debug for Graph {
    /// Structure only (constants by shape and dtype): the cache key.
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
            let a = &self.avals[e.out];
            writeln!(
                f,
                "{} {}{:?} = {:?} {:?}",
                e.out, a.dtype, a.shape, e.prim, e.inputs
            )?;
        }
        writeln!(f, "wb {:?}", self.writebacks)?;
        write!(f, "out {:?}", self.outputs)
    }
}
