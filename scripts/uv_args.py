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
    lines = [line.partition("=") for line in config_list.splitlines()]
    entries = [(key, key.rsplit(".", 1)[-1], value) for key, sep, value in lines
               if sep and key.rsplit(".", 1)[-1] in OPTIONS]
    # one index, as pip takes it: PIP_INDEX_URL (listed first, as ":env:"), else the last
    # section listed (sorted: "install" after "global", and pip lets it override)
    indexes = [key for key, name, _ in entries if name == "index-url"]
    index = next((k for k in indexes if k.startswith(":env:")), indexes[-1] if indexes else "")
    for key, name, value in entries:
        if name == "index-url" and key != index:
            continue
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
