// ProgramBuilder: typed construction of PE programs with the assembler's checks (builder.hpp), and
// the helpers the assembler shares with it (asm_util.hpp).
#include "isa/wafer/builder.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>

#include "isa/text.hpp"
#include "isa/wafer/asm_util.hpp"

namespace tessera::wafer {

namespace asmutil {

bool parse_int(std::string_view s, int64_t& out) {
  int64_t v = 0;
  if (!text::parse_int(s, v, true, true) || v > (int64_t{1} << 62) || v < -(int64_t{1} << 62)) return false;
  out = v;
  return true;
}

bool parse_float(std::string_view s, float& out) {
  s = text::trim(s);
  if (s == "inf") return out = INFINITY, true;
  if (s == "-inf") return out = -INFINITY, true;
  if (s.empty() || s[0] == '+') return false;
  double d = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
  if (ec != std::errc() || p != s.data() + s.size() || std::isnan(d)) return false;
  out = static_cast<float>(d);
  return std::isfinite(out) || std::isinf(d);
}

bool looks_float(std::string_view s) {
  return s.find_first_of(".eE") != std::string_view::npos && s.find("0x") == std::string_view::npos ? true : s == "inf" || s == "-inf";
}

std::string fmt_float(float v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  std::string s(buf, p);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string fmt_value(double v) {
  if (v == std::floor(v) && std::fabs(v) < 9e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  (void)ec;
  return std::string(buf, p);
}

std::string suggest(std::string_view word, const std::vector<std::string>& names, std::string_view what) {
  std::string m = did_you_mean(std::string(word), names);
  if (!m.empty()) return "did you mean '" + m + "'?";
  std::string s = std::string(what) + ":";
  for (const auto& n : names) s += " " + n;
  return s;
}

bool reserved_word(std::string_view s) {
  if (s == "px" || s == "py" || s == "wv" || s == "async") return true;
  int64_t n = 0;
  return s.size() >= 2 && s[0] == 'r' && std::isdigit(static_cast<unsigned char>(s[1])) && parse_int(s.substr(1), n);
}

bool fits(Want w, Elem e) {
  switch (w) {
    case Want::f16: return is_half(e);
    case Want::f32: return e == Elem::f32;
    case Want::b16: return elem_bytes(e) == 2;
    case Want::b32: return elem_bytes(e) == 4;
    default: return true;
  }
}

std::string_view want_name(Want w) {
  static constexpr std::string_view n[] = {"any", "a 16-bit float (f16, bf16, cbf16)", "f32", "16-bit", "32-bit"};
  return n[static_cast<int>(w)];
}

std::string instr_usage(const OpInfo& info) {
  std::string usage = "syntax: " + std::string(info.name);
  for (size_t i = 0; i < info.roles.size(); ++i) {
    static constexpr std::string_view rn[] = {"DST", "SRC", "SCALAR", "rD", "A", "TASK", "LABEL", "DSD"};
    usage += std::string(i ? ", " : " ") + std::string(rn[static_cast<int>(info.roles[i])]);
  }
  if (info.cls == OpClass::dsd) usage += " [async] [activate=TASK] [unblock=TASK]";
  return usage;
}

std::string fmt_scalar(const Operand& o) {
  switch (o.kind) {
    case OpndKind::reg: return "r" + std::to_string(o.v);
    case OpndKind::imm_i: return std::to_string(o.v);
    case OpndKind::imm_f: return fmt_float(std::bit_cast<float>(o.v));
    case OpndKind::px: return "px";
    case OpndKind::py: return "py";
    case OpndKind::wv: return "wv";
    default: return "?";
  }
}

}  // namespace asmutil

using namespace asmutil;

Arg::Arg(Operand o) : text(fmt_scalar(o)), scalar(o) {}
Operand reg(int r) { return {OpndKind::reg, r}; }
Operand imm(int64_t v) { return {OpndKind::imm_i, static_cast<int32_t>(static_cast<uint32_t>(v))}; }
Operand fimm(double v) { return {OpndKind::imm_f, std::bit_cast<int32_t>(static_cast<float>(v))}; }

// ---------------------------------------------------------------------------------------------
// ProgramBuilder.

ProgramBuilder::ProgramBuilder(std::string source, std::string pe, DiagnosticList& d) : diags_(d), pe_(std::move(pe)) {
  prog_.source = std::move(source);
}

std::string ProgramBuilder::where_at(int32_t line) const {
  return prog_.source + (line < 0 ? "" : ":" + std::to_string(line)) + (pe_.empty() ? "" : " " + pe_);
}

void ProgramBuilder::at(int32_t line) { line_ = line, at_called_ = true; }

void ProgramBuilder::error(std::string m, std::string h) { diags_.add(where_at(here()), std::move(m), std::move(h)); }

bool ProgramBuilder::new_name(std::string_view name, std::string_view what) {
  if (!text::is_ident(name) || reserved_word(name)) {
    error("bad " + std::string(what) + " name '" + std::string(name) + "'", "names are [A-Za-z_][A-Za-z0-9_]*, not px py wv async rN");
    return false;
  }
  return true;
}

int ProgramBuilder::find_array(std::string_view n) const {
  const auto it = array_at_.find(std::string(n));
  return it == array_at_.end() ? -1 : it->second;
}

int ProgramBuilder::find_dsd(std::string_view n) const {
  const auto it = dsd_at_.find(std::string(n));
  return it == dsd_at_.end() ? -1 : it->second;
}

std::vector<std::string> ProgramBuilder::array_names() const {
  std::vector<std::string> v;
  for (const auto& d : prog_.data) v.push_back(d.name);
  return v;
}

bool ProgramBuilder::array_name_ok(std::string_view name) {
  if (!new_name(name, "array")) return false;
  if (find_array(name) >= 0) return error("array '" + std::string(name) + "' declared twice"), false;
  return true;
}

void ProgramBuilder::add_array(DataDecl d) {
  if (d.has_fill && !d.always_live())
    return error("an array with live= has no defined content before its range; fill= needs it live throughout", "drop live= or fill=");
  d.line = line_;
  // The lowest 4-byte aligned address clear of every array it may be live with: with no live=
  // anywhere, the end of the last array (declaration order).
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const auto& o : prog_.data)
    if (d.live_with(o)) busy.emplace_back(o.addr, int64_t{o.addr} + o.bytes());
  std::sort(busy.begin(), busy.end());
  int64_t at = 0;
  for (const auto& [lo, hi] : busy) {
    if (at + d.bytes() <= lo) break;
    at = std::max(at, (hi + 3) / 4 * 4);
  }
  d.addr = static_cast<uint32_t>(at);
  array_at_.emplace(d.name, static_cast<int>(prog_.data.size()));
  prog_.data.push_back(std::move(d));
}

void ProgramBuilder::data(const std::string& name, Elem e, int64_t count, std::optional<float> fill, int32_t live_lo, int32_t live_hi) {
  if (!array_name_ok(name)) return;
  if (count < 1 || count > (1 << 24)) return error("bad count " + std::to_string(count) + " of array '" + name + "'", "a positive integer, at most 16777216");
  DataDecl d;
  d.name = name;
  d.elem = e;
  d.count = static_cast<int32_t>(count);
  d.has_fill = fill.has_value();
  d.fill = fill.value_or(0.0f);
  if (live_lo >= 0 && (live_hi < live_lo || live_hi > 32767))
    return error("bad live=" + std::to_string(live_lo) + ".." + std::to_string(live_hi), "a phase range LO..HI, 0 <= LO <= HI <= 32767");
  d.live_lo = live_lo;
  d.live_hi = live_lo >= 0 ? live_hi : -1;
  add_array(std::move(d));
}

bool ProgramBuilder::dsd_name_ok(std::string_view name) {
  if (!new_name(name, "DSD")) return false;
  if (find_dsd(name) >= 0) return error("DSD '" + std::string(name) + "' declared twice"), false;
  return true;
}

void ProgramBuilder::add_dsd(const std::string& name, const Dsd& d) {
  if (d.is_mem()) {
    const DataDecl& arr = prog_.data[static_cast<size_t>(d.array)];
    const auto [lo, hi] = d.byte_range();
    if (lo < arr.addr || hi > int64_t{arr.addr} + arr.bytes())
      return error("DSD '" + name + "' reaches outside array '" + arr.name + "' (elements " + std::to_string((lo - int64_t{arr.addr}) / elem_bytes(arr.elem)) +
                       ".." + std::to_string((hi - int64_t{arr.addr}) / elem_bytes(arr.elem) - 1) + " of " + std::to_string(arr.count) + ")",
                   "check off=, len=, stride= and dims=");
  }
  prog_.dsds.push_back(d);
  dsd_at_.emplace(name, static_cast<int>(prog_.dsd_names.size()));
  prog_.dsd_names.push_back(name);
  prog_.dsd_lines.push_back(line_);
}

void ProgramBuilder::fabric(const std::string& name, DsdKind kind, Elem e, int64_t color, int64_t queue, int64_t len, bool control, bool index, bool advance) {
  if (!dsd_name_ok(name)) return;
  if (color < 0 || color >= kMaxColors) return error("bad color=" + std::to_string(color), "an integer in 0.." + std::to_string(kMaxColors - 1));
  if (queue < 0 || queue > 7) return error("bad queue=" + std::to_string(queue), "an integer in 0..7");
  if (len < 1 || len > (1 << 24)) return error("bad len=" + std::to_string(len), "an integer in 1..16777216");
  if (index && elem_bytes(e) != 2) return error("'index' needs a 16-bit type", "the index half exists only for 16-bit data");
  if (advance && kind != DsdKind::fabout) return error("'advance' is a fabout flag", "a fabout's last wavelet advances the switches it passes");
  Dsd d;
  d.kind = kind;
  d.elem = e;
  d.color = static_cast<uint8_t>(color);
  d.queue = static_cast<uint8_t>(queue);
  d.length = static_cast<uint32_t>(len);
  d.control = control;
  d.index = index;
  d.advance = advance;
  add_dsd(name, d);
}

void ProgramBuilder::mem1d(const std::string& name, const std::string& array, int64_t off, std::optional<int64_t> len, int64_t stride) {
  if (!dsd_name_ok(name)) return;
  const int a = find_array(array);
  if (a < 0) return error("unknown array '" + array + "'", suggest(array, array_names(), "declare it with .data first; arrays"));
  const DataDecl& arr = prog_.data[static_cast<size_t>(a)];
  const int64_t n = len.value_or(arr.count - off);
  if (off < 0 || off >= arr.count) return error("bad off=" + std::to_string(off), "an integer in 0.." + std::to_string(arr.count - 1));
  if (stride < -32768 || stride > 32767 || n < 1 || n > 65535)
    return error("bad len=" + std::to_string(n) + " stride=" + std::to_string(stride), "len in 1..65535, stride in -32768..32767");
  Dsd d;
  d.kind = DsdKind::mem1d;
  d.array = static_cast<int16_t>(a);
  d.elem = arr.elem;
  d.base = static_cast<uint32_t>(arr.addr + off * elem_bytes(arr.elem));
  d.dims[0] = {static_cast<uint16_t>(n), static_cast<int16_t>(stride)};
  add_dsd(name, d);
}

void ProgramBuilder::mem4d(const std::string& name, const std::string& array, int64_t off, const std::vector<std::pair<int64_t, int64_t>>& dims) {
  if (!dsd_name_ok(name)) return;
  const int a = find_array(array);
  if (a < 0) return error("unknown array '" + array + "'", suggest(array, array_names(), "declare it with .data first; arrays"));
  const DataDecl& arr = prog_.data[static_cast<size_t>(a)];
  if (off < 0 || off >= arr.count) return error("bad off=" + std::to_string(off), "an integer in 0.." + std::to_string(arr.count - 1));
  Dsd d;
  d.kind = DsdKind::mem4d;
  d.array = static_cast<int16_t>(a);
  d.elem = arr.elem;
  d.base = static_cast<uint32_t>(arr.addr + off * elem_bytes(arr.elem));
  if (dims.empty() || dims.size() > 4) return error("mem4d DSD '" + name + "' has " + std::to_string(dims.size()) + " dims", "1 to 4, outermost first");
  for (size_t i = 0; i < dims.size(); ++i) {
    const auto [l, s] = dims[i];
    if (l < 1 || l > 65535 || s < -32768 || s > 32767)
      return error("bad dim " + std::to_string(l) + ":" + std::to_string(s) + " of DSD '" + name + "'", "LEN in 1..65535, STRIDE in -32768..32767");
    d.dims[i] = {static_cast<uint16_t>(l), static_cast<int16_t>(s)};
  }
  d.ndims = static_cast<uint8_t>(dims.size());
  add_dsd(name, d);
}

void ProgramBuilder::fifo(const std::string& name, const std::string& array) {
  if (!dsd_name_ok(name)) return;
  const int a = find_array(array);
  if (a < 0) return error("unknown array '" + array + "'", suggest(array, array_names(), "declare it with .data first; arrays"));
  const DataDecl& arr = prog_.data[static_cast<size_t>(a)];
  Dsd d;
  d.kind = DsdKind::fifo;
  d.array = static_cast<int16_t>(a);
  d.elem = arr.elem;
  d.base = arr.addr;
  d.length = static_cast<uint32_t>(arr.count);
  add_dsd(name, d);
}

void ProgramBuilder::end_task() {
  if (in_task_) {
    Task& t = prog_.tasks.back();
    t.end = static_cast<int32_t>(prog_.instrs.size());
    for (const auto& [name, line] : pending_labels_)
      diags_.add(where_at(line), "label '" + name + "' ends task '" + t.name + "'", "a label names the instruction after it, in the same task");
    pending_labels_.clear();
    if (t.end == t.entry)
      diags_.add(where_at(t.line), "task '" + t.name + "' has no instructions",
                 "end it with `ret` at least");
    in_task_ = false;
  }
  bad_task_ = true;  // until a declaration completes: its body is not reported as outside a task
}

void ProgramBuilder::task(const std::string& name, TaskKind kind, int64_t id, int64_t color, int64_t queue, bool active, bool blocked) {
  end_task();
  if (!new_name(name, "task")) return;
  if (prog_.find_task(name) >= 0) return error("task '" + name + "' declared twice");
  if (id < 0 || id > 255) return error("bad id=" + std::to_string(id), "an integer in 0..255");
  for (const auto& other : prog_.tasks)
    if (other.id == id) return error("task id " + std::to_string(id) + " already used by task '" + other.name + "'");
  Task t;
  t.name = name;
  t.kind = kind;
  t.line = line_;
  t.id = static_cast<uint8_t>(id);
  if (kind == TaskKind::data) {
    if (color < 0 || color >= kMaxColors) return error("bad color=" + std::to_string(color), "an integer in 0.." + std::to_string(kMaxColors - 1));
    for (const auto& other : prog_.tasks)
      if (other.kind == TaskKind::data && other.color == color)
        return error("color " + std::to_string(color) + " already fires data task '" + other.name + "'", "one data task per color");
    t.color = static_cast<int16_t>(color);
    if (queue >= 0) {
      if (queue > 7) return error("bad queue=" + std::to_string(queue), "an integer in 0..7");
      t.queue = static_cast<int16_t>(queue);
    }
  }
  t.active = active;
  t.blocked = blocked;
  t.entry = t.end = static_cast<int32_t>(prog_.instrs.size());
  prog_.tasks.push_back(std::move(t));
  in_task_ = true;
  bad_task_ = false;
}

void ProgramBuilder::label(const std::string& name) {
  if (!in_task_ && bad_task_) return;
  if (!in_task_) return error("label '" + name + "' outside a task", "labels go inside a task body (after `.task`)");
  if (reserved_word(name)) return error("bad label name '" + name + "'");
  if (prog_.labels.count(name) || std::any_of(pending_labels_.begin(), pending_labels_.end(), [&](const auto& p) { return p.first == name; }))
    return error("label '" + name + "' defined twice");
  pending_labels_.emplace_back(name, here());
}

bool ProgramBuilder::instr_allowed() {
  if (in_task_) return true;
  if (!bad_task_) error("instruction outside a task", "start a task body with `.task NAME local id=N`");
  return false;
}

void ProgramBuilder::push(Instr in) {
  for (const auto& [name, line] : pending_labels_) prog_.labels[name] = static_cast<int32_t>(prog_.instrs.size());
  pending_labels_.clear();
  prog_.instrs.push_back(in);
}

void ProgramBuilder::placeholder() {
  Instr nop;
  nop.line = line_;
  push(nop);
}

void ProgramBuilder::instr(Op op, const std::vector<Arg>& args, bool async, const std::string& activate, const std::string& unblock) {
  if (!instr_allowed()) return;
  const OpInfo& info = op_info(op);
  const std::string usage = instr_usage(info);
  if (args.size() != info.roles.size()) {
    error(std::string(info.name) + " takes " + std::to_string(info.roles.size()) + " operand(s), got " + std::to_string(args.size()), usage);
    return placeholder();
  }
  Instr in;
  in.op = op;
  in.line = line_;
  const int32_t index = static_cast<int32_t>(prog_.instrs.size());
  bool ok = true;
  for (size_t i = 0; i < args.size(); ++i) ok &= operand(info, i, args[i], in, index);
  if (info.cls != OpClass::dsd && (async || !activate.empty() || !unblock.empty())) {
    error("unexpected '" + std::string(async ? "async" : !activate.empty() ? "activate=" + activate : "unblock=" + unblock) + "'", usage);
    ok = false;
  }
  in.async = async;
  for (const auto& [key, t] : {std::pair<const char*, const std::string&>{"activate", activate}, {"unblock", unblock}}) {
    if (t.empty()) continue;
    if (!async) {
      error(std::string(key) + "= needs async", "write `" + std::string(info.name) + " ... async " + key + "=" + t + "`");
      ok = false;
    }
    refs_.push_back({index, key[0] == 'a' ? -1 : -2, t, here(), true});
  }
  if (ok && info.cls == OpClass::dsd) ok = dsd_rules(info, in);
  if (!ok) in.op = Op::nop;  // keep indices stable; the diagnostics abort the assembly anyway
  push(in);
}

bool ProgramBuilder::operand(const OpInfo& info, size_t i, const Arg& a, Instr& in, int32_t index) {
  const Role role = info.roles[i];
  Operand& o = in.a[i];
  const std::string& t = a.text;
  const std::string pos = "operand " + std::to_string(i + 1) + " of " + std::string(info.name);
  switch (role) {
    case Role::D:
    case Role::S:
    case Role::M: {
      const int d = find_dsd(t);
      if (d >= 0) {
        o = {OpndKind::dsd, d};
        const Dsd& dsd = prog_.dsds[static_cast<size_t>(d)];
        const Want want = i < info.types.size() ? info.types[i] : Want::any;
        if (!fits(want, dsd.elem))
          return error(pos + ": DSD '" + t + "' is " + std::string(elem_name(dsd.elem)) + ", " + std::string(info.name) + " wants " + std::string(want_name(want))), false;
        if (role == Role::D && dsd.kind == DsdKind::fabin) return error(pos + ": fabin DSD '" + t + "' cannot be a destination"), false;
        if (role == Role::S && dsd.kind == DsdKind::fabout) return error(pos + ": fabout DSD '" + t + "' cannot be a source"), false;
        if (in.op == Op::dsd_off && !dsd.is_mem()) return error("dsd_off needs a mem1d or mem4d DSD, '" + t + "' is " + std::string(dsd_kind_name(dsd.kind))), false;
        if (in.op == Op::dsd_len && (dsd.kind == DsdKind::mem4d || dsd.kind == DsdKind::fifo))
          return error("dsd_len needs a mem1d, fabin or fabout DSD, '" + t + "' is " + std::string(dsd_kind_name(dsd.kind))), false;
        return true;
      }
      if (a.reported) return false;
      if (role == Role::S && a.scalar) return o = *a.scalar, true;
      return error(pos + ": unknown DSD '" + t + "'", suggest(t, prog_.dsd_names, role == Role::S ? "a DSD or a scalar (rN, px, py, wv, number); DSDs" : "DSDs")), false;
    }
    case Role::K:
    case Role::A:
    case Role::R:
      if (a.scalar && (role != Role::R || a.scalar->kind == OpndKind::reg)) return o = *a.scalar, true;
      if (!a.reported)
        error(pos + (role == Role::R ? ": expected a register r0-r" + std::to_string(kRegs - 1) : ": expected a scalar (rN, px, py, wv or a number)") + ", got '" + t + "'");
      return false;
    case Role::T:
    case Role::L:
      if (a.scalar || !text::is_ident(t)) return error(pos + ": bad name '" + t + "'"), false;
      o.kind = role == Role::T ? OpndKind::task : OpndKind::label;
      refs_.push_back({index, static_cast<int>(i), t, here(), role == Role::T});
      return true;
  }
  return false;
}

// Static rules of one DSD instruction: equal lengths, a defined length, one 16-bit float format,
// async on a fabric queue.
bool ProgramBuilder::dsd_rules(const OpInfo& info, const Instr& in) {
  int64_t len = -1;
  std::string first;
  bool fabric = false;
  for (size_t i = 0; i < info.roles.size(); ++i) {
    if (in.a[i].kind != OpndKind::dsd) continue;
    const Dsd& d = prog_.dsds[static_cast<size_t>(in.a[i].v)];
    const std::string& name = prog_.dsd_names[static_cast<size_t>(in.a[i].v)];
    fabric |= d.is_fabric();
    if (d.kind == DsdKind::fifo) continue;
    if (len < 0) {
      len = d.elems();
      first = name;
    } else if (d.elems() != len) {
      error("operand lengths differ: '" + first + "' has " + std::to_string(len) + " elements, '" + name + "' " + std::to_string(d.elems()),
            "every non-fifo DSD of one instruction covers the same number of elements");
      return false;
    }
  }
  if (len < 0) return error("no operand gives the length", "one operand must be a mem or fabric DSD (fifos take the others' length)"), false;
  int half = -1;
  for (size_t i = 0; i < info.roles.size() && i < info.types.size(); ++i) {
    if (info.types[i] != Want::f16 || in.a[i].kind != OpndKind::dsd) continue;
    const Elem e = prog_.dsds[static_cast<size_t>(in.a[i].v)].elem;
    if (half < 0) half = static_cast<int>(e);
    else if (half != static_cast<int>(e))
      return error(std::string(info.name) + " mixes 16-bit float formats (" + std::string(elem_name(static_cast<Elem>(half))) + " and " + std::string(elem_name(e)) + ")",
                   "its 16-bit float operands must share one format: convert through f32 (fh2s, fs2h)"),
             false;
  }
  if (in.async && !fabric) return error("async needs a fabin or fabout operand", "an async op runs on the microthread of its fabric queue"), false;
  return true;
}

Program ProgramBuilder::finish() {
  end_task();
  for (const auto& r : refs_) {
    Instr& in = prog_.instrs[static_cast<size_t>(r.instr)];
    if (r.task) {
      const int t = prog_.find_task(r.name);
      if (t < 0) {
        std::vector<std::string> names;
        for (const auto& x : prog_.tasks) names.push_back(x.name);
        diags_.add(where_at(r.line), "unknown task '" + r.name + "'", suggest(r.name, names, "tasks"));
        continue;
      }
      if (r.slot == -1) in.on_activate = static_cast<int16_t>(t);
      else if (r.slot == -2) in.on_unblock = static_cast<int16_t>(t);
      else in.a[static_cast<size_t>(r.slot)].v = t;
      continue;
    }
    auto it = prog_.labels.find(r.name);
    if (it == prog_.labels.end()) {
      std::vector<std::string> names;
      for (const auto& kv : prog_.labels) names.push_back(kv.first);
      diags_.add(where_at(r.line), "unknown label '" + r.name + "'", suggest(r.name, names, "labels"));
      continue;
    }
    const Task* owner = nullptr;
    for (const auto& t : prog_.tasks)
      if (r.instr >= t.entry && r.instr < t.end) owner = &t;
    if (owner && (it->second < owner->entry || it->second >= owner->end))
      diags_.add(where_at(r.line), "label '" + r.name + "' is in another task", "branches stay inside their task; use `activate` to start another");
    in.a[static_cast<size_t>(r.slot)].v = it->second;
  }
  return std::move(prog_);
}

}  // namespace tessera::wafer
