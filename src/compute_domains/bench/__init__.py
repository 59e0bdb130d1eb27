"""Benchmarks of ComputeDomain formation and churn on the simulated cluster."""
