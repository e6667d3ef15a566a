"""Settings are resolved once: keyword > HPCFUTURES_* > Dask config > default."""

import pytest

from hpcfutures import ConfigurationError
from hpcfutures._support import option_sources
from hpcfutures._support.config import Settings, resolve_option, resolve_settings
from hpcfutures._support.options import BY_NAME, NAMES, OPTIONS
from hpcfutures._support.values import to_memory, to_seconds


def test_defaults():
    settings = resolve_settings(environ={}, dask_config={})
    assert settings.timeout == 60.0
    assert settings.exit_when_done is True
    assert settings.scheduler_in_client is False
    assert set(settings.sources.values()) == {"default"}


def test_precedence_keyword_env_dask_default():
    env = {"HPCFUTURES_TIMEOUT": "30", "HPCFUTURES_INTERFACE": "ib0"}
    dask = {"timeout": 10, "interface": "eth0", "max_workers": 3}
    settings = resolve_settings({"timeout": 5}, environ=env, dask_config=dask)
    assert settings.timeout == 5 and settings.sources["timeout"] == "keyword argument"
    assert settings.interface == "ib0"
    assert settings.sources["interface"] == "environment variable HPCFUTURES_INTERFACE"
    assert settings.max_workers == 3
    assert settings.sources["max_workers"] == "dask config hpcfutures.max-workers"


def test_dask_yaml_section_is_read(monkeypatch):
    import dask.config

    with dask.config.set({"hpcfutures": {"scheduler-in-client": True}}):
        settings = resolve_settings(environ={})
    assert settings.scheduler_in_client is True


@pytest.mark.parametrize("env, fragment", [
    ({"HPCFUTURES_TIMEOUT": "soon"}, "HPCFUTURES_TIMEOUT"),
    ({"HPCFUTURES_TIMEOUT": "-1"}, "greater than 0"),
    ({"HPCFUTURES_SCHEDULER_IN_CLIENT": "maybe"}, "boolean"),
    ({"HPCFUTURES_MAX_WORKERS": "0"}, "greater than 0"),
])
def test_bad_values_name_the_variable_and_the_problem(env, fragment):
    with pytest.raises(ConfigurationError, match=fragment):
        resolve_settings(environ=env, dask_config={})


def test_unknown_keyword_is_refused():
    with pytest.raises(ConfigurationError, match="unknown option"):
        resolve_settings({"nonsense": 1}, environ={}, dask_config={})


def test_every_setting_is_documented():
    fields = {f for f in Settings.__dataclass_fields__ if f != "sources"}
    assert fields == set(NAMES)
    assert all(option.doc for option in OPTIONS)


def test_executor_rejects_bad_max_workers():
    import hpcfutures

    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        hpcfutures.Executor(0)


# ------------------------------------------------------------ one declaration
def test_names_are_derived_from_the_declaration():
    option = BY_NAME["release_idle_after"]
    assert option.env_name == "HPCFUTURES_RELEASE_IDLE_AFTER"
    assert option.config_key == "hpcfutures.release-idle-after"
    assert len(set(NAMES)) == len(NAMES)


def test_generated_source_is_up_to_date():
    stale = option_sources.stale_files()
    assert not stale, (f"{', '.join(stale)} out of date with hpcfutures/_support/options.py: "
                       f"run {option_sources.COMMAND}")


def test_the_generator_finds_what_is_out_of_date_and_rewrites_it(tmp_path):
    for target in option_sources.TARGETS:
        source = option_sources.ROOT / target.path
        copy = tmp_path / target.path
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(source.read_text())
    executor = tmp_path / "hpcfutures/_facade/executor.py"
    text = executor.read_text()
    executor.write_text(text.replace("        timeout: float | str | None = None,\n", "", 1)
                        .replace("Environment: ``HPCFUTURES_TIMEOUT``", "", 1))
    assert option_sources.stale_files(root=tmp_path) == ["hpcfutures/_facade/executor.py"]
    assert option_sources.stale_files(write=True, root=tmp_path) == [
        "hpcfutures/_facade/executor.py"]
    assert executor.read_text() == text
    assert option_sources.stale_files(root=tmp_path) == []


