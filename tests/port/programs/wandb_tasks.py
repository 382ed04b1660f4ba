"""W&B from tasks, as Flyte 2's W&B plugin examples use it, offline: ``@wandb_init`` on a parent
and its children (a child shares its caller's run under ``run_mode="auto"``, gets its own with
``"new"`` from the decorator or from a ``wandb_config`` block), a trace that logs to its task's
run, a task without ``@wandb_init`` that has none, ``wandb.init`` by hand with an id built from
``ctx().action`` and a ``Wandb`` link given by ``override(links=)``; and what needs the W&B
cloud (a sweep, ``download_logs=True``) refused in one line, each caught by the parent.

Run with WANDB_MODE=offline and WANDB_DIR set: the test reads the offline runs back.
"""

import wandb

import shoal as flyte
from shoal.plugins.wandb import (
    Wandb,
    get_wandb_run,
    get_wandb_sweep_id,
    wandb_config,
    wandb_init,
    wandb_sweep,
    wandb_sweep_config,
)

env = flyte.TaskEnvironment(
    name="port_wandb",
    secrets=[flyte.Secret(key="wandb_api_key", as_env_var="WANDB_API_KEY")],
)


@flyte.trace
async def traced_step(x: int) -> str:
    run = get_wandb_run()  # the calling task's run: traces take no @wandb_init
    run.log({"traced": x})
    return run.id


@wandb_init
@env.task
def grandchild(x: int) -> str:
    run = get_wandb_run()
    run.log({"grandchild": x})
    return run.id


@wandb_init(run_mode="new")
@env.task
async def child_new(x: int) -> str:
    run = get_wandb_run()
    run.log({"child_new": x})
    shared = await grandchild.aio(x + 1)  # auto: shares this child's run
    return f"{run.id} {run.name} {','.join(run.tags)} grandchild={shared}"


@wandb_init
@env.task
async def child_auto(x: int) -> str:
    run = get_wandb_run()
    run.log({"child_auto": x})
    return f"{run.id} lr={run.config.get('learning_rate')}"


@env.task
async def no_wandb() -> int:
    return -1 if get_wandb_run() is None else 1


@env.task
async def by_hand(lr: float) -> str:
    ctx = flyte.ctx()
    run = wandb.init(project="port-wandb", id=f"{ctx.action.run_name}-{ctx.action.name}",
                     config={"learning_rate": lr}, tags=["by-hand"], reinit="create_new")
    run.log({"by_hand": lr})
    run.finish()
    return run.id


@wandb_sweep
@env.task
async def sweep() -> str:
    return str(get_wandb_sweep_id())


@wandb_init(download_logs=True)
@env.task
async def downloads() -> str:
    return get_wandb_run().id


async def refused(call: object) -> str:
    try:
        await call  # type: ignore[misc]
    except Exception as e:
        return str(e).splitlines()[0]
    return "ran"


@wandb_init
@env.task
async def parent() -> dict[str, str]:
    run = get_wandb_run()
    run.log({"parent": 100})
    with wandb_config(name="child-run", tags=["child-task"]):
        new = await child_new(5)
    shared = await child_auto(10)
    with wandb_config(config={"learning_rate": 0.01}, run_mode="new"):
        own = await child_auto(20)
    traced = await traced_step(15)
    none = await no_wandb()
    linked = by_hand.override(links=(Wandb(project="port-wandb", entity="me", id="x"),))
    manual = await linked(0.5)
    with wandb_sweep_config(method="random", parameters={"lr": {"values": [1, 2]}}):
        sweep_says = await refused(sweep())
    download_says = await refused(downloads())
    return {"parent": run.id, "new": new, "shared": shared, "own": own, "traced": traced,
            "none": str(none), "manual": manual, "sweep": sweep_says,
            "download": download_says}


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.with_runcontext(
        custom_context=wandb_config(project="port-wandb", tags=["parent"])).run(parent)
    run.wait()
    print(f"RESULT name {run.name}")
    outputs = run.outputs()
    for key, value in (outputs[0] if isinstance(outputs, tuple) else outputs).items():
        print(f"RESULT {key} {value}")
