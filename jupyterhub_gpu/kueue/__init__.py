"""What Kueue and Kubernetes say about a notebook, in words a data scientist reads.

``status`` is pure (manifests in, messages out); ``reflectors`` holds the shared
watches; ``visibility`` reads Kueue's pending-workloads API when it is served.
"""
