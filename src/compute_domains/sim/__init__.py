"""The simulated GB200 cluster: real control plane, simulated nodes; never used by production."""
