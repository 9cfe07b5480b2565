//! `Display` of tensors: the exact strings, which follow numpy's `repr`
//! with its default print options (checked against numpy 2.4 when written),
//! with `tensor(` for `array(`, `true`/`false` for `True`/`False`, and the
//! shape and dtype always shown.

use nx::half::{bf16, f16};
use nx::{DType, Tensor};

#[test]
fn f32_matrix() {
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2]);
    assert_eq!(
        x.to_string(),
        "tensor([[1., 2.],\n        [3., 4.]], shape=[2, 2], dtype=f32)"
    );
}

#[test]
fn f32_fractional_columns_align() {
    let x = Tensor::from_slice(&[0.1f32, 0.25, -3.0], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([ 0.1 ,  0.25, -3.  ], shape=[3], dtype=f32)"
    );
}

#[test]
fn f32_half() {
    let x = Tensor::from_slice(&[1.0f32, 0.5], &[2]);
    assert_eq!(x.to_string(), "tensor([1. , 0.5], shape=[2], dtype=f32)");
}

#[test]
fn f64_precision_is_capped_at_8_digits() {
    let x = Tensor::from_slice(&[1.0f64 / 3.0, 2.0 / 3.0, 10.0], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([ 0.33333333,  0.66666667, 10.        ], shape=[3], dtype=f64)"
    );
}

#[test]
fn f32_shortest_digits_are_the_f32_ones() {
    let x = Tensor::from_slice(&[1.0f32 / 3.0, 2.0 / 3.0, 10.0], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([ 0.33333334,  0.6666667 , 10.        ], shape=[3], dtype=f32)"
    );
}

#[test]
fn f64_many_digits() {
    let x = Tensor::from_slice(&[std::f64::consts::PI, std::f64::consts::E], &[2]);
    assert_eq!(
        x.to_string(),
        "tensor([3.14159265, 2.71828183], shape=[2], dtype=f64)"
    );
}

#[test]
fn f64_scientific_small() {
    let x = Tensor::from_slice(&[1e-5f64, 1.5, 100.0], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([1.0e-05, 1.5e+00, 1.0e+02], shape=[3], dtype=f64)"
    );
}

#[test]
fn f64_scientific_signs_and_zero() {
    let x = Tensor::from_slice(&[-1.25e-7f64, 3e10, 0.0], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([-1.25e-07,  3.00e+10,  0.00e+00], shape=[3], dtype=f64)"
    );
}

#[test]
fn f64_three_digit_exponent() {
    let x = Tensor::from_slice(&[1e-100f64, 1.0], &[2]);
    assert_eq!(
        x.to_string(),
        "tensor([1.e-100, 1.e+000], shape=[2], dtype=f64)"
    );
}

#[test]
fn f32_scientific_large() {
    let x = Tensor::from_slice(&[1e8f32, 1.0], &[2]);
    assert_eq!(
        x.to_string(),
        "tensor([1.e+08, 1.e+00], shape=[2], dtype=f32)"
    );
}

#[test]
fn f32_threshold_in_f32() {
    let x = Tensor::from_slice(&[1e-4f32, 1.0], &[2]);
    assert_eq!(
        x.to_string(),
        "tensor([1.e-04, 1.e+00], shape=[2], dtype=f32)"
    );
}

#[test]
fn f32_scientific_many_digits() {
    let x = Tensor::from_slice(&[std::f32::consts::PI, -std::f32::consts::E, 1e7], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([ 3.1415927e+00, -2.7182817e+00,  1.0000000e+07], shape=[3], dtype=f32)"
    );
}

#[test]
fn f64_signed_zero() {
    let x = Tensor::from_slice(&[0.0f64, -0.0], &[2]);
    assert_eq!(x.to_string(), "tensor([ 0., -0.], shape=[2], dtype=f64)");
}

#[test]
fn f32_non_finite() {
    let x = Tensor::from_slice(&[f32::NAN, f32::NEG_INFINITY, 1.5], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([ nan, -inf,  1.5], shape=[3], dtype=f32)"
    );
}

#[test]
fn f32_only_non_finite() {
    let x = Tensor::from_slice(&[f32::NAN, f32::INFINITY], &[2]);
    assert_eq!(x.to_string(), "tensor([nan, inf], shape=[2], dtype=f32)");
}

