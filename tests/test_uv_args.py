"""scripts/uv_args.py: pip's package sources, as `pip config list` prints them, become the
uv options scripts/setup.sh passes to `uv pip install` (uv does not read pip's config)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "uv_args.py"
spec = importlib.util.spec_from_file_location("uv_args", SCRIPT)
uv_args = importlib.util.module_from_spec(spec)
spec.loader.exec_module(uv_args)


def test_pip_sources_become_uv_options_once_each():
    listed = "\n".join([
        ":env:.default-timeout='180'",
        ":env:.find-links='/opt/wheels'",
        ":env:.index-url='https://mirror.example/simple'",
        "global.cert='/etc/ssl/certs/ca-certificates.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'",
        "global.find-links='/opt/wheels'",  # the same folder again: listed once
        "global.index-url='https://pypi.org/simple'",  # the variable wins, as in pip
        "install.find-links='/srv/wheels'",
        "install.index-url='https://other.example/simple'",
        "not a config line",
    ])
    assert uv_args.uv_args(listed) == [
        "--find-links", "/opt/wheels",
        "--index-url", "https://mirror.example/simple",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/srv/wheels"]
    # without the variable: the install section's index overrides the global one, as in pip
    files_only = "global.index-url='https://pypi.org/simple'\n" \
                 "install.index-url='https://other.example/simple'"
    assert uv_args.uv_args(files_only) == ["--index-url", "https://other.example/simple"]
    assert uv_args.uv_args("") == []


def test_the_script_prints_one_option_a_line_for_this_pip():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         check=True).stdout
    listed = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                            capture_output=True, text=True, check=False).stdout
    assert out.splitlines() == uv_args.uv_args(listed)
    assert "" not in out.splitlines()  # an empty line would be an empty argument to uv
