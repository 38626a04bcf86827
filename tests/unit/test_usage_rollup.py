"""The ledger's per-day rollup (jupyterhub_gpu.ledger.rollup), on SQLite and PostgreSQL:
the usage page read through it gives the figures of the page computed from every row
(in SQL, and in Python: the definition), for generated ledgers with sessions over
several midnights, stops at midnight, rows still open and rows without a team or
units, for periods that start or end at a midnight or in a day; the writer keeps it
as a rebuild computes it while facts arrive in any order (a stop days later, a running
time after the stop, a team after the stop); migration 0004 fills it for a ledger
that existed before."""

from __future__ import annotations

import random
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from alembic import command

from benchmarks.pages import fill, ledger_rows
from jupyterhub_gpu.ledger import migrate, rollup
from jupyterhub_gpu.ledger.store import USAGE, Kind, Ledger, StopReason, Usage, _to_row
from jupyterhub_gpu.usage import figures as fg
from jupyterhub_gpu.usage import queries
from jupyterhub_gpu.usage.access import Selection, Viewer, visible
from jupyterhub_gpu.usage.page import figures, max_ages, report, report_of, spot_pools
from jupyterhub_gpu.usage.telemetry import Telemetry

from .test_usage_ledger import db_url, ledger, postgres_url  # noqa: F401 - fixtures

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
MIDNIGHT = datetime(2026, 12, 7, tzinfo=timezone.utc)
NO_TELEMETRY = Telemetry({}, "none")
TEAMS = ("data-science", "ml-eng", None)
PROFILES = ("t4-shared", "a100-training", "a100-spot", "", None)
POOLS = ("t4dev", "a100spot", "a100", None)
REASONS = (StopReason.USER, StopReason.IDLE_CULL, StopReason.MAX_AGE, StopReason.PREEMPTED,
           StopReason.SPOT_EVICTION, StopReason.FAILURE)


