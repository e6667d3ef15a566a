"""Settings are resolved once: keyword > HPCFUTURES_* > Dask config > default."""

import pytest

from hpcfutures import ConfigurationError
from hpcfutures._support.config import SETTINGS_DOC, Settings, resolve_settings


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
    assert settings.sources["max_workers"] == "dask config hpcfutures.max_workers"


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
    assert fields == set(SETTINGS_DOC)
    assert all(SETTINGS_DOC.values())


def test_executor_rejects_bad_max_workers():
    import hpcfutures

    with pytest.raises(ValueError, match="max_workers must be greater than 0"):
        hpcfutures.Executor(0)
