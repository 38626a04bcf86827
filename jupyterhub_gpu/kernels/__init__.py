"""GPU kernels from a CPU server (docs/kernels.md): the checks of a start request, the
connect-back's sealing, the server's response listener and the kernel launcher."""
