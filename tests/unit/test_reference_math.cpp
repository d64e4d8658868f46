// The reference executor's elementwise math, activations, variadic ops, reductions, arg-reductions,
// CumSum and TopK. Expected values are worked out by hand or computed once with numpy from the
// formulas of the ONNX spec (noted where so), never with the executor itself.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "reference_test_util.hpp"

using namespace reftest;

TEST_CASE("reference: trigonometric, rounding and sign ops", "[reference]") {
  const Tensor x = f32({4}, {-0.5f, 0.0f, 0.25f, 0.75f});
  check_f32(op("Cos", {&x}).one(), {4}, {std::cos(-0.5), 1, std::cos(0.25), std::cos(0.75)});
  check_f32(op("Asin", {&x}).one(), {4}, {std::asin(-0.5), 0, std::asin(0.25), std::asin(0.75)});
  check_f32(op("Atanh", {&x}).one(), {4}, {std::atanh(-0.5), 0, std::atanh(0.25), std::atanh(0.75)});
  const Tensor r = f32({6}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.7f});
  check_f32(op("Round", {&r}).one(), {6}, {-2, -2, -0, 0, 2, 3});  // halves to even
  check_f32(op("Floor", {&r}).one(), {6}, {-3, -2, -1, 0, 1, 2});
  check_f32(op("Ceil", {&r}).one(), {6}, {-2, -1, -0, 1, 2, 3});
  check_f32(op("Sign", {&r}).one(), {6}, {-1, -1, -1, 1, 1, 1});
  const Tensor ri = i64({3}, {-4, 0, 9});
  check_i64(op("Sign", {&ri}).one(), DType::i64, {3}, {-1, 0, 1});
  const Tensor inf = f32({4}, {-INFINITY, 1, INFINITY, NAN});
  CHECK(op("IsInf", {&inf}).one().to_i64() == std::vector<int64_t>{1, 0, 1, 0});
  Run neg_only = op("IsInf", {&inf});
  neg_only.attrs.set("detect_positive", int64_t{0});
  CHECK(neg_only.one().to_i64() == std::vector<int64_t>{1, 0, 0, 0});
  CHECK(op("IsNaN", {&inf}).one().to_i64() == std::vector<int64_t>{0, 0, 0, 1});
  CHECK_THAT(error_of(op("Cos", {&ri})), Catch::Contains("n_Cos") && Catch::Contains("float"));
}

TEST_CASE("reference: activations follow the spec's formulas", "[reference]") {
  const Tensor x = f32({5}, {-2, -0.5f, 0, 1, 3});
  // Values from numpy with the spec's formulas (default attributes).
  check_f32(op("HardSigmoid", {&x}).one(), {5}, {0.1, 0.4, 0.5, 0.7, 1.0});
  check_f32(op("HardSwish", {&x}).one(), {5}, {-0.3333333, -0.2083333, 0, 0.6666667, 3});
  check_f32(op("Softplus", {&x}).one(), {5}, {0.126928, 0.474077, 0.6931472, 1.3132617, 3.0485874});
  check_f32(op("Softsign", {&x}).one(), {5}, {-0.6666667, -0.3333333, 0, 0.5, 0.75});
  check_f32(op("Mish", {&x}).one(), {5}, {-0.2525015, -0.2207438, 0, 0.8650984, 2.986535});
  check_f32(op("Elu", {&x}).one(), {5}, {-0.8646647, -0.3934693, 0, 1, 3});
  check_f32(op("Selu", {&x}).one(), {5}, {-1.5201665, -0.6917582, 0, 1.050701, 3.152103});
  Run celu = op("Celu", {&x});
  celu.attrs.set("alpha", 2.0);
  check_f32(celu.one(), {5}, {-1.2642411, -0.4423984, 0, 1, 3});
  Run tr = op("ThresholdedRelu", {&x});
  tr.attrs.set("alpha", 0.5);
  check_f32(tr.one(), {5}, {0, 0, 0, 1, 3});
  Run sh = op("Shrink", {&x});
  sh.attrs.set("lambd", 0.75);
  sh.attrs.set("bias", 0.25);
  check_f32(sh.one(), {5}, {-1.75, 0, 0, 0.75, 2.75});
  // PRelu: the slope broadcasts per channel ([C, 1] against [N, C, W]).
  const Tensor px = f32({1, 2, 2}, {-1, 2, -3, 4});
  const Tensor slope = f32({2, 1}, {0.1f, 0.5f});
  check_f32(op("PRelu", {&px, &slope}).one(), {1, 2, 2}, {-0.1, 2, -1.5, 4});
  const Tensor slope_c = f32({2}, {0.1f, 0.5f});  // opset 6: one slope per channel without broadcasting rules
  check_f32(op("PRelu", {&px, &slope_c}, 6).one(), {1, 2, 2}, {-0.1, 2, -1.5, 4});
  const Tensor bad = f32({3}, {1, 2, 3});
  CHECK_THAT(error_of(op("PRelu", {&px, &bad})), Catch::Contains("slope of shape [3]"));
}

