"""bench/provenance.py: a run records the full commit it ran and refuses a tree with
changes unless marked; and every kept result names a commit the repository holds, or
says it does not."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from consts import DRA_DRIVER_VERSION
from tests.bench_modules import load

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
KEPT = BENCH / "results"
PAGE = REPO / "docs" / "contributors" / "fleet-scale.md"


provenance = load("provenance")


def git(repo: Path, *argv: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *argv], cwd=repo, capture_output=True, text=True, check=True, env=env
    )
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository of one commit: bench/scale.py and an empty bench/results."""
    git(tmp_path, "init", "-q")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "scale.py").write_text("print('run')\n")
    (tmp_path / "bench" / "results" / ".keep").write_text("")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "one")
    return tmp_path


def test_a_clean_tree_records_its_full_commit_version_and_load(checkout: Path) -> None:
    record = provenance.at_start(checkout, allow_dirty=False)
    assert record["commit"] == git(checkout, "rev-parse", "HEAD")
    assert re.fullmatch(r"[0-9a-f]{40}", record["commit"]), record
    assert record["dirty"] is False
    assert record["driver_version"] == DRA_DRIVER_VERSION
    assert len(record["load_average"]["start"]) == 3
    assert "end" not in record["load_average"]
    done = provenance.at_end(record)
    assert done["load_average"]["start"] == record["load_average"]["start"]
    assert len(done["load_average"]["end"]) == 3


@pytest.mark.parametrize("change", ["changed", "untracked", "staged"])
def test_a_tree_with_changes_is_refused_unless_marked(checkout: Path, change: str) -> None:
    if change == "untracked":
        (checkout / "bench" / "new.py").write_text("")
    else:
        (checkout / "bench" / "scale.py").write_text("print('changed')\n")
    if change == "staged":
        git(checkout, "add", ".")
    with pytest.raises(provenance.DirtyTreeError, match="--allow-dirty") as refused:
        provenance.at_start(checkout, allow_dirty=False)
    assert f"({'bench/new.py' if change == 'untracked' else 'bench/scale.py'})" in str(
        refused.value
    )
    assert provenance.at_start(checkout, allow_dirty=True)["dirty"] is True


def test_a_result_written_to_bench_results_is_no_change(checkout: Path) -> None:
    (checkout / "bench" / "results" / "fleet-10.json").write_text("{}\n")
    assert provenance.at_start(checkout, allow_dirty=False)["dirty"] is False


def kept() -> list[Path]:
    return sorted(KEPT.glob("*.json"))


def exists(commit: str) -> bool:
    """Whether the repository holds `commit` (a run kept before "dirty" was recorded
    marks a tree with changes by a `+changes` suffix)."""
    name = commit.removesuffix("+changes") + "^{commit}"
    return subprocess.run(["git", "cat-file", "-e", name], cwd=REPO, check=False).returncode == 0


def pair(path: Path) -> Path | None:
    """The `before` run of a compare-NAME-after.json: an `after` run measures a change
    before it is committed, so its own commit may be one that was never kept."""
    match = re.fullmatch(r"(compare-.+)-after\.json", path.name)
    return path.with_name(f"{match[1]}-before.json") if match else None


@pytest.mark.parametrize("path", kept(), ids=lambda p: p.name)
@pytest.mark.usefixtures("git_history")
def test_a_kept_run_names_a_commit_of_the_repository(path: Path) -> None:
    result = json.loads(path.read_text())
    commit = result["run"]["commit"]
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?", commit), commit
    if (missing := result.get("commit_missing")) is not None:
        # Said, not hidden: the note explains, and the commit is really absent.
        assert isinstance(missing, str) and missing.strip(), missing
        assert not exists(commit), f"{path.name} is marked commit_missing but {commit} exists"
        return
    before = pair(path)
    if before is not None and not exists(commit):
        assert exists(json.loads(before.read_text())["run"]["commit"]), path.name
        return
    assert exists(commit), f"{path.name}: commit {commit} is not in the repository"


def test_the_page_says_which_figures_came_from_code_not_in_the_repository() -> None:
    marked = [p.name for p in kept() if "commit_missing" in json.loads(p.read_text())]
    paragraphs = PAGE.read_text().split("\n\n")
    for name in marked:
        assert any(
            f"`{name}`" in text and "not in the repository" in text for text in paragraphs
        ), name
