"""Hostile and careless inputs: each is a correct rendering or clear errors (exit 2, `file:line: key path: what
was expected`), never a traceback, an internal error, a hang, a file read outside its folder or injected
Dockerfile syntax.

The corpus lives in tests/unit/hostile/ (its .gitattributes keeps every byte as written):
  matrices/*.toml   one case per file. `# expect:` lines are substrings of the errors, `# errors: N` their
                    number (1 unless said), `# absent:` what must not be said (a key the user never wrote).
                    matrices/parents/ holds files that cases extend.
  valid/*.toml      legitimate inputs written oddly (a byte-order mark, CRLF, tabs): they render exactly as
                    their plain form; `# expect-pair: KEY ID ID` names a pair the plan must hold.
  templates/*/      a matrix.toml with `# expect:` lines and its team template folder t/; run through render.
What cannot be a file in a repository (FIFOs, devices, a 20 MB file, links out of the tree) is made here, and
so is every control character in every string field (a cross product too large to keep as files).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from buildkit.app.targets import Choices, select_targets
from buildkit.errors import UserError
from testkit import hosts
from testkit.bounds import hang_guard

HOSTILE = Path(__file__).parent / "hostile"
MATRICES = sorted((HOSTILE / "matrices").glob("*.toml"))
VALID = sorted((HOSTILE / "valid").glob("*.toml"))
TEMPLATE_CASES = sorted(path for path in (HOSTILE / "templates").iterdir() if path.is_dir())
REPO = Path(__file__).resolve().parent.parent.parent
INCLUDE_ONE = 'include = [{ torch = "2.14.1", python = "3.12", flavor = "runtime" }]\n'


def directives(path: Path, name: str) -> list[str]:
    text = path.read_bytes().decode("utf-8", errors="replace").lstrip("\ufeff")
    return [line.split(f"# {name}:", 1)[1].strip() for line in text.splitlines() if line.startswith(f"# {name}:")]


def assert_clear_errors(result, expected=(), count=1, absent=()) -> None:
    """Exit 2, nothing on stdout, `count` lines on stderr each starting "error: ", no traceback or internal error."""
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.code == 2, (result.code, result.out[-2000:], result.err[-2000:])
    assert result.out == ""
    lines = result.err.splitlines()
    assert all(line.startswith("error: ") for line in lines), result.err
    assert len(lines) == count, result.err
    for text in expected:
        assert text in result.err, f"missing {text!r} in:\n{result.err}"
    for text in absent:
        assert text not in result.err, f"{text!r} should not be said:\n{result.err}"


def files_below(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def toml_string(value: str) -> str:
    """A TOML basic string holding exactly `value` (control characters escaped, the rest as written)."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return '"' + "".join(escapes.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c) for c in value) + '"'


# --- the matrix corpus ---------------------------------------------------------------------------------------


def test_corpus_covers_the_classes():
    assert len(MATRICES) >= 70 and len(VALID) >= 4 and len(TEMPLATE_CASES) >= 15
    assert all(directives(path, "expect") for path in [*MATRICES, *(case / "matrix.toml" for case in TEMPLATE_CASES)])


@pytest.mark.parametrize("path", MATRICES, ids=lambda p: p.stem)
def test_hostile_matrix_is_refused_clearly(cli, path, monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)  # messages name files relative to the working folder
    expected = dict(expected=directives(path, "expect"), absent=directives(path, "absent"), count=int((directives(path, "errors") or ["1"])[0]))
    assert_clear_errors(cli("matrix", "validate", "--matrix", path), **expected)
    assert_clear_errors(cli("render", "--matrix", path, "--out", tmp_path / "dist"), **expected)
    assert not (tmp_path / "dist").exists()


# --- legitimate inputs written oddly ------------------------------------------------------------------------


