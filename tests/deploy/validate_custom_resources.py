#!/usr/bin/env python3
"""Validates custom resources against the openAPIV3Schema of their CustomResourceDefinitions,
offline, the way the API server would with strict field validation.

    validate_custom_resources.py --crds DIR [--rest OUT.yaml] FILE...

Every YAML document in FILE... whose apiVersion and kind a CRD in DIR defines is validated
against that version's schema: types, required fields, enums, patterns, bounds, and unknown
fields (the API server prunes or, with `kubectl apply --validate=strict`, refuses them: a
misspelt field would otherwise vanish silently). The CRD schema is OpenAPI v3, close to JSON
Schema draft 4, with Kubernetes extensions, handled here:

  nullable: true                    null is accepted too
  x-kubernetes-int-or-string: true  an integer or a string
  x-kubernetes-preserve-unknown-fields: true   unknown fields allowed under it
  x-kubernetes-list-type: set | map | atomic   set: items unique; map: unique by the
                                    x-kubernetes-list-map-keys
  x-kubernetes-map-type             merge strategy only: nothing to check
  format: int32 | int64             within range (other formats are not checked)

Another extension (CEL x-kubernetes-validations, x-kubernetes-embedded-resource) makes it fail:
it would go unchecked. metadata is checked as the API server does for every object: a name
that is a DNS subdomain, labels and annotations of strings.

Documents of other kinds are an error, unless --rest is given: they are written there (for
kubernetes-validate, which knows the built-in kinds). Exit status 0 when all are valid, 1 if
not (each problem printed with its path), 2 on a usage error. Needs PyYAML and jsonschema.
"""

import argparse
import glob
import os
import re
import sys

import jsonschema
import yaml

