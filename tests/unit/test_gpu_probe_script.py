"""bench/gpu_probe.py, the script a GPU machine runs without Docker: its judging half, on reports of the
probe's exact shape (test doubles: no GPU here). The probing half is the real probe, tested in test_probe."""

from __future__ import annotations

import json

import pytest

from bench import gpu_probe
from testkit.gpu_reports import gpu_report_double


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
def test_a_gpu_report_is_judged_as_an_image_of_its_backend(vendor, tmp_path, capsys):
    report = tmp_path / "probe.json"
    report.write_text(json.dumps(gpu_report_double(vendor)))
    assert gpu_probe.main(["--judge", str(report), "--out", str(tmp_path / "out")]) == 0
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    assert verdict["passed"] is True and verdict["kernels"] == "ran on 1 device(s)"
    assert "verdict: passed" in capsys.readouterr().out


def test_a_report_whose_kernels_ran_on_no_device_fails(tmp_path):
    report = gpu_report_double("nvidia")
    report["devices"] = []
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(report))
    assert gpu_probe.main(["--judge", str(path), "--out", str(tmp_path / "out")]) == 1
    assert json.loads((tmp_path / "out" / "verdict.json").read_text())["passed"] is False