def plain(data: bytes) -> bytes:
    """The same matrix as an editor without a byte-order mark, CRLF or tabs would write it."""
    return data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\t", b" ")


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.stem)
def test_legitimate_input_renders_like_its_plain_form(cli, path, tmp_path):
    reference = tmp_path / "plain.toml"
    reference.write_bytes(plain(path.read_bytes()))
    odd = cli("render", "--matrix", path, "--out", tmp_path / "odd")
    assert odd.code == 0, odd.err
    assert "error" not in odd.err and "pair" not in odd.err  # no complaint, not even about a pair
    expected = cli("render", "--matrix", reference, "--out", tmp_path / "plain")
    assert expected.code == 0, expected.err
    rendered = files_below(tmp_path / "odd")
    assert any(name.endswith("Dockerfile") for name in rendered)
    assert rendered == files_below(tmp_path / "plain")
    plan = json.loads(rendered["plan.json"])
    for pair in directives(path, "expect-pair"):
        key, *members = pair.split()
        assert sorted(t["id"] for t in plan if t["pair"] == key) == sorted(members), plan


def test_crlf_matrix_reports_lines_as_an_editor_shows_them(cli, tmp_path):
    path = tmp_path / "m.toml"
    path.write_bytes(b'extends = "default"\r\n\r\nregistry = "ghcr.io\\n"\r\n')
    assert_clear_errors(cli("matrix", "validate", "--matrix", path), ["m.toml:3: registry: expected a registry host"])


def test_bom_matrix_reports_lines_as_an_editor_shows_them(cli, tmp_path):
    path = tmp_path / "m.toml"
    path.write_bytes(b'\xef\xbb\xbfextends = "default"\nregistry = "ghcr.io\\n"\n')
    assert_clear_errors(cli("matrix", "validate", "--matrix", path), ["m.toml:2: registry: expected a registry host"])


# --- every control character in every string field ------------------------------------------------------------

