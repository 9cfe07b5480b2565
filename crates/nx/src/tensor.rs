//! `Tensor`: a cheap-to-clone handle on either a concrete value (dtype, layout,
//! shared storage) or a tracer owned by a transformation. Accessors that only
//! need the abstract value (shape, dtype) work on both; reading data goes
//! through the tracer, which may refuse.

use crate::dtype::{DType, Element};
use crate::layout::Layout;
use crate::prim::Aval;
use crate::shape::numel;
use crate::storage::Storage;
use crate::trace::Tracer;
use std::sync::Arc;

/// An n-dimensional array. `Clone` gives another handle on the same data.
#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<Repr>);

pub(crate) enum Repr {
    Value(Value),
    Traced(Box<dyn Tracer>),
}

/// A concrete tensor: where its elements live and how they are laid out.
pub(crate) struct Value {
    pub dtype: DType,
    pub layout: Layout,
    pub storage: Arc<Storage>,
}

impl Tensor {
    pub(crate) fn from_value(dtype: DType, layout: Layout, storage: Arc<Storage>) -> Tensor {
        Tensor(Arc::new(Repr::Value(Value {
            dtype,
            layout,
            storage,
        })))
    }

    /// A fresh contiguous tensor over `storage`.
    pub(crate) fn from_storage(dtype: DType, shape: &[usize], storage: Storage) -> Tensor {
        Tensor::from_value(dtype, Layout::contiguous(shape), Arc::new(storage))
    }

    /// Wraps a transformation's tracer.
    pub fn from_tracer(tracer: impl Tracer) -> Tensor {
        Tensor(Arc::new(Repr::Traced(Box::new(tracer))))
    }

    /// The tracer behind this tensor, if it is traced.
    pub fn tracer(&self) -> Option<&dyn Tracer> {
        match &*self.0 {
            Repr::Traced(t) => Some(&**t),
            Repr::Value(_) => None,
        }
    }

