#!/usr/bin/env python3
"""Generates, from values.yaml, the values table in README.md (between `<!-- values:start -->` and
`<!-- values:end -->`) and values.schema.json. Standard library only: it parses the subset of YAML that
values.yaml is written in (2-space indentation, block maps and lists, inline scalars, `{}` and `[]`).

A key with a `# -- description` comment above it is a documented value: one table row, and in the schema a
leaf of its default's type (`# @type string,integer` overrides; maps and lists are free-form). A key without
one is a group: its keys are its only keys (`additionalProperties: false`). `# @default -- text` shows text
as the default.

    ./gen-values-table.py           # rewrite README.md and values.schema.json
    ./gen-values-table.py --check   # exit 1 when either is stale
"""
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
START, END = "<!-- values:start -->", "<!-- values:end -->"

# Keys of Kubeflow's v1 chart (and older): the schema lets them through so the chart's own check can say
# what replaced them (templates/checks.yaml).
RENAMED = [
    "sparkJobNamespaces", "sparkJobNamespace", "replicaCount", "imagePullSecrets", "serviceAccounts",
    "rbac", "controllerThreads", "resyncInterval", "logLevel", "podLabels", "podAnnotations", "metrics",
    "podMonitor", "leaderElection", "uiService", "ingressUrlFormat", "batchScheduler",
    "resourceQuotaEnforcement", "labelSelectorFilter", "enableWebhook", "enableMetrics", "metricsPort",
    "webhookPort", "nodeSelector", "tolerations", "affinity", "resources", "securityContext",
    "podSecurityContext", "priorityClassName", "istio", "volumes", "volumeMounts",
]
RENAMED_WEBHOOK = ["timeout"]


def scalar(text):
    text = text.strip()
    if text in ("{}",):
        return {}
    if text in ("[]",):
        return []
    if text in ("null", "~"):
        return None
    if text in ("true", "false"):
        return text == "true"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?\d+\.\d+", text):
        return float(text)
    return text


class Node:
    def __init__(self, key, doc, meta):
        self.key, self.doc, self.meta = key, doc, meta
        self.value = None
        self.children = []  # Nodes of a group


def lines_of(text):
    out = []
    for raw in text.splitlines():
        stripped = raw.strip()
        indent = len(raw) - len(raw.lstrip(" "))
        out.append((indent, stripped))
    return out


def parse_block(lines, i, indent):
    """A block (map or list) whose items are at `indent`; returns (value, next index)."""
    # Skip blank lines and comments to find the first item.
    j = i
    while j < len(lines) and (not lines[j][1] or lines[j][1].startswith("#")):
        j += 1
    if j >= len(lines) or lines[j][0] < indent:
        return None, i
    if lines[j][1].startswith("- "):
        items, end = [], j
        while j < len(lines):
            ind, s = lines[j]
            if not s or s.startswith("#"):
                j += 1
                continue
            if ind < indent or not s.startswith("- "):
                break
            rest = s[2:]
            if ":" in rest and not rest.startswith(("'", '"')):
                # A map item: its first key is on the dash line, the others at indent + 2.
                sub = [(ind + 2, rest)] + lines[j + 1:]
                value, k = parse_map(sub, 0, ind + 2)
                items.append(value)
                j = j + k
            else:
                items.append(scalar(rest))
                j += 1
            end = j
        return items, end
    return parse_map(lines, j, indent)


def parse_map(lines, i, indent):
    out = {}
    j = end = i
    while j < len(lines):
        ind, s = lines[j]
        if not s or s.startswith("#"):
            j += 1
            continue
        if ind < indent:
            break
        key, _, rest = s.partition(":")
        if rest.strip():
            out[key] = scalar(rest)
            j += 1
        else:
            value, j = parse_block(lines, j + 1, ind + 1)
            out[key] = value
        end = j
    # Comments after the block belong to what follows it.
    return out, end


