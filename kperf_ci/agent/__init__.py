"""The optimization agent (`kperf agent`): profile-guided proposals, verified without loopholes.

- :mod:`targets` what may be optimized: kernel module, launcher, inputs, search space;
- :mod:`configsearch` / :mod:`llm` proposers (offline config search; OpenAI-compatible endpoint);
- :mod:`prompts` what a proposer is told (static metrics, findings, the regression, history);
- :mod:`verify` runs :mod:`harness` in a separate process; :mod:`guards` and :mod:`checks` are
  the checks, one per known reward hack; :mod:`cheats` is the catalogue of those hacks;
- :mod:`loop` the rounds and budgets; :mod:`population` the variants in SQLite;
- :mod:`output` the PR body, the branch and the pull request (never a merge);
- :mod:`session` one `kperf agent run`: the targets a kperf ab document names, each target's
  proposer and loop settings, and what its best variant becomes (a dry run or a pull request).
"""
