"""Every name this package shares with something else, defined once.

Labels, annotations, taints, resource names, environment variables, API groups and
versions, server-state keys and culler settings: each is written or read by more
than one component (the spawner and the culler, the pod builder and the notebook, the
bundle and Kueue), so each stands here and every other module imports it.
``tests/unit/test_contract.py`` fails when one of these strings is written anywhere
else in the package. The names only the dev cluster, the demo and the replay use stand
beside them, in :mod:`jupyterhub_gpu.devcluster.contract`, which this module never
imports.

Only constants, and no imports: the notebook image (:mod:`jupyterhub_gpu.checkpoint`)
and the culler read this module too.
"""

# -- this package -------------------------------------------------------------------

PREFIX = "jupyterhub-gpu/"
#: on a notebook pod: the profile it runs (the culler and the resume service read it)
PROFILE_LABEL = PREFIX + "profile"
#: on a notebook pod and on a team namespace: the team
TEAM_LABEL = PREFIX + "team"
#: on a fallback profile's pod: the pool Kueue admitted it to, and that pool's GPU
#: model, GPU memory and whether it is preemptible (the hub sets them; the notebook's
#: environment reads them)
POOL_ANNOTATION = PREFIX + "pool"
GPU_MODEL_ANNOTATION = PREFIX + "gpu-model"
GPU_MEMORY_ANNOTATION = PREFIX + "gpu-memory"
PREEMPTIBLE_ANNOTATION = PREFIX + "preemptible"
#: on a fallback profile's pod: its scheduling gate until the hub has set the pool
POOL_GATE = PREFIX + "record-pool"
#: on a team namespace: Kueue manages its pods (``managedJobsNamespaceSelector``)
MANAGED_LABEL = PREFIX + "managed"
#: on a batch Job and its pods: the job profile it runs
JOB_PROFILE_LABEL = PREFIX + "job-profile"
#: the ``component`` of a batch Job's pods (never the single-user server's: the
#: singleuser NetworkPolicy and the demo's pod runner select that one)
JOB_COMPONENT = "gpu-job"

#: the ``component`` of a GPU kernel's pod (docs/kernels.md): a kernel of a GPU profile
#: that a user's CPU server runs on their behalf, neither a server nor a job
KERNEL_COMPONENT = "gpu-kernel"
#: on a GPU kernel's pod: Jupyter's id of the kernel it runs
KERNEL_ID_LABEL = PREFIX + "kernel-id"
#: on a GPU kernel's pod: the server that owns it, as KubeSpawner labels that server's
#: pod (its ``hub.jupyter.org/servername`` label's value; a label of our own, since
#: that one on a pod means the pod *is* the server)
KERNEL_SERVER_LABEL = PREFIX + "kernel-server"
#: the ports of a GPU kernel's pod, fixed (one kernel a pod, so no port can clash):
#: the five of Jupyter's kernel protocol, and no other (an interrupt is a message on
#: the control channel, signed like every message). Only the owning server reaches them.
KERNEL_PORTS = {"shell": 52700, "iopub": 52701, "stdin": 52702, "control": 52703,
                "hb": 52704}
#: on the owning server's pod: where a kernel's launcher sends its connection
#: information back (encrypted); only that server's own kernel pods reach it
KERNEL_RESPONSE_PORT = 52699
#: the kernel launcher's argument (in a kernel pod's command) that names that address
KERNEL_RESPONSE_FLAG = "--response-address"

#: the server state (``Spawner.get_state``) the culler reads (``admin:server_state``)
STATE_PROFILE = "gpu_profile"
#: the server state that keeps why the platform stopped the last server
STATE_STOP_NOTICE = "gpu_stop_notice"
# the uid of the server's pod: its usage-ledger row, for the culler (``pod:<uid>``)
STATE_POD_UID = "gpu_pod_uid"

# -- the notebook's environment -----------------------------------------------------

