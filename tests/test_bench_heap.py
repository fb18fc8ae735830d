"""bench/heap.py: what it reads of `go tool pprof -top -unit=MB`, and in which unit.

pprof's "MB" is 1 << 20 bytes (github.com/google/pprof,
internal/measurement/measurement.go: `{"MB", []string{"mb", "mbyte", "megabyte"},
float64(1 << 20)}`), so the figures it prints are MiB as they stand. The text below
is pprof's own (Go 1.26.8), over the heap profile of a program holding a slice of
64 << 20 bytes and one of 10,000,000 bytes, profiled with `runtime.MemProfileRate = 1`
after a collection: the first prints as 64MB, the second as 9.54MB.
"""

from __future__ import annotations

from tests.bench_modules import load

heap = load("heap")

SIXTY_FOUR_MIB = 64 << 20
TEN_MILLION_BYTES = 10_000_000

TOP_FLAT = """\
File: pp
Build ID: 26ccc7f78b6b1654db9b127a5b2f448ee6eca778
Type: inuse_space
Time: 2026-11-28 22:11:14 UTC
Showing nodes accounting for 73.54MB, 100% of 73.54MB total
Dropped 11 nodes (cum <= 0.37MB)
      flat  flat%   sum%        cum   cum%
      64MB 87.03% 87.03%       64MB 87.03%  main.holdSixtyFourMiB
    9.54MB 12.97%   100%     9.54MB 12.97%  main.holdTenMillionBytes
         0     0%   100%    73.54MB   100%  main.main
         0     0%   100%    73.54MB   100%  runtime.main
"""

TOP_CUM = """\
File: pp
Build ID: 26ccc7f78b6b1654db9b127a5b2f448ee6eca778
Type: inuse_space
Time: 2026-11-28 22:11:14 UTC
Showing nodes accounting for 73.54MB, 100% of 73.54MB total
Dropped 11 nodes (cum <= 0.37MB)
      flat  flat%   sum%        cum   cum%
         0     0%     0%    73.54MB   100%  main.main
         0     0%     0%    73.54MB   100%  runtime.main
      64MB 87.03% 87.03%       64MB 87.03%  main.holdSixtyFourMiB
    9.54MB 12.97%   100%     9.54MB 12.97%  main.holdTenMillionBytes
"""


def test_pprof_mb_is_a_mebibyte() -> None:
    """64 << 20 bytes print as 64MB and 10,000,000 as 9.54MB: read as 10**6 bytes, the
    figures would be 4.6% low (61 and 9 MiB)."""
    rows, _ = heap.parse_top(TOP_FLAT)
    held = {name: flat for name, flat, _ in rows}
    assert held["main.holdSixtyFourMiB"] == SIXTY_FOUR_MIB // heap.MIB == 64
    assert held["main.holdTenMillionBytes"] == round(TEN_MILLION_BYTES / heap.MIB) == 10


def test_the_rows_and_total_of_top_are_read_in_mib() -> None:
    rows, total = heap.parse_top(TOP_CUM)
    assert rows == [
        ["main.main", 0, 74],
        ["runtime.main", 0, 74],
        ["main.holdSixtyFourMiB", 64, 64],
        ["main.holdTenMillionBytes", 10, 10],
    ]
    assert total == round((SIXTY_FOUR_MIB + TEN_MILLION_BYTES) / heap.MIB) == 74


def test_text_without_rows_gives_none_and_no_total() -> None:
    assert heap.parse_top("File: pp\nType: inuse_space\n") == ([], 0)