# (key path the error names, TOML setting the field to {v}); each line after `extends` is the field's own.
FIELDS = [
    ("registry", "registry = {v}", "ghcr.io"),
    ("repository", "repository = {v}", "team/pytorch"),
    ("tag_prefix", "tag_prefix = {v}", "team-"),
    ("source", "source = {v}", "https://github.com/team/images"),
    ("wheel_index", "wheel_index = {v}", "https://download.pytorch.org/whl"),
    ("runtime_base", "runtime_base = {v}", "python:{python}-slim-bookworm"),
    ("source_runtime_base", "source_runtime_base = {v}", "python:{python}-slim-trixie"),
    ("template_dir", "template_dir = {v}", "."),
    ("user.name", "user = {{ name = {v}, uid = 1000 }}", "builder"),
    ("python[0]", "python = [{v}]", "3.12"),
    ("flavors[0]", "flavors = [{v}]", "runtime"),
    ("companions[0]", "companions = [{v}]", "torchvision"),
    ("packages[0]", "packages = [{v}]", "numpy>=2"),
    ("os_packages[0]", "os_packages = [{v}]", "libnuma1"),
    ("archs.cuda[0]", "archs = {{ cuda = [{v}] }}", "9.0"),
    ("archs.rocm[0]", "archs = {{ rocm = [{v}] }}", "gfx942"),
    ("channel", "channel = {v}", "release"),
    ("include[0].torch", "include = [{{ torch = {v} }}]", "2.14.*"),
    ("exclude[0].flavor", "exclude = [{{ flavor = {v} }}]", "devel"),
    ("torch[0].version", "[[torch]]\nversion = {v}", "2.14.1"),
    ("torch[0].cuda[0]", '[[torch]]\nversion = "2.14.1"\ncuda = [{v}]', "13.0"),
    ("torch[0].rocm[0]", '[[torch]]\nversion = "2.14.1"\nrocm = [{v}]', "7.2"),
    ("torch[0].pair.cuda", '[[torch]]\nversion = "2.14.1"\npair = {{ cuda = {v} }}', "13.0"),
    ("torch[0].pair.rocm", '[[torch]]\nversion = "2.14.1"\npair = {{ rocm = {v} }}', "7.2"),
    ("torch[0].python[0]", '[[torch]]\nversion = "2.14.1"\npython = [{v}]', "3.12"),
    ("torch[0].channel", '[[torch]]\nversion = "2.14.1"\nchannel = {v}', "test"),
    ("torch[0].packages[0]", '[[torch]]\nversion = "2.14.1"\npackages = [{v}]', "einops==0.8.1"),
    ("compat.torch.2.14.python[3]", '[compat.torch."2.14"]\npython = ["3.10", "3.11", "3.13", {v}]', "3.12"),
    ("compat.torch.2.14.cuda[2]", '[compat.torch."2.14"]\ncuda = ["12.6", "13.2", {v}]', "13.0"),
    ("compat.torch.2.14.rocm[1]", '[compat.torch."2.14"]\nrocm = ["7.2", {v}]', "7.14"),
    ("compat.torch.2.14.torchvision", '[compat.torch."2.14"]\ntorchvision = {v}', "0.29"),
    ("compat.torch.2.14.releases[0]", '[compat.torch."2.14"]\nreleases = [{v}]', "2.14.1"),
    ("compat.cuda.13.0.archs[0]", '[compat.cuda."13.0"]\narchs = [{v}]', "9.0"),
    ("compat.cuda.13.0.devel_base", '[compat.cuda."13.0"]\ndevel_base = {v}', "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04"),
    ("compat.cuda.13.0.driver_min", '[compat.cuda."13.0"]\ndriver_min = {v}', "580.65.06"),
    ("compat.cuda.13.0.driver_toolkit", '[compat.cuda."13.0"]\ndriver_toolkit = {v}', "580.95.05"),
    ("compat.cuda.13.0.platforms[0]", '[compat.cuda."13.0"]\nplatforms = [{v}]', "linux/amd64"),
    ("compat.cuda.13.0.unconfirmed[0]", '[compat.cuda."13.0"]\nunconfirmed = [{v}]', "archs"),
    ("compat.torch.2.14.sources[0]", '[compat.torch."2.14"]\nsources = [{v}]', "release-md"),
    ("compat.rocm.7.2.driver_min", '[compat.rocm."7.2"]\ndriver_min = {v}', "6.10.5"),
    ("compat.rocm.7.2.archs[0]", '[compat.rocm."7.2"]\narchs = [{v}]', "gfx942"),
    ("compat.rocm.7.2.devel_base", '[compat.rocm."7.2"]\ndevel_base = {v}', "rocm/dev-ubuntu-24.04:7.2.1-complete"),
    ("compat.wheel_index.url", "[compat.wheel_index]\nurl = {v}", "https://download.pytorch.org/whl"),
    ("compat.wheel_index.channels.release", "[compat.wheel_index.channels]\nrelease = {v}", ""),
    ("compat.wheel_index.channels.test", "[compat.wheel_index.channels]\ntest = {v}", "test/"),
    ("compat.wheel_index.channels.nightly", "[compat.wheel_index.channels]\nnightly = {v}", "nightly/"),
    ("compat.archs.cuda[0]", "[compat.archs]\ncuda = [{v}]", "9.0"),
    ("compat.gfx.gfx1250.family", "[compat.gfx.gfx1250]\nfamily = {v}", "RDNA 4"),
    ("compat.gfx.gfx1250.products[0]", "[compat.gfx.gfx1250]\nproducts = [{v}]", "Radeon AI PRO R9700"),
    ("compat.gfx.gfx1250.sdk_rocm[0]", "[compat.gfx.gfx1250]\nsdk_rocm = [{v}]", "7.14"),
    ("compat.cuda.13.0.arm64_archs[0]", '[compat.cuda."13.0"]\narm64_archs = [{v}]', "9.0"),
    ("compat.torch.2.14.amd64_only[0]", '[compat.torch."2.14"]\namd64_only = [{v}]', "cuda 13.2"),
    ("compat.os_python.ubuntu24.04", '[compat.os_python]\n"ubuntu24.04" = {v}', "3.12"),
    # keys that name versions are values too: they reach tags, URLs and lookups
    ("compat.cuda.", '[compat.cuda.{v}]\narchs = ["9.0"]', "13.0"),
    ("compat.torch.", '[compat.torch.{v}]\npython = ["3.10", "3.11", "3.12", "3.13"]', "2.14"),
    ("compat.os_python.", '[compat.os_python]\n{v} = "3.12"', "ubuntu24.04"),
    ("compat.gfx.", '[compat.gfx.{v}]\nfamily = "RDNA 4"', "gfx1250"),
]
# Line ends and separators Python's `$`, splitlines() or a Dockerfile treat as breaks, invisible characters,
# and a backslash (at the end of a Dockerfile line it joins the next one).
CONTROL = {
    "LF": "\n",
    "CRLF": "\r\n",
    "CR": "\r",
    "NUL": "\0",
    "TAB": "\t",
    "VT": "\v",
    "ESC": "\x1b",
    "NEL": "\u0085",
    "LS": "\u2028",
    "PS": "\u2029",
    "ZWSP": "\u200b",
    "BOM": "\ufeff",
    "BACKSLASH": "\\",
}


