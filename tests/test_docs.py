"""The docs as a user meets them: every command in a code block runs in a test
(the offline ones here), and every relative link leads somewhere."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from neuron_dra_harness import realcluster
from tests import doc_commands
from tests.doc_commands import PAGES, REPO, DocCommand, commands, run_by, runner

NEURON_DRA = Path(sys.executable).with_name("neuron-dra")


def test_every_command_has_a_test_that_runs_it() -> None:
    found = commands()
    assert len(found) >= 40, found
    for command in found:
        test = runner(command)
        path, _, name = test.partition("::")
        assert f"def {name}(" in (REPO / path).read_text(), f"{command}: {test} is missing"


def test_a_command_no_test_runs_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("Text.\n\n```sh\ncurl -sf http://x \\\n  -o y   # fetch\n```\n")
    [command] = commands((page,))
    assert (command.line, command.text) == (4, "curl -sf http://x -o y")
    with pytest.raises(ValueError, match="no test runs 'curl'"):
        runner(command)


def test_the_make_targets_exist() -> None:
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.MULTILINE))
    for command in run_by(doc_commands.MAKE):
        assert command.argv[1] in targets, command


def test_the_offline_commands_run(tmp_path: Path) -> None:
    """As written, in a shell at the repository root; a node's own `/` is a fake trn2 node
    and /tmp is the test's."""
    fake = tmp_path / "node"
    subprocess.run(
        [str(NEURON_DRA), "fake-node", "--instance-type", "trn2.48xlarge", "--out", str(fake)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "NODE_NAME": "node-a", "PATH": f"{NEURON_DRA.parent}:{os.environ['PATH']}"}
    ran = run_by(doc_commands.OFFLINE)
    assert len(ran) >= 8, ran
    for command in ran:
        text = command.text.replace("--sysfs-root /", f"--sysfs-root {fake}")
        text = text.replace("/tmp/", f"{tmp_path}/").replace("--picture ", f"--picture {tmp_path}/")
        done = subprocess.run(
            ["bash", "-c", text], cwd=REPO, env=env, check=False, capture_output=True, text=True
        )
        assert done.returncode == 0, (str(command), done.stdout[-2000:], done.stderr[-2000:])
        assert done.stdout.strip() or command.argv[0] == "source", command  # loads, prints none


def test_the_image_build_command_is_the_one_the_real_node_runs() -> None:
    """Building the image takes root and a minute: neuron_dra_harness.images runs the script
    with the same two arguments (an archive, a reference) for the real-node tests."""
    images = (REPO / "harness/neuron_dra_harness/images.py").read_text()
    assert '["bash", str(BUILD_SCRIPT), str(partial), name]' in images
    for command in run_by(doc_commands.IMAGE):
        _, script, archive, reference = command.argv
        assert (script, archive.endswith(".tar")) == ("scripts/build-image.sh", True), command
        assert reference.count(":") == 1 and "/" in reference, command


def test_the_install_command_is_the_one_the_real_node_runs() -> None:
    """The real-node tests install the driver's image with the documented script command
    (neuron_dra_harness.realcluster, through run_install_script: kubectl on PATH)."""
    installs = [c.argv[1:] for c in run_by(doc_commands.SCRIPT) if not c.argv[1].startswith("-")]
    assert [args[1:] for args in installs if "--dry-run" not in args] == [
        list(realcluster.INSTALL_FLAGS)
    ], installs


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for the page's headings."""
    found = set()
    fenced = False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (heading := re.match(r"#+ (.*)", line)):
            text = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower())
            found.add(text.replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = unquote(target).partition("#")
        where = (page.parent / path).resolve() if path else page
        assert where.exists(), f"{page.relative_to(REPO)}: {target} does not exist"
        if anchor:
            assert anchor in anchors(where), f"{page.relative_to(REPO)}: no heading for {target}"


def test_no_page_is_left_out_of_the_index() -> None:
    index = (REPO / "docs/README.md").read_text()
    for page in (REPO / "docs").rglob("*.md"):
        if page.name != "README.md":
            assert str(page.relative_to(REPO / "docs")) in index, page


def test_the_commands_name_their_pages() -> None:
    # A sanity check of the reader: the README's first block is the two set-up commands.
    first: list[DocCommand] = commands((REPO / "README.md",))[:2]
    assert [c.text for c in first] == ["make demo", "make test"]


def test_the_e2e_layout_table_names_every_module() -> None:
    """tests/e2e/README.md's layout table has a row for each module of the end-to-end
    tests and of the harness, and none for a module that is gone."""
    text = (REPO / "tests/e2e/README.md").read_text()
    named = {
        name
        for cell in re.findall(r"^\| ([^|]+?) \|", text, re.MULTILINE)
        for name in re.findall(r"`([\w.]+\.py)`", cell)
    }
    modules = {
        p.name
        for folder in (REPO / "tests/e2e", REPO / "harness/neuron_dra_harness")
        for p in folder.glob("*.py")
        if p.name != "__init__.py"
    }
    assert sorted(modules - named) == []
    assert sorted(named - modules) == []


def test_the_prepare_path_names_each_function_where_it_starts() -> None:
    """docs/contributors/prepare-path.md: each `file:line` is where the function or
    class named just before it is defined, so the page moves with the code."""
    text = (REPO / "docs/contributors/prepare-path.md").read_text()
    found = re.findall(r"`([\w.]+)`[^`]{0,25}?`(neuron_dra/[\w/]+\.py):(\d+)`", text)
    assert len(found) >= 20, found
    for dotted, path, line in found:
        owner, _, name = dotted.rpartition(".")
        lines = (REPO / path).read_text().splitlines()
        source = lines[int(line) - 1]
        assert re.match(rf"\s*(async )?(def|class) {name}\b", source), (name, path, line, source)
        # `Class.method`: the method is that class's, not another's of the same name.
        if owner:
            assert _enclosing_class(lines, int(line) - 1) == owner, (dotted, path, line)


def _enclosing_class(lines: list[str], index: int) -> str | None:
    """The class whose body holds line `index`; None for a module-level definition."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for earlier in reversed(lines[:index]):
        stripped = earlier.lstrip()
        depth = len(earlier) - len(stripped)
        if stripped and depth < indent and not stripped.startswith(("#", ")", '"', "@")):
            found = re.match(r"class (\w+)", stripped)
            if depth == 0 or found:
                return found[1] if found else None
    return None


def _class_body(name: str) -> str:
    """The source of class `name` in the agent's package; it must be defined once."""
    bodies = []
    for path in (REPO / "neuron_dra").rglob("*.py"):
        text = path.read_text()
        for match in re.finditer(rf"^class {name}\b.*?(?=^\S|\Z)", text, re.MULTILINE | re.DOTALL):
            bodies.append(match[0])
    assert len(bodies) == 1, (name, len(bodies))
    return bodies[0]


def test_the_prepare_path_names_members_of_the_classes_it_names() -> None:
    """docs/contributors/prepare-path.md: each `Class.member` it names (locks included,
    which have no line) is a method or attribute of that class."""
    text = (REPO / "docs/contributors/prepare-path.md").read_text()
    named = set(re.findall(r"`([A-Z]\w+)\.(\w+)`", text))
    assert len(named) >= 10, named
    for owner, member in sorted(named):
        body = _class_body(owner)
        assert re.search(rf"(def {member}\b|self\.{member}\b|\b{member}[,)]?\s*[:=])", body), (
            owner,
            member,
        )


def test_the_readmes_first_screen_says_what_a_new_user_needs() -> None:
    """Before the set-up commands: where the driver has run, the AWS driver it replaces,
    that nothing is published, and the Go that `make demo` builds with."""
    text = (REPO / "README.md").read_text()
    screen = text[: text.index("```sh\nmake demo")]
    assert "not yet on Neuron hardware" in screen
    assert "`neuron-dra doctor`" in screen
    assert "`neuron.aws.com`" in screen and "docs/operators/migration.md" in screen
    assert "build the image" in screen and "docs/operators/install.md" in screen
    # `make demo` builds the k8s and etcd modules with the local Go (GOTOOLCHAIN=local).
    modules = (REPO / "harness/go/k8s/go.mod", REPO / "harness/go/etcd/go.mod")
    versions = [re.findall(r"^go (\d+)\.(\d+)", m.read_text(), re.MULTILINE)[0] for m in modules]
    needed = max((int(major), int(minor)) for major, minor in versions)
    assert f"Go {needed[0]}.{needed[1]} or later" in screen
