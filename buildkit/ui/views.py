"""What commands print for people: rich tables and short lines, from the app's results."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.table import Table
from rich.text import Text

from buildkit.adapters.files.outputs import write_atomic
from buildkit.app.targets import target_json
from buildkit.core.shell import command_line as command_line  # the CLI prints commands through views (cli may not import core)
from buildkit.core.supply_chain.attestation import gpu_test_summary
from buildkit.core.vendors import VENDOR_NAMES
from buildkit.errors import Problem, printable, redact_urls

if TYPE_CHECKING:  # results of use cases that load the docker SDK: `plan` need not import them to print
    from collections.abc import Iterable, Mapping, Sequence

    import tomlkit.items  # (and tomlkit, which only `matrix show --format toml` loads)
    from rich.console import Console

    from buildkit.app.build import PlannedBuild
    from buildkit.app.matrix_show import ResolvedMatrix
    from buildkit.app.routing import Detection, DoctorReport
    from buildkit.app.smoke import ParityResult
    from buildkit.app.verify import Verification
    from buildkit.core.host.facts import HostFacts
    from buildkit.core.host.fit import Finding
    from buildkit.core.host.kube import Manifests
    from buildkit.core.release.judge import Verdict
    from buildkit.core.render.planned import PlannedImage
    from buildkit.core.targets.plan import Note, Target


def human_size(value: int | None) -> str:
    """Bytes for people: 512 B, 3.4 MiB, 5.9 GiB; - for unknown."""
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return str(size)  # pragma: no cover


# What each command can print; the first is its default.
PLAN_FORMATS = ("table", "json", "github", "ids")
VALIDATE_FORMATS = ("text", "github")
DRY_RUN_FORMATS = ("table", "json")
ANNOTATION_TITLE = "buildkit matrix validate"


def escaped_lines(text: str) -> str:
    """Text whatever its source (a host tree, a registry, a template, a matrix, the engine) with every control
    character escaped by errors.printable, line by line: the line breaks are this output's own (a value that
    could hold one of its own is escaped whole before it is composed in, see one_line_each), and the user-info
    of every URL in it redacted (errors.redact_urls)."""
    return "\n".join(printable(line, limit=None) for line in redact_urls(text).split("\n"))


def terminal(text: str) -> Text:
    """escaped_lines() as rich prints it: never read as markup or emoji codes ("[compat.gfx]" and ":1:" stay
    as written)."""
    return Text(escaped_lines(text))


def say(console: Console, text: str) -> None:
    console.print(terminal(text), soft_wrap=True)


def one_line_each(lines: list[str]) -> list[str]:
    """Lines that each stay one line: what they quote (a file name of a source tree, a registry's label, a
    package an image holds) cannot add a line that looks like one of buildkit's own."""
    return [printable(line, limit=None) for line in lines]


def table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]], whole: Iterable[str] = ()) -> Table:
    """A table whose title and cells are terminal() text: rich reads a plain string cell as markup. `whole`:
    columns whose values are never folded (ids and tags a reader copies), the others fold to make room."""
    grid = Table(title=terminal(title), title_justify="left")
    kept = set(whole)
    for column in columns:
        grid.add_column(column, overflow="fold", no_wrap=column in kept, min_width=None)
    for row in rows:
        grid.add_row(*map(terminal, row))
    return grid


def notes(console: Console, items: Iterable[Note]) -> None:
    for note in items:
        say(console, f"{'warning' if note.warning else 'note'}: {note}")


def print_json(document: Any, compact: bool = False) -> None:
    """JSON on standard output: indented for people, or one line (an Actions output, `$GITHUB_OUTPUT`)."""
    text = json.dumps(document, separators=(",", ":")) if compact else json.dumps(document, indent=2)
    sys.stdout.write(redact_urls(text) + "\n")