def problems_of(path: Path) -> list[str]:
    """The error lines `buildkit matrix validate` prints, through the library (the CLI costs 30 ms a run in
    argparse alone, and this cross product has hundreds); any other exception fails the test."""
    try:
        select_targets(Choices(matrix=path))
    except UserError as error:
        return [f"error: {problem}" for problem in error.problems]
    return []


@pytest.mark.parametrize("key,setting,valid", FIELDS, ids=[f[0] for f in FIELDS])
def test_control_character_in_any_string_field_is_refused(tmp_path, key, setting, valid):
    path = tmp_path / "m.toml"
    line = 2 + setting.split("\n").index(next(part for part in setting.split("\n") if "{v}" in part))
    located = f"m.toml:{line}: {key}" if not key.endswith(".") else f": {key}"
    wrong = {}
    for name, char in CONTROL.items():
        path.write_text('extends = "default"\n' + setting.format(v=toml_string(valid + char)) + "\n", encoding="utf-8")
        problems = problems_of(path)
        # one problem, located, on one line: the value, whatever its characters, is shown escaped
        if len(problems) != 1 or located not in problems[0] or not problems[0].isprintable():
            wrong[name] = problems
    assert wrong == {}


@pytest.mark.slow
def test_fields_table_values_are_valid(tmp_path):
    """The cross product above proves something only if each field's plain value is accepted."""
    refused = {}
    for key, setting, valid in FIELDS:
        path = tmp_path / "m.toml"
        path.write_text('extends = "default"\n' + setting.format(v=toml_string(valid)) + "\n", encoding="utf-8")
        problems = problems_of(path)
        if problems:
            refused[key] = problems
    assert refused == {}


# --- files that are not files ------------------------------------------------------------------------------------


def run_bounded(cli, *args):
    """The CLI under a hang guard: a read that blocks fails the test instead of hanging the suite."""
    return hang_guard(lambda: cli(*args), f"buildkit {' '.join(map(str, args))}")


