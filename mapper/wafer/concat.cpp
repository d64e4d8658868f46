// Branches (internal.hpp; docs/wafer-compiler.md "Convolutions"): a Concat of branches read by a
// Conv or a dense layer -- the reader split by its input's parts, their sum a residual Add -- and a
// feature-map graph input read by several Convs, through an identity Conv.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

// A new value name from `base` that the graph does not use yet.
std::string fresh(const graph::Graph& g, const std::string& base) {
  std::string v = base;
  for (int i = 2; g.has_value(v); ++i) v = base + "_" + std::to_string(i);
  return v;
}

const Tensor* constant_of(const graph::Graph& g, const std::string& v) {
  if (v.empty() || !g.has_value(v)) return nullptr;
  const graph::Value& val = g.value(v);
  return val.data ? &*val.data : nullptr;
}

// Node u, reading v (the Concat's value, concatenated along `axis` of rank r), acts on each part
// alone: an elementwise function of one value (its other inputs scalar constants) or, along the
// channels of a feature map, a pool.
bool per_part(const graph::Graph& g, const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  if (std::count(u.inputs.begin(), u.inputs.end(), v) != 1 || u.outputs.size() != 1) return false;
  if (u.op == "MaxPool" || u.op == "AveragePool" || u.op == "GlobalAveragePool") return u.inputs[0] == v && axis == 1 && r >= 3;
  if (!kUnary.count(u.op)) return false;
  for (const auto& in : u.inputs)
    if (in != v && !in.empty() && !(constant_of(g, in) && constant_of(g, in)->numel() == 1)) return false;
  return true;
}

// Node u reads v as its input and contracts the concatenated axis: a Conv of one group along the
// channels, a Gemm or a MatMul by a constant 2-D weight along the features.
bool splits(const graph::Graph& g, const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  if (u.inputs.size() < 2 || u.inputs[0] != v || std::count(u.inputs.begin(), u.inputs.end(), v) != 1) return false;
  const Tensor* w = constant_of(g, u.inputs[1]);
  if (!w) return false;
  if (u.op == "Conv") return axis == 1 && r >= 3 && w->rank() == static_cast<int64_t>(r) && u.attrs.get_int("group", 1) == 1;
  if (u.op == "Gemm") return axis == 1 && r == 2 && w->rank() == 2 && !u.attrs.get_int("transA", 0);
  if (u.op == "MatMul") return axis == static_cast<int64_t>(r) - 1 && w->rank() == 2;
  return false;
}

// Node u is a MaxPool or AveragePool of v along the channels (one of several readers: each part is
// pooled by an identity Conv kernel of its own, split_concat_readers).
bool pools(const graph::Node& u, const std::string& v, int64_t axis, size_t r) {
  return (u.op == "MaxPool" || u.op == "AveragePool") && !u.inputs.empty() && u.inputs[0] == v && u.outputs.size() == 1 && axis == 1 && r >= 3;
}

// A 1 x 1 identity Conv of C channels (rank r feature maps) reading x, its output y: nodes and
// values added to g (the node returned, for the caller to place).
graph::Node identity_conv(graph::Graph& g, const std::string& x, const std::string& name) {
  const Shape xs = g.value(x).shape;
  const int64_t C = xs[1];
  Shape ws{C, C, 1};
  if (xs.size() == 4) ws.push_back(1);
  std::vector<float> w(static_cast<size_t>(C * C), 0.0f);
  for (int64_t c = 0; c < C; ++c) w[static_cast<size_t>(c * C + c)] = 1.0f;
  const std::string wn = fresh(g, name + "/W"), y = fresh(g, name);
  g.values[wn] = graph::Value{wn, DType::f32, ws, true, Tensor::from_f32(ws, std::move(w)), false};
  g.values[y] = graph::Value{y, g.value(x).dtype, xs, true, std::nullopt, false};
  graph::Node id{name, "Conv", {}, {x, wn}, {y}};
  id.attrs.set("kernel_shape", std::vector<int64_t>(xs.size() - 2, 1));
  return id;
}

// The columns [lo, lo + n) of axis `ax` of w.
Tensor part_of(const Tensor& w, int64_t ax, int64_t lo, int64_t n) {
  Shape s = w.shape();
  const std::vector<float> v = w.to_f32();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ax; ++d) outer *= s[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(ax) + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t full = s[static_cast<size_t>(ax)];
  std::vector<float> p;
  p.reserve(static_cast<size_t>(outer * n * inner));
  for (int64_t o = 0; o < outer; ++o)
    p.insert(p.end(), v.begin() + (o * full + lo) * inner, v.begin() + (o * full + lo + n) * inner);
  s[static_cast<size_t>(ax)] = n;
  return Tensor::from_f32(s, std::move(p));
}

