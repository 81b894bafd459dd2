"""Results measured elsewhere, as kperf's dataclasses: pytest-benchmark's statistics (its
``--benchmark-json`` file and its live ``benchmark`` fixture, one converter for both) and
Liger-Kernel's benchmark CSV. `kperf import` and the plugin call these; neither converts by itself.

Bad input is a :class:`BadInput` naming the problem and the fix in one line (the command turns it
into exit 2).
"""


class BadInput(ValueError):
    """Input kperf cannot import: one line naming the problem and the fix."""
