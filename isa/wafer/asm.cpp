// The wafer PE assembler, disassembler and program validator (docs/wafer-asm.md). The layout
// loader is in the second half of this file.
#include "isa/wafer/asm.hpp"
#include "isa/text.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "isa/fileio.hpp"
#include "isa/wafer/asm_util.hpp"
#include "isa/wafer/builder.hpp"

namespace tessera::wafer {

using namespace asmutil;

namespace {

using text::is_ident;
using text::trim;

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    const size_t b = i;
    while (i < s.size() && !std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    if (i > b) out.push_back(s.substr(b, i - b));
  }
  return out;
}

// key=value options and flag words of a declaration line.
struct Options {
  std::vector<std::pair<std::string_view, std::string_view>> kv;
  std::vector<std::string_view> flags;
};

// ---------------------------------------------------------------------------------------------
// The assembler.

class Assembler {
 public:
  Assembler(std::string file, const Bindings& params, std::string pe) : b_(file, pe, diags_), file_(std::move(file)), params_(params), pe_(std::move(pe)) {}

  Program run(std::string_view text) {
    int n = 0;
    for (size_t pos = 0; pos <= text.size();) {
      size_t nl = text.find('\n', pos);
      if (nl == std::string_view::npos) nl = text.size();
      line(text.substr(pos, nl - pos), ++n);
      pos = nl + 1;
    }
    const std::string where = file_ + (pe_.empty() ? "" : " " + pe_);
    for (const auto& [name, v] : params_)
      if (!declared_.count(name))
        diags_.add(where, "parameter '" + name + "' is bound but the program declares no `.param " + name + "`",
                   suggest(name, declared_names_, "declared parameters"));
    for (const auto& c : cond_) diags_.add(file_ + ":" + std::to_string(c.line) + (pe_.empty() ? "" : " " + pe_), ".if without .endif");
    Program p = b_.finish();
    diags_.throw_if_any();
    return p;
  }

 private:
  void error(std::string m, std::string h = {}) { b_.error(std::move(m), std::move(h)); }

  void line(std::string_view raw, int n) {
    line_ = n;
    b_.at(n);
    if (size_t h = raw.find('#'); h != std::string_view::npos) raw = raw.substr(0, h);
    std::string_view s = trim(raw);
    if (s.empty()) return;
    const std::string_view first = s.substr(0, s.find_first_of(" \t"));
    if (first == ".if" || first == ".else" || first == ".endif") return conditional(first, trim(s.substr(first.size())));
    if (!active()) return;
    if (s.starts_with(".param")) return param(s);
    std::string sub;
    if (s.find('$') != std::string_view::npos) {
      if (!substitute(s, sub)) return;
      s = sub;
    }
    if (s[0] == '.') return directive(s);
    if (s.back() == ':' && is_ident(trim(s.substr(0, s.size() - 1)))) return b_.label(std::string(trim(s.substr(0, s.size() - 1))));
    instruction(s);
  }

  // Conditional assembly: `.if [!]VALUE` (after substitution, non-zero = true), `.else`, `.endif`.
  struct Cond {
    bool parent_on, taken, on, seen_else;
    int line;
  };
  bool active() const { return cond_.empty() || cond_.back().on; }

  void conditional(std::string_view word, std::string_view rest) {
    if (word == ".if") {
      Cond c{active(), false, false, false, line_};
      if (c.parent_on) {
        std::string sub;
        if (rest.find('$') != std::string_view::npos) {
          if (!substitute(rest, sub)) return cond_.push_back(c);
          rest = sub;
        }
        const bool neg = !rest.empty() && rest[0] == '!';
        float v = 0;
        if (!parse_float(neg ? trim(rest.substr(1)) : rest, v)) {
          error("bad .if condition '" + std::string(rest) + "'", "`.if [!]VALUE`, e.g. `.if $first` or `.if !$last`: non-zero is true");
        } else {
          c.on = c.taken = (v != 0) != neg;
        }
      }
      return cond_.push_back(c);
    }
    if (!rest.empty()) return error(std::string(word) + " takes nothing after it");
    if (cond_.empty()) return error(std::string(word) + " without .if");
    Cond& c = cond_.back();
    if (word == ".else") {
      if (c.seen_else) return error(".else given twice for the .if of line " + std::to_string(c.line));
      c.seen_else = true;
      c.on = c.parent_on && !c.taken;
      return;
    }
    cond_.pop_back();
  }

