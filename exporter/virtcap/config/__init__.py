"""The exporter's configuration file, read, validated and merged into one policy per hypervisor.

Callers import from here, not from the modules below, which are split by job: the file's
schema (schema), the merge into per-hypervisor policies (load), the one-line explanation of
validation errors shared with the web configuration and the claims API (errors), and the
bounded YAML reader with ConfigError (yamlfile).
"""

from virtcap.config.errors import explain_validation_error
from virtcap.config.load import (
    Config,
    Flavor,
    Hypervisor,
    build_config,
    configure_new_hypervisor,
    load_config,
    parse_config,
)
from virtcap.config.schema import (
    AuditSettings,
    ClaimSettings,
    ConfigFile,
    CpuSet,
    DiskSource,
    Duration,
    FailureToleranceSettings,
    Ratio,
    ReclaimSettings,
    Size,
)
from virtcap.config.yamlfile import ConfigError

__all__ = [
    "AuditSettings",
    "ClaimSettings",
    "Config",
    "ConfigError",
    "ConfigFile",
    "CpuSet",
    "DiskSource",
    "Duration",
    "FailureToleranceSettings",
    "Flavor",
    "Hypervisor",
    "Ratio",
    "ReclaimSettings",
    "Size",
    "build_config",
    "configure_new_hypervisor",
    "explain_validation_error",
    "load_config",
    "parse_config",
]