def write_json(path: Path, document: Any, option: str) -> None:
    """A JSON file an option names: written whole, never through a symlink (safe_files.write_atomic)."""
    write_atomic(path, (redact_urls(json.dumps(document, indent=2)) + "\n").encode("utf-8"), option)


def write_json_array(stream: TextIO, items: Iterable[Mapping[str, Any]]) -> None:
    """A JSON array written as it is produced, one object per line: as valid as indented JSON and as easy to
    diff, and encoded by json's C encoder (asking for indentation falls back to its pure-Python encoder, which
    made three fifths of `plan --format json`'s time on large plans)."""
    write_json_lines(stream, map(json_line, items))


def json_line(item: Mapping[str, Any]) -> str:
    """One object of write_json_array's, as its line of text."""
    return redact_urls(json.dumps(item))


def write_json_lines(stream: TextIO, lines: Iterable[str]) -> None:
    """write_json_array of objects already written as their lines (json_line), by the processes that made them."""
    stream.write("[")
    for index, line in enumerate(lines):
        stream.write(("\n" if index == 0 else ",\n") + line)
    stream.write("\n]\n")


def validation_summary(targets: Sequence[Target]) -> str:
    counts = ", ".join(f"{sum(1 for t in targets if t.vendor == vendor)} {vendor}" for vendor in VENDOR_NAMES)
    return f"ok: {len(targets)} targets ({counts})"


def _annotation_data(text: str) -> str:
    """GitHub's escaping for a workflow command's message: a newline would end the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _annotation_property(text: str) -> str:
    return _annotation_data(text).replace(":", "%3A").replace(",", "%2C")


def _repository_path(where: str) -> str | None:
    """A problem's file as GitHub names it (relative to the checkout, where the job runs), or None when the
    problem is not located in a file (an option, a variable, a service)."""
    path = Path(where)
    if not path.is_file():
        return None
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def github_annotations(problems: Iterable[Problem]) -> list[str]:
    """`::error file=…,line=…::` workflow commands: GitHub shows each on its file and line in a pull request."""
    lines = []
    for problem in problems:
        file = _repository_path(problem.where)
        location = "" if file is None else f"file={_annotation_property(file)}" + (f",line={problem.line}" if problem.line is not None else "")
        text = f"{problem.key}: {problem.message}" if problem.key else problem.message
        if file is None:
            text = f"{problem.where}: {text}"
        properties = ",".join(part for part in (location, f"title={_annotation_property(ANNOTATION_TITLE)}") if part)
        # a log line like every other: its file name and message escaped (an ESC in a file name is no colour here)
        lines.append(printable(f"::error {properties}::{_annotation_data(redact_urls(text))}", limit=None))
    return lines


def matrix_toml(resolved: ResolvedMatrix) -> str:
    """The resolved matrix as TOML that buildkit reads back as the same matrix; with a chain of files,
    each value says which file set it."""
    import tomlkit

    chained = len(resolved.files) > 1
    document = tomlkit.document()
    # comments name files: their names, unlike the values (validated first), may hold any character but / and NUL
    document.add(
        tomlkit.comment(
            printable(
                f"{resolved.files[-1]} as buildkit reads it, its `extends` chain resolved ({' <- '.join(resolved.files)}); keys not listed take their defaults",
                limit=None,
            )
        )
    )
    tables = {}
    for key, value in resolved.data.items():
        if key == "torch" or (isinstance(value, dict) and any(isinstance(v, dict) for v in value.values())):
            tables[key] = value  # tables follow the plain keys, or TOML would read those keys into them
            continue
        item = _inline(value)
        if chained:
            item.comment(printable(resolved.origins.get(key, ""), limit=None))
        document.add(key, item)
    for key, value in tables.items():
        if key != "torch":
            document.add(key, tomlkit.item(value))
            continue
        entries = tomlkit.aot()
        for index, entry in enumerate(value):
            table = tomlkit.table()
            if chained:
                table.add(tomlkit.comment(printable(f"from {', '.join(resolved.stack_origins.get(index, ()))}", limit=None)))
            for name, field in entry.items():
                table.add(name, _inline(field))
            entries.append(table)
        document.add(key, entries)
    return tomlkit.dumps(document)


def _inline(value: object) -> tomlkit.items.Item:
    """A value as TOML writes it on one line: tables inline, lists of tables as lists of inline tables."""
    import tomlkit

    if isinstance(value, dict):
        table = tomlkit.inline_table()
        table.update({key: _inline(item) for key, item in value.items()})
        return table
    if isinstance(value, list):
        array = tomlkit.array()
        array.extend(_inline(item) for item in value)
        return array
    return tomlkit.item(value)


def planned_build_table(builds: Sequence[PlannedBuild]) -> Table:
    pairs = {build.item.target.pair for build in builds if build.item.target.pair}
    shared = f"; each pair's shared stage first ({len(pairs)})" if pairs else ""
    table = Table(title=f"would build {len(builds)} targets{shared}", title_justify="left")
    for column in ("id", "vendor", "platforms", "tags", "pair", "fingerprint"):
        table.add_column(column, overflow="fold")
    for build in builds:
        target = build.item.target
        table.add_row(target.id, target.vendor, "\n".join(target.platforms), "\n".join(target.tag_names), target.pair or "-", build.item.fingerprint[:12])
    return table


def planned_build_json(build: PlannedBuild) -> dict[str, Any]:
    """The plan contract's target, plus what the build itself would do with it."""
    target = build.item.target
    return {
        **target_json(build.item),
        "platforms": list(target.platforms),
        "shared_stage": bool(target.pair),  # built once for the pair, before either twin
        "cache": {"from": list(build.cache.sources), "to": build.cache.target} if build.cache.target else None,
    }


