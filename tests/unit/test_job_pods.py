"""The dev cluster's stand-in kubelet for training Jobs: which pods it runs, where
their volumes are, and how a process's exit becomes the pod's result (pure parts)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jupyterhub_gpu.builders.job import Home, JobGrant, JobRequest, build_job
from jupyterhub_gpu.contract import ENV_CHECKPOINT_DIR
from jupyterhub_gpu.devcluster.contract import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION
from jupyterhub_gpu.devcluster import stages
from jupyterhub_gpu.devcluster.jobprocess import (is_runner_job, job_process, result_annotation,
                                                  translate)
from jupyterhub_gpu.devcluster.podrunner import PodRunner, pod_env, server_process


def _job_pod(platform, name="train-1", uid="u1", annotations=None, working_dir="") -> dict:
    """A running pod of the Job the builder makes for the example's checkpointed
    job profile, as the Job controller would create it."""
    profile = next(p for p in platform.job_profiles if p.checkpoint.enabled and p.pods == 1)
    team = platform.team_for(set(profile.allowed_groups))
    job, _ = build_job(JobRequest(
        name="train", user_slug="tia", username="tia", grant=JobGrant.of(platform, profile, team),
        image="img", command=("python", "/home/jovyan/train.py", "--out", "out"),
        home=Home("claim-tia", "/home/jovyan"), working_dir=working_dir,
        checkpoint_storage=platform.checkpoint_storage))
    template = job["spec"]["template"]
    return {"metadata": {**template["metadata"], "name": name, "namespace": team.namespace,
                         "uid": uid, "annotations": dict(annotations or {})},
            "spec": template["spec"], "status": {"phase": "Running", "podIP": "127.0.0.9"}}


def test_the_runner_runs_job_pods_without_run_for_and_no_notebook_as_a_job(platform):
    pod = _job_pod(platform)
    assert is_runner_job(pod) and job_process(pod, pod_env(pod), "/w") is not None
    assert server_process(pod) is None  # not a notebook server
    timed = _job_pod(platform, annotations={RUN_FOR_ANNOTATION: "20s"})
    assert not is_runner_job(timed)  # kwok finishes it
    assert job_process(timed, {}, "/w") is None
    deleting = _job_pod(platform)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert job_process(deleting, pod_env(deleting), "/w") is None


def test_volumes_are_directories_by_claim_and_sub_path(platform):
    storage = platform.checkpoint_storage
    first = job_process(pod := _job_pod(platform), pod_env(pod), "/w")
    again = job_process(pod := _job_pod(platform, "train-2", "u2"), pod_env(pod), "/w")
    assert first.mounts == again.mounts  # a recreated pod finds the same directories
    home = f"volumes/{pod['metadata']['namespace']}/claim-tia"
    checkpoints = f"volumes/{pod['metadata']['namespace']}/{storage.claim_name}/tia"
    assert first.cwd == home and first.env["HOME"] == f"/w/{home}"
    assert first.env[ENV_CHECKPOINT_DIR] == f"/w/{checkpoints}"
    assert first.argv == ("python", f"/w/{home}/train.py", "--out", "out")
    assert first.env["HOSTNAME"] == "train-1" and again.env["HOSTNAME"] == "train-2"
    assert translate("/elsewhere", first.mounts) is None


def test_a_job_works_in_its_scripts_directory_with_the_home_as_home(platform):
    """The Job's workingDir is the script's directory of the home; HOME stays the
    home's mount (the image's), not that directory."""
    pod = _job_pod(platform, working_dir="project")
    proc = job_process(pod, pod_env(pod), "/w")
    home = f"volumes/{pod['metadata']['namespace']}/claim-tia"
    assert (proc.cwd, proc.home, proc.env["HOME"]) == (f"{home}/project", home, f"/w/{home}")


def test_an_exit_code_becomes_the_pods_result_through_kwok():
    assert [result_annotation(c) for c in (0, 3, -15)] == ["0", "3", "143"]
    stage = stages.pod_exit()
    keys = {e["key"] for e in stage["spec"]["selector"]["matchExpressions"]}
    assert f'.metadata.annotations["{EXIT_CODE_ANNOTATION}"]' in keys
    template = stage["spec"]["next"]["statusTemplate"]
    assert "exitCode: {{ $code }}" in template and "phase: Failed" in template
    complete = stages.pod_complete()["spec"]["selector"]["matchExpressions"]
    assert {"key": f'.metadata.annotations["{RUN_FOR_ANNOTATION}"]',
            "operator": "Exists"} in complete  # only timed pods: kwok alone


class _Pods:
    def __init__(self):
        self.patches: list[tuple[str, str, dict]] = []

    async def patch_namespaced_pod(self, name, namespace, body):
        self.patches.append((namespace, name, body))


async def test_a_job_process_runs_once_in_its_volumes_and_reports_its_exit(platform, tmp_path):
    runner = PodRunner(tmp_path / "kubeconfig", tmp_path)
    runner._v1 = api = _Pods()
    pod = _job_pod(platform)
    container = pod["spec"]["containers"][0]
    container["command"] = ["sh", "-c", 'echo "$PWD" > seen; echo x > "$CHECKPOINT_DIR/c"; '
                            "exit 3"]
    await runner.handle("MODIFIED", pod)
    await asyncio.wait_for(asyncio.gather(*runner._waiters), 10)
    ((namespace, name, body),) = api.patches
    assert (namespace, name) == (pod["metadata"]["namespace"], "train-1")
    assert body == {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "3"}}}
    home = tmp_path / "volumes" / namespace / "claim-tia"
    assert Path((home / "seen").read_text().strip()) == home
    assert (tmp_path / "volumes" / namespace / platform.checkpoint_storage.claim_name
            / "tia" / "c").read_text() == "x\n"
    await runner.handle("MODIFIED", pod)  # before kwok has ended the pod: not again
    assert not runner.procs and len(api.patches) == 1


def test_the_runner_runs_a_gpu_kernels_launcher_on_the_pods_address(platform):
    """A GPU kernel's pod (as the gpu-kernels service builds it) is the runner's too: its
    command is the kernel launcher, which binds the kernel's ports on the pod's IP
    (``JUPYTERHUB_GPU_POD_IP``), so two kernels on one machine do not meet."""
    from jupyterhub_gpu.builders.kernel import (LAUNCHER_MODULE, KernelRequest, Launch, Owner,
                                                build_kernel_pod, kernel_name)
    from jupyterhub_gpu.contract import ENV_POD_IP
    from jupyterhub_gpu.spec.grant import UserRef, authorize

    kid = "5f0c2d9e-8b1a-4c3e-9d7f-0a1b2c3d4e5f"
    grant = authorize(platform, UserRef("tia", frozenset({"ml-eng"})), {"profile": "t4-shared"})
    built = build_kernel_pod(platform, KernelRequest(
        kernel_name("tia", kid), "tia", Owner("tia", ""), grant,
        Launch(kid, "127.0.0.8:52699", "MCowBQYDK2VuAyEA" + "C" * 28),
        home=Home("claim-tia", "/home/jovyan")))
    pod = {"metadata": {**built["metadata"], "uid": "k1"}, "spec": built["spec"],
           "status": {"phase": "Running", "podIP": "127.0.0.9"}}
    assert is_runner_job(pod) and server_process(pod) is None
    proc = job_process(pod, pod_env(pod), "/w")
    assert proc.argv[:3] == ("python", "-m", LAUNCHER_MODULE)
    assert proc.env[ENV_POD_IP] == "127.0.0.9"
    assert proc.cwd == f"volumes/{pod['metadata']['namespace']}/claim-tia"
