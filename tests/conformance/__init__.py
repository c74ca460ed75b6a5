"""Conformance with upstream: virtcap against Nova's and Placement's own code (see oracle.py)."""
