"""``intentrank serve``: settings from command-line values, then uvicorn.

:func:`build_settings` turns the command line's values into settings (tests and embedding
the app elsewhere stop there); :func:`serve` starts a server with them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from intentrank.core.config import builtin_pipelines
from intentrank.errors import ConfigError
from intentrank.index.postgres import is_postgres_uri, parse_uri
from intentrank.paths import default_data_dir
from intentrank.service.auth import ENV_VAR, ApiKey, KeyStore, generate_key, hash_key
from intentrank.service.keyring import KeyRing
from intentrank.service.settings import REPO_REPORTS, ServiceSettings


def _named(items: list[str], what: str) -> dict[str, str]:
    """``name=value`` or ``value`` (named by its file stem; a Postgres URI by its table) ->
    {name: value}."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if is_postgres_uri(item):  # its query holds '='
            name, sep, value = parse_uri(item)[1].table, "=", item
        if not sep:
            name, value = Path(item).stem if item not in builtin_pipelines() else item, item
        if name in out:
            raise ConfigError(f"two {what}s are named {name!r}; name them NAME=VALUE")
        out[name] = value
    return out


def _default_index(dataset: Path, index_dir: Path, log: Any) -> Any:
    """The quickstart's index (SciFact by default): opened, or built once if missing."""
    from intentrank.data.dataset import load_dataset
    from intentrank.index import Index, open_or_build

    if not Index.exists(index_dir):
        log(f"building index {index_dir} from {dataset} (once; a few minutes on 2 cores)")
    ds = load_dataset(dataset)
    return open_or_build(ds.corpus, index_dir, source=str(dataset), log=log)


def build_settings(
    index_dirs: list[str] | None = None,
    pipelines: list[str] | None = None,
    keys_file: Path | None = None,
    no_keys: bool = False,
    workers: int = 2,
    queue_limit: int = 32,
    timeout: float = 60.0,
    cors_origins: list[str] | None = None,
    report_dirs: list[Path] | None = None,
    access_log: Path | None = None,
    dataset: Path | None = None,
    llm: str = "embedded",
    llm_options: dict[str, Any] | None = None,
    log: Any = print,
    watch_s: float | None = None,
    drain_s: float = 30.0,
    log_texts: bool = False,
) -> tuple[ServiceSettings, str | None]:
    """Service settings and, when no key is configured, a generated key (else None).

    ``index_dirs``: ``DIR`` or ``NAME=DIR``; none: the quickstart's index of ``dataset``
    (default ``$INTENTRANK_DATA/scifact`` into ``indexes/<dataset name>``, built if missing).
    ``pipelines``: shipped names or ``[NAME=]config.yaml``; none: the default set.
    Keys: ``keys_file`` (reloaded when it changes or on SIGHUP), else
    ``$INTENTRANK_API_KEYS``, else one generated for this run; ``log_texts``: queries in the
    access log.
    ``watch_s``: reload new index generations (checked that often); ``drain_s``: SIGTERM's
    limit for in-flight requests."""
    if index_dirs:
        indexes: dict[str, Any] = {n: p if is_postgres_uri(p) else Path(p)
                                   for n, p in _named(index_dirs, "index").items()}
    else:
        dataset = Path(dataset or default_data_dir() / "scifact")
        indexes = {dataset.name: _default_index(dataset, Path("indexes") / dataset.name, log)}
    generated = None
    if no_keys:
        keys = None
    elif keys_file is not None:
        keys = KeyRing(path=keys_file)  # read again when it changes, or on SIGHUP
    elif os.environ.get(ENV_VAR, "").strip():
        keys = KeyStore.from_env(os.environ[ENV_VAR])
    else:
        generated = generate_key()
        keys = KeyStore([ApiKey("generated", hash_key(generated))])
    extra = {"pipelines": _named(pipelines, "pipeline")} if pipelines else {}
    settings = ServiceSettings(
        indexes=indexes, keys=keys, require_keys=not no_keys, workers=workers,
        queue_limit=queue_limit, timeout_s=timeout, cors_origins=list(cors_origins or []),
        report_dirs=list(report_dirs) if report_dirs else [REPO_REPORTS],
        access_log=access_log, llm=llm, llm_options=dict(llm_options or {}),
        watch_s=watch_s, drain_s=drain_s, log_texts=log_texts, **extra)
    return settings.check(), generated


def log_stderr(message: str) -> None:
    """A progress line on stderr (the server's own output goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


def serve(
    settings: ServiceSettings,
    generated: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    ray: bool = False,
    ray_address: str | None = None,
    replicas: int = 2,
    ray_batching: dict[str, Any] | None = None,
) -> None:
    """Load everything :func:`build_settings` configured, print the URL (and the
    ``generated`` key, if any) and serve until interrupted. Raises ConfigError /
    IntentrankError before listening on bad settings. ``ray`` (or a ``ray_address``): serve
    ``replicas`` copies on Ray Serve instead of one uvicorn process
    (:mod:`intentrank.scale.serve`); ``ray_batching`` (keyword arguments of
    :func:`intentrank.scale.serve.run`: ``cross_encoder``, ``max_batch_size``,
    ``batch_wait_timeout_s``) scores that cross-encoder in batches shared across requests.
    SIGTERM drains (:mod:`intentrank.service.lifecycle`): in-flight requests finish, new
    ones get 503, then the process exits 0."""
    import uvicorn

    from intentrank.service.app import create_app

    app = None if ray or ray_address else create_app(settings)
    shown = "localhost" if host in ("127.0.0.1", "0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/"
    print(f"intentrank service: {url}", flush=True)
    if generated:
        print(f"API key (generated for this run; set ${ENV_VAR} or --keys-file to keep "
              f"one): {generated}", flush=True)
        print(f"open in a browser: {url}#key={generated}", flush=True)
    elif not settings.require_keys:
        print("warning: API keys are off; anyone who can reach this port can use it",
              flush=True)
    if ray or ray_address:
        from dataclasses import replace

        from intentrank.scale.serve import run

        dirs = {n: getattr(v, "path", v) for n, v in settings.indexes.items()}
        batching = dict(ray_batching or {})
        spec = batching.get("cross_encoder")
        print(f"on Ray Serve: {replicas} replica(s)"
              + (f"; cross-encoder {spec.model} batched across requests (at most "
                 f"{batching.get('max_batch_size', 8)})" if spec else ""), flush=True)
        run(replace(settings, indexes=dirs), replicas=replicas, host=host, port=port,
            address=ray_address, blocking=True, **batching)
        return
    from intentrank.service.lifecycle import DrainingServer

    assert app is not None
    if isinstance(settings.keys, KeyRing):
        import signal

        ring = settings.keys
        signal.signal(signal.SIGHUP, lambda sig, frame: ring.request_reload())
        print(f"API keys from {ring.path}: read again when it changes, or on SIGHUP",
              flush=True)
    if settings.watch_s:
        print(f"watching the index directories for new generations every "
              f"{settings.watch_s:g} s", flush=True)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_keep_alive=5, timeout_graceful_shutdown=settings.drain_s)
    DrainingServer(config, app.state.drain, settings.drain_s, log=log_stderr).run()
