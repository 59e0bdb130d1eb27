"""Switching a cluster from NVIDIA's ComputeDomain driver to ours (docs/upgrade.md).

``helmrelease``: helm's stored release record (pure); ``prepare``: ``cdctl migrate prepare``,
which keeps the daemons' ServiceAccount through NVIDIA's uninstall and reads its values.
"""
