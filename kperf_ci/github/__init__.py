"""GitHub integration on github3.py: sticky PR comment, commit status, label, pull requests,
history databases on a branch. ``client`` holds the token and the retry/error policy; each other
module does one thing with it. The ``kperf github`` commands are in ``kperf_ci.commands.github``."""
