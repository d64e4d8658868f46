#include "traces/reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "isa/error.hpp"
#include "isa/fileio.hpp"
#include "traces/wire.hpp"

namespace tessera::traces {

const Arg* Slice::arg(std::string_view n) const {
  for (const auto& a : args)
    if (a.name == n) return &a;
  return nullptr;
}

const Track* Trace::track(uint64_t uuid) const {
  for (const auto& t : tracks)
    if (t.uuid == uuid) return &t;
  return nullptr;
}

const Track* Trace::find(std::string_view name, uint64_t parent) const {
  for (const auto& t : tracks)
    if (t.name == name && (parent == 0 || t.parent == parent)) return &t;
  return nullptr;
}

std::string Trace::path(uint64_t uuid) const {
  const Track* t = track(uuid);
  if (!t) return "<track " + std::to_string(uuid) + ">";
  if (const Track* p = t->parent ? track(t->parent) : nullptr) return p->name + " / " + t->name;
  return t->name;
}

namespace {

using wire::Field;
using wire::Reader;

struct SeqState {
  std::unordered_map<uint64_t, std::string> event_names, arg_names, string_values;
};

void read_interned(std::string_view bytes, SeqState& st) {
  Reader r(bytes);
  Field fl;
  while (r.next(fl)) {
    std::unordered_map<uint64_t, std::string>* table = nullptr;
    if (fl.number == 2) table = &st.event_names;
    else if (fl.number == 3) table = &st.arg_names;
    else if (fl.number == 29) table = &st.string_values;
    if (!table || fl.type != wire::kLengthDelimited) continue;
    Reader e(fl.bytes);
    Field g;
    uint64_t iid = 0;
    std::string name;
    while (e.next(g)) {
      if (g.number == 1 && g.type == wire::kVarint) iid = g.value;
      else if (g.number == 2 && g.type == wire::kLengthDelimited) name = std::string(g.bytes);
    }
    (*table)[iid] = std::move(name);
  }
}

const std::string& lookup(const std::unordered_map<uint64_t, std::string>& table, uint64_t iid, const char* what) {
  auto it = table.find(iid);
  if (it == table.end()) throw std::runtime_error(std::string("interned ") + what + " iid " + std::to_string(iid) + " is not defined");
  return it->second;
}

Arg read_annotation(std::string_view bytes, const SeqState& st) {
  Arg a;
  Reader r(bytes);
  Field fl;
  while (r.next(fl)) {
    switch (fl.number) {
      case 1: a.name = lookup(st.arg_names, fl.value, "debug annotation name"); break;
      case 10: a.name = std::string(fl.bytes); break;
      case 2:
      case 3:
      case 4:
      case 7: a.value = fl.as_int64(); break;
      case 5: a.value = fl.as_double(); break;
      case 6:
      case 9: a.value = std::string(fl.bytes); break;
      case 17: a.value = lookup(st.string_values, fl.value, "debug annotation string value"); break;
      default: break;
    }
  }
  return a;
}

// Repeated fixed64/uint64 fields arrive unpacked (one field each) or packed (one length-delimited).
void read_ids(const Field& fl, std::vector<uint64_t>& out) {
  if (fl.type != wire::kLengthDelimited) {
    out.push_back(fl.value);
    return;
  }
  const std::string_view b = fl.bytes;
  if (fl.number == 47 || fl.number == 48) {
    for (size_t i = 0; i + 8 <= b.size(); i += 8) {
      uint64_t v = 0;
      for (size_t k = 0; k < 8; ++k) v |= static_cast<uint64_t>(static_cast<uint8_t>(b[i + k])) << (8 * k);
      out.push_back(v);
    }
  } else {
    uint64_t v = 0;
    int shift = 0;
    for (const char c : b) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(c) & 0x7f) << shift;
      if (static_cast<uint8_t>(c) & 0x80) {
        shift += 7;
        if (shift >= 64) throw std::runtime_error("malformed packed varint");
      } else {
        out.push_back(v);
        v = 0;
        shift = 0;
      }
    }
  }
}

