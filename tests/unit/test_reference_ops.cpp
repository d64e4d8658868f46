// The reference executor's operators (mapper/reference): small hand-checked cases per op, opset
// differences, dtype handling and error messages. Values are worked out by hand or, where noted,
// generated once with torch and pasted.
#include <catch2/catch.hpp>
#include <fstream>
#include <set>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "isa/error.hpp"
#include "mapper/reference/kernels.hpp"
#include "reference_test_util.hpp"

using namespace tessera;
using tessera::graph::Attributes;
using tessera::reference::OpCall;

using namespace reftest;

// ---- elementwise -------------------------------------------------------------------------------

TEST_CASE("reference: Add Sub Mul Div broadcast numpy-style", "[reference]") {
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = f32({3}, {10, 20, 30});
  check_f32(op("Add", {&a, &b}).one(), {2, 3}, {11, 22, 33, 14, 25, 36});
  check_f32(op("Sub", {&a, &b}).one(), {2, 3}, {-9, -18, -27, -6, -15, -24});
  check_f32(op("Mul", {&a, &b}).one(), {2, 3}, {10, 40, 90, 40, 100, 180});
  check_f32(op("Div", {&b, &a}).one(), {2, 3}, {10, 10, 10, 2.5, 4, 5});
  // [2,1] with [1,3] -> [2,3]; scalar with anything.
  const Tensor col = f32({2, 1}, {1, 2});
  const Tensor row = f32({1, 3}, {10, 20, 30});
  check_f32(op("Add", {&col, &row}).one(), {2, 3}, {11, 21, 31, 12, 22, 32});
  const Tensor s = Tensor::scalar_f32(2);
  check_f32(op("Mul", {&s, &a}).one(), {2, 3}, {2, 4, 6, 8, 10, 12});
  check_f32(op("Add", {&s, &s}).one(), {}, {4});
}

TEST_CASE("reference: integer arithmetic keeps the integer dtype", "[reference]") {
  const Tensor a = i64({4}, {7, -7, 9, 100});
  const Tensor b = i64({4}, {2, 2, -4, 7});
  check_i64(op("Div", {&a, &b}).one(), DType::i64, {4}, {3, -3, -2, 14});  // truncates toward zero
  check_i64(op("Mul", {&a, &b}).one(), DType::i64, {4}, {14, -14, -36, 700});
  check_i64(op("Sub", {&a, &b}).one(), DType::i64, {4}, {5, -9, 13, 93});
  const Tensor a32 = a.cast(DType::i32), one32 = i64({}, {1}).cast(DType::i32);
  check_i64(op("Add", {&a32, &one32}).one(), DType::i32, {4}, {8, -6, 10, 101});
  const Tensor u = i64({2}, {250, 3}).cast(DType::u8), v = i64({2}, {10, 4}).cast(DType::u8);
  check_i64(op("Add", {&u, &v}).one(), DType::u8, {2}, {4, 7});  // wraps like uint8
  check_i64(op("Neg", {&a}).one(), DType::i64, {4}, {-7, 7, -9, -100});
  check_i64(op("Abs", {&b}).one(), DType::i64, {4}, {2, 2, 4, 7});
  check_i64(op("Relu", {&a}).one(), DType::i64, {4}, {7, 0, 9, 100});
}

TEST_CASE("reference: Pow with float and integer exponents", "[reference]") {
  const Tensor x = f32({3}, {2, 3, 4});
  const Tensor y = f32({3}, {3, 0.5f, -1});
  check_f32(op("Pow", {&x, &y}).one(), {3}, {8, std::sqrt(3.0), 0.25});
  const Tensor e = i64({}, {2});
  check_f32(op("Pow", {&x, &e}).one(), {3}, {4, 9, 16});  // T1 = int64, output float
  const Tensor xi = i64({3}, {2, 3, -2});
  const Tensor ei = i64({3}, {10, 3, 3});
  check_i64(op("Pow", {&xi, &ei}).one(), DType::i64, {3}, {1024, 27, -8});
}

