//! `with_debug`: a dynamic trace that logs every primitive it sees (its
//! name, output shape and dtype, one line each) and forwards it to the
//! traces below. Outermost, it also sees what the other transformations
//! emit (a backward pass, a tangent computation).

use nx::trace::{bind_below, push_trace, Trace};
use nx::{Prim, Tensor};
use std::any::Any;
use std::cell::RefCell;
use std::io::Write;
use std::rc::Rc;

/// Where the log lines go.
enum Sink {
    Stderr,
    /// Kept until the function returns, then written to the caller's writer.
    Buffer(Rc<RefCell<Vec<String>>>),
}

struct DebugTrace {
    level: usize,
    sink: Sink,
}

impl Trace for DebugTrace {
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        let name = prim.name();
        let out = bind_below(self.level, prim, inputs);
        let line = format!("{name} {:?} {}", out.shape(), out.dtype());
        match &self.sink {
            Sink::Stderr => eprintln!("{line}"),
            Sink::Buffer(lines) => lines.borrow_mut().push(line),
        }
        out
    }

    fn process_multi(
        &self,
        op: &std::sync::Arc<dyn nx::MultiOp>,
        inputs: &[&Tensor],
    ) -> Vec<Tensor> {
        let outs = nx::trace::bind_multi_below(self.level, op, inputs);
        let shapes: Vec<String> = outs
            .iter()
            .map(|o| format!("{:?} {}", o.shape(), o.dtype()))
            .collect();
        let line = format!("{} {}", op.name(), shapes.join(", "));
        match &self.sink {
            Sink::Stderr => eprintln!("{line}"),
            Sink::Buffer(lines) => lines.borrow_mut().push(line),
        }
        outs
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Runs `f`, logging each tensor operation it performs to stderr as its
/// primitive name, output shape and dtype (`mul [2, 3] f32`), one line each.
/// Outermost, it also shows the operations other transformations emit.
///
/// ```
/// use rune::prelude::*;
/// let y = rune::with_debug(|| Tensor::from_slice(&[1.0f32, 2.0], &[2]).exp());
/// assert_eq!(y.shape(), &[2]);
/// ```
pub fn with_debug<R>(f: impl FnOnce() -> R) -> R {
    let _guard = push_trace(
        |level| DebugTrace {
            level,
            sink: Sink::Stderr,
        },
        true,
    );
    f()
}

/// [`with_debug`], logging to `w` (written when `f` returns).
///
/// ```
/// use rune::prelude::*;
/// let mut log = Vec::new();
/// let x = Tensor::from_slice(&[1.0f32, 2.0], &[2]);
/// rune::with_debug_to(&mut log, || x.sin());
/// assert_eq!(String::from_utf8(log).unwrap(), "sin [2] f32\n");
/// ```
pub fn with_debug_to<R>(w: &mut dyn Write, f: impl FnOnce() -> R) -> R {
    let lines = Rc::new(RefCell::new(Vec::new()));
    let sink = Sink::Buffer(lines.clone());
    let guard = push_trace(|level| DebugTrace { level, sink }, true);
    let out = f();
    drop(guard);
    for line in lines.borrow().iter() {
        // A failing writer loses log lines, not the computation's result.
        let _ = writeln!(w, "{line}");
    }
    out
}
