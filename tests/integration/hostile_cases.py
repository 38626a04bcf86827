"""The hostile requests of ``test_hostile_jobs.py``: an explicit table, one row per
request, each with an id, whose credentials it carries, what it asks of which service,
and the refusal it must get. Issue #25's findings are named in ``finding``
("xsrf", "script-option", "args-size", "lead-scope", ...; "" for the generic ones).

Who is who (the demo's users, ``devcluster/demo_config.py``): ``alice`` (data-science)
has a running server and two jobs, the most one user may have (jobsPerUser 2);
``dave`` (data-science, ml-eng) has a running server and no job, so a request of his
that passed every check would create a Job; ``bob`` (ml-eng), ``carol``
(experimentation), ``erin`` (data-science's lead group, in no team) and ``admin`` (the
hub's admin, in no team) have no server. A ``who`` of:

* a user's name: that user's API token (``Authorization: token ...``);
* ``alice/server``: the API token of alice's server (its pod's environment);
* ``alice/name-only``: a token alice made herself with only ``read:users:name!user``;
* ``cookie/<user>``: that user's browser session (hub and services' OAuth cookies, no
  XSRF token), as a page under ``/user/<attacker>/`` of the same origin would send it;
* ``nobody``: no credentials (``headers`` may add a forged ``Authorization``).

Paths may hold ``{alice_job}`` (alice's running job), ``{revoked}``, ``{expired}``
(tokens the hub no longer honours), filled in when the hub is up.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

JOBS, USAGE, HUB = "jobs", "usage", "hub"  # /services/gpu-jobs/, /services/gpu-usage/, /hub/
BAD = frozenset({400})
FORBIDDEN = frozenset({403})
MISSING = frozenset({404})
HIDDEN = frozenset({403, 404})  # the hub may hide what the caller may not see
TOO_BIG = frozenset({400, 413})
NOT_ALLOWED = frozenset({405})
# A browser page asked for with no (or an unknown) credential: a redirect to the hub's
# login (OAuth), which shows nothing; the harness checks where it points.
LOGIN = frozenset({302})


@dataclass(frozen=True)
class Case:
    id: str
    who: str
    method: str
    where: str
    path: str
    body: bytes | None = None
    expect: frozenset[int] = BAD
    headers: tuple[tuple[str, str], ...] = ()
    finding: str = ""
    follow: bool = False  # follow redirects: ``expect`` is the last answer's status


def js(value) -> bytes:
    return json.dumps(value).encode()


def valid(**extra) -> dict:
    """A submission dave may make (his team's CPU job profile), with ``extra`` fields."""
    return {"profile": "cpu-job", "script": "train.py", **extra}


def submit(id: str, body, who: str = "dave", expect=BAD, finding: str = "",
           headers=()) -> Case:
    data = body if isinstance(body, bytes) else js(body)
    return Case(id, who, "POST", JOBS, "api/jobs", data, expect, tuple(headers), finding)


def job_call(id: str, who: str, method: str, path: str, expect=MISSING,
             headers=(), finding: str = "") -> Case:
    return Case(id, who, method, JOBS, path, None, expect, tuple(headers), finding)


def page(id: str, who: str, query: str, expect=FORBIDDEN, path: str = "",
         finding: str = "", method: str = "GET") -> Case:
    return Case(id, who, method, USAGE, path + query, None, expect, (), finding)


MiB = 1 << 20
#: what a forged log line starts with (after a newline in a field), and a secret in an
#: argument: neither may be in the hub's log
FORGED_LINE = "FORGED-LOG-LINE [I jupyterhub_gpu.jobs]"
SECRET_ARG = "hunter2-secret-arg"
BODY = [
    submit("body-empty", b""),
    submit("body-null", b"null"),
    submit("body-not-json", b"{profile: cpu-job"),
    submit("body-truncated", b'{"profile": "cpu-job", "script": "train.py"'),
    submit("body-list", ["cpu-job", "train.py"]),
    submit("body-string", "train.py"),
    submit("body-number", 42),
    submit("body-true", True),
    submit("body-empty-object", {}),
    submit("body-nested", {"job": valid()}),
    submit("body-bad-utf8", b'{"profile": "cpu-job", "script": "\xff\xfe.py"}'),
    submit("body-nan-arg", b'{"profile": "cpu-job", "script": "train.py", "args": [NaN]}'),
    submit("body-duplicate-key-option", b'{"profile": "cpu-job", "script": "train.py", '
           b'"script": "-c", "args": ["print(1)"]}', finding="script-option"),
    submit("body-deep-nesting", b"[" * 100_000, finding="body-size"),
    submit("body-deep-object", b'{"a":' * 50_000, finding="body-size"),
    submit("body-16MiB-padding", b'{"profile": "cpu-job", "script": "train.py", "args": ["'
           + b"x" * (16 * MiB) + b'"]}', expect=TOO_BIG, finding="body-size"),
    submit("body-form-encoded", b"profile=cpu-job&script=train.py",
           headers=[("Content-Type", "application/x-www-form-urlencoded")]),
]

# Fields the platform chooses, never the request: each beside a valid submission.
FORGED_FIELDS = {
    "namespace": "jhub-ml-eng", "image": "evil/miner:latest", "command": ["sh", "-c", "id"],
    "env": [{"name": "LD_PRELOAD", "value": "/home/x.so"}],
    "securityContext": {"privileged": True, "runAsUser": 0},
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    "volumeMounts": [{"name": "root", "mountPath": "/host"}],
    "serviceAccountName": "hub", "automountServiceAccountToken": True,
    "nodeName": "aks-gpu-0", "nodeSelector": {"kubernetes.io/hostname": "x"},
    "tolerations": [{"operator": "Exists"}], "hostNetwork": True, "hostPID": True,
    "privileged": True, "resources": {"limits": {"nvidia.com/gpu": 8}},
    "priorityClassName": "system-node-critical", "queue": "ml-eng-queue",
    "kueue.x-k8s.io/queue-name": "ml-eng-queue", "labels": {"component": "singleuser-server"},
    "annotations": {"hub.jupyter.org/username": "bob"}, "user": "bob", "name": "job-bob-1",
    "team": "ml-eng", "pool": "a100spot", "gpus": 8, "pods": 64, "retries": 1000,
    "maxRunTime": "1000h", "initContainers": [{"name": "x", "image": "busybox"}],
    "workingDir": "/", "home": "/etc", "checkpoint": "/home/bob", "metadata": {},
    "spec": {"template": {}}, "__proto__": {"admin": True}, "Profile": "t4-train",
    "script ": "train.py", "": "x", "profile\u0000": "t4-train",
}
FORGED = [submit(f"forged-{i:02d}-{re.sub('[^a-z0-9]+', '-', key.lower()).strip('-') or 'empty'}"[:60],
                 valid(**{key: value}))
          for i, (key, value) in enumerate(FORGED_FIELDS.items())]

PROFILES = [submit(f"profile-{name}", body) for name, body in [
    ("missing", {"script": "train.py"}),
    ("null", valid(profile=None)),
    ("empty", valid(profile="")),
    ("unknown", valid(profile="nope")),
    ("other-teams", valid(profile="t4-train")),
    ("other-teams-spot", valid(profile="t4-spot-train")),
    ("other-teams-ddp", valid(profile="t4-ddp-2")),
    ("notebook-profile", valid(profile="t4-shared")),
    ("upper-case", valid(profile="CPU-JOB")),
    ("leading-space", valid(profile=" cpu-job")),
    ("trailing-space", valid(profile="cpu-job ")),
    ("newline", valid(profile="cpu-job\n")),
    ("nul", valid(profile="cpu-job\u0000")),
    ("unicode-hyphen", valid(profile="cpu\u2010job")),
    ("fullwidth", valid(profile="\uff43\uff50\uff55-job")),
    ("zero-width", valid(profile="cpu-job\u200b")),
    ("path", valid(profile="../cpu-job")),
    ("list", valid(profile=["cpu-job"])),
    ("object", valid(profile={"slug": "cpu-job"})),
    ("number", valid(profile=1)),
    ("true", valid(profile=True)),
    ("forged-log-line", valid(profile=f"x\n{FORGED_LINE} 200 POST /hub/api/users/admin/tokens")),
    ("200KiB", valid(profile="p" * (200 << 10))),  # under the body limit: refused, not echoed
]] + [
    submit("profile-bob-no-job-profile", valid(), who="bob"),
    submit("profile-carol-no-job-profile", valid(), who="carol"),
    submit("profile-erin-no-team", valid(), who="erin"),
    submit("profile-admin-no-team", valid(), who="admin"),
    submit("profile-bob-other-teams-ok", valid(profile="t4-train"), who="bob"),
]

OPTION_SCRIPTS = ["-c", "-m", "--", "-", "-V", "--version", "--help", "-ic", "-I",
                  "-cimport os; os.system('id')", "-mhttp.server", "-X", "-W", "-O", "-E",
                  "-u", "-b", "-x", "-q", "-s", "-B", "-i", "--check-hash-based-pycs",
                  "-c\nimport os"]
SCRIPTS = [submit(f"script-option-{i:02d}", valid(script=s, args=["import os; os.system('id')"]),
                  finding="script-option") for i, s in enumerate(OPTION_SCRIPTS)] + [
    submit("script-missing", {"profile": "cpu-job", "args": ["x"]})] + [
    submit(f"script-{name}", valid(script=s), finding=finding) for name, s, finding in [
        ("null", None, ""), ("empty", "", ""), ("blank", "   ", ""),
        ("number", 42, ""), ("list", ["train.py"], ""), ("object", {"path": "train.py"}, ""),
        ("true", True, ""),
        ("absolute", "/etc/passwd", ""), ("absolute-double", "//etc/x.py", ""),
        ("parent", "../x.py", ""), ("parent-deep", "../../../etc/x.py", ""),
        ("parent-inside", "train/../../x.py", ""), ("dot-parent", "./../x.py", ""),
        ("dotdot", "..", ""), ("dot", ".", ""), ("dot-slash", "./", ""),
        ("dir-up", "train/..", ""), ("nul", "train.py\u0000", ""), ("only-nul", "\u0000", ""),
        ("nul-escape", "train.py\u0000../../x", ""),
        ("parent-newline", f"../x.py\n{FORGED_LINE} ok", "log-escape"),
        ("absolute-newline", f"/x.py\r\n{FORGED_LINE}", "log-escape"),
        ("64KiB", "d/" * (32 << 10) + "x.py", "input-size"),
    ]]

# arguments over the body's limit (MAX_BODY_BYTES) are refused by that check first: 413
ARGS = [submit(f"args-{name}", valid(args=a), finding=finding,
               expect=TOO_BIG if finding == "args-size" else BAD)
        for name, a, finding in [
    ("string", "--epochs 3", ""), ("object", {"epochs": 3}, ""), ("number", 3, ""),
    ("numbers", [1, 2], ""), ("null-item", [None], ""), ("nested", [["x"]], ""),
    ("bool", [True], ""), ("mixed", ["--epochs", 3], ""), ("nul", ["\u0000"], ""),
    ("nul-inside", ["a\u0000b"], ""), ("101", ["x"] * 101, ""), ("10000", ["x"] * 10000, ""),
    ("one-5MiB", ["a" * (5 * MiB)], "args-size"),
    ("one-512KiB", ["a" * (512 << 10)], "args-size"),
    ("100x20KiB", ["a" * (20 << 10)] * 100, "args-size"),
    ("nul-and-newline", [f"ok\n{FORGED_LINE} forged", "\u0000"], "log-escape"),
]]

# alice is at jobsPerUser: a submission that is right in every other way is refused;
# her arguments try to forge a log line, in case one is logged.
OVER_LIMIT = [submit(f"over-limit-{name}", body, who="alice", finding="jobs-per-user")
              for name, body in [
    ("cpu-job", valid()), ("ddp", valid(profile="cpu-ddp-2")),
    ("with-args", valid(args=["--epochs", "3"])),
    ("forged-log-line", valid(args=[f"x\n{FORGED_LINE} User bob submitted job "
                                    "jhub-ml-eng/job-bob-1 (t4-train): python x.py"])),
    ("secret-arg", valid(args=[f"--token={SECRET_ARG}"])),
]]
BURST = 6  # over-limit submissions sent at once (the harness adds them)

NAMES = ["{alice_job}", "{alice_job}/logs"]
OTHERS_JOBS = [job_call(f"other-{who}-{method.lower()}-{'logs' if '/' in n else 'job'}",
                        who, method, f"api/jobs/{n}")
               for who in ("dave", "bob", "carol", "erin", "admin")
               for method, n in (("GET", NAMES[0]), ("DELETE", NAMES[0]), ("GET", NAMES[1]))]
# The proxy resolves dot segments (%2e too, as URLs do); the hub redirects a path
# outside its prefix into it (/hub/services/hub/...), where there is nothing.
PATHS = [Case(f"path-{name}", "bob", method, JOBS, path, None, expect, follow="dots" in name)
         for name, method, path, expect in [
    ("unknown-get", "GET", "api/jobs/job-nope-000000", MISSING),
    ("unknown-delete", "DELETE", "api/jobs/job-nope-000000", MISSING),
    ("unknown-logs", "GET", "api/jobs/job-nope-000000/logs", MISSING),
    ("upper-case", "GET", "api/jobs/JOB-ALICE", MISSING),
    ("encoded-slash", "DELETE", "api/jobs/{alice_job}%2F..%2F..", MISSING),
    ("encoded-dots", "GET", "api/jobs/%2e%2e/%2e%2e/%2e%2e/hub/api/users", HIDDEN),
    ("raw-dots", "GET", "api/jobs/../../../hub/api/users", HIDDEN),
    ("dots-to-token", "POST", "api/jobs/%2e%2e/%2e%2e/%2e%2e/hub/api/users/alice/tokens",
     HIDDEN),
    ("too-long", "GET", "api/jobs/{alice_job}" + "x" * 64, MISSING),
    ("nul", "DELETE", "api/jobs/{alice_job}%00", MISSING),
    ("newline", "DELETE", "api/jobs/{alice_job}%0A", MISSING),
    ("unicode", "DELETE", "api/jobs/j%C3%B8b-alice", MISSING),
    ("query-user", "DELETE", "api/jobs/{alice_job}?user=alice", MISSING),
]] + [
    job_call("method-put", "alice", "PUT", "api/jobs", NOT_ALLOWED),
    job_call("method-patch", "alice", "PATCH", "api/jobs/{alice_job}", NOT_ALLOWED),
    job_call("method-delete-all", "alice", "DELETE", "api/jobs", NOT_ALLOWED),
    job_call("method-post-job", "alice", "POST", "api/jobs/{alice_job}", NOT_ALLOWED),
]

XSRF_HEADERS = {"token-x": ("Authorization", "token x"),
                "bearer-x": ("Authorization", "bearer x"),
                "token-empty": ("Authorization", "token "),
                "basic": ("Authorization", "Basic Zm9vOmJhcg=="),
                "wrong-xsrf": ("X-XSRFToken", "2|deadbeef|cafe|1700000000"),
                "none": ("X-Forged", "1")}
XSRF = [submit(f"xsrf-post-{name}", valid(), who="cookie/dave", expect=FORBIDDEN,
               headers=[h], finding="xsrf") for name, h in XSRF_HEADERS.items()] + [
    submit("xsrf-post-option-chain", valid(script="-c", args=["import os; os.system('id')"]),
           who="cookie/dave", expect=FORBIDDEN, headers=[XSRF_HEADERS["token-x"]],
           finding="xsrf"),
    Case("xsrf-post-query-xsrf", "cookie/dave", "POST", JOBS, "api/jobs?_xsrf=2%7C0%7C0%7C0",
         js(valid()), FORBIDDEN, (XSRF_HEADERS["token-x"],), "xsrf"),
] + [job_call(f"xsrf-delete-{name}", "cookie/alice", "DELETE", "api/jobs/{alice_job}",
              FORBIDDEN, [h], "xsrf") for name, h in XSRF_HEADERS.items()]

TOKENS = [job_call(f"token-{name}", "nobody", method, path, expect, headers)
          for name, method, path, expect, headers in [
    ("none-get", "GET", "api/jobs", LOGIN, ()),
    ("none-post", "POST", "api/jobs", FORBIDDEN, ()),
    ("none-delete", "DELETE", "api/jobs/{alice_job}", FORBIDDEN, ()),
    ("unknown-get", "GET", "api/jobs", FORBIDDEN, [("Authorization", "token x")]),
    ("unknown-post", "POST", "api/jobs", FORBIDDEN, [("Authorization", "token x")]),
    ("unknown-delete", "DELETE", "api/jobs/{alice_job}", FORBIDDEN,
     [("Authorization", "token x")]),
    ("unknown-logs", "GET", "api/jobs/{alice_job}/logs", FORBIDDEN,
     [("Authorization", "bearer 0123456789abcdef0123456789abcdef")]),
    ("8KiB", "GET", "api/jobs", FORBIDDEN, [("Authorization", "token " + "A" * 8192)]),
    ("two-tokens", "GET", "api/jobs", FORBIDDEN, [("Authorization", "token {alice} {bob}")]),
    ("altered", "DELETE", "api/jobs/{alice_job}", FORBIDDEN,
     [("Authorization", "token {alice}x")]),
    ("revoked", "DELETE", "api/jobs/{alice_job}", FORBIDDEN,
     [("Authorization", "token {revoked}")]),
    ("expired", "DELETE", "api/jobs/{alice_job}", FORBIDDEN,
     [("Authorization", "token {expired}")]),
    ("revoked-post", "POST", "api/jobs", FORBIDDEN, [("Authorization", "token {revoked}")]),
]] + [
    job_call("scope-name-only-get", "alice/name-only", "GET", "api/jobs", FORBIDDEN),
    job_call("scope-name-only-delete", "alice/name-only", "DELETE", "api/jobs/{alice_job}",
             FORBIDDEN),
    submit("scope-name-only-post", valid(), who="alice/name-only", expect=FORBIDDEN),
]

USAGE_CASES = [page(f"usage-{name}", who, query, expect, path, finding)
               for name, who, query, expect, path, finding in [
    ("member-other-team", "alice", "?team=ml-eng", FORBIDDEN, "", ""),
    ("member-own-team", "alice", "?team=data-science", FORBIDDEN, "", ""),
    ("member-unknown-team", "alice", "?team=nope", FORBIDDEN, "", ""),
    ("member-other-user", "alice", "?user=bob", FORBIDDEN, "", ""),
    ("member-teammate", "alice", "?user=dave", FORBIDDEN, "", ""),
    ("member-admin-user", "alice", "?user=admin", FORBIDDEN, "", ""),
    ("member-team-and-user", "alice", "?team=ml-eng&user=alice", FORBIDDEN, "", ""),
    ("csv-other-team", "alice", "?team=ml-eng", FORBIDDEN, "usage.csv", ""),
    ("csv-other-user", "bob", "?user=alice", FORBIDDEN, "usage.csv", ""),
    ("csv-format-other-team", "carol", "?format=csv&team=data-science", BAD,
     "usage.csv", ""),
    ("format-other-user", "carol", "?format=csv&user=alice", BAD, "", ""),
    ("format-json-other-team", "bob", "?format=json&team=data-science", BAD, "", ""),
    ("lead-other-teams-user", "erin", "?user=bob", FORBIDDEN, "", "lead-scope"),
    ("lead-other-teams-user-csv", "erin", "?user=carol", FORBIDDEN, "usage.csv",
     "lead-scope"),
    ("lead-admin-user", "erin", "?user=admin", FORBIDDEN, "", "lead-scope"),
    ("lead-other-team", "erin", "?team=ml-eng", FORBIDDEN, "", ""),
    ("lead-other-team-csv", "erin", "?team=experimentation", FORBIDDEN, "usage.csv", ""),
    ("member-user-in-other-team", "bob", "?user=alice&team=ml-eng", FORBIDDEN, "", ""),
] + [(f"days-{name}", "alice", f"?days={value}", BAD, path, finding)
     for name, value, path, finding in [
    ("superscript-two", "%C2%B2", "", "days-digits"),
    ("superscript-two-csv", "%C2%B2", "usage.csv", "days-digits"),
    ("circled-one", "%E2%91%A0", "", "days-digits"),
    ("zero", "0", "", ""), ("negative", "-1", "", ""), ("too-many", "367", "", ""),
    ("exponent", "1e3", "", ""), ("plus", "%2B7", "", ""),
    ("fraction", "7.5", "", ""), ("hex", "0x10", "", ""), ("huge", "9" * 40, "", ""),
    ("nan", "NaN", "usage.csv", ""), ("inf", "inf", "", ""), ("long", "1" * 1000, "", ""),
    ("nul", "%00", "", ""), ("arabic-indic-minus", "-%D9%A3", "usage.csv", ""),
]]] + [
    page("usage-server-token", "alice/server", "", FORBIDDEN, finding="token-scope"),
    page("usage-server-token-csv", "alice/server", "", FORBIDDEN, "usage.csv", "token-scope"),
    page("usage-name-only-token", "alice/name-only", "", FORBIDDEN, finding="token-scope"),
    Case("usage-unknown-token", "nobody", "GET", USAGE, "", None, LOGIN,
         (("Authorization", "token x"),)),
    page("usage-no-credentials", "nobody", "", LOGIN),
    page("usage-no-credentials-csv", "nobody", "?team=data-science", LOGIN, "usage.csv"),
    page("usage-post", "alice", "", NOT_ALLOWED, method="POST"),
    page("usage-delete", "alice", "", NOT_ALLOWED, method="DELETE"),
]

HUB_CASES = [Case(f"hub-{name}", who, method, HUB, path, js(body) if body else None, expect)
             for name, who, method, path, body, expect in [
    ("start-others-server", "bob", "POST", "api/users/alice/server", {"profile": "cpu"},
     HIDDEN),
    ("stop-others-server", "bob", "DELETE", "api/users/alice/server", None, HIDDEN),
    ("others-token", "bob", "POST", "api/users/alice/tokens", {"expires_in": 60}, HIDDEN),
    ("server-token-start", "alice/server", "POST", "api/users/alice/server",
     {"profile": "a100-mig-3g"}, HIDDEN),
    ("server-token-new-token", "alice/server", "POST", "api/users/alice/tokens",
     {"expires_in": 60}, HIDDEN),
    ("name-only-start", "alice/name-only", "POST", "api/users/alice/server", None, HIDDEN),
    ("name-only-read-others", "alice/name-only", "GET", "api/users/bob", None, HIDDEN),
    ("lead-stop-teammate", "erin", "DELETE", "api/users/alice/server", None, HIDDEN),
]]

# In this order: the forged deletions of alice's job last, so that a deletion let
# through (on a hub with the finding) changes nothing the others depend on.
CASES = (BODY + FORGED + PROFILES + SCRIPTS + ARGS + OVER_LIMIT + OTHERS_JOBS + PATHS
         + TOKENS + USAGE_CASES + HUB_CASES + XSRF)
