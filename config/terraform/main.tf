# An AKS cluster for jupyterhub-gpu: a small system pool for the hub, proxy,
# user-scheduler, Kueue and the GPU Operator, and one autoscaled GPU node pool per
# pool of config/platform.yaml that the cluster autoscaler scales (var.gpu_pools,
# generated into pools.auto.tfvars.json). Pools with `autoscaler:
# node-auto-provisioning` are Karpenter NodePools of AKS Node Auto Provisioning
# (config/node-auto-provisioning.yaml), switched on by var.node_auto_provisioning.
#
# Static analysis: tests/unit/test_bundle_terraform.py runs checkov on this folder.
# Each check skipped below says why, next to the resource (docs/terraform.md lists
# them all).

data "azurerm_client_config" "current" {}

resource "azurerm_resource_group" "main" {
  name     = var.name
  location = var.location
  tags     = var.tags
}

resource "azurerm_log_analytics_workspace" "main" {
  name                = "${var.name}-logs"
  location            = azurerm_resource_group.main.location
  resource_group_name = azurerm_resource_group.main.name
  sku                 = "PerGB2018"
  retention_in_days   = var.log_retention_days
  tags                = var.tags
}

resource "azurerm_kubernetes_cluster" "main" {
  #checkov:skip=CKV_AZURE_115:A private API server needs a VPN or jump host to run helm and kubectl; the API is reached over Entra ID auth, optionally limited by api_server_authorized_ip_ranges.
  #checkov:skip=CKV_AZURE_6:api_server_authorized_ip_ranges is a variable (docs/admin-guide.md sets it to the admin's address); its default is empty so that a first apply works from anywhere.
  #checkov:skip=CKV_AZURE_117:OS and data disks use platform-managed encryption keys; a customer-managed disk encryption set is an organisation's choice, not the bundle's.
  #checkov:skip=CKV_AZURE_227:Encryption at host needs the subscription feature Microsoft.Compute/EncryptionAtHost registered first; not every subscription has it.
  #checkov:skip=CKV_AZURE_226:Ephemeral OS disks must fit the VM's cache or temp disk, which differs per GPU VM size; CUDA images need a large OS disk (var.gpu_os_disk_size_gb).
  #checkov:skip=CKV_AZURE_232:The hub, proxy, user-scheduler, Kueue and the GPU Operator run on the system pool to keep the cluster small; GPU pools are tainted and scale to zero.
  #checkov:skip=CKV_AZURE_172:The Key Vault Secrets Store CSI driver is not used (no key_vault_secrets_provider block), so there is nothing to rotate.
  name                      = var.name
  location                  = azurerm_resource_group.main.location
  resource_group_name       = azurerm_resource_group.main.name
  dns_prefix                = var.name
  kubernetes_version        = var.kubernetes_version
  sku_tier                  = "Standard"
  automatic_upgrade_channel = "patch"
  node_os_upgrade_channel   = "NodeImage"
  azure_policy_enabled      = true
  local_account_disabled    = true
  oidc_issuer_enabled       = true
  workload_identity_enabled = true
  tags                      = var.tags

  # Kubernetes and node-image upgrades drain nodes, and a notebook is a pod without
  # a controller: drained, it is stopped, not moved (its user is told "drained for
  # maintenance"). Both kinds of upgrade wait for this weekly window, outside
  # working hours (var.maintenance_window); AKS may still apply an urgent fix outside it.
  maintenance_window_auto_upgrade {
    frequency   = "Weekly"
    interval    = 1
    day_of_week = var.maintenance_window.day_of_week
    start_time  = var.maintenance_window.start_time
    utc_offset  = var.maintenance_window.utc_offset
    duration    = var.maintenance_window.duration_hours
  }
  maintenance_window_node_os {
    frequency   = "Weekly"
    interval    = 1
    day_of_week = var.maintenance_window.day_of_week
    start_time  = var.maintenance_window.start_time
    utc_offset  = var.maintenance_window.utc_offset
    duration    = var.maintenance_window.duration_hours
  }

  # The cluster autoscaler scales the system pool unless every GPU pool uses Node
  # Auto Provisioning: then the pool keeps system_min_count nodes and NAP's default
  # NodePools take any system pod that does not fit (AKS runs NAP beside the cluster
  # autoscaler only with a subscription feature; docs/terraform.md).
  default_node_pool {
    name                 = "system"
    vm_size              = var.system_vm_size
    auto_scaling_enabled = var.cluster_autoscaler != null
    min_count            = var.cluster_autoscaler != null ? var.system_min_count : null
    max_count            = var.cluster_autoscaler != null ? var.system_max_count : null
    node_count           = var.cluster_autoscaler != null ? null : var.system_min_count
    max_pods             = 110
    upgrade_settings {
      max_surge = "10%"
    }
  }

  identity {
    type = "SystemAssigned"
  }

  azure_active_directory_role_based_access_control {
    azure_rbac_enabled = true
    tenant_id          = data.azurerm_client_config.current.tenant_id
  }

  api_server_access_profile {
    authorized_ip_ranges = var.api_server_authorized_ip_ranges
  }

  # Cilium enforces NetworkPolicies: z2jh's and config/team-namespaces.yaml's.
  network_profile {
    network_plugin      = "azure"
    network_plugin_mode = "overlay"
    network_data_plane  = "cilium"
    network_policy      = "cilium"
  }

  oms_agent {
    log_analytics_workspace_id = azurerm_log_analytics_workspace.main.id
  }

  # The cluster autoscaler's profile: one for every node pool it scales, absent when
  # it scales none (var.cluster_autoscaler is null). Durations are Go durations; AKS
  # takes whole minutes for the scale_down_* ones.
  dynamic "auto_scaler_profile" {
    for_each = var.cluster_autoscaler == null ? [] : [var.cluster_autoscaler]
    content {
      # Scale to zero: a node is removed once it has been unneeded this long. From the
      # spec: the shortest consolidateAfter of the pools it scales (whole minutes).
      scale_down_unneeded = auto_scaler_profile.value.scale_down_unneeded
      # No scale-down of ANY pool for this long after a scale-up of any pool: the
      # pause is cluster-wide (cluster-autoscaler's isScaleDownInCooldown; AKS does
      # not expose the per-node-group delay type). AKS's 10m would keep idle A100s up
      # all through a busy day of CPU and T4 scale-ups. The shortest whole minute:
      # a new node is still safe, as it must stay unneeded for scale_down_unneeded
      # first, and a notebook bound to it (a pod without a controller) pins it.
      scale_down_delay_after_add = "1m"
      # A node that never became Ready is removed after this long (AKS's default).
      scale_down_unready = "20m"
      # Only an empty GPU node is ever removed: a notebook is a pod without a
      # controller, which the autoscaler does not evict, so this threshold (AKS's
      # default) only decides for the system pool.
      scale_down_utilization_threshold = "0.5"
      # Of the pools that could run a pending pod (a notebook's node selector names
      # one), grow the one that leaves the least CPU and memory idle.
      expander = "least-waste"
      # A notebook's emptyDir volumes must not pin its node once the notebook is gone.
      skip_nodes_with_local_storage = false
      # kube-system pods (not DaemonSets) keep their node. Every other pool is
      # tainted (GPU pools nvidia.com/gpu, CPU pools z2jh's hub.jupyter.org/dedicated,
      # which notebooks tolerate), so they only run on the system pool, and no
      # coredns or metrics-server replica ever pins a user pool's node.
      skip_nodes_with_system_pods = true
      # How long pods get to stop when a node is drained (AKS's default).
      max_graceful_termination_sec = "600"
      # A new node not Ready after this long is given up on. From the spec: the
      # slowest pool's bootTime (the GPU Operator's driver install, a MIG node's
      # reboot) plus a minute, never below AKS's default 15m.
      max_node_provisioning_time = auto_scaler_profile.value.max_node_provisioning_time
    }
  }

  # Node Auto Provisioning (AKS's managed Karpenter) starts the VMs of the pools
  # with `autoscaler: node-auto-provisioning`, from the NodePools and AKSNodeClasses
  # of config/node-auto-provisioning.yaml. It needs Azure CNI overlay with the Cilium
  # dataplane and a managed identity, as above. Beside the cluster autoscaler it
  # runs no default NodePools, so nothing but the spec's NodePools starts a VM.
  node_provisioning_profile {
    mode               = var.node_auto_provisioning ? "Auto" : "Manual"
    default_node_pools = var.node_auto_provisioning && var.cluster_autoscaler != null ? "None" : "Auto"
  }

  lifecycle {
    ignore_changes = [default_node_pool[0].node_count]
  }
}

