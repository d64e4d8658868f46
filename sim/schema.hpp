#pragma once
// A small declarative schema for JSON inputs: strict (unknown keys are errors with a
// did-you-mean), typed, with ranges, units and defaults. validate() reports every mistake in the
// document at once and returns the resolved document (defaults filled, quantities normalised to
// SI base units, paths made absolute).
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "isa/error.hpp"
#include "isa/units.hpp"

namespace tessera::schema {

using json = nlohmann::json;

enum class Kind { object, map, array, string, enumeration, integer, number, boolean, quantity, path, any };

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct Field {
  std::string name;
  NodePtr node;
  bool required = false;
};

struct Context {
  std::string base_dir;  // for resolving relative paths
};

struct Node {
  Kind kind = Kind::any;
  std::string description;
  std::vector<Field> fields;          // object
  std::vector<std::string> exactly_one_of;  // object: exactly one of these fields must be present
  NodePtr element;                    // map values, array items
  bool dotted_keys = false;           // map: keys may contain '.', so a --set path ends at the key
  std::vector<std::string> choices;   // enumeration
  double min = -1e300, max = 1e300;   // integer, number, quantity
  UnitKind unit = UnitKind::count;    // quantity
  std::string pattern_hint;           // string: allowed characters, checked by `check`
  std::shared_ptr<json> default_value;  // filled in when absent (objects get {} -> their defaults)
  // Extra check on the (resolved) value; adds diagnostics at `pointer`.
  std::function<void(const json& value, const std::string& pointer, DiagnosticList& diags)> check;

  const Field* field(const std::string& name) const;
};

// Builders.
NodePtr object(std::vector<Field> fields, std::string description = {});
NodePtr map_of(NodePtr element, std::string description = {});
NodePtr array_of(NodePtr element, std::string description = {});
NodePtr string(std::string description = {});
NodePtr enumeration(std::vector<std::string> choices, std::string description = {});
NodePtr integer(double min, double max, std::string description = {});
NodePtr number(double min, double max, std::string description = {});
NodePtr boolean(std::string description = {});
NodePtr quantity(UnitKind unit, double min, double max, std::string description = {});
NodePtr path(std::string description = {});
NodePtr any(std::string description = {});
NodePtr with_default(NodePtr n, const json& v);

Field req(std::string name, NodePtr node);
Field opt(std::string name, NodePtr node);

json validate(const Node& node, const json& value, const std::string& pointer, const Context& ctx,
              DiagnosticList& diags);

// A Markdown table of every field: pointer, type, default, description (docs/scenario-fields.md is
// this output, kept in sync by a test).
std::string markdown_table(const Node& root);

// The same declarations as a JSON Schema (draft 2020-12) for editors and other tools
// (`tessera schema --format json-schema`, docs/scenario.schema.json). Checks written as code
// (Node::check, units inside quantity strings) are tessera's own.
json json_schema(const Node& root, const std::string& title);

// JSON pointer escaping of one reference token ('~' -> "~0", '/' -> "~1").
std::string pointer_token(const std::string& key);
// "number 5", "string \"x\"", "object", ... for error messages.
std::string describe(const json& v);

// Resolves a dotted --set path ("target.params.hbm.bandwidth") against the schema into JSON
// object keys. Unknown segments add a diagnostic (with did-you-mean) and return nullopt.
std::optional<std::vector<std::string>> resolve_set_path(const Node& root, const std::string& dotted,
                                                         DiagnosticList& diags);

}  // namespace tessera::schema
