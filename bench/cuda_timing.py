"""CUDA-event timing shared by the Python peer benchmarks in bench/."""
import statistics

import torch


def median_ms(fn, warmup, iters):
    """Median milliseconds of `iters` timed calls of fn() after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)
