"""Benchmarks of jupyterhub-gpu against plain KubeSpawner and the stock idle culler.

``make bench`` (``python -m benchmarks``) runs them on a dev cluster of their own and
writes ``docs/benchmarks.md``; ``make bench-short`` runs every benchmark with tiny
numbers, only to prove none of them crashes. See ``docs/benchmarks.md``.
"""