TEST_CASE("reference: Equal Less Greater give bool with broadcasting", "[reference]") {
  const Tensor a = f32({2, 2}, {1, 2, 3, 4});
  const Tensor b = f32({2}, {2, 3});
  const Tensor eq = op("Equal", {&a, &b}).one();
  REQUIRE(eq.dtype() == DType::boolean);
  REQUIRE(eq.shape() == Shape{2, 2});
  CHECK(eq.to_i64() == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(op("Less", {&a, &b}).one().to_i64() == std::vector<int64_t>{1, 1, 0, 0});
  CHECK(op("Greater", {&a, &b}).one().to_i64() == std::vector<int64_t>{0, 0, 1, 1});
  const Tensor ia = i64({3}, {5, 6, 7}), ib = i64({}, {6});
  CHECK(op("Equal", {&ia, &ib}).one().to_i64() == std::vector<int64_t>{0, 1, 0});
  const Tensor t = boolean({2}, {1, 0}), u = boolean({2}, {1, 1});
  CHECK(op("Equal", {&t, &u}).one().to_i64() == std::vector<int64_t>{1, 0});
}

TEST_CASE("reference: unary math and activations", "[reference]") {
  const Tensor x = f32({4}, {-1, 0.5f, 1, 2});
  check_f32(op("Neg", {&x}).one(), {4}, {1, -0.5, -1, -2});
  check_f32(op("Abs", {&x}).one(), {4}, {1, 0.5, 1, 2});
  check_f32(op("Relu", {&x}).one(), {4}, {0, 0.5, 1, 2});
  check_f32(op("Exp", {&x}).one(), {4}, {std::exp(-1.0), std::exp(0.5), std::exp(1.0), std::exp(2.0)});
  check_f32(op("Tanh", {&x}).one(), {4}, {std::tanh(-1.0), std::tanh(0.5), std::tanh(1.0), std::tanh(2.0)});
  check_f32(op("Sigmoid", {&x}).one(), {4}, {0.2689414214, 0.6224593312, 0.7310585786, 0.8807970780});
  check_f32(op("Reciprocal", {&x}).one(), {4}, {-1, 2, 1, 0.5});
  check_f32(op("Erf", {&x}).one(), {4}, {-0.8427008, 0.5204999, 0.8427008, 0.9953223});
  const Tensor p = f32({3}, {4, 1, 0.25f});
  check_f32(op("Sqrt", {&p}).one(), {3}, {2, 1, 0.5});
  check_f32(op("Log", {&p}).one(), {3}, {std::log(4.0), 0, std::log(0.25)});
  const Tensor neg = f32({1}, {-1});
  CHECK(std::isnan(op("Sqrt", {&neg}).one().to_f32()[0]));

  Run lr = op("LeakyRelu", {&x});
  check_f32(lr.one(), {4}, {-0.01, 0.5, 1, 2});  // default alpha 0.01
  lr.attrs.set("alpha", 0.2);
  check_f32(lr.one(), {4}, {-0.2, 0.5, 1, 2});

  // Gelu: values from torch.nn.functional.gelu.
  Run g = op("Gelu", {&x}, 20);
  check_f32(g.one(), {4}, {-0.1586553, 0.3457312, 0.8413447, 1.9545000});
  g.attrs.set("approximate", std::string("tanh"));
  check_f32(g.one(), {4}, {-0.1588080, 0.3457140, 0.8411920, 1.9545977});
  g.attrs.set("approximate", std::string("fast"));
  CHECK_THAT(error_of(g), Catch::Contains("approximate") && Catch::Contains("n_Gelu"));
}

TEST_CASE("reference: Clip takes min/max attributes before opset 11 and inputs after", "[reference]") {
  const Tensor x = f32({5}, {-3, -1, 0, 2, 5});
  Run old = op("Clip", {&x}, 6);
  old.attrs.set("min", -1.5);
  old.attrs.set("max", 2.5);
  check_f32(old.one(), {5}, {-1.5, -1, 0, 2, 2.5});
  const Tensor lo = Tensor::scalar_f32(-1), hi = Tensor::scalar_f32(1);
  check_f32(op("Clip", {&x, &lo, &hi}, 13).one(), {5}, {-1, -1, 0, 1, 1});
  check_f32(op("Clip", {&x, nullptr, &hi}, 13).one(), {5}, {-3, -1, 0, 1, 1});
  check_f32(op("Clip", {&x, &lo}, 13).one(), {5}, {-1, -1, 0, 2, 5});
  check_f32(op("Clip", {&x}, 13).one(), {5}, {-3, -1, 0, 2, 5});
  const Tensor xi = i64({3}, {-5, 0, 5}), li = i64({}, {-2}), hi2 = i64({}, {3});
  check_i64(op("Clip", {&xi, &li, &hi2}, 13).one(), DType::i64, {3}, {-2, 0, 3});
}

TEST_CASE("reference: Where broadcasts condition and branches of any dtype", "[reference]") {
  const Tensor cond = boolean({2, 1}, {1, 0});
  const Tensor x = f32({2, 2}, {1, 2, 3, 4});
  const Tensor y = Tensor::scalar_f32(-1);
  check_f32(op("Where", {&cond, &x, &y}).one(), {2, 2}, {1, 2, -1, -1});
  const Tensor xi = i64({3}, {1, 2, 3}), yi = i64({3}, {10, 20, 30});
  const Tensor c3 = boolean({3}, {0, 1, 0});
  check_i64(op("Where", {&c3, &xi, &yi}).one(), DType::i64, {3}, {10, 2, 30});
}

// ---- linear algebra ----------------------------------------------------------------------------

TEST_CASE("reference: MatMul 2-D, batched with broadcasting, and 1-D operands", "[reference]") {
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  check_f32(op("MatMul", {&a, &b}).one(), {2, 2}, {58, 64, 139, 154});
  // Batched A [2,1,2] times B [2,2]: B broadcasts over the batch.
  const Tensor ab = f32({2, 1, 2}, {1, 0, 0, 1});
  const Tensor m = f32({2, 2}, {1, 2, 3, 4});
  check_f32(op("MatMul", {&ab, &m}).one(), {2, 1, 2}, {1, 2, 3, 4});
  // Batch dims broadcast both ways: [2,1,1,2] x [3,2,1] -> [2,3,1,1].
  const Tensor p = f32({2, 1, 1, 2}, {1, 1, 2, 2});
  const Tensor q = f32({3, 2, 1}, {1, 2, 3, 4, 5, 6});
  check_f32(op("MatMul", {&p, &q}).one(), {2, 3, 1, 1}, {3, 7, 11, 6, 14, 22});
  // 1-D operands: vector @ matrix, matrix @ vector, vector @ vector.
  const Tensor v3 = f32({3}, {1, 1, 1});
  check_f32(op("MatMul", {&v3, &b}).one(), {2}, {27, 30});
  const Tensor v2 = f32({2}, {1, -1});
  check_f32(op("MatMul", {&b, &v2}).one(), {3}, {-1, -1, -1});
  check_f32(op("MatMul", {&v3, &v3}).one(), {}, {3});
  // Integer matmul stays integer.
  const Tensor ia = i64({1, 2}, {3, 4}), ib = i64({2, 1}, {5, 6});
  check_i64(op("MatMul", {&ia, &ib}).one(), DType::i64, {1, 1}, {39});
  // Inner dimension mismatch names both shapes.
  CHECK_THAT(error_of(op("MatMul", {&a, &a})), Catch::Contains("[2, 3]") && Catch::Contains("n_MatMul"));
}

TEST_CASE("reference: MatMul 128x768 @ 768x3072 is exact enough and not slow", "[reference]") {
  const int64_t M = 128, K = 768, N = 3072;
  std::vector<float> av(static_cast<size_t>(M * K)), bv(static_cast<size_t>(K * N));
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(static_cast<int>(i % 5) - 2) * 0.5f;
  const Tensor a = f32({M, K}, av), b = f32({K, N}, bv);
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor r = op("MatMul", {&a, &b}).one();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  WARN("128x768x3072 MatMul took " << secs << " s");
  CHECK(secs < 10.0);  // ~0.1 s in Release; the bound only catches pathological slowness
  REQUIRE(r.shape() == Shape{M, N});
  const auto rv = r.to_f32();
  for (int64_t i : {int64_t{0}, int64_t{77}, M - 1})
    for (int64_t j : {int64_t{0}, int64_t{1234}, N - 1}) {
      double want = 0;  // small integers and halves: exact in fp32 and fp64
      for (int64_t k = 0; k < K; ++k)
        want += static_cast<double>(av[static_cast<size_t>(i * K + k)]) * bv[static_cast<size_t>(k * N + j)];
      CHECK(rv[static_cast<size_t>(i * N + j)] == static_cast<float>(want));
    }
}

TEST_CASE("reference: Gemm alpha, beta, transposes and bias broadcast", "[reference]") {
  const Tensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor bt = f32({2, 3}, {1, 0, 1, 0, 1, 0});  // B^T: B = [[1,0],[0,1],[1,0]]
  const Tensor c_row = f32({2}, {10, 20});
  Run g = op("Gemm", {&a, &bt, &c_row});
  g.attrs.set("transB", int64_t{1});
  // A*B = [[4, 2], [10, 5]]
  check_f32(g.one(), {2, 2}, {14, 22, 20, 25});
  g.attrs.set("alpha", 2.0);
  g.attrs.set("beta", 0.5);
  check_f32(g.one(), {2, 2}, {13, 14, 25, 20});
  // transA: A^T given as [3,2]; no C.
  const Tensor at = f32({3, 2}, {1, 4, 2, 5, 3, 6});
  const Tensor b = f32({3, 2}, {1, 0, 0, 1, 1, 0});
  Run g2 = op("Gemm", {&at, &b});
  g2.attrs.set("transA", int64_t{1});
  check_f32(g2.one(), {2, 2}, {4, 2, 10, 5});
  // Scalar and [2,1] C.
  const Tensor cs = Tensor::scalar_f32(1), ccol = f32({2, 1}, {1, 2});
  check_f32(op("Gemm", {&a, &b, &cs}).one(), {2, 2}, {5, 3, 11, 6});
  check_f32(op("Gemm", {&a, &b, &ccol}).one(), {2, 2}, {5, 3, 12, 7});
  const Tensor bad_c = f32({3}, {1, 2, 3});
  CHECK_THAT(error_of(op("Gemm", {&a, &b, &bad_c})), Catch::Contains("[3]") && Catch::Contains("[2, 2]"));
}

TEST_CASE("reference: Conv 2-D with padding, strides, auto_pad, bias", "[reference]") {
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x = f32({1, 1, 3, 3}, xv);
  const Tensor w = f32({1, 1, 3, 3}, std::vector<float>(9, 1.0f));
  check_f32(op("Conv", {&x, &w}).one(), {1, 1, 1, 1}, {36});
  Run padded = op("Conv", {&x, &w});
  padded.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  check_f32(padded.one(), {1, 1, 3, 3}, {8, 15, 12, 21, 36, 27, 20, 33, 24});
  padded.attrs.set("strides", std::vector<int64_t>{2, 2});
  check_f32(padded.one(), {1, 1, 2, 2}, {8, 12, 20, 24});
  // SAME_UPPER with stride 2 on 3x3: output 2x2, total pad 2 -> 1 each side (same as above).
  Run same = op("Conv", {&x, &w});
  same.attrs.set("auto_pad", std::string("SAME_UPPER"));
  same.attrs.set("strides", std::vector<int64_t>{2, 2});
  check_f32(same.one(), {1, 1, 2, 2}, {8, 12, 20, 24});
  // 2x2 kernel SAME_UPPER stride 1: pad only at the end; SAME_LOWER: only at the start.
  const Tensor w2 = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  Run su = op("Conv", {&x, &w2});
  su.attrs.set("auto_pad", std::string("SAME_UPPER"));
  check_f32(su.one(), {1, 1, 3, 3}, {8, 12, 7, 20, 24, 13, 13, 15, 8});
  su.attrs.set("auto_pad", std::string("SAME_LOWER"));
  check_f32(su.one(), {1, 1, 3, 3}, {0, 1, 3, 3, 8, 12, 9, 20, 24});
  Run valid = op("Conv", {&x, &w2});
  valid.attrs.set("auto_pad", std::string("VALID"));
  check_f32(valid.one(), {1, 1, 2, 2}, {8, 12, 20, 24});
  // Bias and two output channels.
  const Tensor w2c = f32({2, 1, 1, 1}, {1, -1});
  const Tensor bias = f32({2}, {0.5f, 100});
  check_f32(op("Conv", {&x, &w2c, &bias}).one(), {1, 2, 3, 3},
            {0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 100, 99, 98, 97, 96, 95, 94, 93, 92});
  Run bad = op("Conv", {&x, &w});
  bad.attrs.set("auto_pad", std::string("SAME"));
  CHECK_THAT(error_of(bad), Catch::Contains("auto_pad") && Catch::Contains("n_Conv"));
}

TEST_CASE("reference: Conv groups, dilations and 1-D", "[reference]") {
  // Depthwise (group 2), dilation 2, 3x3 kernel over 5x5: values from torch.nn.functional.conv2d.
  std::vector<float> xv(50);
  for (int i = 0; i < 50; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x = f32({1, 2, 5, 5}, xv);
  const Tensor w = f32({2, 1, 3, 3}, {1, 0, -1, 2, 1, 0, 0, 1, 1, 2, 0, -2, 4, 2, 0, 0, 2, 2});
  const Tensor b = f32({2}, {0.5f, -1});
  Run c = op("Conv", {&x, &w, &b});
  c.attrs.set("group", int64_t{2});
  c.attrs.set("dilations", std::vector<int64_t>{2, 2});
  check_f32(c.one(), {1, 2, 1, 1}, {74.5, 397});
  // Grouped conv whose weight does not fit names both shapes.
  Run bad = op("Conv", {&x, &w});
  bad.attrs.set("group", int64_t{1});
  CHECK_THAT(error_of(bad), Catch::Contains("[1, 2, 5, 5]") && Catch::Contains("[2, 1, 3, 3]"));
  // 1-D: [1,1,5] * [1,1,2] stride 2, pads [1,0].
  const Tensor x1 = f32({1, 1, 5}, {1, 2, 3, 4, 5});
  const Tensor w1 = f32({1, 1, 2}, {1, 10});
  Run c1 = op("Conv", {&x1, &w1});
  c1.attrs.set("strides", std::vector<int64_t>{2});
  c1.attrs.set("pads", std::vector<int64_t>{1, 0});
  check_f32(c1.one(), {1, 1, 3}, {10, 32, 54});
}

TEST_CASE("reference: ConvTranspose 2-D strides, pads, output_padding, output_shape", "[reference]") {
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor w = f32({1, 1, 2, 2}, {1, 1, 1, 1});
  check_f32(op("ConvTranspose", {&x, &w}).one(), {1, 1, 3, 3}, {1, 3, 2, 4, 10, 6, 3, 7, 4});
  Run s2 = op("ConvTranspose", {&x, &w});
  s2.attrs.set("strides", std::vector<int64_t>{2, 2});
  check_f32(s2.one(), {1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  s2.attrs.set("output_padding", std::vector<int64_t>{1, 0});
  check_f32(s2.one(), {1, 1, 5, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4, 0, 0, 0, 0});
  // output_shape [3,3] with stride 2: total padding 1 -> begin 1, end 0 (NOTSET puts the odd one first).
  Run os = op("ConvTranspose", {&x, &w});
  os.attrs.set("strides", std::vector<int64_t>{2, 2});
  os.attrs.set("output_shape", std::vector<int64_t>{3, 3});
  check_f32(os.one(), {1, 1, 3, 3}, {1, 2, 2, 3, 4, 4, 3, 4, 4});
  // ONNX's test_convtranspose_pads: strides [3,2], pads [1,2,1,2], two output channels, plus a bias.
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x3 = f32({1, 1, 3, 3}, xv);
  const Tensor w3 = f32({1, 2, 3, 3}, std::vector<float>(18, 1.0f));
  const Tensor b3 = f32({2}, {0, 1});
  Run p = op("ConvTranspose", {&x3, &w3, &b3});
  p.attrs.set("strides", std::vector<int64_t>{3, 2});
  p.attrs.set("pads", std::vector<int64_t>{1, 2, 1, 2});
  const std::vector<double> ch = {1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15};
  std::vector<double> want = ch;
  for (double v : ch) want.push_back(v + 1);
  check_f32(p.one(), {1, 2, 7, 3}, want);
  // SAME_UPPER: output = input * stride.
  Run same = op("ConvTranspose", {&x, &w});
  same.attrs.set("auto_pad", std::string("SAME_UPPER"));
  same.attrs.set("strides", std::vector<int64_t>{2, 2});
  check_f32(same.one(), {1, 1, 4, 4}, {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // Groups: 2 input channels, W [2, 1, 1, 1] -> 2 output channels each scaling its own input.
  const Tensor xg = f32({1, 2, 1, 2}, {1, 2, 3, 4});
  const Tensor wg = f32({2, 1, 1, 1}, {10, -1});
  Run g = op("ConvTranspose", {&xg, &wg});
  g.attrs.set("group", int64_t{2});
  check_f32(g.one(), {1, 2, 1, 2}, {10, 20, -3, -4});
}

// ---- nn ----------------------------------------------------------------------------------------

TEST_CASE("reference: Softmax and LogSoftmax axis semantics by opset", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 0, 0, 0});
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), s = e1 + e2 + e3;
  check_f32(op("Softmax", {&x}).one(), {2, 3}, {e1 / s, e2 / s, e3 / s, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  check_f32(op("LogSoftmax", {&x}).one(), {2, 3},
            {1 - std::log(s), 2 - std::log(s), 3 - std::log(s), -std::log(3.0), -std::log(3.0), -std::log(3.0)});
  Run ax0 = op("Softmax", {&x});
  ax0.attrs.set("axis", int64_t{0});
  const double a = 1 / (1 + std::exp(-1.0)), b = 1 / (1 + std::exp(-2.0)), c = 1 / (1 + std::exp(-3.0));
  check_f32(ax0.one(), {2, 3}, {a, b, c, 1 - a, 1 - b, 1 - c});
  // [1,2,2]: opset 11 with the default axis 1 coerces to [1, 4] and normalises over all 4 values;
  // opset 13 with the default axis -1 normalises over pairs.
  const Tensor y = f32({1, 2, 2}, {0, 0, 0, 0});
  check_f32(op("Softmax", {&y}, 11).one(), {1, 2, 2}, {0.25, 0.25, 0.25, 0.25});
  check_f32(op("Softmax", {&y}, 13).one(), {1, 2, 2}, {0.5, 0.5, 0.5, 0.5});
  check_f32(op("LogSoftmax", {&y}, 11).one(), {1, 2, 2}, {-std::log(4.0), -std::log(4.0), -std::log(4.0), -std::log(4.0)});
  // Large values do not overflow.
  const Tensor big = f32({2}, {1000, 1000});
  check_f32(op("Softmax", {&big}).one(), {2}, {0.5, 0.5});
}

TEST_CASE("reference: LayerNormalization with scale, bias and Mean/InvStdDev outputs", "[reference]") {
  // Values from torch.nn.functional.layer_norm.
  const Tensor x = f32({2, 4}, {1, 2, 3, 4, 2, 4, 6, 9});
  const Tensor scale = f32({4}, {1, 2, 1, 1});
  const Tensor bias = f32({4}, {0, 0, 1, 0});
  Run ln = op("LayerNormalization", {&x, &scale, &bias});
  ln.num_outputs = 3;
  const auto r = ln.all();
  REQUIRE(r.size() == 3);
  check_f32(r[0], {2, 4},
            {-1.3416355, -0.8944237, 1.4472117, 1.3416355, -1.2567563, -0.9667356, 1.2900207, 1.4501036});
  check_f32(r[1], {2, 1}, {2.5, 5.25});
  check_f32(r[2], {2, 1}, {0.8944237, 0.3866943});
  // No bias, axis 0 over a [2,2] tensor: normalise all four values.
  const Tensor y = f32({2, 2}, {1, 3, 1, 3});
  const Tensor ones = f32({2, 2}, {1, 1, 1, 1});
  Run ln0 = op("LayerNormalization", {&y, &ones});
  ln0.attrs.set("axis", int64_t{0});
  ln0.attrs.set("epsilon", 0.0);
  check_f32(ln0.one(), {2, 2}, {-1, 1, -1, 1});
  const Tensor bad = f32({3}, {1, 1, 1});
  CHECK_THAT(error_of(op("LayerNormalization", {&x, &bad})), Catch::Contains("[3]") && Catch::Contains("[2, 4]"));
}

TEST_CASE("reference: BatchNormalization inference and training mode", "[reference]") {
  const Tensor x = f32({1, 2, 1, 2}, {1, 3, 10, 20});
  const Tensor scale = f32({2}, {1, 2});
  const Tensor b = f32({2}, {0, 1});
  const Tensor mean = f32({2}, {2, 10});
  const Tensor var = f32({2}, {4, 25});
  Run bn = op("BatchNormalization", {&x, &scale, &b, &mean, &var});
  bn.attrs.set("epsilon", 0.0);
  check_f32(bn.one(), {1, 2, 1, 2}, {-0.5, 0.5, 1, 5});
  // Training mode: batch statistics (mean 2 / 15, population var 1 / 25) and running averages.
  bn.attrs.set("training_mode", int64_t{1});
  bn.attrs.set("momentum", 0.5);
  bn.num_outputs = 3;
  const auto r = bn.all();
  REQUIRE(r.size() == 3);
  check_f32(r[0], {1, 2, 1, 2}, {-1, 1, -1, 3});
  check_f32(r[1], {2}, {2, 12.5});
  check_f32(r[2], {2}, {2.5, 25});
  const Tensor bad = f32({3}, {1, 1, 1});
  CHECK_THAT(error_of(op("BatchNormalization", {&x, &bad, &b, &mean, &var})),
             Catch::Contains("[3]") && Catch::Contains("[1, 2, 1, 2]"));
}

TEST_CASE("reference: ReduceSum ReduceMean ReduceMax axes, keepdims, noop_with_empty_axes", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 9});
  const Tensor ax1 = ints({1}), axm2 = ints({-2});
  const Tensor none(DType::i64, {0});  // empty axes input
  check_f32(op("ReduceSum", {&x, &ax1}, 13).one(), {2, 1}, {6, 18});
  Run s = op("ReduceSum", {&x, &axm2}, 13);
  s.attrs.set("keepdims", int64_t{0});
  check_f32(s.one(), {3}, {5, 7, 12});
  check_f32(op("ReduceSum", {&x}, 13).one(), {1, 1}, {24});  // no axes: all
  Run noop = op("ReduceSum", {&x, &none}, 13);
  noop.attrs.set("noop_with_empty_axes", int64_t{1});
  check_f32(noop.one(), {2, 3}, {1, 2, 3, 4, 5, 9});
  // Before 13, ReduceSum takes axes as an attribute; ReduceMean/ReduceMax do until 18.
  Run old = op("ReduceSum", {&x}, 11);
  old.attrs.set("axes", std::vector<int64_t>{1});
  check_f32(old.one(), {2, 1}, {6, 18});
  Run mean = op("ReduceMean", {&x}, 13);
  mean.attrs.set("axes", std::vector<int64_t>{0});
  check_f32(mean.one(), {1, 3}, {2.5, 3.5, 6});
  Run mx = op("ReduceMax", {&x}, 13);
  mx.attrs.set("axes", std::vector<int64_t>{-1});
  mx.attrs.set("keepdims", int64_t{0});
  check_f32(mx.one(), {2}, {3, 9});
  check_f32(op("ReduceMax", {&x}, 13).one(), {1, 1}, {9});
  check_f32(op("ReduceMean", {&x, &ax1}, 18).one(), {2, 1}, {2, 6});  // opset 18: axes input
  const Tensor xi = i64({2, 2}, {1, 2, 3, 4});
  check_i64(op("ReduceSum", {&xi, &ax1}, 13).one(), DType::i64, {2, 1}, {3, 7});
  Run mxi = op("ReduceMax", {&xi}, 13);
  mxi.attrs.set("axes", std::vector<int64_t>{0});
  check_i64(mxi.one(), DType::i64, {1, 2}, {3, 4});
  const Tensor ax5 = ints({5});
  CHECK_THAT(error_of(op("ReduceSum", {&x, &ax5}, 13)), Catch::Contains("out of range"));
}

TEST_CASE("reference: MaxPool and AveragePool pads, strides, ceil_mode, count_include_pad", "[reference]") {
  // Values from torch.nn.functional.{max,avg}_pool2d on arange(16) as 4x4.
  std::vector<float> xv(16);
  for (int i = 0; i < 16; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x = f32({1, 1, 4, 4}, xv);
  Run avg = op("AveragePool", {&x});
  avg.attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  check_f32(avg.one(), {1, 1, 3, 3}, {2.5, 3.5, 4.5, 6.5, 7.5, 8.5, 10.5, 11.5, 12.5});
  avg.attrs.set("strides", std::vector<int64_t>{2, 2});
  avg.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  check_f32(avg.one(), {1, 1, 3, 3}, {0, 1.5, 3, 6, 7.5, 9, 12, 13.5, 15});
  avg.attrs.set("count_include_pad", int64_t{1});
  check_f32(avg.one(), {1, 1, 3, 3}, {0, 0.75, 0.75, 3, 7.5, 4.5, 3, 6.75, 3.75});
  Run ceil = op("AveragePool", {&x});
  ceil.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  ceil.attrs.set("strides", std::vector<int64_t>{2, 2});
  ceil.attrs.set("ceil_mode", int64_t{1});
  check_f32(ceil.one(), {1, 1, 2, 2}, {5, 6.5, 11, 12.5});
  ceil.attrs.set("ceil_mode", int64_t{0});
  check_f32(ceil.one(), {1, 1, 1, 1}, {5});

  Run mp = op("MaxPool", {&x});
  mp.attrs.set("kernel_shape", std::vector<int64_t>{3, 3});
  mp.attrs.set("strides", std::vector<int64_t>{2, 2});
  mp.attrs.set("pads", std::vector<int64_t>{1, 1, 1, 1});
  mp.num_outputs = 2;
  auto r = mp.all();
  REQUIRE(r.size() == 2);
  check_f32(r[0], {1, 1, 2, 2}, {5, 7, 13, 15});
  check_i64(r[1], DType::i64, {1, 1, 2, 2}, {5, 7, 13, 15});
  mp.attrs.set("storage_order", int64_t{1});  // column-major indices: h + w * H
  check_i64(mp.all()[1], DType::i64, {1, 1, 2, 2}, {5, 13, 7, 15});
  Run same = op("MaxPool", {&x});
  same.attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  same.attrs.set("auto_pad", std::string("SAME_UPPER"));
  check_f32(same.one(), {1, 1, 4, 4}, {5, 6, 7, 7, 9, 10, 11, 11, 13, 14, 15, 15, 13, 14, 15, 15});
  same.attrs.set("auto_pad", std::string("SAME_LOWER"));
  check_f32(same.one(), {1, 1, 4, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15});
  Run dil = op("MaxPool", {&x});
  dil.attrs.set("kernel_shape", std::vector<int64_t>{2, 2});
  dil.attrs.set("dilations", std::vector<int64_t>{2, 2});
  check_f32(dil.one(), {1, 1, 2, 2}, {10, 11, 14, 15});
  // 1-D and integer MaxPool.
  const Tensor x1 = i64({1, 1, 5}, {3, 1, 4, 1, 5}).cast(DType::u8);
  Run m1 = op("MaxPool", {&x1});
  m1.attrs.set("kernel_shape", std::vector<int64_t>{2});
  check_i64(m1.one(), DType::u8, {1, 1, 4}, {3, 4, 4, 5});
  Run nok = op("MaxPool", {&x});
  CHECK_THAT(error_of(nok), Catch::Contains("kernel_shape"));
}

TEST_CASE("reference: GlobalAveragePool keeps spatial dims as 1", "[reference]") {
  const Tensor x = f32({1, 2, 2, 2}, {1, 2, 3, 4, 10, 10, 10, 14});
  check_f32(op("GlobalAveragePool", {&x}).one(), {1, 2, 1, 1}, {2.5, 11});
  const Tensor x1 = f32({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  check_f32(op("GlobalAveragePool", {&x1}).one(), {2, 1, 1}, {2, 5});
}

// ---- shape and data movement -------------------------------------------------------------------

TEST_CASE("reference: Transpose default reverses, perm permutes, any dtype", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  check_f32(op("Transpose", {&x}).one(), {3, 2}, {1, 4, 2, 5, 3, 6});
  const Tensor y = i64({2, 1, 3}, {1, 2, 3, 4, 5, 6});
  Run t = op("Transpose", {&y});
  t.attrs.set("perm", std::vector<int64_t>{1, 2, 0});
  check_i64(t.one(), DType::i64, {1, 3, 2}, {1, 4, 2, 5, 3, 6});
  t.attrs.set("perm", std::vector<int64_t>{0, 0, 1});
  CHECK_THAT(error_of(t), Catch::Contains("perm"));
}

TEST_CASE("reference: Reshape with 0, -1 and allowzero", "[reference]") {
  const Tensor x = f32({2, 3, 4}, std::vector<float>(24, 1.0f));
  const Tensor s1 = ints({0, -1});
  CHECK(op("Reshape", {&x, &s1}).one().shape() == Shape{2, 12});
  const Tensor s2 = ints({-1, 4, 1});
  CHECK(op("Reshape", {&x, &s2}).one().shape() == Shape{6, 4, 1});
  const Tensor s3 = ints({4, 0, 2});
  CHECK(op("Reshape", {&x, &s3}).one().shape() == Shape{4, 3, 2});
  // allowzero: a 0 is a real zero-size dimension.
  const Tensor empty(DType::f32, {0, 3});
  const Tensor s4 = ints({3, 0});
  Run az = op("Reshape", {&empty, &s4}, 14);
  az.attrs.set("allowzero", int64_t{1});
  CHECK(az.one().shape() == Shape{3, 0});
  const Tensor xi = i64({4}, {1, 2, 3, 4});
  const Tensor s5 = ints({2, 2});
  check_i64(op("Reshape", {&xi, &s5}).one(), DType::i64, {2, 2}, {1, 2, 3, 4});
}

TEST_CASE("reference: bad Reshape names the node and both shapes", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor s = ints({4, 2});
  const std::string e = error_of(op("Reshape", {&x, &s}));
  CHECK_THAT(e, Catch::Contains("n_Reshape") && Catch::Contains("Reshape, opset 17") && Catch::Contains("[2, 3]") &&
                    Catch::Contains("[4, 2]"));
  const Tensor s2 = ints({-1, -1});
  CHECK_THAT(error_of(op("Reshape", {&x, &s2})), Catch::Contains("more than one -1"));
  const Tensor s3 = ints({4, -1});
  CHECK_THAT(error_of(op("Reshape", {&x, &s3})), Catch::Contains("[2, 3]") && Catch::Contains("[4, -1]"));
}

TEST_CASE("reference: Flatten with positive, zero and negative axis", "[reference]") {
  const Tensor x(DType::f32, {2, 3, 4, 5});
  CHECK(op("Flatten", {&x}).one().shape() == Shape{2, 60});
  Run f = op("Flatten", {&x});
  f.attrs.set("axis", int64_t{0});
  CHECK(f.one().shape() == Shape{1, 120});
  f.attrs.set("axis", int64_t{-1});
  CHECK(f.one().shape() == Shape{24, 5});
  f.attrs.set("axis", int64_t{4});
  CHECK(f.one().shape() == Shape{120, 1});
  f.attrs.set("axis", int64_t{5});
  CHECK_THAT(error_of(f), Catch::Contains("axis 5"));
}

TEST_CASE("reference: Squeeze and Unsqueeze axes as attribute before 13, input from 13", "[reference]") {
  const Tensor x(DType::f32, {1, 3, 1, 2});
  CHECK(op("Squeeze", {&x}, 13).one().shape() == Shape{3, 2});
  const Tensor a0 = ints({0}), am2 = ints({-2});
  CHECK(op("Squeeze", {&x, &a0}, 13).one().shape() == Shape{3, 1, 2});
  CHECK(op("Squeeze", {&x, &am2}, 13).one().shape() == Shape{1, 3, 2});
  Run old = op("Squeeze", {&x}, 11);
  old.attrs.set("axes", std::vector<int64_t>{2});
  CHECK(old.one().shape() == Shape{1, 3, 2});
  const Tensor a1 = ints({1});
  CHECK_THAT(error_of(op("Squeeze", {&x, &a1}, 13)), Catch::Contains("axis 1"));

  const Tensor y = i64({3}, {1, 2, 3});
  const Tensor u = ints({0, -1});
  const Tensor r = op("Unsqueeze", {&y, &u}, 13).one();
  check_i64(r, DType::i64, {1, 3, 1}, {1, 2, 3});
  Run uold = op("Unsqueeze", {&y}, 11);
  uold.attrs.set("axes", std::vector<int64_t>{1});
  CHECK(uold.one().shape() == Shape{3, 1});
  const Tensor s = Tensor::scalar_f32(5);
  const Tensor z = ints({0});
  check_f32(op("Unsqueeze", {&s, &z}, 13).one(), {1}, {5});
  CHECK_THAT(error_of(op("Unsqueeze", {&y}, 13)), Catch::Contains("axes"));
}

TEST_CASE("reference: Concat along any axis and dtype", "[reference]") {
  const Tensor a = f32({2, 1}, {1, 2});
  const Tensor b = f32({2, 2}, {3, 4, 5, 6});
  Run c = op("Concat", {&a, &b});
  c.attrs.set("axis", int64_t{-1});
  check_f32(c.one(), {2, 3}, {1, 3, 4, 2, 5, 6});
  const Tensor ia = i64({1, 2}, {1, 2}), ib = i64({2, 2}, {3, 4, 5, 6});
  Run ci = op("Concat", {&ia, &ib});
  ci.attrs.set("axis", int64_t{0});
  check_i64(ci.one(), DType::i64, {3, 2}, {1, 2, 3, 4, 5, 6});
  Run bad = op("Concat", {&a, &b});
  bad.attrs.set("axis", int64_t{0});
  CHECK_THAT(error_of(bad), Catch::Contains("[2, 2]") && Catch::Contains("[2, 1]"));
}

TEST_CASE("reference: Split equal, by split attribute/input, uneven by num_outputs", "[reference]") {
  const Tensor x = f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Run eq = op("Split", {&x});
  eq.attrs.set("axis", int64_t{1});
  eq.num_outputs = 2;
  auto r = eq.all();
  REQUIRE(r.size() == 2);
  check_f32(r[0], {2, 2}, {1, 2, 5, 6});
  check_f32(r[1], {2, 2}, {3, 4, 7, 8});
  Run attr = op("Split", {&x}, 11);
  attr.attrs.set("axis", int64_t{-1});
  attr.attrs.set("split", std::vector<int64_t>{1, 3});
  attr.num_outputs = 2;
  r = attr.all();
  check_f32(r[0], {2, 1}, {1, 5});
  check_f32(r[1], {2, 3}, {2, 3, 4, 6, 7, 8});
  const Tensor sp = ints({3, 0, 1});
  Run inp = op("Split", {&x, &sp}, 13);
  inp.attrs.set("axis", int64_t{1});
  inp.num_outputs = 3;
  r = inp.all();
  check_f32(r[0], {2, 3}, {1, 2, 3, 5, 6, 7});
  CHECK(r[1].shape() == Shape{2, 0});
  check_f32(r[2], {2, 1}, {4, 8});
  // 5 split 3 ways -> 2, 2, 1 (opset 18 num_outputs rule).
  const Tensor y = i64({5}, {1, 2, 3, 4, 5});
  Run un = op("Split", {&y}, 18);
  un.attrs.set("num_outputs", int64_t{3});
  un.num_outputs = 3;
  r = un.all();
  check_i64(r[2], DType::i64, {1}, {5});
  const Tensor bad = ints({1, 1});
  Run b = op("Split", {&x, &bad}, 13);
  b.attrs.set("axis", int64_t{1});
  b.num_outputs = 2;
  CHECK_THAT(error_of(b), Catch::Contains("sum to 2"));
}

TEST_CASE("reference: Slice with negative, clamped, reversed and attribute forms", "[reference]") {
  std::vector<float> xv(12);
  for (int i = 0; i < 12; ++i) xv[static_cast<size_t>(i)] = static_cast<float>(i);
  const Tensor x = f32({3, 4}, xv);
  const Tensor st = ints({1}), en = ints({1000}), ax = ints({1});
  check_f32(op("Slice", {&x, &st, &en, &ax}).one(), {3, 3}, {1, 2, 3, 5, 6, 7, 9, 10, 11});
  const Tensor st2 = ints({0, -3}), en2 = ints({-1, -1});
  check_f32(op("Slice", {&x, &st2, &en2}).one(), {2, 2}, {1, 2, 5, 6});
  // Reverse axis 1 completely: start -1, end INT64_MIN, step -1.
  const Tensor st3 = ints({-1}), en3 = ints({std::numeric_limits<int64_t>::min()}), ax3 = ints({-1}), sp3 = ints({-1});
  check_f32(op("Slice", {&x, &st3, &en3, &ax3, &sp3}).one(), {3, 4}, {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  // Step 2 on axis 0 and -2 on axis 1.
  const Tensor st4 = ints({0, 3}), en4 = ints({3, 0}), ax4 = ints({0, 1}), sp4 = ints({2, -2});
  check_f32(op("Slice", {&x, &st4, &en4, &ax4, &sp4}).one(), {2, 2}, {3, 1, 11, 9});
  // Empty result.
  const Tensor st5 = ints({2}), en5 = ints({1});
  CHECK(op("Slice", {&x, &st5, &en5}).one().shape() == Shape{0, 4});
  // Opset 9: attributes.
  Run old = op("Slice", {&x}, 9);
  old.attrs.set("starts", std::vector<int64_t>{1});
  old.attrs.set("ends", std::vector<int64_t>{2});
  old.attrs.set("axes", std::vector<int64_t>{0});
  check_f32(old.one(), {1, 4}, {4, 5, 6, 7});
  // int64 data.
  const Tensor xi = i64({5}, {10, 20, 30, 40, 50});
  const Tensor s6 = ints({1}), e6 = ints({4}), a6 = ints({0}), p6 = ints({2});
  check_i64(op("Slice", {&xi, &s6, &e6, &a6, &p6}).one(), DType::i64, {2}, {20, 40});
  const Tensor zero = ints({0});
  CHECK_THAT(error_of(op("Slice", {&xi, &s6, &e6, &a6, &zero})), Catch::Contains("steps"));
}

TEST_CASE("reference: Gather along axes with negative indices", "[reference]") {
  const Tensor x = f32({3, 2}, {1, 2, 3, 4, 5, 6});
  const Tensor idx = i64({2, 2}, {0, 1, -1, 0});
  check_f32(op("Gather", {&x, &idx}).one(), {2, 2, 2}, {1, 2, 3, 4, 5, 6, 1, 2});
  Run g1 = op("Gather", {&x, &idx});
  g1.attrs.set("axis", int64_t{1});
  check_f32(g1.one(), {3, 2, 2}, {1, 2, 2, 1, 3, 4, 4, 3, 5, 6, 6, 5});
  const Tensor scalar_idx = i64({}, {2});
  check_f32(op("Gather", {&x, &scalar_idx}).one(), {2}, {5, 6});
  const Tensor i32 = i64({1}, {1}).cast(DType::i32);
  const Tensor data_i = i64({3}, {7, 8, 9});
  check_i64(op("Gather", {&data_i, &i32}).one(), DType::i64, {1}, {8});
  const Tensor oob = i64({1}, {3});
  CHECK_THAT(error_of(op("Gather", {&x, &oob})), Catch::Contains("index 3") && Catch::Contains("[3, 2]"));
}

TEST_CASE("reference: Cast between ONNX type codes", "[reference]") {
  const Tensor x = f32({4}, {1.7f, -1.7f, 0, 300.5f});
  Run c = op("Cast", {&x});
  c.attrs.set("to", int64_t{6});
  check_i64(c.one(), DType::i32, {4}, {1, -1, 0, 300});
  c.attrs.set("to", int64_t{7});
  check_i64(c.one(), DType::i64, {4}, {1, -1, 0, 300});
  c.attrs.set("to", int64_t{9});
  check_i64(c.one(), DType::boolean, {4}, {1, 1, 0, 1});
  c.attrs.set("to", int64_t{11});
  REQUIRE(c.one().dtype() == DType::f64);
  CHECK(c.one().to_f64()[0] == static_cast<double>(1.7f));
  c.attrs.set("to", int64_t{10});
  const Tensor h = c.one();
  REQUIRE(h.dtype() == DType::f16);
  CHECK(h.to_f32()[3] == 300.5f);
  CHECK(h.to_f32()[0] == 1.7001953125f);  // nearest fp16
  c.attrs.set("to", int64_t{16});
  CHECK(c.one().dtype() == DType::bf16);
  const Tensor i = i64({2}, {3, -4});
  Run ci = op("Cast", {&i});
  ci.attrs.set("to", int64_t{1});
  check_f32(ci.one(), {2}, {3, -4});
  ci.attrs.set("to", int64_t{8});
  CHECK_THAT(error_of(ci), Catch::Contains("type code 8") && Catch::Contains("n_Cast"));
}

TEST_CASE("reference: Constant, Identity, Shape and Expand", "[reference]") {
  Run k = op("Constant", {});
  k.attrs.set("value", f32({2}, {1, 2}));
  check_f32(k.one(), {2}, {1, 2});
  Run kf = op("Constant", {});
  kf.attrs.set("value_float", 0.5);
  check_f32(kf.one(), {}, {0.5});
  Run kfs = op("Constant", {});
  kfs.attrs.set("value_floats", std::vector<double>{1, 2, 3});
  check_f32(kfs.one(), {3}, {1, 2, 3});
  Run ki = op("Constant", {});
  ki.attrs.set("value_int", int64_t{7});
  check_i64(ki.one(), DType::i64, {}, {7});
  Run kis = op("Constant", {});
  kis.attrs.set("value_ints", std::vector<int64_t>{4, 5});
  check_i64(kis.one(), DType::i64, {2}, {4, 5});
  CHECK_THAT(error_of(op("Constant", {})), Catch::Contains("value"));

  const Tensor x = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(op("Identity", {&x}).one() == x);

  const Tensor y(DType::f32, {2, 3, 4, 5});
  check_i64(op("Shape", {&y}).one(), DType::i64, {4}, {2, 3, 4, 5});
  Run sh = op("Shape", {&y}, 15);
  sh.attrs.set("start", int64_t{1});
  sh.attrs.set("end", int64_t{-1});
  check_i64(sh.one(), DType::i64, {2}, {3, 4});
  sh.attrs.set("start", int64_t{-10});
  sh.attrs.set("end", int64_t{10});
  check_i64(sh.one(), DType::i64, {4}, {2, 3, 4, 5});

  const Tensor v = f32({3, 1}, {1, 2, 3});
  const Tensor s = ints({2, 1, 2});
  check_f32(op("Expand", {&v, &s}).one(), {2, 3, 2}, {1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3});
  const Tensor s1 = ints({1, 1});
  check_f32(op("Expand", {&v, &s1}).one(), {3, 1}, {1, 2, 3});  // bidirectional: keeps larger dims
  const Tensor sbad = ints({2, 2});
  CHECK_THAT(error_of(op("Expand", {&v, &sbad})), Catch::Contains("[3, 1]") && Catch::Contains("[2, 2]"));
}

// ---- dtypes and errors -------------------------------------------------------------------------

TEST_CASE("reference: fp16, bf16 and fp64 inputs keep their dtype", "[reference]") {
  const Tensor x = f32({2, 2}, {1, 2, 3, 4});
  const Tensor h = x.cast(DType::f16), bf = x.cast(DType::bf16), d = x.cast(DType::f64);
  for (const Tensor* t : {&h, &bf, &d}) {
    const Tensor r = op("MatMul", {t, t}).one();
    CHECK(r.dtype() == t->dtype());
    CHECK(r.to_f32() == std::vector<float>{7, 10, 15, 22});
    const Tensor s = op("Softmax", {t}).one();
    CHECK(s.dtype() == t->dtype());
    CHECK(op("Add", {t, t}).one().dtype() == t->dtype());
  }
  // fp64 keeps fp64 precision.
  Tensor tiny(DType::f64, {2});
  tiny.as<double>()[0] = 1.0;
  tiny.as<double>()[1] = 1e-12;
  const Tensor sum = op("ReduceSum", {&tiny}, 13).one();
  REQUIRE(sum.dtype() == DType::f64);
  CHECK(sum.as<double>()[0] == 1.0 + 1e-12);
}

TEST_CASE("reference: unsupported op names the node, op and opset", "[reference]") {
  const Tensor x = f32({1}, {1});
  Run r = op("FancyOp", {&x}, 13);
  const std::string e = error_of(r);
  CHECK_THAT(e, Catch::Contains("node 'n_FancyOp' (FancyOp, opset 13)") && Catch::Contains("not supported") &&
                    Catch::Contains("supported ops:") && Catch::Contains("MatMul"));
  // A near-miss gets a suggestion.
  CHECK_THAT(error_of(op("Matmul", {&x})), Catch::Contains("did you mean 'MatMul'"));
  CHECK_FALSE(reference::supports_op("FancyOp"));
}

TEST_CASE("reference: Add with incompatible shapes names both shapes", "[reference]") {
  const Tensor a(DType::f32, {2, 3});
  const Tensor b(DType::f32, {4});
  const std::string e = error_of(op("Add", {&a, &b}));
  CHECK_THAT(e, Catch::Contains("node 'n_Add' (Add, opset 17)") && Catch::Contains("[2, 3]") &&
                    Catch::Contains("[4]"));
  const Tensor i(DType::i64, {2, 3});
  CHECK_THAT(error_of(op("Add", {&a, &i})), Catch::Contains("fp32") && Catch::Contains("int64"));
  CHECK_THAT(error_of(op("Add", {&a})), Catch::Contains("input 1 is missing"));
}

TEST_CASE("reference: supported_ops covers the whole op set", "[reference]") {
  const std::vector<std::string> want = {
      "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
      "AveragePool", "BatchNormalization", "BitShift", "BlackmanWindow", "Cast", "CastLike", "Ceil", "Celu",
      "Clip", "Compress", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose",
      "Cos", "Cosh", "CumSum", "DepthToSpace", "DequantizeLinear", "Det", "Div", "Dropout",
      "DynamicQuantizeLinear", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor",
      "GRU", "Gather", "GatherElements", "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool",
      "Greater", "GreaterOrEqual", "GridSample", "HammingWindow", "HannWindow", "HardSigmoid", "HardSwish",
      "Hardmax", "Identity", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization",
      "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax", "MatMul", "MatMulInteger", "Max", "MaxPool",
      "MaxUnpool", "Mean", "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul", "Neg",
      "NegativeLogLikelihoodLoss", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Or", "PRelu", "Pad",
      "Pow", "QLinearConv", "QLinearMatMul", "QuantizeLinear", "RMSNormalization", "RNN", "Range", "Reciprocal", "ReduceL1",
      "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd",
      "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence", "RoiAlign", "Round",
      "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin", "Sinh",
      "Size", "Slice", "Softmax", "SoftmaxCrossEntropyLoss", "Softplus", "Softsign", "SpaceToDepth", "Split",
      "Sqrt", "Squeeze", "Sub", "Sum", "Swish", "Tan", "Tanh", "ThresholdedRelu", "Tile", "TopK", "Transpose", "Trilu",
      "Unique", "Unsqueeze", "Upsample", "Where", "Xor"};
  const auto have = reference::supported_ops();
  for (const auto& name : want) {
    INFO(name);
    CHECK(reference::supports_op(name));
    CHECK(std::find(have.begin(), have.end(), name) != have.end());
  }
  CHECK(have.size() == want.size());
  // docs/ops.md lists exactly this set (one table row per op).
  std::ifstream f(TESSERA_SOURCE_DIR "/docs/ops.md");
  REQUIRE(f);
  std::set<std::string> listed;
  for (std::string line; std::getline(f, line);)
    if (line.rfind("| `", 0) == 0) listed.insert(line.substr(3, line.find('`', 3) - 3));
  CHECK(listed == std::set<std::string>(have.begin(), have.end()));
}
