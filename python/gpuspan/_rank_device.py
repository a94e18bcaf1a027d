"""The device a rank computes on, as the ``devices`` setting that makes gpuspan measure it.

CUDA numbers devices fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML numbers
them by PCI bus. On a machine with GPUs of different models, CUDA's device 0 need not be
NVML's device 0, so a CUDA ordinal taken as an NVML index measures another GPU. A UUID
names the same device to both: the rank's device is named by the UUID CUDA gives it. Only
when CUDA gives none does the ordinal stand in (its entry of ``CUDA_VISIBLE_DEVICES``, else
the number), with one warning where CUDA's order may not be NVML's.

On ROCm builds of torch (``torch.version.hip`` set), ``torch.cuda`` is HIP: its ordinal
counts the AMD GPUs that ``ROCR_VISIBLE_DEVICES``, then ``HIP_VISIBLE_DEVICES`` (else
``CUDA_VISIBLE_DEVICES``) leave, and its UUID is not the ``GPU-<unique_id>`` that names an
AMD device, so the device is the one the crate finds at that position of those lists.
"""

import os
import re
import sys

from . import _native

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_warned = False


def init_settings(torch):
    """The ``gpuspan.init`` keywords that make a rank measure its own device: none when
    ``GPUSPAN_DEVICES`` chooses, or before CUDA is in use (the core's rule applies)."""
    if _native.devices_chosen():
        return {}
    devices = devices_setting(torch)
    return {} if devices is None else {"devices": devices}


def devices_setting(torch):
    """The ``devices`` setting (a ``GPUSPAN_DEVICES`` list) for the CUDA device torch
    computes on now, or ``None`` before CUDA is in use."""
    cuda = getattr(torch, "cuda", None)
    try:
        if cuda is None or not cuda.is_initialized():
            return None
        ordinal = cuda.current_device()
    except Exception:  # noqa: BLE001 - no usable CUDA: the core's own rule applies
        return None
    if _is_rocm(torch):
        return _native.hip_device(ordinal)
    entry = by_uuid(_uuid_of(cuda, ordinal))
    if entry is not None:
        return entry
    try:
        count = cuda.device_count()
    except Exception:  # noqa: BLE001 - unknown: as if several
        count = 2
    return by_ordinal(ordinal, count)


def by_uuid(uuid):
    """The devices setting for the device CUDA reports ``uuid`` for: ``GPU-<uuid>`` for a
    GPU and ``MIG-<uuid>`` for a MIG instance, both given since CUDA's UUID does not say
    which (a UUID names one device, so one entry matches at most). ``uuid`` is torch's
    ``get_device_properties(i).uuid``: its 16 ``bytes``, or its text, with or without a
    ``GPU-``/``MIG-`` prefix. ``None`` when there is none, or it is not a UUID."""
    text = _uuid_text(uuid)
    if text is None:
        return None
    return f"GPU-{text},MIG-{text}"


def by_ordinal(ordinal, count):
    """The devices setting for CUDA's device ``ordinal`` without its UUID: its entry of
    ``CUDA_VISIBLE_DEVICES`` as gpuspan reads that list, else the number, which gpuspan reads
    as an NVML index. Says once, on stderr, when that number may name another GPU: CUDA's
    order is not the PCI bus order (``CUDA_DEVICE_ORDER`` unset or ``FASTEST_FIRST``) and
    there are several devices (``count`` of them visible, or an index above 0)."""
    entry = _native.cuda_device(ordinal)
    if entry.isdigit() and (count > 1 or int(entry) > 0):
        order = os.environ.get("CUDA_DEVICE_ORDER", "").strip().upper()
        if order != "PCI_BUS_ID":
            _warn_once(
                f"gpuspan: warning: CUDA gives no UUID for its device {ordinal}, so gpuspan "
                f"measures NVML's device {entry}; CUDA numbers the devices fastest first, NVML "
                "by PCI bus, so on a machine with different GPUs that may be another device. "
                "Set CUDA_DEVICE_ORDER=PCI_BUS_ID (both then agree) or GPUSPAN_DEVICES to the "
                "device's UUID"
            )
    return entry


def _uuid_of(cuda, ordinal):
    try:
        return cuda.get_device_properties(ordinal).uuid
    except Exception:  # noqa: BLE001 - a torch without it: no UUID
        return None


def _uuid_text(uuid):
    """``xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (lower case) for a UUID as torch gives it,
    or ``None``."""
    if uuid is None:
        return None
    raw = getattr(uuid, "bytes", None)
    if raw is not None and not isinstance(uuid, str):
        try:
            raw = bytes(raw)
        except (TypeError, ValueError):
            raw = b""
        if len(raw) != 16:
            return None
        hex_ = raw.hex()
        text = f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:]}"
    else:
        text = str(uuid).strip().lower()
        if text.startswith(("gpu-", "mig-")):
            text = text[4:]
    return text if _UUID.match(text) else None


def _is_rocm(torch):
    return getattr(getattr(torch, "version", None), "hip", None) is not None


def _warn_once(message):
    global _warned
    if not _warned:
        _warned = True
        print(message, file=sys.stderr)