ENV_PREFIX = "JUPYTERHUB_GPU_"
ENV_PROFILE = ENV_PREFIX + "PROFILE"
ENV_PROFILE_NAME = ENV_PREFIX + "PROFILE_NAME"  # the profile's displayName
ENV_GPU_UNIT = ENV_PREFIX + "UNIT"  # what one unit is, as the form says it
ENV_NAMESPACE = ENV_PREFIX + "NAMESPACE"  # the team namespace the pod runs in
ENV_MODEL = ENV_PREFIX + "MODEL"
ENV_POOL = ENV_PREFIX + "POOL"  # the node pool the server got
ENV_SHARING = ENV_PREFIX + "SHARING"
ENV_COUNT = ENV_PREFIX + "COUNT"
ENV_MEMORY = ENV_PREFIX + "MEMORY"
ENV_PREEMPTIBLE = ENV_PREFIX + "PREEMPTIBLE"
ENV_TEAM = ENV_PREFIX + "TEAM"
ENV_IDLE_TIMEOUT = ENV_PREFIX + "IDLE_TIMEOUT"  # seconds
ENV_MAX_AGE = ENV_PREFIX + "MAX_AGE"  # seconds
ENV_MAX_AGE_DEADLINE = ENV_PREFIX + "MAX_AGE_DEADLINE"  # ISO 8601, UTC
ENV_GPU_IDLE_THRESHOLD = ENV_PREFIX + "IDLE_GPU_THRESHOLD"  # percent
ENV_GPU_IDLE_WINDOW = ENV_PREFIX + "IDLE_GPU_WINDOW"  # seconds
ENV_GRACE = ENV_PREFIX + "GRACE_SECONDS"  # the preStop hook's time to checkpoint
ENV_RUN_DIR = ENV_PREFIX + "RUN_DIR"  # where registered processes leave their pid
ENV_CHECKPOINT_DIR = "CHECKPOINT_DIR"  # the user's directory on the checkpoint PVC
#: a multi-pod job's rendezvous, as PyTorch's ``env://`` init method reads it
ENV_MASTER_ADDR = "MASTER_ADDR"
ENV_MASTER_PORT = "MASTER_PORT"
ENV_WORLD_SIZE = "WORLD_SIZE"
ENV_RANK = "RANK"
ENV_NODE_RANK = "NODE_RANK"
#: in the notebook (kernel extension) and the culler: warn this many seconds before
ENV_CULL_WARN_BEFORE = ENV_PREFIX + "CULL_WARN_BEFORE"
#: why the platform stopped the user's previous server of this name (its stop notice)
ENV_LAST_STOP_NOTICE = ENV_PREFIX + "LAST_STOP_NOTICE"

# -- the culler service's settings (its environment) ---------------------------------

ENV_PLATFORM_FILE = ENV_PREFIX + "PLATFORM_FILE"
# the usage ledger's SQLAlchemy URL, for the jobs service (c.UsageLedger.db_url)
ENV_USAGE_DB_URL = ENV_PREFIX + "USAGE_DB_URL"
ENV_PROMETHEUS_URL = ENV_PREFIX + "PROMETHEUS_URL"
ENV_CULL_DRY_RUN = ENV_PREFIX + "CULL_DRY_RUN"
ENV_CULL_GPU_METRIC = ENV_PREFIX + "CULL_GPU_METRIC"
ENV_PROMETHEUS_TIMEOUT = ENV_PREFIX + "PROMETHEUS_TIMEOUT"
ENV_PROMETHEUS_TOKEN_FILE = ENV_PREFIX + "PROMETHEUS_TOKEN_FILE"
ENV_CULLER_METRICS_PORT = ENV_PREFIX + "CULLER_METRICS_PORT"
#: the DCGM exporter's GPU utilisation (percent): per GPU, not per MIG instance
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
#: the DCGM exporter's graphics engine activity (a ratio): also per MIG instance
DCGM_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
#: the DCGM exporter's frame buffer (GPU memory) used and free, in MiB
DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_FB_FREE = "DCGM_FI_DEV_FB_FREE"
#: each utilisation metric above -> its factor to percent
DCGM_PERCENT_FACTOR = {DCGM_GPU_UTIL: 1.0, DCGM_ENGINE_ACTIVE: 100.0}

