"""How much one kubelet call may carry, and how large a checkpoint can legitimately be.

Imported by the kubelet side before the rest of the agent: the standard library only.
"""

from __future__ import annotations

# Claims one NodePrepareResources or NodeUnprepareResources call may carry: the kubelet
# sends the claims of one pod for this driver, a handful in practice; a call with more
# is refused, claim by claim, before any API read or file write.
MAX_CLAIMS_PER_CALL = 128
# resource.k8s.io/v1 allows at most 32 results in one claim's allocation.
MAX_RESULTS_PER_CLAIM = 32
# One checkpoint entry (a device result) with every name at its API limit: 32 request
# names of 63 characters, a pool of 253, a device of 63, and its CDI ids (`test_checkpoint`
# encodes one); a usual entry is about 180 bytes.
MAX_ENTRY_BYTES = 4096
# Anything larger is not a checkpoint this driver wrote: a call's worth of claims, each
# with every result at its longest, is 16 MiB (a node holds far fewer: a claim without
# admin access holds a device of its own), and 4 MiB more for the envelope.
MAX_CHECKPOINT_BYTES = MAX_CLAIMS_PER_CALL * MAX_RESULTS_PER_CLAIM * MAX_ENTRY_BYTES + (4 << 20)
