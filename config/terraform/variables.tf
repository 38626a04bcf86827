variable "name" {
  description = "Name prefix of every resource: resource group, cluster, workspace."
  type        = string
  default     = "jupyterhub-gpu"
}

variable "location" {
  description = "Azure region; it must offer the GPU VM sizes of the spec's pools."
  type        = string
  default     = "westeurope"
}

variable "kubernetes_version" {
  description = "AKS Kubernetes minor version. z2jh's user-scheduler runs kube-scheduler of the same minor (scheduling.userScheduler.image.tag in helm-values/values.yaml): change both together; jupyterhub-gpu check-bundle refuses them apart."
  type        = string
  default     = "1.35"
}

variable "system_vm_size" {
  description = "VM size of the system pool: hub, proxy, user-scheduler, Kueue, GPU Operator."
  type        = string
  default     = "Standard_D4s_v5"
}

variable "system_min_count" {
  description = "Smallest size of the system pool (its size when every GPU pool uses Node Auto Provisioning)."
  type        = number
  default     = 1
}

variable "system_max_count" {
  description = "Largest size of the system pool."
  type        = number
  default     = 3
}

variable "api_server_authorized_ip_ranges" {
  description = "CIDRs allowed to reach the Kubernetes API (e.g. [\"203.0.113.7/32\"]); empty allows all."
  type        = list(string)
  default     = []
}

variable "gpu_os_disk_size_gb" {
  description = "OS disk of GPU nodes: CUDA notebook images are large."
  type        = number
  default     = 256
}

variable "maintenance_window" {
  description = "The weekly window for Kubernetes and node-image upgrades, which drain nodes and stop the notebooks on them: a day, a start time (HH:mm), the UTC offset and 4 to 24 hours."
  type = object({
    day_of_week    = string
    start_time     = string
    utc_offset     = string
    duration_hours = number
  })
  default = {
    day_of_week    = "Sunday"
    start_time     = "02:00"
    utc_offset     = "+00:00"
    duration_hours = 4
  }
  validation {
    condition     = var.maintenance_window.duration_hours >= 4 && var.maintenance_window.duration_hours <= 24
    error_message = "AKS takes a maintenance window of 4 to 24 hours."
  }
}

variable "log_retention_days" {
  description = "Retention of the Log Analytics workspace that Container Insights writes to."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags on every resource."
  type        = map(string)
  default     = { app = "jupyterhub-gpu" }
}

# GENERATED: pools.auto.tfvars.json sets acr_name, gpu_pools, node_auto_provisioning
# and cluster_autoscaler from config/platform.yaml
# (`jupyterhub-gpu bundle config/platform.yaml --write`). Do not set them by hand:
# `jupyterhub-gpu check-bundle` proves the file agrees with the spec.
variable "acr_name" {
  description = "The Azure Container Registry for the hub and notebook images (globally unique, a-z0-9): the spec's registry."
  type        = string
}

variable "node_auto_provisioning" {
  description = "Whether a pool of the spec uses Node Auto Provisioning (autoscaler: node-auto-provisioning)."
  type        = bool
}

variable "cluster_autoscaler" {
  description = "The spec's part of the cluster autoscaler's profile; null when no pool uses the cluster autoscaler."
  type = object({
    scale_down_unneeded        = string
    max_node_provisioning_time = string
  })
}

variable "gpu_pools" {
  description = "The node pools of the platform spec that the cluster autoscaler scales (GPU pools, and CPU-only ones: gpu = false), keyed by AKS pool name."
  type = map(object({
    vm_size         = string
    gpu             = bool
    min_count       = number
    max_count       = number
    spot            = bool
    node_labels     = map(string)
    node_taints     = list(string)
    autoscaler_tags = map(string)
  }))
}
