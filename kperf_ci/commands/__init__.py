"""`kperf` subcommands, one module each: argument parsing, a call into the library, printing.

What several commands share lives outside this package: exit codes and user errors in
:mod:`kperf_ci.errors`, reading settings and stored runs in :mod:`kperf_ci.inputs`, pytest's
arguments in :mod:`kperf_ci.pytest_args`. No command module imports another; :mod:`kperf_ci.cli`
registers them."""