  // `$name` -> its bound value (or default).
  bool substitute(std::string_view s, std::string& out) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '$') {
        out += s[i];
        continue;
      }
      size_t j = i + 1;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      const std::string name(s.substr(i + 1, j - i - 1));
      if (!declared_.count(name)) {
        error("unknown parameter '$" + name + "'", name.empty() ? "write $NAME" : suggest(name, declared_names_, "declare it with `.param " + name + "`; declared"));
        return false;
      }
      auto b = params_.find(name);
      const std::optional<double>& def = declared_[name];
      if (b == params_.end() && !def) {
        error("parameter '$" + name + "' has no value", "bind it in the layout's params, or give a default: `.param " + name + " = 16`");
        return false;
      }
      out += fmt_value(b != params_.end() ? b->second : *def);
      i = j - 1;
    }
    return true;
  }

  void param(std::string_view s) {
    const std::string usage = "`.param NAME [= DEFAULT]`";
    std::string_view rest = trim(s.substr(6));
    std::string_view name = rest, def;
    if (size_t eq = rest.find('='); eq != std::string_view::npos) {
      name = trim(rest.substr(0, eq));
      def = trim(rest.substr(eq + 1));
    }
    if (s.size() > 6 && !std::isspace(static_cast<unsigned char>(s[6]))) return error("unknown directive '" + std::string(split_ws(s)[0]) + "'", usage);
    if (!is_ident(name)) return error("bad parameter name '" + std::string(name) + "'", usage);
    if (declared_.count(std::string(name))) return error("parameter '" + std::string(name) + "' declared twice");
    std::optional<double> v;
    if (!def.empty()) {
      float f = 0;
      int64_t i = 0;
      if (parse_int(def, i)) v = static_cast<double>(i);
      else if (parse_float(def, f)) v = f;
      else return error("bad default '" + std::string(def) + "' of parameter '" + std::string(name) + "'", "a number");
    }
    declared_[std::string(name)] = v;
    declared_names_.emplace_back(name);
    const auto b = params_.find(std::string(name));
    if (b != params_.end()) b_.bind(std::string(name), b->second);
    else if (v) b_.bind(std::string(name), *v);
  }

  // Splits "KEY=V" and flag words; false (with an error) on a word that is neither.
  bool options(const std::vector<std::string_view>& words, size_t from, const std::vector<std::string_view>& keys,
               const std::vector<std::string_view>& flags, Options& o, const std::string& usage) {
    bool ok = true;
    for (size_t i = from; i < words.size(); ++i) {
      const std::string_view w = words[i];
      const size_t eq = w.find('=');
      const std::string_view key = w.substr(0, eq);
      const bool is_key = eq != std::string_view::npos && std::find(keys.begin(), keys.end(), key) != keys.end();
      const bool is_flag = eq == std::string_view::npos && std::find(flags.begin(), flags.end(), w) != flags.end();
      bool dup = false;
      for (const auto& kv : o.kv) dup |= kv.first == key;
      for (const auto& f : o.flags) dup |= f == w;
      if (dup) {
        error("'" + std::string(key) + "' given twice", usage);
        ok = false;
      } else if (is_key) {
        o.kv.emplace_back(key, w.substr(eq + 1));
      } else if (is_flag) {
        o.flags.push_back(w);
      } else {
        std::vector<std::string> all;
        for (auto k : keys) all.emplace_back(std::string(k) + "=");
        for (auto f : flags) all.emplace_back(f);
        const std::string word = eq == std::string_view::npos ? std::string(w) : std::string(key) + "=";
        error("unexpected '" + std::string(w) + "'", suggest(word, all, usage + "; options"));
        ok = false;
      }
    }
    return ok;
  }
  std::optional<std::string_view> opt(const Options& o, std::string_view key) {
    for (const auto& kv : o.kv)
      if (kv.first == key) return kv.second;
    return std::nullopt;
  }
  bool has_flag(const Options& o, std::string_view f) { return std::find(o.flags.begin(), o.flags.end(), f) != o.flags.end(); }
  // An integer option in [lo, hi]; `def` if absent (nullopt: required).
  bool int_opt(const Options& o, std::string_view key, int64_t lo, int64_t hi, std::optional<int64_t> def, int64_t& out) {
    auto v = opt(o, key);
    if (!v) {
      if (!def) return error("missing " + std::string(key) + "="), false;
      out = *def;
      if (out < lo || out > hi)
        return error(std::string(key) + "=" + std::to_string(out) + " (the default) is out of range " + std::to_string(lo) + ".." + std::to_string(hi),
                     "give " + std::string(key) + "= explicitly"), false;
      return true;
    }
    if (!parse_int(*v, out) || out < lo || out > hi) {
      error("bad " + std::string(key) + "=" + std::string(*v), "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
      return false;
    }
    return true;
  }

  void directive(std::string_view s) {
    const auto words = split_ws(s);
    if (words[0] == ".data") return data(words);
    if (words[0] == ".dsd") return dsd(words);
    if (words[0] == ".task") return task(words);
    error("unknown directive '" + std::string(words[0]) + "'", suggest(words[0], {".param", ".data", ".dsd", ".task"}, "directives"));
  }

  void data(const std::vector<std::string_view>& w) {
    const std::string usage = "`.data NAME TYPE COUNT [fill=X] [live=LO..HI]`";
    if (w.size() < 4) return error("malformed .data", usage);
    if (!b_.array_name_ok(w[1])) return;
    auto e = lookup<Elem>(w[2], kElems, elem_name);
    if (!e) return error("unknown type '" + std::string(w[2]) + "'", suggest(w[2], names_of<Elem>(kElems, elem_name), "types"));
    int64_t n = 1;
    for (size_t start = 0;;) {  // COUNT or a product A*B*...
      const size_t star = w[3].find('*', start);
      int64_t f = 0;
      if (!parse_int(w[3].substr(start, star == std::string_view::npos ? std::string_view::npos : star - start), f) || f < 1 || f > (1 << 24) ||
          (n *= f) > (1 << 24))
        return error("bad count '" + std::string(w[3]) + "'", "a positive integer or a product like 4*16, at most 16777216");
      if (star == std::string_view::npos) break;
      start = star + 1;
    }
    Options o;
    if (!options(w, 4, {"fill", "live"}, {}, o, usage)) return;
    std::optional<float> fill;
    if (auto f = opt(o, "fill")) {
      float v = 0;
      if (!parse_float(*f, v)) return error("bad fill=" + std::string(*f), "a number");
      fill = v;
    }
    int64_t lo = -1, hi = -1;
    if (auto lv = opt(o, "live")) {
      const size_t dots = lv->find("..");
      if (dots == std::string_view::npos || !parse_int(lv->substr(0, dots), lo) || !parse_int(lv->substr(dots + 2), hi) || lo < 0 || hi < lo || hi > 32767)
        return error("bad live=" + std::string(*lv), "a phase range LO..HI, 0 <= LO <= HI <= 32767");
    }
    b_.data(std::string(w[1]), *e, n, fill, static_cast<int32_t>(lo), static_cast<int32_t>(hi));
  }

  void dsd(const std::vector<std::string_view>& w) {
    const std::string usage =
        "`.dsd NAME mem1d ARRAY [off=N] [len=N] [stride=N]`, `.dsd NAME mem4d ARRAY [off=N] dims=L:S,...`, "
        "`.dsd NAME fabin|fabout TYPE color=C queue=Q len=N [control] [index] [advance]`, `.dsd NAME fifo ARRAY`";
    if (w.size() < 4) return error("malformed .dsd", usage);
    if (!b_.dsd_name_ok(w[1])) return;
    auto kind = lookup<DsdKind>(w[2], 5, dsd_kind_name);
    if (!kind) return error("unknown DSD kind '" + std::string(w[2]) + "'", suggest(w[2], names_of<DsdKind>(5, dsd_kind_name), "kinds"));
    const std::string name(w[1]);
    Options o;
    if (*kind == DsdKind::fabin || *kind == DsdKind::fabout) {
      auto e = lookup<Elem>(w[3], kElems, elem_name);
      if (!e) return error("unknown type '" + std::string(w[3]) + "'", suggest(w[3], names_of<Elem>(kElems, elem_name), "types"));
      const std::vector<std::string_view> flags = *kind == DsdKind::fabout ? std::vector<std::string_view>{"control", "index", "advance"}
                                                                            : std::vector<std::string_view>{};
      if (!options(w, 4, {"color", "queue", "len"}, flags, o, usage)) return;
      int64_t color = 0, queue = 0, len = 0;
      bool ok = int_opt(o, "color", 0, kMaxColors - 1, std::nullopt, color);
      ok &= int_opt(o, "queue", 0, 7, std::nullopt, queue);
      ok &= int_opt(o, "len", 1, 1 << 24, std::nullopt, len);
      if (!ok) return;
      return b_.fabric(name, *kind, *e, color, queue, len, has_flag(o, "control"), has_flag(o, "index"),
                        has_flag(o, "advance"));
    }
    const std::string array(w[3]);
    const int a = b_.find_array(array);
    if (a < 0) return error("unknown array '" + array + "'", suggest(array, b_.array_names(), "declare it with .data first; arrays"));
    const int64_t count = b_.program().data[static_cast<size_t>(a)].count;
    if (*kind == DsdKind::fifo) {
      if (!options(w, 4, {}, {}, o, usage)) return;
      return b_.fifo(name, array);
    }
    const bool m4 = *kind == DsdKind::mem4d;
    if (!options(w, 4, m4 ? std::vector<std::string_view>{"off", "dims"} : std::vector<std::string_view>{"off", "len", "stride"}, {}, o, usage)) return;
    int64_t off = 0;
    if (!int_opt(o, "off", 0, count - 1, 0, off)) return;
    if (m4) {
      std::vector<std::pair<int64_t, int64_t>> d;
      if (!dims(opt(o, "dims"), d)) return;
      return b_.mem4d(name, array, off, d);
    }
    int64_t stride = 1, len = 0;
    if (!int_opt(o, "stride", -32768, 32767, 1, stride)) return;
    if (!int_opt(o, "len", 1, 65535, stride == 1 ? std::optional<int64_t>(count - off) : std::nullopt, len)) return;
    b_.mem1d(name, array, off, len, stride);
  }

  bool dims(std::optional<std::string_view> text, std::vector<std::pair<int64_t, int64_t>>& d) {
    const std::string hint = "dims=LEN:STRIDE[,LEN:STRIDE...] (1 to 4, outermost first), e.g. dims=4:16,16:1";
    if (!text) return error("missing dims=", hint), false;
    std::string_view s = *text;
    for (size_t start = 0;;) {
      const size_t c = s.find(',', start);
      const std::string_view item = s.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start);
      const size_t colon = item.find(':');
      int64_t len = 0, stride = 0;
      if (d.size() >= 4 || colon == std::string_view::npos || !parse_int(item.substr(0, colon), len) || !parse_int(item.substr(colon + 1), stride) ||
          len < 1 || len > 65535 || stride < -32768 || stride > 32767)
        return error("bad dims=" + std::string(s), hint), false;
      d.emplace_back(len, stride);
      if (c == std::string_view::npos) break;
      start = c + 1;
    }
    return true;
  }

  void task(const std::vector<std::string_view>& w) {
    const std::string usage = "`.task NAME data|local|control id=N [color=C] [queue=Q] [active] [blocked]`";
    b_.end_task();
    if (w.size() < 3) return error("malformed .task", usage);
    auto kind = lookup<TaskKind>(w[2], 3, task_kind_name);
    if (!kind) return error("unknown task kind '" + std::string(w[2]) + "'", suggest(w[2], names_of<TaskKind>(3, task_kind_name), "kinds"));
    Options o;
    const bool data = *kind == TaskKind::data;
    if (!options(w, 3, data ? std::vector<std::string_view>{"id", "color", "queue"} : std::vector<std::string_view>{"id"},
                 *kind == TaskKind::local ? std::vector<std::string_view>{"active", "blocked"} : std::vector<std::string_view>{"blocked"}, o, usage))
      return;
    int64_t id = 0, color = -1, queue = -1;
    if (!int_opt(o, "id", 0, 255, std::nullopt, id)) return;
    if (data) {
      if (!int_opt(o, "color", 0, kMaxColors - 1, std::nullopt, color)) return;
      if (opt(o, "queue") && !int_opt(o, "queue", 0, 7, std::nullopt, queue)) return;
    }
    b_.task(std::string(w[1]), *kind, id, color, queue, has_flag(o, "active"), has_flag(o, "blocked"));
  }

  // A scalar operand: rN, px, py, wv, an integer or a float. Reports a register or an immediate
  // out of range (then `reported`).
  bool scalar(std::string_view t, Operand& o, bool& reported) {
    int64_t n = 0;
    float f = 0;
    if (t == "px" || t == "py" || t == "wv") {
      o.kind = t == "px" ? OpndKind::px : t == "py" ? OpndKind::py : OpndKind::wv;
    } else if (t.size() >= 2 && t[0] == 'r' && std::isdigit(static_cast<unsigned char>(t[1])) && parse_int(t.substr(1), n)) {
      if (n >= kRegs) return error("register " + std::string(t) + " out of range r0-r" + std::to_string(kRegs - 1)), reported = true, false;
      o = {OpndKind::reg, static_cast<int32_t>(n)};
    } else if (!looks_float(t) && parse_int(t, n)) {
      if (n < INT32_MIN || n > UINT32_MAX) return error("immediate " + std::string(t) + " does not fit 32 bits"), reported = true, false;
      o = {OpndKind::imm_i, static_cast<int32_t>(static_cast<uint32_t>(n))};
    } else if (parse_float(t, f)) {
      o = {OpndKind::imm_f, std::bit_cast<int32_t>(f)};
    } else {
      return false;
    }
    return true;
  }

  // An instruction line; one that cannot be read still takes its place (as a nop) so that the task
  // and the labels stay in shape while the other lines are checked.
  void instruction(std::string_view s) {
    if (!b_.instr_allowed()) return;
    const size_t sp = s.find_first_of(" \t");
    const std::string_view word = s.substr(0, sp);
    auto op = lookup<Op>(word, kOps, op_name);
    if (!op) return error("unknown instruction '" + std::string(word) + "'", suggest(word, names_of<Op>(kOps, op_name), "instructions")), b_.placeholder();
    const OpInfo& info = op_info(*op);
    const std::string usage = instr_usage(info);
    // Operands: comma separated; options: space separated words after the last operand.
    std::vector<std::string_view> ops, opts;
    const std::string_view rest = sp == std::string_view::npos ? std::string_view{} : trim(s.substr(sp));
    if (!rest.empty()) {
      for (size_t start = 0;;) {
        const size_t c = rest.find(',', start);
        const std::string_view item = trim(rest.substr(start, c == std::string_view::npos ? std::string_view::npos : c - start));
        auto words = split_ws(item);
        if (words.empty()) return error("empty operand", usage), b_.placeholder();
        if (c != std::string_view::npos && words.size() > 1) return error("expected ',' between operands in `" + std::string(item) + "`", usage), b_.placeholder();
        ops.push_back(words[0]);
        if (c == std::string_view::npos) {
          opts.assign(words.begin() + 1, words.end());
          break;
        }
        start = c + 1;
      }
    }
    // An option word given where an operand belongs (`ret async`) goes to opts.
    if (!ops.empty() && (ops.back() == "async" || ops.back().find('=') != std::string_view::npos) && ops.size() > info.roles.size()) {
      opts.insert(opts.begin(), ops.back());
      ops.pop_back();
    }
    if (ops.size() != info.roles.size())
      return error(std::string(word) + " takes " + std::to_string(info.roles.size()) + " operand(s), got " + std::to_string(ops.size()), usage), b_.placeholder();
    std::vector<Arg> args;
    for (size_t i = 0; i < ops.size(); ++i) {
      Arg a{std::string(ops[i])};
      const Role role = info.roles[i];
      if (role == Role::S || role == Role::K || role == Role::A || role == Role::R) {
        Operand o;
        if (scalar(ops[i], o, a.reported)) a.scalar = o;
      }
      args.push_back(std::move(a));
    }
    Options o;
    bool ok = true;
    if (info.cls == OpClass::dsd) ok = options(opts, 0, {"activate", "unblock"}, {"async"}, o, usage);
    else if (!opts.empty()) ok = (error("unexpected '" + std::string(opts[0]) + "'", usage), false);
    if (!ok) return b_.placeholder();
    b_.instr(*op, args, has_flag(o, "async"), std::string(opt(o, "activate").value_or("")), std::string(opt(o, "unblock").value_or("")));
  }

  DiagnosticList diags_;
  ProgramBuilder b_;
  std::string file_;
  const Bindings& params_;
  std::string pe_;
  int line_ = 0;
  std::map<std::string, std::optional<double>> declared_;
  std::vector<std::string> declared_names_;
  std::vector<Cond> cond_;
};

}  // namespace

