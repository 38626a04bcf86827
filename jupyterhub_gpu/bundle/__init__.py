"""The AKS deployment bundle, derived from the one GPU platform spec.

Pure builders (typed spec objects in, dicts out, no I/O):

* :mod:`.namespaces` -- the team namespaces and the hub's RBAC in them;
* :mod:`.kueueconfig` -- Kueue's ``Configuration`` (pod integration, scoped);
* :mod:`.terraform` -- the GPU node pools as Terraform variables;
* :mod:`.helm` -- the spec-derived part of the z2jh Helm values;
* :mod:`.check` -- the comparisons behind ``jupyterhub-gpu check-bundle``;
* :mod:`.reference` -- the generated config reference of the docs.

:mod:`.files` and :mod:`.cli` do the reading and writing.
"""
