"""The CLI end to end: exit codes, one-line errors, JSON, passes table, demo, version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures_onnx import assert_bit_identical, mlp_feeds, run_ort

from memshrink import __version__
from memshrink.cli import main


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "memshrink.cli", *args], capture_output=True, text=True, timeout=300
    )


def test_optimize_writes_report_and_equal_outputs(mlp_path: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code = main(
        [
            "optimize",
            str(mlp_path),
            str(out),
            "--passes",
            "safe",
            "--check",
            "--json",
            str(report),
            "-q",
        ]
    )
    assert code == 0
    data = json.loads(report.read_text())
    assert data["pipeline"] == [
        "inline-functions",
        "prune",
        "dedup-weights",
        "inplace",
        "reorder",
        "external-data",
        "ep-compat",
    ]
    assert data["weights_after"] < data["weights_before"]
    assert data["save"]["data_path"] == str(out) + ".data"
    assert all(p["stats"].get("checked") for p in data["passes"] if p["modified"])
    assert_bit_identical(run_ort(mlp_path, mlp_feeds()), run_ort(out, mlp_feeds()))


def test_optimize_prints_table(mlp_path: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert (
        main(
            [
                "optimize",
                str(mlp_path),
                str(tmp_path / "o.onnx"),
                "--passes",
                "prune",
                "--no-estimate",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "prune" in captured.out and "nodes_removed=2" in captured.out
    assert "[1/1] prune" in captured.err


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["optimize", "{in}", "{in}"], 2, "output path is the input path"),
        (["optimize", "{in}", "{tmp}/o.onnx", "--passes", "nope"], 2, "unknown pass(es) nope"),
        (["optimize", "{tmp}/missing.onnx", "{tmp}/o.onnx"], 6, "no such file"),
        (["optimize", "{in}", "{tmp}/nodir/o.onnx"], 7, "does not exist"),
        (["optimize", "{in}", "{tmp}/o.onnx", "-O", "prune"], 2, "bad -O"),
        (
            [
                "optimize",
                "{in}",
                "{tmp}/o.onnx",
                "--passes",
                "safe",
                "-O",
                "external-data.threshold=big",
            ],
            2,
            "expected int",
        ),
    ],
)
def test_errors_are_one_line_with_exit_codes(
    mlp_path: Path, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    before = mlp_path.read_bytes()
    argv = [a.format(**{"in": mlp_path, "tmp": tmp_path}) for a in args]
    proc = _cli(*argv)
    assert proc.returncode == code, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("memshrink: error:")]
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert mlp_path.read_bytes() == before
    assert not (tmp_path / "o.onnx").exists()


def test_truncated_input_cli(tmp_path: Path, mlp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(mlp_path.read_bytes()[:100])
    proc = _cli("optimize", str(bad), str(tmp_path / "o.onnx"))
    assert proc.returncode == 6 and "truncated or not an ONNX model" in proc.stderr
    proc = _cli("--debug", "optimize", str(bad), str(tmp_path / "o.onnx"))
    assert "Traceback" in proc.stderr


def test_passes_listing_and_json(capsys) -> None:  # noqa: ANN001
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    for name in ("prune", "dedup-weights", "external-data", "simplify", "all", "safe"):
        assert name in out
    assert main(["passes", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = {p["name"] for p in data["passes"]}
    assert {"prune", "external-data"} <= names
    assert data["presets"]["safe"]["passes"]


def test_version_and_help() -> None:
    proc = _cli("--version")
    assert proc.returncode == 0 and __version__ in proc.stdout
    proc = _cli("optimize", "--help")
    assert proc.returncode == 0 and "examples:" in proc.stdout
    proc = _cli()
    assert proc.returncode == 2


def test_demo_runs(tmp_path: Path) -> None:
    proc = _cli("demo", "--out", str(tmp_path), "--passes", "safe")
    assert proc.returncode == 0, proc.stderr
    assert "demo.small.onnx" in proc.stdout
    src, dst = tmp_path / "demo.onnx", tmp_path / "demo.small.onnx"
    assert dst.stat().st_size + Path(str(dst) + ".data").stat().st_size < src.stat().st_size
    import numpy as np

    feeds = {"input_ids": np.arange(64, dtype=np.int64).reshape(1, 64)}
    assert_bit_identical(run_ort(src, feeds), run_ort(dst, feeds))
    assert "rm -r" not in proc.stdout  # the user's own folder: no clean-up hint


def test_demo_in_a_temp_folder_says_it_stays(tmp_path: Path) -> None:
    """Without --out the demo's 32 MiB go to a temp folder that stays for the printed ``next:``
    command: the last line says where and how to remove it (QA session 15)."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "memshrink.cli", "demo", "--passes", "safe"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [p for p in tmp_path.iterdir() if p.name.startswith("memshrink-demo-")]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith(f"the demo's files stay in {folder} (") and f"rm -r {folder}" in last


