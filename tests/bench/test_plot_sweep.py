"""bench/plot_sweep.py draws a sweep report (the committed H200 sweep) with
each plotter installed here, and refuses a report without a sweep."""
import importlib.util
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/plot_sweep.py"
REPORT = ROOT / "bench/results/bench_serve_small_h200.json"


def have(plotter):
    if plotter == "matplotlib":
        return importlib.util.find_spec("matplotlib") is not None
    return shutil.which("gnuplot") is not None


@pytest.mark.parametrize("plotter", ["matplotlib", "gnuplot"])
def test_draws_png(tmp_path, plotter):
    if not have(plotter):
        pytest.skip(f"{plotter} not installed")
    out = tmp_path / "sweep.png"
    subprocess.run([sys.executable, SCRIPT, REPORT, out, "--plotter", plotter], check=True)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20000  # three panels of lines and text, not an empty canvas


def test_inf_rate_is_labelled(tmp_path):
    if not have("matplotlib"):
        pytest.skip("matplotlib not installed")
    report = json.loads(REPORT.read_text())
    report["sweep"][-1]["request_rate"] = "inf"
    src = tmp_path / "r.json"
    src.write_text(json.dumps(report))
    spec = importlib.util.spec_from_file_location("plot_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _, labels, series = mod.load(str(src))
    assert labels[-1] == "inf (all at once)" and labels[0] == str(report["sweep"][0]["request_rate"])
    assert series["req_s"] == [r["requests_per_s"] for r in report["sweep"]]


def test_refuses_single_run(tmp_path):
    src = tmp_path / "single.json"
    src.write_text(json.dumps({"benchmark": "serve", "requests_per_s": 1.0}))
    r = subprocess.run([sys.executable, SCRIPT, src, tmp_path / "x.png"], capture_output=True, text=True)
    assert r.returncode != 0 and "no 'sweep'" in r.stderr