Track read_descriptor(std::string_view bytes) {
  Track t;
  std::string pname, tname;
  bool named = false;
  Reader r(bytes);
  Field fl;
  while (r.next(fl)) {
    switch (fl.number) {
      case 1: t.uuid = fl.value; break;
      case 5: t.parent = fl.value; break;
      case 2:
      case 10:
        t.name = std::string(fl.bytes);
        named = true;
        break;
      case 3: {
        t.kind = Track::Kind::process;
        Reader p(fl.bytes);
        Field g;
        while (p.next(g)) {
          if (g.number == 1) t.pid = static_cast<int32_t>(g.value);
          else if (g.number == 6) pname = std::string(g.bytes);
        }
        break;
      }
      case 4: {
        t.kind = Track::Kind::thread;
        Reader p(fl.bytes);
        Field g;
        while (p.next(g)) {
          if (g.number == 1) t.pid = static_cast<int32_t>(g.value);
          else if (g.number == 2) t.tid = static_cast<int32_t>(g.value);
          else if (g.number == 5) tname = std::string(g.bytes);
        }
        break;
      }
      case 8: {
        t.kind = Track::Kind::counter;
        Reader p(fl.bytes);
        Field g;
        while (p.next(g))
          if (g.number == 3) t.unit = static_cast<int>(g.value);
        break;
      }
      default: break;
    }
  }
  if (!named) t.name = t.kind == Track::Kind::process ? pname : tname;
  return t;
}

}  // namespace

Trace read_perfetto(std::string_view bytes) {
  Trace tr;
  std::map<uint32_t, SeqState> seqs;
  std::unordered_map<uint64_t, std::vector<size_t>> open;  // track -> stack of slice indices
  Reader top(bytes);
  Field pf;
  while (top.next(pf)) {
    if (pf.number != 1 || pf.type != wire::kLengthDelimited) continue;
    ++tr.packets;
    uint64_t ts = 0, flags = 0;
    uint32_t seq = 0;
    std::string_view event, descriptor, interned;
    Reader r(pf.bytes);
    Field fl;
    while (r.next(fl)) {
      switch (fl.number) {
        case 8: ts = fl.value; break;
        case 10: seq = static_cast<uint32_t>(fl.value); break;
        case 11: event = fl.bytes; break;
        case 12: interned = fl.bytes; break;
        case 13: flags = fl.value; break;
        case 60: descriptor = fl.bytes; break;
        default: break;
      }
    }
    SeqState& st = seqs[seq];
    if (flags & 1) st = SeqState{};
    if (!interned.empty()) read_interned(interned, st);
    if (!descriptor.empty()) tr.tracks.push_back(read_descriptor(descriptor));
    if (event.empty()) continue;

    uint64_t type = 0, track = 0;
    std::string name;
    std::vector<Arg> args;
    std::vector<uint64_t> flows, terminating;
    double value = 0;
    Reader e(event);
    while (e.next(fl)) {
      switch (fl.number) {
        case 9: type = fl.value; break;
        case 11: track = fl.value; break;
        case 10: name = lookup(st.event_names, fl.value, "event name"); break;
        case 23: name = std::string(fl.bytes); break;
        case 4: args.push_back(read_annotation(fl.bytes, st)); break;
        case 30: value = static_cast<double>(fl.as_int64()); break;
        case 44: value = fl.as_double(); break;
        case 36:
        case 47: read_ids(fl, flows); break;
        case 42:
        case 48: read_ids(fl, terminating); break;
        default: break;
      }
    }
    const auto t = static_cast<int64_t>(ts);
    switch (type) {
      case 1: {
        auto& stack = open[track];
        tr.slices.push_back({track, std::move(name), t, t, static_cast<int>(stack.size()), std::move(args), std::move(flows),
                             std::move(terminating)});
        stack.push_back(tr.slices.size() - 1);
        break;
      }
      case 2: {
        auto& stack = open[track];
        if (stack.empty())
          throw std::runtime_error("packet " + std::to_string(tr.packets) + ": a slice end at " + std::to_string(t) +
                                   " ns on track " + std::to_string(track) + " has no open slice");
        Slice& s = tr.slices[stack.back()];
        stack.pop_back();
        if (t < s.begin_ns) throw std::runtime_error("slice '" + s.name + "' ends before it begins");
        s.end_ns = t;
        for (auto& a : args) s.args.push_back(std::move(a));
        s.flow_out.insert(s.flow_out.end(), flows.begin(), flows.end());
        s.flow_in.insert(s.flow_in.end(), terminating.begin(), terminating.end());
        break;
      }
      case 3: tr.instants.push_back({track, std::move(name), t, std::move(args)}); break;
      case 4: tr.counters.push_back({track, t, value}); break;
      default: break;
    }
  }
  for (const auto& [track, stack] : open)
    if (!stack.empty())
      throw std::runtime_error("slice '" + tr.slices[stack.back()].name + "' on track " + std::to_string(track) + " never ends");
  return tr;
}