def test_executor_signature_is_real_and_matches_the_declarations():
    import inspect

    import hpcfutures

    parameters = inspect.signature(hpcfutures.Executor.__init__).parameters
    assert [name for name in parameters if name != "self"] == list(NAMES)
    assert parameters["max_workers"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters["timeout"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["timeout"].annotation == "float | str | None"
    for name in NAMES:
        assert f"``{BY_NAME[name].env_name}``" in hpcfutures.Executor.__doc__


def test_connect_and_stop_take_the_timeout_option():
    import inspect

    import hpcfutures

    for function in (hpcfutures.connect, hpcfutures.stop, hpcfutures.ConnectedExecutor):
        assert "timeout" in inspect.signature(function).parameters


# ---------------------------------------------------------------- durations
@pytest.mark.parametrize("raw, seconds", [
    (90, 90.0), ("90", 90.0), ("90s", 90.0), ("5min", 300.0), ("1h", 3600.0),
    ("1.5 h", 5400.0), ("250ms", 0.25), (2.5, 2.5),
])
def test_durations_read_like_dask(raw, seconds):
    assert to_seconds(raw) == seconds
    settings = resolve_settings(environ={"HPCFUTURES_TIMEOUT": str(raw)},
                                dask_config={"array_timeout": raw})
    assert settings.timeout == seconds and settings.array_timeout == seconds
    assert resolve_settings({"release_idle_after": raw}, environ={},
                            dask_config={}).release_idle_after == seconds


@pytest.mark.parametrize("explicit, env, config, fragments", [
    ({"timeout": "soon"}, {}, {},
     ["'timeout'", "keyword argument", "'soon'", "timeout='5min'"]),
    ({}, {"HPCFUTURES_ARRAY_TIMEOUT": "5 parsecs"}, {},
     ["'array_timeout'", "environment variable HPCFUTURES_ARRAY_TIMEOUT",
      "HPCFUTURES_ARRAY_TIMEOUT=5min"]),
    ({}, {}, {"release_idle_after": "min"},
     ["'release_idle_after'", "dask config hpcfutures.release-idle-after",
      "'release-idle-after: 5min'"]),
    ({"timeout": "-5s"}, {}, {}, ["greater than 0"]),
    ({"timeout": True}, {}, {}, ["duration such as '90s'"]),
])
def test_a_bad_duration_names_the_option_its_source_and_an_example(explicit, env, config,
                                                                    fragments):
    with pytest.raises(ConfigurationError) as caught:
        resolve_settings(explicit, environ=env, dask_config=config)
    for fragment in fragments:
        assert fragment in str(caught.value)


# -------------------------------------------------------------------- sizes
@pytest.mark.parametrize("raw, limit", [
    ("4GiB", 4 * 2**30), ("500 MB", 500_000_000), (2**30, 2**30), ("1000000", 1_000_000),
    ("auto", "auto"), (0.5, 0.5), ("0.25", 0.25), (0, None), ("0", None), ("", None),
])
def test_sizes_are_parsed_when_settings_are_resolved(raw, limit):
    assert to_memory(raw) == limit


@pytest.mark.parametrize("raw", ["lots", "4 parsecs", "-1GiB", "inf", True])
def test_a_bad_size_fails_on_the_client_naming_the_variable(raw):
    env = {"HPCFUTURES_MEMORY_LIMIT": str(raw)}
    with pytest.raises(ConfigurationError,
                       match=r"'memory_limit' from environment variable HPCFUTURES_MEMORY_LIMIT"
                             r".*HPCFUTURES_MEMORY_LIMIT=4GiB"):
        resolve_settings(environ=env, dask_config={})


def test_a_bad_size_fails_in_the_constructor_before_any_process_starts(monkeypatch):
    import hpcfutures

    monkeypatch.setenv("HPCFUTURES_MEMORY_LIMIT", "lots")
    with pytest.raises(ConfigurationError, match="HPCFUTURES_MEMORY_LIMIT"):
        hpcfutures.Executor()


def test_a_worker_receives_bytes_for_a_size():
    settings = resolve_settings({"memory_limit": "2GiB"}, environ={}, dask_config={})
    assert settings.memory_limit == 2 * 2**30


# ------------------------------------------------------------------ others
def test_counts_must_be_whole_numbers():
    with pytest.raises(ConfigurationError, match="whole number"):
        resolve_settings({"threads_per_worker": 2.5}, environ={}, dask_config={})
    assert resolve_settings(environ={"HPCFUTURES_MIN_WORKERS": "3"},
                            dask_config={}).min_workers == 3


def test_one_option_can_be_resolved_alone():
    assert resolve_option("scheduler_in_client", {"HPCFUTURES_SCHEDULER_IN_CLIENT": "yes"},
                          {}) is True
    assert resolve_option("scheduler_in_client", {}, {"scheduler_in_client": True}) is True
    assert resolve_option("scheduler_in_client", {}, {}) is False


def test_version_comes_from_the_package_metadata():
    from importlib.metadata import version

    import hpcfutures

    assert hpcfutures.__version__ == version("hpcfutures")


def test_a_mistyped_variable_is_named_with_the_one_meant():
    from hpcfutures._support.variables import unknown_variables

    environ = {"HPCFUTURES_TIMEOUTT": "3", "HPCFUTURES_MAXWORKERS": "1",
               "HPCFUTURES_TIMEOUT": "5", "HPCFUTURES_RANK": "1", "HPCFUTURES_XYZZY": "1",
               "HPCFUTURES_TEST_MARKER": "abc", "OTHER_TIMEOUTT": "1"}
    assert unknown_variables(environ) == {"HPCFUTURES_MAXWORKERS": "HPCFUTURES_MAX_WORKERS",
                                          "HPCFUTURES_TIMEOUTT": "HPCFUTURES_TIMEOUT",
                                          "HPCFUTURES_XYZZY": None}


def test_an_unknown_variable_is_warned_about_once_and_listed_by_info(tmp_path):
    """A user's script and ``hpcfutures info``, as a user runs them."""
    import subprocess
    import sys

    from helpers import ROOT

    env = {**__import__("os").environ, "HPCFUTURES_TIMEOUTT": "3",
           "PYTHONPATH": str(ROOT)}
    script = ("import hpcfutures\n"
              "for _ in range(2):\n"
              "    with hpcfutures.Executor(1) as ex:\n"
              "        print(ex.submit(abs, -4).result())\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["4", "4"], done
    warned = [line for line in done.stderr.splitlines() if "HPCFUTURES_TIMEOUTT" in line]
    assert len(warned) == 1 and "did you mean HPCFUTURES_TIMEOUT?" in warned[0], done.stderr
    info = subprocess.run([sys.executable, "-m", "hpcfutures", "info"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert "unknown variables:" in info.stdout, info
    assert "HPCFUTURES_TIMEOUTT is set but hpcfutures has no such variable" in info.stdout
