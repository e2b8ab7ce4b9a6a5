"""Rendering: golden Dockerfiles, the invariants every template keeps, and fingerprints."""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from buildkit.adapters.files.bundled import builtin_templates_dir, image_support_files
from buildkit.adapters.files.matrix import load_matrix
from buildkit.app.targets import Choices, select_targets
from buildkit.core import labels
from buildkit.core.render.fingerprint import fingerprint
from buildkit.core.render.renderer import Renderer
from buildkit.core.render.sandbox import dockerfile_string
from buildkit.core.targets.plan import expand
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
        prefixes = {(stages(i.dockerfile)["tools"].split("# ---- resolve")[0], stages(i.dockerfile)["shared"].split(DIVERGE_MARKER)[0]) for i in members}
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
        # on an official Python base the image is assembled from scratch, its layers the same under every Python
        # first, then the shared stage's files; on any other base it starts from the shared stage
        assembled = target.base_image.startswith("python:")
        assert named["image"].startswith("FROM scratch AS image\n" if assembled else "FROM shared AS image\n"), target.id
        assert "--mount=type=cache,target=/var/lib/apt/lists" in text  # apt lists never land in a layer
        assert "--no-cache-dir" not in text and "--mount=type=cache,target=/root/.cache/pip" in text
        # each layer's stage installs its share into /layers/<name>; the image copies them in, in the plan's
        # order, proves the backend, and only then makes torch (frozen by its stage) every install's constraint
        for name in install:
            assert f"install.py layer /plan/{name}.json /layers/{name}\n" in named[f"layer-{name}"]
        image = named["image"]
        copies = re.findall(r"^COPY --link --from=(\S+) /(?:layers/(\S+)/)? /$", image, flags=re.M)
        below = [(f"layer-{layer.name}", layer.name) for layer in item.install.layers if layer.python_neutral and not layer.name.startswith("device-")]
        split = [layer.name for layer in item.install.layers if layer.any_python]
        below += [(f"layer-{name}", f"{name}-any-python") for name in split]
        above = [(f"layer-{name}", name) for name in install if (f"layer-{name}", name) not in below]
        assert split == [name for name in target.layers if not name.startswith(("nvidia-", "rocm-sdk-"))]  # triton
        assert copies == ([*below, ("shared", ""), *above] if assembled else below + above), target.id
        if assembled:
            assert "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\\n    LANG=C.UTF-8\n" in image
            assert image.index("COPY --link --from=shared / /") < image.index("PATH=/opt/venv/bin:$PATH") < image.index("SHELL [")
        check = image.index(f"install.py check-backend {target.backend} {target.backend_version}\n")
        assert image.rindex("COPY --link") < check < image.index("ENV PIP_CONSTRAINT=/opt/venv/torch-constraint.txt")
        # before it, pip installs nothing but the pinned uv
        assert [line for line in text.split("ENV PIP_CONSTRAINT")[0].splitlines() if "pip install" in line] == [f' && pip install "uv=={target.uv}"']
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
    with pytest.raises(ValueError, match="a control character in a Dockerfile string"):
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


def test_an_unset_template_dir_is_named_where_a_flavor_has_no_template(cli, team_matrix, tmp_path):
    """templates/ beside a matrix reads like a default and is none: the missing flavor's error says template_dir is
    unset and how to set it, and a matrix that builds without it is warned that the folder is not read."""
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "vision.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}\n')
    unread = team_matrix('extends = "default"\nflavors = ["runtime", "vision"]\n')
    result = cli("plan", "--matrix", unread)
    assert result.code == 2
    assert (
        f"no template vision.Dockerfile.j2 for flavor 'vision' in the template folders; template_dir is unset, so "
        f'templates/vision.Dockerfile.j2 beside {unread} is not read: add template_dir = "templates" to {unread}'
    ) in result.err
    builds = team_matrix('extends = "default"\nflavors = ["runtime"]\n')
    result = cli("plan", "--matrix", builds)
    assert result.code == 0, result.err
    assert (
        f"warning: {builds}: templates/ beside this file holds vision.Dockerfile.j2, but template_dir is unset, so it is "
        'not read: add template_dir = "templates" to use it'
    ) in result.err
    set_up = team_matrix('extends = "default"\ntemplate_dir = "templates"\nflavors = ["runtime", "vision"]\n', "set_up.toml")
    assert "template_dir" not in cli("plan", "--matrix", set_up).err
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "matrix.toml").write_text('extends = "default"\nflavors = ["jupyter"]\n')
    result = cli("plan", "--matrix", elsewhere / "matrix.toml")
    assert (
        "template_dir is unset, so only buildkit's own templates are searched: put jupyter.Dockerfile.j2 in a folder "
        f'beside {elsewhere / "matrix.toml"} and name it there, e.g. template_dir = "templates"'
    ) in result.err


