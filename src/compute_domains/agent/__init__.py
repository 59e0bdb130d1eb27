"""The resident IMEX agent: one long-running pod per GPU node serving its node's ComputeDomain."""
