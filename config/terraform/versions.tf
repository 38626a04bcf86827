terraform {
  required_version = ">= 1.5"

  required_providers {
    # 4.40.0 added gpu_driver to node pools (main.tf sets it to "None"); v5 may
    # change v4's resources, so stay below it.
    azurerm = {
      source  = "hashicorp/azurerm"
      version = ">= 4.40, < 5.0"
    }
  }
}

provider "azurerm" {
  # Set ARM_SUBSCRIPTION_ID (azurerm v4 requires the subscription explicitly).
  features {}
}