# One autoscaled pool per pool of the spec (CPU-only pools, gpu: none, included).
# Labels and taints are exactly what GPUSpawner's pods select and tolerate; Kueue's
# ResourceFlavors name the same pools. On a GPU pool AKS installs no NVIDIA driver
# (gpu_driver = "None"; a CPU-only pool leaves it unset) and no MIG layout (no
# gpu_instance): the GPU Operator owns both (docs/gpu-operator.md). The autoscaler
# tags tell the cluster autoscaler what a node of an empty pool will offer, so that
# a pending notebook scales the pool up from 0 (docs/terraform.md).
resource "azurerm_kubernetes_cluster_node_pool" "gpu" {
  #checkov:skip=CKV_AZURE_227:Encryption at host needs a subscription feature registration and GPU VM size support; see the cluster.
  for_each              = var.gpu_pools
  name                  = each.key
  kubernetes_cluster_id = azurerm_kubernetes_cluster.main.id
  mode                  = "User"
  vm_size               = each.value.vm_size
  auto_scaling_enabled  = true
  min_count             = each.value.min_count
  max_count             = each.value.max_count
  node_count            = each.value.min_count
  max_pods              = 110
  os_disk_size_gb       = var.gpu_os_disk_size_gb
  gpu_driver            = each.value.gpu ? "None" : null
  priority              = each.value.spot ? "Spot" : "Regular"
  eviction_policy       = each.value.spot ? "Delete" : null
  spot_max_price        = each.value.spot ? -1 : null
  node_labels           = each.value.node_labels
  node_taints           = each.value.node_taints
  tags                  = merge(var.tags, each.value.autoscaler_tags)

  lifecycle {
    ignore_changes = [node_count]
  }
}

