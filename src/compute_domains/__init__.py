"""compute-domains: ComputeDomains for Kubernetes (per-job IMEX domains over multi-node NVLink)."""

__version__ = "0.2.0"
