"""``intentrank keys add|list|rotate|revoke``: the service's API keys file (digests only; a
new key is printed once). A running service reads the file again when it changes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from intentrank.cli.common import app, cli_errors, out

keys_app = typer.Typer(help="Add, list, rotate and revoke the service's API keys (a keys "
                            "file; `serve --keys-file`).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
KeysFile = Annotated[Path, typer.Argument(help="The keys file (YAML; created by `add`).")]


def _print_once(name: str, key: str) -> None:
    out.print(f"API key for {escape(name)} (shown once; only its sha256 is stored):")
    print(key)


@keys_app.command("add")
@cli_errors
def add(
    keys_file: KeysFile,
    name: Annotated[str, typer.Option(help="The key's name (in logs; never the key).")],
    tenant: Annotated[str | None, typer.Option(help="Sees only documents whose tenant "
                                               "field is this.")] = None,
    group: Annotated[list[str] | None, typer.Option(
        "--group", help="Sees only documents whose access field lists one of these groups; "
        "repeat.")] = None,
    filter_: Annotated[str | None, typer.Option("--filter", help="A further forced metadata "
                                                "filter.")] = None,
    index: Annotated[list[str] | None, typer.Option("--index", help="An index it may use; "
                                                    "repeat (default: all).")] = None,
    pipeline: Annotated[list[str] | None, typer.Option(
        "--pipeline", "-p", help="A pipeline it may use; repeat (default: all).")] = None,
    permission: Annotated[list[str] | None, typer.Option(
        "--permission", help="read, write, evaluate or admin; repeat (default: read and "
        "evaluate).")] = None,
    rate_limit: Annotated[float | None, typer.Option(help="Requests per minute.")] = None,
    expires: Annotated[str | None, typer.Option(help="ISO date or datetime (UTC) from which "
                                                "it is refused.")] = None,
) -> None:
    """Add a key and print it (once)."""
    from intentrank.service.keyring import add_key

    key = add_key(keys_file, {"name": name, "tenant": tenant, "groups": group or None,
                              "filter": filter_, "indexes": index or None,
                              "pipelines": pipeline or None,
                              "permissions": permission or None, "rate_limit": rate_limit,
                              "expires": expires})
    _print_once(name, key)


@keys_app.command("list")
@cli_errors
def list_(
    keys_file: KeysFile,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per key.")] = False,
) -> None:
    """The keys: name, scope, permissions, limits, expiry, revocation (never the digests)."""
    from intentrank.service.keyring import list_keys

    for key in list_keys(keys_file):
        record = {k: v for k, v in key.record().items() if k != "sha256"}
        record["scope"] = key.scope or "every document"
        if as_json:
            print(json.dumps(record))
        else:
            out.print("  ".join(escape(f"{k}={v}") for k, v in record.items()))


@keys_app.command("rotate")
@cli_errors
def rotate(keys_file: KeysFile,
           name: Annotated[str, typer.Argument(help="The key to rotate.")]) -> None:
    """Give a key a new secret, printed once; the old one stops working."""
    from intentrank.service.keyring import rotate_key

    _print_once(name, rotate_key(keys_file, name))


@keys_app.command("revoke")
@cli_errors
def revoke(keys_file: KeysFile,
           name: Annotated[str, typer.Argument(help="The key to revoke.")]) -> None:
    """Revoke a key (kept in the file, marked revoked)."""
    from intentrank.service.keyring import revoke_key

    revoke_key(keys_file, name)
    out.print(f"revoked {escape(name)}")
