"""``shoal.plugins.echo``: what Flyte 2 code imports as ``flyteplugins.echo``.

``Echo`` (see `shoal.plugins.echo.task`): ``TaskEnvironment(plugin_config=Echo())`` makes each
call of the environment's tasks return its input without running the body or starting a
process, on every engine.
"""

from shoal.plugins.echo.task import Echo

__all__ = ["Echo"]
