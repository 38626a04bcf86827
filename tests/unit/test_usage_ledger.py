"""The usage ledger (jupyterhub_gpu.usage) on SQLite and on a real PostgreSQL server:
its schema from the shipped migrations, idempotent writes across a hub restart, the
hub's and the jobs service's writers, every stop reason and the queue wait."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from jupyterhub_gpu.contract import (JOB_PROFILE_LABEL, JOB_UID_LABEL, PROFILE_LABEL,
                                     QUEUE_LABEL, USERNAME_KEY)
from jupyterhub_gpu.kueue.lifecycle import Outcome
from jupyterhub_gpu.usage import hub, records
from jupyterhub_gpu.ledger import migrate
from jupyterhub_gpu.ledger.rollup import MONTHLY_TABLE, ROLLUP_TABLE
from jupyterhub_gpu.usage.jobs import JobRecorder
from jupyterhub_gpu.ledger.store import TABLE, Kind, Ledger, StopReason, Usage, metadata

from ..postgres import postgres_server

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)
LOG = logging.getLogger("test")


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def postgres_url():
    with postgres_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """An empty database of each kind: a fresh SQLite file, or a fresh PostgreSQL
    database on the module's server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/usage.sqlite"
        return
    server = request.getfixturevalue("postgres_url")
    name = f"t{abs(hash(request.node.nodeid)) % 10**9}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    yield server.rsplit("/", 1)[0] + f"/{name}"
    with admin.connect() as conn:
        conn.execute(sa.text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture
def ledger(db_url):
    opened = Ledger(db_url)
    yield opened
    opened.dispose()


def pod(uid="u1", *, created=T0, running=None, profile="t4-shared", queue="data-science",
        namespace="jhub-data-science", user="alice", pool=None):
    status = {}
    if running:
        status = {"phase": "Running", "containerStatuses": [
            {"name": "notebook", "state": {"running": {"startedAt": iso(running)}}}]}
    annotations = {USERNAME_KEY: user}
    return {"metadata": {"uid": uid, "name": f"jupyter-{user}", "namespace": namespace,
                         "creationTimestamp": iso(created), "annotations": annotations,
                         "labels": {PROFILE_LABEL: profile, QUEUE_LABEL: queue}},
            "spec": {}, "status": status}


def workload(owner_uid, admitted=None, pool="t4dev"):
    status = {}
    if admitted:
        status = {"conditions": [{"type": "QuotaReserved", "status": "True",
                                  "lastTransitionTime": iso(admitted)}],
                  "admission": {"podSetAssignments": [{"flavors": {"nvidia.com/gpu": pool}}]}}
    return {"metadata": {"name": f"w-{owner_uid}", "labels": {JOB_UID_LABEL: owner_uid}},
            "status": status}


def test_migrations_create_the_schema_at_head(ledger):
    assert migrate.current(ledger.engine) is None
    assert migrate.upgrade(ledger.engine) == migrate.head()
    assert migrate.current(ledger.engine) == migrate.head()
    with ledger.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "version_table": migrate.VERSION_TABLE,
            "include_name": lambda name, kind, _: kind != "table"
            or name in (TABLE, ROLLUP_TABLE, MONTHLY_TABLE)})
        # the shipped migrations build exactly the tables the ledger writes
        assert compare_metadata(context, metadata) == []
    assert migrate.upgrade(ledger.engine) == migrate.head()  # again: nothing to do


def test_the_ledger_shares_a_database_with_jupyterhub(db_url):
    """JupyterHub's own Alembic table (alembic_version) is left alone."""
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE alembic_version (version_num VARCHAR(32))"))
        conn.execute(sa.text("INSERT INTO alembic_version VALUES ('4621fec11365')"))
    migrate.upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() \
            == "4621fec11365"
    engine.dispose()


