"""``estimate``'s session options are checked before any prediction (QA session 14).

Before: a bad flag value read as "off" (``enable_mem_pattern=maybe`` predicted the pattern
off), a misspelt key or precision silently predicted the defaults, and
``memshrink.int_range=a`` was an internal error.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from fixtures_onnx import weight_chain

from memshrink.cli import main
from memshrink.errors import UsageError
from memshrink.estimate import estimate
from memshrink.estimate.session_options import check_session_options


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("so") / "m.onnx"
    onnx.save(weight_chain("MatMul", 2, (64, 64), [8, 64]), path)
    return path


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("enable_mem_pattern", "maybe", "expected one of 1, true"),
        ("memshrink.ov_plain_nodes", "abc", "expected one of 1, true"),
        ("memshrink.ovep_heap_regrowth", "2", "expected one of 1, true"),
        ("memshrink.ov_plain_node", "1", "did you mean memshrink.ov_plain_nodes?"),
        ("enable_mem_patern", "0", "did you mean enable_mem_pattern?"),
        ("execution_order", "FOO", "PRIORITY_BASED"),
        ("INFERENCE_PRECISION_HINT", "f33", "expected f32, bf16 or f16"),
        ("memshrink.int_range", "a", "expected LO,HI"),
        ("memshrink.int_range", "5,1", "expected LO < HI"),
        ("memshrink.generation", "foo", "max_length=N"),
        ("memshrink.generation", "max_length=abc", "max_length=N"),
        ("memshrink.generation", "max_length=0", "max_length=N"),
        ("memshrink.generation", "max_lenght=32", "unknown key 'max_lenght'"),
        ("memshrink.cuda_weight_orders", "-1", "integer >= 0"),
        ("memshrink.cuda_conv_workspace", "nan", "number >= 0"),
    ],
)
def test_bad_session_option_is_a_usage_error(
    model_path: Path, key: str, value: str, says: str
) -> None:
    with pytest.raises(UsageError) as info:
        estimate(str(model_path), backend="openvino", session_options={key: value})
    assert says in str(info.value)


@pytest.mark.parametrize(
    "opts",
    [
        {"enable_mem_pattern": "False", "execution_order": "PRIORITY_BASED"},
        {"memshrink.ov_plain_nodes": "1", "INFERENCE_PRECISION_HINT": "f32"},
        {"memshrink.generation": "max_length=32,num_beams=4", "memshrink.int_range": "0,64"},
        {"intra_op_num_threads": "1", "session.use_env_allocators": "1", "NUM_STREAMS": "1"},
        {"enable_cpu_mem_arena": True, "memshrink.hold_outputs": 0},
        {"graph_optimization_level": "ORT_ENABLE_EXTENDED", "execution_order": "DEFAULT"},
    ],
)
def test_good_and_unmodelled_session_options_pass(opts: dict[str, object]) -> None:
    check_session_options(opts)


def test_cli_says_one_line_exit_2(model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["estimate", str(model_path), "--session-option", "enable_mem_pattern=maybe"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == [
        "memshrink: error: session option enable_mem_pattern='maybe': expected one of "
        "1, true, yes, on, 0, false, no, off"
    ]


def test_every_estimator_option_constant_is_checked() -> None:
    """A ``memshrink.*`` option some estimator module defines must be known to the check, or
    ``estimate`` refuses the option its own docs name (merged branches add such keys)."""
    import re
    from pathlib import Path

    import memshrink.estimate as pkg
    from memshrink.estimate.session_options import CHECKS

    pattern = re.compile(r'^([A-Z_]+) = "(memshrink\.[a-z0-9_]+)"', re.MULTILINE)
    defined = {
        key
        for path in Path(pkg.__file__).parent.glob("*.py")
        for name, key in pattern.findall(path.read_text())
        if "META" not in name  # node metadata keys, not options
    }
    assert "memshrink.generation" in defined  # the scan sees the modules' constants
    assert sorted(defined - set(CHECKS)) == []
