terraform {
  required_version = ">= 1.5"

  required_providers {
    # 4.40.0 added gpu_driver to node pools (main.tf sets it to "None"), 4.57.0 the
    # cluster's node_provisioning_profile; v5 may change v4's resources, so stay
    # below it.
    azurerm = {
      source  = "hashicorp/azurerm"
      version = ">= 4.57, < 5.0"
    }
  }
}

provider "azurerm" {
  # Set ARM_SUBSCRIPTION_ID (azurerm v4 requires the subscription explicitly).
  features {}
}
