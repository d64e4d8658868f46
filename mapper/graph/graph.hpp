#pragma once
// The dataflow graph IR. Nodes are ops with typed attributes; values (the edges) are tensors with a
// name, dtype and shape; initializers are values that carry data. Structural algorithms
// (topological order, cycle detection, reachability) run on a Boost.Graph adjacency_list built
// from the node list (to_bgl), so no traversal is hand-written.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "isa/tensor.hpp"
#include "mapper/graph/attributes.hpp"

namespace tessera::graph {

struct Value {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  bool shape_known = false;
  std::optional<Tensor> data;   // initializers and folded constants
  bool is_initializer = false;  // a weight from the model file (counts as parameter bytes)
};

struct Node {
  std::string name;
  std::string op;                     // ONNX op_type
  Attributes attrs;
  std::vector<std::string> inputs;    // "" = optional input not given
  std::vector<std::string> outputs;
};

class Graph {
 public:
  int opset = 17;
  std::string source;                   // file or "inline graph", for messages
  std::vector<Node> nodes;
  std::map<std::string, Value> values;
  std::vector<std::string> inputs;      // runtime inputs (not initializers)
  std::vector<std::string> outputs;

  Value& value(const std::string& name);
  const Value& value(const std::string& name) const;
  bool has_value(const std::string& name) const { return values.count(name) != 0; }

  // Node indices in a topological order (Boost topological_sort). A cycle throws InputError naming
  // the nodes on it (Boost strong_components).
  std::vector<size_t> topo_order() const;
  // Index of the node producing each value (absent for inputs/initializers).
  std::map<std::string, size_t> producers() const;
  // Indices of the nodes reading each value, in node order (a node once per input naming it).
  std::map<std::string, std::vector<size_t>> consumers() const;
  // Where-string for errors: "node 'fc1' (Gemm, opset 13)".
  std::string where(const Node& n) const;
};

// Checks that every input is defined exactly once, inputs/outputs exist, names are unique, and
// there is no cycle. Collects every problem into one InputError.
void verify(const Graph& g);

// A Resize whose output i reads input floor(i / f) for whole factors f (nn.Upsample's nearest as
// exported): mode nearest with coordinate_transformation_mode asymmetric and nearest_mode floor
// (torch.onnx.export's form), or half_pixel / pytorch_half_pixel with a rounding nearest_mode
// (|(r + 1/2) / f - 1/2| < 1/2). Empty when n is one; else "mode, coordinate_transformation_mode,
// nearest_mode" for the compilers' messages. (The reference executor's Resize stays the oracle.)
std::string nearest_resize_form(const Node& n);

}  // namespace tessera::graph
