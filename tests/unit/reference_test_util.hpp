#pragma once
// Helpers of the reference-executor unit tests (test_reference_*.cpp): tensor literals, a runner for
// one op with attributes and opset, and checks of values with a tolerance.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "mapper/reference/kernels.hpp"

namespace reftest {

using namespace tessera;
using tessera::graph::Attributes;
using tessera::reference::OpCall;

inline Tensor f32(Shape s, std::vector<float> v) { return Tensor::from_f32(std::move(s), std::move(v)); }
inline Tensor i64(Shape s, std::vector<int64_t> v) { return Tensor::from_i64(std::move(s), std::move(v)); }
inline Tensor ints(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_i64({n}, std::move(v));
}
inline Tensor boolean(Shape s, std::vector<int64_t> v) { return i64(std::move(s), std::move(v)).cast(DType::boolean); }

struct Run {
  std::string op;
  std::vector<const Tensor*> inputs;
  Attributes attrs;
  int opset = 17;
  size_t num_outputs = 1;

  std::vector<Tensor> all() const {
    OpCall c;
    c.op = op;
    c.node = "n_" + op;
    c.opset = opset;
    c.attrs = &attrs;
    c.inputs = inputs;
    c.num_outputs = num_outputs;
    return reference::run_op(c);
  }
  Tensor one() const {
    auto r = all();
    REQUIRE(r.size() == 1);
    return r[0];
  }
};

inline Run op(std::string name, std::vector<const Tensor*> inputs, int opset = 17) {
  Run r;
  r.op = std::move(name);
  r.inputs = std::move(inputs);
  r.opset = opset;
  return r;
}

inline void check_f32(const Tensor& t, const Shape& shape, const std::vector<double>& want, double tol = 1e-5) {
  INFO("shape " << shape_str(t.shape()) << " want " << shape_str(shape));
  REQUIRE(t.dtype() == DType::f32);
  REQUIRE(t.shape() == shape);
  const auto got = t.to_f64();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    if (std::isnan(want[i]))
      CHECK(std::isnan(got[i]));
    else
      CHECK(got[i] == Approx(want[i]).margin(tol).epsilon(tol));
  }
}

inline void check_i64(const Tensor& t, DType dt, const Shape& shape, const std::vector<int64_t>& want) {
  REQUIRE(t.dtype() == dt);
  REQUIRE(t.shape() == shape);
  CHECK(t.to_i64() == want);
}

// Runs and returns the InputError's text (fails the test if nothing is thrown).
inline std::string error_of(const Run& r) {
  try {
    r.all();
  } catch (const InputError& e) {
    return e.what();
  }
  FAIL("no InputError thrown for " << r.op);
  return {};
}

}  // namespace reftest