Trace read_chrome_json(std::string_view text) {
  using nlohmann::json;
  const json doc = json::parse(text.begin(), text.end());
  const json& events = doc.is_array() ? doc : doc.at("traceEvents");
  Trace tr;
  std::map<int64_t, uint64_t> procs;
  std::map<std::pair<int64_t, int64_t>, uint64_t> threads;
  std::map<std::pair<int64_t, std::string>, uint64_t> counters;
  auto new_track = [&](Track t) {
    t.uuid = tr.tracks.size() + 1;
    tr.tracks.push_back(std::move(t));
    return tr.tracks.back().uuid;
  };
  auto proc = [&](int64_t pid) {
    auto it = procs.find(pid);
    if (it != procs.end()) return it->second;
    Track t;
    t.kind = Track::Kind::process;
    t.pid = static_cast<int32_t>(pid);
    t.name = "pid " + std::to_string(pid);
    return procs[pid] = new_track(std::move(t));
  };
  auto thread = [&](int64_t pid, int64_t tid) {
    const uint64_t p = proc(pid);
    if (tid == 0) return p;  // events on the process itself
    auto it = threads.find({pid, tid});
    if (it != threads.end()) return it->second;
    Track t;
    t.kind = Track::Kind::thread;
    t.pid = static_cast<int32_t>(pid);
    t.tid = static_cast<int32_t>(tid);
    t.parent = p;
    t.name = "tid " + std::to_string(tid);
    return threads[{pid, tid}] = new_track(std::move(t));
  };
  auto ns = [](const json& v) { return static_cast<int64_t>(std::llround(v.get<double>() * 1000.0)); };
  auto to_args = [](const json& a) {
    std::vector<Arg> out;
    if (!a.is_object()) return out;
    for (const auto& [k, v] : a.items()) {
      if (v.is_number_integer()) out.push_back({k, v.get<int64_t>()});
      else if (v.is_number()) out.push_back({k, v.get<double>()});
      else if (v.is_string()) out.push_back({k, v.get<std::string>()});
      else out.push_back({k, v.dump()});
    }
    return out;
  };
  struct FlowEnd {
    uint64_t track;
    int64_t ts;
    uint64_t id;
    bool out;
  };
  std::vector<FlowEnd> flows;
  std::map<uint64_t, std::vector<size_t>> open;
  for (const json& ev : events) {
    const std::string ph = ev.value("ph", "");
    const int64_t pid = ev.value("pid", int64_t{0}), tid = ev.value("tid", int64_t{0});
    const std::string name = ev.value("name", "");
    if (ph == "M") {
      const std::string value = ev.contains("args") ? ev["args"].value("name", "") : "";
      if (name == "process_name") tr.tracks[proc(pid) - 1].name = value;
      else if (name == "thread_name") tr.tracks[thread(pid, tid) - 1].name = value;
      continue;
    }
    if (ph == "X" || ph == "B") {
      const uint64_t t = thread(pid, tid);
      const int64_t b = ns(ev.at("ts"));
      tr.slices.push_back({t, name, b, ph == "X" ? b + ns(ev.value("dur", json(0.0))) : b, 0, to_args(ev.value("args", json())), {}, {}});
      if (ph == "B") open[t].push_back(tr.slices.size() - 1);
    } else if (ph == "E") {
      auto& stack = open[thread(pid, tid)];
      if (stack.empty()) throw std::runtime_error("an E event at " + ev.at("ts").dump() + " us has no open B event");
      tr.slices[stack.back()].end_ns = ns(ev.at("ts"));
      stack.pop_back();
    } else if (ph == "i" || ph == "I" || ph == "n") {
      tr.instants.push_back({thread(pid, tid), name, ns(ev.at("ts")), to_args(ev.value("args", json()))});
    } else if (ph == "C") {
      const json& a = ev.at("args");
      for (const auto& [k, v] : a.items()) {
        const std::string cname = a.size() == 1 ? name : name + "." + k;
        auto it = counters.find({pid, cname});
        uint64_t c = 0;
        if (it == counters.end()) {
          Track t;
          t.kind = Track::Kind::counter;
          t.pid = static_cast<int32_t>(pid);
          t.parent = proc(pid);
          t.name = cname;
          c = counters[{pid, cname}] = new_track(std::move(t));
        } else {
          c = it->second;
        }
        tr.counters.push_back({c, ns(ev.at("ts")), v.get<double>()});
      }
    } else if (ph == "s" || ph == "f" || ph == "t") {
      const json& id = ev.at("id");
      const uint64_t n = id.is_string() ? std::stoull(id.get<std::string>(), nullptr, 0) : id.get<uint64_t>();
      flows.push_back({thread(pid, tid), ns(ev.at("ts")), n, ph == "s"});
    }
  }
  // Depths, and file order by begin time.
  std::stable_sort(tr.slices.begin(), tr.slices.end(), [](const Slice& a, const Slice& b) {
    return std::tie(a.track, a.begin_ns) < std::tie(b.track, b.begin_ns) ||
           (a.track == b.track && a.begin_ns == b.begin_ns && a.end_ns > b.end_ns);
  });
  std::vector<const Slice*> stack;
  for (size_t i = 0; i < tr.slices.size(); ++i) {
    Slice& s = tr.slices[i];
    if (i == 0 || tr.slices[i - 1].track != s.track) stack.clear();
    while (!stack.empty() && stack.back()->end_ns <= s.begin_ns) stack.pop_back();
    s.depth = static_cast<int>(stack.size());
    stack.push_back(&s);
  }
  // Flows bind to the deepest slice enclosing their timestamp on their thread.
  for (const FlowEnd& fe : flows) {
    Slice* best = nullptr;
    for (auto& s : tr.slices)
      if (s.track == fe.track && s.begin_ns <= fe.ts && fe.ts <= s.end_ns && (!best || s.depth > best->depth)) best = &s;
    if (best) (fe.out ? best->flow_out : best->flow_in).push_back(fe.id);
  }
  std::stable_sort(tr.slices.begin(), tr.slices.end(), [](const Slice& a, const Slice& b) { return a.begin_ns < b.begin_ns; });
  return tr;
}

