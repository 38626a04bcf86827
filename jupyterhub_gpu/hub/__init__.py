"""The hub process: GPUSpawner and what JupyterHub runs beside it.

* :mod:`.spawner` -- GPUSpawner (public path: :mod:`jupyterhub_gpu.spawner`), with its
  collaborators :mod:`.grants`, :mod:`.watching`, :mod:`.stops` and
  :mod:`jupyterhub_gpu.usage.spawner`;
* :mod:`.config` -- ``configure_hub``: the spawner, the spec and the hub's services;
* :mod:`.form`, :mod:`.servers`, :mod:`.withspec` -- the spawn form, one GPU server
  at a time, KubeSpawner unchanged without a spec;
* :mod:`.api`, :mod:`.availability`, :mod:`.queuewaits`, :mod:`.nodehealth` -- the
  profiles' availability the form and the REST API show;
* :mod:`.metrics` -- the hub's Prometheus metrics and platform-stop event;
* :mod:`.resume` -- the gpu-resume service; :mod:`.auth` -- group names from the spec;
* :mod:`.render` -- ``jupyterhub-gpu render``: the pod a user would get.

Importing this package imports none of its modules.
"""
