"""API keys without a server: the keys file (fields, errors naming file and field), the
forced scope a key carries, constant-time comparison, the reloading key ring (a malformed
file keeps the old keys), rate buckets, and ``intentrank keys add|list|rotate|revoke``."""

from __future__ import annotations

import hmac
import json
import os
import pickle
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from intentrank.cli import app
from intentrank.errors import ConfigError
from intentrank.service.auth import ApiKey, KeyStore, hash_key, parse_time
from intentrank.service.keyring import KeyRing, add_key, revoke_key, rotate_key
from intentrank.service.principal import Buckets


def write(path, text: str) -> None:
    path.write_text(text)
    st = os.stat(path)  # a new mtime even within the clock's resolution
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def test_a_keys_file_gives_each_key_its_scope_permissions_and_limits(tmp_path):
    path = tmp_path / "keys.yaml"
    write(path, f"""access_field: groups_allowed
keys:
  - name: acme-finance
    sha256: {hash_key("a")}
    tenant: acme
    groups: [finance, all-staff]
    indexes: [docs]
    permissions: [read]
    rate_limit: 120
    expires: 2030-01-01
  - name: ops
    sha256: {hash_key("b")}
    permissions: [admin]
""")
    store = KeyStore.from_file(path)
    acme, ops = store.lookup("a"), store.lookup("b")
    assert acme.scope == 'tenant = "acme" AND groups_allowed IN ("all-staff", "finance")'
    assert acme.can("read") and not acme.can("write") and not acme.can("evaluate")
    assert acme.allows_index("docs") and not acme.allows_index("other")
    assert acme.rate_limit == 120 and acme.expires == parse_time("2030-01-01", "")
    assert not acme.expired(parse_time("2029-12-31T23:59:59Z", ""))
    assert acme.expired(parse_time("2030-01-01T00:00:00Z", ""))
    assert ops.scope is None and all(ops.can(p) for p in ("read", "write", "evaluate"))
    assert store.lookup("c") is None


@pytest.mark.parametrize(("entry", "message"), [
    ("sha256: plain-text-key", "keys[0]: 'sha256' must be 64 hex digits"),
    ("tenant: 'a\"b'", "keys[0]: 'tenant' must be a name"),
    ("groups: ['x) OR (1']", "keys[0]: 'groups' must be a list of names"),
    ("permissions: [read, root]", "keys[0]: 'permissions' must be a list of read, write"),
    ("rate_limit: -1", "keys[0]: 'rate_limit' must be a number"),
    ("expires: next week", "keys[0]: 'expires': 'next week' is not an ISO date"),
    ("colour: red", "keys[0]: unknown field(s) ['colour']"),
])
def test_bad_key_fields_are_refused_naming_the_file_and_field(tmp_path, entry, message):
    path = tmp_path / "keys.yaml"
    digest = "" if entry.startswith("sha256") else f"    sha256: {hash_key('k')}\n"
    write(path, f"keys:\n  - name: a\n{digest}    {entry}\n")
    with pytest.raises(ConfigError, match="keys.yaml") as err:
        KeyStore.from_file(path)
    assert message in str(err.value)


def test_the_same_name_or_digest_twice_is_refused():
    with pytest.raises(ConfigError, match="listed twice"):
        KeyStore([ApiKey("a", hash_key("x")), ApiKey("b", hash_key("x"))])
    with pytest.raises(ConfigError, match="name 'a' is listed twice"):
        KeyStore([ApiKey("a", hash_key("x")), ApiKey("a", hash_key("y"))])


def test_a_presented_key_is_compared_with_every_digest_in_constant_time(monkeypatch):
    """No early exit: hit or miss, first key or last, every stored digest goes through
    hmac.compare_digest once."""
    store = KeyStore([ApiKey(f"k{i}", hash_key(f"key-{i}")) for i in range(7)])
    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a, b):  # noqa: ANN001, ANN202
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    for presented, name in (("key-0", "k0"), ("key-6", "k6"), ("nope", None)):
        calls.clear()
        found = store.lookup(presented)
        assert (found.name if found else None) == name and len(calls) == 7


def test_the_key_ring_reloads_a_changed_file_and_keeps_the_old_keys_on_a_bad_one(tmp_path):
    path, logged = tmp_path / "keys.yaml", []
    write(path, f"keys:\n  - name: a\n    sha256: {hash_key('one')}\n")
    ring = KeyRing(path=path, log=logged.append)
    assert ring.current().lookup("one") is not None
    write(path, f"keys:\n  - name: b\n    sha256: {hash_key('two')}\n")
    assert ring.current().lookup("two") is not None and ring.current().lookup("one") is None
    write(path, "keys: [this is not: valid")
    assert ring.current().lookup("two") is not None  # the old keys stay
    assert ring.reload_errors == 1 and "the previous 1 key(s) stay in force" in logged[-1]
    write(path, f"keys:\n  - name: c\n    sha256: {hash_key('three')}\n")
    assert ring.current().lookup("three") is not None and ring.reloads == 2
    write(path, f"keys:\n  - name: d\n    sha256: {hash_key('four')}\n")
    ring._stamp = ring._stat()  # a change the stat check cannot see (same stamp) ...
    assert ring.current().named("d") is None
    ring.request_reload()  # ... SIGHUP's handler forces the read
    assert ring.current().named("d") is not None
    copy = pickle.loads(pickle.dumps(ring))  # settings travel to Ray Serve replicas
    assert copy.current().named("d") is not None
    with pytest.raises(ConfigError, match="cannot read API keys file"):
        KeyRing(path=tmp_path / "missing.yaml")  # at start-up a bad file is an error


