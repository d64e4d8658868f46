// ProgramTemplate: a PE program with parameters built by code (builder.hpp); instantiated through
// ProgramBuilder, printed as the assembly text that assembles to the same Program.
#include <algorithm>
#include <cmath>

#include "isa/wafer/asm_util.hpp"
#include "isa/wafer/builder.hpp"

namespace tessera::wafer {

using namespace asmutil;

namespace {

std::string num_text(const ProgramTemplate::Num& n) { return n.param.empty() ? std::to_string(n.value) : "$" + n.param; }

}  // namespace

void ProgramTemplate::param(const std::string& name) {
  param_at_.emplace(name, params_.size());
  params_.push_back(name);
}

ProgramTemplate::Item& ProgramTemplate::add(Kind kind, const std::string& name, const std::string& note) {
  Item& it = items_.emplace_back();
  it.kind = kind;
  it.name = name;
  it.note = note;
  return it;
}

void ProgramTemplate::comment(const std::string& text) { add(Kind::comment, {}, text); }
void ProgramTemplate::if_(const std::string& param, bool want) { add(Kind::cond_if, param).want = want; }
void ProgramTemplate::else_() { add(Kind::cond_else); }
void ProgramTemplate::endif() { add(Kind::cond_end); }

void ProgramTemplate::data(const std::string& name, Elem e, int64_t count, std::optional<float> fill, int32_t live_lo, int32_t live_hi,
                           const std::string& note) {
  Item& it = add(Kind::data, name, note);
  it.elem = e;
  it.count = count;
  it.fill = fill;
  it.live_lo = live_lo;
  it.live_hi = live_hi;
}

void ProgramTemplate::fabric(const std::string& name, DsdKind kind, Elem e, Num color, int64_t queue, Num len, bool control, bool index, bool advance) {
  Item& it = add(Kind::dsd, name);
  it.dkind = kind;
  it.elem = e;
  it.color = std::move(color);
  it.queue = queue;
  it.len = std::move(len);
  it.control = control;
  it.index = index;
  it.advance = advance;
}

void ProgramTemplate::mem1d(const std::string& name, const std::string& array, Num off, std::optional<int64_t> len, int64_t stride,
                            const std::string& note) {
  Item& it = add(Kind::dsd, name, note);
  it.dkind = DsdKind::mem1d;
  it.array = array;
  it.off = std::move(off);
  it.len1 = len;
  it.stride = stride;
}

void ProgramTemplate::mem4d(const std::string& name, const std::string& array, Num off, const std::vector<std::pair<Num, int64_t>>& dims,
                            const std::string& note) {
  Item& it = add(Kind::dsd, name, note);
  it.dkind = DsdKind::mem4d;
  it.array = array;
  it.off = std::move(off);
  it.dims = dims;
}

void ProgramTemplate::fifo(const std::string& name, const std::string& array) {
  Item& it = add(Kind::dsd, name);
  it.dkind = DsdKind::fifo;
  it.array = array;
}

void ProgramTemplate::task(const std::string& name, TaskKind kind, int id, int color, int queue, bool active, bool blocked, const std::string& note) {
  Item& it = add(Kind::task, name, note);
  it.tkind = kind;
  it.id = id;
  it.tcolor = color;
  it.tqueue = queue;
  it.active = active;
  it.blocked = blocked;
}

void ProgramTemplate::label(const std::string& name) { add(Kind::label, name); }

void ProgramTemplate::op(Op op, const std::vector<Arg>& args, const std::string& note) {
  Item& it = add(Kind::instr, {}, note);
  it.op = op;
  it.args = args;
}

void ProgramTemplate::op_async(Op op, const std::vector<Arg>& args, const std::string& activate, const std::string& unblock, const std::string& note) {
  Item& it = add(Kind::instr, {}, note);
  it.op = op;
  it.args = args;
  it.async = true;
  it.activate = activate;
  it.unblock = unblock;
}

std::string ProgramTemplate::line_text(const Item& it) const {
  std::string s;
  switch (it.kind) {
    case Kind::comment: return "# " + it.note;
    case Kind::cond_if: return std::string(".if ") + (it.want ? "$" : "!$") + it.name;
    case Kind::cond_else: return ".else";
    case Kind::cond_end: return ".endif";
    case Kind::data:
      s = ".data " + it.name + " " + std::string(elem_name(it.elem)) + " " + std::to_string(it.count);
      if (it.fill) s += " fill=" + fmt_float(*it.fill);
      if (it.live_lo >= 0) s += " live=" + std::to_string(it.live_lo) + ".." + std::to_string(it.live_hi);
      break;
    case Kind::dsd:
      s = ".dsd " + it.name + " " + std::string(dsd_kind_name(it.dkind)) + " ";
      if (it.dkind == DsdKind::fabin || it.dkind == DsdKind::fabout) {
        s += std::string(elem_name(it.elem)) + " color=" + num_text(it.color) + " queue=" + std::to_string(it.queue) + " len=" + num_text(it.len);
        if (it.control) s += " control";
        if (it.index) s += " index";
        if (it.advance) s += " advance";
      } else {
        s += it.array;
        if (!it.off.param.empty() || it.off.value != 0) s += " off=" + num_text(it.off);
        if (it.dkind == DsdKind::mem1d) {
          if (it.len1) s += " len=" + std::to_string(*it.len1);
          if (it.stride != 1) s += " stride=" + std::to_string(it.stride);
        } else if (it.dkind == DsdKind::mem4d) {
          s += " dims=";
          for (size_t i = 0; i < it.dims.size(); ++i) s += (i ? "," : "") + num_text(it.dims[i].first) + ":" + std::to_string(it.dims[i].second);
        }
      }
      break;
    case Kind::task:
      s = ".task " + it.name + " " + std::string(task_kind_name(it.tkind)) + " id=" + std::to_string(it.id);
      if (it.tkind == TaskKind::data) s += " color=" + std::to_string(it.tcolor) + (it.tqueue >= 0 ? " queue=" + std::to_string(it.tqueue) : "");
      if (it.active) s += " active";
      if (it.blocked) s += " blocked";
      break;
    case Kind::label: return it.name + ":";
    case Kind::instr:
      s = "  " + std::string(op_name(it.op));
      for (size_t i = 0; i < it.args.size(); ++i) s += (i ? ", " : " ") + it.args[i].text;
      if (it.async) s += " async";
      if (!it.activate.empty()) s += " activate=" + it.activate;
      if (!it.unblock.empty()) s += " unblock=" + it.unblock;
      break;
  }
  if (!it.note.empty()) s += "   # " + it.note;
  return s;
}

std::string ProgramTemplate::text() const {
  std::string s;
  for (const auto& p : params_) s += ".param " + p + "\n";
  for (const auto& it : items_) s += line_text(it) + "\n";
  return s;
}

Program ProgramTemplate::instantiate(const Bindings& b, const std::string& pe, DiagnosticList& d) const {
  ProgramBuilder pb(source_, pe, d);
  for (const auto& [name, v] : b)
    if (!declared(name))
      pb.error("parameter '" + name + "' is bound but the program declares no `.param " + name + "`", suggest(name, params_, "declared parameters"));
  for (const auto& p : params_)
    if (auto it = b.find(p); it != b.end()) pb.bind(p, it->second);
  // A parameter's value (false with an error if it is unbound or, for a number, not an integer).
  auto value = [&](const std::string& p, double& out) {
    auto it = b.find(p);
    if (!declared(p)) return pb.error("unknown parameter '$" + p + "'", suggest(p, params_, "declared")), false;
    if (it == b.end()) return pb.error("parameter '$" + p + "' has no value", "bind it in the layout's params"), false;
    out = it->second;
    return true;
  };
  bool ok = true;
  auto num = [&](const Num& n) -> int64_t {
    if (n.param.empty()) return n.value;
    double v = 0;
    if (!value(n.param, v)) return ok = false, 0;
    if (v != std::floor(v)) return pb.error("parameter '$" + n.param + "' = " + fmt_value(v) + " where an integer belongs"), ok = false, 0;
    return static_cast<int64_t>(v);
  };
  struct Cond {
    bool parent_on, taken, on;
  };
  std::vector<Cond> conds;
  auto active = [&] { return conds.empty() || conds.back().on; };
  int32_t line = static_cast<int32_t>(params_.size());
  for (const Item& it : items_) {
    pb.at(++line);
    switch (it.kind) {
      case Kind::comment: break;
      case Kind::cond_if: {
        Cond c{active(), false, false};
        double v = 0;
        if (c.parent_on && value(it.name, v)) c.on = c.taken = (v != 0) == it.want;
        conds.push_back(c);
        break;
      }
      case Kind::cond_else:
        conds.back().on = conds.back().parent_on && !conds.back().taken;
        break;
      case Kind::cond_end: conds.pop_back(); break;
      default:
        if (!active()) break;
        ok = true;
        if (it.kind == Kind::data) {
          pb.data(it.name, it.elem, it.count, it.fill, it.live_lo, it.live_hi);
        } else if (it.kind == Kind::dsd) {
          if (it.dkind == DsdKind::fabin || it.dkind == DsdKind::fabout) {
            const int64_t color = num(it.color), len = num(it.len);
            if (ok) pb.fabric(it.name, it.dkind, it.elem, color, it.queue, len, it.control, it.index, it.advance);
          } else if (it.dkind == DsdKind::mem1d) {
            const int64_t off = num(it.off);
            if (ok) pb.mem1d(it.name, it.array, off, it.len1, it.stride);
          } else if (it.dkind == DsdKind::mem4d) {
            const int64_t off = num(it.off);
            std::vector<std::pair<int64_t, int64_t>> dims;
            for (const auto& [l, s] : it.dims) dims.emplace_back(num(l), s);
            if (ok) pb.mem4d(it.name, it.array, off, dims);
          } else {
            pb.fifo(it.name, it.array);
          }
        } else if (it.kind == Kind::task) {
          pb.task(it.name, it.tkind, it.id, it.tcolor, it.tqueue, it.active, it.blocked);
        } else if (it.kind == Kind::label) {
          pb.label(it.name);
        } else {
          pb.instr(it.op, it.args, it.async, it.activate, it.unblock);
        }
    }
  }
  return pb.finish();
}

Program ProgramTemplate::instantiate(const Bindings& b) const {
  DiagnosticList d;
  Program p = instantiate(b, {}, d);
  d.throw_if_any();
  return p;
}

int64_t ProgramTemplate::dsd_cycles(int64_t len, const WaferConfig& c) const {
  int64_t n = 0;
  for (const Item& it : items_)
    if (it.kind == Kind::instr && op_info(it.op).cls == OpClass::dsd) n += ::tessera::wafer::dsd_cycles(it.op, len, 1, c);
  return n;
}

}  // namespace tessera::wafer
