#include "sim/schema.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera::schema {

namespace {

NodePtr make(Kind k, std::string description) {
  auto n = std::make_shared<Node>();
  n->kind = k;
  n->description = std::move(description);
  return n;
}

std::string where(const std::string& pointer) { return pointer.empty() ? "<root>" : pointer; }

std::string fmt_num(double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

std::string range_text(const Node& n) {
  const bool lo = n.min > -1e299, hi = n.max < 1e299;
  auto f = [&](double x) { return n.kind == Kind::quantity ? format_quantity(x, n.unit) : fmt_num(x); };
  if (lo && hi) return "in [" + f(n.min) + ", " + f(n.max) + "]";
  if (lo) return ">= " + f(n.min);
  if (hi) return "<= " + f(n.max);
  return {};
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

bool check_range(const Node& n, double v, const std::string& p, const json& original, DiagnosticList& d) {
  if (v < n.min || v > n.max) {
    d.add(where(p), "value " + describe(original) + " is out of range", "expected " + range_text(n));
    return false;
  }
  return true;
}

}  // namespace

const Field* Node::field(const std::string& name) const {
  for (const auto& f : fields)
    if (f.name == name) return &f;
  return nullptr;
}

NodePtr object(std::vector<Field> fields, std::string description) {
  auto n = make(Kind::object, std::move(description));
  n->fields = std::move(fields);
  return n;
}
NodePtr map_of(NodePtr element, std::string description) {
  auto n = make(Kind::map, std::move(description));
  n->element = std::move(element);
  return n;
}
NodePtr array_of(NodePtr element, std::string description) {
  auto n = make(Kind::array, std::move(description));
  n->element = std::move(element);
  return n;
}
NodePtr string(std::string description) { return make(Kind::string, std::move(description)); }
NodePtr enumeration(std::vector<std::string> choices, std::string description) {
  auto n = make(Kind::enumeration, std::move(description));
  n->choices = std::move(choices);
  return n;
}
NodePtr integer(double min, double max, std::string description) {
  auto n = make(Kind::integer, std::move(description));
  n->min = min;
  n->max = max;
  return n;
}
NodePtr number(double min, double max, std::string description) {
  auto n = make(Kind::number, std::move(description));
  n->min = min;
  n->max = max;
  return n;
}
NodePtr boolean(std::string description) { return make(Kind::boolean, std::move(description)); }
NodePtr quantity(UnitKind unit, double min, double max, std::string description) {
  auto n = make(Kind::quantity, std::move(description));
  n->unit = unit;
  n->min = min;
  n->max = max;
  return n;
}
NodePtr path(std::string description) { return make(Kind::path, std::move(description)); }
NodePtr any(std::string description) { return make(Kind::any, std::move(description)); }
NodePtr with_default(NodePtr n, const json& v) {
  n->default_value = std::make_shared<json>(v);
  return n;
}
Field req(std::string name, NodePtr node) { return {std::move(name), std::move(node), true}; }
Field opt(std::string name, NodePtr node) { return {std::move(name), std::move(node), false}; }

std::string pointer_token(const std::string& key) {
  std::string r;
  for (char c : key) {
    if (c == '~') r += "~0";
    else if (c == '/') r += "~1";
    else r += c;
  }
  return r;
}

std::string describe(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return std::string("boolean ") + (v.get<bool>() ? "true" : "false");
    case json::value_t::string: return "string " + v.dump();
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "number " + v.dump();
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    default: return "a value of unsupported type";
  }
}

json validate(const Node& n, const json& v, const std::string& p, const Context& ctx, DiagnosticList& d) {
  auto type_error = [&](const std::string& expected) {
    d.add(where(p), "expected " + expected + ", got " + describe(v), n.description);
    return v;
  };
  json out;
  switch (n.kind) {
    case Kind::object: {
      if (!v.is_object()) return type_error("an object");
      out = json::object();
      std::vector<std::string> names;
      for (const auto& f : n.fields) names.push_back(f.name);
      for (const auto& [k, val] : v.items()) {
        if (n.field(k)) continue;
        const std::string hint = did_you_mean(k, names);
        d.add(p + "/" + pointer_token(k), "unknown key '" + k + "'",
              hint.empty() ? "allowed keys here: " + join(names) : "did you mean '" + hint + "'?");
      }
      if (!n.exactly_one_of.empty()) {
        std::vector<std::string> present;
        for (const auto& k : n.exactly_one_of)
          if (v.contains(k)) present.push_back(k);
        if (present.empty())
          d.add(where(p), "needs exactly one of: " + join(n.exactly_one_of), n.description);
        else if (present.size() > 1)
          d.add(where(p), "gives " + join(present) + "; give exactly one of: " + join(n.exactly_one_of));
      }
      for (const auto& f : n.fields) {
        const std::string fp = p + "/" + pointer_token(f.name);
        if (v.contains(f.name)) {
          out[f.name] = validate(*f.node, v.at(f.name), fp, ctx, d);
        } else if (f.required) {
          d.add(fp, "required key '" + f.name + "' is missing", f.node->description);
        } else if (f.node->default_value) {
          out[f.name] = validate(*f.node, *f.node->default_value, fp, ctx, d);
        }
      }
      break;
    }
    case Kind::map: {
      if (!v.is_object()) return type_error("an object (name -> value)");
      out = json::object();
      for (const auto& [k, val] : v.items()) out[k] = validate(*n.element, val, p + "/" + pointer_token(k), ctx, d);
      break;
    }
    case Kind::array: {
      if (!v.is_array()) return type_error("an array");
      out = json::array();
      for (size_t i = 0; i < v.size(); ++i) out.push_back(validate(*n.element, v[i], p + "/" + std::to_string(i), ctx, d));
      break;
    }
    case Kind::string:
      if (!v.is_string()) return type_error("a string");
      out = v;
      break;
    case Kind::enumeration: {
      if (!v.is_string()) return type_error("one of: " + join(n.choices));
      const auto s = v.get<std::string>();
      bool ok = false;
      for (const auto& c : n.choices) ok = ok || c == s;
      if (!ok) {
        const std::string hint = did_you_mean(s, n.choices);
        d.add(where(p), "'" + s + "' is not one of: " + join(n.choices),
              hint.empty() ? n.description : "did you mean '" + hint + "'?");
        return v;
      }
      out = v;
      break;
    }
    case Kind::integer: {
      if (!v.is_number()) return type_error("an integer " + range_text(n));
      const double x = v.get<double>();
      if (x != std::floor(x)) return type_error("an integer " + range_text(n));
      if (!check_range(n, x, p, v, d)) return v;
      out = v.is_number_float() ? json(static_cast<int64_t>(x)) : v;
      break;
    }
    case Kind::number: {
      if (!v.is_number()) return type_error("a number " + range_text(n));
      if (!check_range(n, v.get<double>(), p, v, d)) return v;
      out = v;
      break;
    }
    case Kind::boolean:
      if (!v.is_boolean()) return type_error("true or false");
      out = v;
      break;
    case Kind::quantity: {
      double x;
      if (v.is_number()) {
        x = v.get<double>();
      } else if (v.is_string()) {
        auto q = parse_quantity(v.get<std::string>(), n.unit);
        if (!q.value) {
          d.add(where(p), q.error, n.description);
          return v;
        }
        x = *q.value;
      } else {
        return type_error(std::string("a ") + std::string(unit_kind_name(n.unit)) + " such as \"" +
                          format_quantity(n.min > 0 ? n.min : 1, n.unit) + "\"");
      }
      if (!check_range(n, x, p, v, d)) return v;
      out = x;  // normalised to the SI base unit
      break;
    }
    case Kind::path: {
      if (!v.is_string() || v.get<std::string>().empty()) return type_error("a file path");
      namespace fs = std::filesystem;
      fs::path fp(v.get<std::string>());
      if (fp.is_relative() && !ctx.base_dir.empty()) fp = fs::path(ctx.base_dir) / fp;
      fp = fp.lexically_normal();
      std::error_code ec;
      const fs::file_status st = fs::status(fp, ec);
      if (fs::is_directory(st)) {
        d.add(where(p), fp.string() + " is a directory, not a file", "name the file in it");
        return v;
      }
      if (fs::exists(st) && !fs::is_regular_file(st)) {
        d.add(where(p), fp.string() + " is not a regular file", "name a file");
        return v;
      }
      if (!fs::is_regular_file(st)) {
        d.add(where(p), "file not found: " + fp.string(), "paths are relative to the scenario file");
        return v;
      }
      out = fs::absolute(fp, ec).lexically_normal().string();
      break;
    }
    case Kind::any:
      out = v;
      break;
  }
  if (n.check) n.check(out, p, d);
  return out;
}

namespace {
std::string type_text(const Node& n) {
  switch (n.kind) {
    case Kind::object: return "object";
    case Kind::map: return "map of name -> " + type_text(*n.element);
    case Kind::array: return "array of " + type_text(*n.element);
    case Kind::string: return "string";
    case Kind::enumeration: {
      std::string s;
      for (const auto& c : n.choices) s += (s.empty() ? "" : " \\| ") + ("`" + c + "`");
      return s;
    }
    case Kind::integer: return "integer" + (range_text(n).empty() ? "" : " " + range_text(n));
    case Kind::number: return "number" + (range_text(n).empty() ? "" : " " + range_text(n));
    case Kind::boolean: return "boolean";
    case Kind::quantity: return std::string(unit_kind_name(n.unit)) + " (e.g. \"" + format_quantity(n.min > 0 ? n.min : 1, n.unit) + "\")";
    case Kind::path: return "file path";
    case Kind::any: return "any";
  }
  return "?";
}

void table_rows(const Node& n, const std::string& p, std::string& out) {
  const Node* walk = &n;
  std::string prefix = p;
  if (n.kind == Kind::map && n.element->kind == Kind::object) {
    walk = n.element.get();
    prefix = p + "/NAME";
  } else if (n.kind == Kind::array && n.element->kind == Kind::object) {
    walk = n.element.get();
    prefix = p + "/N";
  }
  if (walk->kind != Kind::object) return;
  for (const auto& f : walk->fields) {
    const std::string fp = prefix + "/" + f.name;
    std::string def = f.required ? "required" : (f.node->default_value ? "`" + f.node->default_value->dump() + "`" : "optional");
    if (!walk->exactly_one_of.empty() &&
        std::find(walk->exactly_one_of.begin(), walk->exactly_one_of.end(), f.name) != walk->exactly_one_of.end())
      def = "one of " + join(walk->exactly_one_of);
    out += "| `" + fp + "` | " + type_text(*f.node) + " | " + def + " | " + f.node->description + " |\n";
    table_rows(*f.node, fp, out);
  }
}
}  // namespace

std::string markdown_table(const Node& root) {
  std::string out = "| field | type | default | description |\n| --- | --- | --- | --- |\n";
  table_rows(root, "", out);
  return out;
}

namespace {

// One node as JSON Schema (draft 2020-12). The checks that are code (`Node::check`: names usable as
// directories, a quantity string's unit) stay with tessera's own validator.
json to_json_schema(const Node& n) {
  json s = json::object();
  if (!n.description.empty()) s["description"] = n.description;
  auto bounds = [&](json& t) {
    if (n.min > -1e299) t["minimum"] = n.min;
    if (n.max < 1e299) t["maximum"] = n.max;
  };
  switch (n.kind) {
    case Kind::object: {
      s["type"] = "object";
      json props = json::object();
      json required = json::array();
      for (const auto& f : n.fields) {
        props[f.name] = to_json_schema(*f.node);
        if (f.required) required.push_back(f.name);
      }
      s["properties"] = props;
      if (!required.empty()) s["required"] = required;
      s["additionalProperties"] = false;
      if (!n.exactly_one_of.empty()) {
        json one = json::array();
        for (const auto& name : n.exactly_one_of) one.push_back({{"required", {name}}});
        s["oneOf"] = one;
      }
      break;
    }
    case Kind::map:
      s["type"] = "object";
      s["additionalProperties"] = to_json_schema(*n.element);
      break;
    case Kind::array:
      s["type"] = "array";
      s["items"] = to_json_schema(*n.element);
      break;
    case Kind::string:
    case Kind::path:
      s["type"] = "string";
      if (n.kind == Kind::path) s["minLength"] = 1;
      break;
    case Kind::enumeration:
      s["enum"] = n.choices;
      break;
    case Kind::integer:
      s["type"] = "integer";
      bounds(s);
      break;
    case Kind::number:
      s["type"] = "number";
      bounds(s);
      break;
    case Kind::boolean:
      s["type"] = "boolean";
      break;
    case Kind::quantity: {
      // A number in the base unit, or a number with a unit ("850MHz", "1.4 GHz", "48KiB").
      json num = {{"type", "number"}};
      bounds(num);
      const std::string unit = std::string(unit_symbol(n.unit));
      json str = {{"type", "string"},
                  {"pattern", "^\\s*[-+]?([0-9]+\\.?[0-9]*|\\.[0-9]+)([eE][-+]?[0-9]+)?\\s*[A-Za-z/%]*\\s*$"}};
      s["anyOf"] = json::array({num, str});
      if (!unit.empty()) s["description"] = n.description + (n.description.empty() ? "" : " ") + "(" + unit + ", or a string with a unit)";
      break;
    }
    case Kind::any:
      break;
  }
  if (n.default_value && !n.default_value->is_null()) s["default"] = *n.default_value;
  return s;
}

}  // namespace

json json_schema(const Node& root, const std::string& title) {
  json s = to_json_schema(root);
  json out = {{"$schema", "https://json-schema.org/draft/2020-12/schema"}, {"title", title}};
  out.update(s);
  return out;
}

std::optional<std::vector<std::string>> resolve_set_path(const Node& root, const std::string& dotted,
                                                         DiagnosticList& d) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t dot = dotted.find('.', pos);
    parts.push_back(dotted.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  std::vector<std::string> keys;
  const Node* n = &root;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty()) {
      d.add("--set " + dotted, "empty path segment", "write key.path=value, e.g. run.steps=4");
      return std::nullopt;
    }
    if (n->kind == Kind::object) {
      const Field* f = n->field(parts[i]);
      if (!f) {
        std::vector<std::string> names;
        for (const auto& fl : n->fields) names.push_back(fl.name);
        const std::string hint = did_you_mean(parts[i], names);
        d.add("--set " + dotted, "unknown key '" + parts[i] + "'",
              hint.empty() ? "allowed keys here: " + join(names) : "did you mean '" + hint + "'?");
        return std::nullopt;
      }
      keys.push_back(parts[i]);
      n = f->node.get();
    } else if (n->kind == Kind::map) {
      if (n->dotted_keys) {  // the rest of the path is one key ("hbm.bandwidth")
        std::string k = parts[i];
        for (size_t j = i + 1; j < parts.size(); ++j) k += "." + parts[j];
        keys.push_back(k);
        return keys;
      }
      keys.push_back(parts[i]);
      n = n->element.get();
    } else if (n->kind == Kind::any) {
      keys.insert(keys.end(), parts.begin() + static_cast<long>(i), parts.end());
      return keys;
    } else {
      d.add("--set " + dotted, "'" + parts[i - 1] + "' is not an object; cannot set '" + parts[i] + "' inside it");
      return std::nullopt;
    }
  }
  return keys;
}

}  // namespace tessera::schema
