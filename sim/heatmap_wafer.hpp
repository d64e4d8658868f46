#pragma once
// The PE-activity heatmap of a wafer run (heatmap.svg beside report.json; outputs.heatmap):
// three panels over the fabric, each a grid of cells coloured on a viridis scale:
//   busy     the fraction of the run's cycles the PE's main thread ran a task (Fabric::busy_cycles)
//   SRAM     the PE's program data (the end of its last array, Program::data_bytes) over the data
//            area of its SRAM (pe.sram_bytes - pe.reserved_bytes)
//   links    the busiest of the PE's four outgoing router links: wavelets sent / cycles
//            (Fabric::link_wavelets; a link carries at most one wavelet a cycle)
// Each panel is coloured from 0 to its own maximum (labelled under it), so structure shows at low
// use. Fabrics wider or taller than 160 PEs are drawn in blocks of k x k PEs (k the smallest that fits):
// a block shows the mean over its program PEs for busy and SRAM, the maximum for links (a hot link
// stays visible). PEs without a program are grey in the busy and SRAM panels. The layout's
// rectangles are outlined, named in a tooltip. Cells of one colour in a row are merged into one
// rect, so a compiled layout's file stays small. Deterministic: same run, same bytes.
#include <string>

namespace tessera::wafer {
class Fabric;
}

namespace tessera::sim {

// The SVG of the last run of `fab` (its loaded layout); `title` names the run.
std::string wafer_heatmap_svg(const wafer::Fabric& fab, const std::string& title);

// Per-panel figures the SVG shows (mean over program PEs, maximum), for the report and tests.
struct HeatmapFigures {
  double busy_mean = 0, busy_max = 0, sram_mean = 0, sram_max = 0, link_mean = 0, link_max = 0;
  int64_t block = 1;  // PEs per cell side
};
HeatmapFigures wafer_heatmap_figures(const wafer::Fabric& fab);

}  // namespace tessera::sim
