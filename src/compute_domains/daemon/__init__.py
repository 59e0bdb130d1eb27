"""Per-node ComputeDomain daemon: writes IMEX configs, maps peer names, supervises nvidia-imex."""
