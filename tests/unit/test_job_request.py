"""A job submission is checked as a spawn is: every refusal, and what is accepted."""

from __future__ import annotations

import pytest

from jupyterhub_gpu.builders.job import build_job
from jupyterhub_gpu.spec.grant import UserRef
from jupyterhub_gpu.contract import ENV_CHECKPOINT_DIR, USERNAME_KEY
from jupyterhub_gpu.jobs.request import (MAX_ARG_BYTES, MAX_ARGS_BYTES, MAX_SCRIPT_CHARS,
                                         JobRefused, check_submission, job_name,
                                         job_profiles_for, job_request)

BOB = UserRef("bob", frozenset({"ml-eng"}))  # team ml-eng: a100-train, a100-ddp-2
ALICE = UserRef("alice", frozenset({"data-science"}))
GOOD = {"profile": "a100-train", "script": "train/train.py", "args": ["--epochs", "3"]}


def test_a_good_request_and_what_it_runs(platform):
    sub = check_submission(platform, BOB, GOOD, active_jobs=0)
    assert sub.grant.profile.slug == "a100-train" and sub.grant.team.name == "ml-eng"
    # run in the script's directory, where the user's code (and its data) is
    assert (sub.directory, sub.command) == ("train", ("python", "train.py", "--epochs", "3"))
    top = check_submission(platform, BOB, {"profile": "a100-train", "script": "./a/../t.py"}, 0)
    assert (top.directory, top.command) == ("", ("python", "t.py"))


