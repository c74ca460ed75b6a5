"""virtcap: capacity and overcommit monitor for libvirt/KVM fleets."""

__version__ = "0.1.0"
