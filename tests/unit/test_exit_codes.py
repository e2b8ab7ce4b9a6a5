"""Exit codes, command by command, as the README's table gives them: 0 success, 1 the work or the
environment failed, 2 a user error (one message, no traceback), 3 `compat check`'s difference.

The environment failures are real: the engine is a Docker socket that does not exist (the machine's own
engine is never touched), and every case runs the real command in-process through `main`.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from buildkit import cli as buildkit_cli
from buildkit.cli import options as cli_options
from buildkit.cli import targets as target_commands
from testkit import hosts
from testkit.bounds import hang_guard

REPO = Path(__file__).resolve().parents[2]
NO_ENGINE = "unix:///nonexistent/buildkit-test/docker.sock"
CUDA_TARGET = "2.14.1-cuda13.0-py3.12-runtime"
CUDA_IMAGE = f"ghcr.io/buildkit-images/pytorch:{CUDA_TARGET}"
ROCM_IMAGE = "ghcr.io/buildkit-images/pytorch:2.14.1-rocm7.2-py3.12-runtime"


@pytest.fixture
def trees(tmp_path):
    return {name: getattr(hosts, name)(tmp_path / name) for name in ("no_gpu", "h100", "mi300x")}


@pytest.fixture
def no_engine(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)


def _case(*words, code, says=""):
    return pytest.param(words, code, says, id=f"{code} " + " ".join(w for w in words if not w.startswith("{")))


# Each case: the command (with {tmp}, {no_gpu}, {h100}, {mi300x} filled in), its exit code, and a phrase of its message.
CASES = [
    _case("matrix", "validate", code=0, says="ok: 132 targets"),
    _case("matrix", "validate", "--matrix", "{tmp}/bad.toml", code=2, says="registry"),
    _case("matrix", "show", code=0),
    _case("matrix", "schema", code=0, says='"$schema"'),
    _case("matrix", "schema", "--markdown", code=0, says="| `registry` |"),
    _case("matrix", "show", "--matrix", "{tmp}/missing.toml", code=2, says="no such matrix file"),
    _case("plan", code=0),
    _case("plan", "--select", "nokey=x", code=2, says="expected KEY=GLOB"),
    _case("plan", "--format", "json", "--layers", "--select", f"id={CUDA_TARGET}", code=0, says='"shared_by"'),
    _case("plan", "--layers", code=2, says="add --format json"),
    _case("render", "--out", "{tmp}/dist", "--select", f"id={CUDA_TARGET}", code=0),
    _case("render", "--matrix", "{tmp}/bad.toml", code=2, says="registry"),
    _case("build", "--dry-run", "--select", f"id={CUDA_TARGET}", code=0, says=CUDA_TARGET),
    _case("build", "--select", "id=nothing-matches", code=2, says="id=nothing-matches leaves no target"),
    _case("build", "--format", "json", code=2, says="--format"),
    _case("bake", "--out", "{tmp}/bake", "--select", f"id={CUDA_TARGET}", code=0),
    _case("bake", "--pip-conf", "{tmp}/missing.conf", "--out", "{tmp}/bake", code=2, says="is not a file"),
    _case("lock", "--matrix", "{tmp}/bad.toml", code=2, says="registry"),
    _case("publish", "--date", "yesterday", code=2, says="expected YYYYMMDD"),
    _case("test", "--select", "id=nothing-matches", code=2, says="id=nothing-matches leaves no target"),
    _case("parity", "no-such-pair", code=2, says="is not a pair of this matrix"),
    # a host without a GPU is no failure for any of the three: images run on the CPU there
    _case("detect", "--host-root", "{no_gpu}", code=0, says="no GPU on this host"),
    _case("doctor", "--host-root", "{no_gpu}", code=0, says="ok: no GPU here, so images run on the CPU"),
    _case("run", "--print", "--host-root", "{no_gpu}", code=0, says="warning: this host has no GPU"),
    _case("run", "--print", "--host-root", "{h100}", code=0, says="--gpus all"),
    _case("run", CUDA_IMAGE, "--print", "--host-root", "{mi300x}", code=2, says="run refused: "),
    _case("doctor", "--host-root", "{h100}", code=0, says="nothing blocks"),
    _case("doctor", CUDA_IMAGE, "--host-root", "{mi300x}", code=1, says="blocked"),
    _case("hipify", "{tmp}/missing", code=2, says="is not a folder of CUDA sources"),
    _case("hipify", str(REPO / "tests/fixtures/rocm_ports/cub_alias"), "--out", "{tmp}/hip", code=1, says="CUB_WARP_THREADS"),
    _case("hipify", str(REPO / "tests/fixtures/rocm_ports/cub_alias"), "-D", "1BAD", code=2, says="expected NAME or NAME=VALUE"),
    _case("hipify", str(REPO / "tests/fixtures/rocm_ports/cub_alias"), "--keep-objects", "{tmp}/o", code=2, says="only applies to --compile-check"),
    _case("report", "--html", "{tmp}/site", "--select", f"id={CUDA_TARGET}", code=0, says="wrote 5 files"),
    _case("report", "--html", "{tmp}/site", "--from", "{tmp}/missing.json", code=2, says="no such file or folder"),
    _case("report", "--html", "{tmp}/site", "--from", "{tmp}/bad.toml", code=2, says="is not JSON"),
    _case("report", "--from", "{tmp}/report.json", code=2, says="--html"),
    _case("verify", CUDA_IMAGE, code=2, says="say whose signature counts"),
    _case("verify", CUDA_IMAGE, "--gpu-arch", "gfx942", code=2, says="--gpu-arch is now --tested-arch"),
    _case("compat", "check", "--index", "none", "--pypi", "none", "--layout-index", "amd-whl-next=none", code=2, says="every index is left out"),
    _case("compat", "check", "--layout-index", "amd-whl-next", code=2, says="expected LAYOUT=URL"),
    _case("compat", "check", "--layout-index", "nosuch=none", "--index", "none", "--pypi", "none", code=2, says="no ROCm layout nosuch"),
    _case("compat", "check", "--pypi", "http://127.0.0.1:9/simple", "--index", "none", "--layout-index", "amd-whl-next=none", code=1, says="cannot connect"),
    _case("completion", "bash", code=0, says="complete"),
    _case("completion", "tcsh", code=2, says="invalid choice"),
    _case("frobnicate", code=2, says="invalid choice"),
]


def _fill(words, tmp_path, trees):
    places = {"tmp": str(tmp_path), **{name: str(path) for name, path in trees.items()}}
    return [re.sub(r"\{(\w+)\}", lambda m: places[m.group(1)], word) for word in words]


@pytest.mark.parametrize("words, code, says", CASES)
def test_each_command_exits_as_the_readme_says(cli, tmp_path, trees, words, code, says):
    (tmp_path / "bad.toml").write_text('extends = "default"\nregistry = 5\n')
    result = cli(*_fill(words, tmp_path, trees))
    assert result.code == code, result.err
    assert says in result.out + result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    if code == 2:
        assert result.err.strip(), "a user error always says what is wrong"


@pytest.mark.parametrize(
    "words",
    [
        ("test", CUDA_IMAGE),
        ("parity", CUDA_IMAGE, ROCM_IMAGE),
        ("sbom", "--local", CUDA_IMAGE),
    ],
    ids=lambda words: " ".join(words[:2]),
)
def test_an_unreachable_engine_is_an_environment_failure(cli, tmp_path, trees, no_engine, words):
    """Exit 1, not 2: the input was fine, the engine is not there. One message names the address and the fix.
    (`build`, which first finds its builder through the docker CLI, is tested with a stand-in CLI in
    test_build_errors.py.)"""
    result = cli(*_fill(words, tmp_path, trees))
    assert result.code == 1, result.err
    assert result.err.count("error:") == 1 and f"cannot reach the Docker engine at {NO_ENGINE}" in result.err
    assert "no such file or directory" in result.err and "start it" in result.err and "Traceback" not in result.err


@pytest.mark.slow
def test_a_silent_engine_fails_within_the_connect_timeout(cli, monkeypatch):
    """An address that accepts and never answers (a stopped VM, a wrong DOCKER_HOST) is given up on in
    CONNECT_TIMEOUT seconds, not after the 300 s an image operation may take."""
    import socket

    from buildkit.adapters.engine import docker_sdk

    monkeypatch.setattr(docker_sdk, "CONNECT_TIMEOUT", 1)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        monkeypatch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{silent.getsockname()[1]}")
        result = hang_guard(lambda: cli("test", CUDA_IMAGE), "buildkit test against a silent engine")
    assert result.code == 1 and "no answer within 1 s" in result.err  # the connect timeout's message, not a later one


@pytest.mark.parametrize(
    "words",
    [
        ("plan", "--debug"),
        ("--debug", "plan"),
        ("matrix", "validate", "--debug"),
        ("matrix", "--debug", "validate"),
        ("compat", "check", "--debug", "--data", "{tmp}/x.toml"),
    ],
)
def test_debug_is_accepted_anywhere(cli, tmp_path, trees, words):
    result = cli(*_fill(words, tmp_path, trees))
    assert "unrecognized arguments" not in result.err and result.code in (0, 2), result.err


def test_debug_after_the_command_shows_the_traceback_of_an_internal_error(cli, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("planted bug")

    monkeypatch.setattr(target_commands, "select_targets", broken)
    quiet = cli("plan")
    assert quiet.code == 1 and "internal error" in quiet.err and "planted bug" in quiet.err
    with pytest.raises(RuntimeError, match="planted bug"):
        buildkit_cli.main(["plan", "--debug"])


def test_the_readme_table_is_the_codes_the_cli_returns():
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("**Exit codes.**") :]
    table = table[: table.index("\n\n", table.index("| code |"))]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, flags=re.M)}
    user_error = 2  # UserError.exit_code, and argparse's for a usage error
    returned = {value for name, value in vars(cli_options).items() if name.startswith("EXIT_")} | {user_error}
    assert documented == returned


def test_an_unreachable_registry_is_an_environment_failure(cli, tmp_path):
    """`lock` asks the base images' registry for digests; nothing listens there: exit 1 at once, one message."""
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens on it
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(f'extends = "default"\nruntime_base = "127.0.0.1:{port}/python:{{python}}-slim-bookworm"\n')
    result = cli("lock", "--matrix", matrix, "--insecure-registry")
    assert result.code == 1, result.err
    assert result.err.count("error:") == 1 and f"cannot connect to http://127.0.0.1:{port}: the connection was refused" in result.err
    assert not (tmp_path / "matrix.lock").exists()
