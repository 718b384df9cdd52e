"""Where intentrank looks for data (one definition, ``paths.default_data_dir``) and that the
shipped package files name no path of the machine they were made on."""

from __future__ import annotations

from pathlib import Path

import pytest

import intentrank
from intentrank.data.conversations import cast_root
from intentrank.errors import DataError
from intentrank.paths import default_data_dir

PACKAGE = Path(intentrank.__file__).resolve().parent


def test_default_data_dir_is_intentrank_data_else_beside_the_working_directory(
        monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("INTENTRANK_DATA", str(tmp_path / "data"))
    assert default_data_dir() == tmp_path / "data"
    monkeypatch.setenv("INTENTRANK_DATA", "")  # empty: not set
    assert default_data_dir() == Path("../shared/data")
    monkeypatch.delenv("INTENTRANK_DATA")
    assert default_data_dir() == Path("../shared/data")


def test_cast_root_follows_the_working_directory_not_the_source_file(monkeypatch, tmp_path
                                                                      ) -> None:
    monkeypatch.delenv("INTENTRANK_DATA", raising=False)
    (tmp_path / "shared" / "data" / "trec-cast").mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    assert cast_root().resolve() == (tmp_path / "shared" / "data" / "trec-cast").resolve()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match="TREC CAsT directory not found"):
        cast_root()


def test_the_data_location_is_defined_once() -> None:
    spelled = ('environ.get("INTENTRANK_DATA"', 'environ["INTENTRANK_DATA"]',
               '"../shared/data"', '"shared" / "data"')
    found = [f"{path.relative_to(PACKAGE)}: {s}" for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "paths.py" for s in spelled if s in path.read_text()]
    assert not found, "\n".join(found)


def test_shipped_files_name_no_machine_path() -> None:
    found = [f"{path.relative_to(PACKAGE)}: {home.decode()}"
             for path in sorted(PACKAGE.rglob("*"))
             if path.is_file() and "__pycache__" not in path.parts
             for home in (b"/work/", b"/home/", b"/root/") if home in path.read_bytes()]
    assert not found, "\n".join(found)


def test_training_records_name_the_base_model_without_a_path(tmp_path) -> None:
    from intentrank.training.run import BUNDLED_BASE, base_model_record

    local = tmp_path / "my-minilm"
    local.mkdir()
    assert base_model_record(None) == BUNDLED_BASE
    assert base_model_record(str(local)) == "my-minilm"
    assert base_model_record("cross-encoder/ms-marco-MiniLM-L-6-v2") == \
        "cross-encoder/ms-marco-MiniLM-L-6-v2"
