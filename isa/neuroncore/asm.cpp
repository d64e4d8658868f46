// The NeuronCore assembler and disassembler. One table (kSyntax) says, per op, its operands in
// order, its key=value options and its flag words; the parser and the printer both walk it, which
// is what keeps the round trip exact.
#include "isa/neuroncore/asm.hpp"
#include "isa/text.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "isa/error.hpp"
#include "isa/fileio.hpp"

namespace tessera::neuroncore {

namespace {

// ---------------------------------------------------------------------------------------------
// The syntax table.

enum class Pos : uint8_t { dst, src0, src1, aux, reg, sem, label };
enum class Opt : uint8_t { alu, alu1, func, imm, imm_int, queue, signal, bias, acc, operand };

struct OptSyntax {
  std::string_view key;
  Opt kind;
  int imm = 0;            // imm / imm_int: index into Instr::imm
  bool required = false;
  double def = 0;         // default of an optional immediate
};

struct OpSyntax {
  Op op;
  std::vector<Pos> pos;
  std::vector<OptSyntax> opts;
  std::vector<std::string_view> flags;
  std::string_view usage;
};

const std::vector<OpSyntax>& syntax_table() {
  static const std::vector<OpSyntax> t = {
      {Op::load_stationary, {Pos::src0}, {}, {}, "load_stationary SRC"},
      {Op::multiply_moving, {Pos::dst, Pos::src0}, {}, {"start", "stop"}, "multiply_moving DST, SRC [start] [stop]"},
      {Op::transpose, {Pos::dst, Pos::src0}, {}, {}, "transpose DST, SRC"},
      {Op::tensor_tensor, {Pos::dst, Pos::src0, Pos::src1}, {{"op", Opt::alu, 0, true}}, {}, "tensor_tensor DST, SRC0, SRC1 op=ALU"},
      {Op::tensor_scalar, {Pos::dst, Pos::src0},
       {{"op", Opt::alu, 0, true}, {"imm", Opt::operand, 0, true}, {"op1", Opt::alu1}, {"imm1", Opt::operand, 1, false, 0}}, {},
       "tensor_scalar DST, SRC op=ALU imm=X|AP [op1=ALU imm1=Y|AP]"},
      {Op::tensor_reduce, {Pos::dst, Pos::src0}, {{"op", Opt::alu, 0, true}}, {"negate"}, "tensor_reduce DST, SRC op=ALU [negate]"},
      {Op::tensor_copy, {Pos::dst, Pos::src0}, {}, {}, "tensor_copy DST, SRC"},
      {Op::transpose32, {Pos::dst, Pos::src0}, {}, {}, "transpose32 DST, SRC"},
      {Op::bn_stats, {Pos::dst, Pos::src0}, {}, {}, "bn_stats DST, SRC"},
      {Op::bn_aggr, {Pos::dst, Pos::src0}, {}, {}, "bn_aggr DST, SRC"},
      {Op::memset, {Pos::dst}, {{"imm", Opt::imm, 0, true}}, {}, "memset DST imm=X"},
      {Op::select, {Pos::dst, Pos::src0, Pos::src1, Pos::aux}, {}, {}, "select DST, PRED, ONTRUE, ONFALSE"},
      {Op::activation, {Pos::dst, Pos::src0},
       {{"func", Opt::func, 0, true}, {"scale", Opt::imm, 0, false, 1.0}, {"bias", Opt::bias}, {"acc", Opt::acc}}, {},
       "activation DST, SRC func=FUNC [scale=X] [bias=Y | bias=AP] [acc=AP]"},
      {Op::iota, {Pos::dst}, {{"base", Opt::imm, 0, true}, {"pstep", Opt::imm, 1, true}, {"fstep", Opt::imm, 2, true}}, {},
       "iota DST base=X pstep=Y fstep=Z"},
      {Op::affine_select, {Pos::dst, Pos::src0},
       {{"op", Opt::alu, 0, true}, {"base", Opt::imm, 0, true}, {"pstep", Opt::imm, 1, true}, {"fstep", Opt::imm, 2, true},
        {"fill", Opt::imm, 3, true}},
       {}, "affine_select DST, SRC op=ALU base=X pstep=Y fstep=Z fill=W"},
      {Op::gather, {Pos::dst, Pos::src0, Pos::src1}, {}, {}, "gather DST, TABLE, INDICES"},
      {Op::partition_all_reduce, {Pos::dst, Pos::src0}, {{"op", Opt::alu, 0, true}}, {}, "partition_all_reduce DST, SRC op=ALU"},
      {Op::dma, {Pos::dst, Pos::src0}, {{"queue", Opt::queue}, {"signal", Opt::signal}}, {}, "dma DST, SRC [queue=Q|all] [signal=sN]"},
      {Op::sem_wait, {Pos::sem}, {{"value", Opt::imm_int, 0, true}}, {}, "sem_wait sN value=V"},
      {Op::sem_signal, {Pos::sem}, {{"value", Opt::imm_int, 0, true}}, {}, "sem_signal sN value=V"},
      {Op::step_marker, {}, {{"step", Opt::imm_int, 0, true}}, {}, "step_marker step=K"},
      {Op::set_reg, {Pos::reg}, {{"value", Opt::imm_int, 0, true}}, {}, "set_reg rN value=V"},
      {Op::add_reg, {Pos::reg}, {{"value", Opt::imm_int, 0, true}}, {}, "add_reg rN value=V"},
      {Op::dec_branch_nz, {Pos::reg, Pos::label}, {}, {}, "dec_branch_nz rN LABEL"},
      {Op::branch_nz, {Pos::reg, Pos::label}, {}, {}, "branch_nz rN LABEL"},
      {Op::jump, {Pos::label}, {}, {}, "jump LABEL"},
      {Op::halt, {}, {}, {}, "halt"},
  };
  return t;
}

const OpSyntax* find_syntax(Op op) {
  for (const auto& s : syntax_table())
    if (s.op == op) return &s;
  return nullptr;
}

bool is_ap_pos(Pos p) { return p == Pos::dst || p == Pos::src0 || p == Pos::src1 || p == Pos::aux; }

AccessPattern& ap_field(Instr& in, Pos p) {
  switch (p) {
    case Pos::dst: return in.dst;
    case Pos::src0: return in.src0;
    case Pos::src1: return in.src1;
    default: return in.aux;
  }
}
const AccessPattern& ap_field(const Instr& in, Pos p) { return ap_field(const_cast<Instr&>(in), p); }

bool& flag_field(Instr& in, std::string_view f) { return f == "start" ? in.start : f == "stop" ? in.stop : in.negate; }
bool flag_value(const Instr& in, std::string_view f) { return flag_field(const_cast<Instr&>(in), f); }

// Names in the order of their enums (for lookup and did-you-mean).
template <typename E, typename F>
std::vector<std::string> enum_names(int n, F name) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.emplace_back(name(static_cast<E>(i)));
  return v;
}
const std::vector<std::string>& lane_names() {
  static const auto v = enum_names<Lane>(kLanes, lane_name);
  return v;
}
const std::vector<std::string>& op_names() {
  static const auto v = enum_names<Op>(static_cast<int>(Op::halt) + 1, op_name);
  return v;
}
const std::vector<std::string>& alu_names() {
  static const auto v = enum_names<Alu>(static_cast<int>(Alu::is_le) + 1, alu_name);
  return v;
}
const std::vector<std::string>& func_names() {
  static const auto v = enum_names<Func>(static_cast<int>(Func::abs) + 1, func_name);
  return v;
}
// The dtypes an operand may have (docs/neuroncore-asm.md, Operands).
const std::vector<std::string>& ap_dtype_names() {
  static const std::vector<std::string> v = {"fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int32", "int8", "uint8"};
  return v;
}

template <typename E>
std::optional<E> lookup(std::string_view word, const std::vector<std::string>& names) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == word) return static_cast<E>(i);
  return std::nullopt;
}

