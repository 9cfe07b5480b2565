//! Programmer errors panic with a message naming the operation, what it
//! expected and what it got.

use nx::{DType, Slice, Tensor};

fn f32s(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32)
}

#[test]
#[should_panic(expected = "add: shapes [2, 3] and [4] cannot be broadcast together")]
fn shape_mismatch() {
    let _ = &f32s(&[2, 3]) + &f32s(&[4]);
}

#[test]
#[should_panic(expected = "mul: dtype mismatch: f32 and f64 (no implicit promotion")]
fn dtype_mismatch() {
    let _ = f32s(&[2]).mul(&Tensor::zeros(&[2], DType::F64));
}

#[test]
#[should_panic(expected = "less: dtype mismatch: i32 and f32")]
fn comparison_dtype_mismatch() {
    let _ = Tensor::zeros(&[2], DType::I32).less(&f32s(&[2]));
}

#[test]
#[should_panic(
    expected = "reshape: cannot reshape a tensor of shape [2, 3] (6 elements) into shape [4] (4 elements)"
)]
fn impossible_reshape() {
    let _ = f32s(&[2, 3]).reshape(&[4]);
}

#[test]
#[should_panic(expected = "permute: axis 3 is out of range for a tensor of rank 2")]
fn permute_axis_out_of_range() {
    let _ = f32s(&[2, 3]).permute(&[0, 3]);
}

#[test]
#[should_panic(expected = "permute: [0, 0] is not a permutation of the axes")]
fn permute_repeated_axis() {
    let _ = f32s(&[2, 3]).permute(&[0, 0]);
}

#[test]
#[should_panic(expected = "swapaxes: axis -3 is out of range for a tensor of rank 2")]
fn swapaxes_out_of_range() {
    let _ = f32s(&[2, 3]).swapaxes(0, -3);
}

#[test]
#[should_panic(expected = "squeeze: axis 0 has size 2, not 1")]
fn squeeze_non_unit_axis() {
    let _ = f32s(&[2, 3]).squeeze(0);
}

#[test]
#[should_panic(expected = "unsqueeze: axis 3 is out of range for a tensor of rank 3")]
fn unsqueeze_out_of_range() {
    let _ = f32s(&[2, 3]).unsqueeze(3);
}

#[test]
#[should_panic(expected = "broadcast_to: cannot broadcast shape [2, 3] to [3, 3]")]
fn broadcast_to_incompatible() {
    let _ = f32s(&[2, 3]).broadcast_to(&[3, 3]);
}

#[test]
#[should_panic(expected = "slice: 3 slices for a tensor of rank 2")]
fn too_many_slices() {
    let _ = f32s(&[2, 3]).slice(&[Slice::all(), Slice::all(), Slice::all()]);
}

#[test]
#[should_panic(expected = "slice: step must be non-zero")]
fn zero_step() {
    let _ = f32s(&[2, 3]).slice(&[Slice::all().step(0)]);
}

#[test]
#[should_panic(expected = "narrow: range 2..4 is out of bounds for axis 1 of size 3")]
fn narrow_out_of_bounds() {
    let _ = f32s(&[2, 3]).narrow(1, 2, 2);
}

#[test]
#[should_panic(expected = "get: index 2 is out of bounds for axis 0 of size 2")]
fn get_out_of_bounds() {
    let _ = f32s(&[2, 3]).get(2);
}

#[test]
#[should_panic(expected = "exp: expects a float tensor, got i32")]
fn float_op_on_integers() {
    let _ = Tensor::zeros(&[2], DType::I32).exp();
}

#[test]
#[should_panic(expected = "neg: expects a numeric tensor, got bool")]
fn numeric_op_on_bool() {
    let _ = Tensor::zeros(&[2], DType::Bool).neg();
}

#[test]
#[should_panic(expected = "shift_left: expects an integer tensor, got f32")]
fn shift_on_floats() {
    let _ = f32s(&[2]).shift_left(&f32s(&[2]));
}

#[test]
#[should_panic(expected = "where_: the condition must be bool, got f32")]
fn where_needs_bool_condition() {
    let _ = Tensor::where_(&f32s(&[2]), &f32s(&[2]), &f32s(&[2]));
}

#[test]
#[should_panic(expected = "assign: shape [3] cannot be broadcast to [2]")]
fn assign_shape_mismatch() {
    f32s(&[2]).assign(&f32s(&[3]));
}

#[test]
#[should_panic(expected = "assign: the destination is a broadcast view")]
fn assign_into_broadcast_view() {
    f32s(&[1]).broadcast_to(&[3]).assign(&f32s(&[3]));
}

#[test]
#[should_panic(expected = "to_vec: the tensor's dtype is f32 but f64 elements were requested")]
fn to_vec_wrong_type() {
    let _ = f32s(&[2]).to_vec::<f64>();
}

#[test]
#[should_panic(expected = "item: needs a tensor with exactly one element, got shape [2]")]
fn item_of_many() {
    let _ = f32s(&[2]).item::<f32>();
}

#[test]
#[should_panic(expected = "from_slice: 3 elements do not fill shape [2, 2] (4 elements)")]
fn from_slice_wrong_length() {
    let _ = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[2, 2]);
}

#[test]
#[should_panic(expected = "clamp: lower bound 2 is above upper bound 1")]
fn clamp_bounds() {
    let _ = f32s(&[2]).clamp(2.0, 1.0);
}

#[test]
#[should_panic(expected = "arange: needs finite start, end and a non-zero step")]
fn arange_zero_step() {
    let _ = Tensor::arange(0.0, 1.0, 0.0, DType::F32);
}
