"""The templates a matrix can use, as the file loader read them.

The team's folders first, then the built-in ones, each name taken from the first folder that has it.

Every template is read once, before anything is parsed or rendered (buildkit.adapters.files.matrix), so
rendering reads nothing more and a render worker gets the whole set at once. A file that cannot be a
template (a FIFO, a link out of its folder, an oversized or undecodable file) keeps its place in the set
with the problem it has: using it is that error, and it never lets the next folder's file of that name in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import jinja2
import jinja2.nodes

from buildkit.core.matrix.fields import did_you_mean
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

FLAVOR_SUFFIX = ".Dockerfile.j2"  # a flavor's template: runtime.Dockerfile.j2 (buildkit.core.render.planned.template_name)
# The folder a team reaches for when it writes templates: read only when template_dir names it (there is no
# default), so one beside a matrix that sets no template_dir is a warning, and a missing flavor names it.
UNREAD_FOLDER = "templates"


@dataclass(frozen=True)
class TemplateFile:
    name: str  # as templates name it: "runtime.Dockerfile.j2", "parts/apt.j2"
    filename: str  # as messages name it
    text: str = ""
    builtin: bool = False  # shipped with buildkit, so trusted code; a team's template is not
    problem: Problem | None = None  # why the file cannot be a template


class TemplateSet(jinja2.BaseLoader):
    """A Jinja loader over templates already read."""

    def __init__(self, files: Iterable[TemplateFile]) -> None:
        self.files: Mapping[str, TemplateFile] = {file.name: file for file in files}

    def get_source(self, environment: jinja2.Environment, template: str) -> tuple[str, str, Callable[[], bool]]:
        found = self.files.get(template)
        if found is None:
            raise jinja2.TemplateNotFound(template)
        if found.problem is not None:
            raise UserError(found.problem)
        return found.text, found.filename, lambda: True  # read once: never stale

    def flavors(self) -> frozenset[str]:
        """FLAVOR.Dockerfile.j2 at the top of a template folder; names starting with _ are parts that flavors
        extend, not flavors."""
        return frozenset(
            name.removesuffix(FLAVOR_SUFFIX) for name in self.files if name.endswith(FLAVOR_SUFFIX) and "/" not in name and not name.startswith("_")
        )

    def builtin(self, names: Iterable[str]) -> bool:
        """Whether every one of these templates is buildkit's own."""
        return all(name in self.files and self.files[name].builtin for name in names)

    def undefined_blocks(self) -> list[Problem]:
        """Blocks a team template fills that no template it extends defines: Jinja drops them without a word (a
        misspelled `{% block extar %}` is an image without the team's lines), so each is a problem naming the
        blocks there are. A template that does not parse, or extends a computed name, is left to the renderer,
        which says what is wrong with it where it is used. Each template is parsed, and its blocks collected,
        once: team flavors share their parents, so the work grows with the templates, not with flavors x parents."""
        environment = jinja2.Environment(loader=self)
        trees: dict[str, jinja2.nodes.Template | None] = {}
        defined: dict[str, set[str] | None] = {}  # template -> every block it and what it extends define (None: unreadable)

        def tree_of(file: TemplateFile) -> jinja2.nodes.Template | None:
            if file.name not in trees:
                trees[file.name] = _parse(environment, file)
            return trees[file.name]

        problems = []
        for file in self.files.values():
            if file.builtin or file.problem is not None or "block" not in file.text or "extends" not in file.text:
                continue  # a cheap look first: most team templates fill no block
            tree = tree_of(file)
            parents = _extended(tree) if tree is not None else None
            if tree is None or not parents:
                continue
            above = self._defined_blocks(tree_of, defined, parents)
            if above is None:
                continue
            for block in _outer_blocks(tree):
                if block.name not in above:
                    problems.append(
                        Problem(
                            file.filename,
                            f"block {block.name!r} is not defined by {' or '.join(parents)} or what it "
                            f"extends, so it would be dropped without a word; blocks to fill: "
                            f"{', '.join(sorted(above))}{did_you_mean(block.name, above)}",
                            line=block.lineno,
                        )
                    )
        return problems

    def _defined_blocks(
        self, tree_of: Callable[[TemplateFile], jinja2.nodes.Template | None], known: dict[str, set[str] | None], names: Iterable[str]
    ) -> set[str] | None:
        """Every block the named templates and the templates they extend define (None: one cannot be read, or they
        extend themselves), each template's answer kept in `known`. A walk with a stack of its own, not recursion:
        a chain of templates each extending the next is as long as the folder is large."""
        stack, pending = list(names), set()
        while stack:
            name = stack[-1]
            if name in known:
                stack.pop()
                continue
            tree, parents = self._parsed(tree_of, name)
            if name not in pending:  # first visit: its parents are answered first
                pending.add(name)
                waiting = [parent for parent in parents or () if parent not in known]
                if any(parent in pending for parent in waiting):  # it extends itself, through its parents
                    known[name] = None
                    stack.pop()
                else:
                    stack += waiting
                continue
            stack.pop()
            answers = [known.get(parent) for parent in parents or ()]
            read = [answer for answer in answers if answer is not None]
            known[name] = (
                None
                if tree is None or parents is None or len(read) < len(answers)
                else {block.name for block in tree.find_all(jinja2.nodes.Block)}.union(*read)
            )
        found: set[str] = set()
        for name in names:
            answer = known.get(name)
            if answer is None:
                return None
            found |= answer
        return found

    def _parsed(self, tree_of: Callable[[TemplateFile], jinja2.nodes.Template | None], name: str) -> tuple[jinja2.nodes.Template | None, list[str] | None]:
        file = self.files.get(name)
        tree = tree_of(file) if file is not None and file.problem is None else None
        return tree, _extended(tree) if tree is not None else None


def _parse(environment: jinja2.Environment, file: TemplateFile) -> jinja2.nodes.Template | None:
    try:
        return environment.parse(file.text, file.name, file.filename)
    except (jinja2.TemplateSyntaxError, RecursionError):  # RecursionError: thousands of nested brackets
        return None


def _extended(tree: jinja2.nodes.Template) -> list[str] | None:
    """The templates a template extends (none: it extends nothing), or None where a name is computed."""
    names = [node.template for node in tree.find_all(jinja2.nodes.Extends)]
    values = [name.value for name in names if isinstance(name, jinja2.nodes.Const) and isinstance(name.value, str)]
    if len(values) < len(names):
        return None
    return list(dict.fromkeys(values))


def _outer_blocks(node: jinja2.nodes.Node) -> Iterator[jinja2.nodes.Block]:
    """The blocks a template fills: those not inside another block (a block inside one is that block's part)."""
    for child in node.iter_child_nodes():
        if isinstance(child, jinja2.nodes.Block):
            yield child
        else:
            yield from _outer_blocks(child)