Program assemble(std::string_view text, const std::string& file_name, const Bindings& params, const std::string& pe) {
  return Assembler(file_name, params, pe).run(text);
}

Program assemble_file(const std::string& path, const Bindings& params) { return assemble(read_file(path), path, params); }

// ---------------------------------------------------------------------------------------------
// The disassembler.

namespace {

std::string fmt_operand(const Program& p, const Operand& o, const std::vector<std::string>& label_of) {
  switch (o.kind) {
    case OpndKind::dsd: return p.dsd_names[static_cast<size_t>(o.v)];
    case OpndKind::task: return p.tasks[static_cast<size_t>(o.v)].name;
    case OpndKind::label: return static_cast<size_t>(o.v) < label_of.size() && !label_of[static_cast<size_t>(o.v)].empty()
                                     ? label_of[static_cast<size_t>(o.v)]
                                     : "_i" + std::to_string(o.v);
    default: return fmt_scalar(o);
  }
}

std::string fmt_instr(const Program& p, const Instr& in, const std::vector<std::string>& label_of) {
  const OpInfo& info = op_info(in.op);
  std::string s(info.name);
  for (size_t i = 0; i < info.roles.size(); ++i) s += (i ? ", " : " ") + fmt_operand(p, in.a[i], label_of);
  if (in.async) s += " async";
  if (in.on_activate >= 0) s += " activate=" + p.tasks[static_cast<size_t>(in.on_activate)].name;
  if (in.on_unblock >= 0) s += " unblock=" + p.tasks[static_cast<size_t>(in.on_unblock)].name;
  return s;
}

std::vector<std::string> labels_by_index(const Program& p) {
  std::vector<std::string> v(p.instrs.size() + 1);
  for (const auto& [name, i] : p.labels)
    if (v[static_cast<size_t>(i)].empty()) v[static_cast<size_t>(i)] = name;
  return v;
}

}  // namespace

std::string disassemble(const Program& p, const Instr& in) { return fmt_instr(p, in, labels_by_index(p)); }

