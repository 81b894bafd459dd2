"""config.py: precedence CLI > env > pyproject > default, validation, arch normalisation."""

from __future__ import annotations

import pytest

from kperf_ci import config, hardware
from kperf_ci.config import ConfigError, load_settings
from kperf_ci.fingerprint import comparable, git_info, incomparable_reason, machine_fingerprint
from kperf_ci.model import Fingerprint


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for key in list(__import__("os").environ):
        if key.startswith("KPERF_"):
            monkeypatch.delenv(key)


def write(tmp_path, body: str):
    (tmp_path / ".git").mkdir(exist_ok=True)  # search stops here
    (tmp_path / "pyproject.toml").write_text(body)
    return tmp_path


def test_defaults_without_pyproject(tmp_path):
    (tmp_path / ".git").mkdir()
    s = load_settings(tmp_path, {})
    assert s.enabled is False and s.mode == "auto" and s.save is True
    assert s.db == str(tmp_path.resolve() / "reports/run.db") and s.baseline is None
    assert s.arch == ["sm_90"] and s.time_floor_ms == 0.001 and s.jobs >= 1
    assert set(s.sources.values()) == {"default"} and s.pyproject is None


def test_precedence_chain(tmp_path, monkeypatch):
    write(tmp_path, '[tool.kperf]\nmode = "static"\ndb = "x/run.db"\narch = ["80", "sm_90a"]\njobs = 3\n')
    s = load_settings(tmp_path, {})
    # "sm_90a" is kept as "sm_90", the one stored spelling (kperf_ci.hardware says why)
    assert s.mode == "static" and s.arch == ["sm_80", "sm_90"] and s.jobs == 3
    assert s.db == str(tmp_path.resolve() / "x/run.db")  # relative to the pyproject
    assert s.sources["mode"].startswith("[tool.kperf] in ")

    monkeypatch.setenv("KPERF_MODE", "gpu")
    monkeypatch.setenv("KPERF_ARCH", "sm_86, 89")
    monkeypatch.setenv("KPERF_SAVE", "false")
    s = load_settings(tmp_path, {})
    assert (s.mode, s.arch, s.save) == ("gpu", ["sm_86", "sm_89"], False)
    assert s.sources["mode"] == "env KPERF_MODE" and s.jobs == 3

    s = load_settings(tmp_path, {"mode": "auto", "arch": ["sm_75"], "jobs": None})
    assert (s.mode, s.arch, s.jobs) == ("auto", ["sm_75"], 3)  # None = not given
    assert s.sources["mode"] == "--kperf-mode"


def test_pyproject_found_upward_and_stops_at_git(tmp_path):
    write(tmp_path, "[tool.kperf]\nenabled = true\n")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    (tmp_path / "a" / "pyproject.toml").write_text("[project]\nname='x'\n")  # no [tool.kperf]: skipped
    assert load_settings(sub, {}).enabled is True
    (sub / ".git").mkdir()
    assert load_settings(sub, {}).enabled is False


def test_thresholds_and_gate_tables(tmp_path):
    write(
        tmp_path,
        "[tool.kperf]\ntime_floor_ms = 0.01\n[tool.kperf.thresholds]\nregisters = 0.2\ntime = 0.03\n"
        "[tool.kperf.gate]\nfail_on = 'regression'\n",
    )
    s = load_settings(tmp_path, {})
    assert s.thresholds == {"registers": 0.2, "time": 0.03} and s.time_floor_ms == 0.01
    assert s.gate == {"fail_on": "regression"}


@pytest.mark.parametrize(
    "body, needle",
    [
        ('[tool.kperf]\nmdoe = "static"\n', "unknown key(s) in [tool.kperf]: mdoe"),
        ('[tool.kperf]\nmode = "fast"\n', "'mode' from [tool.kperf]"),
        ("[tool.kperf]\njobs = 0\n", "'jobs'"),
        ("[tool.kperf]\njobs = 1.5\n", "use an integer"),
        ("[tool.kperf]\nsave = 'maybe'\n", "use true or false"),
        ('[tool.kperf]\narch = ["sm_70"]\n', "supports sm_75"),
        ('[tool.kperf]\narch = ["volta"]\n', "use sm_XX"),
        ("[tool.kperf.thresholds]\nregisters = 'a lot'\n", "'thresholds.registers'"),
        ("[tool.kperf.thresholds]\nregisters = -1\n", ">= 0"),
        ("[tool.kperf\n", "invalid TOML"),
    ],
)
def test_bad_values_one_line(tmp_path, body, needle):
    write(tmp_path, body)
    with pytest.raises(ConfigError) as ei:
        load_settings(tmp_path, {})
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_bad_env_and_cli_name_their_source(tmp_path, monkeypatch):
    write(tmp_path, "[tool.kperf]\n")
    monkeypatch.setenv("KPERF_TIME_FLOOR_MS", "soon")
    with pytest.raises(ConfigError, match="env KPERF_TIME_FLOOR_MS"):
        load_settings(tmp_path, {})
    monkeypatch.delenv("KPERF_TIME_FLOOR_MS")
    with pytest.raises(ConfigError, match="--kperf-mode"):
        load_settings(tmp_path, {"mode": "turbo"})
    with pytest.raises(ConfigError, match="unknown kperf setting"):
        load_settings(tmp_path, {"colour": "red"})


