"""The templates a matrix can use, as the file loader read them: the team's folders first, then the built-in
ones, each name taken from the first folder that has it.

Every template is read once, before anything is parsed or rendered (buildkit.adapters.matrix_files), so
rendering reads nothing more and a render worker gets the whole set at once. A file that cannot be a
template (a FIFO, a link out of its folder, an oversized or undecodable file) keeps its place in the set
with the problem it has: using it is that error, and it never lets the next folder's file of that name in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import jinja2

from buildkit.errors import Problem, UserError

FLAVOR_SUFFIX = ".Dockerfile.j2"  # a flavor's template: runtime.Dockerfile.j2 (buildkit.core.render.template_name)


@dataclass(frozen=True)
class TemplateFile:
    name: str  # as templates name it: "runtime.Dockerfile.j2", "parts/apt.j2"
    filename: str  # as messages name it
    text: str = ""
    builtin: bool = False  # shipped with buildkit, so trusted code; a team's template is not
    problem: Problem | None = None  # why the file cannot be a template


class TemplateSet(jinja2.BaseLoader):
    """A Jinja loader over templates already read."""

    def __init__(self, files: Iterable[TemplateFile]):
        self.files: Mapping[str, TemplateFile] = {file.name: file for file in files}

    def get_source(self, environment: jinja2.Environment, template: str):
        found = self.files.get(template)
        if found is None:
            raise jinja2.TemplateNotFound(template)
        if found.problem is not None:
            raise UserError(found.problem)
        return found.text, found.filename, lambda: True  # read once: never stale

    def flavors(self) -> frozenset[str]:
        """FLAVOR.Dockerfile.j2 at the top of a template folder; names starting with _ are parts that flavors
        extend, not flavors."""
        return frozenset(name.removesuffix(FLAVOR_SUFFIX) for name in self.files
                         if name.endswith(FLAVOR_SUFFIX) and "/" not in name and not name.startswith("_"))

    def builtin(self, names: Iterable[str]) -> bool:
        """Whether every one of these templates is buildkit's own."""
        return all(name in self.files and self.files[name].builtin for name in names)
