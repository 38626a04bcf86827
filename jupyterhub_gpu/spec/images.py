"""The bundle's images in the spec's registry: the one place the registry is named.

The spec's ``registry`` is the Azure Container Registry's name. From it come the
registry Terraform creates (``acr_name`` in ``config/terraform/pools.auto.tfvars.json``),
the hub image and the default notebook image of the z2jh values
(``helm-values/generated.yaml``), and every profile's image unless it names its own.
The images are the ones ``config/Dockerfile`` and ``config/notebook.Dockerfile`` build,
tagged with this package's version (docs/admin-guide.md, step 5).
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import PackageNotFoundError, version

#: this package's distribution name (its version tags the images the bundle builds)
PACKAGE_NAME = "jupyterhub-gpu"
#: the images the bundle builds (config/Dockerfile, config/notebook.Dockerfile), as
#: repositories of the spec's registry
HUB_IMAGE = "jupyterhub-gpu-hub"
NOTEBOOK_IMAGE = "jupyterhub-gpu-notebook"
#: an Azure Container Registry's login server is its name and this
ACR_LOGIN_SUFFIX = ".azurecr.io"


@cache
def package_version() -> str:
    """This package's version: the tag of the images built from this checkout."""
    try:
        return version(PACKAGE_NAME)
    except PackageNotFoundError as e:  # running from a tree that was never installed
        raise RuntimeError(f"{PACKAGE_NAME} is not installed: its version tags the "
                           f"images (pip install -e .)") from e


def login_server(registry: str) -> str:
    """``jupyterhubgpu`` -> ``jupyterhubgpu.azurecr.io``."""
    return f"{registry}{ACR_LOGIN_SUFFIX}"


def image_name(registry: str, image: str) -> str:
    """The repository of one of the bundle's images in ``registry``."""
    return f"{login_server(registry)}/{image}"


def hub_image(registry: str) -> tuple[str, str]:
    """(name, tag) of the hub image."""
    return image_name(registry, HUB_IMAGE), package_version()


def notebook_image(registry: str) -> tuple[str, str]:
    """(name, tag) of the notebook image."""
    return image_name(registry, NOTEBOOK_IMAGE), package_version()