def test_arch_normalisation_and_supported_list():
    archs = hardware.supported_archs()
    assert "sm_80" in archs and "sm_90a" in archs and "sm_70" not in archs
    assert "sm_100" in archs  # via ptxas-blackwell

    def arch(value):
        return load_settings(".", {"arch": value}).arch

    assert arch(["90"]) == ["sm_90"] and arch(["SM90A"]) == ["sm_90"] and arch([80]) == ["sm_80"]
    # two spellings of one target compile once
    assert arch("sm_90, sm_90a, sm_80") == ["sm_90", "sm_80"]
    with pytest.raises(ConfigError, match="sm_75"):
        arch(["sm_61"])
    # checked as spelled: ptxas has no sm_86a, so it is refused rather than read as sm_86
    with pytest.raises(ConfigError, match="'sm_86a'.*installed Triton/ptxas supports"):
        arch(["sm_86a"])
    with pytest.raises(ConfigError, match="use sm_XX"):
        arch(["hopper"])


def test_resolve_setting_follows_the_precedence_chain(tmp_path, monkeypatch):
    """The plugin's early hook resolves the mode alone, by the chain load_settings uses: the
    environment counts (it was skipped there once) and a bad value is an error naming its source."""
    write(tmp_path, '[tool.kperf]\nmode = "static"\nbaseline = "b/main.db"\n')
    assert config.resolve_setting(tmp_path, "mode") == "static"
    monkeypatch.setenv("KPERF_MODE", "gpu")
    assert config.resolve_setting(tmp_path, "mode") == "gpu"
    assert config.resolve_setting(tmp_path, "mode", "auto") == "auto"
    assert config.resolve_setting(tmp_path, "baseline") == str(tmp_path.resolve() / "b/main.db")
    monkeypatch.setenv("KPERF_MODE", "turbo")
    with pytest.raises(ConfigError, match="env KPERF_MODE"):
        config.resolve_setting(tmp_path, "mode")
    with pytest.raises(ConfigError, match="unknown kperf setting"):
        config.resolve_setting(tmp_path, "colour")
    assert config.effective_mode("static") == "static" and config.effective_mode("gpu") == "gpu"


def test_may_be_enabled_is_a_cheap_hint(tmp_path, monkeypatch):
    write(tmp_path, '[tool.kperf]\nmode = "static"\n')
    assert not config.may_be_enabled(tmp_path)
    write(tmp_path, "[tool.kperf]\nenabled = true\n")
    assert config.may_be_enabled(tmp_path)
    write(tmp_path, "[tool.kperf\nenabled = true\n")  # does not parse: reported once kperf is on
    assert not config.may_be_enabled(tmp_path)
    monkeypatch.setenv("KPERF_ENABLED", "0")  # set at all: the value is the validator's to read
    assert config.may_be_enabled(tmp_path / "nowhere")


def test_base_tree_is_a_setting(tmp_path, monkeypatch):
    write(tmp_path, '[tool.kperf]\nbase_tree = "../base"\n')
    s = load_settings(tmp_path, {})
    assert s.base_tree == str(tmp_path / "../base") and s.sources["base_tree"].startswith("[tool.kperf]")
    monkeypatch.setenv("KPERF_BASE_TREE", "/tmp/wt")
    assert load_settings(tmp_path, {}).base_tree == "/tmp/wt"
    s = load_settings(tmp_path, {"base_tree": "/w/base"})
    assert s.base_tree == "/w/base" and s.sources["base_tree"] == "--kperf-base-tree"


@pytest.mark.parametrize(
    "value, on",
    [(None, False), ("", False), ("0", False), ("false", False), ("No", False), (" off ", False),
     ("1", True), ("true", True), ("YES", True), ("anything else", True)],
)  # fmt: skip
def test_env_switch(monkeypatch, value, on):
    if value is not None:
        monkeypatch.setenv(config.ENV_TRACEBACK, value)
    assert config.env_switch(config.ENV_TRACEBACK) is on


def test_every_kperf_variable_is_named_in_config():
    """No module but config.py names a KPERF_* variable (settings and process switches alike):
    a string that is exactly such a name is a variable being read or set."""
    import ast
    import re
    from pathlib import Path

    root = Path(config.__file__).parent
    name = re.compile(r"KPERF_[A-Z0-9_]+")
    readers = set()
    for path in root.rglob("*.py"):
        if path.name == "config.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and name.fullmatch(node.value):
                readers.add(path.relative_to(root).as_posix())
    assert not readers, sorted(readers)


