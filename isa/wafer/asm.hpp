#pragma once
// The wafer PE assembler, disassembler, validator and layout loader (syntax: docs/wafer-asm.md).
//
// A PE program (text) is assembled once per distinct set of parameter values: `$name` is replaced
// by the bound value before a line is parsed, the way CSL compiles one binary per distinct set of
// tile parameters. A layout (JSON) says which PE rectangle runs which program with which
// parameters (numbers, or integer expressions of the PE's px/py within the rectangle) and how
// each color is routed. Errors are InputError diagnostics; all errors of a file come at once, each
// with where = "FILE:LINE" (plus " PE (x,y)" when assembled for a PE), "FILE /json/pointer" or
// "PE (x,y)".
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "isa/error.hpp"
#include "isa/wafer/builder.hpp"
#include "isa/wafer/isa.hpp"

namespace tessera::wafer {

// Parses a PE program. `params` bind `.param` names (overriding their defaults); `pe` ("PE (3,0)")
// is appended to every diagnostic's where.
Program assemble(std::string_view text, const std::string& file_name, const Bindings& params = {},
                 const std::string& pe = {});
Program assemble_file(const std::string& path, const Bindings& params = {});

// Canonical text of a bound program: `.data`, `.dsd`, then the tasks with their bodies; numbers
// already substituted (no `.param` lines). assemble(disassemble(p)) gives back p (same_program).
std::string disassemble(const Program& p);
std::string disassemble(const Program& p, const Instr& in);  // one instruction, "fadds y, y, x"
bool same_program(const Program& a, const Program& b);       // ignores source, lines, params

// Preset rules (docs/wafer-asm.md "Rules checked"): task ids < task.count, colors < router.colors,
// queues 0..7 with a non-zero depth, data within pe.sram_bytes - pe.reserved_bytes, mem DSDs
// inside the data area. Diagnostics go to `d` with where "FILE:LINE[ pe]".
void validate(const Program& p, const WaferConfig& c, DiagnosticList& d, const std::string& pe = {});
void validate(const Program& p, const WaferConfig& c);  // throws InputError

// ---------------------------------------------------------------------------------------------
// Layouts.

// Integer expression over px, py, width, height (the rectangle's size) and numbers, with
// + - * / % ( ) and the comparisons == != < <= > >= (1 or 0); compiled once, evaluated per PE.
struct ParamExpr {
  struct Tok {
    char kind;  // 'n' number, 'x' px, 'y' py, 'w' width, 'h' height, 'u' unary minus, or an operator:
                // + - * / % and '=' (==) '!' (!=) '<' 'l' (<=) '>' 'g' (>=)
    int64_t value;
  };
  std::vector<Tok> code;  // reverse Polish
  // Compiles `text`; returns an error message or "".
  static std::string compile(std::string_view text, ParamExpr& out);
  // Evaluates; false on a division by zero.
  bool eval(int64_t px, int64_t py, int64_t width, int64_t height, int64_t& out) const;
};

struct ParamSpec {
  std::string name;
  bool is_expr = false;
  double value = 0;     // a number
  ParamExpr expr;       // an expression
  std::string where;    // JSON pointer
};

// A region (absolute PE coordinates) where one color has one route.
struct RouteSpec {
  int32_t x = 0, y = 0, width = 0, height = 0;
  uint8_t color = 0;
  Route route;
  std::string where;  // "FILE /rects/0/routes/1"
  bool contains(int64_t px, int64_t py) const { return px >= x && px < x + width && py >= y && py < y + height; }
};

struct RectSpec {
  std::string name;
  int32_t x = 0, y = 0, width = 0, height = 0;
  std::string program;             // path (relative paths resolved against the layout's directory); "" = routing only
  std::vector<ParamSpec> params;
  std::string where;               // "FILE /rects/0"
};

// An edge port: `length` consecutive PEs along one side of the fabric (lanes), starting at
// (x, y). An input port's lane i feeds its PE's router a wavelet stream on `color` arriving from
// `side` (as from an off-fabric neighbour); an output port's lane collects what that router sends
// towards `side` on `color`. Streams are 32-bit payloads: f32 values, or f16 in the data half.
struct PortSpec {
  std::string name;
  bool input = true;
  Dir side = Dir::W;
  int32_t x = 0, y = 0, length = 1;
  uint8_t color = 0;
  Elem type = Elem::f32;
  std::string where;  // "FILE /ports/0"
  int64_t lane_x(int64_t i) const { return x + (side == Dir::N || side == Dir::S ? i : 0); }
  int64_t lane_y(int64_t i) const { return y + (side == Dir::E || side == Dir::W ? i : 0); }
  bool covers(int64_t px, int64_t py) const {
    for (int64_t i = 0; i < length; ++i)
      if (lane_x(i) == px && lane_y(i) == py) return true;
    return false;
  }
};

struct Layout {
  std::string source;
  int64_t width = 0, height = 0;   // fabric size used (<= the preset's)
  std::vector<RectSpec> rects;
  std::vector<RouteSpec> routes;   // of every rectangle, in file order
  std::vector<PortSpec> ports;     // edge ports, in file order
  const PortSpec* port(const std::string& name) const {
    for (const auto& p : ports)
      if (p.name == name) return &p;
    return nullptr;
  }
};

// Strict parse (unknown keys, wrong types and out-of-range values are errors with JSON pointers);
// checks rectangles and routes against the fabric (check_routes). `base_dir` resolves program paths.
Layout parse_layout(std::string_view json_text, const std::string& file_name, const std::string& base_dir,
                    const WaferConfig& c);

// Route consistency (docs/wafer-asm.md): regions of one color do not overlap; colors routable;
// every tx leads to a neighbour inside the fabric whose route for that color receives from the
// opposite direction; tx RAMP only where a rectangle with a program lies. Where = "PE (x,y)", one
// diagnostic per region, direction and problem (naming its first PE and how many more).
void check_routes(const Layout& l, const WaferConfig& c, DiagnosticList& d);

inline constexpr uint32_t kNoProgram = std::numeric_limits<uint32_t>::max();

// A layout with its programs assembled (one Program per distinct (file, parameter values)) and
// validated. What a fabric model loads.
struct LoadedLayout {
  Layout layout;
  std::vector<Program> programs;
  // Per rectangle: the program index of each PE (row-major, width*height entries), or one entry
  // when every PE of it runs the same instance; empty for routing-only rectangles.
  std::vector<std::vector<uint32_t>> pe_program;
  uint32_t program_at(int64_t x, int64_t y) const;  // kNoProgram if none
  const Route* route_at(int64_t x, int64_t y, int color) const;
  int rect_at(int64_t x, int64_t y) const;           // -1 if none
};
LoadedLayout load_layout(const std::string& path, const WaferConfig& c);
// By the layout's program path (as written in the layout, resolved against base_dir), instead of
// reading files: `sources` program texts (the fuzz target), `templates` programs built in code,
// instantiated per binding (what the wafer compiler builds; no text in between).
LoadedLayout load_layout_text(std::string_view json_text, const std::string& file_name, const std::string& base_dir,
                              const WaferConfig& c, const std::map<std::string, std::string>* sources = nullptr,
                              const std::map<std::string, ProgramTemplate>* templates = nullptr);

}  // namespace tessera::wafer