def test_matrix_that_is_a_fifo_does_not_hang(cli, tmp_path):
    os.mkfifo(tmp_path / "m.toml")
    assert_clear_errors(run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"), ["m.toml: is a FIFO"])


def test_extends_a_fifo_does_not_hang(cli, tmp_path):
    os.mkfifo(tmp_path / "base.toml")
    (tmp_path / "m.toml").write_text('extends = "base.toml"\n')
    assert_clear_errors(
        run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"),
        ["m.toml:1: extends: extends 'base.toml': is a FIFO (named pipe), not a regular file"],
    )


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null"], ids=["dev_zero", "dev_null"])
def test_matrix_link_to_a_device_is_not_read(cli, tmp_path, target):
    os.symlink(target, tmp_path / "m.toml")
    result = run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml")
    assert_clear_errors(result, [f"{Path(target).resolve()}: is a device, not a regular file"])


def test_matrix_that_is_a_loop_of_links(cli, tmp_path):
    os.symlink("m.toml", tmp_path / "m.toml")
    assert_clear_errors(
        run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"),
        [f"error: {tmp_path / 'm.toml'}: is a loop of symbolic links; pass --matrix FILE"],
    )


def test_extends_into_a_loop_of_links(cli, tmp_path):
    os.symlink("b.toml", tmp_path / "a.toml")
    os.symlink("a.toml", tmp_path / "b.toml")
    (tmp_path / "m.toml").write_text('extends = "a.toml"\n')
    assert_clear_errors(
        run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"),
        ["m.toml:1: extends: extends 'a.toml': is a loop of symbolic links; expected a matrix file"],
    )


def test_template_dir_that_is_a_loop_of_links(cli, tmp_path):
    os.symlink("t", tmp_path / "t")
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    assert_clear_errors(run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"), ["m.toml:2: template_dir: template_dir 't' is not a folder"])


def test_matrix_that_is_a_folder(cli, tmp_path):
    assert_clear_errors(cli("matrix", "validate", "--matrix", tmp_path), [": is a folder, not a file"])


def test_twenty_megabyte_matrix_is_refused_unread(cli, tmp_path):
    path = tmp_path / "m.toml"
    with path.open("w") as handle:
        handle.write('extends = "default"\n')
        handle.write(("# " + "x" * 1022 + "\n") * 20 * 1024)
    assert_clear_errors(cli("matrix", "validate", "--matrix", path), ["m.toml: is larger than 16 MB (20 MB)"])


def test_extends_chain_through_a_link_to_a_device(cli, tmp_path):
    os.symlink("/dev/zero", tmp_path / "base.toml")
    (tmp_path / "m.toml").write_text('extends = "base.toml"\n')
    assert_clear_errors(
        run_bounded(cli, "matrix", "validate", "--matrix", tmp_path / "m.toml"), ["extends: extends 'base.toml': is a device, not a regular file"]
    )


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("fifo", "matrix.lock: is a FIFO (named pipe), not a regular file; matrix.lock is the file `buildkit lock` writes"),
        ("folder", "matrix.lock: is a folder, not a file"),
        ("dev_zero", "matrix.lock: is a device, not a regular file"),
        ("newline_key", "matrix.lock: bases.python:3.12-slim\\n: expected an image reference with digest"),
        ("bases_string", 'matrix.lock: bases: expected [bases."REFERENCE"] tables, not a string'),
        ("bases_array", 'matrix.lock: bases: expected [bases."REFERENCE"] tables, not an array'),
        ("packages_integer", 'matrix.lock: packages: expected a [packages] table of "REQUIREMENT" = "VERSION", not an integer'),
        ("base_entry_date", "matrix.lock: bases.python:3.12-slim: expected an image reference with digest"),
    ],
)
def test_matrix_lock_that_is_not_a_lock(cli, tmp_path, kind, expected):
    (tmp_path / "m.toml").write_text('extends = "default"\n')
    lock = tmp_path / "matrix.lock"
    if kind == "fifo":
        os.mkfifo(lock)
    elif kind == "folder":
        lock.mkdir()
    elif kind == "dev_zero":
        os.symlink("/dev/zero", lock)
    elif kind == "newline_key":
        lock.write_text('schema = 1\n[bases]\n"python:3.12-slim\\n" = "sha256:00"\n')
    else:
        lock.write_text(
            "schema = 1\n"
            + {
                "bases_string": 'bases = "python"',
                "bases_array": "bases = [1, 2]",
                "packages_integer": "packages = 3",
                "base_entry_date": '[bases]\n"python:3.12-slim" = 2026-01-01',
            }[kind]
            + "\n"
        )
    assert_clear_errors(run_bounded(cli, "plan", "--matrix", tmp_path / "m.toml"), [expected])


# --- team templates ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", TEMPLATE_CASES, ids=lambda p: p.name)
def test_hostile_template_is_a_clear_error(cli, case, tmp_path, monkeypatch):
    monkeypatch.chdir(case)
    path = case / "matrix.toml"
    result = run_bounded(cli, "render", "--matrix", path, "--out", tmp_path / "dist")
    assert_clear_errors(result, directives(path, "expect"), int((directives(path, "errors") or ["1"])[0]))
    assert "uid=" not in result.err and "SECRET" not in result.err and "root:" not in result.err
    assert not (tmp_path / "dist").exists()


def team_folder(tmp_path: Path) -> Path:
    (tmp_path / "t").mkdir()
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n' + INCLUDE_ONE)
    return tmp_path / "m.toml"


@pytest.mark.parametrize("command", ["plan", "render"])
def test_template_linked_out_of_its_folder_is_refused(cli, tmp_path, command):
    path = team_folder(tmp_path)
    (tmp_path / "outside.Dockerfile.j2").write_text("FROM scratch\n")
    os.symlink(tmp_path / "outside.Dockerfile.j2", tmp_path / "t" / "runtime.Dockerfile.j2")
    extra = ["--out", tmp_path / "dist"] if command == "render" else []
    assert_clear_errors(cli(command, "--matrix", path, *extra), ["runtime.Dockerfile.j2: is a link leading out of its template folder"])


