"""The oracle's `vgpu` op, kept in its own module: oracle.py's dispatcher imports it by name when
asked (it runs as a script from this directory, in the upstream virtualenv).

- `vgpu` {uri, enabled_mdev_types: [{type_id, device_addresses, max_instances}]}: the VGPU
  inventory per physical GPU that Nova's libvirt driver computes (`_get_gpu_inventories`, keyed by
  libvirt's device name), connected read-only to `uri` (a libvirt test driver node file holding
  the GPUs and their mediated devices) under `[devices] enabled_mdev_types` and each type's
  `[mdev_<type>]` section; `order`: the GPUs in the order the driver listed them; or the class and
  text of Nova's refusal of the configuration. Nothing of upstream is copied: the answer comes
  from calling it.
"""

from __future__ import annotations

from typing import Any


def vgpu(request: dict[str, Any]) -> dict[str, Any]:
    import nova.conf.devices  # noqa: PLC0415
    from nova import exception as nova_exception  # noqa: PLC0415
    from nova.conf import CONF  # noqa: PLC0415
    from nova.virt import fake  # noqa: PLC0415
    from nova.virt.libvirt import driver as libvirt_driver  # noqa: PLC0415

    enabled: list[dict[str, Any]] = request["enabled_mdev_types"]
    overrides: list[tuple[str, Any, str]] = [
        ("connection_uri", request["uri"], "libvirt"),
        ("enabled_mdev_types", [entry["type_id"] for entry in enabled], "devices"),
    ]
    for name, value, group in overrides:
        CONF.set_override(name, value, group=group)
    nova.conf.devices.register_dynamic_opts(CONF)  # the [mdev_<type>] groups of the enabled types
    for entry in enabled:
        group = f"mdev_{entry['type_id']}"
        for name in ("device_addresses", "max_instances"):
            CONF.set_override(name, entry.get(name), group=group)
            overrides.append((name, None, group))
    try:
        try:
            driver = libvirt_driver.LibvirtDriver(fake.FakeVirtAPI(), read_only=True)
            inventories = driver._get_gpu_inventories()
        except nova_exception.NovaException as error:
            return {"error": f"{type(error).__name__}: {error}"}
        return {"inventories": inventories, "order": list(driver._host.list_mdev_capable_devices())}
    finally:
        for name, _value, group in overrides:
            CONF.clear_override(name, group=group)
