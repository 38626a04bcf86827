output "resource_group" {
  description = "Resource group of the cluster (for az aks get-credentials)."
  value       = azurerm_resource_group.main.name
}

output "cluster_name" {
  description = "Name of the AKS cluster."
  value       = azurerm_kubernetes_cluster.main.name
}

output "acr_login_server" {
  description = "Registry for the hub image: <login server>/jupyterhub-gpu-hub."
  value       = azurerm_container_registry.main.login_server
}

output "gpu_pools" {
  description = "The GPU node pools created from the spec."
  value       = { for name, pool in azurerm_kubernetes_cluster_node_pool.gpu : name => pool.vm_size }
}
