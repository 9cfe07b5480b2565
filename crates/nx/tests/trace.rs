//! Interception through `bind`: a trace sees every primitive an operation
//! emits, tracers report abstract shapes, and reading a traced value goes
//! through its tracer.

use nx::{bind_below, push_trace, Aval, DType, Prim, Tensor, Trace, Tracer};
use std::any::Any;
use std::cell::RefCell;
use std::rc::Rc;

/// A dynamic trace that records primitive names and forwards to the trace below.
struct Recorder {
    level: usize,
    log: Rc<RefCell<Vec<String>>>,
}

impl Trace for Recorder {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        self.log.borrow_mut().push(prim.name());
        bind_below(self.level, prim, inputs)
    }
}

fn record(f: impl FnOnce()) -> Vec<String> {
    let log = Rc::new(RefCell::new(vec![]));
    {
        let l = log.clone();
        let _g = push_trace(move |level| Recorder { level, log: l }, true);
        f();
    }
    let v = log.borrow().clone();
    v
}

#[test]
fn recorder_sees_every_primitive_of_a_composite() {
    let x = Tensor::from_slice(&[0.0f32, 1.0], &[2]);
    let mut y = None;
    let log = record(|| y = Some((&x * 2.0 + 1.0).exp()));
    assert_eq!(
        log,
        [
            "full",
            "broadcast",
            "mul",
            "full",
            "broadcast",
            "add",
            "exp"
        ]
    );
    // Forwarded to the eager backend: the value is right.
    let v = y.unwrap().to_vec::<f32>();
    assert!((v[0] - 1f32.exp()).abs() < 1e-6 && (v[1] - 3f32.exp()).abs() < 1e-5);
}

#[test]
fn recorder_sees_views_and_creation() {
    let x = Tensor::from_slice(&[1i32, 2, 3, 4, 5, 6], &[2, 3]);
    let log = record(|| {
        let _ = x.transpose().reshape(&[6]);
        let _ = Tensor::zeros(&[2], DType::F32);
        let _ = x.flip(&[1]).get(0);
    });
    assert_eq!(
        log,
        ["permute", "reshape", "full", "flip", "slice", "reshape"]
    );
}

/// A trace of abstract values: it propagates shapes and dtypes only.
struct Abstract {
    level: usize,
}

struct AbstractTracer {
    aval: Aval,
    level: usize,
}

impl Tracer for AbstractTracer {
    fn aval(&self) -> &Aval {
        &self.aval
    }
    fn level(&self) -> usize {
        self.level
    }
    fn read(&self) -> Tensor {
        panic!("abstract: cannot read the value of an abstract tensor");
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Trace for Abstract {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        let avals: Vec<Aval> = inputs.iter().map(|t| t.aval()).collect();
        let refs: Vec<&Aval> = avals.iter().collect();
        Tensor::from_tracer(AbstractTracer {
            aval: prim.out_aval(&refs),
            level: self.level,
        })
    }
}

#[test]
fn tracers_report_abstract_shapes_and_refuse_reads() {
    let _g = push_trace(|level| Abstract { level }, false);
    let t = Tensor::from_tracer(AbstractTracer {
        aval: Aval::new(&[2, 3], DType::F32),
        level: _g.level(),
    });
    let c = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[3]);
    let y = (&t + &c).exp().transpose();
    assert!(y.is_traced());
    assert_eq!(y.shape(), &[3, 2]);
    assert_eq!(y.dtype(), DType::F32);
    let z = y.reshape(&[6]).unsqueeze(0);
    assert_eq!(z.shape(), &[1, 6]);
    // Concrete values alone are not seen by a non-dynamic trace.
    assert!(!(&c * 2.0).is_traced());
    let err =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| y.to_vec::<f32>())).unwrap_err();
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(
        msg.contains("cannot read the value of an abstract tensor"),
        "{msg}"
    );
}

/// A trace whose tracers carry their value: reading forwards to it.
struct Forwarding {
    level: usize,
}

struct ValueTracer {
    aval: Aval,
    level: usize,
    value: Tensor,
}

impl Tracer for ValueTracer {
    fn aval(&self) -> &Aval {
        &self.aval
    }
    fn level(&self) -> usize {
        self.level
    }
    fn read(&self) -> Tensor {
        self.value.clone()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Forwarding {
    fn lift(&self, t: &Tensor) -> Tensor {
        match t
            .tracer()
            .and_then(|tr| tr.as_any().downcast_ref::<ValueTracer>())
        {
            Some(v) if v.level == self.level => v.value.clone(),
            _ => t.clone(),
        }
    }
}

impl Trace for Forwarding {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn process(&self, prim: Prim, inputs: &[&Tensor]) -> Tensor {
        let vals: Vec<Tensor> = inputs.iter().map(|t| self.lift(t)).collect();
        let refs: Vec<&Tensor> = vals.iter().collect();
        let value = bind_below(self.level, prim, &refs);
        Tensor::from_tracer(ValueTracer {
            aval: value.aval(),
            level: self.level,
            value,
        })
    }
}

#[test]
fn reading_a_tracer_goes_through_its_trace() {
    let g = push_trace(|level| Forwarding { level }, false);
    let x = Tensor::from_slice(&[3.0f64, 4.0], &[2]);
    let t = Tensor::from_tracer(ValueTracer {
        aval: x.aval(),
        level: g.level(),
        value: x,
    });
    let y = (&t * &t).get(1);
    assert!(y.is_traced());
    assert_eq!(y.item::<f64>(), 16.0);
    assert_eq!((&t + 1.0).to_vec::<f64>(), vec![4.0, 5.0]);
}

#[test]
fn nested_traces_the_dynamic_one_on_top_sees_the_lower_traces_work() {
    let g = push_trace(|level| Forwarding { level }, false);
    let x = Tensor::from_slice(&[2.0f32], &[1]);
    let t = Tensor::from_tracer(ValueTracer {
        aval: x.aval(),
        level: g.level(),
        value: x,
    });
    let log = record(|| {
        let y = t.exp();
        assert!(y.is_traced());
    });
    // The recorder (level 2) sees the op first; it forwards below, to the
    // forwarding trace (level 1), whose own eager call happens below both.
    assert_eq!(log, ["exp"]);
    drop(g);
}

#[test]
#[should_panic(expected = "used outside the transformation that created it")]
fn escaped_tracers_are_refused() {
    let t = {
        let g = push_trace(|level| Abstract { level }, false);
        Tensor::from_tracer(AbstractTracer {
            aval: Aval::new(&[2], DType::F32),
            level: g.level(),
        })
    };
    let _ = t.exp();
}
