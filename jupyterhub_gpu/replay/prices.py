"""The prices and rates the replay's costs use besides the spec's ``pricePerNodeHour``:
one place for each, with its region, date and source (docs/replay.md, "Every cost").

The node pools' prices are the spec's (``config/platform.yaml``: East US, Linux, pay
as you go, USD). Everything else a week of the platform costs is here. Each
:class:`Price` says whether it was checked against its source page when it was
written (``checked``); the ones that were not are list prices as we knew them, to be
checked before a finance reader relies on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupyterhub_gpu.contract import AZURE_FILES_CLASS, AZURE_FILES_PREMIUM_CLASS

#: Azure prices a month as this many hours (its pricing pages' convention)
HOURS_PER_MONTH = 730
REGION = "East US"
#: when the prices below were written down
PRICED_ON = "2026-12-07"
VM_PRICES_PAGE = "https://azure.microsoft.com/pricing/details/virtual-machines/linux/"
FILES_PRICES_PAGE = "https://azure.microsoft.com/pricing/details/storage/files/"


@dataclass(frozen=True)
class Price:
    what: str
    amount: float  # USD
    per: str  # the unit the amount is for
    source: str
    region: str = REGION
    date: str = PRICED_ON
    checked: bool = False  # compared with the source page when written down
    assumption: bool = False  # not a price list's figure: our estimate, said so

    @property
    def note(self) -> str:
        status = ("an assumption" if self.assumption else
                  "checked" if self.checked else "list price, not re-checked")
        return f"{self.region}, {self.date}, {status}; {self.source}"


AKS_STANDARD_TIER = Price(
    "AKS Standard tier (config/terraform/main.tf: sku_tier = \"Standard\")", 0.10,
    "cluster-hour", "https://azure.microsoft.com/pricing/details/kubernetes-service/")

#: on-demand prices of the VM sizes the bundle's fixed pools may use (Linux, pay as you go)
VM_PRICES = {
    "Standard_D4s_v5": Price("Standard_D4s_v5 (4 vCPU, 16 GiB)", 0.192, "VM-hour",
                             VM_PRICES_PAGE),
}

AZURE_FILES_PREMIUM = Price(
    "Azure Files premium (SSD, provisioned v1, LRS): the home shares "
    f"(storageClass {AZURE_FILES_PREMIUM_CLASS})", 0.16, "provisioned GiB-month", FILES_PRICES_PAGE)
AZURE_FILES_STANDARD = Price(
    "Azure Files standard (HDD, pay as you go, transaction optimized, LRS): the "
    f"checkpoint shares (storageClass {AZURE_FILES_CLASS}), billed on the GiB used", 0.06,
    "used GiB-month", FILES_PRICES_PAGE)
#: Azure ML gives each compute instance a P10 OS disk (128 GiB premium SSD), billed
#: while the instance is stopped too
P10_DISK = Price("Premium SSD managed disk P10 (128 GiB, LRS): a compute instance's OS disk",
                 19.71, "disk-month", "https://azure.microsoft.com/pricing/details/managed-disks/")

#: the system pool's extra nodes for the monitoring stack (kube-prometheus-stack runs
#: on the system pool: every other pool is tainted): our estimate, not measured
MONITORING_NODES = Price(
    "system-pool nodes added by kube-prometheus-stack (Prometheus, Alertmanager, "
    "Grafana, kube-state-metrics)", 1, "node", "our estimate; measure it on your cluster",
    assumption=True)
#: how full the checkpoint shares are (standard shares bill the GiB used)
CHECKPOINT_FILL = Price("share of each checkpoint PVC's size in use", 1.0, "fraction",
                        "an upper bound: the whole requested size", assumption=True)

#: Azure's spot eviction-rate buckets, read as the chance per hour that a spot VM is
#: evicted (a third-party summary of Microsoft's spot guidance reads them so; we did
#: not find Microsoft's own statement of the unit): the model's range, low to high
SPOT_EVICTIONS_PER_HOUR = (0.0, 0.05, 0.20)
SPOT_EVICTION_SOURCE = (
    "Azure publishes spot eviction rates in buckets 0-5%, 5-10%, 10-15%, 15-20%, 20+% "
    "(Azure Resource Graph SpotResources, skuspotevictionrate); read as per hour by "
    "https://techbrainblog.com/2025/11/30/key-points-about-azure-spot-vms-and-its-eviction "
    "(an assumption: check the rate of your VM size and region)")
#: how far back a spot pod's last checkpoint is, at most (the work since is lost):
#: an assumption (the profiles' preStop hook saves one when the 30 s notice comes,
#: if the notice arrives and the save fits the grace period)
CHECKPOINT_INTERVAL_SECONDS = 30 * 60

ALL = (AKS_STANDARD_TIER, *VM_PRICES.values(), AZURE_FILES_PREMIUM, AZURE_FILES_STANDARD,
       P10_DISK, MONITORING_NODES, CHECKPOINT_FILL)


def vm_price(vm_size: str) -> Price:
    """The on-demand price of ``vm_size``; a KeyError naming the sizes we have."""
    try:
        return VM_PRICES[vm_size]
    except KeyError:
        raise KeyError(f"no price for VM size {vm_size!r} in jupyterhub_gpu/replay/prices.py "
                       f"(it has {', '.join(VM_PRICES)})") from None


def per_hour(price: Price) -> float:
    """A monthly price as an hourly one."""
    return price.amount / HOURS_PER_MONTH
