"""Static capture, no GPU needed: launches recorded while the tests run, compiled ahead of time
per arch, their static metrics read from the cubin and PTX. The lowest job in capture: it imports
no other. Map: :mod:`kperf_ci.capture`'s docstring."""