// "did you mean 'x'?" or the list of choices.
std::string suggest(std::string_view word, const std::vector<std::string>& names, std::string_view what) {
  std::string m = did_you_mean(std::string(word), names);
  if (!m.empty()) return "did you mean '" + m + "'?";
  std::string s = std::string(what) + ": ";
  for (size_t i = 0; i < names.size(); ++i) s += (i ? " " : "") + names[i];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Small text helpers.

using text::is_ident;
using text::parse_int;
using text::parse_number;
using text::trim;

std::string fmt_num(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, p);
}

std::string fmt_hex(int64_t v) {
  char buf[32];
  buf[0] = '0';
  buf[1] = 'x';
  auto [p, ec] = std::to_chars(buf + 2, buf + sizeof buf, static_cast<uint64_t>(v), 16);
  (void)ec;
  return std::string(buf, p);
}

// A register "rN" / semaphore "sN" with N below `limit`; "" or an error message.
std::string parse_index(std::string_view tok, char prefix, int limit, int8_t& out) {
  const std::string_view what = prefix == 'r' ? "register" : "semaphore";
  int64_t n = 0;
  if (tok.size() < 2 || tok[0] != prefix || !std::isdigit(static_cast<unsigned char>(tok[1])) || !parse_int(tok.substr(1), n))
    return "expected a " + std::string(what) + " " + prefix + "0.." + prefix + std::to_string(limit - 1) + ", got '" +
           std::string(tok) + "'";
  if (n >= limit)
    return std::string(what) + " " + std::string(tok) + " out of range " + prefix + "0-" + prefix + std::to_string(limit - 1);
  out = static_cast<int8_t>(n);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Access patterns: SPACE.DTYPE[PARTS]@OFFSET[+rN*SCALE]{DIMS}

struct ApError {
  std::string message, hint;
};

constexpr std::string_view kApForm = "an operand is SPACE.DTYPE[START:COUNT]@OFFSET{DIMS}, e.g. sb.bf16[0:128]@0{512}, or hbm.DTYPE[ROWSxSTRIDE]@ADDR{DIMS}";

std::optional<ApError> parse_ap(std::string_view tok, AccessPattern& ap) {
  const std::string q = " in `" + std::string(tok) + "`";
  auto fail = [&](std::string m, std::string h = std::string(kApForm)) { return ApError{std::move(m) + q, std::move(h)}; };
  const size_t dot = tok.find('.'), lb = tok.find('['), rb = tok.find(']'), lc = tok.find('{');
  if (dot == std::string_view::npos || lb == std::string_view::npos || rb == std::string_view::npos || lb < dot || rb < lb ||
      lc == std::string_view::npos || lc < rb || tok.back() != '}')
    return fail("malformed operand");
  ap = AccessPattern{};
  const std::string_view space = tok.substr(0, dot);
  if (space == "sb") ap.space = Space::sbuf;
  else if (space == "ps") ap.space = Space::psum;
  else if (space == "hbm") ap.space = Space::hbm;
  else return fail("unknown memory space '" + std::string(space) + "'", suggest(space, {"sb", "ps", "hbm"}, "spaces"));
  const std::string_view dt = tok.substr(dot + 1, lb - dot - 1);
  if (!lookup<int>(dt, ap_dtype_names())) return fail("unknown dtype '" + std::string(dt) + "'", suggest(dt, ap_dtype_names(), "dtypes"));
  ap.dtype = *parse_dtype(dt);

  const std::string_view parts = tok.substr(lb + 1, rb - lb - 1);
  const char sep = ap.space == Space::hbm ? 'x' : ':';
  const size_t s = parts.find(sep);
  int64_t a = 0, b = 0;
  if (s == std::string_view::npos || !parse_int(parts.substr(0, s), a) || !parse_int(parts.substr(s + 1), b))
    return fail("bad partitions '[" + std::string(parts) + "]'",
                ap.space == Space::hbm ? "hbm operands give [ROWSxROW_STRIDE], e.g. [128x4096]"
                                       : "sb/ps operands give [START:COUNT] partitions, e.g. [0:128]");
  const int64_t count = ap.space == Space::hbm ? a : b;
  if (count < 1) return fail(ap.space == Space::hbm ? "zero rows" : "zero partitions");
  if (count > std::numeric_limits<int32_t>::max() || (ap.space != Space::hbm && a > std::numeric_limits<int32_t>::max()))
    return fail("partition numbers out of range");
  if (ap.space == Space::hbm) {
    ap.parts = static_cast<int32_t>(a);
    ap.part_stride = b;
  } else {
    ap.part_start = static_cast<int32_t>(a);
    ap.parts = static_cast<int32_t>(b);
  }

  if (rb + 1 >= tok.size() || tok[rb + 1] != '@') return fail("expected '@OFFSET' after ']'");
  std::string_view off = tok.substr(rb + 2, lc - rb - 2);
  const size_t plus = off.find('+');
  if (!parse_int(off.substr(0, plus), ap.offset, true))
    return fail("bad offset '" + std::string(off.substr(0, plus)) + "'", "offsets are bytes, decimal or 0x hex, not negative");
  if (plus != std::string_view::npos) {
    const std::string_view dyn = off.substr(plus + 1);
    const size_t star = dyn.find('*');
    int64_t scale = 0;
    const std::string dyn_hint = "dynamic addressing is @OFFSET+rN*SCALE, e.g. @0+r2*1024";
    if (star == std::string_view::npos) return fail("bad dynamic offset '+" + std::string(dyn) + "'", dyn_hint);
    if (std::string e = parse_index(dyn.substr(0, star), 'r', kRegs, ap.offset_reg); !e.empty()) return fail(e, dyn_hint);
    if (!parse_int(dyn.substr(star + 1), scale, false, true) || scale < std::numeric_limits<int32_t>::min() ||
        scale > std::numeric_limits<int32_t>::max())
      return fail("bad register scale '" + std::string(dyn.substr(star + 1)) + "'", dyn_hint);
    ap.reg_scale = static_cast<int32_t>(scale);
  }

  // Dims, outermost first; a dim without a stride gets the dense one (product of inner NUMs).
  std::string_view dims = tok.substr(lc + 1, tok.size() - lc - 2);
  std::vector<std::string_view> items;
  for (size_t start = 0;;) {
    const size_t c = dims.find(',', start);
    items.push_back(trim(dims.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start)));
    if (c == std::string_view::npos) break;
    start = c + 1;
  }
  if (items.size() > 4) return fail(std::to_string(items.size()) + " free dims, at most 4");
  std::array<bool, 4> explicit_stride{};
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t colon = items[i].find(':');
    int64_t num = 0, stride = 1;
    const bool has_stride = colon != std::string_view::npos;
    if (!parse_int(items[i].substr(0, colon), num, false, true) ||
        (has_stride && !parse_int(items[i].substr(colon + 1), stride, false, true)))
      return fail("bad dim '" + std::string(items[i]) + "'", "dims are NUM or NUM:STRIDE (elements), e.g. {4:256,128}");
    if (num < 1) return fail("dim count " + std::to_string(num) + ", counts are at least 1");
    if (stride < 0) return fail("negative stride " + std::to_string(stride), "strides are elements, 0 or more");
    if (num > std::numeric_limits<int32_t>::max() || stride > std::numeric_limits<int32_t>::max())
      return fail("dim '" + std::string(items[i]) + "' out of range");
    ap.dims[i] = {static_cast<int32_t>(num), static_cast<int32_t>(stride)};
    explicit_stride[i] = has_stride;
  }
  ap.ndims = static_cast<uint8_t>(items.size());
  int64_t dense = 1;
  for (int i = ap.ndims - 1; i >= 0; --i) {
    auto& d = ap.dims[static_cast<size_t>(i)];
    if (!explicit_stride[static_cast<size_t>(i)]) {
      if (dense > std::numeric_limits<int32_t>::max()) return fail("dense stride out of range");
      d.stride = static_cast<int32_t>(dense);
    }
    dense *= d.num;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Operand tokens of one slot: split at spaces and commas outside [] and {}.

struct Tok {
  std::string_view text;
  bool comma_before = false;
};

std::string tokenize(std::string_view s, std::vector<Tok>& out) {
  bool comma = false;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
      continue;
    }
    if (c == ',') {
      if (comma || out.empty()) return "unexpected ','";
      comma = true;
      ++i;
      continue;
    }
    const size_t start = i;
    int depth = 0;
    for (; i < s.size(); ++i) {
      const char d = s[i];
      if (d == '[' || d == '{') ++depth;
      else if (d == ']' || d == '}') {
        if (--depth < 0) return "unbalanced '" + std::string(1, d) + "'";
      } else if (depth == 0 && (d == ',' || std::isspace(static_cast<unsigned char>(d)))) break;
    }
    if (depth != 0) return "unclosed bracket in `" + std::string(s.substr(start)) + "`";
    out.push_back({s.substr(start, i - start), comma});
    comma = false;
  }
  if (comma) return "trailing ','";
  return {};
}

