"""`from flyte.io import DataFrame` and pandas frames as task types: a frame wrapped in a task,
opened as pandas in another; a plain `pd.DataFrame` passed between tasks."""

import pandas as pd

import shoal as flyte
from shoal.io import DataFrame

env = flyte.TaskEnvironment(name="port_dataframe")


@env.task
async def make_table(n: int) -> DataFrame:
    return DataFrame.from_df(pd.DataFrame({"x": list(range(n)), "y": [i * i for i in range(n)]}))


@env.task
async def total_y(table: DataFrame) -> int:
    df = await table.open(pd.DataFrame).all()
    return int(df["y"].sum())


@env.task
async def as_pandas(n: int) -> pd.DataFrame:
    return pd.DataFrame({"x": list(range(n))})


@env.task
async def count_even(df: pd.DataFrame) -> int:
    return int((df["x"] % 2 == 0).sum())


@env.task
async def pipeline(n: int) -> list[int]:
    table = await make_table(n)
    frame = await as_pandas(n)
    return [await total_y(table), await count_even(frame)]


if __name__ == "__main__":
    flyte.init_from_config()
    run = flyte.run(pipeline, n=5)
    run.wait()
    print(f"RESULT outputs {run.outputs()}")
