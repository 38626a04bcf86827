"""The usage ledger: one row per GPU session or job, in the hub's database or its
own (SQLAlchemy; the schema versioned with Alembic in ``migrations/``).

Written by the hub (:mod:`jupyterhub_gpu.usage.spawner`), the jobs service and the
culler; read by the usage page and the queue-wait history. Importing this package
imports none of its modules.
"""
