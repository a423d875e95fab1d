"""CuPy's copy rates with accio bench device's method (copies per pass between two CUDA
events on a side stream, median of the passes after a warm-up pass), as JSON lines in the
CUDA C reference's format (benches/peers/nvbw_ref.cu), for ci/device.sh's table: the
copies CuPy users issue (cudaMemcpyAsync through cupy.cuda.runtime, the kind named),
beside PyTorch's (torch_copies.py)."""

import json
import statistics
import sys

import cupy

H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyHostToDevice, DeviceToHost, DeviceToDevice


def copies_per_pass(size):
    return max(4, min(1000, (1 << 30) // size))


def rate(dst, src, kind, size, passes):
    s = cupy.cuda.Stream(non_blocking=True)
    n = copies_per_pass(size)
    out = []
    for p in range(passes + 1):
        a, b = cupy.cuda.Event(), cupy.cuda.Event()
        a.record(s)
        for _ in range(n):
            cupy.cuda.runtime.memcpyAsync(dst, src, size, kind, s.ptr)
        b.record(s)
        b.synchronize()
        if p:
            out.append(size * n / (cupy.cuda.get_elapsed_time(a, b) / 1e3) / 1e9)
    return statistics.median(out)


def main():
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for size in (1 << 20, 64 << 20, 512 << 20):
        dev_a = cupy.empty(size, dtype=cupy.uint8)
        dev_b = cupy.empty(size, dtype=cupy.uint8)
        pinned = cupy.cuda.alloc_pinned_memory(size)
        for metric, memory, dst, src, kind in (
            ("h2d", "pinned", dev_a.data.ptr, pinned.ptr, H2D),
            ("d2h", "pinned", pinned.ptr, dev_a.data.ptr, D2H),
            ("d2d", "device", dev_b.data.ptr, dev_a.data.ptr, D2D),
        ):
            v = rate(dst, src, kind, size, passes)
            print(json.dumps({"metric": metric, "memory": memory, "size": size,
                              "value": round(v, 4), "unit": "GB/s", "tool": "cupy"}), flush=True)
        del dev_a, dev_b, pinned
        cupy.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
