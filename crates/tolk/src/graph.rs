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
        // Distinct primitives by a hash of their kind and main parameters,
        // told apart within a bucket by their parameters' bits (a `0.0`
        // and a `-0.0` fill are different programs).
        let mut prims: rustc_hash::FxHashMap<u64, Vec<(&Prim, u64)>> = Default::default();
        let mut n_prims = 0u64;
        for e in &self.eqns {
            words.push(e.out as u64);
            aval(&mut words, &self.avals[e.out]);
            let mut h = rustc_hash::FxHasher::default();
            crate::simplify::prim_hash(&e.prim, &mut h);
            let bucket = prims.entry(std::hash::Hasher::finish(&h)).or_default();
            let id = match bucket
                .iter()
                .find(|(p, _)| crate::simplify::same_prim(p, &e.prim))
            {
                Some(&(_, id)) => id,
                None => {
                    bucket.push((&e.prim, n_prims));
                    texts.extend_from_slice(format!("{n_prims}:{:?}\n", e.prim).as_bytes());
                    n_prims += 1;
                    n_prims - 1
                }
            };
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
        crate::cache::hash(&[&bytes, &texts])
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
        g.eqns.push(Eqn {
            prim: Prim::Full {
                shape: vec![n],
                dtype: DType::F32,
                value,
            },
            inputs: vec![],
            out: c,
        });
        let y = g.new_var(Aval::new(&[n], DType::F32));
        g.eqns.push(Eqn {
            prim: Prim::Binary(nx::BinaryOp::Add),
            inputs: vec![x, c],
            out: y,
        });
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
