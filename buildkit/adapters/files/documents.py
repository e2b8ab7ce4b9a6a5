"""The JSON documents `buildkit report` reads: files, or every *.json below a folder.

Each is read as a regular file of bounded size and parsed; what cannot be read or parsed is one message naming
the file."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.inputs import NotReadable, read_regular
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

DOCUMENT_LIMIT = 64 * 1024 * 1024  # an SBOM of a large image is a few MB; a report of 10,000 targets about 40 MB


def _files(path: Path, option: str) -> Iterator[Path]:
    if path.is_dir():
        for folder, subfolders, names in os.walk(path):  # links to folders are not followed
            subfolders.sort()
            yield from (Path(folder) / name for name in sorted(names) if name.endswith(".json"))
    elif path.exists() or path.is_symlink():
        yield path
    else:
        raise UserError(Problem(option, f"{path}: no such file or folder; name a report, a folder of them, or leave {option} out"))


def read_documents(paths: Sequence[Path], option: str) -> list[tuple[str, Any]]:
    """(file name, parsed JSON) of every document the paths name, folders in name order."""
    documents = []
    for path in paths:
        for file in _files(path, option):
            try:
                data = read_regular(file, DOCUMENT_LIMIT)
            except NotReadable as error:
                raise UserError(Problem(str(file), f"cannot be read as a report: it {error.reason}")) from None
            try:
                documents.append((str(file), json.loads(data)))
            except ValueError as error:  # JSONDecodeError, and bytes that are no UTF-8
                where = f" (line {error.lineno}, column {error.colno})" if isinstance(error, json.JSONDecodeError) else ""
                raise UserError(
                    Problem(str(file), f"is not JSON{where}: a report cut short, or another file; write it again with the command that made it")
                ) from None
    return documents
