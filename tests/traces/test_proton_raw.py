"""Proton 3.6 raw profile buffer: parsing, SM clock fit and whole-kernel spans (CPU only)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from kperf_ci.capture.regions import instrument as ins
from kperf_ci.capture.regions import result as region_result
from kperf_ci.capture.regions.ttgir_pass import RegionConfig
from kperf_ci.traces import clock
from kperf_ci.traces import proton_raw as pt

NAMES = {0: "kernel", 1: "prologue", 2: "loop0"}
GT0 = 1_795_382_920_392_000_000  # beyond float64's exact integers: the fit must subtract a base


def _record(scope: int, end: bool, cycle: int) -> tuple[int, int]:
    return (int(end) << 31) | (scope << 23) | ((cycle >> 32) & 0x7FF), cycle & 0xFFFFFFFF


def synthetic_buffer(
    n_sms: int = 8,
    per_sm: int = 6,
    ghz: float = 1.755,
    num_warps: int = 4,
    seed: int = 0,
    entry_cycles: int = 40,
    copy_out_ns: int = 600,
):
    """Per-CTA heads of a Proton buffer with a known clock: CTAs run back to back on each SM,
    each SM's clock64 has its own arbitrary origin, globaltimer ticks are 32 ns.
    Returns (blocks, truth) where truth holds the true spans in ns."""
    rng = np.random.default_rng(seed)
    width = pt.raw_header_bytes(num_warps, 16)
    rows = []
    first_init, last_post, reg_starts, reg_ends = [], [], [], []
    cta = 0
    for sm in range(n_sms):
        origin = int(rng.integers(10**9, 2**42))  # the SM's clock64 at globaltimer t=0
        t = 1_000_000.0 + rng.uniform(0, 500)  # ns
        for _ in range(per_sm):
            b = np.zeros(width, dtype=np.uint8)
            init = t
            c_first = origin + (init * ghz) + entry_cycles
            pro = int(rng.integers(200, 400))
            loop = int(rng.integers(20_000, 60_000))
            k0 = int(c_first)
            recs = [
                _record(0, False, k0),
                _record(1, False, k0 + 5),
                _record(1, True, k0 + 5 + pro),
                _record(2, False, k0 + 10 + pro),
                _record(2, True, k0 + 10 + pro + loop),
                _record(0, True, k0 + 20 + pro + loop),
            ]
            k_end_ns = (k0 + 20 + pro + loop - origin) / ghz
            pre = k_end_ns + 30
            post = pre + copy_out_ns
            hdr = np.array([pt.PREAMBLE, cta, sm, 8192], dtype="<u4")
            b[:16] = hdr.view(np.uint8)
            tick = lambda v: int(v) // 32 * 32  # noqa: E731
            stamps = [GT0 + tick(v) for v in (init, pre, post)]  # real globaltimer magnitudes
            b[16:40] = np.array(stamps, dtype="<u8").view(np.uint8)
            counts = np.zeros(num_warps, dtype="<u4")
            counts[0] = 2 * len(recs)  # words, as Proton counts them
            b[40 : 40 + 4 * num_warps] = counts.view(np.uint8)
            off = 40 + 4 * num_warps
            b[off : off + 8 * len(recs)] = np.array(recs, dtype="<u4").reshape(-1).view(np.uint8)
            rows.append(b)
            first_init.append(tick(init))
            last_post.append(tick(post))
            reg_starts.append((k0 - origin) / ghz)
            reg_ends.append(k_end_ns)
            t = post + rng.uniform(200, 900)  # next CTA on this SM
            cta += 1
    order = rng.permutation(len(rows))  # the buffer is indexed by CTA id, not by time
    blocks = np.stack(rows)[np.argsort(order)]
    truth = {
        "regions": max(reg_ends) - min(reg_starts),
        "cta": max(last_post) - min(first_init),
    }
    return blocks, truth


def test_parse_raw_buffer_recovers_records():
    blocks, _ = synthetic_buffer()
    kt = pt.parse_raw_buffer(blocks, 4, NAMES)
    assert kt.names == ["kernel", "prologue", "loop0"]
    assert kt.cta_ids.size == 48 and kt.n_events == 48 * 3
    assert (kt.start[kt.region == 0] == 0).all()
    assert (kt.cta_final_ns > kt.cta_init_ns).all() and (kt.raw["cta_post_ns"] > kt.cta_final_ns).all()
    assert not kt.warnings


@pytest.mark.parametrize("ghz", [1.41, 1.755, 1.98])
def test_clock_fit_and_spans_match_truth(ghz):
    blocks, truth = synthetic_buffer(ghz=ghz, seed=int(ghz * 100))
    kt = pt.parse_raw_buffer(blocks, 4, NAMES)
    fit = clock.fit_clock(kt)
    assert fit is not None and fit.n_sms == 8
    assert fit.ghz == pytest.approx(ghz, rel=1e-3)
    assert fit.ghz_median_sm == pytest.approx(ghz, rel=3e-3)
    assert fit.rms_residual_ns < 32
    spans = clock.spans_from_raw(kt, fit)
    assert spans["regions"] == pytest.approx(truth["regions"], abs=64)
    assert spans["cta"] == pytest.approx(truth["cta"], abs=1)
    assert spans["cta"] >= spans["regions_plus_edges"] - 64 >= spans["regions"] - 64


def test_invalid_headers_and_overflow_are_reported():
    blocks, _ = synthetic_buffer(n_sms=2, per_sm=3)
    blocks[0, :4] = 0  # a CTA that never wrote its header
    kt = pt.parse_raw_buffer(blocks, 4, NAMES)
    assert kt.cta_ids.size == 5 and any("no valid Proton header" in w for w in kt.warnings)
    # a count larger than the copied width: warned, not misread
    blocks2, _ = synthetic_buffer(n_sms=1, per_sm=2)
    blocks2[:, 40:44] = np.array([80], dtype="<u4").view(np.uint8)
    kt2 = pt.parse_raw_buffer(blocks2, 4, NAMES)
    assert any("beyond the copied width" in w for w in kt2.warnings)


def test_clock_fit_needs_two_ctas_on_an_sm():
    blocks, _ = synthetic_buffer(n_sms=4, per_sm=1)
    assert clock.fit_clock(pt.parse_raw_buffer(blocks, 4, NAMES)) is None


def test_session_buffers_give_build_result_a_measured_clock():
    """The plugin's path: buffers kept through a session pair with the instrumented launches,
    are parsed, and build_result takes the clock and span from them (not from NVML)."""
    torch = pytest.importorskip("torch")
    blocks, truth = synthetic_buffer(ghz=1.6)
    n, width = blocks.shape
    scratch = 640
    full = np.zeros((n, scratch), dtype=np.uint8)
    full[:, :width] = blocks
    ttgir = "\n".join(f'    proton.record start "{m}"' for m in NAMES.values())
    kernel = SimpleNamespace(
        metadata=SimpleNamespace(profile_scratch_size=scratch, num_warps=4, name="k"), asm={"ttgir": ttgir}
    )
    launches = [SimpleNamespace(name="k", grid=(n, 1, 1), kernel=kernel)]
    kept = [torch.from_numpy(full.reshape(-1))]
    raws = ins._read_kept(kept, launches)
    assert set(raws) == {"k"} and kept == []
    kt = raws["k"]
    rr = region_result.build_result(kt, RegionConfig(), nvml_mhz=1980.0, grid=(n, 1, 1), raw=kt)
    assert rr.clock_source == "trace" and rr.clock_ghz == pytest.approx(1.6, rel=1e-3)
    assert rr.span_ns == pytest.approx(truth["regions"], abs=64)
    assert rr.clock_fit["n_sms"] == 8 and set(rr.spans_ns) == {"regions", "cta", "regions_plus_edges"}
    assert any("differs from NVML" in w for w in rr.warnings)
    # a launch/buffer mismatch gives no raw trace (the caller falls back to NVML)
    assert ins._read_kept([], launches) == {}
