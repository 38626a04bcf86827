# The notebook image of jupyterhub-gpu: a Jupyter Docker Stacks image with this
# package installed, which every GPU profile's pod needs for
#   - its preStop hook, `python -m jupyterhub_gpu.checkpoint prestop` (the kernels'
#     last checkpoint before a preemption, eviction or cull) and the checkpoint helper;
#   - the cull notices: the Jupyter Server extension (enabled by
#     etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json, which pip installs),
#     JupyterLab's settings override (share/jupyter/lab/settings/overrides.d) and the
#     IPython kernel extension (etc/ipython/ipython_kernel_config.json, copied below);
#   - the GPU status item in JupyterLab's status bar: the prebuilt JupyterLab extension
#     (share/jupyter/labextensions/jupyterhub-gpu-status, which pip installs; it needs
#     JupyterLab 4) and its Jupyter Server extension (enabled by the same json).
# With a stock image the pods still stop normally, but without the last checkpoint;
# the hub then logs once per image that checkpoint-on-stop is unavailable.
#
# Build it from the repository root (the context must hold pyproject.toml and the
# package), in Azure with the registry config/terraform creates:
#
#   VERSION=$(jupyterhub-gpu --version | cut -d' ' -f2)   # this package's version
#   az acr build --registry jupyterhubgpu --image jupyterhub-gpu-notebook:$VERSION \
#     --file config/notebook.Dockerfile .
#
# or locally: docker build --file config/notebook.Dockerfile \
#     --tag jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook:$VERSION .
#
# config/platform.yaml's profiles run it as
# jupyterhubgpu.azurecr.io/jupyterhub-gpu-notebook:<this package's version>. Add your team's packages in a Dockerfile FROM this image.
#
# checkov:skip=CKV_DOCKER_2:The notebook runs under Kubernetes, where KubeSpawner and the hub watch the server (a Docker HEALTHCHECK is not used).
FROM quay.io/jupyter/pytorch-notebook:cuda12-python-3.12

# The base runs as jovyan (NB_UID), who owns ${CONDA_DIR}: pip installs there as is.
ARG SRC=/tmp/jupyterhub-gpu
COPY --chown=${NB_UID}:${NB_GID} pyproject.toml README.md LICENSE ${SRC}/
COPY --chown=${NB_UID}:${NB_GID} jupyterhub_gpu ${SRC}/jupyterhub_gpu
# --no-deps keeps the image's own JupyterHub, Jupyter Server and JupyterLab as they
# are: the pod side needs only them, the standard library and PyYAML. The build
# stops unless the image's JupyterLab lists the GPU status extension as enabled and
# OK (JupyterLab 4: CI runs it in 4.0 and in the newest). The last line runs the
# preStop hook once, as the kubelet will.
RUN python -m pip install --no-cache-dir --no-deps "${SRC}" "pyyaml>=6" \
 && mkdir -p "${CONDA_DIR}/etc/ipython" \
 && cp "${SRC}/jupyterhub_gpu/cull/etc/ipython/ipython_kernel_config.json" \
       "${CONDA_DIR}/etc/ipython/ipython_kernel_config.json" \
 && rm -rf "${SRC}" \
 && test -f "${CONDA_DIR}/etc/jupyter/jupyter_server_config.d/jupyterhub-gpu.json" \
 && test -f "${CONDA_DIR}/share/jupyter/lab/settings/overrides.d/jupyterhub-gpu.json" \
 && test -f "${CONDA_DIR}/share/jupyter/labextensions/jupyterhub-gpu-status/package.json" \
 && jupyter labextension list 2>&1 | grep -Eq "jupyterhub-gpu-status v[0-9.]+ .*enabled.*OK" \
 && cd / && python -m jupyterhub_gpu.checkpoint prestop

USER ${NB_UID}