// ---------------------------------------------------------------------------------------------
// The assembler.

struct LabelRef {
  int32_t instr;
  std::string name;
  std::string where;
};

class Assembler {
 public:
  explicit Assembler(const std::string& file) { prog_.source = file; }

  Program run(std::string_view text) {
    int line_no = 0;
    for (size_t pos = 0; pos <= text.size();) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      ++line_no;
      line(text.substr(pos, nl - pos), line_no);
      pos = nl + 1;
    }
    for (const auto& [name, where] : pending_labels_)
      diags_.add(where, "label '" + name + "' names no bundle: it ends the file",
                 "a label names the bundle after it; put e.g. `control: halt` there");
    for (const auto& r : refs_) {
      auto it = prog_.labels.find(r.name);
      if (it != prog_.labels.end()) {
        prog_.instrs[static_cast<size_t>(r.instr)].target = it->second;
        continue;
      }
      std::vector<std::string> known;
      for (const auto& kv : prog_.labels) known.push_back(kv.first);
      std::string m = did_you_mean(r.name, known);
      diags_.add(r.where, "unknown label '" + r.name + "'", m.empty() ? "define it as `" + r.name + ":` on its own line" : "did you mean '" + m + "'?");
    }
    diags_.throw_if_any();
    return std::move(prog_);
  }

 private:
  void error(std::string message, std::string hint = {}) { diags_.add(where_, std::move(message), std::move(hint)); }

  void line(std::string_view raw, int line_no) {
    where_ = prog_.source + ":" + std::to_string(line_no);
    line_ = line_no;
    if (size_t h = raw.find('#'); h != std::string_view::npos) raw = raw.substr(0, h);
    const std::string_view s = trim(raw);
    if (s.empty()) return;
    if (s[0] == '.') return directive(s);
    if (s.back() == ':' && is_ident(trim(s.substr(0, s.size() - 1)))) return label(trim(s.substr(0, s.size() - 1)));
    bundle(s);
  }

  void directive(std::string_view s) {
    const size_t sp = s.find_first_of(" \t");
    const std::string_view name = s.substr(0, sp);
    if (name != ".hbm") return error("unknown directive '" + std::string(name) + "'", suggest(name, {".hbm"}, "directives"));
    const std::string usage = "`.hbm NAME DTYPE [D0, D1, ...] @ADDR`";
    std::string_view rest = sp == std::string_view::npos ? std::string_view{} : trim(s.substr(sp));
    const size_t lb = rest.find('['), rb = rest.find(']');
    if (lb == std::string_view::npos || rb == std::string_view::npos || rb < lb) return error("malformed .hbm declaration", usage);
    const std::string_view head = trim(rest.substr(0, lb));
    const size_t sp2 = head.find_first_of(" \t");
    if (sp2 == std::string_view::npos) return error("malformed .hbm declaration: expected NAME DTYPE before '['", usage);
    HbmTensor t;
    t.name = std::string(head.substr(0, sp2));
    const std::string_view dt = trim(head.substr(sp2));
    bool ok = true;
    if (!is_ident(t.name)) {
      error("bad HBM tensor name '" + t.name + "'", "names are [A-Za-z_][A-Za-z0-9_]*");
      ok = false;
    } else if (prog_.find_hbm(t.name)) {
      error("HBM tensor '" + t.name + "' declared twice");
      ok = false;
    }
    if (lookup<int>(dt, ap_dtype_names())) {
      t.dtype = *parse_dtype(dt);
    } else {
      error("unknown dtype '" + std::string(dt) + "'", suggest(dt, ap_dtype_names(), "dtypes"));
      ok = false;
    }
    std::string_view shape = rest.substr(lb + 1, rb - lb - 1);
    for (size_t start = 0; !trim(shape).empty();) {
      const size_t c = shape.find(',', start);
      int64_t d = 0;
      const std::string_view item = shape.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start);
      if (!parse_int(item, d) || d < 1) {
        error("bad dimension '" + std::string(trim(item)) + "' in .hbm shape", "dimensions are positive decimal numbers");
        ok = false;
        break;
      }
      t.shape.push_back(d);
      if (c == std::string_view::npos) break;
      start = c + 1;
    }
    if (t.shape.empty() && ok) {
      error("empty shape in .hbm declaration", usage);
      ok = false;
    }
    const std::string_view addr = trim(rest.substr(rb + 1));
    if (addr.empty() || addr[0] != '@' || !parse_int(addr.substr(1), t.offset, true)) {
      error("bad address '" + std::string(addr) + "' in .hbm declaration", "write @ADDR in bytes, decimal or 0x hex");
      ok = false;
    }
    if (ok) prog_.hbm.push_back(std::move(t));
  }

  void label(std::string_view name) {
    const std::string n(name);
    if (lookup<Lane>(name, lane_names())) return error("'" + n + ":' has no instruction", "write `" + n + ": OP OPERANDS`; a label may not be named like a lane");
    if (prog_.labels.count(n) || std::any_of(pending_labels_.begin(), pending_labels_.end(), [&](const auto& p) { return p.first == n; }))
      return error("label '" + n + "' defined twice");
    pending_labels_.emplace_back(n, where_);
  }

  // Slots are parsed into `lanes` first and stored in lane order, so that the instruction order of
  // a program is the order the disassembler prints it in.
  struct Pending {
    std::array<bool, kLanes> used{};
    std::array<std::optional<Instr>, kLanes> instr;
    std::array<std::optional<std::string>, kLanes> label;  // branch target name
  };

  void bundle(std::string_view s) {
    Bundle b;
    b.line = line_;
    const int32_t index = static_cast<int32_t>(prog_.bundles.size());
    for (const auto& l : pending_labels_) prog_.labels[l.first] = index;
    pending_labels_.clear();
    if (s != "nop") {
      Pending lanes;
      for (size_t start = 0;;) {
        const size_t bar = s.find('|', start);
        slot(trim(s.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start)), lanes);
        if (bar == std::string_view::npos) break;
        start = bar + 1;
      }
      for (size_t l = 0; l < kLanes; ++l) {
        if (!lanes.instr[l]) continue;
        b.slot[l] = static_cast<int32_t>(prog_.instrs.size());
        if (lanes.label[l]) refs_.push_back({b.slot[l], *lanes.label[l], where_});
        prog_.instrs.push_back(*lanes.instr[l]);
      }
    }
    prog_.bundles.push_back(b);
  }

  void slot(std::string_view s, Pending& lanes) {
    if (s.empty()) return error("empty slot", "slots are `LANE: OP OPERANDS` separated by '|'");
    const size_t colon = s.find(':');
    const std::string_view lane_word = colon == std::string_view::npos ? std::string_view{} : trim(s.substr(0, colon));
    if (colon == std::string_view::npos || !is_ident(lane_word)) {
      const std::string first(s.substr(0, s.find_first_of(" \t")));
      if (first == "nop") return error("a bare 'nop' stands alone on its line", "drop it, or write `control: nop`");
      if (auto op = lookup<Op>(first, op_names()))
        return error("'" + first + "' has no lane", "write `" + std::string(lane_name(op_lane(*op))) + ": " + std::string(s) + "`");
      return error("expected `LANE: OP OPERANDS`, got `" + std::string(s) + "`", "lanes: tensor vector scalar gpsimd dma0 dma1 sync control");
    }
    const auto lane = lookup<Lane>(lane_word, lane_names());
    if (!lane) {
      std::string hint = suggest(lane_word, lane_names(), "lanes");
      if (trim(s.substr(colon + 1)).find(':') != std::string_view::npos || trim(s.substr(colon + 1)).empty())
        hint += "; a label goes on its own line";
      return error("unknown lane '" + std::string(lane_word) + "'", hint);
    }
    const std::string_view body = trim(s.substr(colon + 1));
    const size_t sp = body.find_first_of(" \t");
    const std::string_view op_word = body.substr(0, sp);
    const std::string_view rest = sp == std::string_view::npos ? std::string_view{} : body.substr(sp);
    const size_t li = static_cast<size_t>(*lane);
    if (lanes.used[li]) return error("lane " + std::string(lane_word) + " used twice in one bundle", "each lane at most once per bundle");
    if (op_word.empty()) return error("lane " + std::string(lane_word) + " has no op", "write `" + std::string(lane_word) + ": OP OPERANDS`");
    const auto op = lookup<Op>(op_word, op_names());
    if (!op) return error("unknown op '" + std::string(op_word) + "'", suggest(op_word, op_names(), "ops"));
    const bool dma_lane = *lane == Lane::dma0 || *lane == Lane::dma1;
    if (*op == Op::dma ? !dma_lane : op_lane(*op) != *lane) {
      const std::string want = *op == Op::dma ? "dma0 or dma1" : std::string(lane_name(op_lane(*op)));
      return error(std::string(op_word) + " runs on lane " + want + ", not " + std::string(lane_word),
                   "write `" + (*op == Op::dma ? std::string("dma0") : want) + ": " + std::string(body) + "`");
    }
    if (*op == Op::nop) {
      if (!trim(rest).empty()) return error("nop takes no operands");
      lanes.used[li] = true;
      return;
    }
    Instr in;
    in.op = *op;
    in.line = line_;
    for (AccessPattern* ap : {&in.dst, &in.src0, &in.src1, &in.aux}) ap->parts = 0;  // absent until given
    lanes.used[li] = true;
    std::optional<std::string> target;
    if (operands(*find_syntax(*op), rest, in, target)) {
      lanes.instr[li] = in;
      lanes.label[li] = std::move(target);
    }
  }

  // Parses operands and options into `in`; false (with diagnostics) if anything is wrong.
  bool operands(const OpSyntax& syn, std::string_view rest, Instr& in, std::optional<std::string>& target) {
    const std::string usage = "syntax: " + std::string(syn.usage);
    std::vector<Tok> toks;
    if (std::string e = tokenize(rest, toks); !e.empty()) {
      error(e + " in `" + std::string(op_name(syn.op)) + std::string(rest) + "`", usage);
      return false;
    }
    const size_t errors_before = diags_.size();
    for (const auto& o : syn.opts)
      if ((o.kind == Opt::imm || o.kind == Opt::operand) && !o.required) in.imm[static_cast<size_t>(o.imm)] = o.def;
    const bool ap_op = std::all_of(syn.pos.begin(), syn.pos.end(), is_ap_pos);
    size_t npos = 0;
    bool seen_option = false;
    std::vector<std::string_view> seen_keys;
    for (const auto& t : toks) {
      const size_t eq = t.text.find('=');
      const bool is_flag = std::find(syn.flags.begin(), syn.flags.end(), t.text) != syn.flags.end();
      if (eq == std::string_view::npos && !is_flag) {  // positional operand
        if (seen_option) {
          error("operand `" + std::string(t.text) + "` after the options", usage);
          continue;
        }
        if (npos >= syn.pos.size()) {
          error("unexpected operand `" + std::string(t.text) + "`", usage);
          continue;
        }
        if (npos > 0 && ap_op && !t.comma_before) error("expected ',' before `" + std::string(t.text) + "`", usage);
        if (t.comma_before && (npos == 0 || !ap_op)) error("unexpected ',' before `" + std::string(t.text) + "`", usage);
        positional(syn.pos[npos++], t.text, in, target, usage);
        continue;
      }
      seen_option = true;
      if (t.comma_before) error("unexpected ',' before `" + std::string(t.text) + "`", "options are separated by spaces");
      const std::string_view key = is_flag ? t.text : t.text.substr(0, eq);
      if (std::find(seen_keys.begin(), seen_keys.end(), key) != seen_keys.end()) {
        error("'" + std::string(key) + "' given twice", usage);
        continue;
      }
      seen_keys.push_back(key);
      if (is_flag) {
        flag_field(in, key) = true;
        continue;
      }
      option(syn, key, t.text.substr(eq + 1), in, usage);
    }
    if (npos < syn.pos.size())
      error(std::string(op_name(syn.op)) + " takes " + std::to_string(syn.pos.size()) + " operand" + (syn.pos.size() == 1 ? "" : "s") + ", got " +
                std::to_string(npos),
            usage);
    for (const auto& o : syn.opts)
      if (o.required && std::find(seen_keys.begin(), seen_keys.end(), o.key) == seen_keys.end())
        error(std::string(op_name(syn.op)) + " needs " + std::string(o.key) + "=", usage);
    return diags_.size() == errors_before;
  }

  void positional(Pos p, std::string_view tok, Instr& in, std::optional<std::string>& target, const std::string& usage) {
    if (is_ap_pos(p)) {
      if (auto e = parse_ap(tok, ap_field(in, p))) error(e->message, e->hint);
      return;
    }
    if (p == Pos::reg) {
      if (std::string e = parse_index(tok, 'r', kRegs, in.reg); !e.empty()) error(e, usage);
      return;
    }
    if (p == Pos::sem) {
      if (std::string e = parse_index(tok, 's', kSemaphores, in.sem); !e.empty()) error(e, usage);
      return;
    }
    if (!is_ident(tok)) return error("bad label '" + std::string(tok) + "'", "labels are [A-Za-z_][A-Za-z0-9_]*");
    target = std::string(tok);
  }

  void option(const OpSyntax& syn, std::string_view key, std::string_view val, Instr& in, const std::string& usage) {
    const OptSyntax* o = nullptr;
    for (const auto& x : syn.opts)
      if (x.key == key) o = &x;
    if (!o) {
      std::vector<std::string> keys;
      for (const auto& x : syn.opts) keys.emplace_back(x.key);
      for (const auto& f : syn.flags) keys.emplace_back(f);
      std::string m = did_you_mean(std::string(key), keys);
      return error("unknown option '" + std::string(key) + "' for " + std::string(op_name(syn.op)),
                   m.empty() ? usage : "did you mean '" + m + "'? " + usage);
    }
    const std::string kv = "'" + std::string(key) + "=" + std::string(val) + "'";
    double num = 0;
    switch (o->kind) {
      case Opt::alu:
      case Opt::alu1: {
        auto a = lookup<Alu>(val, alu_names());
        if (!a) return error("unknown ALU op in " + kv, suggest(val, alu_names(), "ALU ops"));
        (o->kind == Opt::alu ? in.alu : in.alu1) = *a;
        return;
      }
      case Opt::func: {
        auto f = lookup<Func>(val, func_names());
        if (!f) return error("unknown function in " + kv, suggest(val, func_names(), "functions"));
        in.func = *f;
        return;
      }
      case Opt::imm:
      case Opt::imm_int:
        if (!parse_number(val, num)) return error("bad number in " + kv, "immediates are decimal numbers such as 1.0, -3, 1e-5 or -inf");
        if (o->kind == Opt::imm_int && (num != std::floor(num) || std::abs(num) > 9.007199254740992e15))
          return error("not an integer in " + kv, usage);
        in.imm[static_cast<size_t>(o->imm)] = num;
        return;
      case Opt::queue: {
        int64_t q = 0;
        if (val.rfind("all", 0) == 0) {
          int64_t n = 1;
          if (val.size() > 3 && (!parse_int(val.substr(3), n) || n < 1 || n > 63))
            return error("bad DMA queue in " + kv, "allN spreads over queue N (1-63) of every engine");
          in.queue = static_cast<int16_t>(-n);
          return;
        }
        if (!parse_int(val, q) || q > std::numeric_limits<int16_t>::max())
          return error("bad DMA queue in " + kv, "queues are numbers below dma.engines x dma.queues_per_engine, or all");
        in.queue = static_cast<int16_t>(q);
        return;
      }
      case Opt::signal:
        if (std::string e = parse_index(val, 's', kSemaphores, in.sem); !e.empty()) error(e + " in " + kv, usage);
        return;
      case Opt::bias:
        if (parse_number(val, num)) {
          in.imm[1] = num;
          return;
        }
        if (auto e = parse_ap(val, in.src1)) error(e->message, "bias is a number or a [P,1] operand; " + e->hint);
        return;
      case Opt::acc:
        if (auto e = parse_ap(val, in.aux)) error(e->message, e->hint);
        return;
      case Opt::operand:  // a number, or a [P,1] operand per partition (src1 for imm, aux for imm1)
        if (parse_number(val, num)) {
          in.imm[static_cast<size_t>(o->imm)] = num;
          return;
        }
        if (val.find('[') == std::string_view::npos)
          return error("bad number in " + kv, "a tensor_scalar operand is a decimal number such as 1.0, -3, 1e-5 or -inf, or a [P,1] operand");
        if (auto e = parse_ap(val, o->imm == 0 ? in.src1 : in.aux)) error(e->message, "a tensor_scalar operand is a number or a [P,1] operand; " + e->hint);
        return;
    }
  }

  Program prog_;
  DiagnosticList diags_;
  std::string where_;
  int line_ = 0;
  std::vector<std::pair<std::string, std::string>> pending_labels_;  // name, where
  std::vector<LabelRef> refs_;
};