def test_template_linked_inside_its_folder_is_used(cli, tmp_path):
    path = team_folder(tmp_path)
    (tmp_path / "t" / "mine.Dockerfile.j2").write_text(
        '{% extends "_image.Dockerfile.j2" %}{% block base %}FROM {{ target.base_image }}\nLABEL team.mark="linked"\n{% endblock %}'
    )
    os.symlink("mine.Dockerfile.j2", tmp_path / "t" / "runtime.Dockerfile.j2")
    result = cli("render", "--matrix", path, "--out", tmp_path / "dist")
    assert result.code == 0, result.err
    assert any(b'team.mark="linked"' in data for data in files_below(tmp_path / "dist").values())


def test_template_folder_linked_outside_is_refused(cli, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (tmp_path / "team").mkdir()
    os.symlink(outside, tmp_path / "team" / "t")
    (tmp_path / "team" / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    assert_clear_errors(cli("matrix", "validate", "--matrix", tmp_path / "team" / "m.toml"), ["m.toml:2: template_dir: template_dir 't' leads outside"])


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "loop", "dangling", "huge"])
def test_template_that_is_not_a_readable_file(cli, tmp_path, kind):
    path = team_folder(tmp_path)
    template = tmp_path / "t" / "runtime.Dockerfile.j2"
    if kind == "fifo":
        os.mkfifo(template)
    elif kind == "dev_zero":
        os.symlink("/dev/zero", template)
    elif kind == "loop":
        os.symlink("runtime.Dockerfile.j2", template)
    elif kind == "dangling":
        os.symlink("gone.Dockerfile.j2", template)
    else:
        template.write_bytes(b"# " * (1024 * 1024))
    expected = {
        "fifo": "is a FIFO",
        "dev_zero": "is a link leading out of its template folder",
        "loop": "is a link that leads nowhere",
        "dangling": "is a link that leads nowhere",
        "huge": "is larger than 1 MB",
    }[kind]
    result = run_bounded(cli, "render", "--matrix", path, "--out", tmp_path / "dist")
    assert_clear_errors(result, [f"runtime.Dockerfile.j2: {expected}"])


@pytest.mark.slow
def test_sandbox_keeps_the_host_out_of_dockerfiles(cli, tmp_path):
    """The sandbox refuses the escape; nothing of the host (`id`'s output, /etc/passwd) reaches a file."""
    path = team_folder(tmp_path)
    (tmp_path / "t" / "runtime.Dockerfile.j2").write_text('{{ cycler.__init__.__globals__.os.popen("id").read() }}')
    result = cli("plan", "--format", "json", "--matrix", path)
    assert result.code == 0 and "uid=" not in result.out  # planning does not run a template
    # validation renders every template, as render does: both refuse the escape, once, and nothing runs
    assert_clear_errors(cli("matrix", "validate", "--matrix", path), ["sandbox forbids"], absent=["uid="])
    assert_clear_errors(cli("render", "--matrix", path, "--out", tmp_path / "dist"), ["sandbox forbids"], absent=["uid="])


# --- host trees ---------------------------------------------------------------------------------------------------


def amd_gfx(value: str):
    return lambda root: hosts.amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", value)])


def replaced(builder, relative: str, make):
    def build(root: Path) -> Path:
        builder(root)
        path = root / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        path.parent.mkdir(parents=True, exist_ok=True)
        make(path)
        return root

    return build