def plan_table(planned: tuple[PlannedImage, ...]) -> Table:
    """One row per target: its id (its immutable tag), the floating tag it moves with its twin, its pair."""
    return table(
        f"{len(planned)} targets",
        ("id", "vendor", "floating tag", "pair", "fingerprint"),
        ((item.target.id, item.target.vendor, "\n".join(item.target.tag_names[1:]) or "-", item.target.pair or "-", item.fingerprint[:12]) for item in planned),
        whole=("id",),
    )


def verdict_table(verdicts: list[Verdict], mode: str) -> Table:
    # a failure's text comes from the image's probe: escaped whole, so it cannot add a line of its own
    return table(
        f"smoke tests (--gpu {mode})",
        ("image", "torch", "verdict", "kernels", "failures"),
        (
            (
                verdict.image,
                printable(verdict.torch or "-", limit=None),
                "pass" if verdict.passed else "FAIL",
                verdict.kernels,
                "\n".join(printable(failure, limit=None) for failure in verdict.failures) or "-",
            )
            for verdict in verdicts
        ),
    )


def parity_lines(result: ParityResult) -> list[str]:
    first, second = result.images
    if result.parity.passed:
        return [f"parity: {first} and {second} hold the same OS, Python and packages (vendor runtimes aside)"]
    differences = result.parity.differences
    return one_line_each([f"parity: {len(differences)} difference(s) between {first} and {second}:", *(f"  - {d}" for d in differences)])


def parity_json(result: ParityResult) -> dict[str, Any]:
    return {"images": list(result.images), "passed": result.parity.passed, "differences": list(result.parity.differences)}


