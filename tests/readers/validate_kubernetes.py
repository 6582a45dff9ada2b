"""Validates Kubernetes objects strictly against Kubernetes' own schemas of
each release asked for, as the kubernetes-validate package (PyPI) carries
them: one process for every object and release, where its command line
would start once per file and release.

Reads {"objects": [...], "releases": ["1.27.0", ..., "newest"]} as JSON on
stdin ("newest": the latest release the package carries); prints one JSON
line per object and release: {"index", "release",
"verdict": "ok" | "no-schema" | "invalid", "why"}. Exits 0 when it could
read them all (what is valid is the caller's to judge), 2 otherwise.
Run with the venv's python: python validate_kubernetes.py < input.json
"""

import json
import sys

import kubernetes_validate
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError, latest_version


def main() -> int:
    asked = json.load(sys.stdin)
    for release in asked["releases"]:
        if release == "newest":
            release = latest_version()
        for index, obj in enumerate(asked["objects"]):
            try:
                kubernetes_validate.validate(obj, release, strict=True)
                verdict, why = "ok", ""
            except SchemaNotFoundError as e:
                verdict, why = "no-schema", str(e)
            except ValidationError as e:
                verdict, why = "invalid", f"{e.message} at {'/'.join(str(p) for p in e.path)}"
            print(json.dumps({"index": index, "release": release, "verdict": verdict, "why": why}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