Trace read_trace_file(const std::string& path) {
  const std::string data = read_file(path);
  const size_t first = data.find_first_not_of(" \t\r\n");
  bool json = first != std::string::npos && (data[first] == '{' || data[first] == '[');
  // A Perfetto trace starts with 0x0a (field 1, a packet), which is also a newline: when its length
  // byte happens to be '{' or '[', the text test above is fooled, so such a file is tried as
  // Perfetto first.
  if (json && !data.empty() && data[0] == '\n') {
    try {
      return read_perfetto(data);
    } catch (const std::exception&) {
    }
  }
  try {
    return json ? read_chrome_json(data) : read_perfetto(data);
  } catch (const std::exception& e) {
    throw InputError(path, std::string("not a readable ") + (json ? "Chrome JSON" : "Perfetto") + " trace: " + e.what(),
                     "give a .pftrace or Chrome JSON trace written by tessera run");
  }
}

namespace {

std::string fmt_time(double ns) {
  char b[48];
  const double a = std::fabs(ns);
  if (a < 1e3) std::snprintf(b, sizeof b, "%.0f ns", ns);
  else if (a < 1e6) std::snprintf(b, sizeof b, "%.3f us", ns / 1e3);
  else if (a < 1e9) std::snprintf(b, sizeof b, "%.3f ms", ns / 1e6);
  else std::snprintf(b, sizeof b, "%.3f s", ns / 1e9);
  return b;
}

std::string pad(std::string s, size_t w, bool right = false) {
  if (s.size() >= w) return s;
  return right ? std::string(w - s.size(), ' ') + s : s + std::string(w - s.size(), ' ');
}

std::string fmt_num(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

}  // namespace

std::string summarize(const Trace& t, size_t top) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& s : t.slices) lo = std::min(lo, s.begin_ns), hi = std::max(hi, s.end_ns);
  for (const auto& i : t.instants) lo = std::min(lo, i.ts_ns), hi = std::max(hi, i.ts_ns);
  for (const auto& c : t.counters) lo = std::min(lo, c.ts_ns), hi = std::max(hi, c.ts_ns);
  if (lo > hi) lo = hi = 0;
  const double span = static_cast<double>(hi - lo);

  std::set<uint64_t> out_ids, in_ids;
  for (const auto& s : t.slices) {
    out_ids.insert(s.flow_out.begin(), s.flow_out.end());
    in_ids.insert(s.flow_in.begin(), s.flow_in.end());
  }
  size_t flows = 0;
  for (const uint64_t id : out_ids) flows += in_ids.count(id);

  std::string o;
  o += "trace: " + std::to_string(t.tracks.size()) + " tracks, " + std::to_string(t.slices.size()) + " slices, " +
       std::to_string(t.instants.size()) + " instants, " + std::to_string(t.counters.size()) + " counter values, " +
       std::to_string(flows) + " flows; span " + fmt_time(span) + " (" + fmt_time(static_cast<double>(lo)) + " .. " +
       fmt_time(static_cast<double>(hi)) + ")\n";

  // Per track: slices, busy time (top-level slices; nested ones are inside them), share of span.
  struct Busy {
    size_t slices = 0, instants = 0;
    int64_t busy = 0;
  };
  std::map<uint64_t, Busy> busy;
  for (const auto& s : t.slices) {
    auto& b = busy[s.track];
    ++b.slices;
    if (s.depth == 0) b.busy += s.dur_ns();
  }
  for (const auto& i : t.instants) ++busy[i.track].instants;
  size_t w = 24;
  for (const auto& tk : t.tracks) w = std::max(w, t.path(tk.uuid).size() + 2);
  o += "\n" + pad("track", w + 2) + pad("slices", 9, true) + pad("busy", 14, true) + pad("busy%", 9, true) + "\n";
  for (const auto& tk : t.tracks) {
    if (tk.kind == Track::Kind::counter) continue;
    auto it = busy.find(tk.uuid);
    if (it == busy.end()) continue;
    const Busy& b = it->second;
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", span > 0 ? 100.0 * static_cast<double>(b.busy) / span : 0.0);
    o += "  " + pad(t.path(tk.uuid), w) + pad(std::to_string(b.slices), 9, true) +
         pad(fmt_time(static_cast<double>(b.busy)), 14, true) + pad(pct, 9, true);
    if (b.instants) o += "  (" + std::to_string(b.instants) + " instants)";
    o += "\n";
  }

  // Counters.
  std::map<uint64_t, std::vector<double>> cv;
  for (const auto& c : t.counters) cv[c.track].push_back(c.value);
  if (!cv.empty()) {
    o += "\n" + pad("counter", w + 2) + pad("values", 9, true) + pad("min", 14, true) + pad("max", 14, true) +
         pad("last", 14, true) + "\n";
    for (const auto& tk : t.tracks) {
      auto it = cv.find(tk.uuid);
      if (it == cv.end()) continue;
      const auto& v = it->second;
      o += "  " + pad(t.path(tk.uuid), w) + pad(std::to_string(v.size()), 9, true) +
           pad(fmt_num(*std::min_element(v.begin(), v.end())), 14, true) +
           pad(fmt_num(*std::max_element(v.begin(), v.end())), 14, true) + pad(fmt_num(v.back()), 14, true) + "\n";
    }
  }

  // Top slice names by total time, over thread tracks (instructions, transfers, kernels).
  struct Agg {
    size_t n = 0;
    int64_t total = 0;
  };
  std::map<std::string, Agg> by_name;
  int64_t all = 0;
  for (const auto& s : t.slices) {
    const Track* tk = t.track(s.track);
    if (tk && tk->kind != Track::Kind::thread) continue;
    auto& a = by_name[s.name];
    ++a.n;
    a.total += s.dur_ns();
    all += s.dur_ns();
  }
  std::vector<std::pair<std::string, Agg>> ranked(by_name.begin(), by_name.end());
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  if (!ranked.empty()) {
    size_t nw = 20;
    for (const auto& [n, a] : ranked) nw = std::max(nw, n.size() + 2);
    o += "\ntop slices by time" + std::string(ranked.size() > top ? " (" + std::to_string(top) + " of " + std::to_string(ranked.size()) + ")" : "") +
         "\n  " + pad("name", nw) + pad("count", 9, true) + pad("total", 14, true) + pad("mean", 14, true) +
         pad("share", 9, true) + "\n";
    for (size_t i = 0; i < ranked.size() && i < top; ++i) {
      const auto& [n, a] = ranked[i];
      char pct[16];
      std::snprintf(pct, sizeof pct, "%.1f%%", all > 0 ? 100.0 * static_cast<double>(a.total) / static_cast<double>(all) : 0.0);
      o += "  " + pad(n, nw) + pad(std::to_string(a.n), 9, true) + pad(fmt_time(static_cast<double>(a.total)), 14, true) +
           pad(fmt_time(static_cast<double>(a.total) / static_cast<double>(a.n)), 14, true) + pad(pct, 9, true) + "\n";
    }
  }
  return o;
}

}  // namespace tessera::traces
