#!/usr/bin/env bash
# Real documents no one here wrote, for the ingestion tests and benchmark: the PDF, HTML and
# Markdown documentation that Debian packages ship, unpacked (dpkg -x, no root needed) into
# .cache/debian-docs. `apt-get download` needs the apt lists (apt-get update as root where
# they are missing). Never fails: the tests that need a file skip, naming it, where it is
# absent (they also look in /usr/share/doc). Safe to run again.
set -uo pipefail
cd "$(dirname "$0")/.."
PACKAGES=${DEBIAN_DOCS:-"shared-mime-info libtasn1-doc valgrind"}
DEST=.cache/debian-docs
command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 || {
    echo "note: no apt-get/dpkg: the Debian documents are not fetched (tests skip)" >&2; exit 0; }
mkdir -p "$DEST/debs"
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
exit 0
