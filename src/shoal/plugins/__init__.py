"""Shoal's plugins: ``shoal.plugins.<name>``, what Flyte 2 code imports as ``flyteplugins.<name>``.

A plugin here is its public, Flyte-shaped surface only: config dataclasses and decorators that
a user passes to ``TaskEnvironment`` or ``@env.task``, checked when they are built. A module
under ``shoal/plugins/`` imports only Shoal's public API (``shoal``, ``shoal.errors``,
``shoal.io``, ``shoal.clustered``), ``shoal._api`` and ``shoal._spec``, and other plugins; never
an engine, the runtime, the store or ``shoal._plugins`` (tests/unit/test_layers.py).

What a plugin does on an engine (an elastic gang on the local engine, a Ray head on
Kubernetes, a W&B run in each rank) lives in ``shoal/_plugins/<name>/``: one engine-neutral
part and one module per engine that needs one, registered in ``shoal._plugins`` under the
plugin's config type. Engines find them there by the config they are given; they never import
``shoal.plugins``, so a plugin is a capability of every engine, not a fork of one.

The plugins: ``pytorch`` (``Elastic``, ``RunPolicy``: elastic torch gangs), ``ray``
(``RayJobConfig``: a Ray cluster for each call, or one shared by an environment's calls),
``wandb`` (``@wandb_init``: a W&B run around the body on every rank, by Flyte's table; its
decorators add a scope config to the task, whose part is in ``shoal._plugins.wandb``) and
``nsight`` (``nsys_profile``: a task's calls profiled by Nsight Systems, on Shoal's own nsys
support) and ``echo`` (``Echo``: each call returns its input, answered by the driver without a
process; like ``shoal.extras.Sleep``, it has no engine-side part: see
``shoal._driver.processless``).
"""
