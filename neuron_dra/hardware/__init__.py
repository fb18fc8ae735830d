"""The Neuron hardware of one node, as sysfs shows it.

Owns: the instance-type catalogue, sysfs discovery into an immutable
`NodeInventory` (with findings for every odd value), interconnect topology and
connected sets, EFA pairing and `devicegroup{N}_id` values, per-device
statistics (power, memory, execution and ECC counters), what each Neuron driver
release writes, and fake sysfs trees of the real shape, release by release.
May use: `consts` and the standard library only.
"""