#[test]
fn f16_shortest_digits_are_the_f16_ones() {
    let x = Tensor::from_slice(
        &[f16::from_f64(0.1), f16::from_f64(0.2), f16::from_f64(3.0)],
        &[3],
    );
    assert_eq!(
        x.to_string(),
        "tensor([0.1, 0.2, 3. ], shape=[3], dtype=f16)"
    );
}

#[test]
fn f16_scientific() {
    let x = Tensor::from_slice(&[f16::from_f64(0.1), f16::from_f64(1.5), f16::MAX], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([1.00e-01, 1.50e+00, 6.55e+04], shape=[3], dtype=f16)"
    );
}

#[test]
fn i32_matrix() {
    let x = Tensor::from_slice(&[-1i32, 20, 300, 4], &[2, 2]);
    assert_eq!(
        x.to_string(),
        "tensor([[ -1,  20],\n        [300,   4]], shape=[2, 2], dtype=i32)"
    );
}

#[test]
fn u8_vector() {
    let x = Tensor::from_slice(&[0u8, 255, 7], &[3]);
    assert_eq!(
        x.to_string(),
        "tensor([  0, 255,   7], shape=[3], dtype=u8)"
    );
}

#[test]
fn i64_rank3_blocks_are_separated_by_a_blank_line() {
    let x = Tensor::arange(0.0, 12.0, 1.0, DType::I64).reshape(&[2, 2, 3]);
    assert_eq!(
        x.to_string(),
        "tensor([[[ 0,  1,  2],\n         [ 3,  4,  5]],\n\n        [[ 6,  7,  8],\n         [ 9, 10, 11]]], shape=[2, 2, 3], dtype=i64)"
    );
}

#[test]
fn bool_matrix() {
    let x = Tensor::from_slice(&[true, false, false, true], &[2, 2]);
    assert_eq!(
        x.to_string(),
        "tensor([[ true, false],\n        [false,  true]], shape=[2, 2], dtype=bool)"
    );
}

#[test]
fn bool_all_true_keeps_the_width() {
    let x = Tensor::from_slice(&[true, true], &[2]);
    assert_eq!(
        x.to_string(),
        "tensor([ true,  true], shape=[2], dtype=bool)"
    );
}

#[test]
fn long_rows_wrap_at_75_columns() {
    let x = &Tensor::arange(0.0, 30.0, 1.0, DType::F64) * 1.5;
    assert_eq!(
        x.to_string(),
        "tensor([ 0. ,  1.5,  3. ,  4.5,  6. ,  7.5,  9. , 10.5, 12. , 13.5, 15. ,\n        16.5, 18. , 19.5, 21. , 22.5, 24. , 25.5, 27. , 28.5, 30. , 31.5,\n        33. , 34.5, 36. , 37.5, 39. , 40.5, 42. , 43.5], shape=[30], dtype=f64)"
    );
}

#[test]
fn long_bool_rows_wrap() {
    let x = Tensor::from_vec((0..40).map(|i| i % 2 == 0).collect::<Vec<bool>>(), &[40]);
    assert_eq!(
        x.to_string(),
        "tensor([ true, false,  true, false,  true, false,  true, false,  true,\n        false,  true, false,  true, false,  true, false,  true, false,\n         true, false,  true, false,  true, false,  true, false,  true,\n        false,  true, false,  true, false,  true, false,  true, false,\n         true, false,  true, false], shape=[40], dtype=bool)"
    );
}

#[test]
fn f64_scalar() {
    let x = Tensor::scalar(2.5f64);
    assert_eq!(x.to_string(), "tensor(2.5, shape=[], dtype=f64)");
}

#[test]
fn i32_scalar() {
    let x = Tensor::scalar(7i32);
    assert_eq!(x.to_string(), "tensor(7, shape=[], dtype=i32)");
}

#[test]
fn empty_matrix() {
    let x = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!(x.to_string(), "tensor([], shape=[0, 3], dtype=f32)");
}

#[test]
fn empty_vector() {
    let x = Tensor::zeros(&[0], DType::I32);
    assert_eq!(x.to_string(), "tensor([], shape=[0], dtype=i32)");
}