std::string disassemble(const Program& p) {
  std::string s;
  for (const auto& d : p.data) {
    s += ".data " + d.name + " " + std::string(elem_name(d.elem)) + " " + std::to_string(d.count);
    if (d.has_fill) s += " fill=" + fmt_float(d.fill);
    if (!d.always_live()) s += " live=" + std::to_string(d.live_lo) + ".." + std::to_string(d.live_hi);
    s += "\n";
  }
  for (size_t i = 0; i < p.dsds.size(); ++i) {
    const Dsd& d = p.dsds[i];
    s += ".dsd " + p.dsd_names[i] + " " + std::string(dsd_kind_name(d.kind)) + " ";
    if (d.is_fabric()) {
      s += std::string(elem_name(d.elem)) + " color=" + std::to_string(d.color) + " queue=" + std::to_string(d.queue) + " len=" + std::to_string(d.length);
      if (d.control) s += " control";
      if (d.index) s += " index";
      if (d.advance) s += " advance";
    } else {
      const DataDecl& a = p.data[static_cast<size_t>(d.array)];
      s += a.name;
      const int64_t off = (int64_t{d.base} - a.addr) / elem_bytes(a.elem);
      if (d.is_mem() && off) s += " off=" + std::to_string(off);
      if (d.kind == DsdKind::mem1d) {
        s += " len=" + std::to_string(d.dims[0].len);
        if (d.dims[0].stride != 1) s += " stride=" + std::to_string(d.dims[0].stride);
      } else if (d.kind == DsdKind::mem4d) {
        s += " dims=";
        for (int k = 0; k < d.ndims; ++k)
          s += (k ? "," : "") + std::to_string(d.dims[static_cast<size_t>(k)].len) + ":" + std::to_string(d.dims[static_cast<size_t>(k)].stride);
      }
    }
    s += "\n";
  }
  std::vector<std::string> label_of = labels_by_index(p);
  std::vector<std::vector<std::string>> all_labels(p.instrs.size() + 1);
  for (const auto& [name, i] : p.labels) all_labels[static_cast<size_t>(i)].push_back(name);
  for (const auto& t : p.tasks) {
    s += ".task " + t.name + " " + std::string(task_kind_name(t.kind)) + " id=" + std::to_string(t.id);
    if (t.kind == TaskKind::data) s += " color=" + std::to_string(t.color) + (t.queue >= 0 ? " queue=" + std::to_string(t.queue) : "");
    if (t.active) s += " active";
    if (t.blocked) s += " blocked";
    s += "\n";
    for (int32_t i = t.entry; i < t.end; ++i) {
      for (const auto& l : all_labels[static_cast<size_t>(i)]) s += l + ":\n";
      s += "  " + fmt_instr(p, p.instrs[static_cast<size_t>(i)], label_of) + "\n";
    }
  }
  return s;
}

bool same_program(const Program& a, const Program& b) {
  auto data_eq = [](const DataDecl& x, const DataDecl& y) {
    return x.name == y.name && x.elem == y.elem && x.count == y.count && x.addr == y.addr && x.has_fill == y.has_fill &&
           x.live_lo == y.live_lo && x.live_hi == y.live_hi &&
           std::bit_cast<uint32_t>(x.fill) == std::bit_cast<uint32_t>(y.fill);
  };
  auto task_eq = [](const Task& x, const Task& y) {
    return x.name == y.name && x.id == y.id && x.kind == y.kind && x.color == y.color && x.queue == y.queue && x.active == y.active &&
           x.blocked == y.blocked && x.entry == y.entry && x.end == y.end;
  };
  auto instr_eq = [](const Instr& x, const Instr& y) {
    return x.op == y.op && x.async == y.async && x.on_activate == y.on_activate && x.on_unblock == y.on_unblock && x.a == y.a;
  };
  return std::equal(a.data.begin(), a.data.end(), b.data.begin(), b.data.end(), data_eq) && a.dsds == b.dsds &&
         a.dsd_names == b.dsd_names && std::equal(a.tasks.begin(), a.tasks.end(), b.tasks.begin(), b.tasks.end(), task_eq) &&
         std::equal(a.instrs.begin(), a.instrs.end(), b.instrs.begin(), b.instrs.end(), instr_eq) && a.labels == b.labels;
}

// ---------------------------------------------------------------------------------------------
// Preset rules.

void validate(const Program& p, const WaferConfig& c, DiagnosticList& d, const std::string& pe) {
  auto at = [&](int32_t line) { return p.source + (line ? ":" + std::to_string(line) : "") + (pe.empty() ? "" : " " + pe); };
  const std::string colors = "routable colors are 0.." + std::to_string(c.colors - 1) + " (router.colors)";
  auto queue_ok = [&](int q, const std::vector<int64_t>& depth) { return q >= 0 && static_cast<size_t>(q) < depth.size() && depth[static_cast<size_t>(q)] > 0; };
  auto depths = [](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  for (const auto& t : p.tasks) {
    if (t.id >= c.task_count)
      d.add(at(t.line), "task '" + t.name + "' id " + std::to_string(t.id) + " out of range", "task ids are 0.." + std::to_string(c.task_count - 1) + " (task.count)");
    if (t.kind == TaskKind::data && t.color >= c.colors) d.add(at(t.line), "task '" + t.name + "' color " + std::to_string(t.color) + " is not routable", colors);
    if (t.kind == TaskKind::data && t.queue >= 0 && !queue_ok(t.queue, c.input_depth))
      d.add(at(t.line), "task '" + t.name + "' reads input queue " + std::to_string(t.queue) + ", which has depth 0",
            "queue.input_depth = " + depths(c.input_depth));
  }
  for (size_t i = 0; i < p.dsds.size(); ++i) {
    const Dsd& x = p.dsds[i];
    if (!x.is_fabric()) continue;
    const std::string what = std::string(dsd_kind_name(x.kind)) + " DSD '" + p.dsd_names[i] + "'";
    if (x.color >= c.colors) d.add(at(p.dsd_lines[i]), what + " color " + std::to_string(x.color) + " is not routable", colors);
    const bool in = x.kind == DsdKind::fabin;
    if (!queue_ok(x.queue, in ? c.input_depth : c.output_depth))
      d.add(at(p.dsd_lines[i]), what + " uses " + (in ? "input" : "output") + " queue " + std::to_string(x.queue) + ", which has depth 0",
            std::string(in ? "queue.input_depth = " : "queue.output_depth = ") + depths(in ? c.input_depth : c.output_depth));
  }
  const int64_t used = p.data_bytes(), avail = c.data_area_bytes();
  if (used > avail) {
    std::string biggest;
    int64_t big = -1;
    for (const auto& x : p.data)
      if (x.bytes() > big) big = x.bytes(), biggest = x.name;
    d.add(at(0), "data needs " + std::to_string(used) + " bytes of SRAM, " + std::to_string(avail) + " available",
          "pe.sram_bytes - pe.reserved_bytes; the largest array is '" + biggest + "' (" + std::to_string(big) + " bytes)");
  }
}

void validate(const Program& p, const WaferConfig& c) {
  DiagnosticList d;
  validate(p, c, d);
  d.throw_if_any();
}

// ---------------------------------------------------------------------------------------------
// Parameter expressions.

namespace {

class ExprParser {
 public:
  ExprParser(std::string_view s, std::vector<ParamExpr::Tok>& out) : s_(s), out_(out) {}
  std::string parse() {
    cmp();
    skip();
    if (err_.empty() && i_ < s_.size()) err_ = "unexpected '" + std::string(s_.substr(i_)) + "'";
    return err_;
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool eat(std::string_view t) {
    skip();
    if (s_.substr(i_, t.size()) != t) return false;
    i_ += t.size();
    return true;
  }
  void cmp() {
    add();
    static const std::pair<std::string_view, char> ops[] = {{"==", '='}, {"!=", '!'}, {"<=", 'l'}, {">=", 'g'}, {"<", '<'}, {">", '>'}};
    for (bool more = true; more && err_.empty();) {
      more = false;
      for (const auto& [t, k] : ops)
        if (eat(t)) {
          add();
          out_.push_back({k, 0});
          more = true;
          break;
        }
    }
  }
  void add() {
    mul();
    while (err_.empty()) {
      if (eat("+")) mul(), out_.push_back({'+', 0});
      else if (eat("-")) mul(), out_.push_back({'-', 0});
      else break;
    }
  }
  void mul() {
    unary();
    while (err_.empty()) {
      if (eat("*")) unary(), out_.push_back({'*', 0});
      else if (eat("/")) unary(), out_.push_back({'/', 0});
      else if (eat("%")) unary(), out_.push_back({'%', 0});
      else break;
    }
  }
  void unary() {
    if (eat("-")) {
      unary();
      out_.push_back({'u', 0});
      return;
    }
    primary();
  }
  void primary() {
    skip();
    if (eat("(")) {
      cmp();
      if (err_.empty() && !eat(")")) err_ = "missing ')'";
      return;
    }
    size_t j = i_;
    while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) || s_[j] == '_')) ++j;
    const std::string_view w = s_.substr(i_, j - i_);
    i_ = j;
    int64_t v = 0;
    if (w == "px") out_.push_back({'x', 0});
    else if (w == "py") out_.push_back({'y', 0});
    else if (w == "width") out_.push_back({'w', 0});
    else if (w == "height") out_.push_back({'h', 0});
    else if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) && parse_int(w, v)) out_.push_back({'n', v});
    else if (err_.empty()) err_ = w.empty() ? "expected a number, px, py, width, height or '('" : "unknown name '" + std::string(w) + "' (px py width height)";
  }

  std::string_view s_;
  std::vector<ParamExpr::Tok>& out_;
  size_t i_ = 0;
  std::string err_;
};

}  // namespace

