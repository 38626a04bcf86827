"""The usage ledger's database engine: SQLite (write-ahead log, a writer waits for
another's lock) or PostgreSQL, and a clear error when the URL's driver is missing."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

#: The package's extra that installs the PostgreSQL driver the docs name (psycopg 3).
POSTGRESQL_EXTRA = "postgresql"


class LedgerError(Exception):
    """The ledger cannot be opened, in words (no traceback needed)."""


def _missing_driver(url: str, error: ImportError) -> str:
    driver = sa.engine.make_url(url).drivername
    module = error.name or "its driver"
    if module == "psycopg":  # postgresql+psycopg:// (and postgresql:// on SQLAlchemy 2.1)
        how = f"pip install 'jupyterhub-gpu[{POSTGRESQL_EXTRA}]'"
    elif driver.startswith("postgresql"):
        how = (f"install {module}, or use postgresql+psycopg:// with pip install "
               f"'jupyterhub-gpu[{POSTGRESQL_EXTRA}]'")
    else:
        how = f"install {module}"
    return (f"the usage ledger's URL ({driver}://...) needs the Python module {module}, "
            f"which is not installed: {how}")


def create_engine(url: str) -> sa.Engine:
    """The ledger's engine; SQLite waits for another writer's lock (the hub and the
    jobs service share the file) instead of failing at once. :class:`LedgerError` when
    the URL's database driver is not installed."""
    try:
        if url.startswith("sqlite"):
            engine = sa.create_engine(url, connect_args={"timeout": 30})
            sa.event.listen(engine, "connect", _wal)
            return engine
        return sa.create_engine(url, pool_pre_ping=True)
    except ImportError as e:
        raise LedgerError(_missing_driver(url, e)) from e


def _wal(dbapi_connection: Any, _record: Any) -> None:
    """SQLite's write-ahead log: readers and the writer do not block each other (the
    mode stays with the file; an in-memory database keeps its own)."""
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()
