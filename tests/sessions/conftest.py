from tests.sessions.support import catalog, demo_tier, session  # noqa: F401
