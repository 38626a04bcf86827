"""The hub's shared watches, in KubeSpawner's reflector pattern: one per namespace
and kind for the whole hub process, stored under KubeSpawner's reflector key, never
a request per user.

Importing this package imports none of its modules.
"""
