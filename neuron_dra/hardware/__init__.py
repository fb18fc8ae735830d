"""The Neuron hardware of one node, as sysfs shows it.

Owns: the instance-type catalogue, sysfs discovery into an immutable
`NodeInventory` (with findings for every odd value), interconnect topology and
connected sets, EFA pairing and `devicegroup{N}_id` values, and fake sysfs
trees of the real shape. May use: `consts` and the standard library only.
"""
