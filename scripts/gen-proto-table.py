#!/usr/bin/env python3
"""Generates src/codec/protobuf/table.txt: the protobuf schema of the Kubernetes built-in types.

The table is derived from the upstream `generated.proto` files (field numbers and types) and the Go
structs beside them (`types*.go`: JSON names, `omitempty`, pointers and inlined structs, which the
.proto files do not record). Both the client's protobuf decoder and the fake API server read it.

Re-run it for the Kubernetes version that k8s-openapi's `latest` feature targets:

    git clone --depth 1 --branch <tag> https://github.com/kubernetes/api /tmp/k8s-api
    git clone --depth 1 --branch <tag> https://github.com/kubernetes/apimachinery /tmp/k8s-apimachinery
    python3 scripts/gen-proto-table.py /tmp/k8s-api /tmp/k8s-apimachinery > src/codec/protobuf/table.txt

(`<tag>` is `v0.<minor>.<patch>` of the Kubernetes release; the header of table.txt names the
commits it was generated from). The checkouts stay outside the repository; only the table is kept.
"""

import os
import re
import subprocess
import sys

# Messages with a JSON form of their own (custom MarshalJSON in Go): the table names them by a type
# keyword instead of a message.
SPECIAL = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "microtime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": "duration",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "intorstr",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "raw",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": "raw",
}
SCALARS = {"string": "string", "bool": "bool", "int32": "int", "int64": "int", "bytes": "bytes"}


def short_package(package):
    """k8s.io.api.apps.v1 -> apps.v1; k8s.io.apimachinery.pkg.apis.meta.v1 -> meta.v1."""
    for prefix in ("k8s.io.api.", "k8s.io.apimachinery.pkg.apis.", "k8s.io.apimachinery.pkg."):
        if package.startswith(prefix):
            return package[len(prefix):]
    raise SystemExit(f"unexpected package {package}")


def parse_proto(path):
    """Returns (package, {message: {"fields": [...], "wrapper": bool}})."""
    text = open(path, encoding="utf-8").read()
    package = re.search(r"^package ([\w.]+);", text, re.M).group(1)
    messages = {}
    comment = []
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            comment.append(stripped)
            continue
        m = re.match(r"message (\w+) \{", stripped)
        if m:
            current = {"fields": [], "nullable": any("+protobuf.nullable=true" in c for c in comment)}
            messages[m.group(1)] = current
        elif stripped == "}":
            current = None
        elif current is not None:
            m = re.match(r"(optional|repeated) ([\w.]+) (\w+) = (\d+);", stripped)
            if m:
                current["fields"].append((int(m.group(4)), m.group(3), m.group(1) == "repeated", None, m.group(2)))
            m = re.match(r"map<string, ([\w.]+)> (\w+) = (\d+);", stripped)
            if m:
                current["fields"].append((int(m.group(3)), m.group(2), False, "map", m.group(1)))
        if stripped and not stripped.startswith("//"):
            comment = []
    return package, messages


GO_FIELD = re.compile(r'^\s*(?:(\w+)\s+)?([\w.*\[\]]+)\s+`([^`]*)`')