// ---------------------------------------------------------------------------------------------
// Printing.

std::string format_slot(const Instr& in, Lane lane, const std::map<int32_t, std::string>& target_names) {
  std::string s = std::string(lane_name(lane)) + ": " + std::string(op_name(in.op));
  const OpSyntax* syn = find_syntax(in.op);
  if (!syn) return s;
  for (size_t i = 0; i < syn->pos.size(); ++i) {
    const Pos p = syn->pos[i];
    s += i == 0 ? " " : is_ap_pos(p) ? ", " : " ";
    if (is_ap_pos(p)) s += format_ap(ap_field(in, p));
    else if (p == Pos::reg) s += "r" + std::to_string(in.reg);
    else if (p == Pos::sem) s += "s" + std::to_string(in.sem);
    else {
      auto it = target_names.find(in.target);
      s += it != target_names.end() ? it->second : "_b" + std::to_string(in.target);
    }
  }
  for (const auto& o : syn->opts) {
    const std::string k = " " + std::string(o.key) + "=";
    switch (o.kind) {
      case Opt::alu: s += k + std::string(alu_name(in.alu)); break;
      case Opt::alu1:
        if (in.alu1 != Alu::bypass) s += k + std::string(alu_name(in.alu1));
        break;
      case Opt::func: s += k + std::string(func_name(in.func)); break;
      case Opt::imm:
      case Opt::imm_int: {
        const double v = in.imm[static_cast<size_t>(o.imm)];
        if (o.required || !(v == o.def && std::signbit(v) == std::signbit(o.def))) s += k + fmt_num(v);
        break;
      }
      case Opt::queue:
        if (in.queue == kQueueAll) s += k + "all";
        else if (spread_queue(in.queue)) s += k + "all" + std::to_string(-in.queue);
        else if (in.queue != 0) s += k + std::to_string(in.queue);
        break;
      case Opt::signal:
        if (in.sem >= 0) s += k + "s" + std::to_string(in.sem);
        break;
      case Opt::bias:
        if (in.src1.present()) s += k + format_ap(in.src1);
        else if (in.imm[1] != 0 || std::signbit(in.imm[1])) s += k + fmt_num(in.imm[1]);
        break;
      case Opt::acc:
        if (in.aux.present()) s += k + format_ap(in.aux);
        break;
      case Opt::operand: {
        const AccessPattern& ap = o.imm == 0 ? in.src1 : in.aux;
        const double v = in.imm[static_cast<size_t>(o.imm)];
        if (ap.present()) s += k + format_ap(ap);
        else if (o.required || !(v == o.def && std::signbit(v) == std::signbit(o.def))) s += k + fmt_num(v);
        break;
      }
    }
  }
  for (const auto& f : syn->flags)
    if (flag_value(in, f)) s += " " + std::string(f);
  return s;
}

