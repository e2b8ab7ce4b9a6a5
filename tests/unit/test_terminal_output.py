"""What reaches the terminal: strings from host trees, build output and messages arrive with every control
character escaped, and rich never reads them as markup ("[compat.gfx]" once vanished from doctor's advice)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from buildkit.adapters.files.bundled import shipped_compat
from buildkit.adapters.host import read_host
from buildkit.app.build import BuildStatus, TargetResult
from buildkit.app.routing import DoctorReport
from buildkit.core.host.routing import assess
from buildkit.core.labels import ImageIdentity
from buildkit.ui.console import LiveDisplay, PlainDisplay
from buildkit.ui.views import say, show_doctor
from testkit import hosts

# Any C0 or C1 control character, DEL, the Unicode line and paragraph separators, and the bidirectional
# formatting characters (an override shows a name's characters in another order: "Trojan Source"); a line feed ends a line.
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
TITLE = "\x1b]0;owned\x07"  # an xterm title change
RED = "\x1b[31m"
CLIPBOARD = "\x1b]52;c;Y3VybCB4fHNo\x07"  # OSC 52: the terminal's clipboard set to `curl x|sh`
BIDI = "\u202egnp.\u202d"  # a right-to-left override


def hostile_amd_host(root: Path) -> Path:
    """An AMD host whose /etc/group names the render group with escape sequences, with a device node whose name
    carries one, and a GPU of a gfx target buildkit does not know (doctor then advises [compat.gfx])."""
    hosts.amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", 120503)])
    owner = (root / "dev/kfd").stat().st_gid  # the group the nodes are shown with: whoever made the tree
    (root / "etc/group").write_text(f"vid{TITLE}eo:x:{hosts.VIDEO_GID}:\nren{RED}der:x:{owner}:\n")
    (root / "dev/dri" / f"renderD200{RED}").write_text("")
    return root


def assert_escaped(text: str) -> None:
    assert not CONTROL.search(text), repr(CONTROL.search(text).group())


def test_detect_and_doctor_show_host_strings_escaped(cli, tmp_path):
    root = hostile_amd_host(tmp_path / "host")
    detect = cli("detect", "--host-root", root, "--python", "3.12")
    assert detect.code == 0, detect.err
    assert_escaped(detect.out + detect.err)
    assert "/dev/dri/renderD128: group ren\\x1b[31mder" in detect.out
    assert "renderD200\\x1b[31m: is not a plain device name (control characters); ignored" in detect.out + detect.err
    doctor = cli("doctor", "--host-root", root)
    # an unknown gfx target blocks (no image carries it): one decision for detect, run and doctor
    assert doctor.code == 1 and "renderD200\\x1b[31m: is not a plain device name" in doctor.out
    assert_escaped(doctor.out + doctor.err)


def test_doctor_advice_keeps_its_brackets(tmp_path):
    """doctor once printed "add it to  to build for it from source": rich had read [compat.gfx] as markup."""
    host = read_host(shipped_compat(), hostile_amd_host(tmp_path / "host"))
    identity = ImageIdentity.read({"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx942"})
    image = f"registry.example.com/team/app:{RED}1"
    out = io.StringIO()
    show_doctor(Console(file=out, width=400), DoctorReport(host, image, tuple(assess(host, shipped_compat(), image, identity))))
    assert "describe it in [compat.gfx] to build for it from source" in out.getvalue()
    assert "doctor: registry.example.com/team/app:\\x1b[31m1" in out.getvalue()
    assert_escaped(out.getvalue())


def test_build_output_lines_are_escaped_and_never_markup():
    result = TargetResult("t1", "amd", None, ["x:1"], status=BuildStatus.FAILED, error=f"step failed {TITLE}[bold]")
    plain = io.StringIO()
    display = PlainDisplay(Console(file=plain, width=200))
    display.begin(f"docker {RED}26", 1, 1)
    display.line("t1", f"#8 [stage-0 5/7] RUN echo {TITLE}")
    display.finished(result)
    assert_escaped(plain.getvalue())
    assert "#8 [stage-0 5/7] RUN echo \\x1b]0;owned\\x07" in plain.getvalue()
    assert "step failed \\x1b]0;owned\\x07[bold]" in plain.getvalue()

    live = Console(file=io.StringIO(), width=200, force_terminal=True, record=True)
    with LiveDisplay(live) as display:
        display.started("t1")
        display.line("t1", "#9 [stage-0 6/7] RUN echo [/] [bold red]x[/bold red] :fire:")
        display.live.refresh()
        shown = live.export_text(clear=False)
        display.finished(result)
        display.step("t1", f"pushed {CLIPBOARD}{BIDI}")  # after its build: a line of its own
    # the live table showed the step as written: brackets and emoji codes included
    assert "[stage-0 6/7] RUN echo [/] [bold red]x[/bold red] :fire:" in shown
    printed = live.export_text()
    assert_escaped(printed)
    assert "t1: pushed \\x1b]52;c;Y3VybCB4fHNo\\x07\\u202egnp.\\u202d" in printed


def test_say_escapes_everything_but_its_own_line_breaks():
    out = io.StringIO()
    say(Console(file=out, width=200), f"first [b]line[/b] {RED}\nsecond\u2028line\r")
    assert out.getvalue() == "first [b]line[/b] \\x1b[31m\nsecond\\u2028line\\r\n"


def test_a_matrix_file_named_with_escape_sequences_is_shown_escaped(cli, tmp_path):
    """A file name is the one part of a matrix no grammar checks: `matrix show` once crashed on an ESC in it (tomlkit
    refuses one in a comment) and `matrix validate --format github` printed it raw."""
    good = tmp_path / f"team{CLIPBOARD}{BIDI}.toml"
    good.write_text('extends = "default"\nregistry = "registry.example"\n')
    shown = cli("matrix", "show", "--matrix", good)
    assert shown.code == 0 and "Traceback" not in shown.err and "internal error" not in shown.err, shown.err
    assert_escaped(shown.out)
    assert 'registry = "registry.example" # ' in shown.out and "team\\x1b]52;c;Y3VybCB4fHNo\\x07\\u202egnp.\\u202d.toml" in shown.out
    bad = tmp_path / f"bad{RED}{BIDI}.toml"
    bad.write_text('extends = "default"\nregistry = 5\n')
    for format in ("text", "github"):
        result = cli("matrix", "validate", "--format", format, "--matrix", bad)
        assert result.code == 2 and "Traceback" not in result.err
        assert_escaped(result.out + result.err)
        assert "bad\\x1b[31m\\u202egnp.\\u202d.toml" in result.out + result.err
