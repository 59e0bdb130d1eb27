"""Per-node ComputeDomain daemon: writes the IMEX config, maps peer names, supervises nvidia-imex."""
