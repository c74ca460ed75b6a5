"""The HTTP contract of /api/v1."""
