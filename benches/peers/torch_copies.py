"""PyTorch's copy rates with accio bench device's method (copies per pass between two CUDA
events on a side stream, median of the passes after a warm-up pass), as JSON lines in the
CUDA C reference's format (benches/peers/nvbw_ref.cu), for ci/device.sh's table."""

import json
import statistics
import sys

import torch


def copies_per_pass(size):
    return max(4, min(1000, (1 << 30) // size))


def rate(dst, src, size, passes):
    s = torch.cuda.Stream()
    n = copies_per_pass(size)
    with torch.cuda.stream(s):
        out = []
        for p in range(passes + 1):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(s)
            for _ in range(n):
                dst.copy_(src, non_blocking=True)
            b.record(s)
            b.synchronize()
            if p:
                out.append(size * n / (a.elapsed_time(b) / 1e3) / 1e9)
    return statistics.median(out)


def main():
    passes = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    for size in (1 << 20, 64 << 20, 512 << 20):
        dev_a = torch.empty(size, dtype=torch.uint8, device="cuda")
        dev_b = torch.empty(size, dtype=torch.uint8, device="cuda")
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        for metric, memory, dst, src in (
            ("h2d", "pinned", dev_a, pinned),
            ("d2h", "pinned", pinned, dev_a),
            ("d2d", "device", dev_b, dev_a),
        ):
            v = rate(dst, src, size, passes)
            print(json.dumps({"metric": metric, "memory": memory, "size": size,
                              "value": round(v, 4), "unit": "GB/s", "tool": "torch"}), flush=True)
        del dev_a, dev_b, pinned
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
