#include "sim/heatmap_wafer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <vector>

#include "isa/wafer/asm.hpp"
#include "models/wafer/fabric.hpp"

namespace tessera::sim {

namespace {

constexpr int64_t kMaxCells = 160;  // cells per panel side
constexpr int kLevels = 64;         // colour steps

// Viridis (matplotlib's), five anchors, linear between them.
std::string colour(int level) {
  static constexpr std::array<std::array<double, 3>, 5> a{{{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}}};
  const double t = static_cast<double>(level) / (kLevels - 1) * 4.0;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(std::lround(a[i][0] + f * (a[i + 1][0] - a[i][0]))),
                static_cast<int>(std::lround(a[i][1] + f * (a[i + 1][1] - a[i][1]))), static_cast<int>(std::lround(a[i][2] + f * (a[i + 1][2] - a[i][2]))));
  return buf;
}
int level_of(double v) { return std::clamp(static_cast<int>(v * kLevels), 0, kLevels - 1); }
std::string pct(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * v);
  return buf;
}
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return o;
}

// Per-cell values of the three panels (NaN: no program PE in the cell).
struct Grid {
  int64_t k = 1, cw = 0, ch = 0;
  std::array<std::vector<double>, 3> v;  // busy, sram, link
  HeatmapFigures fig;
};

Grid grid_of(const wafer::Fabric& fab) {
  Grid g;
  const int64_t W = fab.width(), H = fab.height();
  g.k = std::max<int64_t>(1, (std::max(W, H) + kMaxCells - 1) / kMaxCells);
  g.cw = (W + g.k - 1) / g.k;
  g.ch = (H + g.k - 1) / g.k;
  const size_t n = static_cast<size_t>(g.cw * g.ch);
  std::array<std::vector<double>, 3> sum;
  for (auto& s : sum) s.assign(n, 0.0);
  std::vector<int64_t> pes(n, 0);
  const double cycles = static_cast<double>(std::max<int64_t>(1, fab.stats().cycles));
  const double area = static_cast<double>(std::max<int64_t>(1, fab.config().data_area_bytes()));
  int64_t programs = 0, routers = 0;
  double busy_sum = 0, sram_sum = 0, link_sum = 0;
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      const size_t c = static_cast<size_t>((y / g.k) * g.cw + x / g.k);
      int64_t hot = 0;
      for (const wafer::Dir d : {wafer::Dir::N, wafer::Dir::S, wafer::Dir::E, wafer::Dir::W}) hot = std::max(hot, fab.link_wavelets(x, y, d));
      const double link = std::min(1.0, static_cast<double>(hot) / cycles);
      sum[2][c] = std::max(sum[2][c], link);
      link_sum += link;
      ++routers;
      g.fig.link_max = std::max(g.fig.link_max, link);
      const wafer::Program* p = fab.program(x, y);
      if (!p) continue;
      const double busy = std::min(1.0, static_cast<double>(fab.busy_cycles(x, y)) / cycles);
      const double sram = std::min(1.0, static_cast<double>(p->data_bytes()) / area);
      sum[0][c] += busy;
      sum[1][c] += sram;
      ++pes[c];
      ++programs;
      busy_sum += busy;
      sram_sum += sram;
      g.fig.busy_max = std::max(g.fig.busy_max, busy);
      g.fig.sram_max = std::max(g.fig.sram_max, sram);
    }
  for (int i = 0; i < 3; ++i) {
    g.v[static_cast<size_t>(i)].assign(n, NAN);
    for (size_t c = 0; c < n; ++c)
      if (i == 2) g.v[2][c] = sum[2][c];
      else if (pes[c]) g.v[static_cast<size_t>(i)][c] = sum[static_cast<size_t>(i)][c] / static_cast<double>(pes[c]);
  }
  g.fig.block = g.k;
  g.fig.busy_mean = programs ? busy_sum / static_cast<double>(programs) : 0;
  g.fig.sram_mean = programs ? sram_sum / static_cast<double>(programs) : 0;
  g.fig.link_mean = routers ? link_sum / static_cast<double>(routers) : 0;
  return g;
}

}  // namespace

HeatmapFigures wafer_heatmap_figures(const wafer::Fabric& fab) { return grid_of(fab).fig; }

