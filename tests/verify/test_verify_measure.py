"""The measurement core measures a known allocation exactly (Linux /proc)."""

from __future__ import annotations

import mmap
import time

from memshrink.verify.measure import Meter, read_status, reset_peak

MiB = 1024 * 1024


def _touched(nbytes: int) -> mmap.mmap:
    """Anonymous memory written page by page, returned to the kernel on close.

    Not ``np.ones``: whether malloc hands a freed block back depends on glibc's dynamic mmap
    threshold, which earlier tests in the same process move (flaky late in the suite)."""
    m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    for off in range(0, nbytes, mmap.PAGESIZE):
        m[off] = 1
    return m


def test_read_status_has_rss_split() -> None:
    s = read_status()
    assert s["VmRSS"] > 0 and s["RssAnon"] > 0
    assert s["VmHWM"] >= s["VmRSS"]


def test_stage_peak_sees_a_freed_allocation() -> None:
    assert reset_peak(), "clear_refs must be writable by the owner (Linux >= 4.0)"
    meter = Meter()
    with meter.stage("alloc"):
        a = _touched(64 * MiB)  # 64 MiB resident
        time.sleep(0.05)  # long enough for the 1 ms RssAnon sampler to see it
        a.close()
    st = meter.stages[0]
    assert st.name == "alloc"
    assert st.peak_method.startswith("VmHWM")
    # The exact peak holds the whole 64 MiB even though it was freed before the stage ended.
    assert st.peak - st.before >= 63 * MiB
    assert st.after - st.before < 8 * MiB
    assert st.anon_peak - st.anon_before >= 63 * MiB  # sampled, but held for 50 ms
    assert st.seconds > 0


def test_stages_are_independent() -> None:
    meter = Meter()
    with meter.stage("big"):
        a = _touched(48 * MiB)
        a.close()
    with meter.stage("small"):
        b = _touched(1 * MiB)
        b.close()
    big, small = meter.stages
    assert big.peak - big.before >= 47 * MiB
    assert small.peak - small.before < 8 * MiB  # the reset forgot the earlier peak
