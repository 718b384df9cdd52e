"""``intentrank serve`` without the service extra: refused with the extra named, before the
settings load or the default index is built."""

from __future__ import annotations

import sys

import pytest


@pytest.mark.parametrize("missing", ["uvicorn", "fastapi"])
def test_serve_names_the_missing_extra_before_building_the_default_index(
        missing, data_dir, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import intentrank.service.command as command
    from intentrank.cli import app

    monkeypatch.chdir(tmp_path)  # the default index would go to ./indexes/<dataset>
    monkeypatch.setitem(sys.modules, missing, None)  # importing it raises ImportError
    monkeypatch.setattr(command, "build_settings",
                        lambda *a, **k: pytest.fail("the settings were built"))
    r = CliRunner().invoke(app, ["serve", "--dataset", str(data_dir / "cranfield")])
    assert r.exit_code == 2, r.output
    assert f"intentrank serve needs '{missing}', which is not installed" in r.output
    assert "pip install 'intentrank[service]'" in r.output
    assert not (tmp_path / "indexes").exists()
