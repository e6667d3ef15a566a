"""A parameter sweep with submit, as_completed and a dependent reduction.

    python examples/parameter_sweep.py
    hpcfutures run -n 4 python examples/parameter_sweep.py

Swapping ``concurrent.futures.ProcessPoolExecutor`` for ``hpcfutures.Executor``
is the only change this script needed to leave the laptop.
"""

import concurrent.futures as cf
import math

import hpcfutures


def damped_oscillator(damping: float, steps: int = 20_000) -> tuple[float, float]:
    """Integrate x'' = -x - damping * x' and return (damping, energy left)."""
    x, v, dt = 1.0, 0.0, 1e-3
    for _ in range(steps):
        v += (-x - damping * v) * dt
        x += v * dt
    return damping, 0.5 * (x * x + v * v)


def best(results: list[tuple[float, float]]) -> tuple[float, float]:
    return min(results, key=lambda pair: abs(pair[1] - 0.25))


def main() -> None:
    dampings = [i / 20 for i in range(20)]
    with hpcfutures.Executor() as ex:
        futures = [ex.submit(damped_oscillator, d) for d in dampings]
        for future in cf.as_completed(futures):
            _damping, energy = future.result()
            assert math.isfinite(energy)
        # futures as arguments: the reduction runs on a worker, and the
        # results travel worker to worker, not through this process
        closest = ex.submit(best, futures).result()
    print(f"swept {len(dampings)} dampings; energy closest to 0.25 at damping "
          f"{closest[0]:.2f} (energy {closest[1]:.4f})")


if __name__ == "__main__":
    main()
