"""The initializer idiom: a global of the script, set by the initializer, read by the calls
(through a helper of the same script), as in a ProcessPoolExecutor worker."""

import concurrent.futures as cf
import sys

import hpcfutures

model = None


def init(value):
    global model
    model = value


def helper():
    return model


def predict(x):
    return helper(), x


if __name__ == "__main__":
    with cf.ProcessPoolExecutor(2, initializer=init, initargs=(42,)) as pool:
        print("POOL", [m for m, _ in pool.map(predict, range(4))], flush=True)
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else None
    with hpcfutures.Executor(workers, initializer=init, initargs=(42,)) as ex:
        mapped = [m for m, _ in ex.map(predict, range(4))]
        submitted = [ex.submit(predict, i).result()[0] for i in range(4)]
        print("OURS", mapped, submitted, flush=True)
