"""The queue waits in the hub's database: JupyterHub's own session factory and a
SQLite file, as z2jh's hub keeps it on its PVC; a new session factory on the same file
is the hub after a restart."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from jupyterhub import orm

from jupyterhub_gpu.hub import queuewaits
from jupyterhub_gpu.hub.availability import QueueWait

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def _hub_db(path):
    return orm.new_session_factory(f"sqlite:///{path}")()


def test_waits_survive_a_hub_restart_and_old_ones_go(tmp_path):
    db = _hub_db(tmp_path / "jupyterhub.sqlite")
    queuewaits.record(db, QueueWait(NOW - timedelta(days=9), "data-science", "cpu", 7))
    for hours, seconds in ((30, 12.5), (2, 40)):
        queuewaits.record(db, QueueWait(NOW - timedelta(hours=hours), "data-science",
                                        "t4-shared", seconds))
    queuewaits.record(db, QueueWait(NOW, "ml-eng", "t4-shared", 3))
    db.close()

    restarted = _hub_db(tmp_path / "jupyterhub.sqlite")
    assert queuewaits.recent(restarted, "data-science", NOW) == [
        QueueWait(NOW - timedelta(hours=30), "data-science", "t4-shared", 12.5),
        QueueWait(NOW - timedelta(hours=2), "data-science", "t4-shared", 40)]
    rows = restarted.execute(sa.text(f"SELECT count(*) FROM {queuewaits.TABLE}")).scalar()
    assert rows == 3, "the 9-day-old wait was deleted"


def test_the_table_sits_beside_jupyterhubs_own(tmp_path):
    db = _hub_db(tmp_path / "jupyterhub.sqlite")
    user = orm.User(name="alice")
    db.add(user)
    db.commit()
    assert queuewaits.recent(db, "data-science", NOW) == []
    tables = set(sa.inspect(db.get_bind()).get_table_names())
    assert {"users", "spawners", "alembic_version", queuewaits.TABLE} <= tables
    assert db.query(orm.User).one().name == "alice"


def test_a_spawns_wait_is_written_off_the_hubs_session_and_kept(tmp_path):
    """The spawn's saver leaves the hub's session alone (no transaction of the hub's
    waits for the commit); the row is there once the writer's thread is done, also
    for the hub after a restart."""
    db = _hub_db(tmp_path / "jupyterhub.sqlite")
    save = queuewaits.saver(db, "data-science", "t4-shared", logging.getLogger("test"))
    writer = queuewaits.Writer.of(db, logging.getLogger("test"))
    assert writer is not None and writer.engine is not db.get_bind()
    before = datetime.now(timezone.utc)
    save(12.5)
    save(3.0)
    assert not db.in_transaction(), "the hub's session was not used"
    writer.submit(QueueWait(NOW - timedelta(days=30), "ml-eng", "cpu", 1)).result(timeout=30)

    restarted = _hub_db(tmp_path / "jupyterhub.sqlite")
    waits = queuewaits.recent(restarted, "data-science", datetime.now(timezone.utc))
    assert [(w.queue, w.profile, w.seconds) for w in waits] == [
        ("data-science", "t4-shared", 12.5), ("data-science", "t4-shared", 3.0)]
    assert all(w.at >= before for w in waits)


def test_an_in_memory_hub_database_is_written_through_the_hubs_session():
    db = orm.new_session_factory("sqlite://")()
    assert queuewaits.Writer.of(db, logging.getLogger("test")) is None
    queuewaits.saver(db, "data-science", "t4-shared", logging.getLogger("test"))(7.0)
    assert [w.seconds for w in queuewaits.recent(db, "data-science",
                                                datetime.now(timezone.utc))] == [7.0]