def test_demo_on_a_full_disk_is_a_one_line_error_and_leaves_no_model(tmp_path: Path) -> None:
    """QA session 11: ``demo --out`` on a full tmpfs printed "internal error: OSError: [Errno
    28]" (exit 1) and left a partial demo.onnx; a 1 MB file-size limit stands in for the disk."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    out = tmp_path / "d"
    proc = subprocess.run(
        [sys.executable, "-m", "memshrink.cli", "demo", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )
    assert proc.returncode == 7, proc.stderr
    assert "out of disk space" in proc.stderr and "demo.onnx" in proc.stderr
    # the folder the demo made itself goes too (QA session 15)
    assert "Traceback" not in proc.stderr and not out.exists()
    (tmp_path / "file").write_text("x")
    code = main(["demo", "--out", str(tmp_path / "file" / "d")])  # a file where a folder goes
    assert code == 7


def test_verify_failure_names_what_failed_in_one_line(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A CI log's last line says which output broke which tolerance, and which budget."""
    import onnx
    from fixtures_onnx import build_mlp

    ref, other = tmp_path / "ref.onnx", tmp_path / "other.onnx"
    onnx.save_model(build_mlp(seed=0, extras=False), ref)
    onnx.save_model(build_mlp(seed=1, extras=False), other)  # different weights: y differs
    code = main(["verify", str(ref), str(other), "--quiet", "--max-peak", "1MiB", "--atol", "1e-3"])
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert code == 3
    assert last.startswith("Result: MISMATCH (exit 3): cpu output y: ")
    assert "elements differ by more than atol 0.001 + rtol 1e-05*|ref|" in last
    assert "cpu process peak" in last and "> --max-peak 1.0 MiB" in last


def test_estimate_text_is_readable_and_verbose_adds_internals(mlp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["estimate", str(mlp_path)]) == 0
    plain = capsys.readouterr().out
    assert plain.startswith("memshrink estimate: mlp.onnx on ONNX Runtime CPU (--backend ort)")
    assert "assumed: execution order ort_default; inputs x[4, 128]" in plain
    assert "more assumptions: --verbose" in plain and "planners" not in plain
    assert main(["estimate", str(mlp_path), "--verbose"]) == 0
    verbose = capsys.readouterr().out
    assert "planners (activations" in verbose and "  - execution order: ort_default" in verbose


def test_optimize_rejects_an_unknown_backend(mlp_path: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["optimize", str(mlp_path), str(tmp_path / "o.onnx"), "--backend", "gpu"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "{in}", "--json", "{in}"],
        ["estimate", "{in}", "--plot", "{in}"],
        ["verify", "{in}", "{in}", "--json", "{in}"],
        ["optimize", "{in}", "{tmp}/o.onnx", "--json", "{in}"],
        ["optimize", "{in}", "{tmp}/o.onnx", "--json", "{tmp}/o.onnx"],
    ],
)
def test_a_report_never_overwrites_a_model(
    mlp_path: Path,
    tmp_path: Path,
    args: list[str],
    capsys,  # noqa: ANN001
) -> None:
    """`--json model.onnx` is refused before any work; the model's bytes stay as they were."""
    before = mlp_path.read_bytes()
    argv = [a.format(**{"in": mlp_path, "tmp": tmp_path}) for a in args]
    assert main(argv) == 2
    assert "choose another" in capsys.readouterr().err
    assert mlp_path.read_bytes() == before and not (tmp_path / "o.onnx").exists()


@pytest.mark.parametrize("cmd", ["estimate", "optimize-in", "optimize-out"])
def test_a_report_never_replaces_a_sidecar(
    mlp_path: Path,
    tmp_path: Path,
    cmd: str,
    capsys,  # noqa: ANN001
) -> None:
    """``MODEL.onnx.json`` is valid JSON like a report, but it is the model's sidecar: ``--json
    in.onnx.json`` replaced the input's (QA session 11), ``--json out.onnx.json`` raced the
    sidecar that optimize writes there."""
    src = tmp_path / "in.onnx"
    src.write_bytes(mlp_path.read_bytes())
    side = tmp_path / "in.onnx.json"
    side.write_text('{"inputs": []}\n')
    argv = {
        "estimate": ["estimate", str(src), "--json", str(side)],
        "optimize-in": ["optimize", str(src), str(tmp_path / "o.onnx"), "--json", str(side)],
        "optimize-out": [
            "optimize",
            str(src),
            str(tmp_path / "o.onnx"),
            "--json",
            str(tmp_path / "o.onnx.json"),
        ],
    }[cmd]
    assert main(argv) == 2
    assert "choose another" in capsys.readouterr().err
    assert side.read_text() == '{"inputs": []}\n' and not (tmp_path / "o.onnx").exists()