def test_project_pyproject_loads():
    """The repository's own [tool.kperf] must stay valid."""
    from pathlib import Path

    s = load_settings(Path(__file__).parent.parent, {})
    assert s.arch == ["sm_80", "sm_90"]


# --------------------------------------------------------------------------- fingerprint


def test_fingerprint_and_git(tmp_path, monkeypatch):
    fp = machine_fingerprint("static")
    assert fp.triton and fp.python and len(fp.host_hash) == 12 and fp.gpu is None
    monkeypatch.setenv("GITHUB_SHA", "abc123")
    monkeypatch.setenv("GITHUB_HEAD_REF", "feature")
    assert git_info(tmp_path) == ("abc123", "feature")
    monkeypatch.delenv("GITHUB_HEAD_REF")
    monkeypatch.setenv("GITHUB_REF_NAME", "main")
    assert git_info(tmp_path) == ("abc123", "main")


def test_gpu_fingerprint_names_the_card_and_old_runs_still_read(monkeypatch):
    from kperf_ci import fingerprint

    probe = {"gpu": "NVIDIA H100 80GB HBM3", "sm_count": 132, "capability": "9.0", "uuid": "GPU-1234"}
    monkeypatch.setattr(fingerprint, "gpu_info", lambda: {**probe, "pci_bus_id": "00000000:1b:00.0"})
    fp = machine_fingerprint("gpu")
    assert fp.extra["gpu_uuid"] == "GPU-1234" and fp.extra["gpu_pci_bus_id"] == "00000000:1b:00.0"
    assert set(fingerprint.DEVICE_EXTRA) <= set(fp.extra)
    monkeypatch.setattr(fingerprint, "gpu_info", lambda: dict(probe, uuid=None))  # an older torch
    assert "gpu_uuid" not in machine_fingerprint("gpu").extra
    # a fingerprint stored before these keys existed reads as it did
    old = Fingerprint.from_dict({"gpu": probe["gpu"], "extra": {"mode": "gpu", "capability": "9.0"}})
    assert old.extra == {"mode": "gpu", "capability": "9.0"} and comparable(old, fp, "time")


def test_comparable():
    a = Fingerprint(cpu="X", gpu="H100", triton="3.6.0")
    assert comparable(a, Fingerprint(cpu="Y", gpu="H100", triton="3.5.0"), "time")
    assert not comparable(a, Fingerprint(cpu="X", gpu="H100", triton="3.5.0"), "static")
    assert "GPU H100 vs A100" == incomparable_reason(a, Fingerprint(gpu="A100", triton="3.6.0"), "region")
    assert not comparable(a, Fingerprint(cpu="X", triton="3.6.0"), "time")
    # host-only timings (pytest-benchmark): same CPU model
    assert comparable(Fingerprint(cpu="X"), Fingerprint(cpu="X"), "time")
    assert not comparable(Fingerprint(cpu="X"), Fingerprint(cpu="Y"), "time")


@pytest.mark.parametrize(
    "word, value",
    [(w, True) for w in ("1", "true", "YES", " on ")] + [(w, False) for w in ("0", "False", "no", "OFF")],
)
def test_env_booleans_one_parser(tmp_path, monkeypatch, word, value):
    write(tmp_path, "[tool.kperf]\n")
    monkeypatch.setenv("KPERF_SAVE", word)
    assert load_settings(tmp_path, {}).save is value
    assert config.parse_bool(word, key="save", source="env KPERF_SAVE") is value


@pytest.mark.parametrize("word", ["", "maybe", "2", "y"])
def test_other_env_booleans_are_errors(tmp_path, monkeypatch, word):
    write(tmp_path, "[tool.kperf]\n")
    monkeypatch.setenv("KPERF_ENABLED", word)
    with pytest.raises(ConfigError, match="'enabled' from env KPERF_ENABLED.*use one of 1/0, true/false"):
        load_settings(tmp_path, {})
    with pytest.raises(ConfigError):
        config.env_bool("KPERF_ENABLED", "enabled")


@pytest.mark.parametrize("text", ['"false"', '"true"', "1", "0"])
def test_pyproject_booleans_must_be_toml_booleans(tmp_path, text):
    # `enabled = "false"` is a non-empty string: it used to switch kperf ON
    write(tmp_path, f"[tool.kperf]\nenabled = {text}\n")
    with pytest.raises(ConfigError, match=r"'enabled' from \[tool.kperf\].*a TOML boolean, without quotes"):
        load_settings(tmp_path, {})


@pytest.mark.parametrize("text", ["nan", "inf", "-nan"])
def test_non_finite_thresholds_rejected(tmp_path, text):
    # a NaN threshold compares False with every change: that metric's gate would be off
    write(tmp_path, f"[tool.kperf.thresholds]\nregisters = {text}\n")
    with pytest.raises(ConfigError, match="'thresholds.registers'"):
        load_settings(tmp_path, {})