std::string ParamExpr::compile(std::string_view text, ParamExpr& out) {
  out.code.clear();
  return ExprParser(text, out.code).parse();
}

bool ParamExpr::eval(int64_t px, int64_t py, int64_t width, int64_t height, int64_t& out) const {
  int64_t st[64];
  int n = 0;
  for (const auto& t : code) {
    if (n >= 63) return false;
    switch (t.kind) {
      case 'n': st[n++] = t.value; continue;
      case 'x': st[n++] = px; continue;
      case 'y': st[n++] = py; continue;
      case 'w': st[n++] = width; continue;
      case 'h': st[n++] = height; continue;
      case 'u': st[n - 1] = -st[n - 1]; continue;
      default: break;
    }
    const int64_t b = st[--n], a = st[n - 1];
    int64_t& r = st[n - 1];
    switch (t.kind) {
      case '+': r = a + b; break;
      case '-': r = a - b; break;
      case '*': r = a * b; break;
      case '/': if (b == 0) return false; r = a / b; break;
      case '%': if (b == 0) return false; r = a % b; break;
      case '=': r = a == b; break;
      case '!': r = a != b; break;
      case '<': r = a < b; break;
      case 'l': r = a <= b; break;
      case '>': r = a > b; break;
      default: r = a >= b; break;
    }
  }
  out = n ? st[0] : 0;
  return n == 1;
}

// ---------------------------------------------------------------------------------------------
// The layout file (JSON, strict).

namespace {

using nlohmann::json;

std::string pe_name(int64_t x, int64_t y) { return "PE (" + std::to_string(x) + "," + std::to_string(y) + ")"; }

class LayoutReader {
 public:
  LayoutReader(std::string file, const WaferConfig& c, DiagnosticList& d) : file_(std::move(file)), c_(c), d_(d) {}

  std::string at(const std::string& ptr) const { return file_ + " " + (ptr.empty() ? "/" : ptr); }
  void error(const std::string& ptr, std::string m, std::string h = {}) { d_.add(at(ptr), std::move(m), std::move(h)); }

