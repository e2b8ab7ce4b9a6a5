"""Every bad matrix gets exit code 2 and each of its expected messages, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = sorted((Path(__file__).parent / "bad_matrices").glob("*.toml"))


def expectations(path: Path) -> list[str]:
    return [line.split("# expect:", 1)[1].strip() for line in path.read_text().splitlines() if line.startswith("# expect:")]


def test_corpus_is_not_empty():
    assert len(CORPUS) >= 20
    assert all(expectations(path) for path in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_matrix_is_reported(cli, path, monkeypatch):
    monkeypatch.chdir(path.parent.parent.parent.parent)  # repo root: messages name the file relative to it
    result = cli("matrix", "validate", "--matrix", path)
    assert result.code == 2, result.out
    assert "Traceback" not in result.err
    assert result.out == ""
    for expected in expectations(path):
        assert expected in result.err, f"missing {expected!r} in:\n{result.err}"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_matrix_renders_nothing(cli, path, tmp_path):
    result = cli("render", "--matrix", path, "--out", tmp_path / "dist")
    assert result.code == 2
    assert not (tmp_path / "dist").exists()