@pytest.mark.parametrize("user, body, user_words, log_words", [
    (BOB, [], "must be a JSON object", "body is a list"),
    (BOB, {**GOOD, "namespace": "jhub-data-science"}, "may not set namespace",
     "forged field(s) ['namespace']"),
    (BOB, {**GOOD, "image": "evil/miner"}, "may not set image", "forged field(s) ['image']"),
    (BOB, {**GOOD, "command": ["sh"]}, "Unknown field(s) 'command'", "extra field(s)"),
    (BOB, {**GOOD, "profile": "nope"}, "Unknown job profile 'nope'; yours: a100-train",
     "unknown job profile 'nope'"),
    (BOB, {**GOOD, "profile": ["a100-train"]}, "Unknown job profile", "unknown job profile"),
    (ALICE, GOOD, "You may not submit job profile 'a100-train'", "not allowed for groups"),
    (UserRef("eve", frozenset({"visitors"})), GOOD, "You are in no team", "no team"),
    (BOB, {**GOOD, "script": "/etc/passwd"}, "relative to your home", "absolute"),
    (BOB, {**GOOD, "script": "../../etc/x.py"}, "outside your home", "leaves the home"),
    (BOB, {**GOOD, "script": "a/../.."}, "outside your home", "leaves the home"),
    (BOB, {**GOOD, "script": ""}, "'script' must be", "script ''"),
    (BOB, {"profile": "a100-train"}, "'script' must be", "script None"),
    (BOB, {**GOOD, "args": "--lr 1"}, "'args' must be a list", "args"),
    (BOB, {**GOOD, "args": [1]}, "'args' must be a list", "args"),
    # Python takes a "script" that starts with "-" as its option: -c runs code
    (BOB, {**GOOD, "script": "-c"}, "starts with '-'", "is an option"),
    (BOB, {**GOOD, "script": "-m"}, "starts with '-'", "is an option"),
    (BOB, {**GOOD, "script": "./-c"}, "starts with '-'", "is an option"),
    (BOB, {**GOOD, "script": "a/../--help"}, "starts with '-'", "is an option"),
    # run from its directory, the file's name is what Python is given
    (BOB, {**GOOD, "script": "dir/-c.py"}, "starts with '-'", "is an option"),
    (BOB, {**GOOD, "script": "-"}, "starts with '-'", "is an option"),
    (BOB, {**GOOD, "script": "t.py\nINFO forged"}, "printable characters only", "script"),
    (BOB, {**GOOD, "script": "a" * (MAX_SCRIPT_CHARS + 1)},
     f"longer than {MAX_SCRIPT_CHARS} characters", "script path of"),
    # bounded: one argument, all of them, and what they may hold
    (BOB, {**GOOD, "args": ["x" * (5 * 2**20)]}, f"larger than {MAX_ARG_BYTES} bytes",
     f"an argument of {5 * 2**20} bytes"),
    (BOB, {**GOOD, "args": ["a", "é" * (MAX_ARG_BYTES // 2 + 1)]},
     f"larger than {MAX_ARG_BYTES} bytes (argument 2", "an argument of"),
    (BOB, {**GOOD, "args": ["x" * MAX_ARG_BYTES] * (MAX_ARGS_BYTES // MAX_ARG_BYTES + 1)},
     f"larger than {MAX_ARGS_BYTES} bytes together", "arguments of"),
    (BOB, {**GOOD, "args": ["x"] * 101}, "at most 100 strings", "a list of 101 item(s)"),
    (BOB, {**GOOD, "args": ["\ud800"]}, "valid Unicode", "args"),
])
def test_every_refusal_says_why(platform, user, body, user_words, log_words):
    with pytest.raises(JobRefused) as refused:
        check_submission(platform, user, body, active_jobs=0)
    assert user_words in refused.value.user_message
    assert log_words in refused.value.log_detail
    assert refused.value.status == 400


def test_the_refusals_log_detail_holds_no_argument(platform):
    """The arguments may hold secrets: a refusal's log detail says their shape only."""
    secret = "hunter2-" * 2000
    with pytest.raises(JobRefused) as refused:
        check_submission(platform, BOB, {**GOOD, "args": [secret, 3]}, active_jobs=0)
    assert "hunter2" not in refused.value.log_detail + refused.value.user_message


def test_arguments_at_the_limits_and_any_argument_come_after_the_script(platform):
    """Python stops reading its own options at the script: every argument after it is
    the script's, even -c or -m."""
    args = ["x" * MAX_ARG_BYTES] * (MAX_ARGS_BYTES // MAX_ARG_BYTES)
    assert check_submission(platform, BOB, {**GOOD, "args": args}, 0).args == tuple(args)
    sub = check_submission(platform, BOB, {**GOOD, "script": "dir/c.py",
                                           "args": ["-c", "import os", "-m", ""]}, 0)
    assert sub.command == ("python", "c.py", "-c", "import os", "-m", "")


def test_the_per_user_limit_counts_jobs_not_finished(platform):
    assert platform.jobs_per_user == 2
    check_submission(platform, BOB, GOOD, active_jobs=1)
    with pytest.raises(JobRefused) as refused:
        check_submission(platform, BOB, GOOD, active_jobs=2)
    assert "2 job(s) queued or running" in refused.value.user_message
    assert refused.value.log_detail == "over the limit: 2 active of 2"


def test_job_profiles_follow_the_groups(platform):
    assert [p.slug for p in job_profiles_for(platform, {"ml-eng"})] == [
        "a100-train", "a100-ddp-2", "t4-job", "cpu-job"]
    assert [p.slug for p in job_profiles_for(platform, {"data-science"})] == ["t4-job",
                                                                              "cpu-job"]
    assert job_profiles_for(platform, {"nobody"}) == ()


def test_names_are_dns_labels():
    assert job_name("bob", "1a2b3c") == "job-bob-1a2b3c"
    assert job_name("Ann_Lee.x", "1a2b3c") == "job-ann-lee-x-1a2b3c"
    assert len(job_name("x" * 80, "1a2b3c")) <= 50


def test_the_job_takes_the_running_servers_image_home_and_user_slug(platform):
    notebook = {"metadata": {"labels": {USERNAME_KEY: "bob"}},
                "spec": {"containers": [{"name": "notebook", "image": "acr.io/nb:1",
                                         "volumeMounts": [{"name": "home",
                                                           "mountPath": "/home/jovyan"}]}],
                         "volumes": [{"name": "home",
                                      "persistentVolumeClaim": {"claimName": "claim-bob"}}]}}
    sub = check_submission(platform, BOB, GOOD, 0)
    job, service = build_job(job_request(sub, notebook, "job-bob-1", platform.checkpoint_storage,
                                   "bob"))
    container = job["spec"]["template"]["spec"]["containers"][0]
    # the script's directory in the home: where `job submit` was typed, with the code
    assert container["image"] == "acr.io/nb:1"
    assert container["workingDir"] == "/home/jovyan/train"
    assert container["command"] == ["python", "train.py", "--epochs", "3"]
    assert ENV_CHECKPOINT_DIR in {e["name"] for e in container["env"]}
    claims = [v["persistentVolumeClaim"]["claimName"]
              for v in job["spec"]["template"]["spec"]["volumes"] if "persistentVolumeClaim" in v]
    assert claims[0] == "claim-bob"
    assert job["metadata"]["namespace"] == "jhub-ml-eng" and service is None
