"""Test-like script: run under TRITON_INTERPRET=1, record launches, write them as JSON lines.

Usage: python record_script.py OUT.jsonl
"""

import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernels  # noqa: E402

from kperf_ci.capture.static.record import LaunchRecorder  # noqa: E402


def test_add(n):
    x = torch.randn(n)
    y = torch.randn(n)
    out = torch.empty(n)
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
    kernels.add_kernel[grid](x, y, out, n, BLOCK=256)
    torch.testing.assert_close(out, x + y)


def test_add_misaligned():
    n = 64
    x = torch.randn(n + 1)[1:]  # data_ptr % 16 != 0
    y = torch.randn(n)
    out = torch.empty(n)
    kernels.add_kernel[(1,)](x, y, out, n, BLOCK=64)
    torch.testing.assert_close(out, x + y)


def test_matmul():
    M = N = 64
    K = 64
    a = torch.randn(M, K, dtype=torch.float16)
    b = torch.randn(K, N, dtype=torch.float16)
    c = torch.empty(M, N, dtype=torch.float16)
    kernels.matmul_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](
        a,
        b,
        c,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
        BM=64,
        BN=64,
        BK=32,
        num_warps=4,
        num_stages=3,
    )
    torch.testing.assert_close(c.float(), (a.float() @ b.float()), atol=1e-1, rtol=1e-2)


def test_autotune():
    n = 500
    x = torch.randn(n)
    out = torch.empty(n)
    kernels.scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 2.0)
    torch.testing.assert_close(out, x * 2.0)


def test_heuristics():
    x = torch.randn(4, 100)
    out = torch.empty_like(x)
    kernels.softmax_row_kernel[(4,)](x, out, 100, x.stride(0))
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_broken():
    x = torch.randn(64)
    out = torch.empty(64)
    kernels.broken_kernel[(1,)](x, out, 64, BLOCK=64)
    torch.testing.assert_close(out, x * 2)


def test_tma():
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.randn(64, 64, dtype=torch.float16)
    out = torch.empty_like(x)
    in_desc = TensorDescriptor.from_tensor(x, [32, 32])
    out_desc = TensorDescriptor.from_tensor(out, [32, 32])
    kernels.tma_copy_kernel[(2, 2)](in_desc, out_desc, BLOCK_M=32, BLOCK_N=32)
    torch.testing.assert_close(out, x * 2)


def test_closure():
    @triton.jit
    def local_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

    x = torch.zeros(16)
    local_kernel[(1,)](x, 16, BLOCK=16)
    assert float(x.sum()) == 16.0


if __name__ == "__main__":
    rec = LaunchRecorder()
    tests = [
        ("test_add[1024]", lambda: test_add(1024)),
        ("test_add[1000]", lambda: test_add(1000)),
        ("test_add[2048]", lambda: test_add(2048)),
        ("test_add_misaligned", test_add_misaligned),
        ("test_matmul", test_matmul),
        ("test_autotune", test_autotune),
        ("test_heuristics", test_heuristics),
        ("test_broken", test_broken),
        ("test_tma", test_tma),
        ("test_closure", test_closure),
    ]
    only = set(sys.argv[2:])
    for name, fn in tests:
        if only and name not in only:
            continue
        with rec.recording(test=f"record_script.py::{name}", tags=("fixture",)):
            fn()
    assert not rec.errors, rec.errors
    rec.dump(sys.argv[1])
    print(f"recorded {len(rec.launches)} launches")
