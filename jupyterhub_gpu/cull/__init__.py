"""Idle culling of GPU servers with jupyterhub-idle-culler, and the user's warning.

* :mod:`.policy`, :mod:`.gpu_window` -- the pure decision (no I/O, injectable clock);
* :mod:`.prometheus` -- GPU utilisation of every pod from DCGM exporter metrics;
* :mod:`.hook`, :mod:`.culler_config`, :mod:`.service` -- the culler's
  ``cull_arbiter_hook`` and how the hub runs it; :mod:`.metrics` -- its counters;
* :mod:`.notice`, :mod:`.server_ext`, :mod:`.lab_notice`, :mod:`.kernel_ext` --
  inside the notebook pod: the cull rules and deadline shown to the user in
  JupyterLab and in cell output; ``etc/`` holds the Jupyter config files that
  enable them.

Importing this package imports nothing else; the pod-side modules need neither
aiohttp, jupyterhub-idle-culler nor KubeSpawner.
"""
