"""Importing hpcfutures changes nothing in Dask: no attribute of any ``distributed`` or
``dask`` module or class is replaced by an import.  Changes to Dask's behaviour are made
on the objects hpcfutures starts, when it starts them (see docs/architecture.rst)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import ROOT

PROBE = r"""
import importlib, json, pkgutil, sys, types

import dask, distributed, distributed.scheduler, distributed.worker, distributed.client

def snapshot():
    seen = {}
    for name, module in list(sys.modules.items()):
        top = name.split(".")[0]
        if not isinstance(module, types.ModuleType) or top not in ("dask", "distributed"):
            continue
        for attr, value in list(vars(module).items()):
            seen[f"{name}.{attr}"] = id(value)
            if isinstance(value, type) and value.__module__ == name:
                for key, member in list(vars(value).items()):
                    seen[f"{name}.{attr}.{key}"] = id(member)
    return seen

before = snapshot()
import hpcfutures
skipped = []
for info in pkgutil.walk_packages(hpcfutures.__path__, "hpcfutures."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as err:  # an optional dependency (cubed) absent here
        skipped.append(f"{info.name}: {err}")
after = snapshot()
changed = sorted(key for key, value in before.items() if key in after and after[key] != value)
print(json.dumps({"changed": changed, "skipped": skipped}))
"""


def test_importing_every_module_of_hpcfutures_changes_no_attribute_of_dask():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert all("cubed" in line for line in found["skipped"]), found["skipped"]
    assert found["changed"] == [], (
        "importing hpcfutures replaced these attributes of Dask for every user of the "
        f"process: {found['changed']}")
