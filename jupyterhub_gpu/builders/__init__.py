"""Pure builders: typed spec objects in, Kubernetes manifests or trait values out.

No I/O here, and no builder mutates its inputs.
"""