TEST_CASE("reference: Dropout is the identity outside training and refuses a random mask", "[reference]") {
  const Tensor x = f32({2, 2}, {1, -2, 3, -4});
  Run d = op("Dropout", {&x}, 13);
  d.num_outputs = 2;
  const auto r = d.all();
  check_f32(r[0], {2, 2}, {1, -2, 3, -4});
  CHECK(r[1].dtype() == DType::boolean);
  CHECK(r[1].to_i64() == std::vector<int64_t>{1, 1, 1, 1});
  const Tensor zero = Tensor::scalar_f32(0), half = Tensor::scalar_f32(0.5f), yes = boolean({}, {1});
  check_f32(op("Dropout", {&x, &zero, &yes}, 13).one(), {2, 2}, {1, -2, 3, -4});  // training, ratio 0
  CHECK_THAT(error_of(op("Dropout", {&x, &half, &yes}, 13)),
             Catch::Contains("random mask") && Catch::Contains("n_Dropout"));
  Run old = op("Dropout", {&x}, 7);  // opset 7: mask in the input's dtype
  old.num_outputs = 2;
  CHECK(old.all()[1].dtype() == DType::f32);
}

TEST_CASE("reference: variadic Min Max Sum Mean broadcast", "[reference]") {
  const Tensor a = f32({2, 2}, {1, 5, -3, 2});
  const Tensor b = f32({2}, {2, 0});
  const Tensor c = Tensor::scalar_f32(1);
  check_f32(op("Max", {&a, &b, &c}).one(), {2, 2}, {2, 5, 2, 2});
  check_f32(op("Min", {&a, &b}).one(), {2, 2}, {1, 0, -3, 0});
  check_f32(op("Sum", {&a, &b, &c}).one(), {2, 2}, {4, 6, 0, 3});
  check_f32(op("Mean", {&a, &b}).one(), {2, 2}, {1.5, 2.5, -0.5, 1});
  check_f32(op("Max", {&a}).one(), {2, 2}, {1, 5, -3, 2});
  const Tensor n = f32({2}, {NAN, 1});
  CHECK(std::isnan(op("Max", {&n, &b}).one().to_f32()[0]));  // NaN propagates, as in numpy
  const Tensor i1 = i64({3}, {1, 9, -4}).cast(DType::i8), i2 = i64({3}, {3, 2, -7}).cast(DType::i8);
  check_i64(op("Max", {&i1, &i2}).one(), DType::i8, {3}, {3, 9, -4});
  CHECK_THAT(error_of(op("Mean", {&i1, &i2})), Catch::Contains("float"));
}