  bool object(const json& j, const std::string& ptr, const std::vector<std::string>& allowed, const std::vector<std::string>& required) {
    if (!j.is_object()) return error(ptr, "expected an object"), false;
    for (const auto& [k, v] : j.items())
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) error(ptr + "/" + k, "unknown key '" + k + "'", suggest(k, allowed, "keys"));
    bool ok = true;
    for (const auto& k : required)
      if (!j.contains(k)) ok = false, error(ptr, "missing key '" + k + "'");
    return ok;
  }
  // An integer member in [lo, hi]; `def` when absent.
  int64_t integer(const json& o, const std::string& key, const std::string& ptr, int64_t lo, int64_t hi, int64_t def) {
    if (!o.contains(key)) return def;
    const json& v = o[key];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      error(ptr + "/" + key, "expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v.dump());
      return def;
    }
    return v.get<int64_t>();
  }
  std::optional<DirSet> dirs(const json& v, const std::string& ptr) {
    if (!v.is_array()) return error(ptr, "expected an array of directions, e.g. [\"W\", \"RAMP\"]"), std::nullopt;
    DirSet s = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string p = ptr + "/" + std::to_string(i);
      auto d = v[i].is_string() ? lookup<Dir>(v[i].get<std::string>(), kDirs, dir_name) : std::nullopt;
      if (!d) {
        error(p, "expected one of N S E W RAMP, got " + v[i].dump(), v[i].is_string() ? suggest(v[i].get<std::string>(), names_of<Dir>(kDirs, dir_name), "directions") : "");
        return std::nullopt;
      }
      if (s & dir_bit(*d)) error(p, "direction " + std::string(dir_name(*d)) + " given twice");
      s |= dir_bit(*d);
    }
    return s;
  }

  Layout read(std::string_view text) {
    Layout l;
    l.source = file_;
    l.width = c_.fabric_width;
    l.height = c_.fabric_height;
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      error("", std::string("not valid JSON: ") + e.what());
      return l;
    } catch (const json::out_of_range& e) {  // a number beyond double's range, e.g. 1e400
      error("", std::string("not valid JSON: ") + e.what(), "numbers must fit in a double");
      return l;
    }
    if (!object(j, "", {"schema", "fabric", "rects", "ports"}, {"rects"})) return l;
    if (j.contains("schema") && j["schema"] != "tessera.wafer-layout/1")
      error("/schema", "unknown schema " + j["schema"].dump(), "use \"tessera.wafer-layout/1\"");
    if (j.contains("fabric") && object(j["fabric"], "/fabric", {"width", "height"}, {})) {
      l.width = integer(j["fabric"], "width", "/fabric", 1, c_.fabric_width, c_.fabric_width);
      l.height = integer(j["fabric"], "height", "/fabric", 1, c_.fabric_height, c_.fabric_height);
    }
    const json& rects = j["rects"];
    if (!rects.is_array() || rects.empty()) return error("/rects", "expected a non-empty array of rectangles"), l;
    for (size_t i = 0; i < rects.size(); ++i) rect(rects[i], "/rects/" + std::to_string(i), l);
    for (size_t i = 0; i < l.rects.size(); ++i)
      for (size_t k = i + 1; k < l.rects.size(); ++k) {
        const RectSpec &a = l.rects[i], &b = l.rects[k];
        if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height)
          d_.add(b.where, "rectangle '" + b.name + "' overlaps rectangle '" + a.name + "' at " + pe_name(std::max(a.x, b.x), std::max(a.y, b.y)),
                 "a PE belongs to at most one rectangle");
      }
    if (j.contains("ports")) {
      if (!j["ports"].is_array()) error("/ports", "expected an array of edge ports");
      else
        for (size_t i = 0; i < j["ports"].size(); ++i) port(j["ports"][i], "/ports/" + std::to_string(i), l);
    }
    return l;
  }

  void port(const json& j, const std::string& ptr, Layout& l) {
    if (!object(j, ptr, {"name", "dir", "side", "x", "y", "length", "color", "type"}, {"name", "dir", "side", "color"})) return;
    PortSpec p;
    p.where = at(ptr);
    if (j["name"].is_string() && is_ident(j["name"].get<std::string>())) p.name = j["name"].get<std::string>();
    else return error(ptr + "/name", "expected a name ([A-Za-z_][A-Za-z0-9_]*), got " + j["name"].dump());
    if (l.port(p.name)) return error(ptr + "/name", "port '" + p.name + "' is declared twice");
    if (j["dir"] == "in") p.input = true;
    else if (j["dir"] == "out") p.input = false;
    else return error(ptr + "/dir", "expected \"in\" or \"out\", got " + j["dir"].dump());
    auto side = j["side"].is_string() ? lookup<Dir>(j["side"].get<std::string>(), kDirs, dir_name) : std::nullopt;
    if (!side || *side == Dir::RAMP) return error(ptr + "/side", "expected one of N S E W, got " + j["side"].dump());
    p.side = *side;
    const bool vertical = p.side == Dir::E || p.side == Dir::W;  // lanes run down the side
    const int64_t edge_x = p.side == Dir::W ? 0 : l.width - 1, edge_y = p.side == Dir::N ? 0 : l.height - 1;
    p.x = static_cast<int32_t>(integer(j, "x", ptr, 0, l.width - 1, vertical ? edge_x : 0));
    p.y = static_cast<int32_t>(integer(j, "y", ptr, 0, l.height - 1, vertical ? 0 : edge_y));
    if (vertical && p.x != edge_x)
      return error(ptr + "/x", "a port on side " + std::string(dir_name(p.side)) + " lies at x = " + std::to_string(edge_x) + ", got " + std::to_string(p.x));
    if (!vertical && p.y != edge_y)
      return error(ptr + "/y", "a port on side " + std::string(dir_name(p.side)) + " lies at y = " + std::to_string(edge_y) + ", got " + std::to_string(p.y));
    const int64_t room = vertical ? l.height - p.y : l.width - p.x;
    p.length = static_cast<int32_t>(integer(j, "length", ptr, 1, room, 1));
    p.color = static_cast<uint8_t>(integer(j, "color", ptr, 0, kMaxColors - 1, 0));
    if (j.contains("type")) {
      if (j["type"] == "f32") p.type = Elem::f32;
      else if (j["type"] == "f16") p.type = Elem::f16;
      else if (j["type"] == "bf16") p.type = Elem::bf16;
      else if (j["type"] == "cbf16") p.type = Elem::cbf16;
      else return error(ptr + "/type", "expected \"f32\", \"f16\", \"bf16\" or \"cbf16\", got " + j["type"].dump());
    }
    l.ports.push_back(std::move(p));
  }

  void rect(const json& j, const std::string& ptr, Layout& l) {
    if (!object(j, ptr, {"name", "x", "y", "width", "height", "program", "params", "routes"}, {"x", "y", "width", "height"})) return;
    RectSpec r;
    r.where = at(ptr);
    r.name = "rect" + ptr.substr(ptr.rfind('/') + 1);
    if (j.contains("name")) {
      if (j["name"].is_string()) r.name = j["name"].get<std::string>();
      else error(ptr + "/name", "expected a string");
    }
    r.x = static_cast<int32_t>(integer(j, "x", ptr, 0, l.width - 1, 0));
    r.y = static_cast<int32_t>(integer(j, "y", ptr, 0, l.height - 1, 0));
    r.width = static_cast<int32_t>(integer(j, "width", ptr, 1, l.width, 1));
    r.height = static_cast<int32_t>(integer(j, "height", ptr, 1, l.height, 1));
    if (r.x + r.width > l.width || r.y + r.height > l.height)
      error(ptr, "rectangle '" + r.name + "' (" + std::to_string(r.width) + "x" + std::to_string(r.height) + " at " + std::to_string(r.x) + "," +
                     std::to_string(r.y) + ") leaves the " + std::to_string(l.width) + "x" + std::to_string(l.height) + " fabric");
    if (j.contains("program")) {
      if (j["program"].is_string() && !j["program"].get<std::string>().empty()) r.program = j["program"].get<std::string>();
      else error(ptr + "/program", "expected a file name");
    }
    if (j.contains("params")) {
      if (r.program.empty()) error(ptr + "/params", "params without a program");
      else if (!j["params"].is_object()) error(ptr + "/params", "expected an object of NAME: number or \"expression of px, py, width, height\"");
      else
        for (const auto& [k, v] : j["params"].items()) {
          ParamSpec p;
          p.name = k;
          p.where = at(ptr + "/params/" + k);
          if (!is_ident(k)) error(ptr + "/params/" + k, "bad parameter name '" + k + "'");
          if (v.is_number()) p.value = v.get<double>();
          else if (v.is_string()) {
            p.is_expr = true;
            if (std::string e = ParamExpr::compile(v.get<std::string>(), p.expr); !e.empty())
              error(ptr + "/params/" + k, "bad expression " + v.dump() + ": " + e, "integers, px py width height, + - * / % ( ) == != < <= > >=");
          } else {
            error(ptr + "/params/" + k, "expected a number or an expression string, got " + v.dump());
          }
          r.params.push_back(std::move(p));
        }
    }
    if (j.contains("routes")) {
      if (!j["routes"].is_array()) error(ptr + "/routes", "expected an array of routes");
      else
        for (size_t i = 0; i < j["routes"].size(); ++i) route(j["routes"][i], ptr + "/routes/" + std::to_string(i), r, l);
    }
    l.rects.push_back(std::move(r));
  }

  void route(const json& j, const std::string& ptr, const RectSpec& r, Layout& l) {
    if (!object(j, ptr, {"color", "x", "y", "width", "height", "rx", "tx", "switch", "ring"}, {"color", "rx", "tx"})) return;
    RouteSpec s;
    s.where = at(ptr);
    s.color = static_cast<uint8_t>(integer(j, "color", ptr, 0, kMaxColors - 1, 0));
    const int64_t x = integer(j, "x", ptr, 0, r.width - 1, 0), y = integer(j, "y", ptr, 0, r.height - 1, 0);
    const int64_t w = integer(j, "width", ptr, 1, r.width - x, r.width - x), h = integer(j, "height", ptr, 1, r.height - y, r.height - y);
    s.x = static_cast<int32_t>(r.x + x);
    s.y = static_cast<int32_t>(r.y + y);
    s.width = static_cast<int32_t>(w);
    s.height = static_cast<int32_t>(h);
    auto rx = dirs(j["rx"], ptr + "/rx"), tx = dirs(j["tx"], ptr + "/tx");
    if (!rx || !tx) return;
    s.route.pos[0] = {*rx, *tx};
    if (j.contains("switch")) {
      const json& sw = j["switch"];
      if (!sw.is_array() || sw.empty() || sw.size() > kSwitchPositions - 1)
        return error(ptr + "/switch", "expected an array of 1 to 3 switch positions", "[{\"tx\": [\"S\"]}, ...]: pos1..pos3; rx/tx left out keep the base's");
      for (size_t i = 0; i < sw.size(); ++i) {
        const std::string p = ptr + "/switch/" + std::to_string(i);
        if (!object(sw[i], p, {"rx", "tx"}, {})) return;
        SwitchPos pos = s.route.pos[0];
        if (sw[i].contains("rx")) {
          auto v = dirs(sw[i]["rx"], p + "/rx");
          if (!v) return;
          pos.rx = *v;
        }
        if (sw[i].contains("tx")) {
          auto v = dirs(sw[i]["tx"], p + "/tx");
          if (!v) return;
          pos.tx = *v;
        }
        s.route.pos[i + 1] = pos;
      }
      s.route.npos = static_cast<uint8_t>(sw.size() + 1);
    }
    if (j.contains("ring")) {
      if (j["ring"].is_boolean()) s.route.ring = j["ring"].get<bool>();
      else error(ptr + "/ring", "expected true or false");
    }
    l.routes.push_back(std::move(s));
  }

 private:
  std::string file_;
  const WaferConfig& c_;
  DiagnosticList& d_;
};

bool has_program(const Layout& l, int64_t x, int64_t y) {
  for (const auto& r : l.rects)
    if (!r.program.empty() && x >= r.x && x < r.x + r.width && y >= r.y && y < r.y + r.height) return true;
  return false;
}