PCI_VENDOR = "sys/bus/pci/devices/0000:17:00.0/vendor"
KFD_NODE = "sys/class/kfd/kfd/topology/nodes/1/properties"
# (host tree, what a note must say); detect and doctor finish (exit 0) and say it, never a traceback or `gfx-`
HOSTS = {
    "gfx_abc": (amd_gfx("abc"), "gfx_target_version 'abc' is not a non-negative number"),
    "gfx_negative": (amd_gfx("-110000"), "gfx_target_version '-110000' is not a non-negative number"),
    "gfx_huge": (amd_gfx("9" * 5000), "is not a non-negative number"),
    "gfx_out_of_range": (amd_gfx("9999999"), "gfx_target_version 9999999 is not a gfx target version"),
    "gfx_float": (amd_gfx("11.0"), "gfx_target_version '11.0' is not a non-negative number"),
    "properties_garbage": (
        replaced(hosts.mi300x, KFD_NODE, lambda p: p.write_bytes(b"gfx_target_version 90402\nlocation_id zz\n\x00\xff garbage\n=====\ndomain\n")),
        "location_id 'zz' is not a non-negative number",
    ),
    "properties_folder": (replaced(hosts.mi300x, KFD_NODE, lambda p: p.mkdir()), "properties: is a folder, not a file; ignored"),
    "vendor_fifo": (replaced(hosts.h100, PCI_VENDOR, os.mkfifo), "vendor: is a FIFO (named pipe), not a regular file; ignored"),
    "vendor_dev_zero": (replaced(hosts.h100, PCI_VENDOR, lambda p: os.symlink("/dev/zero", p)), "vendor: is a device, not a regular file"),
    "nvidia_version_dev_zero": (
        replaced(hosts.h100, "proc/driver/nvidia/version", lambda p: os.symlink("/dev/zero", p)),
        "/proc/driver/nvidia/version: is a device",
    ),
    "amdgpu_version_fifo": (replaced(hosts.mi300x, "sys/module/amdgpu/version", os.mkfifo), "/sys/module/amdgpu/version: is a FIFO"),
    "amdgpu_version_garbage": (
        replaced(hosts.mi300x, "sys/module/amdgpu/version", lambda p: p.write_text("6.10\n$(reboot)\n")),
        "is not a driver version; ignored",
    ),
    "group_fifo": (replaced(hosts.h100, "etc/group", os.mkfifo), "/etc/group: is a FIFO"),
    "device_id_garbage": (
        replaced(hosts.h100, "sys/bus/pci/devices/0000:17:00.0/device", lambda p: p.write_bytes(b"\xff\x1b[31m\n")),
        "is not a PCI device id",
    ),
    "pci_name_garbage": (
        replaced(hosts.h100, "sys/bus/pci/devices/not a pci address\n/vendor", lambda p: p.write_text("0x10de\n")),
        "is not named as a PCI address",
    ),
    "huge_sysfs_file": (
        replaced(hosts.h100, "sys/bus/pci/devices/0000:17:00.0/class", lambda p: p.write_bytes(b"0" * (1024 * 1024))),
        "class: is larger than 64 KB",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("command", ["detect", "doctor"])
@pytest.mark.parametrize("name", HOSTS)
def test_host_tree_with_garbage_is_read_with_notes(cli, tmp_path, name, command):
    builder, note = HOSTS[name]
    root = builder(tmp_path / "host")
    for args in ([command, "--host-root", root], [command, "--host-root", root, "--json"]):
        result = run_bounded(cli, *args)
        assert "Traceback" not in result.err and "internal error" not in result.err, result.err
        assert result.code in (0, 1), result.err  # doctor exits 1 when something blocks
        assert note in result.out, result.out
        assert "gfx-" not in result.out and "\x1b" not in result.out
    notes = json.loads(run_bounded(cli, command, "--host-root", root, "--json").out)["notes"]
    assert any(note in line for line in notes)


def test_host_tree_without_garbage_has_no_notes(cli, tmp_path):
    root = hosts.mixed(tmp_path / "host")
    result = cli("detect", "--host-root", root, "--json")
    assert result.code == 0 and json.loads(result.out)["notes"] == []


@pytest.mark.parametrize("command", ["detect", "doctor", "run"])
@pytest.mark.parametrize(
    "kind,expected",
    [
        ("missing", "no such folder"),
        ("file", "is not a folder"),
        ("empty", "has no sys/ folder, so it is not a host's root"),
    ],
)
def test_host_root_that_is_not_a_host(cli, tmp_path, kind, expected, command):
    root = tmp_path / "host"
    if kind == "file":
        root.write_text("not a host\n")
    elif kind == "empty":
        root.mkdir()
    args = [command, "--host-root", root] + (["--print"] if command == "run" else [])
    assert_clear_errors(cli(*args), [f"--host-root: {root}: {expected}"], absent=["no GPU"])
