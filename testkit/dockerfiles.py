"""Reading rendered Dockerfiles in tests: their stages by name."""

from __future__ import annotations

import re


def stages(text: str) -> dict[str, str]:
    """Each stage's text by its name, in order (an unnamed stage is "runtime")."""
    named = {}
    for part in re.split(r"^FROM ", text, flags=re.M)[1:]:
        header = part.splitlines()[0]
        named[header.split(" AS ")[1] if " AS " in header else "runtime"] = "FROM " + part
    return named
