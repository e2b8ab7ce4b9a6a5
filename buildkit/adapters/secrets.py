"""Private index settings and CA bundles, handed to BuildKit as secrets and redacted everywhere else.

They never become build args, ENV or labels: a pip.conf (given, or written here from --index-url /
--extra-index-url into a private temporary folder) and a CA bundle are mounted only into the RUN steps that
run pip. Every credential found in them is registered with the Redactor that filters logs and reports.
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from buildkit.adapters.files.inputs import read_input
from buildkit.errors import REDACTED, Problem, UserError, redact_urls

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

# The user-info ends at the LAST "@" before the path, as URL parsers (and pip) read it: a password with an
# unencoded "@" ("https://user:p@ss@host/") is all of "user:p@ss", not "user:p".
_USERINFO_RE = re.compile(r"://([^/\s]+)@")
PIP_CONF_SECRET = "pip_conf"
CA_BUNDLE_SECRET = "ca_bundle"
MAX_SETTINGS_BYTES = 16 * 1024 * 1024  # a pip.conf is lines; a CA bundle of every public root is about 250 KB


class Redactor:
    """Replaces secret values (passwords, tokens) in any text before it is logged or reported, and the
    user-info of every URL in it (errors.redact_urls), whether or not it is a known secret."""

    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, REDACTED)
        return redact_urls(text)


@dataclass(frozen=True)
class IndexSettings:
    pip_conf: Path | None = None
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    ca_bundle: Path | None = None


def credentials_in(text: str) -> list[str]:
    """The user-info of every URL in a text, whole, and its user name and password (tokens often sit in
    the user name), each also percent-decoded as pip decodes them; the password is split at the first ":"
    only, so a password containing ":" is covered whole."""
    found = []
    for userinfo in _USERINFO_RE.findall(text):
        found.append(userinfo)  # whole, however short
        user, _, password = userinfo.partition(":")
        for value in (userinfo, user, password):
            found.extend(v for v in (value, unquote(value)) if len(v) >= 4)
    return found


def _parse_error(path: Path, error: configparser.Error) -> str:
    """What is wrong with a pip.conf, by line number and names only: configparser's own messages quote the
    offending line, and that line is where an index URL carries its token."""
    lineno = getattr(error, "lineno", None)
    where = f"{path}:{lineno}" if lineno else str(path)
    if isinstance(error, configparser.MissingSectionHeaderError):
        return f"{where}: a setting before any section header; pip.conf starts with [global]"
    if isinstance(error, configparser.ParsingError):
        lines = ", ".join(str(number) for number, _ in error.errors[:5])
        return f"{path}: line(s) {lines} are neither a setting (name = value) nor a [section]"
    if isinstance(error, configparser.DuplicateOptionError):
        return f"{where}: setting {error.option!r} appears twice in [{error.section}]"
    if isinstance(error, configparser.DuplicateSectionError):
        return f"{where}: section [{error.section}] appears twice"
    return f"{where}: {type(error).__name__}"


def _check_url(option: str, url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UserError(Problem(option, "expected an http(s) index URL such as https://user:token@pypi.example.com/simple/"))


def _readable(option: str, path: Path, what: str) -> str:
    data = read_input(path, option, MAX_SETTINGS_BYTES, f"expected {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(Problem(option, f"cannot read {path}: not UTF-8 text (byte {error.start}); expected {what}")) from None


@contextmanager
def build_secrets(settings: IndexSettings) -> Iterator[tuple[dict[str, Path], Redactor]]:
    """Secret id -> file for BuildKit, and the redactor for everything logged or reported."""
    secrets: dict[str, Path] = {}
    sensitive: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="buildkit-secrets-"))
    os.chmod(folder, 0o700)
    try:
        if settings.pip_conf or settings.index_url or settings.extra_index_urls:
            config = configparser.ConfigParser(interpolation=None)
            if settings.pip_conf:
                text = _readable("--pip-conf", settings.pip_conf, "a pip configuration file")
                sensitive.extend(credentials_in(text))
                try:
                    config.read_string(text)
                except configparser.Error as error:
                    raise UserError(Problem("--pip-conf", f"not a pip configuration file: {_parse_error(settings.pip_conf, error)}")) from None
            if not config.has_section("global"):
                config.add_section("global")
            if settings.index_url:
                _check_url("--index-url", settings.index_url)
                config.set("global", "index-url", settings.index_url)
            if settings.extra_index_urls:
                for url in settings.extra_index_urls:
                    _check_url("--extra-index-url", url)
                config.set("global", "extra-index-url", "\n".join(settings.extra_index_urls))
            for url in (settings.index_url or "", *settings.extra_index_urls):
                sensitive.extend(credentials_in(url))
            path = folder / "pip.conf"
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w", encoding="utf-8") as handle:
                config.write(handle)
            secrets[PIP_CONF_SECRET] = path
        if settings.ca_bundle:
            _readable("--ca-bundle", settings.ca_bundle, "a PEM file of CA certificates")
            secrets[CA_BUNDLE_SECRET] = settings.ca_bundle.resolve()
        yield secrets, Redactor(sensitive)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
