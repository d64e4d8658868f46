#!/usr/bin/python3
"""json_schema_check.py SCHEMA ROOT: every shipped scenario (a .json under ROOT whose "schema" is
tessera.scenario/1) validates against the generated JSON Schema (docs/scenario.schema.json), checked
by the independent `jsonschema` package (Debian python3-jsonschema, draft 2020-12); and scenarios
with a mistake tessera's own validator refuses are refused by the schema too, so the check can fail."""
import copy
import json
import pathlib
import sys

import jsonschema

schema = json.loads(pathlib.Path(sys.argv[1]).read_text())
root = pathlib.Path(sys.argv[2])
jsonschema.Draft202012Validator.check_schema(schema)
validator = jsonschema.Draft202012Validator(schema)

failures = []
count = 0
for path in sorted(root.rglob("*.json")):
    try:
        doc = json.loads(path.read_text())
    except ValueError:
        continue
    if not isinstance(doc, dict) or doc.get("schema") != "tessera.scenario/1":
        continue
    count += 1
    for err in validator.iter_errors(doc):
        failures.append(f"{path}: /{'/'.join(str(p) for p in err.absolute_path)}: {err.message}")

quickstart = json.loads((root / "quickstart.json").read_text())
# (what, object path, key, value): a value None removes the key.
mistakes = [
    ("an unknown key", ["run"], "stpes", 2),
    ("a target kind that does not exist", ["target"], "kind", "tpu"),
    ("a quantity that is not one", ["run"], "host_memory", "lots"),
    ("a negative step count", ["run"], "steps", -1),
    ("no target", [], "target", None),
]
for what, at, key, value in mistakes:
    doc = copy.deepcopy(quickstart)
    obj = doc
    for k in at:
        obj = obj.setdefault(k, {})
    if value is None:
        obj.pop(key)
    else:
        obj[key] = value
    if validator.is_valid(doc):
        failures.append(f"quickstart.json with {what} passes the schema")
with_schema_key = dict(quickstart, **{"$schema": "../docs/scenario.schema.json"})
for err in validator.iter_errors(with_schema_key):
    failures.append(f"quickstart.json with a $schema key: {err.message}")

for f in failures:
    print(f)
print(f"{count} shipped scenarios against the JSON Schema; {len(mistakes)} mistakes refused: "
      + ("FAIL" if failures or count == 0 else "PASS"))
sys.exit(1 if failures or count == 0 else 0)