def test_a_restarted_hub_updates_the_same_row(db_url, platform):
    """A hub records a running session; a new hub process (new ledger, new writer)
    sees the same pod and then its stop: one row, with the first hub's facts."""
    running = pod(running=T0 + timedelta(minutes=3))
    admitted = workload("u1", admitted=T0 + timedelta(minutes=2))

    async def first_hub():
        writer = hub.SessionRecorder(Ledger(db_url), LOG)
        writer.started(platform, running, admitted, "", hub.outcome_reason(Outcome.STARTED))
        await hub.settle()
        writer.ledger.dispose()

    async def second_hub():
        writer = hub.SessionRecorder(Ledger(db_url), LOG)
        later = pod(created=T0 + timedelta(hours=1), running=T0 + timedelta(hours=1))
        writer.seen(platform, later, workload("u1", T0 + timedelta(hours=1)), "")  # same uid
        writer.stopped("u1", StopReason.USER, T0 + timedelta(hours=2))
        writer.stopped("u1", StopReason.FAILURE, T0 + timedelta(hours=3))  # too late: ignored
        await hub.settle()
        rows = writer.ledger.rows_sync()
        writer.ledger.dispose()
        return rows

    asyncio.run(first_hub())
    [row] = asyncio.run(second_hub())
    assert row == Usage(
        key="pod:u1", kind=Kind.SESSION, user="alice", server="", team="data-science",
        namespace="jhub-data-science", profile="t4-shared", pools="t4dev", pool="t4dev",
        gpu_units=1, price_per_unit_hour=platform.pool("t4dev").price_per_unit_hour,
        requested_at=T0, admitted_at=T0 + timedelta(minutes=2),
        running_at=T0 + timedelta(minutes=3), stopped_at=T0 + timedelta(hours=2),
        stop_reason=StopReason.USER, queue_wait_seconds=120.0)


