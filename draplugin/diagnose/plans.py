"""What the operator would write for a sysfs tree, built by the operator's own code and written
nowhere: weston.ini (`modes.compose`), the ResourceSlice (`slices.build_devices`,
`build_slice`, after the DDC/CI probe the publisher makes), and a claim's CDI spec (prepare's
own plan, then the delivery's spec).

The API is replaced by files: the ResourceClaim (its `status.allocation` and configs) and,
optionally, Display objects (`kubectl get displays -o yaml`), through `FileKube`, the
operator's `Kube` interface answered from them; it refuses every write.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from draplugin.driver import checkpoint, delivery, modes
from draplugin.settings import Settings
from libdisplay import cdi
from libdisplay.hardware import drm

JsonObject = dict[str, Any]
DDC_PROBE_TIMEOUT_S: Final = 10.0  # the publisher's own bound per bus (NodeSettings.ddc_timeout)
FIRST_GENERATION: Final = 0  # a pool's first slice, as the publisher creates it


class DiagnoseInputError(ValueError):
    """An input file that cannot stand for the API's objects; the message names file and field."""


def load_objects(path: Path) -> list[JsonObject]:
    """The Kubernetes objects in a YAML or JSON file: documents, and the items of a `List`."""
    import yaml

    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except OSError as err:
        raise DiagnoseInputError(f"{path}: {err.strerror}") from err
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise DiagnoseInputError(f"{path}: not YAML or JSON: {err}") from err
    objects: list[JsonObject] = []
    for index, document in enumerate(documents):
        if document is None:
            continue
        if not isinstance(document, dict):
            raise DiagnoseInputError(f"{path}: document {index} is not an object")
        items = document.get("items") if str(document.get("kind", "")).endswith("List") else None
        for item in items if isinstance(items, list) else [document]:
            if not isinstance(item, dict):
                raise DiagnoseInputError(f"{path}: document {index} holds an item that is not "
                                         "an object")
            objects.append(item)
    return objects


def _metadata(obj: Mapping[str, Any], field: str, *, source: str) -> str:
    value = (obj.get("metadata") or {}).get(field)
    if not isinstance(value, str) or not value:
        raise DiagnoseInputError(f"{source}: metadata.{field} is missing or not a string")
    return value


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


class FileKube:
    """The operator's `Kube`, answered from objects read from files; writes are refused."""

    def __init__(self, *, claims: Iterable[JsonObject] = (),
                 displays: Iterable[JsonObject] = ()) -> None:
        self._claims = {(_namespace(c), _metadata(c, "name", source="a ResourceClaim")): c
                        for c in claims}
        self._displays = {_metadata(d, "name", source="a Display"): d for d in displays}

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._claims.get((namespace, name))

    def get_display(self, name: str) -> dict[str, Any] | None:
        found = self._displays.get(name)
        return None if found is None else dict(found)


def displays_from(paths: Sequence[Path]) -> list[JsonObject]:
    """The Display objects in the files; any other kind is refused, naming its file."""
    found = []
    for path in paths:
        for obj in load_objects(path):
            if obj.get("kind") != "Display":
                raise DiagnoseInputError(f"{path}: kind {obj.get('kind')!r} is not a Display")
            _metadata(obj, "name", source=f"{path}: a Display")
            found.append(obj)
    return found


def claim_from(path: Path) -> JsonObject:
    """The one ResourceClaim in the file (as `kubectl get resourceclaim -o yaml` prints it)."""
    objects = load_objects(path)
    if len(objects) != 1 or objects[0].get("kind") != "ResourceClaim":
        kinds = ", ".join(repr(o.get("kind")) for o in objects) or "nothing"
        raise DiagnoseInputError(f"{path}: expected one ResourceClaim, found {kinds}")
    claim = objects[0]
    for field in ("name", "uid"):
        _metadata(claim, field, source=str(path))
    return claim


def weston_ini(settings: Settings, kube: FileKube) -> str:
    """weston.ini as the operator regenerates it: the modes of the claims prepared in the
    checkpoint in `settings.plugin_dir` (none without one), the Displays' specs, else each
    monitor's preferred mode."""
    prepared = checkpoint.load(checkpoint.path_in(settings.plugin_dir))
    return modes.compose(settings, kube, modes.claimed_outputs(prepared))


def probe_ddc(cards: Sequence[drm.Card], *, dev_root: Path,
              timeout: float = DDC_PROBE_TIMEOUT_S) -> dict[str, bool]:
    """Which device's monitor answers DDC/CI, found as the publisher finds it: buses from sysfs
    links, else by EDID, each probed in a thread bounded by `timeout`."""
    from draplugin.node import ddcmap

    access = ddcmap.Buses(dev_root=dev_root)
    buses = ddcmap.map_buses(cards, ddcmap.delivered_buses(dev_root), access=access)
    states = asyncio.run(ddcmap.probe_all(buses, access=access, timeout=timeout))
    return {device: state.supported for device, state in states.items()}


def resource_slice(settings: Settings, *, node_uid: str, ddc: bool) -> JsonObject:
    """The ResourceSlice the publisher would create for this node: untainted (the compositor
    answering), at the pool's first generation. Without `ddc` no bus is probed and every
    device says `ddc: false`."""
    from draplugin.node import slices

    node = settings.node
    cards = drm.enumerate_cards(sysfs_root=node.sysfs_root, dev_root=node.dev_root)
    answers = probe_ddc(cards, dev_root=node.dev_root) if ddc else {}
    devices = slices.with_taint(slices.build_devices(cards, ddc=answers), tainted=False)
    return slices.build_slice(node.name, node_uid=node_uid, devices=devices,
                              generation=FIRST_GENERATION)


def cdi_spec(settings: Settings, kube: FileKube, claim: JsonObject) -> JsonObject:
    """The CDI spec prepare would write for `claim`, after prepare's own checks of it (its
    allocation in this node's pool, connected monitors, configs, modes offered, DDC/CI settings
    against the monitor's bus); the first failure raises as prepare's would."""
    from draplugin.claims import ClaimRef
    from draplugin.driver.state import plan_claim
    from draplugin.node import ddcmap

    ref = ClaimRef(uid=_metadata(claim, "uid", source="the claim"), namespace=_namespace(claim),
                   name=_metadata(claim, "name", source="the claim"))
    # The DDC/CI hook only checks a plan here (no I/O); buses come from the sysfs links.
    hook = ddcmap.ClaimDdc(ddcmap.Buses(dev_root=settings.node.dev_root), buses=dict)
    # The plan is prepare's first step and writes nothing; the spec is what its last step writes.
    plan = plan_claim(settings, kube, ref, ddc=hook)
    chosen = delivery.from_settings(settings)
    if isinstance(chosen, delivery.LayoutDelivery):
        return chosen.build_spec(ref.uid, plan.outputs)
    assert isinstance(chosen, delivery.SharedDelivery)
    return cdi.build_spec(ref.uid, plan.outputs, chosen.socket)
