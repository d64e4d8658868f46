// Ops that make tensors or convert them: Cast, CastLike, Constant, ConstantOfShape, Range,
// EyeLike, Size. Casts follow Tensor::cast (floats round to nearest even, float -> integer truncates
// and saturates); the fp8 targets saturate unless 'saturate' is 0.
#include <cmath>
#include <cstring>
#include <limits>

#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/reference/ops.hpp"

namespace tessera::reference {

using namespace detail;

namespace {

DType dtype_of_code(const OpCall& c, int64_t code, const char* attr) {
  switch (code) {
    case 1:
      return DType::f32;
    case 2:
      return DType::u8;
    case 3:
      return DType::i8;
    case 5:
      return DType::i16;
    case 6:
      return DType::i32;
    case 7:
      return DType::i64;
    case 9:
      return DType::boolean;
    case 10:
      return DType::f16;
    case 11:
      return DType::f64;
    case 16:
      return DType::bf16;
    case 17:
      return DType::f8e4m3;
    case 19:
      return DType::f8e5m2;
    case frontend::kCastToCbf16:
      return DType::cbf16;
    default:
      fail(c, std::string("attribute '") + attr + "' = ONNX type code " + std::to_string(code) + " is not supported",
           "supported codes: 1 float, 2 uint8, 3 int8, 5 int16, 6 int32, 7 int64, 9 bool, 10 float16, "
           "11 double, 16 bfloat16, 17 float8e4m3fn, 19 float8e5m2 (and tessera's 1001 cbfloat16)");
  }
}

Tensor cast_to(const OpCall& c, const Tensor& x, DType t) {
  if ((t == DType::f8e4m3 || t == DType::f8e5m2) && attrs(c).get_int("saturate", 1) != 0) {
    // ONNX opset 19: saturate = 1 clamps out-of-range values to the largest finite fp8 value.
    const auto v = x.to_f32();
    Tensor r(t, x.shape());
    auto dst = r.as<uint8_t>();
    for (size_t i = 0; i < v.size(); ++i) dst[i] = static_cast<uint8_t>(narrow_bits(v[i], *float_format(t), true));
    return r;
  }
  return x.cast(t);
}

std::vector<Tensor> op_cast(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (!attrs(c).has("to")) fail(c, "required attribute 'to' is missing");
  return {cast_to(c, x, dtype_of_code(c, attrs(c).get_int("to", 0), "to"))};
}

std::vector<Tensor> op_cast_like(const OpCall& c) { return {cast_to(c, in(c, 0), in(c, 1).dtype())}; }

std::vector<Tensor> op_constant(const OpCall& c) {
  const auto& at = attrs(c);
  if (at.has("value")) return {at.get_tensor("value")};
  if (at.has("value_float")) return {Tensor::scalar_f32(static_cast<float>(at.get_float("value_float", 0)))};
  if (at.has("value_floats")) {
    const auto v = at.get_floats("value_floats");
    std::vector<float> f(v.begin(), v.end());
    const int64_t n = static_cast<int64_t>(f.size());
    return {Tensor::from_f32({n}, f)};
  }
  if (at.has("value_int")) return {Tensor::from_i64({}, {at.get_int("value_int", 0)})};
  if (at.has("value_ints")) {
    const auto v = at.get_ints("value_ints");
    const int64_t n = static_cast<int64_t>(v.size());
    return {Tensor::from_i64({n}, v)};
  }
  std::string names;
  for (const auto& [k, v] : at.all()) names += (names.empty() ? "" : ", ") + k;
  fail(c, "Constant has no supported value attribute" + (names.empty() ? std::string() : " (has: " + names + ")"),
       "use value, value_float, value_floats, value_int or value_ints (sparse and string values are not supported)");
}

std::vector<Tensor> op_constant_of_shape(const OpCall& c) {
  const auto shape = int_values(c, in(c, 0), "input shape");
  require_sane_shape(c, shape, "shape");
  Tensor value = Tensor::scalar_f32(0.0f);
  if (attrs(c).has("value")) {
    value = attrs(c).get_tensor("value");
    if (value.numel() != 1) fail(c, "attribute 'value' must hold one element, got shape " + shape_str(value.shape()));
  }
  Tensor r(value.dtype(), shape);
  const size_t es = dtype_size(value.dtype());
  for (int64_t i = 0; i < r.numel(); ++i) std::memcpy(r.data() + static_cast<size_t>(i) * es, value.data(), es);
  return {std::move(r)};
}

std::vector<Tensor> op_range(const OpCall& c) {
  const Tensor& start = in(c, 0);
  const Tensor& limit = in(c, 1);
  const Tensor& delta = in(c, 2);
  require_same_dtype(c, start, limit);
  require_same_dtype(c, start, delta);
  const DType t = start.dtype();
  if (t == DType::boolean) fail(c, "Range needs numeric inputs, got bool");
  if (is_float(t)) {
    const double s = f64_scalar(c, start, "start"), l = f64_scalar(c, limit, "limit"),
                 d = f64_scalar(c, delta, "delta");
    if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
      fail(c, "delta must be non-zero and start, limit, delta finite (got " + std::to_string(s) + ", " +
                  std::to_string(l) + ", " + std::to_string(d) + ")");
    const double steps = std::max(std::ceil((l - s) / d), 0.0);
    if (steps > 1e9) fail(c, "Range would produce " + std::to_string(steps) + " elements");
    const int64_t n = static_cast<int64_t>(steps);
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = s + static_cast<double>(i) * d;
    return {from_f64(t, {n}, v)};
  }
  const int64_t s = int_scalar(c, start, "start"), l = int_scalar(c, limit, "limit"), d = int_scalar(c, delta, "delta");
  if (d == 0) fail(c, "delta must be non-zero");
  const int64_t span = l - s;
  int64_t n = span / d + ((span % d != 0 && ((span < 0) == (d < 0))) ? 1 : 0);  // ceil(span / d)
  n = std::max<int64_t>(n, 0);
  if (n > 1000000000) fail(c, "Range would produce " + std::to_string(n) + " elements");
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = s + i * d;
  return {from_i64_as(t, {n}, v)};
}

std::vector<Tensor> op_eye_like(const OpCall& c) {
  const Tensor& x = in(c, 0);
  if (x.rank() != 2) fail(c, "input of shape " + shape_str(x.shape()) + " must be 2-D");
  const DType t = attrs(c).has("dtype") ? dtype_of_code(c, attrs(c).get_int("dtype", 1), "dtype") : x.dtype();
  const int64_t k = attrs(c).get_int("k", 0), rows = x.shape()[0], cols = x.shape()[1];
  std::vector<int64_t> v(static_cast<size_t>(rows * cols), 0);
  for (int64_t i = 0; i < rows; ++i)
    if (i + k >= 0 && i + k < cols) v[static_cast<size_t>(i * cols + i + k)] = 1;
  return {Tensor::from_i64(x.shape(), v).cast(t)};
}

std::vector<Tensor> op_size(const OpCall& c) { return {Tensor::from_i64({}, {in(c, 0).numel()})}; }

}  // namespace

std::vector<OpEntry> create_ops() {
  return {
      {"Cast", op_cast},         {"CastLike", op_cast_like},
      {"Constant", op_constant}, {"ConstantOfShape", op_constant_of_shape},
      {"Range", op_range},       {"EyeLike", op_eye_like},
      {"Size", op_size},
  };
}

}  // namespace tessera::reference