def parse_nodes(lines, i, indent, prefix):
    """The documented tree: Nodes with their descriptions, for the table and the schema."""
    nodes, doc, meta = [], [], {}
    j = i
    while j < len(lines):
        ind, s = lines[j]
        if not s:
            doc, meta = [], {}
            j += 1
            continue
        if s.startswith("#"):
            if ind < indent:
                j += 1
                continue
            body = s[1:].strip()
            if body.startswith("-- "):
                doc, meta = [body[3:]], {}
            elif body.startswith("@default -- "):
                meta["default"] = body[len("@default -- "):]
            elif body.startswith("@type "):
                meta["type"] = body[len("@type "):].split(",")
            elif doc:
                doc.append(body)
            j += 1
            continue
        if ind < indent:
            break
        key, _, rest = s.partition(":")
        node = Node(prefix + key, " ".join(doc), meta)
        doc, meta = [], {}
        if rest.strip():
            node.value = scalar(rest)
            j += 1
        elif node.doc:
            node.value, j = parse_block(lines, j + 1, ind + 1)
        else:
            node.children, j = parse_nodes(lines, j + 1, ind + 1, node.key + ".")
        nodes.append(node)
    return nodes, j


def rows(nodes):
    for node in nodes:
        if node.children:
            yield from rows(node.children)
        else:
            yield node


def json_type(value):
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return None


def schema_of(nodes):
    props = {}
    for node in nodes:
        name = node.key.rsplit(".", 1)[-1]
        if node.children:
            props[name] = schema_of(node.children)
        else:
            types = node.meta.get("type") or ([json_type(node.value)] if json_type(node.value) else [])
            leaf = {"description": node.doc}
            if types:
                leaf["type"] = types[0] if len(types) == 1 else types
            props[name] = leaf
    return {"type": "object", "additionalProperties": False, "properties": props}


def schema(nodes):
    root = schema_of(nodes)
    root["$schema"] = "https://json-schema.org/draft-07/schema#"
    for key in RENAMED:
        root["properties"].setdefault(key, {"description": "Renamed; refused by the chart with the new name."})
    for key in RENAMED_WEBHOOK:
        root["properties"]["webhook"]["properties"].setdefault(
            key, {"description": "Renamed; refused by the chart with the new name."}
        )
    # v1's string form of the webhook selectors, refused by the chart with the map form to use.
    for key in ("namespaceSelector", "objectSelector"):
        root["properties"]["webhook"]["properties"][key]["type"] = ["object", "string"]
    return json.dumps(root, indent=2, sort_keys=False) + "\n"


def cell(text):
    return text.replace("|", "\\|")


def table(nodes):
    out = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for node in rows(nodes):
        types = node.meta.get("type") or [json_type(node.value) or "null"]
        if "default" in node.meta:
            default = node.meta["default"]
        else:
            default = "`" + json.dumps(node.value, separators=(",", ":")) + "`"
        out.append(f"| `{node.key}` | {'/'.join(types)} | {cell(default)} | {cell(node.doc)} |")
    return "\n".join(out) + "\n"


def main():
    check = sys.argv[1:] == ["--check"]
    if sys.argv[1:] not in ([], ["--check"]):
        print(__doc__, file=sys.stderr)
        return 2
    nodes, _ = parse_nodes(lines_of((HERE / "values.yaml").read_text()), 0, 0, "")
    readme_path, schema_path = HERE / "README.md", HERE / "values.schema.json"
    readme = readme_path.read_text()
    if START not in readme or END not in readme:
        print(f"{readme_path}: no {START} ... {END} markers", file=sys.stderr)
        return 1
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    new_readme = f"{head}{START}\n{table(nodes)}{END}{tail}"
    new_schema = schema(nodes)
    stale = [p.name for p, new in ((readme_path, new_readme), (schema_path, new_schema))
             if not p.exists() or p.read_text() != new]
    if check:
        if stale:
            print(f"stale: {', '.join(stale)}; run charts/spark-operator/gen-values-table.py", file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(new_readme)
    schema_path.write_text(new_schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