def parse_go(directory):
    """{(struct, field number): (json name or "" for inline, pointer, omitempty)}."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".go") or name.endswith("_test.go") or name.startswith("zz_") or name.endswith(".pb.go"):
            continue
        struct = None
        for line in open(os.path.join(directory, name), encoding="utf-8"):
            m = re.match(r"^type (\w+) struct \{", line)
            if m:
                struct = m.group(1)
                continue
            if line.startswith("}"):
                struct = None
                continue
            if struct is None:
                continue
            m = GO_FIELD.match(line)
            if not m:
                continue
            tags = m.group(3)
            proto = re.search(r'protobuf:"\w+,(\d+),', tags)
            if not proto:
                continue
            json_tag = re.search(r'json:"([^"]*)"', tags)
            json_parts = json_tag.group(1).split(",") if json_tag else [""]
            json_name = json_parts[0]
            if json_tag is None:
                json_name = proto_name.group(1) if (proto_name := re.search(r'name=(\w+)', tags)) else ""
            if "inline" in json_parts[1:]:
                json_name = ""  # an embedded struct without a name: its fields join the parent's in JSON
            go_type = m.group(2)
            out[(struct, int(proto.group(1)))] = (json_name, go_type.startswith("*"), "omitempty" in json_parts[1:])
    return out


def git_commit(directory):
    try:
        return subprocess.run(["git", "-C", directory, "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    api, apimachinery = sys.argv[1], sys.argv[2]
    protos = []
    for root, base in ((api, api), (os.path.join(apimachinery, "pkg"), apimachinery)):
        for directory, _, files in sorted(os.walk(root)):
            if "generated.proto" in files and not re.search(r"testdata|/testing|testapigroup", directory):
                protos.append(directory)
    packages = {}  # short package -> (group or None, version, messages, go fields)
    for directory in sorted(protos):
        package, messages = parse_proto(os.path.join(directory, "generated.proto"))
        if not messages:
            continue
        group = None  # from `+groupName=` in doc.go, else `GroupName = "…"` in register.go
        for name, pattern in (("doc.go", r"^// \+groupName=(\S*)"), ("register.go", r'^\s*(?:const )?GroupName\s*=\s*"([^"]*)"')):
            path = os.path.join(directory, name)
            if group is None and os.path.exists(path):
                m = re.search(pattern, open(path, encoding="utf-8").read(), re.M)
                if m:
                    group = m.group(1)
        packages[short_package(package)] = (group, package, messages, parse_go(directory))

    wrappers = set()
    for short, (_, package, messages, _) in packages.items():
        for name, message in messages.items():
            fields = message["fields"]
            if message["nullable"] and len(fields) == 1 and fields[0][:3] == (1, "items", True):
                wrappers.add(f"{package}.{name}")

    def type_of(package, proto_type):
        if proto_type in SCALARS:
            return SCALARS[proto_type]
        full = proto_type[1:] if proto_type.startswith(".") else f"{package}.{proto_type}"
        if full in SPECIAL:
            return SPECIAL[full]
        owner, _, name = full.rpartition(".")
        if full in wrappers:
            inner = packages[short_package(owner)][2][name]["fields"][0][4]
            return f"<{type_of(owner, inner)}>"
        return f"{short_package(owner)}.{name}"

    lines = []
    missing = []
    for short, (group, package, messages, go) in sorted(packages.items()):
        if group is not None:
            version = short.rsplit(".", 1)[1]
            lines.append(f"@{short} {group + '/' if group else ''}{version}")
        for name, message in sorted(messages.items()):
            full = f"{package}.{name}"
            if full in SPECIAL or full in wrappers:
                continue
            parts = []
            for number, proto_name, repeated, kind, proto_type in message["fields"]:
                ty = type_of(package, proto_type)
                if kind == "map":
                    ty = "{" + ty + "}"
                elif repeated:
                    ty = f"[{ty}]"
                info = go.get((name, number))
                if info is None:
                    missing.append(f"{short}.{name}.{proto_name}")
                    info = (proto_name, False, True)
                json_name, pointer, omitempty = info
                if json_name == "-":
                    continue
                if ty in ("string", "int", "bool", "bytes") and not pointer and omitempty:
                    ty += "?"
                parts.append(f"{number} {json_name or '..'} {ty}")
            lines.append(f"{short}.{name}: " + ", ".join(parts))
    for m in missing:
        print(f"warning: no Go field for {m}; taken as omitempty", file=sys.stderr)
    print("# Generated by scripts/gen-proto-table.py; do not edit (re-run the script instead).")
    print(f"# kubernetes/api {git_commit(api)}")
    print(f"# kubernetes/apimachinery {git_commit(apimachinery)}")
    print("#")
    print("# `@package group/version`: the package of the kinds of an API group version.")
    print("# `package.Message: number jsonName type, ...`: one message. Types: string, bool, int (int32")
    print("# or int64), bytes, time, microtime, duration, quantity, intorstr, raw (bytes holding JSON),")
    print("# [T] repeated, {T} map from string, <T> a message holding `repeated T items = 1` that JSON")
    print("# shows as an array, or another message. `?` after a scalar: a zero value is left out (a")
    print("# Go field with `omitempty` that is not a pointer). A field named `..` is inlined into its")
    print("# parent, as Go's embedded structs are in JSON.")
    for line in lines:
        print(line)


if __name__ == "__main__":
    main()