resource "azurerm_container_registry" "main" {
  #checkov:skip=CKV_AZURE_139:AKS pulls over the public endpoint with its managed identity (AcrPull); a private endpoint needs a private DNS zone and VNet the bundle does not create.
  #checkov:skip=CKV_AZURE_164:Content trust (signed images) is a Premium feature; the registry holds one hub image built from this repository.
  #checkov:skip=CKV_AZURE_165:Geo-replication is a Premium feature; the hub image is pulled once per hub restart in one region.
  #checkov:skip=CKV_AZURE_166:Quarantine is a Premium preview feature.
  #checkov:skip=CKV_AZURE_167:Retention of untagged manifests is a Premium feature; images are pushed with explicit tags.
  #checkov:skip=CKV_AZURE_233:Zone redundancy is a Premium feature.
  #checkov:skip=CKV_AZURE_237:Dedicated data endpoints are a Premium feature.
  name                = var.acr_name
  resource_group_name = azurerm_resource_group.main.name
  location            = azurerm_resource_group.main.location
  sku                 = "Standard"
  admin_enabled       = false
  tags                = var.tags
}

# The cluster's kubelets pull the hub image.
resource "azurerm_role_assignment" "acr_pull" {
  scope                            = azurerm_container_registry.main.id
  role_definition_name             = "AcrPull"
  principal_id                     = azurerm_kubernetes_cluster.main.kubelet_identity[0].object_id
  skip_service_principal_aad_check = true
}

# Local accounts are off: whoever runs Terraform administers the cluster via Entra ID.
resource "azurerm_role_assignment" "cluster_admin" {
  scope                = azurerm_kubernetes_cluster.main.id
  role_definition_name = "Azure Kubernetes Service RBAC Cluster Admin"
  principal_id         = data.azurerm_client_config.current.object_id
}
