#include "mapper/reference/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "mapper/reference/ops.hpp"

namespace tessera::reference {

namespace detail {

std::string where(const OpCall& c) {
  return "node '" + c.node + "' (" + c.op + ", opset " + std::to_string(c.opset) + ")";
}

void fail(const OpCall& c, const std::string& message, const std::string& hint) {
  throw InputError(where(c), message, hint);
}

const graph::Attributes& attrs(const OpCall& c) {
  static const graph::Attributes empty;
  return c.attrs ? *c.attrs : empty;
}

const Tensor* opt_in(const OpCall& c, size_t i) { return i < c.inputs.size() ? c.inputs[i] : nullptr; }

const Tensor& in(const OpCall& c, size_t i) {
  const Tensor* t = opt_in(c, i);
  if (!t)
    fail(c, "required input " + std::to_string(i) + " is missing (" + std::to_string(c.inputs.size()) +
                " inputs given)");
  return *t;
}

std::vector<int64_t> int_values(const OpCall& c, const Tensor& t, const char* what) {
  if (is_float(t.dtype()))
    fail(c, std::string(what) + " must be an integer tensor, got " + std::string(dtype_name(t.dtype())));
  if (t.rank() > 1)
    fail(c, std::string(what) + " must be a 1-D tensor, got shape " + shape_str(t.shape()));
  return t.to_i64();
}

int64_t int_scalar(const OpCall& c, const Tensor& t, const char* what) {
  if (is_float(t.dtype()) || t.dtype() == DType::boolean)
    fail(c, std::string(what) + " must be an integer tensor, got " + std::string(dtype_name(t.dtype())));
  if (t.numel() != 1)
    fail(c, std::string(what) + " must hold one value, got shape " + shape_str(t.shape()));
  return t.to_i64()[0];
}

double f64_scalar(const OpCall& c, const Tensor& t, const char* what) {
  if (t.numel() != 1) fail(c, std::string(what) + " must hold one value, got shape " + shape_str(t.shape()));
  return t.to_f64()[0];
}

void require_index(const OpCall& c, const Tensor& t, const char* what) {
  if (t.dtype() != DType::i32 && t.dtype() != DType::i64)
    fail(c, std::string(what) + " have dtype " + std::string(dtype_name(t.dtype())) + ", expected int32 or int64");
}

int64_t norm_index(const OpCall& c, int64_t k, int64_t dim, const char* what) {
  if (k < -dim || k >= dim)
    fail(c, std::string(what) + " " + std::to_string(k) + " is out of range for a dimension of size " +
                std::to_string(dim),
         "indices must lie in [-" + std::to_string(dim) + ", " + std::to_string(dim - 1) + "]");
  return k < 0 ? k + dim : k;
}

int64_t norm_axis(const OpCall& c, int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank)
    fail(c, std::string(what) + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank),
         "use a value in [" + std::to_string(-rank) + ", " + std::to_string(rank - 1) + "]");
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> norm_axes(const OpCall& c, const std::vector<int64_t>& axes, int64_t rank, const char* what) {
  std::vector<int64_t> r;
  r.reserve(axes.size());
  for (int64_t a : axes) {
    const int64_t n = norm_axis(c, a, rank, what);
    if (std::find(r.begin(), r.end(), n) != r.end())
      fail(c, std::string(what) + " names axis " + std::to_string(n) + " twice");
    r.push_back(n);
  }
  return r;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

std::vector<int64_t> strided_map(const Shape& out, const std::vector<int64_t>& strides, int64_t offset) {
  const int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  const size_t r = out.size();
  std::vector<int64_t> idx(r, 0);
  int64_t src = offset;
  for (int64_t i = 0; i < n; ++i) {
    map[static_cast<size_t>(i)] = src;
    for (size_t d = r; d-- > 0;) {
      ++idx[d];
      src += strides[d];
      if (idx[d] < out[d]) break;
      src -= strides[d] * idx[d];
      idx[d] = 0;
    }
  }
  return map;
}

Tensor take(const Tensor& src, const Shape& out, const std::vector<int64_t>& map) {
  Tensor r(src.dtype(), out);
  const size_t es = dtype_size(src.dtype());
  std::byte* d = r.data();
  const std::byte* s = src.data();
  for (size_t i = 0; i < map.size(); ++i) std::memcpy(d + i * es, s + static_cast<size_t>(map[i]) * es, es);
  return r;
}

void require_sane_shape(const OpCall& c, const Shape& s, const char* what) {
  double n = 1, nonzero = 1;  // an empty shape's other dimensions must not overflow Tensor's count either
  for (int64_t d : s) {
    if (d < 0) fail(c, std::string(what) + " " + shape_str(s) + " has a negative dimension");
    n *= static_cast<double>(d);
    if (d != 0) nonzero *= static_cast<double>(d);
  }
  if (n > 2147483648.0) fail(c, std::string(what) + " " + shape_str(s) + " would hold more than 2^31 elements");
  if (nonzero > 9.0e18) fail(c, std::string(what) + " " + shape_str(s) + " has dimensions whose product overflows 64 bits");
}

int64_t dims_product(const Shape& s, int64_t from, int64_t to) {
  int64_t p = 1;
  for (int64_t i = from; i < to; ++i) p *= s[static_cast<size_t>(i)];
  return p;
}

Shape broadcast_shapes(const OpCall& c, const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      fail(c, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast together (dimension " +
                  std::to_string(i) + ": " + std::to_string(da) + " vs " + std::to_string(db) + ")",
           "numpy broadcasting: trailing dimensions must be equal or 1");
    }
  }
  return out;
}

bool broadcastable_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[i + off]) return false;
  return true;
}

