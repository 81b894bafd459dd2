"""`kperf` subcommands, one module each: argument parsing, a call into the library, printing.

What several commands share lives outside this package: exit codes and user errors in
:mod:`kperf_ci.errors`, reading settings and stored runs in :mod:`kperf_ci.inputs`, pytest's
arguments in :mod:`kperf_ci.pytest_args`; what one command needs of its own is in the library
too (e.g. :mod:`kperf_ci.gating`, :mod:`kperf_ci.merging`, :mod:`kperf_ci.agent.session`). No
command module imports another, and no function here is over 40 lines (tests/architecture checks
both); :mod:`kperf_ci.cli` registers them."""
