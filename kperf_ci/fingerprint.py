"""What a number depends on besides the code: machine, GPU, software versions, git revision.

The GPU is probed by :mod:`kperf_ci.device` (torch imported lazily there); nothing here needs a GPU.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import platform
import secrets
import socket
from importlib import metadata
from pathlib import Path
from typing import Literal

from kperf_ci.git import git_or_none

from . import config
from .device import gpu_info
from .model import Fingerprint, MetricKind

__all__ = [
    "machine_fingerprint",
    "git_info",
    "comparable",
    "incomparable_reason",
    "cpu_name",
    "host_hash",
    "HOST_SALT_ENV",
    "DEVICE_EXTRA",
]

#: A secret that replaces the per-install key of :func:`host_hash` (e.g. a CI secret shared by
#: the runners whose runs should recognise each other's host).
HOST_SALT_ENV = config.ENV_HOST_SALT


def _salt_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "kperf" / "host_salt"


@functools.lru_cache(maxsize=8)
def _install_salt(path: str) -> bytes:
    """The random key of this install, created once (mode 0600) at ``path``; a key for this
    process alone when the file can be neither read nor created (a read-only home)."""
    p = Path(path)
    try:
        key = p.read_bytes().strip()
        if len(key) >= 32:
            return key
    except OSError:
        pass
    key = secrets.token_hex(32).encode()
    tmp = p.with_name(f".host_salt.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        try:
            os.link(tmp, p)  # atomic, fails if another process got there first: then use theirs
        except FileExistsError:
            key = p.read_bytes().strip() or key
    except OSError:
        return key
    finally:
        try:
            tmp.unlink()
        except OSError:
            pass
    return key


def host_salt() -> bytes:
    """The key of :func:`host_hash`: ``$KPERF_HOST_SALT`` when set, else this install's random key
    (``$XDG_CONFIG_HOME/kperf/host_salt``, default ``~/.config/kperf/host_salt``)."""
    env = config.env_text(HOST_SALT_ENV)
    return env.encode() if env else _install_salt(str(_salt_path()))


def host_hash(hostname: str) -> str:
    """A keyed hash (HMAC-SHA256, 12 hex digits) of a host name. The same host gives the same
    hash on one install (or with one ``KPERF_HOST_SALT``), so runs can still be told apart by
    machine; unlike a plain SHA-256 it cannot be reversed by hashing a list of likely names
    (``sha256("vm")[:12]`` gives "vm" back to anyone who reads a baseline)."""
    return hmac.new(host_salt(), hostname.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:12]


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine_fingerprint(mode: Literal["static", "gpu"] | str) -> Fingerprint:
    """Fingerprint of this machine. In static mode the GPU is not queried (and torch not imported)."""
    gpu = gpu_info() if mode == "gpu" else {}
    extra = {"mode": mode, "platform": platform.platform()}
    if gpu.get("capability"):
        extra["capability"] = gpu["capability"]
    # Which physical card (not its model): in extra, so runs stored before it still read the same;
    # `kperf merge --shards` leaves these out of the machine class (DEVICE_EXTRA).
    for key in ("uuid", "pci_bus_id"):
        if gpu.get(key):
            extra[f"gpu_{key}"] = gpu[key]
    return Fingerprint(
        cpu=cpu_name(),
        gpu=gpu.get("gpu"),
        sm_count=gpu.get("sm_count"),
        driver=gpu.get("driver"),
        cuda=gpu.get("cuda"),
        torch=gpu.get("torch") or _version("torch"),
        triton=_version("triton") or "",
        python=platform.python_version(),
        host_hash=host_hash(socket.gethostname()),
        extra=extra,
    )


#: Fingerprint ``extra`` keys that name one physical GPU rather than the machine class: two cards of
#: one model on one host differ only there.
DEVICE_EXTRA = ("gpu_uuid", "gpu_pci_bus_id")


def git_info(cwd: str | os.PathLike[str] = ".") -> tuple[str | None, str | None]:
    """(commit sha, branch) of the checkout at ``cwd``.

    On GitHub Actions the environment wins: GITHUB_SHA, and GITHUB_HEAD_REF (the PR branch) or
    GITHUB_REF_NAME. A detached HEAD without those gives branch None.
    """
    cwd = str(cwd)
    sha = os.environ.get("GITHUB_SHA") or git_or_none(cwd, "rev-parse", "HEAD")
    branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME")
    if not branch:
        branch = git_or_none(cwd, "rev-parse", "--abbrev-ref", "HEAD")
        if branch == "HEAD":
            branch = None
    return sha, branch


def incomparable_reason(a: Fingerprint, b: Fingerprint, kind: MetricKind | str) -> str | None:
    """Why metrics of ``kind`` measured under ``a`` and ``b`` must not be compared; None if they may.

    static: the same Triton version (the target arch is part of the variant key).
    time/region/analysis: the same GPU model; host-only timings (no GPU on either side, e.g.
    imported pytest-benchmark runs) need the same CPU model instead.
    """
    if kind == "static":
        return None if a.triton == b.triton else f"triton {a.triton or '?'} vs {b.triton or '?'}"
    if not a.gpu and not b.gpu:
        return (
            None if a.cpu == b.cpu else f"host timings on different CPUs ({a.cpu or '?'} vs {b.cpu or '?'})"
        )
    if not a.gpu or not b.gpu:
        return f"GPU {a.gpu or 'none'} vs {b.gpu or 'none'}"
    return None if a.gpu == b.gpu else f"GPU {a.gpu} vs {b.gpu}"


def comparable(a: Fingerprint, b: Fingerprint, kind: MetricKind | str) -> bool:
    """Whether metrics of ``kind`` from machines ``a`` and ``b`` may be compared (see incomparable_reason)."""
    return incomparable_reason(a, b, kind) is None
