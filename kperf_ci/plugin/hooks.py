"""Hooks of an enabled kperf session, registered by `pytest_configure` only when kperf is on."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from kperf_ci.plugin import MARKER_KEY
from kperf_ci.plugin.bench_script import make_script_file
from kperf_ci.plugin.finish import (
    FINISHED,
    STARTED,
    finish_session,
    merge_worker_output,
    worker_output,
    write_run_status,
)
from kperf_ci.plugin.gpu_bench import plan_of, plan_path
from kperf_ci.plugin.marker import MarkerError, marker_for, test_id
from kperf_ci.plugin.session import LAUNCHES_KEY, KperfSession
from kperf_ci.report.terminal import write_summary


class ActiveHooks:
    def __init__(self, session: KperfSession) -> None:
        self.session = session

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["kperf_run_id"] = self.session.run_id
        node.workerinput["kperf_mode"] = self.session.mode

    def pytest_report_header(self, config: pytest.Config) -> str:
        session = self.session
        s = session.settings
        where = f"db={s.db}" if s.save else "not saved"
        arch = f" arch={','.join(s.arch)}" if session.mode == "static" else ""
        base = f" baseline={s.baseline}" if s.baseline else ""
        return f"kperf: mode={session.mode}{arch} {where}{base} run={session.run_id}"

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makemodule(self, module_path: Any, parent: pytest.Collector) -> Any:
        """``--kperf-bench SCRIPT``: the script is one item that runs it (plugin/bench_script.py)."""
        return make_script_file(module_path, parent)

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """kperf ab's timing pass runs the user's own selection (options such as --kperf-all
        and -p stay as given) but only the tests whose launches its plan says to time."""
        plan = plan_path(self.session)
        if not plan:
            return
        wanted = set(plan_of(plan).tests())

        def planned(it: pytest.Item) -> bool:
            # a benchmark script's item holds many planned benchmarks under its prefix
            prefix = getattr(it, "kperf_prefix", None)
            return test_id(it) in wanted or bool(prefix and any(w.startswith(prefix) for w in wanted))

        kept = [it for it in items if planned(it)]
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[it for it in items if not planned(it)])
            items[:] = kept

    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if getattr(item, "kperf_prefix", None):  # a benchmark script measures its own calls
            return
        try:
            marker = marker_for(item, getattr(self.session.settings, "mark", None))  # --kperf-all
        except MarkerError as e:
            # from None: a fail raised while handling e would print the message twice, e's
            # and then "During handling of the above exception" with its own
            raise pytest.fail.Exception(str(e), pytrace=False) from None
        if marker is not None:
            item.stash[MARKER_KEY] = marker

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        marker = item.stash.get(MARKER_KEY, None)  # set by now by the marker, fixture or mark setting
        if marker is not None:
            self.session.saw_marked()
        if marker is not None and self.session.mode == "gpu":
            with self.session.replaying(item):
                result = yield
            self.session.replay(item, marker)  # after the test, on copies: its results stand
            return result
        if marker is None or self.session.mode != "static":
            return (yield)
        with self.session.recording(item, marker):
            try:
                return (yield)
            finally:
                item.stash[LAUNCHES_KEY] = self.session.take_launches()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo
    ) -> Generator[None, Any, Any]:
        report = yield
        if call.when == "call" and report.passed:
            marker = item.stash.get(MARKER_KEY, None)
            if marker is not None:
                self.session.test_passed(item, marker)
        return report

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        # after the test's teardown (its monkeypatch undone): its launches start compiling
        self.session.compile_ahead()

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        write_run_status(self.session, STARTED)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if session.config.option.collectonly:
            # nothing ran: no run to compile or store (an empty run.db left an untracked
            # reports/ in the user's checkout; issue 34's walk, item 10)
            write_run_status(self.session, FINISHED, session.exitstatus)
            return
        status = finish_session(self.session)
        if self.session.is_worker:
            # a worker's exit status does not reach the controller: its errors must
            session.config.workeroutput["kperf"] = worker_output(self.session)  # type: ignore[attr-defined]
        if status and session.exitstatus == 0:
            session.exitstatus = status
        write_run_status(self.session, FINISHED, session.exitstatus)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        merge_worker_output(self.session, getattr(node, "workeroutput", {}).get("kperf"))

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.session.is_worker:
            return
        if config.option.collectonly:  # not "no test ran marked": none ran at all
            terminalreporter.write_line("kperf: --collect-only: no test ran, nothing captured or stored")
            return
        write_summary(self.session, terminalreporter)