TEST_CASE("reference: Mod follows the divisor's sign, or the dividend's with fmod", "[reference]") {
  const Tensor a = i64({4}, {7, -7, 7, -7});
  const Tensor b = i64({4}, {3, 3, -3, -3});
  check_i64(op("Mod", {&a, &b}).one(), DType::i64, {4}, {1, 2, -2, -1});  // Python's %
  Run fm = op("Mod", {&a, &b});
  fm.attrs.set("fmod", int64_t{1});
  check_i64(fm.one(), DType::i64, {4}, {1, -1, 1, -1});  // C's fmod
  const Tensor z = i64({4}, {0, 0, 0, 0});
  check_i64(op("Mod", {&a, &z}).one(), DType::i64, {4}, {0, 0, 0, 0});  // no trap on zero
  const Tensor fa = f32({2}, {5.5f, -5.5f}), fb = f32({2}, {2, 2});
  Run ff = op("Mod", {&fa, &fb});
  CHECK_THAT(error_of(ff), Catch::Contains("fmod"));
  ff.attrs.set("fmod", int64_t{1});
  check_f32(ff.one(), {2}, {1.5, -1.5});
}

TEST_CASE("reference: logical ops, inclusive comparisons and BitShift", "[reference]") {
  const Tensor a = boolean({4}, {0, 0, 1, 1}), b = boolean({4}, {0, 1, 0, 1});
  CHECK(op("And", {&a, &b}).one().to_i64() == std::vector<int64_t>{0, 0, 0, 1});
  CHECK(op("Or", {&a, &b}).one().to_i64() == std::vector<int64_t>{0, 1, 1, 1});
  CHECK(op("Xor", {&a, &b}).one().to_i64() == std::vector<int64_t>{0, 1, 1, 0});
  CHECK(op("Not", {&a}).one().to_i64() == std::vector<int64_t>{1, 1, 0, 0});
  const Tensor x = f32({3}, {1, 2, 3}), y = Tensor::scalar_f32(2);
  CHECK(op("GreaterOrEqual", {&x, &y}).one().to_i64() == std::vector<int64_t>{0, 1, 1});
  CHECK(op("LessOrEqual", {&x, &y}).one().to_i64() == std::vector<int64_t>{1, 1, 0});
  const Tensor u = i64({3}, {16, 4, 1}).cast(DType::u8), s = i64({3}, {1, 2, 3}).cast(DType::u8);
  Run bs = op("BitShift", {&u, &s});
  bs.attrs.set("direction", std::string("RIGHT"));
  check_i64(bs.one(), DType::u8, {3}, {8, 1, 0});
  bs.attrs.set("direction", std::string("LEFT"));
  check_i64(bs.one(), DType::u8, {3}, {32, 16, 8});
  CHECK_THAT(error_of(op("And", {&x, &x})), Catch::Contains("expected bool"));
}

TEST_CASE("reference: the Reduce family, axes as attribute or input", "[reference]") {
  const Tensor x = f32({2, 2}, {1, 2, 3, 4});
  const Tensor ax1 = ints({1});
  // Values from numpy: log(sum(exp)), sqrt(sum(x^2)), log(sum).
  check_f32(op("ReduceLogSumExp", {&x, &ax1}, 18).one(), {2, 1}, {2.3132617, 4.3132617});
  check_f32(op("ReduceL2", {&x}, 18).one(), {1, 1}, {5.4772256});
  const Tensor ax0 = ints({0});
  check_f32(op("ReduceLogSum", {&x, &ax0}, 18).one(), {1, 2}, {1.3862944, 1.7917595});
  check_f32(op("ReduceL1", {&x, &ax1}, 18).one(), {2, 1}, {3, 7});
  check_f32(op("ReduceSumSquare", {&x, &ax1}, 18).one(), {2, 1}, {5, 25});
  check_f32(op("ReduceProd", {&x}, 18).one(), {1, 1}, {24});
  Run mn = op("ReduceMin", {&x}, 13);  // opset 13: axes is an attribute
  mn.attrs.set("axes", std::vector<int64_t>{1});
  mn.attrs.set("keepdims", int64_t{0});
  check_f32(mn.one(), {2}, {1, 3});
  Run wrong = op("ReduceMin", {&x}, 18);
  wrong.attrs.set("axes", std::vector<int64_t>{1});
  CHECK_THAT(error_of(wrong), Catch::Contains("axes is an input"));
  const Tensor empty = i64({0}, {});
  Run noop = op("ReduceProd", {&x, &empty}, 18);
  noop.attrs.set("noop_with_empty_axes", int64_t{1});
  check_f32(noop.one(), {2, 2}, {1, 2, 3, 4});
  const Tensor xi = i64({2, 2}, {3, -1, 4, 2});
  check_i64(op("ReduceProd", {&xi, &ax1}, 18).one(), DType::i64, {2, 1}, {-3, 8});
  check_i64(op("ReduceMin", {&xi, &ax0}, 18).one(), DType::i64, {1, 2}, {3, -1});
}

