"""DRA kubelet plugin: prepares ComputeDomain channel and daemon claims on one node.

Other packages may not import from here except ``cli`` (which composes and runs the plugin).
"""