#[test]
fn elided_vector_of_2000() {
    let x = Tensor::arange(0.0, 2000.0, 1.0, DType::I32);
    assert_eq!(
        x.to_string(),
        "tensor([   0,    1,    2, ..., 1997, 1998, 1999], shape=[2000], dtype=i32)"
    );
}

#[test]
fn elided_matrix_of_2000() {
    let x = (&Tensor::arange(0.0, 2000.0, 1.0, DType::F32) / 4.0).reshape(&[40, 50]);
    assert_eq!(
        x.to_string(),
        "tensor([[0.0000e+00, 2.5000e-01, 5.0000e-01, ..., 1.1750e+01, 1.2000e+01,\n         1.2250e+01],\n        [1.2500e+01, 1.2750e+01, 1.3000e+01, ..., 2.4250e+01, 2.4500e+01,\n         2.4750e+01],\n        [2.5000e+01, 2.5250e+01, 2.5500e+01, ..., 3.6750e+01, 3.7000e+01,\n         3.7250e+01],\n        ...,\n        [4.6250e+02, 4.6275e+02, 4.6300e+02, ..., 4.7425e+02, 4.7450e+02,\n         4.7475e+02],\n        [4.7500e+02, 4.7525e+02, 4.7550e+02, ..., 4.8675e+02, 4.8700e+02,\n         4.8725e+02],\n        [4.8750e+02, 4.8775e+02, 4.8800e+02, ..., 4.9925e+02, 4.9950e+02,\n         4.9975e+02]], shape=[40, 50], dtype=f32)"
    );
}

#[test]
fn elided_rank3() {
    let x = Tensor::arange(0.0, 2000.0, 1.0, DType::F32).reshape(&[10, 10, 20]);
    assert_eq!(
        x.to_string(),
        "tensor([[[0.000e+00, 1.000e+00, 2.000e+00, ..., 1.700e+01, 1.800e+01,\n          1.900e+01],\n         [2.000e+01, 2.100e+01, 2.200e+01, ..., 3.700e+01, 3.800e+01,\n          3.900e+01],\n         [4.000e+01, 4.100e+01, 4.200e+01, ..., 5.700e+01, 5.800e+01,\n          5.900e+01],\n         ...,\n         [1.400e+02, 1.410e+02, 1.420e+02, ..., 1.570e+02, 1.580e+02,\n          1.590e+02],\n         [1.600e+02, 1.610e+02, 1.620e+02, ..., 1.770e+02, 1.780e+02,\n          1.790e+02],\n         [1.800e+02, 1.810e+02, 1.820e+02, ..., 1.970e+02, 1.980e+02,\n          1.990e+02]],\n\n        [[2.000e+02, 2.010e+02, 2.020e+02, ..., 2.170e+02, 2.180e+02,\n          2.190e+02],\n         [2.200e+02, 2.210e+02, 2.220e+02, ..., 2.370e+02, 2.380e+02,\n          2.390e+02],\n         [2.400e+02, 2.410e+02, 2.420e+02, ..., 2.570e+02, 2.580e+02,\n          2.590e+02],\n         ...,\n         [3.400e+02, 3.410e+02, 3.420e+02, ..., 3.570e+02, 3.580e+02,\n          3.590e+02],\n         [3.600e+02, 3.610e+02, 3.620e+02, ..., 3.770e+02, 3.780e+02,\n          3.790e+02],\n         [3.800e+02, 3.810e+02, 3.820e+02, ..., 3.970e+02, 3.980e+02,\n          3.990e+02]],\n\n        [[4.000e+02, 4.010e+02, 4.020e+02, ..., 4.170e+02, 4.180e+02,\n          4.190e+02],\n         [4.200e+02, 4.210e+02, 4.220e+02, ..., 4.370e+02, 4.380e+02,\n          4.390e+02],\n         [4.400e+02, 4.410e+02, 4.420e+02, ..., 4.570e+02, 4.580e+02,\n          4.590e+02],\n         ...,\n         [5.400e+02, 5.410e+02, 5.420e+02, ..., 5.570e+02, 5.580e+02,\n          5.590e+02],\n         [5.600e+02, 5.610e+02, 5.620e+02, ..., 5.770e+02, 5.780e+02,\n          5.790e+02],\n         [5.800e+02, 5.810e+02, 5.820e+02, ..., 5.970e+02, 5.980e+02,\n          5.990e+02]],\n\n        ...,\n\n        [[1.400e+03, 1.401e+03, 1.402e+03, ..., 1.417e+03, 1.418e+03,\n          1.419e+03],\n         [1.420e+03, 1.421e+03, 1.422e+03, ..., 1.437e+03, 1.438e+03,\n          1.439e+03],\n         [1.440e+03, 1.441e+03, 1.442e+03, ..., 1.457e+03, 1.458e+03,\n          1.459e+03],\n         ...,\n         [1.540e+03, 1.541e+03, 1.542e+03, ..., 1.557e+03, 1.558e+03,\n          1.559e+03],\n         [1.560e+03, 1.561e+03, 1.562e+03, ..., 1.577e+03, 1.578e+03,\n          1.579e+03],\n         [1.580e+03, 1.581e+03, 1.582e+03, ..., 1.597e+03, 1.598e+03,\n          1.599e+03]],\n\n        [[1.600e+03, 1.601e+03, 1.602e+03, ..., 1.617e+03, 1.618e+03,\n          1.619e+03],\n         [1.620e+03, 1.621e+03, 1.622e+03, ..., 1.637e+03, 1.638e+03,\n          1.639e+03],\n         [1.640e+03, 1.641e+03, 1.642e+03, ..., 1.657e+03, 1.658e+03,\n          1.659e+03],\n         ...,\n         [1.740e+03, 1.741e+03, 1.742e+03, ..., 1.757e+03, 1.758e+03,\n          1.759e+03],\n         [1.760e+03, 1.761e+03, 1.762e+03, ..., 1.777e+03, 1.778e+03,\n          1.779e+03],\n         [1.780e+03, 1.781e+03, 1.782e+03, ..., 1.797e+03, 1.798e+03,\n          1.799e+03]],\n\n        [[1.800e+03, 1.801e+03, 1.802e+03, ..., 1.817e+03, 1.818e+03,\n          1.819e+03],\n         [1.820e+03, 1.821e+03, 1.822e+03, ..., 1.837e+03, 1.838e+03,\n          1.839e+03],\n         [1.840e+03, 1.841e+03, 1.842e+03, ..., 1.857e+03, 1.858e+03,\n          1.859e+03],\n         ...,\n         [1.940e+03, 1.941e+03, 1.942e+03, ..., 1.957e+03, 1.958e+03,\n          1.959e+03],\n         [1.960e+03, 1.961e+03, 1.962e+03, ..., 1.977e+03, 1.978e+03,\n          1.979e+03],\n         [1.980e+03, 1.981e+03, 1.982e+03, ..., 1.997e+03, 1.998e+03,\n          1.999e+03]]], shape=[10, 10, 20], dtype=f32)"
    );
}