TEST_CASE("reference: ArgMax ArgMin with keepdims and select_last_index", "[reference]") {
  const Tensor x = f32({2, 3}, {1, 5, 5, 7, 0, 7});
  Run am = op("ArgMax", {&x});
  am.attrs.set("axis", int64_t{1});
  check_i64(am.one(), DType::i64, {2, 1}, {1, 0});
  am.attrs.set("select_last_index", int64_t{1});
  check_i64(am.one(), DType::i64, {2, 1}, {2, 2});
  Run an = op("ArgMin", {&x});
  an.attrs.set("keepdims", int64_t{0});
  check_i64(an.one(), DType::i64, {3}, {0, 1, 0});
}

TEST_CASE("reference: CumSum exclusive and reverse", "[reference]") {
  const Tensor x = f32({4}, {1, 2, 3, 4});
  const Tensor axis = i64({}, {0});
  check_f32(op("CumSum", {&x, &axis}).one(), {4}, {1, 3, 6, 10});
  Run ex = op("CumSum", {&x, &axis});
  ex.attrs.set("exclusive", int64_t{1});
  check_f32(ex.one(), {4}, {0, 1, 3, 6});
  ex.attrs.set("reverse", int64_t{1});
  check_f32(ex.one(), {4}, {9, 7, 4, 0});
  const Tensor m = i64({2, 2}, {1, 2, 3, 4});
  const Tensor ax1 = i64({}, {-1}).cast(DType::i32);
  check_i64(op("CumSum", {&m, &ax1}).one(), DType::i64, {2, 2}, {1, 3, 3, 7});
}

TEST_CASE("reference: TopK largest and smallest, ties in index order", "[reference]") {
  const Tensor x = f32({2, 4}, {3, 1, 3, 2, 0, -1, 5, 5});
  const Tensor k = ints({2});
  Run t = op("TopK", {&x, &k});
  t.num_outputs = 2;
  auto r = t.all();
  check_f32(r[0], {2, 2}, {3, 3, 5, 5});
  check_i64(r[1], DType::i64, {2, 2}, {0, 2, 2, 3});
  t.attrs.set("largest", int64_t{0});
  r = t.all();
  check_f32(r[0], {2, 2}, {1, 2, -1, 0});
  check_i64(r[1], DType::i64, {2, 2}, {1, 3, 1, 0});
  const Tensor one = ints({1});
  Run axis0 = op("TopK", {&x, &one});
  axis0.attrs.set("axis", int64_t{0});
  check_f32(axis0.all()[0], {1, 4}, {3, 1, 5, 5});
  const Tensor five = ints({5});
  CHECK_THAT(error_of(op("TopK", {&x, &five})), Catch::Contains("k = 5"));
  Run old = op("TopK", {&x}, 9);  // opset 9: k is an attribute
  old.attrs.set("k", int64_t{1});
  check_f32(old.all()[0], {2, 1}, {3, 5});
}