# -- JupyterHub and KubeSpawner ------------------------------------------------------

#: KubeSpawner labels its pods ``component=<component_label>``; z2jh labels its own
#: pods the same way (``hub``, ``proxy``)
COMPONENT_LABEL = "component"
SINGLEUSER_COMPONENT = "singleuser-server"  # KubeSpawner's default component_label
HUB_COMPONENT = "hub"
PROXY_COMPONENT = "proxy"
#: KubeSpawner's pod label (the escaped name) and annotation (the name as it is)
USERNAME_KEY = "hub.jupyter.org/username"
SERVERNAME_KEY = "hub.jupyter.org/servername"
NODE_PURPOSE_LABEL = "hub.jupyter.org/node-purpose"
#: KubeSpawner's server state
KUBESPAWNER_STATE_POD = "pod_name"
KUBESPAWNER_STATE_NAMESPACE = "namespace"
#: the environment JupyterHub gives a server (and its pod) and a hub service
ENV_API_TOKEN = "JUPYTERHUB_API_TOKEN"
ENV_API_URL = "JUPYTERHUB_API_URL"
ENV_SERVICE_URL = "JUPYTERHUB_SERVICE_URL"
ENV_SERVICE_PREFIX = "JUPYTERHUB_SERVICE_PREFIX"  # a hub service's path on the proxy
ENV_SERVICE_NAME = "JUPYTERHUB_SERVICE_NAME"
ENV_CLIENT_ID = "JUPYTERHUB_CLIENT_ID"  # its OAuth client: service-<name> for a service
ENV_OAUTH_CALLBACK_URL = "JUPYTERHUB_OAUTH_CALLBACK_URL"
ENV_BASE_URL = "JUPYTERHUB_BASE_URL"  # the hub's base URL, e.g. "/"
#: what JupyterHub's Spawner.get_env tells a server of its limits
ENV_CPU_LIMIT = "CPU_LIMIT"
ENV_MEM_LIMIT = "MEM_LIMIT"  # bytes
#: a pod's name, as Kubernetes sets its containers' hostname
ENV_HOSTNAME = "HOSTNAME"

# -- Kueue -------------------------------------------------------------------------

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_CONFIG_API_VERSION = f"config.{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_VISIBILITY_GROUP = f"visibility.{KUEUE_GROUP}"
KUEUE_VISIBILITY_VERSION = "v1beta2"
QUEUE_LABEL = f"{KUEUE_GROUP}/queue-name"
PRIORITY_LABEL = f"{KUEUE_GROUP}/priority-class"
JOB_UID_LABEL = f"{KUEUE_GROUP}/job-uid"
ADMISSION_GATE = f"{KUEUE_GROUP}/admission"
#: Kueue's pod webhooks (upstream's config/components/webhook, failurePolicy Fail): while
#: Kueue's manager is down the API server refuses every pod create in a managed namespace
KUEUE_POD_WEBHOOKS = ("mpod.kb.io", "vpod.kb.io")

# -- Kubernetes ----------------------------------------------------------------------
# What the Kubernetes client needs from the hub's environment (for the hub's services). A managed service
# gets only JupyterHub's own variables, a few of the hub's (Spawner.env_keep) and its
# `environment`: the in-cluster config (the service host and port; the token and CA
# are files in the pod) and a kubeconfig, when the hub runs with one.
KUBE_ENV = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG")

