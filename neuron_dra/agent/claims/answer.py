"""What the kubelet is answered for a prepared claim: its devices and their CDI ids.

The answer is the claim's checkpoint record; the preparer writes it once the claim's
CDI spec (`cdi`) is on disk.
"""

from __future__ import annotations

from neuron_dra.agent.claims import cdi
from neuron_dra.agent.claims.checkpoint import ClaimRecord, RecordedDevice
from neuron_dra.agent.claims.plan import PreparedClaim


def claim_record(prepared: PreparedClaim) -> ClaimRecord:
    """The claim's record, whose devices are the kubelet's answer.

    The kubelet gives a container the CDI ids of each answered device whose request
    names hold the request the container references, or of every device for a
    container of the whole claim. It also lists the first id of each in the
    container's health status, where the API server refuses one listed twice
    (kubelets before 1.36 list every entry of the claim for every container), so
    entries do not share a first id where that can be helped.
    """
    ref = prepared.claim
    answer = _split_answer(prepared) if prepared.request_env else _one_env_answer(prepared)
    return ClaimRecord(uid=ref.uid, namespace=ref.namespace, name=ref.name, devices=answer)


def _one_env_answer(prepared: PreparedClaim) -> tuple[RecordedDevice, ...]:
    """Every container gets the spec's env: one entry per device, naming all its requests."""
    merged: dict[tuple[str, str], RecordedDevice] = {}
    for d in prepared.devices:
        seen = merged.get((d.pool, d.device))
        if seen is None:
            ids = (cdi.device_id(prepared.claim.uid, d.device),)
            merged[d.pool, d.device] = RecordedDevice(
                d.request_names, d.pool, d.device, ids, d.admin_access
            )
        else:
            more = tuple(n for n in d.request_names if n not in seen.request_names)
            merged[d.pool, d.device] = RecordedDevice(
                seen.request_names + more,
                d.pool,
                d.device,
                seen.cdi_device_ids,
                seen.admin_access and d.admin_access,
            )
    return tuple(merged.values())


def _split_answer(prepared: PreparedClaim) -> tuple[RecordedDevice, ...]:
    """Requests differ in devices: each result also names its request's env.

    One more entry, with the request name "" that no container can reference (pods
    name requests by DNS labels), names the env of every device. Only a container of
    the whole claim gets it, last, so its value replaces the requests'. Its first id
    is its own; its device, the claim's last, is what the kubelet looks its health up by.
    """
    uid = prepared.claim.uid
    answer = [
        RecordedDevice(
            d.request_names,
            d.pool,
            d.device,
            (cdi.device_id(uid, d.device), cdi.request_device_id(uid, d.request_names[0])),
            d.admin_access,
        )
        for d in prepared.devices
    ]
    last = prepared.devices[-1]
    ids = (cdi.claim_device_id(uid),)
    answer.append(RecordedDevice(("",), last.pool, last.device, ids, last.admin_access))
    return tuple(answer)
