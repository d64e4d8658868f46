#include "mapper/neuroncore/tensors.hpp"

#include <algorithm>

#include "isa/error.hpp"
#include "mapper/neuroncore/emit.hpp"

namespace tessera::neuroncore {

using graph::Node;
using graph::Strided;

bool is_view_op(const std::string& op) { return op == "Transpose" || op == "Reshape" || op == "Slice" || op == "Expand" || op == "Identity"; }

namespace {

std::vector<int64_t> perm_of(const Node& n, int64_t rank) {
  std::vector<int64_t> p = n.attrs.get_ints("perm");
  if (p.empty())
    for (int64_t i = rank - 1; i >= 0; --i) p.push_back(i);
  return p;
}

}  // namespace

Storage::Storage(const graph::Graph& g, const CoreConfig& cfg, const MappingOptions& opt, Compiled& out)
    : g_(g), cfg_(cfg), opt_(opt), c_(out) {
  for (const auto& [state, next] : opt.in_place) tie_[next] = state;
}

bool Storage::is_output(const std::string& v) const { return std::find(g_.outputs.begin(), g_.outputs.end(), v) != g_.outputs.end(); }

DType Storage::storage_dtype(const std::string& v) const {
  if (auto t = tie_.find(v); t != tie_.end()) return storage_dtype(t->second);
  if (auto a = alias_.find(v); a != alias_.end()) return storage_dtype(a->second);
  const auto& val = g_.value(v);
  if (val.dtype == DType::boolean) return opt_.compute;
  if (!is_float(val.dtype)) return DType::i32;
  // Constants read by the vector and scalar engines (biases, norms' scales, masks) stay fp32: those
  // engines compute in fp32. Matmul and convolution operands are re-laid out in the compute dtype by
  // their kernels.
  if (val.data) return DType::f32;
  if (is_output(v)) return DType::f32;
  if (!opt_.in_place.empty()) return val.dtype;  // training: mixed precision keeps each value's dtype
  return opt_.compute;
}

int64_t Storage::alloc(const std::string& name, DType dt, const Shape& shape) {
  const int64_t bytes = std::max<int64_t>(1, shape_numel(shape)) * static_cast<int64_t>(dtype_size(dt));
  HbmTensor h{name, dt, shape, hbm_next_};
  hbm_next_ += (bytes + 4095) / 4096 * 4096;
  if (hbm_next_ > static_cast<int64_t>(cfg_.hbm_capacity))
    throw InputError(g_.source, "the model needs " + std::to_string(hbm_next_) + " bytes of HBM; the core has " +
                                    std::to_string(static_cast<int64_t>(cfg_.hbm_capacity)));
  c_.program.hbm.push_back(h);
  c_.hbm_bytes = hbm_next_;
  return h.offset;
}

const TensorRef& Storage::ref(const std::string& v) {
  if (auto it = refs_.find(v); it != refs_.end()) return it->second;
  if (auto t = tie_.find(v); t != tie_.end()) return refs_[v] = ref(t->second);  // next state: where the state is
  if (auto a = alias_.find(v); a != alias_.end()) return refs_[v] = ref(a->second);  // written where the output is
  const auto& val = g_.value(v);
  const DType dt = storage_dtype(v);
  if (dtype_size(dt) > 4)
    throw InputError(g_.source, "value '" + v + "' is " + std::string(dtype_name(dt)) + ": the NeuronCore's engines compute fp32 at most",
                     "export the model in float32 (or train it with a float32 master precision)");
  TensorRef r;
  r.hbm = v;
  r.dtype = dt;
  auto p = perm_of_.find(v);
  if (p == perm_of_.end()) {
    r.view = Strided::contiguous(val.shape);
  } else {  // stored in the order of perm: the storage is the permuted value, contiguous
    Shape stored;
    for (int64_t d : p->second) stored.push_back(val.shape[static_cast<size_t>(d)]);
    std::vector<int64_t> inverse(p->second.size());
    for (size_t i = 0; i < p->second.size(); ++i) inverse[static_cast<size_t>(p->second[i])] = static_cast<int64_t>(i);
    r.view = graph::permute(Strided::contiguous(stored), inverse);
  }
  Shape stored_shape = val.shape;
  if (p != perm_of_.end()) {
    stored_shape.clear();
    for (int64_t d : p->second) stored_shape.push_back(val.shape[static_cast<size_t>(d)]);
  }
  r.base = alloc(v, dt, stored_shape);
  if (val.data) {
    Tensor data = val.data->cast(is_float(val.dtype) ? DType::f32 : DType::i64);
    c_.hbm_init.push_back({v, data.cast(dt)});
  }
  return refs_[v] = r;
}

TensorRef Storage::constant(const std::string& key, const Tensor& data) {
  if (auto it = refs_.find(key); it != refs_.end()) return it->second;
  TensorRef r;
  r.hbm = key;
  r.dtype = data.dtype();
  r.view = Strided::contiguous(data.shape());
  r.base = alloc(key, data.dtype(), data.shape());
  c_.hbm_init.push_back({key, data});
  return refs_[key] = r;
}

TensorRef Storage::scratch(const std::string& key, DType dt, const Shape& shape, std::optional<double> fill) {
  if (auto it = refs_.find(key); it != refs_.end()) return it->second;
  TensorRef r;
  r.hbm = key;
  r.dtype = dt;
  r.view = Strided::contiguous(shape);
  r.base = alloc(key, dt, shape);
  if (fill && *fill != 0.0) {  // HBM never written reads as zero
    std::vector<float> v(static_cast<size_t>(shape_numel(shape)), static_cast<float>(*fill));
    c_.hbm_init.push_back({key, Tensor::from_f32(shape, std::move(v)).cast(dt)});
  }
  return refs_[key] = r;
}

void Storage::plan() {
  std::map<std::string, std::vector<const Node*>> consumers;
  std::map<std::string, const Node*> producer;
  for (const auto& n : g_.nodes) {
    for (const auto& i : n.inputs)
      if (!i.empty()) consumers[i].push_back(&n);
    for (const auto& o : n.outputs) producer[o] = &n;
  }
  auto stored_free = [&](const std::string& v) {  // a value whose layout the compiler may choose
    return !is_output(v) && !tie_.count(v) && !g_.value(v).data &&
           std::none_of(opt_.in_place.begin(), opt_.in_place.end(), [&](const auto& s) { return s.first == v; });
  };
  // A graph input read only as the left operand of matmuls: the host places it with the last two
  // dimensions swapped, so the tensor engine's stationary tiles (K on partitions) load directly.
  for (const auto& x : g_.inputs) {
    const auto& cs = consumers[x];
    const int64_t r = static_cast<int64_t>(g_.value(x).shape.size());
    if (!stored_free(x) || cs.empty() || r < 2 || !is_float(g_.value(x).dtype)) continue;
    if (std::all_of(cs.begin(), cs.end(), [&](const Node* n) { return n->op == "MatMul" && n->inputs[0] == x && n->inputs[1] != x; })) {
      std::vector<int64_t> p(static_cast<size_t>(r));
      for (int64_t i = 0; i < r; ++i) p[static_cast<size_t>(i)] = i;
      std::swap(p[static_cast<size_t>(r - 1)], p[static_cast<size_t>(r - 2)]);
      perm_of_[x] = p;
    }
  }
  // A computed value read only by a Transpose is stored in the transposed order: the Transpose is
  // then a contiguous view (attention's head merge followed by a Reshape moves no data).
  for (const auto& n : g_.nodes) {
    // (kernels that write their output as rows of a flat view cannot take a permuted one)
    if (is_view_op(n.op) || n.op == "Gather" || n.op.rfind("Reduce", 0) == 0 || n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool") continue;
    for (const auto& o : n.outputs) {
      const auto& cs = consumers[o];
      if (o.empty() || !stored_free(o) || cs.size() != 1 || cs[0]->op != "Transpose" || is_output(cs[0]->outputs[0])) continue;
      const auto perm = perm_of(*cs[0], static_cast<int64_t>(g_.value(o).shape.size()));
      // Not when the Transpose moves the innermost dim and the producer writes rows elementwise:
      // that kernel would store one element per DMA descriptor, where a separate Transpose runs
      // on the tensor engine (kernels/elementwise.cpp transposed_copy) -- the scale of q of
      // nki-samples' SD attention, q given as [d, seqlen]: 455 us -> 10 + 19 us.
      // (Small values keep it: below 4096 elements the transposed copy is not used.)
      if (!perm.empty() && perm.back() != static_cast<int64_t>(perm.size()) - 1 && n.op != "MatMul" && n.op != "Gemm" &&
          shape_numel(g_.value(o).shape) >= 4096)
        continue;
      perm_of_[o] = perm;
    }
  }
  // An Identity that names a computed value as a graph output (or a next state) moves no data: the
  // value's producer writes it where the output lives.
  for (const auto& n : g_.nodes) {
    if (n.op != "Identity" || !(is_output(n.outputs[0]) || tie_.count(n.outputs[0]))) continue;
    const std::string& in = n.inputs[0];
    auto p = producer.find(in);
    if (p == producer.end() || is_view_op(p->second->op) || is_output(in) || tie_.count(in) || alias_.count(in) || g_.value(in).data) continue;
    if (storage_dtype(in) != storage_dtype(n.outputs[0]) && !is_float(g_.value(in).dtype)) continue;
    alias_[in] = n.outputs[0];
    view_nodes_.insert(n.name);
  }
  for (size_t i : g_.topo_order()) set_view(g_.nodes[i]);
}

std::string Storage::written_as(const std::string& v) const {
  auto a = alias_.find(v);
  return a == alias_.end() ? v : a->second;
}

std::optional<Strided> Storage::derive(const Node& n, const Strided& in) const {
  const Shape& os = g_.value(n.outputs[0]).shape;
  if (n.op == "Identity") return in;
  if (n.op == "Transpose") return graph::permute(in, perm_of(n, in.rank()));
  if (n.op == "Reshape") return graph::reshape(in, os);
  if (n.op == "Expand") return graph::broadcast_to(in, os);
  if (n.op != "Slice") return std::nullopt;
  const int64_t rank = in.rank();
  auto ints = [&](size_t k) {
    return k < n.inputs.size() && !n.inputs[k].empty() && g_.value(n.inputs[k]).data ? g_.value(n.inputs[k]).data->to_i64() : std::vector<int64_t>{};
  };
  const auto starts = ints(1);
  auto axes = ints(3);
  const auto steps = ints(4);
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  Strided v = in;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    const int64_t step = k < steps.size() ? steps[k] : 1;
    if (step < 1) return std::nullopt;  // negative steps walk backwards: not a view of ours
    const int64_t dim = in.shape[static_cast<size_t>(a)];
    const int64_t s = std::clamp<int64_t>(starts[k] < 0 ? starts[k] + dim : starts[k], 0, dim);
    v = graph::slice(v, a, s, os[static_cast<size_t>(a)], step);
  }
  return v;
}

void Storage::set_view(const Node& n) {
  if (!is_view_op(n.op)) return;
  const std::string& out = n.outputs[0];
  if (is_output(out) || tie_.count(out) || g_.value(n.inputs[0]).data) return;  // graph outputs and next states own a tensor: a copy
  const TensorRef& in = ref(n.inputs[0]);
  auto v = derive(n, in.view);
  if (!v) return;  // the strides cannot express it: a copy
  TensorRef r = in;
  r.view = *v;
  view_nodes_.insert(n.name);
  refs_[out] = r;
}

void Storage::bind_io() {
  auto binding = [&](const std::string& v) {
    const TensorRef& r = ref(v);
    return IoBinding{v, r.hbm, r.view.offset, r.view.strides};
  };
  for (const auto& i : g_.inputs) c_.inputs.push_back(binding(i));
  for (const auto& o : g_.outputs) c_.outputs.push_back(binding(o));
}

AccessPattern hbm_ap(const TensorRef& t, int64_t elem, int32_t rows, int64_t row_stride, std::vector<Dim> free) {
  return in_hbm(t.dtype, rows, row_stride, t.byte_of(elem), std::move(free));
}

}  // namespace tessera::neuroncore