// Whether Concat c maps (returns "") or why not: its value, after the functions and pools that
// move to its parts (`moved`, ending at value `v`), read only by readers that split; `axis` the
// concatenated axis.
std::string concat_plan(const graph::Graph& g, const graph::Node& c, const std::map<std::string, std::vector<size_t>>& uses, const std::map<std::string, size_t>& producer,
                        std::vector<size_t>& moved, std::string& v, int64_t& axis) {
  auto is_output = [&](const std::string& x) { return std::find(g.outputs.begin(), g.outputs.end(), x) != g.outputs.end(); };
  const size_t r = g.value(c.outputs[0]).shape.size();
  axis = c.attrs.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(r);
  if (r < 2 || axis < 1) return "it joins along axis " + std::to_string(axis) + " of " + shape_str(g.value(c.outputs[0]).shape) + "; the wafer joins along the channels of feature maps or the features of rows";
  for (const auto& a : c.inputs)
    if (a.empty() || !producer.count(a) || constant_of(g, a) || g.value(a).shape.size() != r)
      return "its input '" + a + "' is the graph input or a constant; the wafer joins values its kernels compute";
  moved.clear();
  v = c.outputs[0];
  size_t rv = r;  // v's rank (a Flatten moved to the parts lowers it)
  for (;;) {
    const auto it = uses.find(v);
    if (it == uses.end() || it->second.size() != 1 || is_output(v) || !per_part(g, g.nodes[it->second[0]], v, axis, rv)) break;
    moved.push_back(it->second[0]);
    v = g.nodes[it->second[0]].outputs[0];
    rv = g.value(v).shape.size();
  }
  const auto rd = uses.find(v);
  if (is_output(v) || rd == uses.end()) return "its value ('" + v + "') is the graph's output; the wafer maps a Concat only into the Convs or dense layers that read it";
  for (const size_t u : rd->second)
    if (!splits(g, g.nodes[u], v, axis, rv) && !pools(g.nodes[u], v, axis, rv))
      return "its value ('" + v + "') is read by node '" + g.nodes[u].name + "' (" + g.nodes[u].op +
             "); the wafer maps a Concat only into Convs of one group, Gemms or MatMuls by a constant weight, and pools that read it (after functions of one value and pools)";
  return "";
}

}  // namespace

std::string concat_refusal(const graph::Graph& g, const graph::Node& c) {
  std::map<std::string, std::vector<size_t>> uses;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& x : g.nodes[i].inputs) uses[x].push_back(i);
  std::vector<size_t> moved;
  std::string v;
  int64_t axis = 0;
  const std::string why = concat_plan(g, c, uses, g.producers(), moved, v, axis);
  return why.empty() ? "a Concat of branches is mapped when its parts' producers are kernels on the chain (this one is not)" : "a Concat of branches: " + why;
}

namespace {
std::vector<size_t> input_readers(const graph::Graph& g) {  // the readers that need the identity Conv, or none
  if (g.inputs.size() != 1) return {};
  const std::string x = g.inputs[0];
  const size_t r = g.value(x).shape.size();
  if (r != 3 && r != 4) return {};
  std::vector<size_t> readers;
  bool concat = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if (std::find(n.inputs.begin(), n.inputs.end(), x) == n.inputs.end()) continue;
    const bool pool = n.op == "MaxPool" || n.op == "AveragePool";
    if ((n.op != "Conv" && n.op != "ConvTranspose" && n.op != "Concat" && !pool) || (n.op != "Concat" && n.inputs[0] != x)) return {};
    concat = concat || n.op == "Concat";
    readers.push_back(i);
  }
  return readers.size() >= 2 || concat ? readers : std::vector<size_t>{};
}
}  // namespace

bool input_needs_identity(const graph::Graph& g) { return !input_readers(g).empty(); }

