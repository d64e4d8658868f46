// compile_report.txt (compile.hpp): the estimate in the columns of Cerebras' compile report.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "mapper/wafer/compile.hpp"

namespace tessera::wafer {

std::string compile_report(const Compiled& c, const WaferConfig& cfg) {
  std::ostringstream o;
  char line[512];
  const double hz = cfg.clock_hz;
  const int64_t B = c.kernels.front().samples;
  double flops = 0;
  int64_t compute = 0, transfer = 0, active = 0;
  for (const auto& k : c.kernels) {
    flops += k.est.flops;
    compute += k.est.compute;
    transfer += std::max(k.est.transfer, k.est.stream);
    active = c.mode == MapMode::weight_streaming ? std::max(active, k.pes()) : active + k.pes();
  }
  const double total_s = static_cast<double>(c.predicted_cycles) / hz;
  o << "tessera wafer compile report (" << (c.mode == MapMode::pipelined ? "pipelined" : "weight streaming") << ", fabric " << c.fabric_width << " x "
    << c.fabric_height << " PEs of " << cfg.fabric_width << " x " << cfg.fabric_height << ", " << hz / 1e6 << " MHz, batch " << B << ")\n\n";
  o << "Estimated Overall Performance\n";
  const double fab = static_cast<double>(cfg.fabric_width * cfg.fabric_height);
  std::snprintf(line, sizeof line, "  %-28s %14.1f\n  %-28s %14.1f\n  %-28s %14.1f\n  %-28s %13.2f%%\n  %-28s %13.2f%%\n  %-28s %14lld cycles (%.3f us)\n",
                "Samples/s", B / total_s, "Compute Samples/s", compute ? B / (static_cast<double>(compute) / hz) : 0.0, "Transmission Samples/s",
                transfer ? B / (static_cast<double>(transfer) / hz) : 0.0, "Active PEs", 100.0 * static_cast<double>(active) / fab,
                "Compute Utilization", 100.0 * flops / 2 / (static_cast<double>(active) * static_cast<double>(c.predicted_cycles) * std::max<int64_t>(1, cfg.simd_fmacs) / static_cast<double>(op_interval(Op::fmacs, cfg))),
                "Predicted latency", static_cast<long long>(c.predicted_cycles), total_s * 1e6);
  o << line << "\nPer kernel\n";
  std::snprintf(line, sizeof line, "  %-3s %-22s %-16s %9s %9s %7s %12s %12s %12s %9s %8s %8s\n", "#", "kernel", "op", "PEs", "rect", "block", "start", "end",
                "cycles", "Samples/s", "Active%", "Util%");
  o << line;
  int64_t prev = 0;
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const auto& k = c.kernels[l];
    const int64_t span = std::max<int64_t>(1, k.est.end - prev);
    const std::string rect = std::to_string(k.w) + "x" + std::to_string(k.h);
    const std::string blk = std::to_string(k.kb) + "x" + std::to_string(k.nb);
    std::snprintf(line, sizeof line, "  %-3zu %-22.22s %-16.16s %9lld %9s %7s %12lld %12lld %12lld %9.0f %7.2f%% %7.2f%%\n", l, k.name.c_str(), k.op.c_str(),
                  static_cast<long long>(k.pes()), rect.c_str(), blk.c_str(), static_cast<long long>(k.est.start), static_cast<long long>(k.est.end),
                  static_cast<long long>(span), B / (static_cast<double>(span) / hz), 100.0 * static_cast<double>(k.pes()) / fab,
                  100.0 * k.est.flops / 2 / (static_cast<double>(k.pes()) * static_cast<double>(span)));
    o << line;
    prev = k.est.end;
  }
  o << "\nPer kernel detail (cycles): compute = per-PE x tasks, transfer = reduce chain + bias/activation + hand-off";
  if (c.mode == MapMode::weight_streaming) o << ", stream = a line's weight stream, weights = last block in place";
  o << "\n";
  for (size_t l = 0; l < c.kernels.size(); ++l) {
    const auto& k = c.kernels[l];
    std::snprintf(line, sizeof line, "  %-3zu compute %10lld  transfer %8lld  stream %10lld  weights %10lld  flops %.3g  weight bytes %.3g\n", l,
                  static_cast<long long>(k.est.compute), static_cast<long long>(k.est.transfer), static_cast<long long>(k.est.stream),
                  static_cast<long long>(k.est.weights_ready), k.est.flops, k.est.weight_bytes);
    o << line;
  }
  o << "\nColors (" << c.colors_used << " used; Boost sequential vertex colouring of the route conflict graph)\n";
  for (const auto& [col, v] : c.color_streams) {
    o << "  " << col << ":";
    for (const auto& s : v) o << " [" << s << "]";
    o << "\n";
  }
  o << "\nSRAM: largest per-PE data " << c.sram_high_water << " bytes of " << cfg.data_area_bytes() << "\n";
  if (c.training) {
    const auto& e = c.train_est;
    std::snprintf(line, sizeof line,
                  "\nTraining step (%s, %s): forward to cycle %lld, loss to %lld, backward to %lld (the fabric's end), MemoryX updates done at %.3f us;\n"
                  "  step %.3f us predicted, %.1f training samples/s (the overall figures above are the fabric's part)\n",
                  c.loss.c_str(), c.momentum != 0 ? "SGD with momentum" : "SGD", static_cast<long long>(e.forward), static_cast<long long>(e.loss),
                  static_cast<long long>(e.backward), e.update_end_s * 1e6, c.predicted_s * 1e6, static_cast<double>(B) / c.predicted_s);
    o << line;
  }
  return o.str();
}

}  // namespace tessera::wafer
