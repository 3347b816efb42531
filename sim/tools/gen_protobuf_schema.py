#!/usr/bin/env python3
"""Generates sim/src/protobuf/messages.txt: the wire schema of the Kubernetes protobuf messages
kubectl's typed clients send (field numbers, wire types, JSON names).

Field numbers and types come from the k8s-pb crate (prost code generated from Kubernetes'
generated.proto), JSON names from k8s-openapi's serializers. Both must be in the cargo registry:
    cargo info k8s-pb@0.9.0 >/dev/null; python3 sim/tools/gen_protobuf_schema.py
"""
import glob, os, re, sys

REG = glob.glob(os.path.expanduser("~/.cargo/registry/src/*/"))[0]
PB = glob.glob(REG + "k8s-pb-0.9.*/src")[0] if glob.glob(REG + "k8s-pb-0.9.*/src") else None
if PB is None:
    for c in glob.glob(os.path.expanduser("~/.cargo/registry/cache/*/k8s-pb-0.9.*.crate")):
        os.system(f"mkdir -p /tmp/k8s-pb && tar xzf {c} -C /tmp/k8s-pb")
    PB = glob.glob("/tmp/k8s-pb/k8s-pb-0.9.*/src")[0]
OA = glob.glob(REG + "k8s-openapi-0.29.*/src/v1_33")[0]
OUT = os.path.join(os.path.dirname(__file__), "..", "src", "protobuf", "messages.txt")

SPECIAL = {
    "apimachinery.pkg.apis.meta.v1.Time": "time",
    "apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
    "apimachinery.pkg.util.intstr.IntOrString": "intorstring",
    "apimachinery.pkg.api.resource.Quantity": "quantity",
    "apimachinery.pkg.runtime.RawExtension": "raw",
    "apimachinery.pkg.apis.meta.v1.FieldsV1": "raw",
    "apimachinery.pkg.apis.meta.v1.Duration": "duration",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON": "raw",
}

ROOT_PACKAGES = [
    "api.core.v1", "api.apps.v1", "api.batch.v1", "api.rbac.v1", "api.policy.v1", "api.networking.v1",
    "api.coordination.v1", "api.scheduling.v1", "api.events.v1", "api.authentication.v1", "api.authorization.v1",
    "api.autoscaling.v1", "api.storage.v1", "api.admissionregistration.v1",
    "apiextensions_apiserver.pkg.apis.apiextensions.v1",
]
EXTRA_ROOTS = ["apimachinery.pkg.apis.meta.v1.DeleteOptions", "apimachinery.pkg.apis.meta.v1.Status"]

field_re = re.compile(r'#\[prost\(([^)]*)\)\]\s*pub (?:r#)?(\w+):\s*([^\n]+?),\s*$', re.M)


def resolve(module, ty):
    ty = ty.strip()
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<"):
        if ty.startswith(wrapper):
            ty = ty[len(wrapper):-1]
    if ty.startswith("::std::collections::BTreeMap<") or ty.startswith("::std::collections::HashMap<"):
        ty = ty.split(",", 1)[1].strip()[:-1]
    parts = ty.split("::")
    mod = list(module)
    while parts and parts[0] == "super":
        mod.pop()
        parts.pop(0)
    return ".".join(mod + parts)


messages = {}
for path in glob.glob(PB + "/**/mod.rs", recursive=True):
    module = os.path.relpath(os.path.dirname(path), PB).split(os.sep)
    text = open(path).read()
    for m in re.finditer(r'pub struct (\w+) \{\n(.*?)\n\}', text, re.S):
        name, body = m.group(1), m.group(2)
        fields = []
        for f in field_re.finditer(body):
            attr, rust, ty = f.groups()
            tag = int(re.search(r'tag\s*=\s*"(\d+)"', attr).group(1))
            repeated = "repeated" in attr
            if re.match(r"(btree_|hash_)?map\b", attr):
                kv = re.search(r'map\s*=\s*"([^"]*)"', attr).group(1).replace(" ", "")
                val = kv.split(",")[1]
                kind = {"string": "map_string", "bytes": "map_bytes", "message": "map_message"}.get(val, "map_" + val)
                ref = resolve(module, ty) if val == "message" else ""
                fields.append((tag, rust, kind, False, ref))
                continue
            kind = attr.split(",")[0].strip()
            if kind.startswith("bytes"):
                kind = "bytes"
            ref = resolve(module, ty) if kind in ("message", "enumeration") else ""
            fields.append((tag, rust, kind, repeated, ref))
        messages[".".join(module + [name])] = fields

# JSON names from k8s-openapi: (module, lowercase struct) -> names
json_names = {}
for path in glob.glob(OA + "/**/*.rs", recursive=True):
    text = open(path).read()
    sm = re.search(r'pub struct (\w+)', text)
    if not sm:
        continue
    module = os.path.relpath(os.path.dirname(path), OA).replace(os.sep, ".")
    names = re.findall(r'serialize_field\(&mut state, "([^"]+)"', text)
    # Written unconditionally (`&self.x`, not an Option's `value`): required in the API.
    required = set(re.findall(r'serialize_field\(&mut state, "([^"]+)", &self\.', text))
    json_names[(module, sm.group(1).lower())] = [(n, n in required) for n in names]


def json_name(msg, rust):
    module, struct = msg.rsplit(".", 1)
    flat = rust.replace("_", "").lower()
    for n, required in json_names.get((module, struct.lower()), []):
        if n.lower() == flat:
            return n + ("!" if required else "")
    head, *rest = rust.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


roots = [m for m in messages if m.rsplit(".", 1)[0] in ROOT_PACKAGES and any(f[1] == "metadata" for f in messages[m])]
roots += [r for r in EXTRA_ROOTS if r in messages]
seen, todo = set(), list(roots)
while todo:
    m = todo.pop()
    if m in seen or m in SPECIAL:
        continue
    seen.add(m)
    for _, _, kind, _, ref in messages.get(m, []):
        if ref and ref in messages:
            todo.append(ref)

with open(OUT, "w") as out:
    out.write("# Generated by sim/tools/gen_protobuf_schema.py from k8s-pb 0.9 and k8s-openapi 0.29 (v1_33). Do not edit.\n")
    out.write("# message <path>\n#   <tag> <jsonName>[!] <kind>[*] [<message path>]   (! = required in the API, * = repeated)\n")
    for name, special in sorted(SPECIAL.items()):
        out.write(f"special {name} {special}\n")
    for m in sorted(seen):
        out.write(f"message {m}\n")
        for tag, rust, kind, repeated, ref in sorted(messages[m]):
            ref = "" if kind == "enumeration" else ref
            out.write(f"  {tag} {json_name(m, rust)} {kind}{'*' if repeated else ''}{(' ' + ref) if ref else ''}\n")
print(f"{len(seen)} messages from {len(roots)} roots -> {OUT}", file=sys.stderr)
