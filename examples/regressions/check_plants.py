"""Compile the example matmul for sm_90 with and without a planted regression; print resource usage.

Usage (no GPU needed; do NOT set TRITON_INTERPRET):

    python examples/regressions/check_plants.py                  # default, spills, smem; sm_90
    python examples/regressions/check_plants.py spills           # one plant ("" = default build)
    python examples/regressions/check_plants.py --arch 80 smem   # another target

Each plant is compiled in a fresh process with KPERF_EXAMPLE_PLANT set, the way kperf's static
capture re-imports kernel modules in worker processes. For every autotune config it prints
cuobjdump's `-res-usage` line (REG, STACK), ptxas' spill statistics and Triton's dynamic shared
memory (`metadata.shared`; cuobjdump's SHARED counts static shared memory only).
"""

import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}  # bytes per block

# What a launch of `matmul(a, b)` on contiguous fp16 matrices with M, N, K multiples of 16
# specializes: strides of 1 become constexprs, the other integers are known divisible by 16.
SIGNATURE = {
    "a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
    "M": "i32", "N": "i32", "K": "i32",
    "stride_am": "i32", "stride_ak": "constexpr",
    "stride_bk": "i32", "stride_bn": "constexpr",
    "stride_cm": "i32", "stride_cn": "constexpr",
}  # fmt: skip
DIVISIBLE_BY_16 = ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_bk", "stride_cm")


def compile_all(plant: str, arch: int) -> None:
    """Runs in the child process: KPERF_EXAMPLE_PLANT is already set."""
    import triton
    from triton.backends.compiler import GPUTarget

    sys.path.insert(0, os.path.dirname(HERE))
    from kernels import matmul as mm

    assert mm.PLANT == plant
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    names = list(SIGNATURE)
    suffix = "a" if arch == 90 else ""  # sm_90a: the wgmma instructions Triton emits need it
    print(f"== KPERF_EXAMPLE_PLANT={plant or '(unset)'}  target sm_{arch}")
    for cfg in mm.get_autotune_config():
        kw = cfg.kwargs
        src = triton.compiler.ASTSource(
            fn=mm.matmul_kernel.fn,
            signature={**SIGNATURE, **{k: "constexpr" for k in kw}},
            constexprs={"stride_ak": 1, "stride_bn": 1, "stride_cn": 1, **kw},
            attrs={(names.index(n),): [["tt.divisibility", 16]] for n in DIVISIBLE_BY_16},
        )
        kernel = triton.compile(
            src,
            target=GPUTarget("cuda", arch, 32),
            options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
        )
        with tempfile.TemporaryDirectory() as tmp:
            cubin = os.path.join(tmp, "k.cubin")
            ptx = os.path.join(tmp, "k.ptx")
            with open(cubin, "wb") as f:
                f.write(kernel.asm["cubin"])
            with open(ptx, "w") as f:
                f.write(kernel.asm["ptx"])
            res = subprocess.run(
                [os.path.join(bindir, "cuobjdump"), "-res-usage", cubin], capture_output=True, text=True
            ).stdout
            ptxas = subprocess.run(
                [os.path.join(bindir, "ptxas"), f"-arch=sm_{arch}{suffix}", "-v", ptx, "-o", cubin + ".2"],
                capture_output=True,
                text=True,
            ).stderr
        usage = re.search(r"REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+", res).group(0)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas)
        shared = kernel.metadata.shared
        tile = f"{kw['BLOCK_SIZE_M']}x{kw['BLOCK_SIZE_N']}x{kw['BLOCK_SIZE_K']}"
        tile += f" w{cfg.num_warps} s{cfg.num_stages}"
        over = f"  > sm_{arch} limit" if shared > SHARED_LIMIT[arch] else ""
        print(
            f"{tile:<20} {usage}  spill stores {spill.group(1):>4} B, loads {spill.group(2):>4} B"
            f"  dynamic shared {shared:>6} B{over}"
        )


def main(argv: list[str]) -> int:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        print("unset TRITON_INTERPRET: the interpreter cannot compile for a GPU target", file=sys.stderr)
        return 2
    args = argv[1:]
    if args[:1] == ["--child"]:
        compile_all(os.environ.get("KPERF_EXAMPLE_PLANT", ""), int(args[1]))
        return 0
    arch = 90
    if args[:1] == ["--arch"]:
        arch, args = int(args[1].removeprefix("sm_")), args[2:]
    if arch not in SHARED_LIMIT:
        print(f"--arch: one of {sorted(SHARED_LIMIT)}", file=sys.stderr)
        return 2
    rc = 0
    for plant in args or ["", "spills", "smem"]:
        env = dict(os.environ, KPERF_EXAMPLE_PLANT=plant)
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(arch)]
        rc |= subprocess.run(cmd, env=env).returncode
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
