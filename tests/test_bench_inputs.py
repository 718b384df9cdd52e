"""Bad inputs of the live bench scripts: one error line and exit 2 before any work."""

from __future__ import annotations

import pytest
from bench_helpers import load_bench


def test_bad_inputs_of_the_answers_and_generation_checks_benchmarks(tmp_path, capsys):
    """A --set that is not a generated question set, an unknown --llm: one error line and
    exit 2 before any work, not a traceback."""
    with pytest.raises(SystemExit) as exc:
        load_bench("bench_answers").main(["measure", "--set", str(tmp_path)])
    assert exc.value.code == 2 and "not a generated question set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        load_bench("bench_generation_checks").main(["--no-write", "--llm", "llamacpp:nope"])
    assert exc.value.code == 2 and "--llm: unknown LLM model 'nope'" in capsys.readouterr().err
