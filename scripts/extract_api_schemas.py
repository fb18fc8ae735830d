"""Write neuron_dra/tools/apischema/resource.k8s.io.json: the OpenAPI schemas of the
objects `neuron-dra lint` checks, as Kubernetes publishes them, for every version of
resource.k8s.io it reads.

    python scripts/extract_api_schemas.py            # from the Go module cache
    python scripts/extract_api_schemas.py --check    # exit 1 if the file differs

The source is the `api/openapi-spec/v3` of the newest supported release in the Go
module cache, where building it for the tests puts it. Descriptions are dropped;
everything a validator reads is kept.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

RELEASE = "v1.37.2"
VERSIONS = ("v1", "v1beta1", "v1beta2")
KINDS = ("ResourceClaim", "ResourceClaimTemplate", "DeviceClass")
OUT = Path(__file__).resolve().parents[1] / "neuron_dra/tools/apischema/resource.k8s.io.json"


def _spec_dir() -> Path:
    cache = subprocess.run(
        ["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return Path(cache) / f"k8s.io/kubernetes@{RELEASE}/api/openapi-spec/v3"


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[1]} if "$ref" in node else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def extract(spec_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"release": RELEASE, "versions": {}}
    for version in VERSIONS:
        doc = json.loads((spec_dir / f"apis__resource.k8s.io__{version}_openapi.json").read_text())
        schemas = doc["components"]["schemas"]
        roots = {kind: f"io.k8s.api.resource.{version}.{kind}" for kind in KINDS}
        keep: set[str] = set()
        todo = list(roots.values())
        while todo:
            name = todo.pop()
            if name not in keep:
                keep.add(name)
                todo += sorted(_refs(schemas[name]))
        out["versions"][version] = {
            "kinds": roots,
            "schemas": {name: _strip(schemas[name]) for name in sorted(keep)},
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = json.dumps(extract(_spec_dir()), indent=1, sort_keys=True) + "\n"
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT} is stale: run scripts/extract_api_schemas.py", file=sys.stderr)
            return 1
        print(f"{OUT.name} matches Kubernetes {RELEASE}")
        return 0
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
