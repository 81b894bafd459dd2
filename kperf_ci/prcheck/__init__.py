"""The PR check behind `kperf ab --base REV [pytest args]`: same-job A/B of the working tree
against a base revision.

1. the base revision is checked out into a temporary worktree;
2. static pass: ``pytest --kperf --kperf-mode static`` runs in both trees (separate databases).
   On a machine with CUDA the tests run for real and every launch is captured through Triton's
   launch path; without one they run in Triton's interpreter.  Each run stores a launch manifest
   (:mod:`kperf_ci.capture.static.manifest`): per test, every launch with its compiled code per arch,
   its options, its specialization and its work (grid, integer arguments, tensor shapes).  A test
   whose launches are all identical on both sides needs no GPU time; every other test is listed
   with what changed ("num_stages 3 -> 1; sm_90 SASS changed: registers 40 -> 168");
3. on a machine with a CUDA GPU, pytest runs once more in the head tree with ``--kperf-mode gpu
   --kperf-base-tree <worktree>``, only for the tests whose launches changed; the plugin times
   each ``kperf.bench`` callable interleaved against its base version
   (:func:`kperf_ci.capture.timing.interleaved.adaptive_ab`) and instruments both once for their regions;
4. everything goes into one database (``--db``, default ``reports/ab.db``): both static runs, the
   timed run and the A/B document (blob ``ab_report``) from which the terminal table, the HTML
   page, the PR-comment markdown and the job summary are rendered (``--report-dir``);
5. exit 1 when a kernel is slower with confidence (or, without a GPU, when its static metrics
   regress beyond the thresholds `kperf compare` uses); 2 for bad input or a capture that saw
   nothing; 0 otherwise.

Modules: :mod:`.passes` (the pytest passes in each tree), :mod:`.document` (the A/B document
and its rows), :mod:`.pipeline` (the whole job), :mod:`.outputs` (its output files checked before
the passes, the job summary and JSON copy written after them); ``kperf_ci.commands.ab`` is the
command.
"""
