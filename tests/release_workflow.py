"""`.github/workflows/release.yml` as data: its jobs, their steps, and which of them can
run here.

GitHub runs a `run:` step as a file given to `bash --noprofile --norc -eo pipefail`
(the workflow's default shell is bash), with the job's and the step's `env:` after
expanding their `${{ }}` expressions; a step gives outputs to the next ones by writing
NAME=value lines to the file named by GITHUB_OUTPUT. The
steps that need no registry, no credentials and no change to the machine are LOCAL;
the others are REMOTE. Every run step is one or the other, so a new step is placed by
whoever adds it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = REPO / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yml"
SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail")

LOCAL = frozenset(
    {
        "The tag is the package's version",
        "The locks are up to date",
        "Build",
        "Checksums",
        "The registry's host",
    }
)
# apt-get installs (the tests need the tools already there), then the registry and GitHub.
REMOTE = frozenset({"Tools", "Skopeo", "Publish and sign", "GitHub release"})

_EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass(frozen=True)
class Step:
    job: str
    id: str
    name: str
    uses: str  # "owner/name@ref", or "" for a run step
    run: str
    env: tuple[tuple[str, str], ...]


def load(path: Path = RELEASE) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text())
    assert isinstance(document, dict), path
    return document


def steps(workflow: dict[str, Any], job: str) -> list[Step]:
    return [
        Step(
            job,
            str(s.get("id", "")),
            str(s.get("name", "")),
            str(s.get("uses", "")),
            str(s.get("run", "")),
            tuple((str(k), str(v)) for k, v in s.get("env", {}).items()),
        )
        for s in workflow["jobs"][job]["steps"]
    ]


def job_order(workflow: dict[str, Any]) -> list[str]:
    """The jobs, each after those it `needs`."""
    done: list[str] = []
    jobs = workflow["jobs"]
    while len(done) < len(jobs):
        ready = [j for j in jobs if j not in done and set(_needs(jobs[j])) <= set(done)]
        assert ready, f"a cycle among {set(jobs) - set(done)}"
        done += ready
    return done


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def expand(text: str, context: dict[str, str]) -> str:
    """`text` with each `${{ name }}` replaced by context[name] (KeyError: not given)."""
    return _EXPRESSION.sub(lambda m: context[m.group(1)], text)


def has_expression(text: str) -> bool:
    return _EXPRESSION.search(text) is not None


def read_assignments(path: Path) -> dict[str, str]:
    """The NAME=value lines a step wrote to GITHUB_OUTPUT."""
    found = {}
    for line in path.read_text().splitlines():
        assert "<<" not in line, f"multi-line values are not read here: {line}"
        name, _, value = line.partition("=")
        found[name] = value
    return found
