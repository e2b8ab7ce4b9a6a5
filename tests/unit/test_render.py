"""Rendering: golden Dockerfiles, the invariants every template keeps, and fingerprints."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from buildkit.adapters.bundled import builtin_templates_dir, image_support_files
from buildkit.adapters.matrix_files import load_matrix
from buildkit.app.targets import Choices, select_targets
from buildkit.core import labels
from buildkit.core.plan import expand
from buildkit.core.render import Renderer, dockerfile_string, fingerprint
from buildkit.errors import UserError
from testkit.dockerfiles import stages

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
GOLDEN_IDS = ["2.14.1-cuda13.0-py3.12-runtime", "2.14.1-rocm7.2-py3.12-runtime", "2.14.1-rocm7.2-py3.12-devel"]
DIVERGE_MARKER = "# ---- The twins diverge here"


@pytest.fixture(scope="module")
def default():
    return {item.target.id: item for item in select_targets(Choices()).render()}


@pytest.mark.slow
@pytest.mark.parametrize("target_id", GOLDEN_IDS)
def test_golden_dockerfile(default, target_id):
    """Set BUILDKIT_UPDATE_GOLDEN=1 to rewrite the golden files after a deliberate template change."""
    path = GOLDEN / f"{target_id}.Dockerfile"
    text = default[target_id].dockerfile
    if os.environ.get("BUILDKIT_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_golden_fingerprints_are_stable_across_runs_and_machines(default):
    path = GOLDEN / "fingerprints.json"
    current = {target_id: default[target_id].fingerprint for target_id in GOLDEN_IDS}
    if os.environ.get("BUILDKIT_UPDATE_GOLDEN"):
        path.write_text(json.dumps(current, indent=2) + "\n")
    assert current == json.loads(path.read_text())
    again = {item.target.id: item.fingerprint for item in select_targets(Choices()).render()}
    assert all(again[target_id] == current[target_id] for target_id in GOLDEN_IDS)


def test_runtime_twins_are_identical_above_the_torch_install(default):
    """The CUDA twin and every ROCm twin of a pair (one per family on ROCm 7.14) share the shared stage."""
    for pair in {item.target.pair for item in default.values() if item.target.pair and item.target.flavor == "runtime"}:
        members = [i for i in default.values() if i.target.pair == pair]
        assert {i.target.backend for i in members} == {"cuda", "rocm"}
        prefixes = {(stages(i.dockerfile)["tools"].split("# ---- resolve")[0], stages(i.dockerfile)["shared"].split(DIVERGE_MARKER)[0])
                    for i in members}
        assert len(prefixes) == 1, pair
        assert "libnuma1" in prefixes.pop()[1]  # ROCm's runtime need, shared by both


def test_templates_keep_their_invariants(default):
    for item in default.values():
        text = item.dockerfile
        target = item.target
        assert "# syntax=" not in text  # a syntax line makes BuildKit pull a frontend image
        # one base with the venv and uv (tools); the shared stage on it; torch's resolve stage and a stage per
        # layer on the tools alone (they run while the OS packages install); then the image
        named = stages(text)
        install = [layer.name for layer in item.install.layers]
        # torch's stages before the shared stage: written after it on the same base, BuildKit 0.13 gave the shared
        # stage their history entries (the template says more)
        assert list(named) == ["tools", "resolve", *(f"layer-{name}" for name in install), "shared", "image"]
        assert named["tools"].startswith(f"FROM {target.base_image} AS tools\n") and named["shared"].startswith("FROM tools AS shared\n")
        assert all(named[name].startswith(f"FROM tools AS {name}\n") for name in named if name == "resolve" or name.startswith("layer-"))
        assert named["image"].startswith("FROM shared AS image\n")
        assert "--mount=type=cache,target=/var/lib/apt/lists" in text  # apt lists never land in a layer
        assert "--no-cache-dir" not in text and "--mount=type=cache,target=/root/.cache/pip" in text
        # each layer's stage installs its share into /layers/<name>; the image copies them in, in the plan's
        # order, proves the backend, and only then makes torch (frozen by its stage) every install's constraint
        for name in install:
            assert f"install.py layer /plan/{name}.json /layers/{name}\n" in named[f"layer-{name}"]
        image = named["image"]
        copies = re.findall(r"^COPY --link --from=layer-(\S+) /layers/(\S+)/ /$", image, flags=re.M)
        assert copies == [(name, name) for name in install]
        check = image.index(f"install.py check-backend {target.backend} {target.backend_version}\n")
        assert image.rindex("COPY --link") < check < image.index("ENV PIP_CONSTRAINT=/opt/venv/torch-constraint.txt")
        # before it, pip installs nothing but the pinned uv
        assert [line for line in text.split("ENV PIP_CONSTRAINT")[0].splitlines() if "pip install" in line] == [
            f' && pip install "uv=={target.uv}"']
        assert "USER 1000\n" in text
        assert ("NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text) == (target.vendor == "nvidia")
        assert ("NVIDIA_VISIBLE_DEVICES=all" in text) == (target.vendor == "nvidia")
        for name, value in item.build_args.items():
            assert f"ARG {name}={value}\n" in text
        assert "ca-bundle" not in "".join(item.build_args.values())


def label_instruction(dockerfile: str) -> dict[str, str]:
    """The final stage's LABEL instruction read as BuildKit's Dockerfile parser reads it: lines joined at their
    trailing backslash, then KEY="VALUE" words, a backslash in the quotes taking the next character literally
    (the integration test's bake build reads the same labels back from a real engine)."""
    (instruction,) = [line for line in dockerfile.replace("\\\n", " ").splitlines() if line.startswith("LABEL ")]
    words = re.fullmatch(r'LABEL((?: +[A-Za-z0-9._-]+="(?:[^"\\]|\\.)*")+) *', instruction)
    assert words, instruction
    return {key: re.sub(r"\\(.)", r"\1", value) for key, value in re.findall(r'([A-Za-z0-9._-]+)="((?:[^"\\]|\\.)*)"', words.group(1))}


def test_rendered_dockerfiles_carry_the_images_labels(default):
    """Self-describing: a plain `docker build` of a rendered Dockerfile labels the image as `build` does, all
    but the build's date and revision, which only the build knows."""
    for item in default.values():
        assert label_instruction(item.dockerfile) == dict(item.labels), item.target.id
        assert labels.CREATED not in item.labels and labels.REVISION not in item.labels
        assert item.dockerfile.rstrip().endswith('CMD ["python"]')  # metadata last: no layer's cache depends on it


@pytest.mark.parametrize("value", ['a "quoted" word', "costs $HOME and ${PATH}", "back\\slash\\", "tab-free, plain"])
def test_a_label_value_reads_back_exactly(value):
    word = dockerfile_string(value)
    assert label_instruction(f"LABEL k={word}\n") == {"k": value}


def test_a_line_break_never_reaches_a_dockerfile_string():
    with pytest.raises(ValueError):
        dockerfile_string("x\nRUN curl evil")


def test_root_option_leaves_no_user_switch(team_matrix):
    path = team_matrix('extends = "default"\nrun_as_root = true\ninclude = [{ id = "2.14.1-rocm7.2-py3.12-runtime" }]\n')
    (item,) = select_targets(Choices(matrix=path)).render()
    assert "USER" not in item.dockerfile and "useradd" not in item.dockerfile


@pytest.mark.slow
def test_team_template_dir_is_searched_first(team_matrix, tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "notebook.Dockerfile.j2").write_text(
        '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}\nRUN pip install jupyterlab==4.4.0\n{% endblock %}\n'
    )
    path = team_matrix("""
        extends = "default"
        template_dir = "templates"
        flavors = ["notebook"]
        include = [{ torch = "2.14.1", python = "3.12" }]
    """)
    rendered = select_targets(Choices(matrix=path)).render()
    assert rendered and all("RUN pip install jupyterlab==4.4.0" in item.dockerfile for item in rendered)
    assert all(item.target.base_image == "python:3.12-slim-bookworm" for item in rendered)


def test_missing_flavor_template_is_a_user_error(cli, team_matrix):
    path = team_matrix('extends = "default"\nflavors = ["jupyter"]\n')
    result = cli("render", "--matrix", path)
    assert result.code == 2
    assert "no template jupyter.Dockerfile.j2 for flavor 'jupyter'" in result.err


def test_strict_undefined_turns_a_typo_into_an_error():
    matrix = load_matrix(None)
    target = expand(matrix).targets[0]
    renderer = Renderer(jinja2.DictLoader({"runtime.Dockerfile.j2": "FROM {{ target.base_imag }}\n",
                                           "devel.Dockerfile.j2": "x"}), matrix.source, {}, matrix.compat)
    with pytest.raises(UserError) as error:
        renderer.render(renderer.plan(target))
    assert "undefined value" in str(error.value) and "runtime.Dockerfile.j2" in str(error.value)


# --- fingerprints ------------------------------------------------------------------------------------------


def test_fingerprint_changes_when_any_input_changes(default):
    """Each input of the fingerprint (a target field, the template sources, the build args, the labels)
    changes it; the same inputs give the same digest."""
    matrix = load_matrix(None)
    renderer = Renderer(matrix.templates, matrix.source, image_support_files(), matrix.compat)
    item = default["2.14.1-rocm7.2-py3.12-runtime"]
    target = item.target
    base = dict(target=target, templates="t", args=dict(item.build_args), image_labels=dict(item.labels))
    assert fingerprint(**base) == fingerprint(**{**base, "args": dict(reversed(list(item.build_args.items())))})
    assert len(fingerprint(**base)) == 64
    for changed in (
        {"target": replace(target, base_image="python:3.12-slim-trixie")},
        {"target": replace(target, os_packages=("libnuma1", "curl"))},
        {"templates": "u"},
        {"args": {**item.build_args, "TORCH_INDEX_URL": "https://example.com/whl/rocm7.2/"}},
        {"image_labels": {**item.labels, "x": "y"}},
    ):
        assert fingerprint(**{**base, **changed}) != fingerprint(**base), changed
    assert renderer.plan(target).fingerprint == item.fingerprint


def test_fingerprint_follows_a_package_change_and_a_template_change(default, tmp_path):
    matrix = load_matrix(None)
    renderer = Renderer(matrix.templates, matrix.source, image_support_files(), matrix.compat)
    original = default["2.14.1-rocm7.2-py3.12-runtime"]
    changed = renderer.plan(replace(original.target, packages=("einops==0.8.1",)))
    assert changed.fingerprint != original.fingerprint
    assert renderer.plan(original.target).fingerprint == original.fingerprint
    # a template that runtime.Dockerfile.j2 extends changes: the fingerprint follows it
    builtin = builtin_templates_dir()
    for template in builtin.glob("*.j2"):
        (tmp_path / template.name).write_text(template.read_text())
    (tmp_path / "_image.Dockerfile.j2").write_text((builtin / "_image.Dockerfile.j2").read_text() + "# changed\n")
    edited = Renderer(jinja2.FileSystemLoader(str(tmp_path)), matrix.source, image_support_files(), matrix.compat)
    assert edited.plan(original.target).fingerprint != original.fingerprint
    # so does a support script the build context carries (the installer its RUN steps mount)
    scripts = image_support_files()
    changed_script = Renderer(matrix.templates, matrix.source, {**scripts, "install.py": scripts["install.py"] + b"# changed\n"},
                              matrix.compat)
    assert changed_script.plan(original.target).fingerprint != original.fingerprint


def test_runtime_images_carry_the_torch_compile_toolchain_unless_compile_is_false(default):
    """g++ and, where the base's Python lacks Python.h, its -dev package: installed in the shared prefix (both
    twins), so the pair still shares its layers. compile = false leaves them out and says so in a label."""
    matrix = load_matrix(None)
    renderer = Renderer(matrix.templates, matrix.source, image_support_files(), matrix.compat)
    item = default["2.14.1-rocm7.2-py3.12-runtime"]
    shared, twin = item.dockerfile.split(DIVERGE_MARKER)
    assert "g++" in shared and "python3.12-dev" in shared and "g++" not in twin
    assert "dev.buildkit.torch-compile" not in item.labels
    slim = renderer.render(renderer.plan(replace(item.target, compile=False)))
    assert "g++" not in slim.dockerfile and "-dev" not in slim.dockerfile
    assert slim.labels["dev.buildkit.torch-compile"] == "false" and slim.fingerprint != item.fingerprint


def test_equal_fingerprints_mean_equal_dockerfiles(default):
    """What the fingerprint hashes determines the Dockerfile: targets with different Dockerfiles never
    share a fingerprint."""
    by_fingerprint: dict[str, str] = {}
    for item in default.values():
        assert by_fingerprint.setdefault(item.fingerprint, item.dockerfile) == item.dockerfile


@pytest.mark.slow
def test_nightly_channel_takes_dev_builds_and_the_date_changes_the_fingerprint():
    from buildkit.app.targets import Choices, select_targets

    def rendered(today):
        (item,) = select_targets(Choices(selectors=("id=2.14.1-rocm7.2-py3.12-runtime",), channel="nightly", today=today)).render()
        return item

    first, second = rendered("20261130"), rendered("20261201")
    assert first.target.index_url == "https://download.pytorch.org/whl/nightly/rocm7.2/"
    assert first.build_args == {
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/nightly/rocm7.2/", "PIP_PRE": "1", "NIGHTLY_DATE": "20261130",
    }
    plan = json.loads(first.support["torch-install.json"])
    assert plan["pre"] and plan["requirements"] == ["torch", "torchvision"]  # the nightly index's newest dev builds
    assert first.fingerprint != second.fingerprint  # each day's nightly is a new image
    assert rendered("20261130").fingerprint == first.fingerprint