const RouteSpec* find_route(const Layout& l, int64_t x, int64_t y, int color) {
  for (const auto& r : l.routes)
    if (r.color == color && r.contains(x, y)) return &r;
  return nullptr;
}

std::string more(int64_t n, const RouteSpec& r) {
  return (n > 1 ? "and " + std::to_string(n - 1) + " more PE(s) of " : "route ") + r.where;
}

}  // namespace

Layout parse_layout(std::string_view json_text, const std::string& file_name, const std::string& base_dir, const WaferConfig& c) {
  DiagnosticList d;
  Layout l = LayoutReader(file_name, c, d).read(json_text);
  for (auto& r : l.rects)
    if (!r.program.empty() && r.program[0] != '/' && !base_dir.empty()) r.program = base_dir + "/" + r.program;
  if (d.empty()) check_routes(l, c, d);
  d.throw_if_any();
  return l;
}

void check_routes(const Layout& l, const WaferConfig& c, DiagnosticList& d) {
  // Ports: an input lane's PE receives the port's color from the port's side; an output lane's PE
  // sends it there (checked from the routes below); two ports never share a lane, side and color.
  for (size_t i = 0; i < l.ports.size(); ++i) {
    const PortSpec& p = l.ports[i];
    const std::string ps = std::string(dir_name(p.side));
    if (p.color >= c.colors)
      d.add(p.where, "color " + std::to_string(p.color) + " is not routable", "routable colors are 0.." + std::to_string(c.colors - 1) + " (router.colors)");
    for (int64_t k = 0; k < p.length; ++k) {
      const int64_t x = p.lane_x(k), y = p.lane_y(k);
      const RouteSpec* r = find_route(l, x, y, p.color);
      const DirSet need = p.input ? (r ? r->route.rx_any() : 0) : (r ? r->route.tx_any() : 0);
      if (!(need & dir_bit(p.side))) {
        d.add(pe_name(x, y), "port '" + p.name + "' lane " + std::to_string(k) + ": the route of color " + std::to_string(p.color) +
                                 (r ? " has no " + ps + " in its " + (p.input ? "rx" : "tx") + " (" + r->where + ")" : " is missing"),
              std::string(p.input ? "rx" : "tx") + " [\"" + ps + "\", ...] on that PE");
        break;
      }
    }
    for (size_t k = i + 1; k < l.ports.size(); ++k) {
      const PortSpec& q = l.ports[k];
      if (q.side != p.side || q.color != p.color) continue;
      for (int64_t m = 0; m < q.length; ++m)
        if (p.covers(q.lane_x(m), q.lane_y(m))) {
          d.add(q.where, "port '" + q.name + "' overlaps port '" + p.name + "' at " + pe_name(q.lane_x(m), q.lane_y(m)), "one port per PE, side and color");
          break;
        }
    }
  }
  for (size_t i = 0; i < l.routes.size(); ++i) {
    const RouteSpec& a = l.routes[i];
    if (a.color >= c.colors)
      d.add(a.where, "color " + std::to_string(a.color) + " is not routable", "routable colors are 0.." + std::to_string(c.colors - 1) + " (router.colors)");
    for (size_t k = i + 1; k < l.routes.size(); ++k) {
      const RouteSpec& b = l.routes[k];
      if (a.color == b.color && a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height)
        d.add(pe_name(std::max(a.x, b.x), std::max(a.y, b.y)), "color " + std::to_string(a.color) + " is routed twice: " + a.where + " and " + b.where,
              "one route per color and PE");
    }
  }
  for (const auto& r : l.routes) {
    const DirSet tx = r.route.tx_any();
    const std::string col = "color " + std::to_string(r.color) + ": ";
    if (tx & dir_bit(Dir::RAMP)) {
      int64_t n = 0, fx = 0, fy = 0;
      for (int64_t y = r.y; y < r.y + r.height; ++y)
        for (int64_t x = r.x; x < r.x + r.width; ++x)
          if (!has_program(l, x, y) && n++ == 0) fx = x, fy = y;
      if (n) d.add(pe_name(fx, fy), col + "tx RAMP but the PE runs no program (" + more(n, r) + ")", "drop RAMP from tx, or give the rectangle a program");
    }
    for (Dir dir : {Dir::N, Dir::S, Dir::E, Dir::W}) {
      if (!(tx & dir_bit(dir))) continue;
      const std::string dn(dir_name(dir)), back(dir_name(opposite(dir)));
      const int dx = dir_dx(dir), dy = dir_dy(dir);
      // Inside the region: the region's own rx must accept from the opposite side.
      if ((dx && r.width > 1) || (dy && r.height > 1)) {
        if (!(r.route.rx_any() & dir_bit(opposite(dir)))) {
          const int64_t sx = dx < 0 ? r.x + 1 : r.x, sy = dy < 0 ? r.y + 1 : r.y;
          d.add(pe_name(sx, sy), col + "tx " + dn + " into " + pe_name(sx + dx, sy + dy) + ", whose rx " + format_dirset(r.route.rx_any()) +
                                     " does not include " + back + " (" + r.where + ")");
        }
      }
      // The strip just outside the region in that direction.
      int64_t out = 0, none = 0, norx = 0, fo[2]{}, fn[2]{}, fr[2]{};
      const RouteSpec* fr_route = nullptr;
      const int64_t n = dx ? r.height : r.width;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t sx = dx > 0 ? r.x + r.width - 1 : dx < 0 ? r.x : r.x + k;
        const int64_t sy = dy > 0 ? r.y + r.height - 1 : dy < 0 ? r.y : r.y + k;
        const int64_t nx = sx + dx, ny = sy + dy;
        if (nx < 0 || ny < 0 || nx >= l.width || ny >= l.height) {
          bool port = false;
          for (const auto& p : l.ports)
            if (!p.input && p.side == dir && p.color == r.color && p.covers(sx, sy)) port = true;
          if (!port && out++ == 0) fo[0] = sx, fo[1] = sy;
          continue;
        }
        const RouteSpec* t = find_route(l, nx, ny, r.color);
        if (!t) {
          if (none++ == 0) fn[0] = sx, fn[1] = sy;
        } else if (!(t->route.rx_any() & dir_bit(opposite(dir)))) {
          if (norx++ == 0) fr[0] = sx, fr[1] = sy, fr_route = t;
        }
      }
      if (out)
        d.add(pe_name(fo[0], fo[1]), col + "tx " + dn + " leaves the " + std::to_string(l.width) + "x" + std::to_string(l.height) + " fabric (" + more(out, r) + ")",
              "the edge PE's tx should not include " + dn + ", unless an output port on side " + dn + " collects color " + std::to_string(r.color) + " there");
      if (none)
        d.add(pe_name(fn[0], fn[1]), col + "tx " + dn + " into " + pe_name(fn[0] + dx, fn[1] + dy) + ", which has no route for color " +
                                         std::to_string(r.color) + " (" + more(none, r) + ")",
              "route the color there with rx [\"" + back + "\"]");
      if (norx)
        d.add(pe_name(fr[0], fr[1]), col + "tx " + dn + " into " + pe_name(fr[0] + dx, fr[1] + dy) + ", whose rx " +
                                         format_dirset(fr_route->route.rx_any()) + " does not include " + back + " (" + more(norx, r) + ")",
              "add \"" + back + "\" to " + fr_route->where + " rx");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Loading: programs per distinct parameter values.

int LoadedLayout::rect_at(int64_t x, int64_t y) const {
  for (size_t i = 0; i < layout.rects.size(); ++i) {
    const RectSpec& r = layout.rects[i];
    if (x >= r.x && x < r.x + r.width && y >= r.y && y < r.y + r.height) return static_cast<int>(i);
  }
  return -1;
}

uint32_t LoadedLayout::program_at(int64_t x, int64_t y) const {
  const int i = rect_at(x, y);
  if (i < 0) return kNoProgram;
  const auto& v = pe_program[static_cast<size_t>(i)];
  if (v.empty()) return kNoProgram;
  if (v.size() == 1) return v[0];
  const RectSpec& r = layout.rects[static_cast<size_t>(i)];
  return v[static_cast<size_t>((y - r.y) * r.width + (x - r.x))];
}

const Route* LoadedLayout::route_at(int64_t x, int64_t y, int color) const {
  const RouteSpec* r = find_route(layout, x, y, color);
  return r ? &r->route : nullptr;
}

LoadedLayout load_layout_text(std::string_view json_text, const std::string& file_name, const std::string& base_dir, const WaferConfig& c,
                              const std::map<std::string, std::string>* sources, const std::map<std::string, ProgramTemplate>* templates) {
  LoadedLayout L;
  L.layout = parse_layout(json_text, file_name, base_dir, c);
  DiagnosticList d;
  // Instances by program and parameter values (a rectangle's PEs mostly share a few).
  // (Hashed: a compiled rectangle of 36,864 PEs whose parameters all differ looked each set of ~600
  // values up in an ordered map, comparing whole vectors at every level.)
  struct ValuesHash {
    size_t operator()(const std::vector<double>& v) const {
      size_t h = v.size();
      for (const double x : v) h = h * 1000003u ^ std::hash<double>{}(x);
      return h;
    }
  };
  std::map<std::string, std::unordered_map<std::vector<double>, uint32_t, ValuesHash>> cache;
  int failed = 0;
  constexpr int kMaxFailed = 16;
  L.pe_program.resize(L.layout.rects.size());
  for (size_t ri = 0; ri < L.layout.rects.size(); ++ri) {
    const RectSpec& r = L.layout.rects[ri];
    if (r.program.empty()) continue;
    std::string text;
    const ProgramTemplate* tpl = nullptr;
    if (templates && templates->count(r.program)) {
      tpl = &templates->at(r.program);
    } else {
      try {
        text = sources && sources->count(r.program) ? sources->at(r.program) : read_file(r.program);
      } catch (const InputError& e) {
        d.add(r.where + "/program", "cannot read program '" + r.program + "'", e.diagnostics().empty() ? "" : e.diagnostics()[0].message);
        continue;
      }
    }
    const bool uniform = std::none_of(r.params.begin(), r.params.end(), [](const ParamSpec& p) { return p.is_expr; });
    auto& v = L.pe_program[ri];
    v.assign(uniform ? 1 : static_cast<size_t>(r.width) * static_cast<size_t>(r.height), kNoProgram);
    auto& instances = cache[r.program];
    std::vector<double> values(r.params.size());
    for (size_t k = 0; k < v.size() && failed < kMaxFailed; ++k) {
      const int64_t px = static_cast<int64_t>(k) % r.width, py = static_cast<int64_t>(k) / r.width;
      bool ok = true;
      for (size_t i = 0; i < r.params.size(); ++i) {
        const ParamSpec& p = r.params[i];
        int64_t e = 0;
        if (p.is_expr && !p.expr.eval(px, py, r.width, r.height, e)) {
          d.add(p.where + " " + pe_name(r.x + px, r.y + py), "division by zero");
          ok = false;
        }
        values[i] = p.is_expr ? static_cast<double>(e) : p.value;
      }
      if (!ok) {
        ++failed;
        continue;
      }
      if (auto it = instances.find(values); it != instances.end()) {
        v[k] = it->second;
        continue;
      }
      const std::string pe = pe_name(r.x + px, r.y + py);
      Bindings b;
      for (size_t i = 0; i < r.params.size(); ++i) b[r.params[i].name] = values[i];
      uint32_t index = kNoProgram;
      try {
        const size_t before = d.size();
        Program p = tpl ? tpl->instantiate(b, pe, d) : assemble(text, r.program, b, pe);
        if (d.size() == before) validate(p, c, d, pe);
        if (d.size() == before) {
          index = static_cast<uint32_t>(L.programs.size());
          L.programs.push_back(std::move(p));
        }
      } catch (const InputError& e) {
        for (const auto& x : e.diagnostics()) d.add(x.where, x.message, x.hint);
      }
      if (index == kNoProgram) ++failed;
      instances[values] = index;
      v[k] = index;
    }
    if (failed >= kMaxFailed) {
      d.add(r.where, "stopped after " + std::to_string(kMaxFailed) + " program instances with errors");
      break;
    }
  }
  // Colors a program sends and receives need RAMP in the PE's route. (Per program instance the
  // distinct (color, receive) pairs; per color a grid of the route regions, built when first
  // needed: a lookup per PE and pair.)
  if (d.empty()) {
    std::vector<std::vector<std::pair<int, bool>>> needs(L.programs.size());
    for (size_t i = 0; i < L.programs.size(); ++i) {
      std::set<std::pair<int, bool>> s;
      for (const auto& t : L.programs[i].tasks)
        if (t.kind == TaskKind::data) s.insert({t.color, true});
      for (const auto& ds : L.programs[i].dsds)
        if (ds.is_fabric()) s.insert({ds.color, ds.kind == DsdKind::fabin});
      needs[i].assign(s.begin(), s.end());
    }
    const int64_t W = L.layout.width, H = L.layout.height;
    std::map<int, std::vector<int32_t>> grids;  // color -> route index per PE (-1: none)
    auto route_of = [&](int64_t x, int64_t y, int color) -> const Route* {
      auto it = grids.find(color);
      if (it == grids.end()) {
        std::vector<int32_t> g(static_cast<size_t>(W * H), -1);
        for (size_t i = L.layout.routes.size(); i-- > 0;) {  // (the first route of a PE wins, as find_route's)
          const RouteSpec& rs = L.layout.routes[i];
          if (rs.color != color) continue;
          for (int64_t yy = std::max<int64_t>(0, rs.y); yy < std::min<int64_t>(H, rs.y + rs.height); ++yy)
            for (int64_t xx = std::max<int64_t>(0, rs.x); xx < std::min<int64_t>(W, rs.x + rs.width); ++xx) g[static_cast<size_t>(yy * W + xx)] = static_cast<int32_t>(i);
        }
        it = grids.emplace(color, std::move(g)).first;
      }
      const int32_t i = it->second[static_cast<size_t>(y * W + x)];
      return i < 0 ? nullptr : &L.layout.routes[static_cast<size_t>(i)].route;
    };
    for (size_t ri = 0; ri < L.layout.rects.size(); ++ri) {
      const RectSpec& r = L.layout.rects[ri];
      if (r.program.empty()) continue;
      std::map<std::pair<int, bool>, std::pair<int64_t, std::string>> missing;  // (color, receive) -> (count, first PE)
      for (int64_t y = r.y; y < r.y + r.height; ++y)
        for (int64_t x = r.x; x < r.x + r.width; ++x)
          for (const auto& [color, receive] : needs[L.program_at(x, y)]) {
            const Route* rt = route_of(x, y, color);
            if (rt && ((receive ? rt->tx_any() : rt->rx_any()) & dir_bit(Dir::RAMP))) continue;
            auto& m = missing[{color, receive}];
            if (m.first++ == 0) m.second = pe_name(x, y);
          }
      for (const auto& [k, m] : missing)
        d.add(m.second, "the program " + std::string(k.second ? "receives" : "sends") + " color " + std::to_string(k.first) + " but the route there has no RAMP in " +
                            (k.second ? "tx" : "rx") + (m.first > 1 ? " (and " + std::to_string(m.first - 1) + " more PE(s) of " + r.where + ")" : ""),
              "route the color with \"" + std::string(k.second ? "tx" : "rx") + "\": [\"RAMP\", ...] at the PE");
    }
  }
  d.throw_if_any();
  return L;
}

LoadedLayout load_layout(const std::string& path, const WaferConfig& c) {
  const size_t slash = path.rfind('/');
  return load_layout_text(read_file(path), path, slash == std::string::npos ? "" : path.substr(0, slash), c);
}

}  // namespace tessera::wafer
