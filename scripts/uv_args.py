"""Print pip's package sources as uv options, one a line (uv does not read pip's config).

pip's configuration (files and PIP_* variables, `pip config list`) may name an index,
extra indexes, find-links folders and constraint files; scripts/setup.sh passes them to
`uv pip install` so that both installers see the same packages.
"""

from __future__ import annotations

import shlex
import subprocess
import sys

OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "find-links": "--find-links", "constraint": "--constraint"}


def uv_args(config_list: str) -> list[str]:
    """The uv options for the lines of `pip config list` (``section.key='value'``)."""
    args: list[str] = []
    index_seen = False
    for line in config_list.splitlines():
        key, sep, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if not sep or name not in OPTIONS:
            continue
        if name == "index-url":  # one index: the first listed (PIP_INDEX_URL, then files)
            if index_seen:
                continue
            index_seen = True
        for item in " ".join(shlex.split(value)).split():
            pair = [OPTIONS[name], item]
            if not any(args[i:i + 2] == pair for i in range(0, len(args), 2)):
                args += pair
    return args


if __name__ == "__main__":
    out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, check=False).stdout
    for arg in uv_args(out):
        print(arg)