bool same_ap(const AccessPattern& a, const AccessPattern& b) {
  if (!a.present() && !b.present()) return true;
  return a == b;
}

bool same_instr(const Instr& a, const Instr& b) {
  return a.op == b.op && same_ap(a.dst, b.dst) && same_ap(a.src0, b.src0) && same_ap(a.src1, b.src1) && same_ap(a.aux, b.aux) &&
         a.alu == b.alu && a.alu1 == b.alu1 && a.func == b.func && a.imm == b.imm && a.start == b.start && a.stop == b.stop &&
         a.negate == b.negate && a.reg == b.reg && a.sem == b.sem && a.queue == b.queue && a.target == b.target;
}

}  // namespace

std::string format_ap(const AccessPattern& ap) {
  std::string s = std::string(space_name(ap.space)) + "." + std::string(dtype_name(ap.dtype)) + "[";
  if (ap.space == Space::hbm) s += std::to_string(ap.parts) + "x" + std::to_string(ap.part_stride) + "]@" + fmt_hex(ap.offset);
  else s += std::to_string(ap.part_start) + ":" + std::to_string(ap.parts) + "]@" + std::to_string(ap.offset);
  if (ap.offset_reg >= 0) s += "+r" + std::to_string(ap.offset_reg) + "*" + std::to_string(ap.reg_scale);
  s += "{";
  const int n = std::clamp<int>(ap.ndims, 1, 4);
  std::array<int64_t, 4> dense{};
  int64_t d = 1;
  for (int i = n - 1; i >= 0; --i) {
    dense[static_cast<size_t>(i)] = d;
    d *= ap.dims[static_cast<size_t>(i)].num;
  }
  for (int i = 0; i < n; ++i) {
    const Dim& dim = ap.dims[static_cast<size_t>(i)];
    if (i) s += ",";
    s += std::to_string(dim.num);
    if (dim.stride != dense[static_cast<size_t>(i)]) s += ":" + std::to_string(dim.stride);
  }
  return s + "}";
}

