"""virtcap: capacity and overcommit monitor for libvirt/KVM fleets."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("virtcap")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"