#[test]
fn exactly_1000_elements_are_not_elided() {
    let x = Tensor::arange(0.0, 1000.0, 1.0, DType::I32);
    assert_eq!(
        x.to_string(),
        "tensor([  0,   1,   2,   3,   4,   5,   6,   7,   8,   9,  10,  11,  12,\n         13,  14,  15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,\n         26,  27,  28,  29,  30,  31,  32,  33,  34,  35,  36,  37,  38,\n         39,  40,  41,  42,  43,  44,  45,  46,  47,  48,  49,  50,  51,\n         52,  53,  54,  55,  56,  57,  58,  59,  60,  61,  62,  63,  64,\n         65,  66,  67,  68,  69,  70,  71,  72,  73,  74,  75,  76,  77,\n         78,  79,  80,  81,  82,  83,  84,  85,  86,  87,  88,  89,  90,\n         91,  92,  93,  94,  95,  96,  97,  98,  99, 100, 101, 102, 103,\n        104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116,\n        117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129,\n        130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142,\n        143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155,\n        156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168,\n        169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181,\n        182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194,\n        195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207,\n        208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220,\n        221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233,\n        234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246,\n        247, 248, 249, 250, 251, 252, 253, 254, 255, 256, 257, 258, 259,\n        260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272,\n        273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285,\n        286, 287, 288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298,\n        299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311,\n        312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 323, 324,\n        325, 326, 327, 328, 329, 330, 331, 332, 333, 334, 335, 336, 337,\n        338, 339, 340, 341, 342, 343, 344, 345, 346, 347, 348, 349, 350,\n        351, 352, 353, 354, 355, 356, 357, 358, 359, 360, 361, 362, 363,\n        364, 365, 366, 367, 368, 369, 370, 371, 372, 373, 374, 375, 376,\n        377, 378, 379, 380, 381, 382, 383, 384, 385, 386, 387, 388, 389,\n        390, 391, 392, 393, 394, 395, 396, 397, 398, 399, 400, 401, 402,\n        403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415,\n        416, 417, 418, 419, 420, 421, 422, 423, 424, 425, 426, 427, 428,\n        429, 430, 431, 432, 433, 434, 435, 436, 437, 438, 439, 440, 441,\n        442, 443, 444, 445, 446, 447, 448, 449, 450, 451, 452, 453, 454,\n        455, 456, 457, 458, 459, 460, 461, 462, 463, 464, 465, 466, 467,\n        468, 469, 470, 471, 472, 473, 474, 475, 476, 477, 478, 479, 480,\n        481, 482, 483, 484, 485, 486, 487, 488, 489, 490, 491, 492, 493,\n        494, 495, 496, 497, 498, 499, 500, 501, 502, 503, 504, 505, 506,\n        507, 508, 509, 510, 511, 512, 513, 514, 515, 516, 517, 518, 519,\n        520, 521, 522, 523, 524, 525, 526, 527, 528, 529, 530, 531, 532,\n        533, 534, 535, 536, 537, 538, 539, 540, 541, 542, 543, 544, 545,\n        546, 547, 548, 549, 550, 551, 552, 553, 554, 555, 556, 557, 558,\n        559, 560, 561, 562, 563, 564, 565, 566, 567, 568, 569, 570, 571,\n        572, 573, 574, 575, 576, 577, 578, 579, 580, 581, 582, 583, 584,\n        585, 586, 587, 588, 589, 590, 591, 592, 593, 594, 595, 596, 597,\n        598, 599, 600, 601, 602, 603, 604, 605, 606, 607, 608, 609, 610,\n        611, 612, 613, 614, 615, 616, 617, 618, 619, 620, 621, 622, 623,\n        624, 625, 626, 627, 628, 629, 630, 631, 632, 633, 634, 635, 636,\n        637, 638, 639, 640, 641, 642, 643, 644, 645, 646, 647, 648, 649,\n        650, 651, 652, 653, 654, 655, 656, 657, 658, 659, 660, 661, 662,\n        663, 664, 665, 666, 667, 668, 669, 670, 671, 672, 673, 674, 675,\n        676, 677, 678, 679, 680, 681, 682, 683, 684, 685, 686, 687, 688,\n        689, 690, 691, 692, 693, 694, 695, 696, 697, 698, 699, 700, 701,\n        702, 703, 704, 705, 706, 707, 708, 709, 710, 711, 712, 713, 714,\n        715, 716, 717, 718, 719, 720, 721, 722, 723, 724, 725, 726, 727,\n        728, 729, 730, 731, 732, 733, 734, 735, 736, 737, 738, 739, 740,\n        741, 742, 743, 744, 745, 746, 747, 748, 749, 750, 751, 752, 753,\n        754, 755, 756, 757, 758, 759, 760, 761, 762, 763, 764, 765, 766,\n        767, 768, 769, 770, 771, 772, 773, 774, 775, 776, 777, 778, 779,\n        780, 781, 782, 783, 784, 785, 786, 787, 788, 789, 790, 791, 792,\n        793, 794, 795, 796, 797, 798, 799, 800, 801, 802, 803, 804, 805,\n        806, 807, 808, 809, 810, 811, 812, 813, 814, 815, 816, 817, 818,\n        819, 820, 821, 822, 823, 824, 825, 826, 827, 828, 829, 830, 831,\n        832, 833, 834, 835, 836, 837, 838, 839, 840, 841, 842, 843, 844,\n        845, 846, 847, 848, 849, 850, 851, 852, 853, 854, 855, 856, 857,\n        858, 859, 860, 861, 862, 863, 864, 865, 866, 867, 868, 869, 870,\n        871, 872, 873, 874, 875, 876, 877, 878, 879, 880, 881, 882, 883,\n        884, 885, 886, 887, 888, 889, 890, 891, 892, 893, 894, 895, 896,\n        897, 898, 899, 900, 901, 902, 903, 904, 905, 906, 907, 908, 909,\n        910, 911, 912, 913, 914, 915, 916, 917, 918, 919, 920, 921, 922,\n        923, 924, 925, 926, 927, 928, 929, 930, 931, 932, 933, 934, 935,\n        936, 937, 938, 939, 940, 941, 942, 943, 944, 945, 946, 947, 948,\n        949, 950, 951, 952, 953, 954, 955, 956, 957, 958, 959, 960, 961,\n        962, 963, 964, 965, 966, 967, 968, 969, 970, 971, 972, 973, 974,\n        975, 976, 977, 978, 979, 980, 981, 982, 983, 984, 985, 986, 987,\n        988, 989, 990, 991, 992, 993, 994, 995, 996, 997, 998, 999], shape=[1000], dtype=i32)"
    );
}

