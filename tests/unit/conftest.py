"""Fixtures that several unit-test modules share. pytest offers a conftest's fixtures
to every module beside it, so a module takes them as arguments without importing them
(an import would shadow the argument: pyflakes' F811). Each is defined beside the
tests it was written for."""

from .chart_values import get_config, z2jh  # noqa: F401 - fixtures
from .test_job_cli import service  # noqa: F401 - a fixture
from .test_labext_server import prometheus, server  # noqa: F401 - fixtures
from .test_usage_page import spec  # noqa: F401 - a fixture
