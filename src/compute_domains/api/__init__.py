"""Shared domain vocabulary: typed models and names, no IO."""