std::string disassemble(const Instr& in, Lane lane) { return format_slot(in, lane, {}); }
std::string disassemble(const Instr& in) { return disassemble(in, op_lane(in.op)); }

std::string disassemble(const Program& p) {
  std::string out;
  for (const auto& t : p.hbm) {
    out += ".hbm " + t.name + " " + std::string(dtype_name(t.dtype)) + " [";
    for (size_t i = 0; i < t.shape.size(); ++i) out += (i ? ", " : "") + std::to_string(t.shape[i]);
    out += "] @" + fmt_hex(t.offset) + "\n";
  }
  // Names of branch targets: the first label of each bundle, or a made-up `_bN` for targets no
  // label names (programs built in code).
  std::map<int32_t, std::vector<std::string>> at;
  for (const auto& [name, index] : p.labels) at[index].push_back(name);
  for (const auto& in : p.instrs)
    if ((in.op == Op::dec_branch_nz || in.op == Op::branch_nz || in.op == Op::jump) && !at.count(in.target)) {
      std::string n = "_b" + std::to_string(in.target);
      while (p.labels.count(n)) n += "_";
      at[in.target].push_back(n);
    }
  std::map<int32_t, std::string> names;
  for (const auto& [index, list] : at) names[index] = list.front();
  auto labels_at = [&](int32_t i) {
    if (auto it = at.find(i); it != at.end())
      for (const auto& n : it->second) out += n + ":\n";
  };
  for (size_t b = 0; b < p.bundles.size(); ++b) {
    labels_at(static_cast<int32_t>(b));
    std::string line;
    for (int l = 0; l < kLanes; ++l) {
      const int32_t slot = p.bundles[b].slot[static_cast<size_t>(l)];
      if (slot < 0 || static_cast<size_t>(slot) >= p.instrs.size() || p.instrs[static_cast<size_t>(slot)].op == Op::nop) continue;
      if (!line.empty()) line += " | ";
      line += format_slot(p.instrs[static_cast<size_t>(slot)], static_cast<Lane>(l), names);
    }
    out += (line.empty() ? "nop" : line) + "\n";
  }
  for (const auto& [index, list] : at)  // labels past the last bundle
    if (index < 0 || static_cast<size_t>(index) >= p.bundles.size())
      for (const auto& n : list) out += n + ":\n";
  return out;
}

bool same_program(const Program& a, const Program& b) {
  if (a.instrs.size() != b.instrs.size() || a.bundles.size() != b.bundles.size() || a.labels != b.labels || a.hbm.size() != b.hbm.size())
    return false;
  for (size_t i = 0; i < a.instrs.size(); ++i)
    if (!same_instr(a.instrs[i], b.instrs[i])) return false;
  for (size_t i = 0; i < a.bundles.size(); ++i)
    if (a.bundles[i].slot != b.bundles[i].slot) return false;
  for (size_t i = 0; i < a.hbm.size(); ++i)
    if (a.hbm[i].name != b.hbm[i].name || a.hbm[i].dtype != b.hbm[i].dtype || a.hbm[i].shape != b.hbm[i].shape ||
        a.hbm[i].offset != b.hbm[i].offset)
      return false;
  return true;
}

Program assemble(std::string_view text, const std::string& file_name) { return Assembler(file_name).run(text); }

Program assemble_file(const std::string& path) { return assemble(read_file(path), path); }

}  // namespace tessera::neuroncore
