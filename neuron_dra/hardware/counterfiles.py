"""The counter directories the Neuron driver creates for each device and NeuronCore.

Names in the order of the driver's tables (`neuron_sysfs_metrics.c`, unchanged from
2.24 to 2.30). Each counter is a directory of `total` and `present` (memory counters
also `peak`), each `%llu` and a newline. For memory, `total` is what is allocated
now and `peak` its maximum; `present` is the size of the last change, not a level.
"""

from __future__ import annotations

# neuron_coreK/stats/status/<name>/
STATUS = (
    "success",
    "failure",
    "timeout",
    "exec_bad_input",
    "hw_error",
    "execute_completed_with_error",
    "execute_completed_with_num_error",
    "generic_error",
    "resource_error",
    "resource_nc_error",
    "execute_failed_to_queue",
    "invalid_error",
    "unsupported_neff_version",
    "oob_error",
    "hw_collectives_error",
    "hw_hbm_ue_error",
    "hw_nc_ue_error",
    "hw_dma_abort_error",
    "execute_sw_nq_overflow",
    "execute_sw_semaphore_error",
    "execute_sw_event_error",
    "execute_sw_psum_collision",
    "execute_sw_sequencer_fatal",
    "hw_repairable_hbm_ue_error",
)
# neuron_coreK/stats/memory_usage/device_mem/<category>/ (and device_mem/ itself)
DEVICE_MEMORY = (
    "model_code",
    "tensors",
    "constants",
    "model_shared_scratchpad",
    "runtime_memory",
    "driver_memory",
    "collectives",
    "nonshared_scratchpad",
    "notifications",
    "dma_rings",
    "uncategorized",
)
# stats/memory_usage/host_mem/<category>/ of the device
HOST_MEMORY = (
    "dma_buffers",
    "tensors",
    "constants",
    "application_memory",
    "driver_memory",
    "notifications",
    "dma_rings",
    "uncategorized",
)
# neuron_coreK/stats/other_info/<name>/
OTHER_INFO = (
    "model_load_count",
    "reset_req_count",
    "reset_fail_count",
    "inference_count",
    "flop_count",
    "nc_time_in_use",
)
COUNTER = ("total", "present")
MEMORY_COUNTER = ("total", "present", "peak")
DEVICE_MEMORY_DIR = "stats/memory_usage/device_mem"
STATUS_DIR = "stats/status"
