"""Hardware limits by GPU architecture that more than one stage needs: one table, not a copy per
stage (capture lowers Proton's regions within it, compare gates shared memory against it)."""

from __future__ import annotations

#: Max shared memory per block (dynamic, opt-in), bytes, by compute capability. A kernel that
#: asks for more cannot launch.
MAX_SHARED_PER_BLOCK: dict[int, int] = {
    75: 65536,
    80: 166912,
    86: 101376,
    87: 166912,
    89: 101376,
    90: 232448,
    100: 232448,
    101: 232448,
    103: 232448,
    120: 101376,
}