BATCH_GROUP = "batch"
BATCH_API_VERSION = f"{BATCH_GROUP}/v1"
#: on an Indexed Job's pod: its completion index (the Job controller sets it)
JOB_COMPLETION_INDEX_ANNOTATION = f"{BATCH_GROUP}.kubernetes.io/job-completion-index"
#: on a Job's pods: the Job's name (the API server adds it to the pod template when
#: the Job is created: kubernetes pkg/registry/batch/job/strategy.go)
JOB_NAME_LABEL = f"{BATCH_GROUP}.kubernetes.io/job-name"
#: the pod condition of a disruption: preemption, eviction, a node going away
DISRUPTION_TARGET = "DisruptionTarget"

RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_API_VERSION = f"{RBAC_GROUP}/v1"
NETWORKING_GROUP = "networking.k8s.io"
NETWORKING_API_VERSION = f"{NETWORKING_GROUP}/v1"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
HOSTNAME_LABEL = "kubernetes.io/hostname"
OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
APP_NAME_LABEL = "app.kubernetes.io/name"
APP_INSTANCE_LABEL = "app.kubernetes.io/instance"
APP_COMPONENT_LABEL = "app.kubernetes.io/component"

# -- AKS -----------------------------------------------------------------------------

AGENTPOOL_LABEL = "kubernetes.azure.com/agentpool"
#: AKS's label on a GPU node, the Azure cluster-autoscaler's ``GPULabel()``
ACCELERATOR_LABEL = "kubernetes.azure.com/accelerator"
#: AKS's defaults of the autoscaler profile's ``max_unready_nodes`` and
#: ``max_unready_percentage`` (the cluster-autoscaler's ``--ok-total-unready-count`` and
#: ``--max-total-unready-percentage``): past both, it stops scaling the cluster
OK_TOTAL_UNREADY_COUNT = 3
MAX_TOTAL_UNREADY_PERCENTAGE = 45
#: AKS's label and taint on the nodes of a Spot pool (value ``spot``)
SPOT_LABEL = "kubernetes.azure.com/scalesetpriority"
SPOT_VALUE = "spot"
#: AKS's built-in storage classes: Azure Disk (ReadWriteOnce, one node at a time) and
#: Azure Files, standard and premium (ReadWriteMany)
AZURE_DISK_CLASS = "managed-csi"
AZURE_FILES_CLASS = "azurefile-csi"
AZURE_FILES_PREMIUM_CLASS = "azurefile-csi-premium"

# -- Karpenter (AKS Node Auto Provisioning; the dev cluster's autoscaler) -----------

KARPENTER_GROUP = "karpenter.sh"
KARPENTER_API_VERSION = f"{KARPENTER_GROUP}/v1"
#: on a node Karpenter started: its NodePool
NODEPOOL_LABEL = f"{KARPENTER_GROUP}/nodepool"
#: on a node Karpenter started: ``spot`` or ``on-demand``
CAPACITY_TYPE_LABEL = f"{KARPENTER_GROUP}/capacity-type"
#: the taint Karpenter puts on a node it is about to remove (consolidation, expiry)
KARPENTER_DISRUPTED_TAINT = f"{KARPENTER_GROUP}/disrupted"
#: AKS Node Auto Provisioning's node class (Azure/karpenter-provider-azure pkg/apis:
#: v1beta1 is the version its CRD stores)
AKS_NODE_CLASS_GROUP = "karpenter.azure.com"
AKS_NODE_CLASS_API_VERSION = f"{AKS_NODE_CLASS_GROUP}/v1beta1"
#: the kwok provider's node class
KWOK_NODE_CLASS_GROUP = "karpenter.kwok.sh"
KWOK_NODE_CLASS_API_VERSION = f"{KWOK_NODE_CLASS_GROUP}/v1alpha1"
ZONE_LABEL = "topology.kubernetes.io/zone"

# -- kwok (the dev cluster's nodes) --------------------------------------------------

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"

# -- NVIDIA: device plugin, GPU feature discovery, MIG manager -----------------------

