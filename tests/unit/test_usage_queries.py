"""The usage page's figures computed by the database (jupyterhub_gpu.usage.queries), on
SQLite and PostgreSQL: the same numbers as the page shows from the rows in Python
(jupyterhub_gpu.usage.page.report, the definition), for every kind of viewer and
narrowing; a bounded number of queries however many rows; the indexes they use; the
queue waits the availability API reads from the ledger; the ledger's batched writes."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from benchmarks.pages import fill, ledger_rows
from jupyterhub_gpu.hub import queuewaits
from jupyterhub_gpu.hub.availability import typical_waits
from jupyterhub_gpu.ledger.store import Kind, Ledger, StopReason, TooLong, Usage
from jupyterhub_gpu.usage import figures as fg
from jupyterhub_gpu.usage import queries
from jupyterhub_gpu.usage.access import NotVisible, Selection, Viewer, visible
from jupyterhub_gpu.usage.page import figures, max_ages, report, report_of, spot_pools
from jupyterhub_gpu.usage.telemetry import Telemetry

from .test_usage_ledger import db_url, ledger, postgres_url  # noqa: F401 - fixtures

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)
MIDNIGHT = datetime(2026, 12, 5, tzinfo=timezone.utc)
NO_TELEMETRY = Telemetry({}, "none")


def edge_rows() -> list[Usage]:
    """Rows at the definitions' edges: stopped at midnight, over two midnights, no
    team or profile, no units, running before the window, a podless start; and GPU
    kernels (counted as every row is)."""
    def s(key, running, stopped, **kw):
        return Usage(key, kw.pop("kind", Kind.SESSION), user=kw.pop("user", "edge"),
                     team=kw.pop("team", "data-science"), profile=kw.pop("profile", "t4-shared"),
                     pool=kw.pop("pool", "t4dev"), gpu_units=kw.pop("units", 1),
                     price_per_unit_hour=0.5, requested_at=running - timedelta(minutes=1),
                     running_at=running, stopped_at=stopped, **kw)
    return [s("e1", MIDNIGHT - timedelta(hours=2), MIDNIGHT),
            s("e2", MIDNIGHT - timedelta(hours=1), MIDNIGHT + timedelta(days=2, hours=1)),
            s("e3", MIDNIGHT, MIDNIGHT + timedelta(hours=3), team=None, profile=None),
            s("e4", MIDNIGHT, MIDNIGHT + timedelta(hours=3), units=0),
            s("e5", NOW - timedelta(days=40), None, stop_reason=None),
            s("e6", MIDNIGHT, MIDNIGHT + timedelta(minutes=5), profile="",
              stop_reason=StopReason.IDLE_CULL),
            Usage("start:x", Kind.SESSION, user="edge", team="data-science",
                  profile="t4-shared", requested_at=MIDNIGHT, stopped_at=MIDNIGHT,
                  stop_reason=StopReason.FAILURE),
            # GPU kernels: released idle over midnight, preempted, still running
            s("kernel:1", MIDNIGHT - timedelta(minutes=30), MIDNIGHT + timedelta(hours=1),
              kind=Kind.KERNEL, units=2, stop_reason=StopReason.IDLE_RELEASE),
            s("kernel:2", MIDNIGHT + timedelta(hours=5), MIDNIGHT + timedelta(hours=6),
              kind=Kind.KERNEL, stop_reason=StopReason.PREEMPTED),
            s("kernel:3", NOW - timedelta(hours=2), None, kind=Kind.KERNEL)]


@pytest.fixture
def filled(ledger, platform):  # noqa: F811
    rows = ledger_rows(platform, users=24, days=12, now=NOW) + edge_rows()
    fill(ledger, rows)
    return rows


def _both(ledger, platform, rows, viewer, selection, days):  # noqa: F811
    window = fg.Window.last_days(days, NOW)
    in_python = report(visible([u for u in rows if u.stopped_at is None
                                or u.stopped_at >= window.start
                                or (u.requested_at and u.requested_at >= window.start)],
                               viewer, selection),
                       viewer, selection, window, days, platform, NO_TELEMETRY)
    found = ledger.read_sync(lambda conn: queries.compute(
        conn, viewer, selection, window, spot_pools(platform), max_ages(platform)))
    by_sql = report_of(found, viewer, selection, window, days, platform, NO_TELEMETRY)
    return list(figures(in_python)), list(figures(by_sql)), in_python, by_sql


VIEWS = [(Viewer("root", admin=True), Selection(), 10),
         (Viewer("root", admin=True), Selection(), 3),
         (Viewer("root", admin=True), Selection(team="ml-eng"), 10),
         (Viewer("lee", teams=("data-science",)), Selection(), 10),
         (Viewer("lee", teams=("data-science",)), Selection(user="user0000"), 10),
         (Viewer("user0001"), Selection(), 10),
         (Viewer("edge"), Selection(), 5),
         (Viewer("root", admin=True), Selection(user="edge"), 1)]


@pytest.mark.parametrize("viewer, selection, days", VIEWS)
def test_the_database_computes_the_pages_numbers(ledger, platform, filled,  # noqa: F811
                                                 viewer, selection, days):
    in_python, by_sql, python_report, sql_report = _both(ledger, platform, filled, viewer,
                                                         selection, days)
    assert by_sql == in_python and len(in_python) > 10
    assert sql_report.team_namespaces == python_report.team_namespaces
    for mine, theirs in zip(sql_report.daily + sql_report.users,
                            python_report.daily + python_report.users):
        assert mine.gpu_hours == pytest.approx(theirs.gpu_hours, rel=1e-6)  # SQLite: ms


@pytest.mark.parametrize("viewer", [Viewer("root", admin=True), Viewer("edge")])
def test_gpu_kernels_hours_are_their_users_and_teams(ledger, platform, viewer):  # noqa: F811
    """A kernel's GPU-hours and cost are its user's and team's, whether the page reads
    whole days from the rollup (an admin's page) or the ledger's rows (a user's own)."""
    for u in edge_rows():
        if u.kind is Kind.KERNEL:
            ledger.record_sync(u)
    window = fg.Window.last_days(5, NOW)
    found = ledger.read_sync(lambda conn: queries.compute(
        conn, viewer, Selection(), window, spot_pools(platform), max_ages(platform)))
    # 2 units x 1.5 h, 1 h, and 2 h still running, at 0.5 a unit-hour
    assert [(t.name, t.gpu_hours, t.cost, t.count) for t in found.users] == [
        ("edge", pytest.approx(6.0), pytest.approx(3.0), 3)]
    assert [t.name for t in found.teams] == ["data-science"] and found.runs == ()
    assert found.disruptions.preempted == 1 and found.culls.idle_culls == 0


def test_a_lead_asking_for_a_user_outside_their_team_is_refused(ledger, platform,  # noqa: F811
                                                                 filled):
    lead = Viewer("lee", teams=("data-science",))
    window = fg.Window.last_days(10, NOW)
    with pytest.raises(NotVisible, match="no usage there"):
        ledger.read_sync(lambda conn: queries.compute(
            conn, lead, Selection(user="user0001"), window, frozenset(), {}))


def _statements(engine):
    seen = []

    def count(conn, cursor, statement, *args):
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            seen.append(statement)
    sa.event.listen(engine, "before_cursor_execute", count)
    return seen, lambda: sa.event.remove(engine, "before_cursor_execute", count)


def test_a_page_is_a_few_queries_whatever_the_rows(db_url, platform):  # noqa: F811
    """The same queries for 4 and 40 users, over 1 day (no whole day: the ledger's
    rows) and 12 days (the rollup's whole days and the rows at the ends): a bounded
    number, not one per row or per day."""
    counts: dict[tuple[int, int], int] = {}
    for users in (4, 40):
        ledger_ = Ledger(db_url)
        try:
            ledger_.read_sync(lambda conn: None)  # the table, at head
            with ledger_.engine.begin() as conn:
                conn.execute(queries.USAGE.delete())
            fill(ledger_, ledger_rows(platform, users, 12, NOW))
            for days in (1, 12):
                seen, stop = _statements(ledger_.engine)
                ledger_.read_sync(lambda conn: queries.compute(
                    conn, Viewer("root", admin=True), Selection(),
                    fg.Window.last_days(days, NOW), spot_pools(platform), max_ages(platform)))
                stop()
                counts[users, days] = len(seen)
        finally:
            ledger_.dispose()
    assert counts[4, 1] == counts[40, 1] <= 8
    assert counts[4, 12] == counts[40, 12] <= 12


def _plan(ledger, query) -> str:  # noqa: F811
    with ledger.engine.connect() as conn:
        compiled = query.compile(conn, compile_kwargs={"literal_binds": True})
        rows = conn.execute(sa.text(f"EXPLAIN QUERY PLAN {compiled}")).all()
    return " | ".join(str(r[-1]) for r in rows)


def test_the_queries_use_the_indexes(tmp_path, platform):
    """SQLite's plans: a user's page searches the index on (user, requested_at), the
    queue waits of a team the one on (team, requested_at, ...) alone, without reading
    the table -- not a scan of the table."""
    ledger_ = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
    try:
        fill(ledger_, ledger_rows(platform, 10, 3, NOW))
        mine = sa.select(queries.USAGE.c.key).where(
            *queries.visible(Viewer("user0001"), Selection()),
            queries.of_period(NOW - timedelta(days=7)))
        assert "USING INDEX ix_jupyterhub_gpu_usage_user_requested_at" in _plan(ledger_, mine)
        for read in (ledger_.queue_waits_sync, ledger_.median_waits_sync):
            seen = []

            def keep(conn, cursor, statement, parameters, *args):
                seen.append((statement, parameters))
            sa.event.listen(ledger_.engine, "before_cursor_execute", keep)
            read("data-science", NOW - timedelta(days=7))
            sa.event.remove(ledger_.engine, "before_cursor_execute", keep)
            with ledger_.engine.connect() as conn:
                plan = " | ".join(str(r[-1]) for r in conn.exec_driver_sql(
                    f"EXPLAIN QUERY PLAN {seen[-1][0]}", seen[-1][1]).all())
            assert "USING COVERING INDEX ix_jupyterhub_gpu_usage_team_waits (team=? AND " \
                   "requested_at>?)" in plan, (read, plan)
    finally:
        ledger_.dispose()


def test_queue_waits_come_from_the_ledger(ledger, platform):  # noqa: F811
    """Admitted, out of patience and left by the user count; a failed start, a
    request still queued, another team's, and one older than the window do not."""
    team = next(t for t in platform.teams if t.name == "data-science")
    t = NOW - timedelta(hours=1)

    def row(key, wait_until=None, **kw):
        return Usage(key, kw.pop("kind", Kind.SESSION), team=kw.pop("team", team.name),
                     profile="t4-shared", requested_at=kw.pop("requested_at", t),
                     admitted_at=wait_until, **kw)
    for u in (row("admitted", t + timedelta(seconds=30)),
              row("patience", stopped_at=t + timedelta(seconds=300),
                  stop_reason=StopReason.QUEUE_TIMEOUT),
              row("left", stopped_at=t + timedelta(seconds=60), stop_reason=StopReason.USER),
              row("failed", stopped_at=t + timedelta(seconds=5),
                  stop_reason=StopReason.FAILURE),
              row("queued"), row("other", t + timedelta(seconds=9), team="ml-eng"),
              row("old", NOW - timedelta(days=8), requested_at=NOW - timedelta(days=8)),
              row("job", t + timedelta(seconds=1), kind=Kind.JOB)):
        ledger.record_sync(u)
    waits = asyncio.run(queuewaits.recent(ledger, team, NOW))
    assert sorted(w.seconds for w in waits) == [30.0, 60.0, 300.0]
    assert {(w.queue, w.profile) for w in waits} == {(team.local_queue, "t4-shared")}
    assert {w.at for w in waits} == {t + timedelta(seconds=s) for s in (30, 60, 300)}


def test_the_typical_waits_are_the_medians_the_definition_gives(ledger, platform):  # noqa: F811
    """The medians the database takes (odd and even counts, ties, profiles with a
    single wait) equal :func:`typical_waits` over the waits read row by row, for each
    team of a generated ledger, in one query however many waits."""
    fill(ledger, ledger_rows(platform, users=30, days=10, now=NOW))
    t = NOW - timedelta(days=6)
    spread = {"odd": (50.0, 10.0, 90.0, 30.0, 70.0), "even": (10.0, 31.0), "tie": (4.0, 4.0),
              "one": (2.5,)}
    for team in platform.teams:
        for profile, waits in spread.items():
            for i, seconds in enumerate(waits):
                ledger.record_sync(Usage(
                    f"{team.name}-{profile}-{i}", Kind.SESSION, team=team.name,
                    profile=profile, requested_at=t, admitted_at=t + timedelta(seconds=seconds)))
    for team in platform.teams:
        rows = asyncio.run(queuewaits.recent(ledger, team, NOW))
        seen, stop = _statements(ledger.engine)
        found = asyncio.run(queuewaits.typical(ledger, team, NOW))
        stop()
        assert len(seen) == 1 and len(rows) > 20
        assert found == typical_waits(rows, team.local_queue, NOW), team.name
        assert {p: found[p] for p in spread} == {
            "odd": (50.0, 5), "even": (20.5, 2), "tie": (4.0, 2), "one": (2.5, 1)}


def test_writes_made_while_the_thread_is_busy_share_one_transaction(ledger):  # noqa: F811
    """A burst of spawns: the writes queued behind a slow one go in one transaction."""
    ledger.record_sync(Usage("first", Kind.SESSION))
    release = threading.Event()
    ledger._thread.submit(release.wait)  # the ledger's thread is busy meanwhile
    done = [ledger.submit(Usage(f"pod:{i}", Kind.SESSION, user="u", requested_at=NOW))
            for i in range(20)]
    done.append(ledger.submit(Usage("pod:3", Kind.SESSION, stopped_at=NOW,
                                    stop_reason=StopReason.USER)))
    before = ledger.writes
    release.set()
    assert done[-1].result(timeout=30).stop_reason is StopReason.USER
    assert ledger.writes == before + 1
    assert len(ledger.rows_sync()) == 21


def test_each_write_of_a_batch_changes_its_own_row_only(ledger):  # noqa: F811
    """The ledger's statements are made once, each row's key and values their
    parameters: in one batch, new rows and updates of several rows land each in its
    row, every field kept, and the rows not written stay as they were."""
    for i in range(3):
        ledger.record_sync(Usage(f"pod:{i}", Kind.SESSION, user=f"u{i}", team="t",
                                 requested_at=NOW))
    release = threading.Event()
    ledger._thread.submit(release.wait)
    stops = [ledger.submit(Usage(f"pod:{i}", Kind.SESSION, pool=f"p{i}", gpu_units=i + 1,
                                 admitted_at=NOW + timedelta(seconds=i + 1),
                                 stopped_at=NOW + timedelta(hours=i + 1), stop_reason=reason))
             for i, reason in ((0, StopReason.USER), (2, StopReason.PREEMPTED))]
    new = ledger.submit(Usage("pod:new", Kind.SESSION, user="n", requested_at=NOW))
    release.set()
    for done in (*stops, new):
        done.result(timeout=30)
    rows = {u.key: u for u in ledger.rows_sync()}
    assert rows == {
        "pod:0": Usage("pod:0", Kind.SESSION, user="u0", team="t", pool="p0", gpu_units=1,
                       requested_at=NOW, admitted_at=NOW + timedelta(seconds=1),
                       stopped_at=NOW + timedelta(hours=1), stop_reason=StopReason.USER,
                       queue_wait_seconds=1.0),
        "pod:1": Usage("pod:1", Kind.SESSION, user="u1", team="t", requested_at=NOW),
        "pod:2": Usage("pod:2", Kind.SESSION, user="u2", team="t", pool="p2", gpu_units=3,
                       requested_at=NOW, admitted_at=NOW + timedelta(seconds=3),
                       stopped_at=NOW + timedelta(hours=3), stop_reason=StopReason.PREEMPTED,
                       queue_wait_seconds=3.0),
        "pod:new": Usage("pod:new", Kind.SESSION, user="n", requested_at=NOW)}


def test_a_bad_write_in_a_batch_fails_alone(ledger):  # noqa: F811
    release = threading.Event()
    ledger._thread.submit(release.wait)
    good = ledger.submit(Usage("pod:good", Kind.SESSION, user="u"))
    bad = ledger.submit(Usage("pod:bad", Kind.SESSION, user="u" * 5000))  # too long: PG
    bad_kind = ledger.submit(Usage("x" * 200, Kind.SESSION))  # key longer than its column
    release.set()
    assert good.result(timeout=30).user == "u"
    # refused on both databases, whatever the driver does with an over-long parameter
    with pytest.raises(TooLong, match=r"user \(5000 characters; at most 255\)"):
        bad.result(timeout=30)
    with pytest.raises(TooLong, match=r"key \(200 characters; at most 80\)"):
        bad_kind.result(timeout=30)
    assert {u.key for u in ledger.rows_sync()} == {"pod:good"}


def test_sqlite_runs_in_wal_mode(tmp_path):
    ledger_ = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
    try:
        ledger_.record_sync(Usage("k", Kind.SESSION))
        with ledger_.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        ledger_.dispose()
