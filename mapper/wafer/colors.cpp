// Color allocation (compile.hpp; docs/wafer-compiler.md "Colours"): one vertex per stream (a kernel's
// x multicast, its two reduce colors, its weight stream); streams whose routers overlap conflict (a
// router routes a color one way); Boost's sequential vertex colouring assigns the colors.
#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/sequential_vertex_coloring.hpp>
#include <map>
#include <set>

#include "isa/error.hpp"
#include "mapper/wafer/internal.hpp"

namespace tessera::wafer::detail {

namespace {

struct RectR {
  int64_t x0, y0, x1, y1;  // inclusive
  bool meets(const RectR& o) const { return x0 <= o.x1 && o.x0 <= x1 && y0 <= o.y1 && o.y0 <= y1; }
};

struct Stream {
  size_t kernel;
  char what;  // 'x', '0', '1', 'w'
  std::vector<RectR> routers;
};

}  // namespace

// The first kernel with kernel l's orientation (l itself when none before it): in weight-streaming
// inference the kernels of one orientation share its reduce and weight colors and routes.
size_t first_of_orientation(const Compiled& c, size_t l) {
  for (size_t q = 0; q < l; ++q)
    if (c.kernels[q].k_on_columns == c.kernels[l].k_on_columns) return q;
  return l;
}

// Sequenced, the kernels of one orientation share the first one's LayerNorm chain colors and routes,
// and those of its split-head attention chains with the same group size (the routes are the
// groups'): the kernel whose set kernel l uses (l itself when none before it).
size_t ln_chain_owner(const Compiled& c, size_t l) {
  for (size_t q = 0; c.sequenced && q < l; ++q)
    if (c.kernels[q].k_on_columns == c.kernels[l].k_on_columns && c.kernels[q].layernorm) return q;
  return l;
}

size_t attn_chain_owner(const Compiled& c, size_t l) {
  const DenseKernel& k = c.kernels[l];
  for (size_t q = 0; c.sequenced && q < l; ++q)
    if (c.kernels[q].k_on_columns == k.k_on_columns && c.kernels[q].attn_group() > 1 && c.kernels[q].attn_group() == k.attn_group()) return q;
  return l;
}

// The first kernel whose residual moves in the same direction as kernel l's (l itself when none
// before it): they share the diagonal route and its color, used one after another.
size_t first_move(const Compiled& c, size_t l) {
  for (size_t q = 0; q < l; ++q)
    if (c.kernels[q].res_move && c.kernels[q].k_on_columns == c.kernels[l].k_on_columns) return q;
  return l;
}

void allocate_colors(Compiled& c, const WaferConfig& cfg, const MappingOptions& opt) {
  std::vector<Stream> st;
  // Weight streaming: kernels of one orientation share their reduce and weight colors
  // -- the same routes, used one kernel after another (a PE finishes a kernel's tasks before the
  // next kernel's data reaches it; the streams come in order) -- so only the x multicasts, which
  // select a data task each, need a color per kernel.
  const bool share = c.mode == MapMode::weight_streaming;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const DenseKernel& k = c.kernels[l];
    const RectR r{k.x0, k.y0, k.x0 + k.w - 1, k.y0 + k.h - 1};
    // (Sequenced: shared as the reduce's colors are: one kernel's chain-end work ends before the next's.)
    if (k.layernorm && ln_chain_owner(c, l) == l) {  // the edge chain and the broadcast back, along the chain ends
      st.push_back({l, 'n', {r}});
      st.push_back({l, 'o', {r}});
      st.push_back({l, 'p', {r}});
    }
    if (k.attn_group() > 1 && attn_chain_owner(c, l) == l) {  // attention's per-head chains and broadcasts, along the chain ends
      st.push_back({l, 'a', {r}});
      st.push_back({l, 'c', {r}});
      st.push_back({l, 'e', {r}});
    }
    if (k.res_move && first_move(c, l) == l) st.push_back({l, 'm', {r}});  // the residual moves of one direction share a color
    if (c.training) st.push_back({l, 'b', {r}});  // the dy multicast: one per kernel (its data task)
    if (share && first_of_orientation(c, l) != l) {
      if (!c.sequenced) st.push_back({l, 'x', {r}});  // (sequenced: the orientation's x color too)
      continue;
    }
    Stream x{l, 'x', {r}};
    if (l > 0) {  // the previous layer's chain ends send this layer's x
      const DenseKernel& p = c.kernels[l - 1];
      x.routers.push_back(p.k_on_columns ? RectR{p.x0 + p.w - 1, p.y0, p.x0 + p.w - 1, p.y0 + p.h - 1}
                                         : RectR{p.x0, p.y0 + p.h - 1, p.x0 + p.w - 1, p.y0 + p.h - 1});
    }
    st.push_back(x);
    st.push_back({l, '0', {r}});
    st.push_back({l, '1', {r}});
    if (c.mode == MapMode::weight_streaming) st.push_back({l, 'w', {r}});
  }
  if (c.training) {  // the loss chain along the last layer's chain ends
    const DenseKernel& k = c.kernels.back();
    const RectR r{k.x0, k.y0, k.x0 + k.w - 1, k.y0 + k.h - 1};
    if (!loss_on_ln_chain(c)) {  // (else the LayerNorm's edge chain carries it: the same routes)
      st.push_back({c.kernels.size() - 1, 'L', {r}});
      st.push_back({c.kernels.size() - 1, 'M', {r}});
    }
    if (c.verdict()) st.push_back({c.kernels.size() - 1, 'V', {r}});  // MemoryX's verdict, to the chain ends
  }
  using G = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS>;
  G g(st.size());
  for (size_t a = 0; a < st.size(); ++a)
    for (size_t b = a + 1; b < st.size(); ++b) {
      bool meet = false;
      for (const auto& ra : st[a].routers)
        for (const auto& rb : st[b].routers) meet = meet || ra.meets(rb);
      if (meet) boost::add_edge(a, b, g);
    }
  std::vector<boost::graph_traits<G>::vertices_size_type> color(st.size());
  auto cmap = boost::make_iterator_property_map(color.begin(), boost::get(boost::vertex_index, g));
  const auto used = static_cast<int64_t>(boost::sequential_vertex_coloring(g, cmap));
  const int64_t avail = cfg.colors - opt.reserved_colors;
  auto label = [&](size_t v) {
    const char w = st[v].what;
    return "kernel '" + c.kernels[st[v].kernel].name + "' " +
           (w == 'x' ? "x multicast" : w == 'w' ? "weight stream" : w == 'b' ? "dy multicast" : w == 'L' || w == 'M' ? "loss chain" : w == 'V' ? "loss-scaling verdict" : w == 'n' || w == 'o' ? "LayerNorm chain" : w == 'p' ? "LayerNorm broadcast" : w == 'a' || w == 'c' ? "attention score chain" : w == 'e' ? "attention P broadcast" : w == 'm' ? "residual move" : std::string("reduce ") + w);
  };
  if (used > avail) {
    size_t worst = 0;
    for (size_t v = 0; v < st.size(); ++v)
      if (color[v] > color[worst]) worst = v;
    std::string names;
    auto [a, e] = boost::adjacent_vertices(worst, g);
    std::set<std::string> ks;
    for (; a != e; ++a) ks.insert(c.kernels[st[*a].kernel].name);
    for (const auto& n : ks) names += (names.empty() ? "" : ", ") + n;
    throw InputError("color allocation", "the routes need " + std::to_string(used) + " colors, " + std::to_string(avail) +
                                             " are available (router.colors - reserved); " + label(worst) + " conflicts with streams of " + names,
                     c.mode == MapMode::weight_streaming ? "weight streaming uses a color per layer plus 3 per orientation (training: 4 per orientation, one per layer and 2 for the loss) on one rectangle: map fewer layers"
                                                         : "use a larger block (mapping.wafer_block) or weight streaming");
  }
  std::map<int, std::vector<std::string>> by_color;
  for (size_t v = 0; v < st.size(); ++v) {
    DenseKernel& k = c.kernels[st[v].kernel];
    const int col = static_cast<int>(opt.reserved_colors + static_cast<int64_t>(color[v]));
    const char w = st[v].what;
    (w == 'x' ? k.cx : w == '0' ? k.cr0 : w == '1' ? k.cr1 : w == 'b' ? k.cb : w == 'L' ? c.cl0 : w == 'M' ? c.cl1 : w == 'n' ? k.cn0 : w == 'o' ? k.cn1 : w == 'p' ? k.cnb
     : w == 'a' ? k.ca0 : w == 'c' ? k.ca1 : w == 'e' ? k.cab : w == 'm' ? k.cm : w == 'V' ? c.cv : k.cw) = col;
    by_color[col].push_back(label(v));
  }
  for (size_t l = 0; l < c.kernels.size(); ++l)
    if (c.kernels[l].res_move && first_move(c, l) != l) {
      DenseKernel& k = c.kernels[l];
      k.cm = c.kernels[first_move(c, l)].cm;
      by_color[k.cm].push_back("kernel '" + k.name + "' residual move (shared)");
    }
  for (size_t l = 0; l < c.kernels.size(); ++l) {  // the shared LayerNorm and attention chain colors (sequenced)
    DenseKernel& k = c.kernels[l];
    if (const size_t q = ln_chain_owner(c, l); k.layernorm && q != l) {
      k.cn0 = c.kernels[q].cn0, k.cn1 = c.kernels[q].cn1, k.cnb = c.kernels[q].cnb;
      for (const int col : {k.cn0, k.cn1, k.cnb}) by_color[col].push_back("kernel '" + k.name + "' LayerNorm chain (shared)");
    }
    if (const size_t q = attn_chain_owner(c, l); k.attn_group() > 1 && q != l) {
      k.ca0 = c.kernels[q].ca0, k.ca1 = c.kernels[q].ca1, k.cab = c.kernels[q].cab;
      for (const int col : {k.ca0, k.ca1, k.cab}) by_color[col].push_back("kernel '" + k.name + "' attention chain (shared)");
    }
  }
  if (loss_on_ln_chain(c)) {
    c.cl0 = c.kernels.back().cn0, c.cl1 = c.kernels.back().cn1;
    for (const int col : {c.cl0, c.cl1}) by_color[col].push_back("the loss chain (the last LayerNorm's edge chain)");
  }
  if (share)  // the shared colors: from the first kernel of the same orientation
    for (size_t l = 0; l < c.kernels.size(); ++l) {
      const size_t q = first_of_orientation(c, l);
      if (q == l) continue;
      DenseKernel& k = c.kernels[l];
      k.cr0 = c.kernels[q].cr0, k.cr1 = c.kernels[q].cr1, k.cw = c.kernels[q].cw;
      if (c.sequenced) {
        k.cx = c.kernels[q].cx;
        by_color[k.cx].push_back("kernel '" + k.name + "' x multicast (shared)");
      }
      by_color[k.cr0].push_back("kernel '" + k.name + "' reduce 0 (shared)");
      by_color[k.cr1].push_back("kernel '" + k.name + "' reduce 1 (shared)");
      by_color[k.cw].push_back("kernel '" + k.name + "' weight stream (shared)");
    }
  c.colors_used = static_cast<int>(used);
  for (auto& [col, v] : by_color) c.color_streams.push_back({std::to_string(col), v});
}

}  // namespace tessera::wafer::detail
