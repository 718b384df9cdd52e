#!/usr/bin/env bash
# Real documents no one here wrote, for the ingestion tests and benchmark, into
# .cache/debian-docs (safe to run again; never fails: a test that needs a missing file skips,
# naming it):
#   root/       the PDF, HTML and Markdown documentation Debian packages ship, unpacked with
#               `apt-get download` + `dpkg -x` (no root; the apt lists must exist: apt-get
#               update is tried where they do not); the tests also look in /usr/share/doc
#   python-docx/  the Word documents of python-docx's own test suite (its sdist on PyPI)
set -uo pipefail
cd "$(dirname "$0")/.."
PACKAGES=${DEBIAN_DOCS:-"shared-mime-info libtasn1-doc valgrind asymptote-doc"}
DEST=.cache/debian-docs
PIP=${PIP:-.venv/bin/pip}
mkdir -p "$DEST/debs"
if command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1; then
    for pkg in $PACKAGES; do
        [ -e "$DEST/$pkg.done" ] && continue
        ( cd "$DEST/debs" && apt-get download -q "$pkg" >/dev/null 2>&1 ) || {
            SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
            $SUDO apt-get update -q >/dev/null 2>&1
            ( cd "$DEST/debs" && apt-get download -q "$pkg" >/dev/null 2>&1 ); } || {
            echo "note: could not download $pkg (its tests skip)" >&2; continue; }
        deb=$(ls -t "$DEST"/debs/"${pkg}"_*.deb 2>/dev/null | head -1)
        [ -n "$deb" ] && dpkg -x "$deb" "$DEST/root" && touch "$DEST/$pkg.done" && rm -f "$deb"
    done
else
    echo "note: no apt-get/dpkg: Debian's documents are not fetched (their tests skip)" >&2
fi
if [ ! -e "$DEST/python-docx.done" ] && [ -x "$PIP" ]; then
    tmp=$(mktemp -d)
    if "$PIP" download -q --no-deps --no-binary :all: python-docx==1.2.0 -d "$tmp" \
            >/dev/null 2>&1; then
        mkdir -p "$DEST/python-docx"
        tar xzf "$tmp"/python_docx-1.2.0.tar.gz -C "$tmp" --wildcards \
            "*/features/steps/test_files/*.docx" \
            && cp "$tmp"/python_docx-1.2.0/features/steps/test_files/*.docx "$DEST/python-docx/" \
            && touch "$DEST/python-docx.done"
    else
        echo "note: could not download python-docx's sdist (its tests skip)" >&2
    fi
    rm -rf "$tmp"
fi
exit 0
