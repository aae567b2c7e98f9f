"""The CLI: exit codes, JSON report, argument errors (real children, ORT CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memshrink.cli import main


@pytest.fixture
def pair(tmp_path: Path, embed_mlp):  # type: ignore[no-untyped-def]
    return embed_mlp(tmp_path / "a.onnx"), embed_mlp(tmp_path / "b.onnx", external=True)


def test_verify_ok_writes_json_and_plot(pair, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    rc = main(["verify", str(a), str(b), "--dim", "batch=2", "--runs", "2", "--quiet",
               "--json", str(out), "--plot", str(png)])  # fmt: skip
    assert rc == 0
    data = json.loads(out.read_text())
    assert data["exit_code"] == 0 and data["status"] == "ok"
    assert data["comparisons"][0]["outputs"][0]["name"] == "y"
    assert png.stat().st_size > 1000
    assert "Result: OK (exit 0)" in capsys.readouterr().out


def test_verify_mismatch_exit_3_and_tolerance_flag(tmp_path: Path, embed_mlp) -> None:  # type: ignore[no-untyped-def]
    a, b = embed_mlp(tmp_path / "a.onnx"), embed_mlp(tmp_path / "b.onnx", perturb=1e-2)
    assert main(["verify", str(a), str(b), "--dim", "batch=2", "--runs", "1", "--quiet"]) == 3
    # A loose per-output tolerance accepts the same change.
    loose = ["--tol", "y=1.0,0.0"]
    assert (
        main(["verify", str(a), str(b), "--dim", "batch=2", "--runs", "1", "--quiet", *loose]) == 0
    )


def test_usage_errors_exit_2(pair, capsys) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    assert main(["verify", str(a), str(b)]) == 2  # unbound batch
    assert "ids[0] ('batch')" in capsys.readouterr().err
    assert main(["verify", str(a), str(b), "--backends", "tpu", "--dim", "batch=1"]) == 2
    assert main(["verify", str(a), str(b), "--max-peak", "lots", "--dim", "batch=1"]) == 2


def test_profile_json_stdout(pair, capsys) -> None:  # type: ignore[no-untyped-def]
    a, _ = pair
    assert (
        main(["profile", str(a), "--dim", "batch=1", "--runs", "1", "--json", "-", "--quiet"]) == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "memshrink.profile"
    assert [s["name"] for s in data["runs"][0]["stages"]] == ["session", "run1"]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--tol", "logits=1e-4,1e-3"], "--tol logits: the model has no output named 'logits' "
         "(its outputs: y)"),
        (["--atol", "-1"], "--atol: a tolerance must be a finite number >= 0, got -1.0"),
        (["--tol", "y=nan,0"], "--tol y: a tolerance must be a finite number >= 0, got nan"),
    ],
)  # fmt: skip
def test_a_tolerance_that_cannot_apply_is_exit_2_before_any_run(pair, capsys, flags, says) -> None:  # type: ignore[no-untyped-def]
    """QA session 14: ``--tol`` for an output the model does not have was silently unused
    (every output compared at the defaults, exit 0); a negative or NaN tolerance failed
    every element (exit 3) instead of saying the flag is wrong."""
    a, b = pair
    rc = main(["verify", str(a), str(b), "--dim", "batch=1", "--runs", "1", *flags])
    captured = capsys.readouterr()
    assert rc == 2
    assert captured.err.strip().splitlines() == [f"memshrink: error: {says}"]
    assert "running" not in captured.err and captured.out == ""


def test_profile_json_has_status_and_exit_code_like_verify(pair, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """A script reads ``status`` / ``exit_code`` from either report (QA session 14: profile's
    had neither, and its table no verdict line)."""
    a, _ = pair
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(a.read_bytes())
    args = ["--dim", "batch=1", "--runs", "1", "--quiet", "--json", "-"]
    assert main(["profile", str(a), *args]) == 0
    ok = json.loads(capsys.readouterr().out)
    # ids out of the table's range: the run fails inside ORT (a backend failure, exit 5)
    assert main(["profile", str(bad), *args, "--int-range", "1000,1001"]) == 5
    failed = json.loads(capsys.readouterr().out)
    assert (ok["status"], ok["exit_code"], ok["ok"]) == ("ok", 0, True)
    assert (failed["status"], failed["exit_code"], failed["ok"]) == ("backend-failed", 5, False)
    assert list(ok) == list(failed)
    assert main(["profile", str(a), "--dim", "batch=1", "--runs", "1", "--quiet"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "Result: OK (exit 0)"
