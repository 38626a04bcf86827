"""Parse the spec's ``jobProfiles``: the kinds of batch job users may submit.

A job profile is read like a notebook profile (:mod:`jupyterhub_gpu.spec.parse`): every
problem is collected into the shared list of errors, naming ``job profile '<slug>'``
and the field; the checks that need the pools and priorities (the pools exist and
offer one GPU resource, a pod fits its pool's node, the priority is declared, the
checkpoint has storage) are :mod:`jupyterhub_gpu.spec.validate`'s, shared with notebook
profiles.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .model import JobProfile, Platform
from .fields import list_entry, profile_fields, units_on_pools

SECTION = "jobProfile"


def job_profile(errors: list[str], data: Any, index: int) -> JobProfile | None:
    """``jobProfiles[index]``, or None when it has an error (each is in ``errors``)."""
    s, n_errors = list_entry(errors, data, index, SECTION, key="slug")
    common = profile_fields(s)  # gpus by the pool's kind: job_profiles_on_pools
    profile = JobProfile(
        **common,
        pods=s.get("pods"),
        image=s.get("image"),
        max_run_seconds=s.get("maxRunTime"),
        retries=s.get("retries"),
    )
    return profile if len(errors) == n_errors else None


def job_profiles_on_pools(errors: list[str], platform: Platform) -> tuple[JobProfile, ...]:
    """The job profiles with their GPUs per pod by their pools' kind: none on a
    CPU-only pool (where ``gpus`` is an error), else the given or default count."""
    return tuple(
        dataclasses.replace(job, units=units_on_pools(errors, platform, job, SECTION,
                                                      {"gpus": job.units})[1])
        for job in platform.job_profiles)
