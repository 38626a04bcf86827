"""``jupyterhub-gpu usage``: the usage ledger from the command line.

* ``usage upgrade``: bring the ledger's schema to the version this package ships (the
  hub and the jobs service also do it when they first write);
* ``usage export``: every row as CSV (RFC 4180), on standard output; text cells never
  start a spreadsheet formula.

Both take ``--db-url`` (default: ``$JUPYTERHUB_GPU_USAGE_DB_URL``, else the SQLite file
in the working directory, as the hub's default).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys

import sqlalchemy as sa

from ..contract import ENV_USAGE_DB_URL
from .config import default_url


def _url(args: argparse.Namespace) -> str:
    return args.db_url or os.environ.get(ENV_USAGE_DB_URL) or default_url()


def _upgrade(args: argparse.Namespace) -> int:
    from ..ledger import migrate
    from ..ledger.engine import create_engine

    engine = create_engine(_url(args))
    try:
        before = migrate.current(engine)
        after = migrate.upgrade(engine)
    finally:
        engine.dispose()
    print(f"usage ledger {engine.url.render_as_string()}: revision {before or '(none)'} "
          f"-> {after} (head)")
    return 0


def _cell(value: object) -> str:
    """A ledger value as a CSV cell: times ISO 8601, numbers as they are, text (names
    users chose among it) never the start of a spreadsheet formula."""
    from .page import spreadsheet_text

    if value is None:
        return ""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return spreadsheet_text(value) if isinstance(value, str) else str(value)


def _export(args: argparse.Namespace) -> int:
    from ..ledger.store import FIELDS, Ledger

    ledger = Ledger(_url(args))
    try:
        writer = csv.DictWriter(sys.stdout, FIELDS)  # RFC 4180: CRLF line ends
        writer.writeheader()
        for row in ledger.rows_sync():
            writer.writerow({k: _cell(v) for k, v in dataclasses.asdict(row).items()})
    finally:
        ledger.dispose()
    return 0


def _shown(url: str) -> str:
    """``url`` without its password."""
    try:
        return sa.engine.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url


def _guarded(func):
    def run(args: argparse.Namespace) -> int:
        from ..ledger.engine import LedgerError  # loaded when a usage command runs

        try:
            return func(args)
        except (sa.exc.ArgumentError, sa.exc.OperationalError, sa.exc.NoSuchModuleError,
                LedgerError) as e:
            print(f"error: cannot open the usage ledger at {_shown(_url(args))!r}: "
                  f"{str(e).splitlines()[0]}", file=sys.stderr)
            return 1
    return run


def add_usage_parsers(sub) -> None:
    usage = sub.add_parser("usage", help="the usage ledger: upgrade its schema, export it",
                           description="The usage ledger of sessions and training jobs.")
    commands = usage.add_subparsers(dest="usage_command", required=True, metavar="COMMAND")
    for name, func, words in (
            ("upgrade", _upgrade, "upgrade the ledger's schema to this package's version"),
            ("export", _export, "print every row of the ledger as CSV")):
        p = commands.add_parser(name, help=words, description=words[0].upper() + words[1:] + ".")
        p.add_argument("--db-url", help=f"SQLAlchemy URL (default: ${ENV_USAGE_DB_URL}, else "
                       f"{default_url('.').replace(os.path.abspath('.'), '<cwd>')})")
        p.set_defaults(func=_guarded(func))
