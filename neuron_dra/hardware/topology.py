"""Interconnect topology: who is wired to whom, and which device sets are connected.

A connected set is what a multi-device workload may be given. On the 4x4 torus
those are the rows, the halves and the whole node (the Neuron scheduler
extension's rule); on rings and lines, aligned contiguous blocks of every size
that divides the device count, because DRA's `matchAttribute` needs each set
to be exactly the devices sharing one attribute value. Behind a NeuronSwitch
(Trainium3) every set is connected; the published ones are the aligned blocks
of 1, 4, 8 and 16 that the AWS EFA driver groups devices by.
"""

from __future__ import annotations

from collections.abc import Mapping

from neuron_dra.hardware.instance_types import Shape

TORUS_SIDE = 4

DeviceSet = frozenset[int]


def neighbours(shape: Shape, count: int, index: int) -> tuple[int, ...]:
    """Neighbours of device `index`, in the order the Neuron driver lists them.

    The driver lists the 4x4 torus neighbours for 16 Trainium3 devices too, though
    their fabric is switched, so that is what a switched node's sysfs shows.
    """
    if shape in (Shape.TORUS, Shape.SWITCHED):
        row, col = divmod(index, TORUS_SIDE)
        up = (row - 1) % TORUS_SIDE * TORUS_SIDE + col
        left = row * TORUS_SIDE + (col - 1) % TORUS_SIDE
        down = (row + 1) % TORUS_SIDE * TORUS_SIDE + col
        right = row * TORUS_SIDE + (col + 1) % TORUS_SIDE
        return (up, left, down, right)
    if shape is Shape.RING:
        if count == 1:
            return ()
        return tuple(dict.fromkeys(((index - 1) % count, (index + 1) % count)))
    if shape is Shape.LINE:
        return tuple(n for n in (index - 1, index + 1) if 0 <= n < count)
    return ()


def connected_sets(shape: Shape, count: int) -> Mapping[int, tuple[DeviceSet, ...]]:
    """Allowed connected sets by size, each size partitioning the devices."""
    if shape in (Shape.TORUS, Shape.SWITCHED):
        if count != TORUS_SIDE * TORUS_SIDE:
            raise ValueError(f"a {shape} node has {TORUS_SIDE * TORUS_SIDE} devices, not {count}")
        sizes: tuple[int, ...] = (1, 4, 8, 16)
    elif shape in (Shape.RING, Shape.LINE):
        sizes = tuple(s for s in range(1, count + 1) if count % s == 0)
    else:
        sizes = (1,) if count == 1 else ()
    return {
        size: tuple(frozenset(range(start, start + size)) for start in range(0, count, size))
        for size in sizes
    }


def torus_position(index: int) -> tuple[int, int]:
    """(row, column) of a device on the torus."""
    return divmod(index, TORUS_SIDE)
