#pragma once
// Where every graph value lives in HBM (mapper/neuroncore/compile.hpp, "storage"): a TensorRef is an
// HBM tensor and a strided view into it. Computed values, graph inputs and constants own an HBM
// tensor; Transpose, Slice (positive steps), Reshape (where the strides allow) and Expand are views of
// their input and move no data. A view op the strides cannot express is compiled as a copy.
#include <map>
#include <set>
#include <string>

#include "isa/neuroncore/isa.hpp"
#include "mapper/graph/graph.hpp"
#include "mapper/graph/view.hpp"
#include "mapper/neuroncore/compile.hpp"

namespace tessera::neuroncore {

struct TensorRef {
  std::string hbm;        // the HBM tensor's name (messages, bindings)
  int64_t base = 0;       // its byte offset in HBM
  DType dtype = DType::f32;
  graph::Strided view;    // element offsets from base

  int64_t es() const { return static_cast<int64_t>(dtype_size(dtype)); }
  int64_t byte_of(int64_t element) const { return base + element * es(); }
  const Shape& shape() const { return view.shape; }
  int64_t rank() const { return view.rank(); }
};

// Transpose, Reshape, Slice, Expand, Identity: ops that can be views.
bool is_view_op(const std::string& op);

class Storage {
 public:
  Storage(const graph::Graph& g, const CoreConfig& cfg, const MappingOptions& opt, Compiled& out);

  // Decides views and layouts for the whole graph (before any kernel is emitted).
  void plan();

  bool is_view_node(const graph::Node& n) const { return view_nodes_.count(n.name) != 0; }
  // The view a view op gives of its input's view, if the strides can express it (nullopt for a
  // Reshape across non-contiguous dims, a Slice with a negative step).
  std::optional<graph::Strided> derive(const graph::Node& n, const graph::Strided& in) const;
  // The value's HBM tensor and view (allocating the tensor on first use).
  const TensorRef& ref(const std::string& value);
  // A constant re-laid out by a kernel (weights as [K, N], convolution taps), stored once under `key`.
  TensorRef constant(const std::string& key, const Tensor& data);
  // The constant stored under `key` already (nullptr: none yet), so a caller need not build its data again.
  const TensorRef* stored(const std::string& key) const {
    auto it = refs_.find(key);
    return it == refs_.end() ? nullptr : &it->second;
  }
  // A fresh HBM tensor (contiguous), e.g. a padded buffer; `fill` preloads every element.
  TensorRef scratch(const std::string& key, DType dt, const Shape& shape, std::optional<double> fill = std::nullopt);
  // The dtype a value is stored in: booleans as the compute dtype (1.0 / 0.0), integers int32, graph
  // outputs fp32, training graphs' floats in their own dtype, other floats in the compute dtype.
  DType storage_dtype(const std::string& value) const;
  bool is_output(const std::string& v) const;
  // The graph output or next state an Identity makes `v` (its producer writes it there), or `v`.
  std::string written_as(const std::string& v) const;
  void bind_io();

 private:
  int64_t alloc(const std::string& name, DType dt, const Shape& shape);
  void set_view(const graph::Node& n);

  const graph::Graph& g_;
  const CoreConfig& cfg_;
  const MappingOptions& opt_;
  Compiled& c_;
  std::map<std::string, TensorRef> refs_;          // allocated or viewed values
  std::map<std::string, std::vector<int64_t>> perm_of_;  // values stored permuted: storage dims in this order
  std::map<std::string, std::string> tie_;         // next-state value -> its state (stored in place)
  std::map<std::string, std::string> alias_;       // value -> the graph output or next state an Identity gives it as
  std::set<std::string> view_nodes_;
  int64_t hbm_next_ = 0;
};

// AccessPattern of `rows` partitions of a TensorRef: element offset `elem`, rows `row_stride` elements
// apart, free dims (counts and element strides, outermost first).
AccessPattern hbm_ap(const TensorRef& t, int64_t elem, int32_t rows, int64_t row_stride, std::vector<Dim> free);

}  // namespace tessera::neuroncore