std::string wafer_heatmap_svg(const wafer::Fabric& fab, const std::string& title) {
  const Grid g = grid_of(fab);
  const int64_t scale = std::max<int64_t>(1, 300 / std::max(g.cw, g.ch));
  const int64_t pw = g.cw * scale, ph = g.ch * scale, col = std::max<int64_t>(pw, 250), gap = 30, x0 = 20, y0 = 74;
  const int64_t width = x0 * 2 + 3 * col + 2 * gap, height = y0 + ph + 64;
  const wafer::FabricStats& st = fab.stats();
  std::string o;
  auto add = [&](const std::string& s) { o += s; };
  auto num = [](int64_t v) { return std::to_string(v); };
  add("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" viewBox=\"0 0 " + num(width) + " " +
      num(height) + "\">\n");
  add("<style>text{font-family:sans-serif;font-size:12px;fill:#222}.t{font-size:15px;font-weight:bold}.s{fill:#555}</style>\n");
  add("<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n");
  add("<text class=\"t\" x=\"" + num(x0) + "\" y=\"22\">" + esc(title) + "</text>\n");
  std::string sub = num(fab.width()) + " x " + num(fab.height()) + " PEs, " + num(st.program_pes) + " with programs, " + num(st.cycles) +
                    " cycles, " + num(st.wavelet_hops) + " wavelet hops";
  if (g.k > 1) sub += "; one cell = " + num(g.k) + " x " + num(g.k) + " PEs";
  add("<text class=\"s\" x=\"" + num(x0) + "\" y=\"40\">" + esc(sub) + "</text>\n");
  const std::array<std::string, 3> heads{"busy: task cycles / run", "SRAM: program data / data area", "links: busiest outgoing link"};
  const std::array<std::pair<double, double>, 3> figs{{{g.fig.busy_mean, g.fig.busy_max}, {g.fig.sram_mean, g.fig.sram_max}, {g.fig.link_mean, g.fig.link_max}}};
  const wafer::LoadedLayout* L = fab.layout();
  for (size_t i = 0; i < 3; ++i) {
    const int64_t px = x0 + static_cast<int64_t>(i) * (col + gap);
    // Each panel's colours span 0 .. its own maximum (labelled under it), so structure shows at low use.
    const double top = figs[i].second > 0 ? figs[i].second : 1.0;
    add("<text x=\"" + num(px) + "\" y=\"" + num(y0 - 18) + "\">" + heads[i] + "</text>\n");
    add("<text class=\"s\" x=\"" + num(px) + "\" y=\"" + num(y0 - 4) + "\">mean " + pct(figs[i].first) + ", max " + pct(figs[i].second) +
        (i == 2 ? " over routers" : " over program PEs") + "</text>\n");
    add("<g transform=\"translate(" + num(px) + " " + num(y0) + ") scale(" + num(scale) + ")\" shape-rendering=\"crispEdges\">\n");
    add("<rect width=\"" + num(g.cw) + "\" height=\"" + num(g.ch) + "\" fill=\"#d9d9d9\"/>\n");
    const auto& v = g.v[i];
    for (int64_t y = 0; y < g.ch; ++y)
      for (int64_t x = 0; x < g.cw;) {
        const double a = v[static_cast<size_t>(y * g.cw + x)];
        int64_t e = x + 1;
        if (std::isnan(a)) {
          while (e < g.cw && std::isnan(v[static_cast<size_t>(y * g.cw + e)])) ++e;
        } else {
          const int la = level_of(a / top);
          while (e < g.cw && !std::isnan(v[static_cast<size_t>(y * g.cw + e)]) && level_of(v[static_cast<size_t>(y * g.cw + e)] / top) == la) ++e;
          add("<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(e - x) + "\" height=\"1\" fill=\"" + colour(la) + "\"/>\n");
        }
        x = e;
      }
    if (L)
      for (const auto& r : L->layout.rects) {
        const double k = static_cast<double>(g.k);
        char buf[256];
        std::snprintf(buf, sizeof buf, "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#fff\" stroke-width=\"1\" vector-effect=\"non-scaling-stroke\">",
                      r.x / k, r.y / k, r.width / k, r.height / k);
        add(std::string(buf) + "<title>" + esc(r.name) + " (" + num(r.width) + " x " + num(r.height) + " at " + num(r.x) + "," + num(r.y) + ")</title></rect>\n");
      }
    add("</g>\n");
    // The panel's colour scale: 0 .. its maximum.
    const int64_t by = y0 + ph + 14, bw = std::min<int64_t>(col, 200);
    add("<g shape-rendering=\"crispEdges\">");
    for (int l = 0; l < kLevels; ++l) {
      const int64_t a = px + bw * l / kLevels, b = px + bw * (l + 1) / kLevels;
      add("<rect x=\"" + num(a) + "\" y=\"" + num(by) + "\" width=\"" + num(b - a) + "\" height=\"10\" fill=\"" + colour(l) + "\"/>");
    }
    add("</g>\n<text x=\"" + num(px) + "\" y=\"" + num(by + 24) + "\">0%</text><text x=\"" + num(px + bw) + "\" y=\"" + num(by + 24) +
        "\" text-anchor=\"end\">" + pct(top) + "</text>\n");
  }
  add("<rect x=\"" + num(x0) + "\" y=\"" + num(height - 16) + "\" width=\"10\" height=\"10\" fill=\"#d9d9d9\"/><text class=\"s\" x=\"" + num(x0 + 16) +
      "\" y=\"" + num(height - 7) + "\">no program PE; white outlines: the layout's rectangles (names as tooltips)</text>\n");
  add("</svg>\n");
  return o;
}

}  // namespace tessera::sim