def gpu_json(host: HostFacts) -> dict[str, Any]:
    nodes = [n for n in (host.kfd, *host.render_nodes, *host.nvidia_nodes) if n is not None]
    engine = host.engine
    return {
        # an AMD GPU's sub-family and family in AMD's hierarchy (rocm-bootstrap's), as rocm-bootstrap-detect --hierarchy prints them
        "gpus": [
            {
                "vendor": g.vendor,
                "pci": g.pci,
                "device_id": g.device_id,
                "name": g.name,
                "arch": g.arch,
                **({"sub_family": g.bundles[0], "family": g.bundles[1]} if len(g.bundles) == 2 else {}),
            }
            for g in host.gpus
        ],
        "drivers": {"nvidia": host.nvidia_driver or None, "amdgpu": host.amdgpu_driver or ("loaded" if host.amdgpu_loaded else None)},
        "device_nodes": [{"path": n.path, "group": n.group, "gid": n.gid, "accessible": n.accessible} for n in nodes],
        "cdi_specs": [{"path": s.path, "kind": s.kind, "gpus": len(s.gpu_devices), "missing_nodes": list(s.missing_nodes)} for s in host.cdi_specs],
        "engine": None if engine is None else {"kind": engine.kind, "version": engine.version, "rootless": engine.rootless, "cdi": engine.takes_cdi},
        "notes": list(host.notes),
        "environment": dict(host.environment),
    }


def host_notes(console: Console, host: HostFacts) -> None:
    """What the host tree held that could not be used (an unparsable value, a FIFO where a file belongs)."""
    for note in host.notes:
        say(console, f"note: {note}")


def findings_json(findings: Iterable[Finding]) -> list[dict[str, Any]]:
    return [{"blocking": f.blocking, "code": f.code, "finding": f.title, "fix": f.fix} for f in findings]


def findings_table(title: str, findings: Iterable[Finding]) -> Table:
    return table(title, ("", "finding", "fix"), (("BLOCKS" if finding.blocking else "note", finding.title, finding.fix) for finding in findings))


def _target_json(target: Target | None) -> dict[str, Any]:
    return {"id": target.id if target else None, "tag": target.tags[0] if target else None}


def detection_json(detection: Detection) -> dict[str, Any]:
    routing = detection.routing
    return {
        **gpu_json(detection.host),
        "vendor": routing.vendor,
        "targets": {
            vendor: {
                **_target_json(c.target),
                "run_flags": routing.access[vendor].docker_flags(),
                "passed_over": [
                    {"code": group.finding.code, "finding": group.finding.title, "fix": group.finding.fix, "targets": [t.id for t in group.targets]}
                    for group in c.passed_over
                ],
            }
            for vendor, c in routing.choices.items()
        },
        "cpu_target": _target_json(routing.cpu_target) if routing.cpu_target else None,
        "ok": not routing.blocking,
        "findings": findings_json(routing.findings),
    }


def show_detection(console: Console, detection: Detection) -> None:
    host, routing = detection.host, detection.routing
    host_notes(console, host)
    if not host.gpus:
        say(console, "no GPU on this host: images run on the CPU here (torch.cuda.is_available() is False)")
        if routing.cpu_target is not None:
            say(console, f"buildkit run starts {routing.cpu_target.tags[0]} here, on the CPU")
        return
    console.print(table("GPUs", ("pci", "vendor", "model", "arch"), ((gpu.pci, gpu.vendor, gpu.name, gpu.arch_described or "?") for gpu in host.gpus)))
    amdgpu = host.amdgpu_driver or ("loaded" if host.amdgpu_loaded else "-")
    say(console, f"drivers: nvidia {host.nvidia_driver or '-'}, amdgpu {amdgpu}")
    for node in gpu_json(host)["device_nodes"]:
        access = "accessible" if node["accessible"] else "NOT accessible"
        say(console, f"{node['path']}: group {node['group'] or node['gid']}, {access} to you")
    for spec in host.cdi_specs:
        say(console, f"CDI spec {spec.path}: {spec.kind}, {len(spec.gpu_devices)} GPUs")
    for vendor, choice in routing.choices.items():
        primary = vendor == routing.vendor
        mark = " (this host's vendor)" if primary and len(routing.choices) > 1 else ""
        if choice.target:
            command = command_line(detection.cli, "run", *routing.access[vendor].docker_flags(), choice.target.tags[0])
            say(console, f"{vendor}{mark}: {choice.target.tags[0]}\n  {command}")
        elif primary:  # doctor's no-fitting-image finding below says why
            say(console, f"{vendor}{mark}: no target fits this host (see below)")
        else:
            say(console, f"{vendor}{mark}: no target fits: {'; '.join(g.describe(choice.candidates) for g in choice.passed_over)}")
    if routing.findings:
        console.print(findings_table("what doctor says", routing.findings))