// A feature-map graph input read by several Convs (or by a Concat: cat(x, f(x))) -- the host places
// the input for one reader -- is read through an identity 1 x 1 Conv first, a kernel whose output
// the wafer hands to any number of readers: one more kernel, C x C multiply-adds per position.
// Only when every reader is a Conv, ConvTranspose or Concat (a transformer's [batch, S, d] input,
// read by dense layers and a residual, is left alone). Returns whether it changed g.
bool identity_for_input(graph::Graph& g) {
  const std::vector<size_t> readers = input_readers(g);
  if (readers.empty()) return false;
  const std::string x = g.inputs[0];
  graph::Node id = identity_conv(g, x, x + "/identity");
  for (const size_t i : readers)
    for (auto& in : g.nodes[i].inputs)
      if (in == x) in = id.outputs[0];
  g.nodes.insert(g.nodes.begin(), std::move(id));
  return true;
}

namespace {
// The pools (MaxPool, AveragePool) of a feature map that other nodes read too, produced by a node
// other than a Concat (whose pool readers split_concat_readers pools per part).
std::vector<size_t> shared_pools(const graph::Graph& g) {
  std::map<std::string, size_t> readers;
  for (const auto& n : g.nodes)
    for (const auto& v : n.inputs) ++readers[v];
  const std::map<std::string, size_t> producer = g.producers();
  std::vector<size_t> found;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    if ((n.op != "MaxPool" && n.op != "AveragePool") || n.inputs.empty() || n.outputs.size() != 1) continue;
    const std::string& v = n.inputs[0];
    const auto pr = producer.find(v);
    const size_t r = g.value(v).shape.size();
    if (pr == producer.end() || g.nodes[pr->second].op == "Concat" || (r != 3 && r != 4) || readers[v] < 2) continue;
    found.push_back(i);
  }
  return found;
}
}  // namespace

// A dense layer on a Flatten of a [batch, C, 1, 1] map that comes from a Concat (after functions and
// pools: GoogLeNet's global pool and fc) is the 1 x 1 Conv of that map, then the Flatten: as a Conv
// it splits per part like the Concat's other readers (Convs read kernels on either edge; a dense
// layer reads the edge of the kernel before it). MatMul by a constant [C, N] weight (its bias Add
// folded in) or Gemm. Returns whether it changed g.
bool dense_heads_as_convs(graph::Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<std::string, std::vector<size_t>> uses;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& v : g.nodes[i].inputs) uses[v].push_back(i);
    const std::map<std::string, size_t> producer = g.producers();
    auto is_output = [&](const std::string& v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
    auto sole = [&](const std::string& v) { const auto it = uses.find(v); return it != uses.end() && it->second.size() == 1 && !is_output(v); };
    for (size_t di = 0; di < g.nodes.size() && !again; ++di) {
      const graph::Node& d = g.nodes[di];
      if ((d.op != "MatMul" && d.op != "Gemm") || d.inputs.size() < 2 || d.outputs.size() != 1) continue;
      const Tensor* w = constant_of(g, d.inputs[1]);
      if (!w || w->rank() != 2) continue;
      if (d.op == "Gemm" && (d.attrs.get_int("transA", 0) || d.attrs.get_float("alpha", 1.0) != 1.0 || d.attrs.get_float("beta", 1.0) != 1.0)) continue;
      const auto fp = producer.find(d.inputs[0]);
      if (fp == producer.end() || !sole(d.inputs[0])) continue;
      const graph::Node& f = g.nodes[fp->second];
      if (f.op != "Flatten" && f.op != "Reshape") continue;
      const std::string m = f.inputs[0];
      const Shape& ms = g.value(m).shape;
      if ((ms.size() != 3 && ms.size() != 4) || g.value(d.inputs[0]).shape != Shape{ms[0], ms[1]}) continue;
      bool ones = true;
      for (size_t a = 2; a < ms.size(); ++a) ones = ones && ms[a] == 1;
      if (!ones) continue;
      // m comes from a Concat through nodes that act on each part.
      std::string back = m;
      bool from_concat = false;
      for (int guard = 0; guard < 64; ++guard) {
        const auto pr = producer.find(back);
        if (pr == producer.end()) break;
        const graph::Node& pn = g.nodes[pr->second];
        if (pn.op == "Concat") { from_concat = pn.attrs.get_int("axis", 0) == 1; break; }
        if (pn.inputs.empty() || !(pn.op == "GlobalAveragePool" || pn.op == "MaxPool" || pn.op == "AveragePool" || kUnary.count(pn.op))) break;
        back = pn.inputs[0];
      }
      if (!from_concat) continue;
      const bool trans_b = d.op == "Gemm" && d.attrs.get_int("transB", 0);
      const Tensor wt = trans_b ? w->cast(DType::f32) : transpose2d(*w);  // [N, C]
      const int64_t N = wt.shape()[0], C = wt.shape()[1];
      if (C != ms[1]) continue;
      // The bias: Gemm's third input, or an Add of a [N] (or [1, N]) constant that only reads the MatMul's output.
      std::optional<Tensor> bias;
      std::string out = d.outputs[0];
      size_t bias_node = SIZE_MAX;
      if (d.op == "Gemm" && d.inputs.size() > 2 && !d.inputs[2].empty()) {
        const Tensor* b = constant_of(g, d.inputs[2]);
        if (!b || b->numel() != N) continue;
        bias = b->cast(DType::f32).reshaped({N});
      } else if (d.op == "MatMul" && sole(d.outputs[0])) {
        const graph::Node& a = g.nodes[uses[d.outputs[0]][0]];
        const std::string other = a.op == "Add" && a.inputs.size() == 2 ? (a.inputs[0] == d.outputs[0] ? a.inputs[1] : a.inputs[0]) : "";
        const Tensor* b = constant_of(g, other);
        if (b && b->numel() == N) bias = b->cast(DType::f32).reshaped({N}), out = a.outputs[0], bias_node = uses[d.outputs[0]][0];
      }
      Shape ws{N, C, 1};
      if (ms.size() == 4) ws.push_back(1);
      const std::string wn = fresh(g, d.inputs[1] + "/conv");
      g.values[wn] = graph::Value{wn, DType::f32, ws, true, wt.reshaped(ws), g.value(d.inputs[1]).is_initializer};
      graph::Node conv{d.name + "/conv", "Conv", {}, {m, wn}, {}};
      conv.attrs.set("kernel_shape", std::vector<int64_t>(ms.size() - 2, 1));
      if (bias) {
        const std::string bn = fresh(g, d.inputs[1] + "/conv_bias");
        g.values[bn] = graph::Value{bn, DType::f32, Shape{N}, true, *bias, false};
        conv.inputs.push_back(bn);
      }
      Shape ys = ms;
      ys[1] = N;
      const std::string y = fresh(g, out + "/map");
      g.values[y] = graph::Value{y, g.value(out).dtype, ys, true, std::nullopt, false};
      conv.outputs = {y};
      const std::string sh = fresh(g, out + "/shape");
      g.values[sh] = graph::Value{sh, DType::i64, Shape{2}, true, Tensor::from_i64({2}, {ms[0], N}), false};
      graph::Node flat{d.name + "/flatten", "Reshape", {}, {y, sh}, {out}};
      std::vector<graph::Node> nodes;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (i == fp->second || i == bias_node) continue;
        if (i == di) {
          nodes.push_back(conv);
          nodes.push_back(flat);
          continue;
        }
        nodes.push_back(g.nodes[i]);
      }
      g.nodes = std::move(nodes);
      again = changed = true;
    }
  }
  return changed;
}