def test_two_writers_at_once_make_one_row(db_url):
    ledgers = [Ledger(db_url) for _ in range(2)]
    ledgers[0].record_sync(Usage("pod:warm", Kind.SESSION))  # both upgraded first
    ledgers[1].record_sync(Usage("pod:warm", Kind.SESSION))
    barrier = threading.Barrier(2)

    def write(ledger, n):
        barrier.wait()
        for i in range(20):
            ledger.record_sync(Usage(f"pod:{i}", Kind.SESSION, user=f"w{n}"))

    threads = [threading.Thread(target=write, args=(lg, n)) for n, lg in enumerate(ledgers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = ledgers[0].rows_sync()
    assert sorted(r.key for r in rows) == sorted([f"pod:{i}" for i in range(20)] + ["pod:warm"])
    for lg in ledgers:
        lg.dispose()


def _stop_cases(platform):
    t4, spot = platform.profile("t4-shared"), platform.profile("a100-spot")
    now = T0 + timedelta(hours=9)
    return [
        (StopReason.USER, hub.user_stop_reason(t4, T0, now - timedelta(minutes=1), now)),
        (StopReason.IDLE_CULL, hub.user_stop_reason(t4, T0, now - timedelta(minutes=31), now)),
        (StopReason.MAX_AGE, hub.user_stop_reason(spot, T0, now, now)),
        (StopReason.PREEMPTED, records.stop_reason_of_notice("preempted", platform.pool("a100"))),
        (StopReason.SPOT_EVICTION,
         records.stop_reason_of_notice("evicted", platform.pool("a100spot"))),
        (StopReason.EVICTED, records.stop_reason_of_notice("evicted", platform.pool("a100"))),
        (StopReason.QUEUE_TIMEOUT, hub.outcome_reason(Outcome.QUEUE_TIMEOUT)),
        (StopReason.FAILURE, hub.outcome_reason(Outcome.NEVER_FITS)),
        (StopReason.FAILURE, hub.outcome_reason(Outcome.FAILED)),
        (StopReason.USER, hub.outcome_reason(Outcome.CANCELLED)),
    ]


def test_every_stop_reason_lands(ledger, platform):
    cases = _stop_cases(platform)
    for i, (expected, got) in enumerate(cases):
        assert got is expected, i
        ledger.record_sync(Usage(f"pod:{i}", Kind.SESSION, requested_at=T0,
                                 stopped_at=T0 + timedelta(hours=1), stop_reason=got))
    stored = {r.key: r.stop_reason for r in ledger.rows_sync()}
    assert stored == {f"pod:{i}": expected for i, (expected, _) in enumerate(cases)}


def test_the_hub_remembers_running_sessions_until_their_stop_and_a_bounded_few(
        ledger, platform, monkeypatch):
    """What a poll has recorded running is forgotten at the stop, and at most
    SEEN_RUNNING_MAX are kept: nothing grows with the hub's lifetime."""
    monkeypatch.setattr(hub, "SEEN_RUNNING_MAX", 3)

    async def polls():
        writer = hub.SessionRecorder(ledger, LOG)
        for i in range(5):
            for _ in range(2):  # every poll of a running server: written once
                writer.seen(platform, pod(f"u{i}", running=T0), workload(f"u{i}", T0), "")
        assert list(writer._seen_running) == ["pod:u2", "pod:u3", "pod:u4"]
        writer.stopped("u4", StopReason.USER)
        assert list(writer._seen_running) == ["pod:u2", "pod:u3"]
        await hub.settle()

    asyncio.run(polls())
    assert len(ledger.rows_sync()) == 5


def test_queue_wait(ledger, platform):
    """Until admission; a spawn that gave up unadmitted: its time in the queue."""
    async def spawns():
        writer = hub.SessionRecorder(ledger, LOG)
        writer.started(platform, pod("admitted", running=T0 + timedelta(seconds=95)),
                       workload("admitted", T0 + timedelta(seconds=90)), "", None)
        writer.started(platform, pod("gave-up"), workload("gave-up"), "",
                       StopReason.QUEUE_TIMEOUT)
        await hub.settle()

    asyncio.run(spawns())
    rows = {r.key: r for r in ledger.rows_sync()}
    assert set(rows) == {"pod:admitted", "pod:gave-up"}
    assert rows["pod:admitted"].queue_wait_seconds == 90.0
    gave_up = rows["pod:gave-up"]
    assert gave_up.admitted_at is None and gave_up.pool is None
    assert gave_up.queue_wait_seconds == (gave_up.stopped_at - T0).total_seconds()


def job(uid, *, profile="a100-train", created=T0, complete=None, failed=None, deleted=None,
        started=None):
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": iso(at)}
                  for kind, at in (("Complete", complete), ("Failed", failed)) if at]
    meta = {"uid": uid, "name": f"train-{uid}", "namespace": "jhub-ml-eng",
            "creationTimestamp": iso(created), "labels": {JOB_PROFILE_LABEL: profile},
            "annotations": {USERNAME_KEY: "bob"}}
    if deleted:
        meta["deletionTimestamp"] = iso(deleted)
    status = {"conditions": conditions, **({"startTime": iso(started)} if started else {})}
    return {"metadata": meta, "status": status}


class Watches:
    """The jobs service's watches, as JobRecorder reads them (their caches)."""

    ready = True

    def __init__(self, jobs, workloads, pods):
        self.jobs = {"jhub-ml-eng": SimpleNamespace(resources={j["metadata"]["name"]: j
                                                               for j in jobs})}
        self._workloads, self._pods = workloads, pods

    def workload_of(self, job):
        return self._workloads.get(job["metadata"]["uid"])

    def pods_of(self, job):
        return self._pods.get(job["metadata"]["uid"], [])


def test_the_jobs_writer(ledger, platform):
    """Jobs as the service's watches show them; a sweep after a service restart
    changes nothing; a job gone from the cluster is closed as its user's."""
    ran = pod("p", running=T0 + timedelta(minutes=10))
    watches = Watches(
        [job("done", complete=T0 + timedelta(hours=1)), job("broke", failed=T0 + timedelta(hours=2)),
         job("queued"), job("ddp", profile="a100-ddp-2"), job("gone")],
        {"done": workload("done", T0 + timedelta(minutes=5), pool="a100spot"),
         "broke": workload("broke", T0 + timedelta(minutes=1), pool="a100")},
        {"done": [ran]})

    async def sweeps():
        await JobRecorder(ledger, watches, lambda: platform).sweep()
        del watches.jobs["jhub-ml-eng"].resources["train-gone"]
        restarted = JobRecorder(Ledger(ledger.url), watches, lambda: platform)
        await restarted.sweep()
        restarted.ledger.dispose()

    asyncio.run(sweeps())
    rows = {r.key.removeprefix("job:"): r for r in ledger.rows_sync(Kind.JOB)}
    assert set(rows) == {"done", "broke", "queued", "ddp", "gone"}
    done = rows["done"]
    assert (done.user, done.team, done.profile, done.pools, done.pool, done.gpu_units) == \
        ("bob", "ml-eng", "a100-train", "a100spot,a100", "a100spot", 1)
    assert done.price_per_unit_hour == platform.pool("a100spot").price_per_unit_hour
    assert (done.admitted_at, done.running_at, done.stopped_at, done.stop_reason) == (
        T0 + timedelta(minutes=5), T0 + timedelta(minutes=10), T0 + timedelta(hours=1),
        StopReason.COMPLETED)
    assert done.queue_wait_seconds == 300.0
    assert (rows["broke"].stop_reason, rows["broke"].pool) == (StopReason.FAILURE, "a100")
    assert rows["broke"].price_per_unit_hour == platform.pool("a100").price_per_unit_hour
    assert rows["queued"].stopped_at is None and rows["queued"].queue_wait_seconds is None
    assert rows["ddp"].gpu_units == 2  # 2 pods of 1 unit
    assert rows["gone"].stop_reason is StopReason.USER and rows["gone"].stopped_at > T0


def test_a_deleted_job_is_the_users():
    usage = records.job(SimpleNamespace(teams=(), job_profiles=(), pools=()),
                        job("x", deleted=T0 + timedelta(hours=1)), None, [])
    assert (usage.stopped_at, usage.stop_reason) == (T0 + timedelta(hours=1), StopReason.USER)


def test_a_job_that_ended_with_its_pods_gone_is_billed_from_its_start():
    """The jobs service was down while the job ran and its pods are gone: its hours
    run from the Job's startTime; a job that never left the queue has none."""
    spec = SimpleNamespace(teams=(), job_profiles=(), pools=())
    ended = records.job(spec, job("x", started=T0 + timedelta(minutes=7),
                                  complete=T0 + timedelta(hours=1)), None, [])
    assert (ended.running_at, ended.stopped_at) == (T0 + timedelta(minutes=7),
                                                    T0 + timedelta(hours=1))
    ran = pod("p", running=T0 + timedelta(minutes=10))
    assert records.job(spec, job("y", started=T0 + timedelta(minutes=7),
                                 complete=T0 + timedelta(hours=1)), None, [ran]).running_at \
        == T0 + timedelta(minutes=10)  # its pod says when it ran
    never = records.job(spec, job("z", deleted=T0 + timedelta(hours=1)), None, [])
    assert never.running_at is None
    running = records.job(spec, job("w", started=T0 + timedelta(minutes=7)), None, [])
    assert running.running_at is None  # still running: its pods will say


def test_one_url_for_the_hub_and_the_jobs_service(tmp_path, monkeypatch, example_spec_path):
    """``c.UsageLedger.db_url`` reaches the jobs service; unset, both use the SQLite
    file in the hub's working directory."""
    from traitlets.config import Config

    from jupyterhub_gpu.contract import ENV_USAGE_DB_URL
    from jupyterhub_gpu.jobs.config import add_jobs_service
    from jupyterhub_gpu.usage.config import UsageLedger

    monkeypatch.chdir(tmp_path)
    c = Config()
    add_jobs_service(c, str(example_spec_path), "http://127.0.0.1:10101")
    expected = f"sqlite:///{tmp_path}/jupyterhub-gpu-usage.sqlite"
    assert c.JupyterHub.services[0]["environment"][ENV_USAGE_DB_URL] == expected
    assert UsageLedger(config=c).db_url == expected
    c = Config()
    c.UsageLedger.db_url = "postgresql+psycopg://hub@db/jupyterhub"
    add_jobs_service(c, str(example_spec_path), "http://127.0.0.1:10101")
    assert c.JupyterHub.services[0]["environment"][ENV_USAGE_DB_URL] == c.UsageLedger.db_url


def test_the_cli_upgrades_and_exports(db_url, capsys):
    from jupyterhub_gpu.cli import main

    assert main(["usage", "upgrade", "--db-url", db_url]) == 0
    assert capsys.readouterr().out.endswith(f"revision (none) -> {migrate.head()} (head)\n")
    Ledger(db_url).record_sync(Usage("pod:a", Kind.SESSION, user="alice", requested_at=T0,
                                     stopped_at=T0, stop_reason=StopReason.IDLE_CULL))
    assert main(["usage", "upgrade", "--db-url", db_url]) == 0
    assert f"revision {migrate.head()} -> {migrate.head()}" in capsys.readouterr().out
    assert main(["usage", "export", "--db-url", db_url]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.startswith("key,kind,user,")
    assert row.split(",")[:3] == ["pod:a", "session", "alice"] and "idle-cull" in row


def test_the_cli_says_what_is_wrong_with_a_url(capsys):
    from jupyterhub_gpu.cli import main

    url = "postgresql+psycopg://hub:s3cret@127.0.0.1:1/jupyterhub"
    assert main(["usage", "upgrade", "--db-url", url]) == 1
    error = capsys.readouterr().err
    assert error.startswith("error: cannot open the usage ledger at 'postgresql+psycopg://hub:***@")
    assert "s3cret" not in error
    assert main(["usage", "export", "--db-url", "no-such-url"]) == 1
    assert "Could not parse" in capsys.readouterr().err


@pytest.mark.parametrize("url,fix", [
    ("postgresql+psycopg://hub:s3cret@db/jupyterhub",
     "needs the Python module psycopg, which is not installed: pip install "
     "'jupyterhub-gpu[postgresql]'"),
    ("postgresql+psycopg2://hub:s3cret@db/jupyterhub",
     "needs the Python module psycopg2, which is not installed: install psycopg2, or use "
     "postgresql+psycopg:// with pip install 'jupyterhub-gpu[postgresql]'"),
])
def test_a_postgresql_url_without_its_driver_names_what_to_install(monkeypatch, capsys,
                                                                   url, fix):
    """As where the [postgresql] extra is not installed: no traceback, the extra named."""
    from jupyterhub_gpu.cli import main
    from jupyterhub_gpu.ledger.engine import LedgerError

    for module in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(LedgerError) as error:
        Ledger(url)
    assert fix in str(error.value) and "s3cret" not in str(error.value)
    for command in ("upgrade", "export"):
        assert main(["usage", command, "--db-url", url]) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: cannot open the usage ledger at 'postgresql")
        assert err.endswith(f"{fix}\n") and "Traceback" not in err and "s3cret" not in err


def test_a_pod_gone_while_the_hub_was_down_is_closed(ledger, platform):
    """The restarted hub finds the server's pod gone (no watch saw it go): the
    server's open row is closed as a failure; other servers' rows are left alone."""
    async def hubs():
        first = hub.SessionRecorder(ledger, LOG)
        for uid, user in (("a", "alice"), ("b", "bob")):
            first.started(platform, pod(uid, user=user, running=T0), workload(uid, T0), "", None)
        await hub.settle()
        hub.SessionRecorder(Ledger(ledger.url), LOG).lost("alice", "")
        await hub.settle()

    asyncio.run(hubs())
    rows = {r.user: r for r in ledger.rows_sync()}
    assert rows["alice"].stop_reason is StopReason.FAILURE and rows["alice"].stopped_at > T0
    assert rows["bob"].stopped_at is None


def test_a_job_submitted_and_cancelled_between_two_sweeps(ledger, platform):
    """The service records a job when it creates it and when its user cancels it, so
    a job shorter than a sweep still has its row; a job that had ended stays ended."""
    short, ended = job("short"), job("ended", complete=T0 + timedelta(minutes=1))
    watches = Watches([], {"short": workload("short", T0 + timedelta(seconds=4), pool="a100")},
                      {})

    async def service():
        recorder = JobRecorder(ledger, watches, lambda: platform)
        await recorder.submitted(short)
        await recorder.cancelled(short)
        await recorder.submitted(ended)
        await recorder.cancelled(ended)
        await recorder.sweep()  # neither is in the watches any more: nothing changes

    asyncio.run(service())
    rows = {r.server: r for r in ledger.rows_sync(Kind.JOB)}
    assert rows["train-short"].stop_reason is StopReason.USER
    assert rows["train-short"].queue_wait_seconds == 4.0
    assert (rows["train-ended"].stop_reason, rows["train-ended"].stopped_at) == (
        StopReason.COMPLETED, T0 + timedelta(minutes=1))


def test_the_culler_records_why_it_culls(ledger, platform, example_spec_path):
    """The culler's hook writes its rule on the server's row (by the pod uid in
    GPUSpawner's state) before the culler stops it; the hub's stop then adds the time
    and keeps that reason. A dry run, or a server with no uid in its state, writes
    nothing."""
    from prometheus_client import CollectorRegistry

    from jupyterhub_gpu.contract import STATE_POD_UID
    from jupyterhub_gpu.cull.hook import HookSettings, make_arbiter
    from jupyterhub_gpu.cull.metrics import CullMetrics

    now = T0 + timedelta(hours=9)

    def model(user, profile, uid, idle):
        return {"name": "", "full_name": f"{user}/", "ready": True, "pending": None,
                "started": T0.isoformat(), "last_activity": (now - idle).isoformat(),
                "user_options": {"profile": profile},
                "state": {"pod_name": f"jupyter-{user}", "namespace": "jhub-data-science",
                          **({STATE_POD_UID: uid} if uid else {})}}

    def arbiter(dry_run):
        settings = HookSettings(str(example_spec_path), None, dry_run, usage_db_url=ledger.url)
        return make_arbiter(settings, clock=lambda: now, metrics=CullMetrics(CollectorRegistry()))

    async def culls():
        hook, dry = arbiter(False), arbiter(True)
        assert await hook(server=model("alice", "t4-shared", "idle", timedelta(hours=1)))
        assert await hook(server=model("bob", "a100-spot", "old", timedelta(minutes=1)))
        assert not await hook(server=model("carol", "t4-shared", "busy", timedelta(minutes=1)))
        assert not await dry(server=model("dan", "t4-shared", "dry", timedelta(hours=1)))
        assert await hook(server=model("eve", "t4-shared", None, timedelta(hours=1)))
        writer = hub.SessionRecorder(Ledger(ledger.url), LOG)
        for uid in ("idle", "old"):  # the culler's DELETE reaches the hub's stop()
            writer.stopped(uid, StopReason.USER)
        await hub.settle()

    asyncio.run(culls())
    rows = {r.key: r for r in ledger.rows_sync()}
    assert set(rows) == {"pod:idle", "pod:old"}
    assert rows["pod:idle"].stop_reason is StopReason.IDLE_CULL
    assert rows["pod:old"].stop_reason is StopReason.MAX_AGE
    assert all(r.stopped_at is not None for r in rows.values())


async def test_the_pod_uid_survives_in_the_spawner_state(make_spawner):
    """GPUSpawner keeps its pod's uid in its state (a restarted hub still has it for
    the culler) until the server's state is cleared."""
    from jupyterhub_gpu.contract import STATE_POD_UID

    spawner = make_spawner()
    spawner.load_state({"pod_name": "jupyter-alice", STATE_POD_UID: "uid-1"})
    assert spawner.get_state()[STATE_POD_UID] == "uid-1"
    spawner.clear_state()
    assert STATE_POD_UID not in spawner.get_state()


async def test_a_platform_stop_lands_with_its_reason(make_spawner, tmp_path, platform):
    """GPUSpawner's stop notice (Kueue preemption, a node gone) reaches the ledger: on
    a spot pool a node gone is a spot eviction."""
    from jupyterhub_gpu.kueue.messages import StopNotice

    ledger = Ledger(f"sqlite:///{tmp_path}/usage.sqlite")
    spawner = make_spawner()
    spawner._usage.recorder = hub.SessionRecorder(ledger, LOG)  # the hub's writer
    spawner._grant_platform = platform
    cases = {"p": ("preempted", "a100", StopReason.PREEMPTED),
             "s": ("evicted", "a100spot", StopReason.SPOT_EVICTION),
             "e": ("evicted", "a100", StopReason.EVICTED)}
    for uid, (reason, pool, _) in cases.items():
        spawner.gpu_stop_notice = None  # a new server
        spawner._stops.record(uid, StopNotice(reason, T0.isoformat(), "stopped", pool),
                             "a100-spot")
    await hub.settle()
    rows = {r.key: r.stop_reason for r in await ledger.rows()}
    assert rows == {f"pod:{uid}": expected for uid, (_, _, expected) in cases.items()}


def test_rows_of_a_period(ledger):
    """The usage page reads only the rows of its period: requested in it, stopped in
    it, or still open."""
    now = datetime(2026, 3, 10, tzinfo=timezone.utc)
    since = now - timedelta(days=7)
    day = timedelta(days=1)
    for key, requested, stopped in (("old", now - 20 * day, now - 19 * day),
                                    ("over-the-start", since - day, since + day / 24),
                                    ("open", now - 30 * day, None),
                                    ("new", now - day, now)):
        ledger.record_sync(Usage(key, Kind.SESSION, requested_at=requested, stopped_at=stopped))
    assert [u.key for u in ledger.rows_sync(since=since)] == ["open", "over-the-start", "new"]
    assert len(ledger.rows_sync()) == 4


def test_a_row_another_process_inserted_meanwhile_is_merged_not_duplicated(ledger, db_url):
    """Two writers (two processes: two engines) on the same key: the second one's
    insert finds the first one's row, and merges its facts into it."""
    other = Ledger(db_url)
    try:
        other.record_sync(Usage("pod:race", Kind.SESSION, user="alice", requested_at=T0))
        assert ledger.record_sync(Usage("pod:race", Kind.SESSION, user="bob",
                                        running_at=T0 + timedelta(seconds=5))) == Usage(
            "pod:race", Kind.SESSION, user="alice", requested_at=T0,
            running_at=T0 + timedelta(seconds=5))
    finally:
        other.dispose()
    from jupyterhub_gpu.ledger.store import USAGE, _insert_if_absent

    with ledger.engine.begin() as conn:  # the insert of a key that exists does nothing
        assert not _insert_if_absent(conn, {"key": "pod:race", "kind": "session",
                                            "user": "mallory"})
        assert _insert_if_absent(conn, {"key": "pod:new", "kind": "session"})
    rows = ledger.rows_sync()
    assert [(u.key, u.user) for u in rows if u.key == "pod:race"] == [("pod:race", "alice")]
    assert {u.key for u in rows} == {"pod:race", "pod:new"} and USAGE.name == TABLE


def _failing_start(spawner, platform, error):
    """A real ``QueuedStart`` of ``spawner`` whose pod creation fails with ``error``
    (as when Kueue's webhook does not answer): nothing is created."""
    from jupyterhub_gpu.spec.grant import UserRef, authorize
    from jupyterhub_gpu.kueue.start import QueuedStart

    grant = authorize(platform, UserRef("alice", frozenset({"data-science"})),
                      {"profile": "t4-shared"})
    spawner.namespace = grant.team.namespace
    spawner._queued = QueuedStart(grant, spawner.namespace, pod=lambda: None,
                                  workloads=list, events=list, log=LOG, who="alice",
                                  on_outcome=spawner._usage.outcome)

    async def start():
        raise error

    async def withdraw():
        pass
    return spawner._queued, spawner._queued.run(start, withdraw)


async def test_a_start_that_failed_before_its_pod_existed_gets_a_row_of_its_own(
        make_spawner, ledger, platform):
    """Issue #15: a start the hub accepted that failed before its pod existed is in
    the ledger, as a failure, once per start, by its grant and the times it was asked
    for and failed; it bills nothing and was never queued."""
    from jupyterhub_gpu.ledger.store import podless

    spawner = make_spawner()
    spawner._usage.recorder = hub.SessionRecorder(ledger, LOG)
    spawner._grant_platform = platform
    starts = []
    for _ in range(2):  # the same server, twice: two rows
        queued, run = _failing_start(spawner, platform, RuntimeError("webhook refused"))
        with pytest.raises(RuntimeError, match="webhook refused"):
            await run
        starts.append(queued)
    await hub.settle()
    rows = sorted(await ledger.rows(), key=lambda r: r.requested_at)
    assert len(rows) == 2 and len({r.key for r in rows}) == 2
    grant = starts[0].grant
    for row, queued in zip(rows, starts):
        assert podless(row) and len(row.key) <= 80
        assert (row.kind, row.user, row.server) == (Kind.SESSION, "alice", "")
        assert (row.team, row.namespace, row.profile) == (
            "data-science", "jhub-data-science", "t4-shared")
        assert row.pools == ",".join(p.name for p in grant.pools)
        assert row.gpu_units == grant.profile.units
        assert row.requested_at == queued.requested_at
        assert row.stopped_at >= row.requested_at
        assert row.stop_reason is StopReason.FAILURE
        assert (row.pool, row.price_per_unit_hour, row.admitted_at, row.running_at,
                row.queue_wait_seconds) == (None, None, None, None, None)


def test_a_podless_failure_adds_no_gpu_hours_cost_or_queue_wait(platform):
    """The usage page's figures: a start that failed before its pod existed counts as
    a session that ended, with no GPU-hours, no cost and no queue wait; the replay's
    invariant holds for it."""
    from jupyterhub_gpu.spec.grant import UserRef, authorize
    from jupyterhub_gpu.replay.invariants import sessions_end_with_a_reason
    from jupyterhub_gpu.usage import figures
    from jupyterhub_gpu.ledger.store import merge

    grant = authorize(platform, UserRef("alice", frozenset({"data-science"})),
                      {"profile": "t4-shared"})
    failed = merge(None, records.podless_session(
        grant, "jhub-data-science", "alice", "", T0, T0 + timedelta(minutes=5),
        StopReason.FAILURE))
    window = figures.Window(T0 - timedelta(days=1), T0 + timedelta(days=1))
    assert failed.queue_wait_seconds is None
    assert figures.gpu_hours(failed, window) == 0 and figures.cost(failed, window) == 0
    assert figures.queue_waits([failed], window) == ()
    assert [(t.gpu_hours, t.cost) for t in figures.by_profile([failed], window)] in (
        [], [(0.0, 0.0)])
    assert figures.disruptions([failed], window, frozenset()).ended == 1
    assert sessions_end_with_a_reason([failed], {"alice": 1}) == []
    # the same start with no row: the invariant names the gap
    assert sessions_end_with_a_reason([], {"alice": 1})