def test_a_json_report_is_overwritten(mlp_path: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text('{"old": true}\n')
    assert main(["estimate", str(mlp_path), "--json", str(report)]) == 0
    assert '"backend": "ort"' in report.read_text()


@pytest.mark.parametrize("verify", [[], ["--verify", "cpu"]])
def test_optimize_json_dash_prints_json_alone(
    mlp_path: Path, tmp_path: Path, verify: list[str]
) -> None:
    """``optimize --json - > r.json`` is JSON only (QA session 14: the pass table and, with
    --verify, verify's table came first on stdout); progress stays on stderr."""
    r = _cli("optimize", str(mlp_path), str(tmp_path / "o.onnx"), "--passes", "safe", *verify,
             "--json", "-")  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["output"] == str(tmp_path / "o.onnx")
    assert (data["verify"] is not None) == bool(verify)
    assert "[1/" in r.stderr  # the progress lines are not lost, only kept off stdout
    # the same keys whatever ran: null where a key does not apply
    bare = _cli("optimize", str(mlp_path), str(tmp_path / "p.onnx"), "--passes", "prune",
                "--no-estimate", "--json", "-")  # fmt: skip
    assert sorted(json.loads(bare.stdout)) == sorted(data)


def test_a_reader_that_leaves_early_is_not_an_internal_error(tmp_path: Path) -> None:
    """``memshrink passes | head -1`` when head has gone before the table is printed: was
    "memshrink: internal error: BrokenPipeError" (QA session 14); now silent, exit 141
    (128 + SIGPIPE, as a shell reports a tool the pipe stopped)."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before anything is written
    with open(write_end, "wb") as out:
        r = subprocess.run(
            [sys.executable, "-m", "memshrink.cli", "passes"],
            stdout=out, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    assert r.returncode == 141
    assert r.stderr == ""


@pytest.mark.parametrize(
    ("dims", "says"),
    [
        (["foo=3", "batch=1", "h8=2"], "--dim foo: no input of the model has such a dim; its symbols are: batch, 8*h8, h8"),
        (["batch=1", "8*h8=30"], "--dim 8*h8=30: the model's dim 8*h8 is a multiple of 8"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["optimize", "estimate"])
def test_a_dim_the_model_cannot_take_is_exit_2(
    command: str, dims: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """QA session 14: both were accepted without a word (the first bound nothing, the second fed
    30 to a dim the exporter declared a multiple of 8); nothing is written."""
    import onnx
    from onnx import TensorProto, helper

    shape = ["batch", 3, "8*h8"]
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    args = [command, str(src)] + ([str(tmp_path / "o.onnx")] if command == "optimize" else [])
    assert main([*args, *(f"--dim={d}" for d in dims)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_an_unanticipated_full_disk_is_exit_7(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A write no command wraps (QA session 15: a full TMPDIR) is the disk's fault: one line,
    exit 7, not "internal error" (exit 1); other OSErrors stay internal errors."""
    import errno

    import memshrink.commands as commands

    def full(args: object) -> int:
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/x/feeds.npz")

    monkeypatch.setattr(commands, "cmd_passes", full)
    assert main(["passes"]) == 7
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "memshrink: error: out of disk space (or file size limit) while writing /tmp/x/feeds.npz"
    ]

    def other(args: object) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(commands, "cmd_passes", other)
    assert main(["passes"]) == 1
    assert "internal error: OSError" in capsys.readouterr().err


def test_a_failed_demo_removes_the_folder_it_made(tmp_path: Path) -> None:
    """QA session 15: on a full disk ``demo --out DIR`` left DIR (empty, or with the 16 MiB
    demo.onnx) though it said "nothing written". A file-size limit (``ulimit -f``) of 4 MiB
    fails the demo model's write as a full disk does; a folder the user had is kept."""
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))

    made, had = tmp_path / "demo", tmp_path / "had"
    had.mkdir()
    for out in (made, had):
        proc = subprocess.run(
            [sys.executable, "-m", "memshrink.cli", "demo", "--out", str(out)],
            capture_output=True, text=True, timeout=300, preexec_fn=limit,
        )  # fmt: skip
        assert proc.returncode == 7, proc.stderr[-2000:]
        assert (
            proc.stderr.strip().splitlines()[-1].startswith("memshrink: error: out of disk space")
        )
    assert not made.exists()
    assert had.is_dir() and not [p.name for p in had.iterdir() if not p.name.startswith(".")]