    /// This handle's identity: equal for clones of one tensor, distinct for
    /// tensors alive at the same time (views of one storage included).
    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as *const u8 as usize
    }

    /// Whether this tensor is a transformation's tracer (not a concrete value).
    pub fn is_traced(&self) -> bool {
        matches!(&*self.0, Repr::Traced(_))
    }

    /// The concrete value; panics on a tracer (kernels only see concrete inputs).
    pub(crate) fn value(&self) -> &Value {
        match &*self.0 {
            Repr::Value(v) => v,
            Repr::Traced(_) => panic!("internal error: a kernel received a traced tensor"),
        }
    }

    /// A copy of `data` shaped `shape` (row-major); the dtype is `T`'s.
    /// Panics when `data.len()` is not the shape's element count.
    ///
    /// ```
    /// let x = nx::Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    /// assert_eq!(x.shape(), &[2, 2]);
    /// ```
    pub fn from_slice<T: Element>(data: &[T], shape: &[usize]) -> Tensor {
        assert_eq!(
            data.len(),
            numel(shape),
            "from_slice: {} elements do not fill shape {shape:?} ({} elements)",
            data.len(),
            numel(shape)
        );
        if T::DTYPE.is_4bit() {
            // Keep 4-bit values normalized (their low 4 bits, as casts do).
            let wrapped: Vec<T> = data.iter().map(|&v| T::from_i128(v.to_i128())).collect();
            return Tensor::from_storage(T::DTYPE, shape, Storage::from_slice(&wrapped));
        }
        Tensor::from_storage(T::DTYPE, shape, Storage::from_slice(data))
    }

    /// `data` shaped `shape` (row-major). Panics when `data.len()` is not
    /// the shape's element count.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Tensor {
        assert_eq!(
            data.len(),
            numel(shape),
            "from_vec: {} elements do not fill shape {shape:?} ({} elements)",
            data.len(),
            numel(shape)
        );
        Tensor::from_slice(&data, shape)
    }

    /// A 0-d tensor holding `value`, of `value`'s element type.
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Tensor::from_slice(&[value], &[])
    }

    /// The size of each axis (empty for a scalar).
    pub fn shape(&self) -> &[usize] {
        match &*self.0 {
            Repr::Value(v) => &v.layout.shape,
            Repr::Traced(t) => &t.aval().shape,
        }
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match &*self.0 {
            Repr::Value(v) => v.dtype,
            Repr::Traced(t) => t.aval().dtype,
        }
    }

    /// The abstract value: shape and dtype.
    pub fn aval(&self) -> Aval {
        Aval::new(self.shape(), self.dtype())
    }

    /// The number of axes (the rank).
    pub fn ndim(&self) -> usize {
        self.shape().len()
    }

    /// The number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        numel(self.shape())
    }

    /// Strides in elements of a concrete tensor (None for a tracer).
    pub fn strides(&self) -> Option<&[isize]> {
        match &*self.0 {
            Repr::Value(v) => Some(&v.layout.strides),
            Repr::Traced(_) => None,
        }
    }

    /// Offset in elements of a concrete tensor's first element in its
    /// storage (None for a tracer).
    pub fn offset(&self) -> Option<usize> {
        match &*self.0 {
            Repr::Value(v) => Some(v.layout.offset),
            Repr::Traced(_) => None,
        }
    }

    /// True for a concrete tensor laid out row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        match &*self.0 {
            Repr::Value(v) => v.layout.is_contiguous(),
            Repr::Traced(_) => false,
        }
    }

    /// True when both are concrete and share storage (one may be a view of the other).
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        match (&*self.0, &*other.0) {
            (Repr::Value(a), Repr::Value(b)) => Arc::ptr_eq(&a.storage, &b.storage),
            _ => false,
        }
    }

    /// The write count of a concrete tensor's storage (shared by every view
    /// of it), bumped by each in-place write (`assign`, `blit`); None for a
    /// tracer. One relaxed atomic load.
    ///
    /// ```
    /// let x = nx::Tensor::from_slice(&[1.0f32, 2.0], &[2]);
    /// let v = x.version().unwrap();
    /// x.narrow(0, 1, 1).assign(&nx::Tensor::scalar(5.0f32));
    /// assert_eq!(x.version(), Some(v + 1));
    /// assert_eq!(x.copy().version(), Some(0));
    /// ```
    pub fn version(&self) -> Option<u64> {
        match &*self.0 {
            Repr::Value(v) => Some(v.storage.version()),
            Repr::Traced(_) => None,
        }
    }

    /// The concrete tensor behind `self`, reading through tracers.
    fn concrete(&self) -> Tensor {
        let mut t = self.clone();
        while let Some(tr) = t.tracer() {
            t = tr.read();
        }
        t
    }

    /// The elements in row-major order (reading through tracers that allow
    /// it). Panics unless `T` is the tensor's element type.
    pub fn to_vec<T: Element>(&self) -> Vec<T> {
        if T::DTYPE != self.dtype() {
            panic!(
                "to_vec: the tensor's dtype is {} but {} elements were requested",
                self.dtype(),
                T::DTYPE
            );
        }
        let t = self.concrete();
        crate::cpu::strided::to_vec::<T>(t.value())
    }

    /// The single element of a one-element tensor. Panics unless `T` is its
    /// element type and it has exactly one element.
    pub fn item<T: Element>(&self) -> T {
        if T::DTYPE != self.dtype() {
            panic!(
                "item: the tensor's dtype is {} but a {} was requested",
                self.dtype(),
                T::DTYPE
            );
        }
        if self.numel() != 1 {
            panic!(
                "item: needs a tensor with exactly one element, got shape {:?}",
                self.shape()
            );
        }
        self.to_vec::<T>()[0]
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_traced() { "Traced" } else { "Tensor" };
        write!(f, "{kind}<{}>{:?}", self.dtype(), self.shape())
    }
}
