#include "mapper/frontend/onnx.hpp"

#include <onnx/onnx_pb.h>

#include <cstring>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "mapper/frontend/onnx_dtype.hpp"
#include "mapper/reference/kernels.hpp"

namespace tessera::frontend {

namespace {

template <typename T, typename Src>
void copy_field(Tensor& t, const Src& field) {
  auto dst = reinterpret_cast<T*>(t.data());
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<T>(field.Get(i));
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& where) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL || p.external_data_size() > 0)
    throw InputError(where, "tensor '" + p.name() + "' uses ONNX external data, which tessera does not read",
                     "re-save the model with all tensors inside the file (onnx.save(model, path, save_as_external_data=False))");
  auto dt = dtype_from_onnx(p.data_type());
  if (!dt)
    throw InputError(where, "tensor '" + p.name() + "' has dtype " + onnx_dtype_name(p.data_type()) +
                                ", which tessera does not support");
  Shape shape(p.dims().begin(), p.dims().end());
  // The dimensions are checked against the data before anything is allocated: a corrupt header
  // must be reported, not allocated (and an empty shape's other dimensions must not overflow the
  // element count either).
  int64_t n64 = 1, nonzero = 1;
  for (int64_t d : shape) {
    if (d < 0) throw InputError(where, "tensor '" + p.name() + "' has a negative dimension: shape " + shape_str(shape));
    if (d != 0 && __builtin_mul_overflow(nonzero, d, &nonzero))
      throw InputError(where, "tensor '" + p.name() + "' has shape " + shape_str(shape) + ", more elements than a 64-bit count holds");
    n64 *= d;
  }
  const size_t n = static_cast<size_t>(n64);
  const size_t elem = dtype_size(*dt);
  if (p.has_raw_data()) {
    if (n > p.raw_data().size() / elem || n * elem != p.raw_data().size())
      throw InputError(where, "tensor '" + p.name() + "' has " + std::to_string(p.raw_data().size()) +
                                  " bytes of raw data; shape " + shape_str(shape) + " of " + std::string(dtype_name(*dt)) +
                                  " needs " + std::to_string(n) + " values of " + std::to_string(elem) + " bytes");
    Tensor t(*dt, shape);
    if (t.nbytes() > 0) std::memcpy(t.data(), p.raw_data().data(), t.nbytes());  // empty tensors have no buffer
    return t;
  }
  auto check = [&](int count) {
    if (static_cast<size_t>(count) != n)
      throw InputError(where, "tensor '" + p.name() + "' has " + std::to_string(count) + " values; shape " +
                                  shape_str(shape) + " needs " + std::to_string(n));
  };
  switch (*dt) {  // the value count first, then the allocation
    case DType::f32: check(p.float_data_size()); break;
    case DType::f64: check(p.double_data_size()); break;
    case DType::i64: check(p.int64_data_size()); break;
    case DType::i32: case DType::i16: case DType::i8: case DType::u8: case DType::boolean: case DType::f16: case DType::bf16:
      check(p.int32_data_size()); break;
    default: throw InputError(where, "tensor '" + p.name() + "': unsupported storage");
  }
  Tensor t(*dt, shape);
  switch (*dt) {
    case DType::f32: copy_field<float>(t, p.float_data()); break;
    case DType::f64: copy_field<double>(t, p.double_data()); break;
    case DType::i64: copy_field<int64_t>(t, p.int64_data()); break;
    case DType::i32: copy_field<int32_t>(t, p.int32_data()); break;
    case DType::i16: copy_field<int16_t>(t, p.int32_data()); break;
    case DType::i8: copy_field<int8_t>(t, p.int32_data()); break;
    case DType::u8:
    case DType::boolean: copy_field<uint8_t>(t, p.int32_data()); break;
    case DType::f16:
    case DType::bf16: copy_field<uint16_t>(t, p.int32_data()); break;
    default: throw InputError(where, "tensor '" + p.name() + "': unsupported storage");
  }
  return t;
}

Tensor load_tensor_pb(const std::string& path, std::string* name) {
  const std::string bytes = read_file(path);
  onnx::TensorProto p;
  if (!p.ParseFromString(bytes)) throw InputError(path, "not a serialised onnx.TensorProto");
  if (name) *name = p.name();
  return tensor_from_proto(p, path);
}