NVIDIA_PREFIX = "nvidia.com/"
#: a whole GPU, as the device plugin advertises it
GPU_RESOURCE = NVIDIA_PREFIX + "gpu"
#: what the device plugin's ``renameByDefault`` appends to a shared GPU's resource
#: (no pool of the bundle renames: ``check-bundle`` refuses it, see bundle/check.py)
SHARED_SUFFIX = ".shared"
#: a MIG instance's resource with the mixed strategy: this prefix, then its profile
#: (the bundle uses the single strategy; dcgm-exporter still maps these to pods)
MIG_RESOURCE_PREFIX = NVIDIA_PREFIX + "mig-"
#: the device plugin's ``migStrategy`` that advertises ``MIG_RESOURCE_PREFIX`` resources
MIG_STRATEGY_MIXED = "mixed"
#: the taint AKS's GPU pools carry (value ``present``)
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
#: the key of the taint of CPU-only pools (value ``user``): z2jh's user-pod taint,
#: which its user pods (and so the notebooks) tolerate
#: (``scheduling.userPods.tolerations``) and kube-system pods do not, so none lands
#: there and pins the node (the cluster autoscaler's skip-nodes-with-system-pods)
USER_TAINT_KEY = "hub.jupyter.org/dedicated"
#: the node label naming the device-plugin config the node runs
DEVICE_PLUGIN_CONFIG_LABEL = NVIDIA_PREFIX + "device-plugin.config"
#: the node label naming the MIG layout the MIG manager applies
MIG_CONFIG_LABEL = NVIDIA_PREFIX + "mig.config"
#: labels GPU feature discovery sets on a GPU node
GPU_PRESENT_LABEL = NVIDIA_PREFIX + "gpu.present"
GPU_PRODUCT_LABEL = NVIDIA_PREFIX + "gpu.product"
GPU_COUNT_LABEL = NVIDIA_PREFIX + "gpu.count"
GPU_MEMORY_LABEL = NVIDIA_PREFIX + "gpu.memory"
GPU_REPLICAS_LABEL = NVIDIA_PREFIX + "gpu.replicas"
SHARING_STRATEGY_LABEL = NVIDIA_PREFIX + "gpu.sharing-strategy"
MIG_STRATEGY_LABEL = NVIDIA_PREFIX + "mig.strategy"

# -- the hub's availability API (:mod:`jupyterhub_gpu.hub.api`), under the hub's prefix --

#: the profiles the token's owner may start, with their availability
PROFILES_API_PATH = "api/gpu/profiles"
#: the same for one user (scope ``read:servers`` on that user)
USER_PROFILES_API_PATH = "api/gpu/users/{name}/profiles"

#: JupyterHub's scope to read its ``/hub/metrics``; the gpu-kernels service asks it too
READ_METRICS_SCOPE = "read:metrics"
#: where a hub service of ours serves its Prometheus metrics, under its prefix
SERVICE_METRICS_PATH = "metrics"

# -- the training-jobs service (:mod:`jupyterhub_gpu.jobs`), a JupyterHub service ----

#: its name as a hub service: the proxy serves it under ``/services/gpu-jobs/``
JOBS_SERVICE_NAME = "gpu-jobs"
#: the gpu-jobs service in the hub pod (helm-values/values.yaml: hub.service.extraPorts)
JOBS_PORT = 10101
#: the gpu-usage page's port in the hub pod (only the proxy calls it; helm-values/values.yaml)
USAGE_PORT = 10102
#: the culler's /metrics in the hub pod (only Prometheus calls it; helm-values/values.yaml,
#: config/service-monitors.yaml)
CULLER_METRICS_PORT = 10103
CULLER_METRICS_PORT_NAME = "culler-metrics"
#: the scope a user (and their server's token) needs to call it
JOBS_ACCESS_SCOPE = f"access:services!service={JOBS_SERVICE_NAME}"
#: its API, under the service's prefix: the caller's jobs; one job is ``<path>/<name>``
JOBS_API_PATH = "api/jobs"
#: in the notebook's environment: the service's URL (prefix included), which the
#: ``jupyterhub-gpu job`` command calls
ENV_JOBS_URL = ENV_PREFIX + "JOBS_URL"
#: the service's settings (its environment): the address it listens on
ENV_JOBS_BIND = ENV_PREFIX + "JOBS_BIND"