def doctor_json(report: DoctorReport) -> dict[str, Any]:
    return {**gpu_json(report.host), "image": report.image, "ok": not report.blocking, "findings": findings_json(report.findings)}


def show_doctor(console: Console, report: DoctorReport) -> None:
    host_notes(console, report.host)
    if report.findings:
        console.print(findings_table(f"doctor{': ' + report.image if report.image else ''}", report.findings))
    if report.blocking:
        say(console, "GPU acceleration is blocked here: fix the findings marked BLOCKS")
    elif not report.host.gpus:
        say(console, "ok: no GPU here, so images run on the CPU (nothing blocks that)")
    else:
        say(console, "ok: nothing blocks GPU acceleration here")


def kube_yaml(manifests: Manifests) -> str:
    """One YAML document per object, for `kubectl apply -f -`; a value used twice is written twice (no YAML
    anchors: people read and edit these)."""
    return "".join("---\n" + plain_yaml(item) for item in manifests.objects)


def plain_yaml(value: object, flow: bool = False) -> str:
    """YAML as people write it: keys in their order, a value used twice written twice (no anchors); `flow` writes
    lists of plain values and maps of those on one line ({key: kubernetes.io/arch, operator: In, values: [amd64]})."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: object) -> bool:
            return True

    def leaf(item: object) -> bool:
        return not isinstance(item, (dict, list)) or (isinstance(item, list) and all(not isinstance(x, (dict, list)) for x in item))

    def mapping(dumper: yaml.SafeDumper, data: dict[Any, Any]) -> yaml.Node:
        return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=all(leaf(item) for item in data.values()))

    if flow:
        Dumper.add_representer(dict, mapping)
    return yaml.dump(value, Dumper=Dumper, sort_keys=False, default_flow_style=None if flow else False, width=100)


def kube_json(manifests: Manifests) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests.objects)}, indent=2) + "\n"


def verification_lines(verification: Verification) -> list[str]:
    """`buildkit verify` (and doctor's supply-chain facts): one line per check, then what was tested where."""
    identity = verification.identity
    what = f" ({identity.vendor.display} {identity.vendor.backend_label(identity.backend_version)}, {identity.target or 'no target label'})" if identity else ""
    lines = [f"{verification.image}{what}"]
    lines += [f"  {'ok  ' if fact.ok else 'FAIL'}  {fact.name}: {fact.detail}" for fact in verification.facts]
    lines += [f"  tested: {gpu_test_summary(predicate)}" for predicate in verification.gpu_tests]
    if not verification.verified:
        lines.append("signatures not checked: these facts are what the registry holds, not proof of who made them")
    elif verification.passed:
        lines.append("verified: signed, built with provenance, SBOM attached, and tested on its GPU vendor")
    else:
        lines.append(f"NOT verified: {', '.join(fact.name for fact in verification.facts if not fact.ok)} failed")
    return one_line_each(lines)


def verification_json(verification: Verification) -> dict[str, Any]:
    identity = verification.identity
    return {
        "image": verification.image,
        "passed": verification.passed,
        "signatures_checked": verification.verified,
        "vendor": identity.vendor.name if identity else None,
        "target": identity.target if identity else None,
        "checks": [{"name": f.name, "passed": f.ok, "detail": f.detail} for f in verification.facts],
        "gpu_tests": [{"summary": gpu_test_summary(p), "predicate": p} for p in verification.gpu_tests],
        "created": verification.created or None,
        "layers": [{"digest": layer.digest, "bytes": layer.size, "name": layer.name} for layer in verification.layers],
    }