def test_a_block_the_parent_does_not_define_is_an_error_with_the_nearest_name(cli, team_matrix, tmp_path):
    """Jinja drops `{% block extar %}` without a word (the image lacks the team's lines): buildkit refuses it."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "vision.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}\n{% block extar %}\nRUN pip install timm\n{% endblock %}\n')
    path = team_matrix('extends = "default"\ntemplate_dir = "templates"\nflavors = ["vision"]\n')
    for command in (("matrix", "validate"), ("plan",), ("render", "--out", tmp_path / "dist")):
        result = cli(*command, "--matrix", path)
        assert result.code == 2, command
        assert (
            f"error: {templates / 'vision.Dockerfile.j2'}:2: block 'extar' is not defined by runtime.Dockerfile.j2 or what it "
            "extends, so it would be dropped without a word; blocks to fill: "
        ) in result.err
        assert 'did you mean "extra"?' in result.err and "Traceback" not in result.err


def test_blocks_a_team_part_defines_or_nests_are_blocks_to_fill(team_matrix, tmp_path):
    """A block defined by a team part in between, or nested inside a filled block, is no stray block."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "_team.Dockerfile.j2").write_text(
        '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}{% block team_tools %}{% endblock %}{% endblock %}\n'
    )
    (templates / "vision.Dockerfile.j2").write_text(
        '{% extends "_team.Dockerfile.j2" %}\n{% block team_tools %}\nRUN pip install timm==1.0.15\n{% endblock %}\n'
    )
    path = team_matrix('extends = "default"\ntemplate_dir = "templates"\nflavors = ["vision"]\ninclude = [{ id = "2.14.1-cuda13.0-py3.12-vision" }]\n')
    (item,) = select_targets(Choices(matrix=path)).render()
    assert "RUN pip install timm==1.0.15" in item.dockerfile


def test_a_fork_publishing_elsewhere_is_warned_that_it_inherits_the_source_label(cli, team_matrix):
    moved = team_matrix('extends = "default"\nregistry = "registry.example.com"\nrepository = "vision/pytorch"\n')
    result = cli("plan", "--matrix", moved)
    assert result.code == 0
    assert (
        f"warning: {moved}:2: registry: registry and repository changed here, but source (https://github.com/buildkit-images/buildkit) is inherited from "
    ) in result.err
    assert "org.opencontainers.image.source label, naming another project as theirs; set source to your own" in result.err
    own = team_matrix('extends = "default"\nrepository = "vision/pytorch"\nsource = "https://git.example.com/vision/images"\n', "own.toml")
    prefix_only = team_matrix('extends = "default"\ntag_prefix = "vision-"\n', "prefix.toml")
    for path in (own, prefix_only):
        assert "warning" not in cli("plan", "--matrix", path).err, path


def test_strict_undefined_turns_a_typo_into_an_error():
    matrix = load_matrix(None)
    target = expand(matrix).targets[0]
    renderer = Renderer(
        jinja2.DictLoader({"runtime.Dockerfile.j2": "FROM {{ target.base_imag }}\n", "devel.Dockerfile.j2": "x"}), matrix.source, {}, matrix.compat
    )
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
    changed_script = Renderer(matrix.templates, matrix.source, {**scripts, "install.py": scripts["install.py"] + b"# changed\n"}, matrix.compat)
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
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/nightly/rocm7.2/",
        "PIP_PRE": "1",
        "NIGHTLY_DATE": "20261130",
    }
    plan = json.loads(first.support["torch-install.json"])
    assert plan["pre"] and plan["requirements"] == ["torch", "torchvision"]  # the nightly index's newest dev builds
    assert first.fingerprint != second.fingerprint  # each day's nightly is a new image
    assert rendered("20261130").fingerprint == first.fingerprint
