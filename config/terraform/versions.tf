terraform {
  required_version = ">= 1.5"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 4.0"
    }
  }
}

provider "azurerm" {
  # Set ARM_SUBSCRIPTION_ID (azurerm v4 requires the subscription explicitly).
  features {}
}