std::vector<int64_t> broadcast_map(const Shape& in_shape, const Shape& out) {
  const size_t r = out.size();
  const size_t off = r - in_shape.size();
  const auto in_strides = strides_of(in_shape);
  std::vector<int64_t> st(r, 0);  // input stride per output dim (0 where broadcast)
  for (size_t i = off; i < r; ++i) st[i] = in_shape[i - off] == 1 ? 0 : in_strides[i - off];
  const int64_t n = shape_numel(out);
  std::vector<int64_t> map(static_cast<size_t>(n));
  if (n == 0) return map;
  if (in_shape == out) {
    for (int64_t i = 0; i < n; ++i) map[static_cast<size_t>(i)] = i;
    return map;
  }
  std::vector<int64_t> idx(r, 0);
  int64_t src = 0;
  for (int64_t i = 0; i < n; ++i) {
    map[static_cast<size_t>(i)] = src;
    for (size_t d = r; d-- > 0;) {  // odometer increment
      ++idx[d];
      src += st[d];
      if (idx[d] < out[d]) break;
      src -= st[d] * idx[d];
      idx[d] = 0;
    }
  }
  return map;
}

bool is_floating(DType t) { return is_float(t); }

void require_float(const OpCall& c, const Tensor& t, const char* what) {
  if (!is_float(t.dtype()))
    fail(c, std::string(what) + " has dtype " + std::string(dtype_name(t.dtype())) + "; this op needs a float tensor",
         "cast the input to a float type first");
}

void require_same_dtype(const OpCall& c, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    fail(c, "inputs have different dtypes: " + std::string(dtype_name(a.dtype())) + " " + shape_str(a.shape()) +
                " and " + std::string(dtype_name(b.dtype())) + " " + shape_str(b.shape()),
         "insert a Cast so both inputs have the same type");
}

Tensor from_f64(DType to, Shape shape, const std::vector<double>& v) {
  Tensor t(to == DType::f64 ? DType::f64 : DType::f32, std::move(shape));
  if (v.empty()) return to == DType::f64 || to == DType::f32 ? t : t.cast(to);
  if (to == DType::f64) {
    std::memcpy(t.data(), v.data(), v.size() * sizeof(double));
    return t;
  }
  auto out = t.as<float>();
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return to == DType::f32 ? t : t.cast(to);
}

Tensor from_i64_as(DType to, Shape shape, const std::vector<int64_t>& v) {
  if (v.empty()) return Tensor(to, std::move(shape));
  Tensor t = Tensor::from_i64(std::move(shape), v);
  return to == DType::i64 ? t : t.cast(to);
}

Tensor to_dtype(DType to, const Shape& shape, const std::vector<double>& v) {
  if (is_float(to)) return from_f64(to, shape, v);
  std::vector<int64_t> iv(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    iv[i] = std::isfinite(v[i]) ? static_cast<int64_t>(std::llround(std::clamp(v[i], -9.2e18, 9.2e18))) : 0;
  return from_i64_as(to, shape, iv);
}

}  // namespace detail

namespace {

const std::map<std::string, OpFn>& table() {
  static const std::map<std::string, OpFn> t = [] {
    std::map<std::string, OpFn> m;
    for (auto* list : {&elementwise_ops, &linalg_ops, &nn_ops, &shape_ops, &create_ops, &math_ops, &activation_ops,
                       &reduce_ops, &norm_ops, &index_ops, &layout_ops, &resize_ops, &algebra_ops, &rnn_ops,
                       &loss_ops, &signal_ops, &quant_ops, &gridsample_ops, &detect_ops, &canonical_ops})
      for (const OpEntry& e : (*list)()) m[e.name] = e.fn;
    return m;
  }();
  return t;
}

}  // namespace

bool supports_op(const std::string& op) { return table().count(op) != 0; }

std::vector<std::string> supported_ops() {
  std::vector<std::string> r;
  for (const auto& [name, fn] : table()) r.push_back(name);
  return r;
}

std::vector<Tensor> run_op(const OpCall& call) {
  auto it = table().find(call.op);
  if (it == table().end()) {
    std::string list;
    for (const auto& name : supported_ops()) list += (list.empty() ? "" : ", ") + name;
    std::string msg = "operator '" + call.op + "' is not supported by the reference executor";
    const std::string guess = did_you_mean(call.op, supported_ops());
    if (!guess.empty()) msg += " (did you mean '" + guess + "'?)";
    throw InputError(detail::where(call), msg, "supported ops: " + list);
  }
  return it->second(call);
}

}  // namespace tessera::reference
