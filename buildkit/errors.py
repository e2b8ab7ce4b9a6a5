"""User-facing errors: each says what is wrong, where, and how to fix it.

The CLI turns a UserError into its message and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The user-info of a URL: from "scheme://" to the LAST "@" before the path, as URL parsers (and pip) read it,
# so a password with an unencoded "@" or ":" is covered whole. Quotes and brackets end it: a URL inside
# JSON or HTML does not swallow the text after it.
_USERINFO_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^\s/\"'<>]*@")
REDACTED = "****"


def printable(text: str, limit: int | None = 200) -> str:
    """Text from input (a key path, an error's text) as one short line: TOML keys and values can hold
    newlines, U+2028, control characters, 5,000 digits. `limit` None keeps its whole length."""
    if (limit is None or len(text) <= limit) and text.isprintable():
        return text
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return shown + "…" if limit is not None and len(text) > limit else shown


def redact_urls(text: str) -> str:
    """Text with the user-info of every URL in it replaced by ****: an index URL such as
    http://user:TOKEN@host/simple (PIP_INDEX_URL in CI) keeps its host and path, and loses its credentials.
    Every message, notice and report names URLs through this, whichever client they came through."""
    return _USERINFO_RE.sub(lambda found: f"{found.group(1)}{REDACTED}@", text) if "@" in text else text


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input, located as precisely as the input allows."""

    where: str  # a file, a command-line option or a service
    message: str
    key: str = ""  # key path inside the file, e.g. "torch[2].rocm[1]"
    line: int | None = None

    @property
    def location(self) -> str:
        return self.where if self.line is None else f"{self.where}:{self.line}"

    def __str__(self) -> str:
        text = f"{self.location}: {self.key}: {self.message}" if self.key else f"{self.location}: {self.message}"
        # One problem, one line: a file name, key or value from hostile input cannot break it or add a line;
        # and never a URL's credentials, whatever client or file the URL came from.
        return printable(redact_urls(text), limit=None)


class UserError(Exception):
    """Bad input or an unusable environment: reported without a traceback, exit code 2."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | Problem | str) -> None:
        if isinstance(problems, str):
            problems = [Problem("buildkit", problems)]
        elif isinstance(problems, Problem):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))