namespace {

graph::AttrValue attr_value(const onnx::AttributeProto& a, const std::string& where) {
  using A = onnx::AttributeProto;
  switch (a.type()) {
    case A::FLOAT: return static_cast<double>(a.f());
    case A::INT: return static_cast<int64_t>(a.i());
    case A::STRING: return a.s();
    case A::TENSOR: return tensor_from_proto(a.t(), where);
    case A::FLOATS: return std::vector<double>(a.floats().begin(), a.floats().end());
    case A::INTS: return std::vector<int64_t>(a.ints().begin(), a.ints().end());
    case A::STRINGS: return std::vector<std::string>(a.strings().begin(), a.strings().end());
    default:
      throw InputError(where, "attribute '" + a.name() + "' has a kind tessera does not support (graphs, sparse tensors, type protos)");
  }
}

// Shape and dtype of a graph input/output from its ValueInfo; dynamic dimensions are errors.
void read_value_info(const onnx::ValueInfoProto& vi, graph::Value& v, const std::string& src, bool required) {
  v.name = vi.name();
  if (!vi.type().has_tensor_type()) {
    if (required) throw InputError(src, "graph input '" + vi.name() + "' is not a tensor");
    return;
  }
  const auto& tt = vi.type().tensor_type();
  auto dt = dtype_from_onnx(tt.elem_type());
  if (!dt) throw InputError(src, "'" + vi.name() + "' has dtype " + onnx_dtype_name(tt.elem_type()) + ", which tessera does not support");
  v.dtype = *dt;
  if (!tt.has_shape()) {
    if (required) throw InputError(src, "graph input '" + vi.name() + "' has no shape", "export the model with static shapes");
    return;
  }
  Shape s;
  for (const auto& d : tt.shape().dim()) {
    if (!d.has_dim_value()) {
      if (required)
        throw InputError(src, "graph input '" + vi.name() + "' has a dynamic dimension '" + d.dim_param() + "'",
                         "tessera compiles fixed shapes: export with static shapes (no dynamic_axes)");
      return;
    }
    s.push_back(d.dim_value());
  }
  v.shape = s;
  v.shape_known = true;
}

}  // namespace

graph::Graph load_onnx_bytes(const std::string& bytes, const std::string& src) {
  if (bytes.empty()) throw InputError(src, "the file is empty (0 bytes), not an ONNX model", "re-export the model (torch.onnx.export)");
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes))
    throw InputError(src, "not a valid ONNX model (protobuf parsing failed: the file is truncated or not ONNX)",
                     "re-export the model; check the file with onnx.checker.check_model");
  graph::Graph g;
  g.source = src;
  g.opset = -1;
  for (const auto& os : m.opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") g.opset = static_cast<int>(os.version());
  }
  if (g.opset < 0)
    throw InputError(src, m.has_graph() ? "the model imports no ai.onnx opset" : "not an ONNX model (no graph and no ai.onnx opset)",
                     "re-export the model (torch.onnx.export); check the file with onnx.checker.check_model");
  if (g.opset < 1 || g.opset > 18)
    throw InputError(src, "opset " + std::to_string(g.opset) + " is not supported", "tessera reads ai.onnx opsets 1 to 18");
  const auto& gp = m.graph();
  for (const auto& init : gp.initializer()) {
    graph::Value v;
    v.name = init.name();
    v.data = tensor_from_proto(init, src + ": initializer '" + init.name() + "'");
    v.dtype = v.data->dtype();
    v.shape = v.data->shape();
    v.shape_known = true;
    v.is_initializer = true;
    g.values[v.name] = std::move(v);
  }
  if (gp.sparse_initializer_size() > 0) throw InputError(src, "sparse initializers are not supported");
  for (const auto& in : gp.input()) {
    if (g.values.count(in.name())) continue;  // an initializer also listed as input (IR < 4)
    graph::Value v;
    read_value_info(in, v, src, true);
    g.values[v.name] = v;
    g.inputs.push_back(v.name);
  }
  DiagnosticList unsupported;
  size_t index = 0;
  for (const auto& np : gp.node()) {
    graph::Node n;
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(index) : np.name();
    ++index;
    n.op = np.op_type();
    const std::string where = "node '" + n.name + "' (" + n.op + ", opset " + std::to_string(g.opset) + ")";
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      unsupported.add(where, "op from domain '" + np.domain() + "' is not supported", "tessera supports the default ai.onnx domain");
      continue;
    }
    if (!reference::supports_op(n.op)) {
      unsupported.add(where, "op '" + n.op + "' is not supported", "see docs/ops.md for the supported set");
      continue;
    }
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) n.attrs.set(a.name(), attr_value(a, where));
    for (const auto& o : n.outputs)
      if (!o.empty() && !g.values.count(o)) g.values[o] = graph::Value{o, DType::f32, {}, false, std::nullopt, false};
    g.nodes.push_back(std::move(n));
  }
  unsupported.throw_if_any();
  for (const auto& out : gp.output()) {
    g.outputs.push_back(out.name());
    if (!g.values.count(out.name())) {
      graph::Value v;
      read_value_info(out, v, src, false);
      v.shape_known = false;
      g.values[v.name] = v;
    }
  }
  graph::verify(g);
  return g;
}

std::vector<std::string> model_op_types(const std::string& path) {
  onnx::ModelProto m;
  if (!m.ParseFromString(read_file(path))) throw InputError(path, "not a valid ONNX model");
  std::vector<std::string> ops;
  for (const auto& n : m.graph().node())
    ops.push_back(n.domain().empty() || n.domain() == "ai.onnx" ? n.op_type() : n.domain() + ":" + n.op_type());
  return ops;
}

graph::Graph load_onnx(const std::string& path) { return load_onnx_bytes(read_file(path), path); }

}  // namespace tessera::frontend