HANDLED_EXTENSIONS = {
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


def python_regex(pattern):
    """A CRD pattern (Go's RE2 syntax) for Python's re. RE2 takes flags such as (?i) anywhere;
    Python only at the start. Flags right after a leading ^ mean the same at the start; flags
    elsewhere raise ValueError (they would apply to less of the pattern in RE2)."""
    m = re.match(r"(\^?)\(\?([ims]+)\)", pattern)
    if m:
        pattern = f"(?{m.group(2)}){m.group(1)}{pattern[m.end():]}"
    if re.search(r"(?<!^)\(\?[a-zA-Z]+\)", pattern):
        raise ValueError(f"pattern {pattern!r}: inline flags inside it are not translated")
    re.compile(pattern)
    return pattern


def strict(schema, path="openAPIV3Schema"):
    """The schema as JSON Schema: unknown fields refused where Kubernetes would prune them,
    nullable as a type. Raises ValueError on an extension this script cannot check."""
    if isinstance(schema, list):
        return [strict(s, f"{path}[{i}]") for i, s in enumerate(schema)]
    if not isinstance(schema, dict):
        return schema
    for key in schema:
        if key.startswith("x-kubernetes-") and key not in HANDLED_EXTENSIONS:
            raise ValueError(f"{path}: {key} is not checked by this script")
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: strict(v, f"{path}.{k}") for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = strict(value, f"{path}.{key}")
        elif key == "pattern":
            out[key] = python_regex(value)
        else:
            out[key] = value
    # metadata is the API server's own (ObjectMeta, check_metadata): the CRD says only object.
    if (out.get("type") == "object" and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
            and path != "openAPIV3Schema.metadata"):
        out["additionalProperties"] = False
    if out.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _int_or_string(validator, value, instance, schema):
    if value and (isinstance(instance, bool) or not isinstance(instance, (int, str))):
        yield jsonschema.ValidationError(f"{instance!r} is neither an integer nor a string")


def _list_type(validator, value, instance, schema):
    if not isinstance(instance, list):
        return
    if value == "set":
        seen = []
        for item in instance:
            if item in seen:
                yield jsonschema.ValidationError(f"{item!r} is listed twice (a set)")
            seen.append(item)
    elif value == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = set()
        for item in instance:
            key = tuple(repr(item.get(k)) if isinstance(item, dict) else None for k in keys)
            if key in seen:
                yield jsonschema.ValidationError(
                    f"two items have the same {', '.join(keys)}: {key} (a map list)")
            seen.add(key)


FORMATS = jsonschema.FormatChecker(())


@FORMATS.checks("int32")
def _int32(value):
    return not isinstance(value, int) or -2**31 <= value < 2**31


@FORMATS.checks("int64")
def _int64(value):
    return not isinstance(value, int) or -2**63 <= value < 2**63


Validator = jsonschema.validators.extend(jsonschema.Draft4Validator, {
    "x-kubernetes-int-or-string": _int_or_string,
    "x-kubernetes-list-type": _list_type,
})


def load_crds(directory):
    """{(group/version, kind): (crd file, Validator)} for every served version."""
    crds = {}
    paths = sorted(glob.glob(os.path.join(directory, "*.yaml")))
    if not paths:
        raise ValueError(f"no CRDs (*.yaml) in {directory}")
    for path in paths:
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                if not doc or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc["spec"]
                for version in spec["versions"]:
                    if not version.get("served", False):
                        continue
                    schema = strict(version["schema"]["openAPIV3Schema"])
                    Validator.check_schema(schema)
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    crds[key] = (os.path.basename(path),
                                 Validator(schema, format_checker=FORMATS))
    return crds


def check_metadata(doc):
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        return ["metadata: missing"]
    problems = []
    name = meta.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS_SUBDOMAIN.fullmatch(name):
        problems.append(f"metadata.name: {name!r} is not a DNS subdomain (RFC 1123)")
    for field in ("labels", "annotations"):
        for key, value in (meta.get(field) or {}).items():
            if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
                problems.append(f"metadata.{field}: key {key!r} is not a qualified name")
            if not isinstance(value, str):
                problems.append(f"metadata.{field}.{key}: {value!r} is not a string")
            elif field == "labels" and (len(value) > 63 or not LABEL_VALUE.fullmatch(value)):
                problems.append(f"metadata.labels.{key}: {value!r} is not a label value")
    return problems


def path_of(error):
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def problems_of(doc, crds):
    """Problems of one custom resource (sentences with their paths); None when no CRD defines
    its apiVersion and kind."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    if key not in crds:
        return None
    _, validator = crds[key]
    return check_metadata(doc) + [
        f"{path_of(e) or '.'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crds", required=True, help="folder of CustomResourceDefinitions")
    parser.add_argument("--rest", help="write documents no CRD defines here instead of failing")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    try:
        crds = load_crds(args.crds)
    except (ValueError, OSError, yaml.YAMLError) as e:
        print(f"  CRDs: {e}")
        return 2
    except jsonschema.SchemaError as e:
        print(f"  CRDs: a schema that is not valid JSON Schema at {list(e.absolute_path)}: "
              f"{e.message[:300]}")
        return 2
    failed = False
    rest = []
    for path in args.files:
        with open(path) as f:
            try:
                docs = [d for d in yaml.safe_load_all(f) if d]
            except yaml.YAMLError as e:
                print(f"  {path}: not YAML: {e}")
                failed = True
                continue
        for doc in docs:
            key = (doc.get("apiVersion"), doc.get("kind"))
            name = f"{key[1]} {(doc.get('metadata') or {}).get('name')}"
            problems = problems_of(doc, crds)
            if problems is None:
                if args.rest is None:
                    print(f"  {path}: {name}: no CRD in {args.crds} defines {key[0]} {key[1]}")
                    failed = True
                rest.append(doc)
                continue
            crd_file = crds[key][0]
            for problem in problems:
                print(f"  {path}: {name}: {problem}")
            if problems:
                failed = True
            else:
                print(f"  ok: {path}: {name} ({key[0]}) valid against {crd_file}")
    if args.rest is not None:
        with open(args.rest, "w") as f:
            yaml.safe_dump_all(rest, f, sort_keys=False)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
