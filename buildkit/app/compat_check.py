"""`buildkit compat check`: compat.toml against PyTorch's wheel index, and the change that makes them agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from buildkit.adapters.bundled import COMPAT_DATA, tomllib
from buildkit.adapters.regular_files import read_input
from buildkit.adapters.safe_files import write_atomic
from buildkit.adapters.wheel_index import WheelIndex, WheelIndexError
from buildkit.core.compat import compat_from_data
from buildkit.core.compat_check import Difference, IndexFacts, candidate_tags, compare, index_facts, propose, unified_diff
from buildkit.errors import Problem, UserError, printable

SHIPPED_LABEL = "buildkit/data/compat.toml"  # how the diff names the shipped file, wherever it is installed
# The tables compatibility data is made of: each holds one table per torch minor, backend version, gfx
# target..., which buildkit.core.compat reads by key. Anything else in their place is not compatibility data.
_TABLES_OF_TABLES = ("torch", "cuda", "rocm", "gfx")
_TABLES = ("wheel_index", "archs", "os_python", "parity", "gpus", "sources")
MAX_DATA_BYTES = 16 * 1024 * 1024  # the shipped data is tens of kilobytes


@dataclass(frozen=True)
class CheckOutcome:
    data_path: Path
    facts: IndexFacts
    differences: tuple[Difference, ...]
    diff: str  # the proposed change to the data file, as a unified diff ('' when nothing can be written)
    written: bool  # whether the change was applied to data_path

    @property
    def unwritable(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if not d.writable)

    @property
    def agrees(self) -> bool:
        """The data file, as it is now, matches the index."""
        return not self.differences or (self.written and not self.unwritable)


def _shape_problem(data: dict) -> str:
    """Why a parsed TOML document is not compatibility data ("" when its tables are where they belong)."""
    if isinstance(data.get("torch"), list):
        return "it has [[torch]] entries, so it is a matrix file"
    if not isinstance(data.get("torch"), dict) or not data["torch"]:
        return 'it has no [torch."X.Y"] tables'
    for name in (*_TABLES_OF_TABLES, *_TABLES):
        if name in data and not isinstance(data[name], dict):
            return f"its {name} is not a table"
    for name in _TABLES_OF_TABLES:
        for key, value in data.get(name, {}).items():
            if not isinstance(value, dict):
                return f'its {name}."{key}" is not a table'
    return ""


def check_compat(index_url: str | None = None, data_path: Path | None = None, write: bool = False) -> CheckOutcome:
    path = data_path or COMPAT_DATA
    raw = read_input(path, "--data", MAX_DATA_BYTES, f"--data takes compatibility data, a file shaped like {SHIPPED_LABEL}")
    try:
        text = raw.decode("utf-8")
        data = tomllib.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: TOMLDecodeError, 5,000-digit integers
        raise UserError(Problem("--data", f"cannot read {path} as compatibility data: {printable(str(error))}")) from None
    shape = _shape_problem(data)
    if shape:
        raise UserError(Problem(str(path), f"{shape}: --data takes compatibility data, a file shaped like {SHIPPED_LABEL} "
                                           "(to check a matrix, run `buildkit matrix validate --matrix FILE`)"))
    compat = compat_from_data(data)
    index = WheelIndex(index_url or compat.wheel_index)
    folders = candidate_tags(compat, index.root_folders())
    pages = index.torch_pages(folders)
    if not pages:
        raise WheelIndexError(Problem(index.shown, f"none of {len(folders)} variant folders (cu126/torch/, rocm7.2/torch/, ...) "
                                                 "has a torch page; is this a PyTorch wheel index?"))
    facts = index_facts(index.shown, folders, pages)
    differences = compare(compat, facts)
    proposed = propose(text, compat, facts) if any(d.writable for d in differences) else text
    # The shipped file's diff applies with `git apply` at the repository root; a --data file's names it as given.
    labels = (f"a/{SHIPPED_LABEL}", f"b/{SHIPPED_LABEL}") if data_path is None else (str(path), str(path))
    diff = unified_diff(text, proposed, *labels)
    if write and diff:
        write_atomic(path, proposed.encode("utf-8"), "--data")
    return CheckOutcome(path, facts, differences, diff, written=write and bool(diff))