#[test]
fn non_contiguous_views_print_their_elements() {
    let x = Tensor::arange(0.0, 6.0, 1.0, DType::I32)
        .reshape(&[2, 3])
        .transpose()
        .flip(&[0]);
    assert_eq!(
        x.to_string(),
        "tensor([[2, 5],\n        [1, 4],\n        [0, 3]], shape=[3, 2], dtype=i32)"
    );
}

#[test]
fn elided_axes_only_where_long() {
    let x = Tensor::arange(0.0, 1010.0, 1.0, DType::I16).reshape(&[2, 505]);
    assert_eq!(
        x.to_string(),
        "tensor([[   0,    1,    2, ...,  502,  503,  504],\n        [ 505,  506,  507, ..., 1007, 1008, 1009]], shape=[2, 505], dtype=i16)"
    );
}

#[test]
fn sliced_view_of_a_large_tensor_is_not_elided() {
    let x = Tensor::arange(0.0, 2000.0, 1.0, DType::I32).narrow(0, 1990, 10);
    assert_eq!(
        x.to_string(),
        "tensor([1990, 1991, 1992, 1993, 1994, 1995, 1996, 1997, 1998, 1999], shape=[10], dtype=i32)"
    );
}

#[test]
fn bf16_uses_the_shortest_bf16_digits() {
    // bf16(0.1) is 0.10009765625; "0.1" already reads back as it.
    let x = Tensor::from_slice(
        &[
            bf16::from_f64(0.1),
            bf16::from_f64(1.0),
            bf16::from_f64(2.5),
        ],
        &[3],
    );
    assert_eq!(
        x.to_string(),
        "tensor([0.1, 1. , 2.5], shape=[3], dtype=bf16)"
    );
    // 1/3 needs 3 significant digits in bf16 (0.333984375).
    let y = Tensor::from_slice(&[bf16::from_f64(1.0 / 3.0)], &[1]);
    assert_eq!(y.to_string(), "tensor([0.334], shape=[1], dtype=bf16)");
}