def random_rows(seed: int, n: int, days: int = 12) -> list[Usage]:
    """Sessions and jobs of ``days`` days before NOW: times on the second, on the
    microsecond and at midnights; spans of minutes to 5 days; some never running, some
    open, some without units, team, profile or pool."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        base = NOW - timedelta(days=rng.uniform(0, days))
        if rng.random() < 0.15:  # at a midnight
            base = base.replace(hour=0, minute=0, second=0, microsecond=0)
        requested = base - timedelta(seconds=rng.choice((0, 5, 700.25)))
        running = None if rng.random() < 0.1 else base
        length = rng.choice((timedelta(minutes=rng.uniform(1, 90)),
                             timedelta(hours=rng.uniform(1, 30)),
                             timedelta(days=rng.uniform(1, 5))))
        stopped = None if rng.random() < 0.15 else (running or requested) + length
        if stopped is not None and rng.random() < 0.1:  # stopped at the next midnight
            stopped = (stopped.replace(hour=0, minute=0, second=0, microsecond=0)
                       + timedelta(days=1))
        if stopped is not None and stopped > NOW:
            stopped = None
        rows.append(Usage(
            f"pod:r{seed}-{i}", rng.choice((Kind.SESSION, Kind.SESSION, Kind.JOB)),
            user=rng.choice(("alice", "bob", "carol", None)), server=f"s{i}",
            team=rng.choice(TEAMS), profile=rng.choice(PROFILES), pool=rng.choice(POOLS),
            gpu_units=rng.choice((1, 2, 4, 0, None)),
            price_per_unit_hour=rng.choice((0.5, 3.2, None)), requested_at=requested,
            admitted_at=running, running_at=running, stopped_at=stopped,
            stop_reason=rng.choice(REASONS) if stopped else None,
            queue_wait_seconds=rng.choice((0.0, 12.5, 300.0, None))))
    return rows


def page(ledger, platform, viewer, selection, window):  # noqa: F811
    """The page's figures as shown: read through the rollup, from every row in SQL,
    and from every row in Python."""
    spots, ages = spot_pools(platform), max_ages(platform)

    def shown(found):
        return list(figures(report_of(found, viewer, selection, window, 12, platform,
                                      NO_TELEMETRY)))

    rolled = ledger.read_sync(lambda conn: queries.compute(
        conn, viewer, selection, window, spots, ages))
    with pytest.MonkeyPatch.context() as mp:  # every row, as a period without a whole day
        mp.setattr(queries, "whole_days", lambda window: None)
        direct = ledger.read_sync(lambda conn: queries.compute(
            conn, viewer, selection, window, spots, ages))
    rows = [u for u in ledger.rows_sync() if u.stopped_at is None
            or u.stopped_at >= window.start or (u.requested_at and u.requested_at >= window.start)]
    in_python = report(visible(rows, viewer, selection), viewer, selection, window, 12,
                       platform, NO_TELEMETRY)
    assert rolled.teams_with_rows == direct.teams_with_rows
    return shown(rolled), shown(direct), list(figures(in_python))


def _admin_pages_agree(ledger_, platform, windows) -> None:
    for window in windows:
        rolled, direct, in_python = page(ledger_, platform, Viewer("root", admin=True),
                                         Selection(), window)
        assert rolled == direct == in_python, window


WINDOWS = [fg.Window(NOW - timedelta(days=10), NOW),  # a part-day at each end
           fg.Window(MIDNIGHT - timedelta(days=9), NOW),  # from a midnight
           fg.Window(NOW - timedelta(days=8, hours=3), MIDNIGHT),  # to a midnight
           fg.Window(MIDNIGHT - timedelta(days=6), MIDNIGHT - timedelta(days=2)),  # both
           fg.Window(NOW - timedelta(hours=40), NOW),  # one whole day
           fg.Window(NOW - timedelta(days=30), NOW),  # before the first row (of 12 days)
           fg.Window(NOW - timedelta(days=45), NOW),  # November's days as a month
           fg.Window(datetime(2026, 10, 31, tzinfo=timezone.utc), NOW),  # from a midnight
           fg.Window(datetime(2026, 11, 1, tzinfo=timezone.utc), MIDNIGHT)]
VIEWERS = [(Viewer("root", admin=True), Selection()),
           (Viewer("root", admin=True), Selection(team="ml-eng")),
           (Viewer("lee", teams=("data-science",)), Selection()),
           (Viewer("alice"), Selection())]


@pytest.mark.parametrize("seed, days", [(1, 12), (2, 50)])
def test_the_rollup_gives_the_pages_figures(ledger, platform, seed, days):  # noqa: F811
    rows = random_rows(seed, 400, days) + ledger_rows(platform, users=6, days=days, now=NOW)
    fill(ledger, rows)
    for window in WINDOWS:
        for viewer, selection in VIEWERS:
            rolled, direct, in_python = page(ledger, platform, viewer, selection, window)
            assert rolled == direct == in_python, (window, viewer, selection)
    assert len(in_python) > 20


def _changes_in_steps(u: Usage, rng: random.Random) -> list[Usage]:
    """What writers report of ``u`` over time: the request, then the start (and a team
    only then), the stop; sometimes the stop before the start, the units or team after
    the stop."""
    first = Usage(u.key, u.kind, user=u.user, server=u.server, profile=u.profile,
                  requested_at=u.requested_at)
    rest = Usage(u.key, u.kind, team=u.team, pool=u.pool, gpu_units=u.gpu_units,
                 price_per_unit_hour=u.price_per_unit_hour, admitted_at=u.admitted_at,
                 running_at=u.running_at)
    stop = Usage(u.key, u.kind, stopped_at=u.stopped_at, stop_reason=u.stop_reason)
    steps = [first, rest, stop] if rng.random() < 0.7 else [first, stop, rest]
    return steps if u.stopped_at else steps[:2]


def test_the_writer_keeps_the_rollup_as_a_rebuild_computes_it(ledger, platform):  # noqa: F811
    """Facts of each row arrive in separate writes, interleaved with other rows' (a
    stop days after the start, a running time or a team after the stop), in batches
    and alone: the rollup the writer keeps is the one computed from the final rows,
    and the page read through it is the page computed from every row."""
    rows = random_rows(3, 300, days=50)
    rng = random.Random(3)
    steps = [_changes_in_steps(u, rng) for u in rows]
    while any(steps):
        pending = [s for s in steps if s]
        batch = [s.pop(0) for s in rng.sample(pending, min(len(pending), rng.randint(1, 20)))]
        if len(batch) == 1:
            ledger.record_sync(batch[0])
        else:
            for done in [ledger.submit(u) for u in batch]:
                done.result(timeout=60)
    kept = [ledger.read_sync(lambda conn: rollup.as_rows(conn, t)) for t in rollup.TABLES]
    with ledger.engine.begin() as conn:
        rollup.rebuild(conn)
    for table, before in zip(rollup.TABLES, kept):
        rebuilt = ledger.read_sync(lambda conn: rollup.as_rows(conn, table))
        assert len(rebuilt) > 50
        nonzero = {k: v for k, v in before.items() if any(v[2:-1])}  # a moved row: zeros
        assert nonzero.keys() == rebuilt.keys()
        for key, sums in rebuilt.items():
            assert nonzero[key][2:] == sums[2:], key  # the counts and the carry, exactly
            assert nonzero[key][:2] == pytest.approx(sums[:2], rel=1e-9, abs=1e-9), key
    for window in WINDOWS[:4] + WINDOWS[6:]:
        rolled, direct, in_python = page(ledger, platform, Viewer("root", admin=True),
                                         Selection(), window)
        assert rolled == direct == in_python, window


def test_a_rows_facts_move_its_sums(ledger):  # noqa: F811
    """A session started on one day and stopped two days later: nothing until its stop;
    then its hours on each of the three days, counted where it started; its team
    learned after the stop moves them to that team."""
    start = MIDNIGHT - timedelta(days=3, hours=2)  # 22:00
    ledger.record_sync(Usage("pod:a", Kind.SESSION, user="alice", running_at=start,
                             gpu_units=2, price_per_unit_hour=1.0))
    assert ledger.read_sync(rollup.as_rows) == {}
    ledger.record_sync(Usage("pod:a", Kind.SESSION, stopped_at=start + timedelta(hours=28),
                             stop_reason=StopReason.PREEMPTED))
    day = rollup.day_of(start)
    # (gpu_hours, cost, billed, starts, ended, preempted, spot evictions, max-age, carry)
    expected = {(day, "", "alice", "", ""): (4.0, 4.0, 1, 1, 0, 0, 0, 0, 0),
                (day + 1, "", "alice", "", ""): (48.0, 48.0, 1, 0, 0, 0, 0, 0, 1),
                (day + 2, "", "alice", "", ""): (4.0, 4.0, 1, 0, 1, 1, 0, 0, 2)}
    assert ledger.read_sync(rollup.as_rows) == expected
    ledger.record_sync(Usage("pod:a", Kind.SESSION, team="ml-eng"))
    moved = ledger.read_sync(rollup.as_rows)
    for (d, _, user, profile, pool), sums in expected.items():
        assert moved[d, "ml-eng", user, profile, pool] == sums
        assert moved[d, "", user, profile, pool][:-1] == (0.0, 0.0, 0, 0, 0, 0, 0, 0)


def test_migration_0004_fills_the_rollup_of_an_existing_ledger(db_url, platform):  # noqa: F811
    """A ledger at revision 0003 with rows: upgraded, its rollup is the one computed
    from its rows, and the page read through it is the page from every row."""
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        command.upgrade(migrate._config(conn), "0003")
        old = sa.Table(USAGE.name, sa.MetaData(), autoload_with=conn)
        conn.execute(old.insert(), [_to_row(u) for u in random_rows(4, 300)])
    assert migrate.current(engine) == "0003"
    assert migrate.upgrade(engine) == migrate.head()
    with engine.connect() as conn:
        filled = [rollup.as_rows(conn, table) for table in rollup.TABLES]
    with engine.begin() as conn:
        rollup.rebuild(conn)
        assert [rollup.as_rows(conn, table) for table in rollup.TABLES] == filled
        assert len(filled[0]) > 100 and len(filled[1]) > 10
    engine.dispose()
    ledger_ = Ledger(db_url)
    try:
        _admin_pages_agree(ledger_, platform, WINDOWS[:3])
    finally:
        ledger_.dispose()


@pytest.mark.parametrize("viewer", [Viewer("root", admin=True),
                                    Viewer("lee", teams=("data-science",))])
def test_a_page_of_teams_searches_indexes_not_the_ledger(tmp_path, platform, viewer):
    """SQLite's plans of the statements of a page over 12 days: each reads the
    ledger's table through an index range, or an index alone, never row by row in
    full (the rows of a part-day are found by their start or stop, not among a
    team's rows of every day). Not the first, the teams of the period's rows (a
    lead's from the indexes on user and team)."""
    ledger_ = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
    try:
        fill(ledger_, ledger_rows(platform, users=10, days=12, now=NOW))
        seen = []

        def keep(conn, cursor, statement, parameters, *args):
            seen.append((statement, parameters))
        sa.event.listen(ledger_.engine, "before_cursor_execute", keep)
        ledger_.read_sync(lambda conn: queries.compute(
            conn, viewer, Selection(), fg.Window.last_days(12, NOW), spot_pools(platform),
            max_ages(platform)))
        sa.event.remove(ledger_.engine, "before_cursor_execute", keep)
        steps = []
        with ledger_.engine.connect() as conn:
            for statement, parameters in seen:
                if statement.lstrip().upper().startswith("SELECT") and not \
                        statement.lstrip().startswith(f"SELECT DISTINCT {USAGE.name}.team"):
                    steps += [str(r[-1]) for r in conn.exec_driver_sql(
                        f"EXPLAIN QUERY PLAN {statement}", parameters).all()]
        ledger_steps = [s for s in steps if f"{USAGE.name} " in f"{s} "]
        assert any(f"INDEX ix_{USAGE.name}_running_at" in s for s in ledger_steps)
        assert any(rollup.ROLLUP_TABLE in s for s in steps)
        for step in ledger_steps:
            assert step.startswith("SEARCH") or "COVERING INDEX" in step, step
            assert "(team=?)" not in step and "(user=?)" not in step, step  # every day's
    finally:
        ledger_.dispose()


def test_stops_an_older_writer_made_are_rolled_up_when_the_ledger_is_next_opened(
        db_url, platform):  # noqa: F811
    """A hub of a version before the rollup, still running after the ledger was upgraded
    by hand, stops rows without it: the next process to open the ledger rebuilds the
    rollup (once: a second one finds it whole), and the page is right again."""
    first = Ledger(db_url)
    rows = random_rows(5, 200)
    try:
        fill(first, rows)
    finally:
        first.dispose()
    engine = sa.create_engine(db_url)
    later = NOW - timedelta(minutes=5)
    with engine.begin() as conn:  # the older writer: the ledger's row alone
        opened = [r.key for r in conn.execute(sa.select(USAGE.c.key).where(
            USAGE.c.stopped_at.is_(None), USAGE.c.running_at.is_not(None)))]
        conn.execute(USAGE.update().where(USAGE.c.key.in_(opened)).values(
            stopped_at=later, stop_reason=str(StopReason.USER)))
    engine.dispose()
    assert len(opened) > 5
    reopened = Ledger(db_url)
    try:
        kept = reopened.read_sync(rollup.as_rows)
        with reopened.engine.begin() as conn:
            assert rollup.heal(conn) is False  # whole: the next process leaves it
            rollup.rebuild(conn)
        assert reopened.read_sync(rollup.as_rows) == kept
        _admin_pages_agree(reopened, platform, WINDOWS[:2])
    finally:
        reopened.dispose()


def test_other_databases_add_to_the_rollup_a_row_at_a_time(ledger):  # noqa: F811
    """The statements a database without ``ON CONFLICT`` gets (update, else insert)
    add up as the upsert does, run here on SQLite and PostgreSQL."""
    changes: dict = {}
    for u in random_rows(6, 60):
        rollup.add_change(changes, None, u)
    ledger.read_sync(lambda conn: None)
    with ledger.engine.begin() as conn:
        rollup.apply(conn, changes)
        rollup.apply(conn, changes)
        upserted = [rollup.as_rows(conn, table) for table in rollup.TABLES]
        for table, rows in rollup._per_table(changes):
            conn.execute(table.delete())
            for _ in range(2):
                for row in rows:
                    rollup._update_or_insert(conn, table, row)
        assert [rollup.as_rows(conn, table) for table in rollup.TABLES] == upserted
        assert len(upserted[0]) > 20 and len(upserted[1]) > 5


def test_two_processes_opening_a_ledger_at_once_rebuild_its_rollup_once(db_url):  # noqa: F811
    """Two writers heal a rollup that misses stops at the same moment: the rollup's lock
    makes one rebuild it and the other find it whole."""
    first = Ledger(db_url)
    try:
        fill(first, random_rows(7, 200))
    finally:
        first.dispose()
    engines = [sa.create_engine(db_url, connect_args={"timeout": 30}
                                if db_url.startswith("sqlite") else {}) for _ in range(2)]
    with engines[0].begin() as conn:  # an older writer's stops
        conn.execute(USAGE.update().where(USAGE.c.stopped_at.is_(None)).values(
            stopped_at=NOW, stop_reason=str(StopReason.USER)))
    start = threading.Barrier(2)
    healed: list[bool] = []

    def heal(engine):
        start.wait()
        with engine.begin() as conn:
            healed.append(rollup.heal(conn))

    threads = [threading.Thread(target=heal, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(healed) == [False, True]
    with engines[0].begin() as conn:
        kept = rollup.as_rows(conn)
        rollup.rebuild(conn)
        assert rollup.as_rows(conn) == kept
    for engine in engines:
        engine.dispose()
