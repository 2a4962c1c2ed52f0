import pytest

from approvals.operations import logs


@pytest.fixture(autouse=True)
def _empty_log_context():
    """Services called directly by other tests (outside a request or a task) leave their preview bound
    to this thread's log context; these tests start from none."""
    token = logs.replace({})
    yield
    logs.reset(token)