def test_buckets_refill_at_their_rate():
    now = [0.0]
    buckets = Buckets(clock=lambda: now[0])
    assert [buckets.take("k", 3) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert buckets.take("k", 3) == pytest.approx(20.0)  # 3 a minute: one every 20 s
    now[0] = 20.0
    assert buckets.take("k", 3) == 0.0 and buckets.empty("k", 3) > 0
    assert buckets.take("other", 3) == 0.0


def test_key_edits_store_digests_only_and_rotation_and_revocation_take_effect(tmp_path):
    path = tmp_path / "keys.yaml"
    key = add_key(path, {"name": "acme", "tenant": "acme", "groups": ["finance"],
                         "permissions": ["read"]})
    assert key not in path.read_text() and hash_key(key) in path.read_text()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ConfigError, match="a key named 'acme' exists"):
        add_key(path, {"name": "acme"})
    with pytest.raises(ConfigError, match="'permissions' must be"):
        add_key(path, {"name": "bad", "permissions": ["everything"]})
    assert len(KeyStore.from_file(path)) == 1  # the refused add left the file as it was
    new = rotate_key(path, "acme")
    store = KeyStore.from_file(path)
    assert store.lookup(key) is None and store.lookup(new).scope == \
        'tenant = "acme" AND acl IN ("finance")'
    revoke_key(path, "acme", now=parse_time("2026-11-27T15:00:00Z", ""))
    assert KeyStore.from_file(path).lookup(new) is None
    assert yaml.safe_load(path.read_text())["keys"][0]["revoked"] == "2026-11-27T15:00:00Z"
    with pytest.raises(ConfigError, match="no key named 'nobody'"):
        revoke_key(path, "nobody")


def test_the_keys_commands_print_a_new_key_once_and_list_without_digests(tmp_path):
    path, runner = tmp_path / "keys.yaml", CliRunner()
    r = runner.invoke(app, ["keys", "add", str(path), "--name", "globex", "--tenant", "globex",
                            "--group", "eng", "--permission", "read", "--permission", "write",
                            "--rate-limit", "60", "--expires", "2030-01-01"])
    assert r.exit_code == 0, r.output
    key = r.output.strip().splitlines()[-1]
    assert KeyStore.from_file(path).lookup(key).can("write")
    r = runner.invoke(app, ["keys", "list", str(path), "--json"])
    listed = json.loads(r.output)
    assert listed["name"] == "globex" and "sha256" not in listed and key not in r.output
    assert listed["scope"] == 'tenant = "globex" AND acl IN ("eng")'
    assert listed["expires"] == "2030-01-01T00:00:00Z"
    r = runner.invoke(app, ["keys", "rotate", str(path), "globex"])
    assert r.exit_code == 0 and r.output.strip().splitlines()[-1] != key
    r = runner.invoke(app, ["keys", "revoke", str(path), "globex"])
    assert r.exit_code == 0 and "revoked globex" in r.output
    r = runner.invoke(app, ["keys", "rotate", str(path), "globex"])
    assert r.exit_code == 2 and "error:" in r.output and "is revoked" in r.output
    r = runner.invoke(app, ["keys", "add", str(path), "--name", "x", "--permission", "root"])
    assert r.exit_code == 2 and "'permissions' must be a list" in r.output


def test_intentrank_serve_reloads_its_keys_file_on_change_and_on_sighup(data_dir, tmp_path):
    """The real command in a process: a revoked key is refused from the next request, a
    malformed file keeps the keys in force (logged), SIGHUP reloads instead of killing."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    import httpx
    from service_helpers import small_index

    small_index(data_dir, tmp_path / "idx", n=50).close()
    keys = tmp_path / "keys.yaml"
    key = add_key(keys, {"name": "ops", "permissions": ["read"]})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "intentrank.cli", "serve", "--index", f"c={tmp_path / 'idx'}",
         "-p", "bm25", "--keys-file", str(keys), "--port", str(port),
         "--access-log", str(tmp_path / "access.log")],
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src")),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def search() -> int:
        return httpx.post(url + "/search", json={"query": "flow"}, timeout=30,
                          headers={"X-API-Key": key}).status_code

    try:
        for _ in range(240):
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.5)
        assert search() == 200
        good = keys.read_text()
        write(keys, "keys: [broken")
        assert search() == 200  # the keys in force stay
        write(keys, good)
        revoke_key(keys, "ops")
        assert search() == 401
        proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
        assert proc.poll() is None and httpx.get(url + "/health").status_code == 200
    finally:
        proc.terminate()
        proc.wait(60)
    log = [json.loads(line) for line in (tmp_path / "access.log").read_text().splitlines()]
    messages = [r["message"] for r in log if r.get("event") == "keys"]
    assert any("the previous 1 key(s) stay in force" in m for m in messages), messages
    assert key not in (tmp_path / "access.log").read_text()