# -- the GPU-kernels service (:mod:`jupyterhub_gpu.kernels.service`), a JupyterHub service

#: its name as a hub service: the proxy serves it under ``/services/gpu-kernels/``
KERNELS_SERVICE_NAME = "gpu-kernels"
#: the gpu-kernels service in the hub pod (helm-values/values.yaml: hub.service.extraPorts)
KERNELS_PORT = 10104
#: the scope a user (and their server's token) needs to call it
KERNELS_ACCESS_SCOPE = f"access:services!service={KERNELS_SERVICE_NAME}"
#: its API, under the service's prefix: the caller's kernels; one is ``<path>/<kernel id>``
KERNELS_API_PATH = "api/kernels"
#: its Prometheus metrics (read:metrics), as the proxy and its own port serve them
KERNELS_METRICS_PATH = f"/services/{KERNELS_SERVICE_NAME}/{SERVICE_METRICS_PATH}"
#: the query parameter of ``DELETE <KERNELS_API_PATH>/<kernel id>`` by which a server
#: says why it deletes a kernel (without it: its user shut it down), and its one value:
#: the server released the kernel, idle for its profile's ``kernelIdleTimeout`` (also
#: the usage ledger's stop reason)
KERNEL_STOP_QUERY = "stop-reason"
KERNEL_IDLE_RELEASE = "idle-release"
#: its API, under the service's prefix: the kernelspecs of the caller's GPU profiles
KERNELSPECS_API_PATH = "api/kernelspecs"
#: in the notebook's environment: the service's URL (prefix included)
ENV_KERNELS_URL = ENV_PREFIX + "KERNELS_URL"
#: the service's settings (its environment): the address it listens on
ENV_KERNELS_BIND = ENV_PREFIX + "KERNELS_BIND"
#: in a server's and a kernel pod's environment: the pod's own address (the Downward
#: API's ``status.podIP``): where a server's kernels answer it, where a kernel listens
ENV_POD_IP = ENV_PREFIX + "POD_IP"
#: the pod's field it is read from
POD_IP_FIELD = "status.podIP"
#: the GPU kernels' provisioner, by its name in the entry point group
#: ``jupyter_client.kernel_provisioners`` (pyproject.toml), as kernelspecs name it
KERNEL_PROVISIONER_NAME = "jupyterhub-gpu-kernel-pod"

# -- the usage page (:mod:`jupyterhub_gpu.usage.service`), a JupyterHub service -------

#: its name as a hub service: the proxy serves it under ``/services/gpu-usage/``
USAGE_SERVICE_NAME = "gpu-usage"
#: the scope a user needs to open it (every user has it: the page shows each their share)
USAGE_ACCESS_SCOPE = f"access:services!service={USAGE_SERVICE_NAME}"
#: the CSV export, under the service's prefix
USAGE_CSV_PATH = "usage.csv"
#: the service's settings (its environment): the address it listens on; the default
#: reporting period in days
ENV_USAGE_BIND = ENV_PREFIX + "USAGE_BIND"
ENV_USAGE_DAYS = ENV_PREFIX + "USAGE_DAYS"

# -- the notebook server's own API (:mod:`jupyterhub_gpu.cull.server_ext`) -----------

CULL_API_PATH = PREFIX + "api/cull"
#: the status-bar item's data (:mod:`jupyterhub_gpu.labext.handler`)
STATUS_API_PATH = PREFIX + "api/status"
#: the JupyterLab extension (``labextension/package.json``'s name)
LABEXTENSION_NAME = "jupyterhub-gpu-status"
