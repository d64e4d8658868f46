// `tessera sweep --plot`: simulated (and predicted) latency over the grid as SVG (sweep.hpp).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "sim/sweep.hpp"

namespace tessera::sim {

using json = nlohmann::json;

namespace {

// Sequential colour from light to dark blue, t in [0, 1].
std::string ramp(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const double a[3] = {247, 251, 255}, b[3] = {8, 48, 107};
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", static_cast<int>(a[0] + (b[0] - a[0]) * t), static_cast<int>(a[1] + (b[1] - a[1]) * t),
                static_cast<int>(a[2] + (b[2] - a[2]) * t));
  return buf;
}

}  // namespace

std::string plot_sweep_svg(const std::vector<GridAxis>& axes, const std::vector<SweepPoint>& points) {
  std::ostringstream o;
  // A value's label on an axis: a listed point's number (the legend below names its fields).
  auto tick = [&](const GridAxis& a, size_t i) { return a.listed() ? "set " + std::to_string(i + 1) : grid_value_text(a.values[i]); };
  auto axis_name = [&](const GridAxis& a) { return a.listed() ? std::string("listed points (sets below)") : a.key; };
  const GridAxis* listed = nullptr;
  for (const auto& a : axes)
    if (a.listed()) listed = &a;
  const size_t legend_lines = listed ? std::min<size_t>(listed->values.size(), 24) : 0;
  // The listed sets, one line each, from y down.
  auto legend = [&](double x, double y) {
    if (!listed) return;
    for (size_t i = 0; i < legend_lines; ++i)
      o << "<text x=\"" << x << "\" y=\"" << y + 15.0 * static_cast<double>(i) << "\" fill=\"#333\">set " << i + 1 << ": "
        << xml_escape(grid_value_text(listed->values[i])) << "</text>\n";
    if (listed->values.size() > legend_lines)
      o << "<text x=\"" << x << "\" y=\"" << y + 15.0 * static_cast<double>(legend_lines) << "\" fill=\"#555\">+" << listed->values.size() - legend_lines
        << " more</text>\n";
  };
  const std::string title = points.empty() ? std::string("sweep") : points[0].result.name.substr(0, points[0].result.name.find(" ["));
  double lo = 1e300, hi = 0;
  for (const auto& p : points)
    for (const auto& v : {p.result.simulated_s, p.result.predicted_s})
      if (v && *v > 0) lo = std::min(lo, *v), hi = std::max(hi, *v);
  if (axes.size() == 1) {
    // A line chart: the values in grid order along x, latency along y (from 0).
    const auto& ax = axes[0];
    const double W = 720, L = 90, R = 30, T = 60, B = 80, H = 460 + 15.0 * static_cast<double>(legend_lines + (legend_lines ? 1 : 0));
    const double pw = W - L - R, ph = 460 - T - B;  // (the legend of listed points below adds to H)
    // Round ticks (1, 2 or 5 times a power of ten), four to eight of them, the top one above the data.
    const double top = hi > 0 ? hi * 1.05 : 1e-6;
    double step = std::pow(10.0, std::floor(std::log10(top / 4)));
    for (const double m : {1.0, 2.0, 5.0, 10.0})
      if (top / (step * m) <= 8) {
        step *= m;
        break;
      }
    const int nticks = static_cast<int>(std::ceil(top / step));
    const double ymax = step * nticks;
    const size_t n = ax.values.size();
    auto X = [&](size_t i) { return L + (n == 1 ? pw / 2 : pw * static_cast<double>(i) / static_cast<double>(n - 1)); };
    auto Y = [&](double s) { return T + ph * (1 - s / ymax); };
    o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title) << ": latency over " << xml_escape(axis_name(ax)) << "</text>\n"
      << "<line x1=\"" << L << "\" y1=\"" << T + ph << "\" x2=\"" << L + pw << "\" y2=\"" << T + ph << "\" stroke=\"#333\"/>\n"
      << "<line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\"" << T + ph << "\" stroke=\"#333\"/>\n";
    for (int k = 0; k <= nticks; ++k) {
      const double s = step * k;
      o << "<line x1=\"" << L - 4 << "\" y1=\"" << Y(s) << "\" x2=\"" << L + pw << "\" y2=\"" << Y(s) << "\" stroke=\"#eee\"/>"
        << "<text x=\"" << L - 8 << "\" y=\"" << Y(s) + 4 << "\" text-anchor=\"end\">" << xml_escape(format_seconds(s)) << "</text>\n";
    }
    for (size_t i = 0; i < n; ++i)
      o << "<text x=\"" << X(i) << "\" y=\"" << T + ph + 18 << "\" text-anchor=\"middle\">" << xml_escape(tick(ax, i)) << "</text>\n";
    o << "<text x=\"" << L + pw / 2 << "\" y=\"" << T + ph + 50 << "\" text-anchor=\"middle\">" << xml_escape(axis_name(ax)) << "</text>\n";
    legend(L, T + ph + 72);
    auto series = [&](bool simulated, const char* colour, const char* dash) {
      std::string path;
      for (size_t i = 0; i < points.size() && i < n; ++i) {
        const auto v = simulated ? points[i].result.simulated_s : points[i].result.predicted_s;
        if (!v) continue;
        path += (path.empty() ? "M " : " L ") + printf_str("%.2f", X(i)) + " " + printf_str("%.2f", Y(*v));
        o << "<circle class=\"" << (simulated ? "simulated" : "predicted") << "\" cx=\"" << printf_str("%.2f", X(i)) << "\" cy=\"" << printf_str("%.2f", Y(*v))
          << "\" r=\"4\" fill=\"" << colour << "\"><title>" << xml_escape(sweep_point_label(axes, points[i].values)) << ": " << (simulated ? "simulated " : "predicted ")
          << xml_escape(format_seconds(v)) << "</title></circle>\n";
      }
      if (!path.empty()) o << "<path d=\"" << path << "\" fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash << "/>\n";
    };
    series(true, "#1f77b4", "");
    series(false, "#ff7f0e", " stroke-dasharray=\"6 4\"");
    o << "<g font-size=\"12\"><line x1=\"" << L + 14 << "\" y1=\"" << T + 10 << "\" x2=\"" << L + 38 << "\" y2=\"" << T + 10
      << "\" stroke=\"#1f77b4\" stroke-width=\"2\"/><text x=\"" << L + 44 << "\" y=\"" << T + 14 << "\">simulated</text>"
      << "<line x1=\"" << L + 14 << "\" y1=\"" << T + 28 << "\" x2=\"" << L + 38 << "\" y2=\"" << T + 28
      << "\" stroke=\"#ff7f0e\" stroke-width=\"2\" stroke-dasharray=\"6 4\"/><text x=\"" << L + 44 << "\" y=\"" << T + 32
      << "\">predicted</text></g>\n</svg>\n";
    return o.str();
  }
  // Heatmaps: axes[0] across, axes[1] down, one panel per combination of the other axes' values
  // (the points are in grid order, the last axis fastest). Colour: simulated latency, log scale.
  const auto& ax = axes[0];
  const auto& ay = axes[1];
  size_t panels = 1;
  for (size_t a = 2; a < axes.size(); ++a) panels *= axes[a].values.size();
  const double cw = std::max(70.0, 560.0 / static_cast<double>(ax.values.size())), ch = 34;
  const double pw = cw * static_cast<double>(ax.values.size()), ph = ch * static_cast<double>(ay.values.size());
  const double L = std::max(120.0, 6.6 * static_cast<double>(axis_name(ay).size() + 2) + 16), T = 110, gapx = 60, gapy = 80;
  const size_t per_row = std::max<size_t>(1, std::min<size_t>(panels, pw > 400 ? 1 : 3));
  const size_t prow = (panels + per_row - 1) / per_row;
  const std::string line1 = title + ": simulated latency";
  const std::string line2 = "across: " + axis_name(ax) + "; down: " + axis_name(ay);
  const double W = std::max({L + static_cast<double>(per_row) * (pw + gapx) - gapx + 30, 7.5 * static_cast<double>(line2.size()) + 40, 520.0});
  const double H = T + static_cast<double>(prow) * (ph + gapy) - gapy + 50 + 15.0 * static_cast<double>(legend_lines + (legend_lines ? 1 : 0));
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << W / 2 << "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(line1) << "</text>\n"
    << "<text x=\"" << W / 2 << "\" y=\"44\" text-anchor=\"middle\" font-size=\"12\">" << xml_escape(line2) << "</text>\n";
  if (hi > 0)
    o << "<text x=\"" << W / 2 << "\" y=\"62\" text-anchor=\"middle\" fill=\"#555\">colour: light " << xml_escape(format_seconds(lo)) << " to dark "
      << xml_escape(format_seconds(hi)) << " (log scale); red: could not run</text>\n";
  // Panel p's value index on each axis after the first two (the last axis fastest).
  auto panel_at = [&](size_t panel) {
    std::vector<size_t> at(axes.size() - 2);
    for (size_t a = axes.size(); a-- > 2;) {
      at[a - 2] = panel % axes[a].values.size();
      panel /= axes[a].values.size();
    }
    return at;
  };
  // The position of point (ix, iy) of panel `at` in grid order.
  auto index = [&](size_t ix, size_t iy, const std::vector<size_t>& at) {
    size_t idx = ix * axes[1].values.size() + iy;
    for (size_t a = 2; a < axes.size(); ++a) idx = idx * axes[a].values.size() + at[a - 2];
    return idx;
  };
  for (size_t pn = 0; pn < panels; ++pn) {
    const double px = L + static_cast<double>(pn % per_row) * (pw + gapx), py = T + static_cast<double>(pn / per_row) * (ph + gapy);
    const std::vector<size_t> at0 = panel_at(pn);
    std::string ptitle;
    for (size_t a = 2; a < axes.size(); ++a)
      ptitle += (a > 2 ? ", " : "") + (axes[a].listed() ? tick(axes[a], at0[a - 2]) : axes[a].key + "=" + grid_value_text(axes[a].values[at0[a - 2]]));
    if (!ptitle.empty()) o << "<text x=\"" << px + pw / 2 << "\" y=\"" << py - 26 << "\" text-anchor=\"middle\" font-size=\"12\">" << xml_escape(ptitle) << "</text>\n";
    o << "<text x=\"" << px - 8 << "\" y=\"" << py - 8 << "\" text-anchor=\"end\" fill=\"#555\">" << xml_escape(axis_name(ay)) << " \xE2\x86\x93</text>\n";
    for (size_t ix = 0; ix < ax.values.size(); ++ix)
      o << "<text x=\"" << px + cw * (static_cast<double>(ix) + 0.5) << "\" y=\"" << py - 8 << "\" text-anchor=\"middle\">"
        << xml_escape(tick(ax, ix)) << "</text>\n";
    for (size_t iy = 0; iy < ay.values.size(); ++iy) {
      o << "<text x=\"" << px - 8 << "\" y=\"" << py + ch * (static_cast<double>(iy) + 0.5) + 4 << "\" text-anchor=\"end\">"
        << xml_escape(tick(ay, iy)) << "</text>\n";
      for (size_t ix = 0; ix < ax.values.size(); ++ix) {
        const size_t i = index(ix, iy, at0);
        if (i >= points.size()) continue;
        const auto& r = points[i].result;
        const double t = r.simulated_s && hi > lo ? std::log(*r.simulated_s / lo) / std::log(hi / lo) : 0.5;
        const std::string fill = r.simulated_s ? ramp(t) : "#f2dede";
        const double x = px + cw * static_cast<double>(ix), y = py + ch * static_cast<double>(iy);
        o << "<rect class=\"cell\" x=\"" << x << "\" y=\"" << y << "\" width=\"" << cw << "\" height=\"" << ch << "\" fill=\"" << fill
          << "\" stroke=\"white\"><title>" << xml_escape(sweep_point_label(axes, points[i].values)) << ": " << xml_escape(sweep_status_text(r)) << "</title></rect>"
          << "<text x=\"" << x + cw / 2 << "\" y=\"" << y + ch / 2 + 4 << "\" text-anchor=\"middle\" fill=\"" << (t > 0.55 ? "white" : "#111") << "\">"
          << xml_escape(r.simulated_s ? format_seconds(r.simulated_s) : std::string("error")) << "</text>\n";
      }
    }
    o << "<text x=\"" << px + pw / 2 << "\" y=\"" << py + ph + 18 << "\" text-anchor=\"middle\" fill=\"#555\">" << xml_escape(axis_name(ax)) << " \xE2\x86\x92</text>\n";
  }
  legend(20, H - 15.0 * static_cast<double>(legend_lines + (legend_lines ? 1 : 0)) - 10 + 15);
  o << "</svg>\n";
  return o.str();
}

}  // namespace tessera::sim
