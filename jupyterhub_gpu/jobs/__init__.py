"""Training jobs from a notebook: the hub service ``gpu-jobs`` and its command line."""
