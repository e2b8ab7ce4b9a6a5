"""`buildkit hipify`'s report as lines.

What was converted, what will not port (at the user's own line), what the compile check said of each
translation unit, and why the tree did not pass."""

from __future__ import annotations

from typing import TYPE_CHECKING

from buildkit.core.porting import analysis
from buildkit.core.porting.preprocessor import OPEN
from buildkit.ui.views import one_line_each

if TYPE_CHECKING:
    from buildkit.core.porting.report import HipifyReport


def hipify_lines(report: HipifyReport) -> list[str]:
    lines = [f"hipify: {len(report.converted)} files converted, {len(report.unchanged)} unchanged in {report.seconds:.2f} s -> {report.output}"]
    lines += [f"  not copied: {skipped.path}: {skipped.reason}" for skipped in report.skipped]
    if report.removed:
        lines.append(f"  removed {len(report.removed)} files of an earlier run that this one no longer writes")
    for finding in report.findings:
        verdict = "will not port" if finding.blocks else "review"
        where = f"{finding.file}:{finding.line}" + (f" ({finding.hipified})" if finding.hipified else "")
        note = f" [inside {finding.condition}, which the ROCm build's macros do not settle]" if finding.state == OPEN else ""
        if finding.compiled_by:
            note += f" [compiles on ROCm: {', '.join(finding.compiled_by)}]"
        lines.append(f"  {verdict}: {where}: {finding.subject}: {finding.detail}{note}")
    if report.inactive:
        shown = ", ".join(f"{f.file}:{f.line}" for f in report.inactive[:5]) + (", ..." if len(report.inactive) > 5 else "")
        lines.append(
            f"  inactive on ROCm, not counted: {len(report.inactive)} finding{'s' if len(report.inactive) > 1 else ''} in #if "
            f"branches the ROCm build does not compile ({shown}); macros: {report.macros}"
        )
    lines += [f"  build flags: {line}" for line in report.build_flags]
    if report.compile_skipped:
        lines.append(f"compile check skipped: {report.compile_skipped}")
    if report.toolchain_limit:
        lines.append(f"compile check not run: {report.toolchain_limit}")
    if report.toolchain and not report.toolchain_limit:
        lines.append(f"compile check for {report.offload_arch} with {report.toolchain}")
    if report.headers:
        lines.append(f"  torch's ROCm headers: {report.headers}")
    for unit in report.compiled:
        if unit.status == analysis.TOOLCHAIN:
            continue  # said once above, for the whole check
        note = {analysis.COMPILED: "compiles", analysis.DEFECT: "DOES NOT COMPILE"}.get(unit.status, "not checked")
        detail = "" if unit.status == analysis.COMPILED else f": {unit.summary}"
        made_from = f" (from {unit.source})" if unit.source != unit.file else ""
        lines.append(f"  {unit.file}{made_from}, {unit.compiler}: {note}{detail}")
        lines += [f"    error: {error.location}: {error.message}" for error in unit.errors[1:]]
    if report.objects:
        lines.append(f"  objects kept in {report.objects}")
    lines += [f"NOT PASSED: {reason}" for reason in report.failures]
    return one_line_each(lines)
