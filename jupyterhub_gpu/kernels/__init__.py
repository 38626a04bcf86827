"""GPU kernels from a CPU server (docs/kernels.md): so far the checks of a start request."""