#[test]
fn every_dtype_prints() {
    for dtype in DType::ALL {
        let x = Tensor::ones(&[2], dtype);
        let body = match dtype {
            DType::Bool => "[ true,  true]",
            d if d.is_float() => "[1., 1.]",
            _ => "[1, 1]",
        };
        assert_eq!(
            x.to_string(),
            format!("tensor({body}, shape=[2], dtype={dtype})")
        );
    }
}

#[test]
fn bool_scalar_has_no_padding() {
    assert_eq!(
        Tensor::scalar(true).to_string(),
        "tensor(true, shape=[], dtype=bool)"
    );
}

#[test]
fn debug_shows_shape_and_dtype() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    assert_eq!(format!("{x:?}"), "Tensor<f32>[2, 3]");
}

/// A tracer whose value cannot be read (as a staged or batched value).
struct Opaque(nx::Aval);

impl nx::Tracer for Opaque {
    fn aval(&self) -> &nx::Aval {
        &self.0
    }
    fn level(&self) -> usize {
        1
    }
    fn read(&self) -> Tensor {
        panic!("opaque tracer: no value")
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

#[test]
fn traced_tensors_print_their_debug_form() {
    let t = Tensor::from_tracer(Opaque(nx::Aval::new(&[2, 3], DType::F32)));
    assert_eq!(t.to_string(), "Traced<f32>[2, 3]");
    assert_eq!(format!("{t:?}"), "Traced<f32>[2, 3]");
}
