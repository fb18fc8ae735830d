"""Write the chart's README (deploy/helm/neuron-dra/README.md), which helm packages
and chart indexes show, from what the repository already keeps true: Chart.yaml's
description and the values table of docs/operators/install.md, which
tests/test_docs_tables.py checks against values.yaml.

    python scripts/chart_readme.py           # write it
    python scripts/chart_readme.py --check   # fail if it differs
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "deploy/helm/neuron-dra"
INSTALL = REPO / "docs/operators/install.md"
README = CHART / "README.md"


def values_table(install: str) -> str:
    """The table after "Every value:", its links to other pages written as the
    repository paths they lead to (the chart travels without the docs)."""
    match = re.search(r"^Every value:\n\n((?:\|.*\n)+)", install, re.MULTILINE)
    if match is None:
        raise SystemExit(f"{INSTALL}: no table after 'Every value:'")
    return re.sub(r"\[([^\]]+)\]\((?!https?://)([^)]+)\)", _path_of, match[1])


def _path_of(link: re.Match[str]) -> str:
    target = (INSTALL.parent / link[2].split("#")[0]).resolve().relative_to(REPO)
    return f"{link[1]} (`{target}`)"


def readme() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    kubernetes = chart["kubeVersion"].removeprefix(">=").removesuffix("-0")
    return f"""<!-- Written by scripts/chart_readme.py from Chart.yaml and the install page. -->
# {chart["name"]} {chart["version"]}

{" ".join(chart["description"].split())}

Kubernetes {kubernetes} or later. The image has no public registry: build it and
push it where the nodes pull from (`docs/operators/install.md` in the driver's
repository), then:

```sh
helm install neuron-dra oci://<registry>/charts/neuron-dra --version {chart["version"]} \\
  -n neuron-dra --create-namespace --set image.repository=<registry>/neuron-dra --wait
```

## Values

`values.schema.json` refuses unknown keys and bad values.

{values_table(INSTALL.read_text())}"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the README is stale")
    args = parser.parse_args(argv)
    text = readme()
    if args.check:
        if not README.is_file() or README.read_text() != text:
            stale = f"{README.relative_to(REPO)} is stale: run `python scripts/chart_readme.py`"
            print(stale, file=sys.stderr)
            return 1
        return 0
    README.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