bool pools_need_identity(const graph::Graph& g) { return !shared_pools(g).empty(); }

// A pool of a feature map that other nodes read too (GoogLeNet's pool branch: a MaxPool of the
// block's input beside three Convs) reads it through an identity 1 x 1 Conv: a kernel of its own,
// with the pool at its chain ends, where the producer's chain ends hand the unpooled value to the
// other readers. One more kernel, C x C multiply-adds per position. Returns whether it changed g.
bool identity_for_pools(graph::Graph& g) {
  const std::vector<size_t> found = shared_pools(g);
  if (found.empty()) return false;
  std::vector<graph::Node> nodes;
  size_t next = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (next < found.size() && found[next] == i) {
      ++next;
      graph::Node id = identity_conv(g, g.nodes[i].inputs[0], g.nodes[i].name + "/identity");
      g.nodes[i].inputs[0] = id.outputs[0];
      nodes.push_back(std::move(id));
    }
    nodes.push_back(g.nodes[i]);
  }
  g.nodes = std::move(nodes);
  return true;
}

// A Concat of computed values along the channels of feature maps (or the features of rows) whose
// value -- after functions of one value and pools, which act on each part alone and move to the
// parts -- is read only by Convs of one group (or Gemms, MatMuls by a constant weight): each reader
// becomes one reader per part, of its weight's slice along the contracted axis, and their outputs
// are summed by Adds (the bias with the last part), which the wafer maps as residuals of outputs no
// kernel reads. So SqueezeNet's Fire modules: expand1x1 and expand3x3 read the squeeze, each next
// reader reads both. The moved functions and pools go right after each part's producer (a pool
// attaches to the kernel before it); the readers' parts where the reader was. Returns whether it
// changed g.
bool split_concat_readers(graph::Graph& g) {
  bool changed = false;
  for (bool again = true; again;) {
    again = false;
    std::map<std::string, std::vector<size_t>> uses;
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (const auto& v : g.nodes[i].inputs) uses[v].push_back(i);
    const std::map<std::string, size_t> producer = g.producers();
    auto is_output = [&](const std::string& v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
    for (size_t ci = 0; ci < g.nodes.size() && !again; ++ci) {
      const graph::Node& c = g.nodes[ci];
      if (c.op != "Concat" || c.inputs.size() < 2 || c.outputs.size() != 1) continue;
      std::vector<size_t> moved;
      std::string v;
      int64_t axis = 0;
      if (!concat_plan(g, c, uses, producer, moved, v, axis).empty()) continue;
      const auto rd = uses.find(v);
      // Each part through the moved nodes: the part's value after them.
      std::map<size_t, std::vector<graph::Node>> after;  // node index -> nodes to insert after it
      std::vector<std::string> parts;
      std::vector<int64_t> width;
      for (size_t p = 0; p < c.inputs.size(); ++p) {
        std::string pv = c.inputs[p];
        const int64_t n = g.value(pv).shape[static_cast<size_t>(axis)];
        for (size_t q = 0; q < moved.size(); ++q) {
          graph::Node mn = g.nodes[moved[q]];
          const graph::Value& ov = g.value(mn.outputs[0]);
          Shape s = ov.shape;
          s[static_cast<size_t>(axis)] = n;
          const std::string out = fresh(g, mn.outputs[0] + "/part" + std::to_string(p));
          g.values[out] = graph::Value{out, ov.dtype, s, true, std::nullopt, false};
          const std::string& was = q == 0 ? c.outputs[0] : g.nodes[moved[q - 1]].outputs[0];  // (the value it read)
          for (auto& in : mn.inputs)
            if (in == was) in = pv;
          mn.name += "/part" + std::to_string(p);
          mn.outputs = {out};
          after[producer.at(c.inputs[p])].push_back(mn);
          pv = out;
        }
        parts.push_back(pv);
        width.push_back(n);
      }
      // Each reader: one node per part, their outputs summed.
      std::map<size_t, std::vector<graph::Node>> instead;
      std::vector<size_t> gone;  // bias Adds, moved before the sum
      for (const size_t u : rd->second) {
        const graph::Node& un = g.nodes[u];
        if (pools(un, v, axis, g.value(v).shape.size())) {
          // A pool beside other readers: each part through an identity Conv kernel with a copy of
          // the pool at its chain ends; the pooled parts concatenated again (that Concat's readers
          // split on the next pass).
          std::vector<std::string> pooled;
          for (size_t p = 0; p < parts.size(); ++p) {
            const std::string tag = "/part" + std::to_string(p);
            graph::Node id = identity_conv(g, parts[p], (un.name.empty() ? un.outputs[0] : un.name) + tag + "/identity");
            graph::Node pn = un;
            pn.name = (un.name.empty() ? un.outputs[0] : un.name) + tag;
            pn.inputs[0] = id.outputs[0];
            Shape s = g.value(un.outputs[0]).shape;
            s[static_cast<size_t>(axis)] = width[p];
            const std::string out = fresh(g, un.outputs[0] + tag);
            g.values[out] = graph::Value{out, g.value(un.outputs[0]).dtype, s, true, std::nullopt, false};
            pn.outputs = {out};
            pooled.push_back(out);
            instead[u].push_back(std::move(id));
            instead[u].push_back(std::move(pn));
          }
          graph::Node cat{(un.name.empty() ? un.outputs[0] : un.name) + "/concat", "Concat", {}, pooled, {un.outputs[0]}};
          cat.attrs.set("axis", axis);
          instead[u].push_back(std::move(cat));
          continue;
        }
        const Tensor& w = *constant_of(g, un.inputs[1]);
        const int64_t wax = un.op == "Conv" ? 1 : un.op == "Gemm" && un.attrs.get_int("transB", 0) ? 1 : 0;
        const graph::Value& ov = g.value(un.outputs[0]);
        // A bias Add of the reader's output (the canonical graph's split of a Gemm's or MatMul's
        // bias): with the last part, before the sum (the wafer adds a bias before a residual).
        const int64_t N = un.op == "Conv" ? w.shape()[0] : w.shape()[1 - static_cast<size_t>(wax)];
        const graph::Node* bias = nullptr;
        if (const auto bu = uses.find(un.outputs[0]); bu != uses.end() && bu->second.size() == 1 && !is_output(un.outputs[0])) {
          const graph::Node& a = g.nodes[bu->second[0]];
          const std::string other = a.inputs.size() == 2 ? (a.inputs[0] == un.outputs[0] ? a.inputs[1] : a.inputs[0]) : "";
          if (a.op == "Add" && constant_of(g, other) && constant_of(g, other)->numel() == N) bias = &a, gone.push_back(bu->second[0]);
        }
        const std::string final_out = bias ? bias->outputs[0] : un.outputs[0];
        std::string sum;
        int64_t lo = 0;
        for (size_t p = 0; p < parts.size(); ++p) {
          const std::string tag = "/in" + std::to_string(lo) + "_" + std::to_string(lo + width[p]);
          const std::string wn = fresh(g, un.inputs[1] + tag);
          g.values[wn] = graph::Value{wn, DType::f32, Shape{}, true, part_of(w, wax, lo, width[p]), g.value(un.inputs[1]).is_initializer};
          g.values[wn].shape = g.values[wn].data->shape();
          lo += width[p];
          graph::Node pn = un;
          pn.name = (un.name.empty() ? un.outputs[0] : un.name) + tag;
          pn.inputs[0] = parts[p];
          pn.inputs[1] = wn;
          if (p + 1 < parts.size() && pn.inputs.size() > 2) pn.inputs.resize(2);  // the bias with the last part
          const std::string out = fresh(g, un.outputs[0] + tag);
          g.values[out] = graph::Value{out, ov.dtype, ov.shape, true, std::nullopt, false};
          pn.outputs = {out};
          instead[u].push_back(pn);
          if (p == 0) {
            sum = out;
            continue;
          }
          std::string term = out;
          if (bias && p + 1 == parts.size()) {
            term = fresh(g, out + "/bias");
            g.values[term] = graph::Value{term, ov.dtype, ov.shape, true, std::nullopt, false};
            graph::Node bn = *bias;
            for (auto& in : bn.inputs)
              if (in == un.outputs[0]) in = out;
            bn.outputs = {term};
            instead[u].push_back(bn);
          }
          const std::string s = p + 1 == parts.size() ? final_out : fresh(g, un.outputs[0] + "/sum" + std::to_string(p));
          if (s != final_out) g.values[s] = graph::Value{s, ov.dtype, ov.shape, true, std::nullopt, false};
          instead[u].push_back(graph::Node{pn.name + "/sum", "Add", {}, {sum, term}, {s}});
          sum = s;
        }
      }
      std::vector<graph::Node> nodes;
      for (size_t i = 0; i < g.nodes.size(); ++i) {
        if (const auto it = instead.find(i); it != instead.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
        else if (i != ci && std::find(moved.begin(), moved.end(), i) == moved.end() && std::find(gone.begin(), gone.end(), i) == gone.end()) nodes.push_back(g.nodes[i]);
        if (const auto it = after.find(i); it != after.end()) nodes.insert(nodes.end(), it->second.begin(), it->second.end());
      }
      g.nodes = std::move(nodes);
      again = changed = true;
    }
  }
  return changed;
}

// The graph match_layers maps: a copy with the rewrites above -- identity Convs for a graph input or
// a pool that several nodes read, dense heads as Convs, readers of Concats split per part -- and
// packed projections split per Slice (match_ops.cpp), or nothing when none applies (the graph as
// it is). The copy is made only for a graph with Slices, Concats or such inputs and pools.
std::optional<graph::Graph> rewrite_branches(const graph::Graph& g0) {
  if (!input_needs_identity(g0) && !pools_need_identity(g0) &&
      std::none_of(g0.nodes.begin(), g0.nodes.end(), [](const graph::Node& n) { return n.op == "Slice" || n.op == "Concat"; }))
    return std::nullopt;
  std::optional<graph::Graph> split = g0;
  bool changed = identity_for_input(*split);
  changed = channel_views(*split) || changed;  // (channels.cpp)
  changed = dense_heads_as_convs(*split) || changed;
  changed = split_concat_readers(*split) || changed;
  changed = identity_for_pools(*split) || changed;
  if (!split_sliced_projections(*split) && !changed) split.reset();
  return split;
}

}  // namespace tessera::wafer::detail
